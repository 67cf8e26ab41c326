"""The scheduler daemon: wiring and lifecycle of the informer path and the scheduling path over one core.

As kube-scheduler's `scheduler.go`: the phases live in their own modules
(`eventhandlers.py`: events into the cache and the queue; `schedule_one.py`:
one scheduling cycle and the loop; `preemption.py`, `gang.py`,
`reservation.py`: PostFilter, gangs, starvation reservations), built over one
cache as the scheduling core (`core.py`). This module gives the core its
inputs and outputs, the daemon's way: informers (`watches.py`) feed the event
handlers, and the core's outbox goes to the API server (`binder.py`: bindings,
asynchronously; `reports.py`: conditions and events; `evictions.py`:
preemption's deletions). It starts and stops them, serves health and metrics,
and applies config reloads (`config_reload.py`) between two cycles, whole.

With leader election (`leader.py`; `ai-scheduler run` with `leaderElection`
enabled, two replicas in deploy/), both replicas start their informers at once
and keep cache and queue current, so a standby is warm and ready (/readyz 200):
once synced, it campaigns for the Lease. Only the leader runs what writes: the
scheduling loop (and so bindings, events, evictions), housekeeping, gang status
and forecasts. A standby never assumes a pod, so a new leader's cache holds no
assumption it did not make; what the old leader bound comes in on the watch,
and a binding of a pod that is already bound is refused by the API server
(409), so nothing is bound twice. A lost Lease stops scheduling at once and
ends `run()` with `lost_lease` set, for the process to exit (1), as
kube-scheduler does; SIGTERM stops popping, waits for the bindings in flight,
then releases the Lease so that the standby takes over at once.

Everything runs on one event loop. Watch handlers and scheduling cycles are
synchronous between awaits, so a cycle always sees a consistent cache; the
loop yields after every pod so that watch events and binding replies keep
flowing while a long queue drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import math
import signal
from collections.abc import Coroutine
from typing import Any

from ai_scheduler.accounting.budgets import with_budgets
from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import AccountingSettings, Config, LeaderElectionSettings
from ai_scheduler.config.delegated import merge
from ai_scheduler.config.elasticquota import ElasticQuotas, with_elastic_quotas
from ai_scheduler.daemon.accounting import Accounting
from ai_scheduler.daemon.accounting import report as usage_report
from ai_scheduler.daemon.binder import Binder
from ai_scheduler.daemon.config_reload import ConfigReload
from ai_scheduler.daemon.domains import DomainObjects
from ai_scheduler.daemon.evictions import KubeEvictions
from ai_scheduler.daemon.gang_status import GangStatusWriter
from ai_scheduler.daemon.health import ApiMonitor, HealthServer
from ai_scheduler.daemon.informer import Informer
from ai_scheduler.daemon.leader import LeaderElector, Role, label_own_pod
from ai_scheduler.daemon.quotas import QuotaObjects
from ai_scheduler.daemon.reports import PodReports
from ai_scheduler.daemon.tasks import TaskController
from ai_scheduler.daemon.watches import Watches
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue.scheduling_queue import ACTIVE
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.framework.runtime import Framework
from ai_scheduler.scheduler.heap import collect_forever, collection_due, freeze_survivors, trim_forever
from ai_scheduler.scheduler.metrics import Metrics, StateCollector
from ai_scheduler.scheduler.outbox import Outbox
from ai_scheduler.visibility.resources import (
    ExpectedStarts,
    Forecaster,
    RecentDecisions,
    decision_items,
    gpu_node_items,
    pending_pod_items,
    quota_items,
)
from ai_scheduler.visibility.server import (
    SubjectAccessReviews,
    VisibilityServer,
    VisibilitySource,
    trust_front_proxy,
)

HOUSEKEEPING_SECONDS = 1.0
FORECAST_POLL_SECONDS = 1.0  # how often the forecast loop looks whether one is due
FORECAST_HORIZON_SECONDS = 7 * 86_400.0  # a pod not started within it has no expected start
FORECAST_SHARE_FACTOR = 5.0  # the next forecast waits at least this many times the last one's duration


class Scheduler:
    """The daemon: the core with informers for input and the API server for output, and their helpers."""

    def __init__(
        self,
        config: Config,
        client: KubeClient,
        logger: JsonLogger,
        *,
        config_path: str | None = None,
        serve_http: bool = True,
        seed: int | None = None,
        config_poll_seconds: float = 2.0,
        forecaster: Forecaster | None = None,
        leader_election: LeaderElectionSettings | None = None,
        accounting: AccountingSettings | None = None,
    ) -> None:
        """`leader_election` (enabled): schedule only while holding its Lease; without it (tests, the
        demo) the scheduler leads from its first sync. `accounting`: where the leader writes what pods
        used and fair share's usage (daemon/accounting.py); None: nowhere (tests, the demo)."""
        self.client = client
        self.log = logger
        self.serve_http = serve_http
        settings = config.scheduling
        metrics = self.metrics = Metrics()
        self.reload = ConfigReload(
            config, self._reconfigure, logger, metrics, path=config_path, poll_seconds=config_poll_seconds
        )
        self.feedback = PodReports(client, logger, metrics, component=config.scheduler_name,
                                 repeat_window=settings.event_repeat_seconds)

        def outbox(core: SchedulerCore) -> Outbox:
            self.binder = Binder(client, core.cache, core.queue, self.feedback, metrics, logger,
                                 concurrency=settings.bind_concurrency)
            self.evictions = KubeEvictions(client, self.feedback, logger)
            return Outbox(self.binder, self.feedback, self.evictions)

        self.decisions = RecentDecisions(logger)  # the core's logger, keeping its last decisions
        core = self.core = SchedulerCore(config, self.decisions, metrics, outbox, seed=seed)
        # The parts tests and tools look at, by their usual names.
        self.cache, self.queue, self.gangs, self.tenancy = core.cache, core.queue, core.gangs, core.tenancy
        self.cycle, self.reserver, self.preemptor = core.cycle, core.reserver, core.preemptor
        self.ready = core.ready
        self.handlers, self.priorities = core.handlers, core.priorities
        self.gang_scheduler = core.gang_scheduler
        self.watches = Watches(client, core.handlers, logger)
        # Off (database "") unless given: the settings come from `run_scheduler`, as the leader election's.
        self.accounting = Accounting(accounting or AccountingSettings(database=""), core, logger)
        self.watches.pod_observers.append(self.accounting)
        self.accounting.budgets_changed = self._budgets_changed
        self.informers = self.watches.build(config)
        # Group quotas from ElasticQuota objects, under the config file's (config/elasticquota.py).
        self.elastic_quotas = ElasticQuotas()
        self.watches.watch_elastic_quotas(self._on_elastic_quota, self._on_elastic_quotas)
        # Quotas group administrators delegate (GroupQuota, UserQuota: config/delegated.py, daemon/quotas.py).
        self.quota_objects = QuotaObjects(client, logger, metrics, self._delegated_quotas_changed)
        self.watches.add_informers(self.quota_objects.informers(self.watches.informer))
        # Logical domains (Domain objects: cache/domains.py, scheduler/domains.py, daemon/domains.py).
        self.domain_objects = DomainObjects(client, core, logger, metrics)
        self.watches.add_informers(self.domain_objects.informers(self.watches.informer))
        # Tasks (tasks.ai-scheduler.io), run through their whole life by the leader (daemon/tasks.py).
        self.task_controller = TaskController(client, core, logger, metrics, lambda: self.expected,
                                              lambda: self.config)
        self.watches.add_informers(self.task_controller.informers(self.watches.informer))
        metrics.watch_state(StateCollector(core.queue.counts_by_queue, core.cache_sizes,
                                           lambda: self.binder.in_flight, core.gpu_allocation,
                                           core.queue.pending_counts, core.tenancy.quotas))
        self.stopped = asyncio.Event()
        self.http: HealthServer | None = None
        self.visibility: VisibilityServer | None = None  # the visibility API, when server.visibilityEnabled
        self.monitor: ApiMonitor | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._loop_task: asyncio.Task[None] | None = None
        self.priority_interval = settings.priority_refresh_seconds  # the period of the refresh loop
        self.forecaster = forecaster
        self.expected = ExpectedStarts()  # the last forecast's expected starts
        self.elector = (LeaderElector(client, leader_election, logger, on_change=self._role_changed)
                        if leader_election is not None and leader_election.enabled else None)
        self._election: asyncio.Task[None] | None = None
        self.lost_lease = False  # set when the Lease was lost: the process must exit

    @property
    def frameworks(self) -> dict[str, Framework]:
        return self.core.frameworks

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        """Run until stop(); the caller owns the client."""
        if self.serve_http:
            self.http = HealthServer(live=self._live, ready=self._ready, metrics=self.metrics.render)
            port = await self.http.start(self.config.server.bind_address, self.config.server.port)
            self.log.info("http.listening", port=port)
            if self.config.server.visibility_enabled:
                await self._start_visibility()
        self._apply_api_settings()
        await self.accounting.open()
        monitor = self.monitor = ApiMonitor(
            self.client, self.log, self.informers.values,
            settings=self.core.settings,
        )
        self._spawn(monitor.run(), "api-monitor")
        self._spawn(trim_forever(), "heap-trim")  # freed memory back to the system (heap.py)
        for informer in self.informers.values():
            self._start_informer(informer)
        self.watches.start_added(self._start_informer)
        watcher = self.reload.watch()
        if watcher is not None:
            self._spawn(watcher.run(), "config-watcher")
        self.log.info("scheduler.starting", profiles=sorted(self.frameworks),
                      bind_concurrency=self.config.scheduling.bind_concurrency)
        try:
            synced = asyncio.gather(*(inf.synced.wait() for inf in self.informers.values()))
            stop = asyncio.ensure_future(self.stopped.wait())
            waiting: list[asyncio.Future[Any]] = [synced, stop]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not self.stopped.is_set():
                self.core.start()
                # The first lists are in: what is alive now is the cache, kept out of the collector's walks.
                frozen = freeze_survivors()
                self._spawn(collect_forever(lambda: self.queue.counts()[ACTIVE], self._collected), "gc")
                self.log.info("scheduler.ready", nodes=self.cache.node_count, pending=len(self.queue),
                              standby=self.elector is not None, gc_freeze_ms=round(frozen * 1000, 1))
                if self.elector is None:
                    self._lead()
                else:  # synced: campaign (kube-scheduler too waits for its caches first)
                    self._election = asyncio.create_task(self._campaign(), name="leader-election")
            self._spawn(self._refresh_priorities(), "priorities")
            await stop
            synced.cancel()
        finally:
            await self._shutdown()

    @property
    def forecast_interval(self) -> float:
        """`prediction.forecastSeconds` in force (0: no forecasts)."""
        return self.core.settings.current.prediction.forecast_seconds

    def _collected(self, seconds: float) -> None:
        if self.log.enabled("debug"):
            self.log.debug("gc.collected", seconds=round(seconds, 3), frozen=gc.get_freeze_count())

    def _lead(self) -> None:
        """Start what only the leader runs: everything that writes to the API server."""
        self.metrics.leader.set(1)
        # Fair share's usage as the last leader left it, before any cycle; then the checkpoints.
        self.accounting.restore()
        self._spawn(self.accounting.run(), "accounting")
        self._spawn(label_own_pod(self.client, Role.LEADER, self.log), "role-label")
        self._loop_task = asyncio.create_task(self.cycle.run(), name="scheduling-loop")
        self._spawn(self._housekeeping(), "housekeeping")
        self._spawn(self._forecasts(), "forecasts")
        gang_status = GangStatusWriter(self.client, self.gangs, self.log, self.metrics)
        self._spawn(gang_status.run(), "gang-status")
        self._spawn(self.task_controller.run(), "tasks")
        self._spawn(self.quota_objects.run(), "quota-status")
        self._spawn(self.domain_objects.run(), "domain-status")

    async def _campaign(self) -> None:
        assert self.elector is not None
        await label_own_pod(self.client, Role.STANDBY, self.log)
        await self.elector.run()  # returns only when the Lease was lost (see _role_changed)

    def _role_changed(self, role: Role) -> None:
        """The elector's news: lead now, or stop at once (lost: no binding may leave from now on)."""
        if role is Role.LEADER and not self.stopped.is_set():
            self._lead()
            return
        self.metrics.leader.set(0)
        if role is Role.LOST:
            self.lost_lease = True
            self.queue.close()
            if self._loop_task is not None:
                self._loop_task.cancel()
            self.stop()

    def _spawn(self, job: Coroutine[Any, Any, Any], name: str) -> None:
        self._tasks.append(asyncio.create_task(job, name=name))

    def _start_informer(self, informer: Informer[Any]) -> None:
        self._spawn(informer.run(), f"informer-{informer.resource}")

    def stop(self) -> None:
        self.stopped.set()

    async def _shutdown(self) -> None:
        """Stop popping, finish the bindings and evictions in flight (cancel them at once when the Lease
        was lost: another replica may lead already), release the Lease, stop the rest."""
        self.queue.close()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        grace = 0.0 if self.lost_lease else 5.0
        await self.binder.drain(timeout=grace)
        await self.evictions.drain(timeout=grace)
        if self._election is not None:
            self._election.cancel()
            await asyncio.gather(self._election, return_exceptions=True)
        if self.elector is not None and not self.lost_lease:
            await self.elector.release()
        self.metrics.leader.set(0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.feedback.close()
        await self.accounting.close()
        if self.http is not None:
            await self.http.stop()
        if self.visibility is not None:
            await self.visibility.stop()
        self.log.info("scheduler.stopped")

    async def _start_visibility(self) -> None:
        """The visibility API (visibility/server.py): HTTPS for the aggregation layer, over the core state."""
        source = VisibilitySource(
            pending=lambda: pending_pod_items(self.core, self.expected),
            quotas=lambda: quota_items(self.tenancy),
            gpus=lambda: gpu_node_items(self.core),
            decisions=lambda: decision_items(self.decisions),
            usage=lambda since, until, by, step: usage_report(self.accounting.store, since, until, by, step),
        )
        authorize = SubjectAccessReviews(self.client, self.log)
        server = self.visibility = VisibilityServer(source, authorize, self.log)
        settings = self.config.server
        port = await server.start(settings.bind_address, settings.visibility_port,
                                  settings.visibility_cert_file, settings.visibility_key_file)
        self._spawn(trust_front_proxy(server, self.client, self.log), "visibility-front-proxy")
        self.log.info("visibility.listening", port=port)

    def _live(self) -> str:
        """Why /healthz fails ("" when it does not): the scheduling loop stopped, or the API server has been
        out of reach long enough that a restart is wanted (health.ApiMonitor)."""
        if self._loop_task is not None and self._loop_task.done():  # a standby has none
            return "scheduling loop stopped"
        return self.monitor.live_problem() if self.monitor is not None else ""

    def _ready(self) -> str:
        """Why /readyz fails ("" when it does not): no first sync yet, or the API server out of reach. A
        synced standby is ready: it takes over in a moment, with a warm cache."""
        if not self.ready.is_set():
            return "informers not synced"
        return self.monitor.ready_problem() if self.monitor is not None else ""

    def _apply_api_settings(self) -> None:
        """The request timeout, for every request from now on, and the watches' idle bound: when that
        changed, the open watches are ended and reopened from where they were (no relist), so that it
        holds at once rather than from the informers' next watch, minutes later."""
        settings = self.config.scheduling
        self.client.request_timeout = settings.api_request_timeout_seconds
        idle_changed = False
        for informer in self.informers.values():
            idle_changed |= informer.watch_idle != settings.watch_idle_seconds
            informer.watch_idle = settings.watch_idle_seconds
        if idle_changed:
            self.client.end_watches()

    # ------------------------------------------------------------------ periodic work
    async def _refresh_priorities(self) -> None:
        """Priorities move with waiting time and usage: recompute them, re-sort only what moved. A reload
        (which refreshes them itself) cuts the wait short, so that a new period counts from then."""
        while True:
            self.priority_interval = self.config.scheduling.priority_refresh_seconds
            self.reload.reconfigured.clear()
            try:
                await asyncio.wait_for(self.reload.reconfigured.wait(), self.priority_interval)
                continue
            except TimeoutError:
                pass
            moved = self.core.refresh_priorities()
            if moved and self.log.enabled("debug"):
                self.log.debug("priorities.refreshed", moved=moved, pending=len(self.queue))

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            self.core.housekeeping()

    async def _forecasts(self) -> None:
        """Every `prediction.forecastSeconds`, while pods wait: simulate the core from a copy-on-write
        snapshot in a forked child (visibility.Forecaster, tracesim/forecast.py), keep the expected starts.

        A forecast that is due waits while the scheduling loop still has pods to try (the active queue),
        for at most one more interval: those pods learn their fate within moments, and a simulation of a
        queue that is draining competes with the draining for the cores and is stale once it is done (at
        start, with 10,000 pods waiting, it took about an eighth of the machine). Pods waiting for room
        (unschedulable, in backoff) are what a forecast is for, and the loop is idle while only they wait."""
        last = -math.inf
        due_since: float | None = None
        while True:
            await asyncio.sleep(FORECAST_POLL_SECONDS)
            interval, loop = self.forecast_interval, asyncio.get_running_loop()
            # A forecast's simulation shares the machine with scheduling: at most a fifth of the time.
            interval = max(interval, FORECAST_SHARE_FACTOR * self.expected.seconds) if interval else 0.0
            if self.forecaster is None or not interval:
                continue
            now = loop.time()
            run, due_since = forecast_now(now, last, due_since, interval, self.queue.counts()[ACTIVE])
            if not run:
                continue
            last = now
            if not len(self.queue):
                self.expected = ExpectedStarts({}, self.core.wall())
                continue
            made_at = self.core.wall()
            work = self.forecaster(self.core, FORECAST_HORIZON_SECONDS)
            started = loop.time()
            try:
                starts = await asyncio.to_thread(work)
            except Exception as error:  # a forecast is advice: its failure stops nothing
                self.log.error("forecast.failed", error=f"{type(error).__name__}: {error}")
                continue
            self.expected = ExpectedStarts(starts, made_at, loop.time() - started)
            if self.log.enabled("debug"):
                self.log.debug("forecast", pending=len(self.queue), starts=len(starts),
                               seconds=round(self.expected.seconds, 3))

    # ------------------------------------------------------------------ config reload
    @property
    def config(self) -> Config:
        """The config in force (the last one a reload applied)."""
        return self.reload.current

    def _reconfigure(self, config: Config) -> list[str]:
        """Hand the new config to the daemon's parts, then to the core; the profiles now served."""
        self._apply_api_settings()
        self.feedback.repeat_window = config.scheduling.event_repeat_seconds
        self.feedback.component = config.scheduler_name
        self.watches.watch_optional(config)
        # Its checkpoints' period at once; its database stays the one opened at start (a restart key).
        self.accounting.settings = dataclasses.replace(config.accounting,
                                                       database=self.accounting.settings.database)
        return self.core.reconfigure(self._tenancy(config))

    # ------------------------------------------------------------------ quota objects
    def _tenancy(self, config: Config) -> Config:
        """The config file's tenancy with the ElasticQuotas, then the GroupQuotas and UserQuotas, under it;
        then the spent budgets' actions over the whole."""
        elastic = with_elastic_quotas(config, self.elastic_quotas.quotas.values())
        merged = merge(elastic, self.quota_objects.quotas)
        self.quota_objects.merged = merged
        with_spent, unknown = with_budgets(merged.config, self.accounting.budgets)
        for problem in unknown:
            self.log.warning("budget.unknown", problem=problem)
        return with_spent

    def _budgets_changed(self) -> None:
        """A budget was spent or a new period restored it: apply the tenancy with its action at once."""
        self.core.reconfigure(self._tenancy(self.config))
        self.reload.reconfigured.set()

    def _delegated_quotas_changed(self) -> None:
        """A GroupQuota or UserQuota changed: merge and apply at once, as a reload does."""
        self.core.reconfigure(self._tenancy(self.config))
        self.reload.reconfigured.set()
        self.log.info("quotas.applied", **self.quota_objects.described())

    # ------------------------------------------------------------------ ElasticQuota objects
    def _on_elastic_quota(self, event: str, obj: dict[str, Any]) -> None:
        if self.elastic_quotas.apply(event, obj):
            self._elastic_quotas_changed()

    def _on_elastic_quotas(self, objects: list[dict[str, Any]]) -> None:
        if self.elastic_quotas.replace(objects):
            self._elastic_quotas_changed()

    def _elastic_quotas_changed(self) -> None:
        """Merge the quotas now in force under the config file's and hand the result to the core, as a
        reload does (the config file's own keys are unchanged)."""
        quotas = self.elastic_quotas
        self.core.reconfigure(self._tenancy(self.config))
        self.reload.reconfigured.set()
        self.log.info("elasticquotas.applied", quotas=quotas.described(), refused=dict(quotas.errors))


def forecast_now(
    now: float, last: float, due_since: float | None, interval: float, active: int
) -> tuple[bool, float | None]:
    """Whether a forecast starts now, and since when one has been due (None: not due, or starting): due
    `interval` after the last; while `active` pods wait to be tried, put off for at most one interval
    more (Scheduler._forecasts; the same rule as the periodic full collection's, heap.collection_due)."""
    return collection_due(now, last, due_since, interval, active)


async def run_scheduler(
    config: Config,
    *,
    kubeconfig: str | None,
    master: str | None,
    logger: JsonLogger,
    config_path: str | None = None,
    forecaster: Forecaster | None = None,
) -> int:
    """Connect, run until SIGTERM/SIGINT, reload the config on SIGHUP, and close cleanly (the `run`
    sub-command); the exit status: 0, or 1 when the leader election's Lease was lost."""
    pool_size = config.scheduling.bind_concurrency + 16
    client = await KubeClient.connect(kubeconfig, host=master, pool_size=pool_size)
    scheduler = Scheduler(config, client, logger, config_path=config_path, forecaster=forecaster,
                          leader_election=config.leader_election, accounting=config.accounting)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, scheduler.stop)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, scheduler.reload.reload)  # read the file now
    try:
        await scheduler.run()
    finally:
        await client.close()
    return 1 if scheduler.lost_lease else 0
