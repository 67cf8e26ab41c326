"""The scheduler daemon: wiring and lifecycle of the informer path and the scheduling path over one cache.

As kube-scheduler's `scheduler.go`: the phases live in their own modules
(`eventhandlers.py`: list/watch into the cache and the queue; `schedule_one.py`:
one scheduling cycle and the loop; `binder.py`: binding, asynchronously;
`preemption.py`, `gang.py`, `reservation.py`: PostFilter, gangs, starvation
reservations); this module builds them over one cache, starts and stops them,
serves health and metrics, and applies config reloads.

Everything runs on one event loop. Watch handlers and scheduling cycles are
synchronous between awaits, so a cycle always sees a consistent cache; the
loop yields after every pod so that watch events and binding replies keep
flowing while a long queue drains.

Config reloads are applied between two cycles, whole (config_reload.py): the
new config is handed to every component here (`_reconfigure`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Coroutine
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import Config
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.config_reload import ConfigReload
from ai_scheduler.scheduler.cycle import Framework
from ai_scheduler.scheduler.eventhandlers import EventHandlers
from ai_scheduler.scheduler.feedback import Feedback
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.scheduler.gang_status import GangStatusWriter
from ai_scheduler.scheduler.health import ApiMonitor, HealthServer
from ai_scheduler.scheduler.informer import Informer
from ai_scheduler.scheduler.metrics import Metrics, StateCollector
from ai_scheduler.scheduler.plugins import build_filters, build_scores
from ai_scheduler.scheduler.preemption import Preemptor
from ai_scheduler.scheduler.priority import PriorityEngine
from ai_scheduler.scheduler.recovery import CycleGuard, JournalingBinder
from ai_scheduler.scheduler.reservation import Reserver
from ai_scheduler.scheduler.schedule_one import SchedulingCycle

HOUSEKEEPING_SECONDS = 1.0

def build_frameworks(config: Config, cache: SchedulerCache, rng: random.Random) -> dict[str, Framework]:
    frameworks = {}
    for profile in config.profiles:
        frameworks[profile.scheduler_name] = Framework(
            profile.scheduler_name,
            build_filters(config, profile),
            build_scores(profile),
            cache,
            percentage_of_nodes_to_score=config.scheduling.percentage_of_nodes_to_score,
            rng=rng,
            tie_break=config.scheduling.tie_break,
        )
    return frameworks


class Scheduler:
    """The daemon: builds the components over one cache and runs the two paths and their helpers."""

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
    ) -> None:
        self.client = client
        self.log = logger
        self.serve_http = serve_http
        self.rng = random.Random(seed)
        settings = config.scheduling
        metrics = self.metrics = Metrics()
        self.reload = ConfigReload(
            config, self._reconfigure, logger, metrics, path=config_path, poll_seconds=config_poll_seconds
        )
        cache = self.cache = SchedulerCache(assume_timeout=settings.assume_timeout_seconds)
        cache.gpus.staleness = config.gpu.staleness_seconds
        tenancy = self.tenancy = cache.tenancy = Tenancy(config)
        gangs = self.gangs = GangRegistry()
        self.budgets = DisruptionBudgets()  # PodDisruptionBudgets, which preemption respects
        self.priorities = PriorityEngine(config, tenancy, cache, self._job_members)
        queue = self.queue = SchedulingQueue(
            initial_backoff=settings.initial_backoff_seconds,
            max_backoff=settings.max_backoff_seconds,
            unschedulable_flush=settings.unschedulable_flush_seconds,
            queue_name_of=lambda pod: tenancy.tenant_of(pod).queue,
            sort_key=self.priorities.sort_key,
            on_incoming=metrics.incoming,
        )
        self.frameworks = build_frameworks(config, cache, self.rng)
        self.reserver = Reserver(cache, logger, backfill=settings.backfill)
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        feedback = self.feedback = Feedback(
            client, logger, metrics, component=config.scheduler_name,
            repeat_window=settings.event_repeat_seconds,
        )
        binder = self.binder = JournalingBinder(
            client, cache, queue, feedback, metrics, logger, concurrency=settings.bind_concurrency
        )
        cycle = self.cycle = SchedulingCycle(
            lambda: self.config, lambda: self.frameworks, cache, queue, gangs, tenancy, self.priorities,
            self.reserver, metrics, logger,
        )
        gang_scheduler = self.gang_scheduler = GangScheduler(
            gangs, cache, queue, binder, feedback, metrics, logger, settings, cycle.log_decision,
            cycle.admission_refusal, self.reserver, self.priorities.sort_key,
            lambda: self.config.scheduling.reservation,
        )
        self.preemptor = Preemptor(cache, tenancy, gangs, client, feedback, logger, metrics, self.budgets)
        cycle.binder, cycle.feedback, cycle.preemptor = binder, feedback, self.preemptor
        cycle.gang_scheduler = gang_scheduler
        cycle.guard = CycleGuard(cache, queue, binder, gang_scheduler, feedback, metrics, logger)
        binder.on_success = cycle.bound
        binder.on_failure = lambda pod, result: gang_scheduler.bind_failed(pod, result.message)
        self.handlers = EventHandlers(
            client, cache, queue, gangs, self.budgets, self.reserver, feedback, metrics, logger,
            lambda: self.frameworks, self.ready,
        )
        self.informers = self.handlers.build_informers(config)
        metrics.watch_state(
            StateCollector(
                queue.counts_by_queue, self._cache_sizes, lambda: binder.in_flight, self._gpu_allocation,
                queue.pending_counts,
            )
        )
        self.http: HealthServer | None = None
        self.monitor: ApiMonitor | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._loop_task: asyncio.Task[None] | None = None
        self.priority_interval = settings.priority_refresh_seconds  # the period of the refresh loop

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        """Run until stop(); the caller owns the client."""
        if self.serve_http:
            self.http = HealthServer(live=self._live, ready=self._ready, metrics=self.metrics.render)
            port = await self.http.start(self.config.server.bind_address, self.config.server.port)
            self.log.info("http.listening", port=port)
        self._apply_api_settings()
        monitor = self.monitor = ApiMonitor(
            self.client, self.log, self.informers.values,
            restart_after=lambda: self.config.scheduling.api_unreachable_restart_seconds,
        )
        self._spawn(monitor.run(), "api-monitor")
        for informer in self.informers.values():
            self._start_informer(informer)
        self.handlers.start_added(self._start_informer)
        watcher = self.reload.watch()
        if watcher is not None:
            self._spawn(watcher.run(), "config-watcher")
        self.log.info(
            "scheduler.starting",
            profiles=sorted(self.frameworks),
            bind_concurrency=self.config.scheduling.bind_concurrency,
        )
        try:
            synced = asyncio.gather(*(inf.synced.wait() for inf in self.informers.values()))
            stop = asyncio.ensure_future(self.stopped.wait())
            waiting: list[asyncio.Future[Any]] = [synced, stop]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not self.stopped.is_set():
                # Normalisers come from the waiting pods: take them before the first pop.
                self.priorities.refresh(self.queue.pending())
                self.queue.reprioritize()
                self.ready.set()
                self.log.info("scheduler.ready", nodes=self.cache.node_count, pending=len(self.queue))
                self._loop_task = asyncio.create_task(self.cycle.run(), name="scheduling-loop")
                self._spawn(self._housekeeping(), "housekeeping")
            self._spawn(self._refresh_priorities(), "priorities")
            gang_status = GangStatusWriter(self.client, self.gangs, self.log, self.metrics)
            self._spawn(gang_status.run(), "gang-status")
            await stop
            synced.cancel()
        finally:
            await self._shutdown()

    def _spawn(self, job: Coroutine[Any, Any, Any], name: str) -> None:
        self._tasks.append(asyncio.create_task(job, name=name))

    def _start_informer(self, informer: Informer[Any]) -> None:
        self._spawn(informer.run(), f"informer-{informer.resource}")

    def stop(self) -> None:
        self.stopped.set()

    async def _shutdown(self) -> None:
        self.queue.close()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        await self.binder.drain(timeout=5.0)
        await self.preemptor.drain(timeout=5.0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.feedback.close()
        if self.http is not None:
            await self.http.stop()
        self.log.info("scheduler.stopped")

    def _live(self) -> str:
        """Why /healthz fails ("" when it does not): the scheduling loop stopped, or the API server has been
        out of reach long enough that a restart is wanted (health.ApiMonitor)."""
        if self.ready.is_set() and (self._loop_task is None or self._loop_task.done()):
            return "scheduling loop stopped"
        return self.monitor.live_problem() if self.monitor is not None else ""

    def _ready(self) -> str:
        """Why /readyz fails ("" when it does not): no first sync yet, or the API server out of reach."""
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

    def _gpu_allocation(self) -> dict[str, dict[str, int]]:
        gpus = self.cache.gpus
        return {self.cache.row_names[row]: gpus.allocation(row) for row in list(gpus.nodes)}

    def _cache_sizes(self) -> dict[str, int]:
        cache = self.cache
        return {"nodes": cache.node_count, "pods": len(cache.pods), "assumed_pods": cache.assumed_count}

    def _job_members(self, pod: PodRecord) -> int:
        gang = self.gangs.gang_of(pod)
        return gang.min_member if gang is not None else 1

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
            self.priorities.refresh(self.queue.pending())
            moved = self.queue.reprioritize()
            if moved and self.log.enabled("debug"):
                self.log.debug("priorities.refreshed", moved=moved, pending=len(self.queue))

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            self.gang_scheduler.check_timeouts()
            self.preemptor.expire()
            for pod in self.cache.expire_assumed():
                self.log.warning(
                    "assume.expired",
                    pod=pod.key,
                    uid=pod.uid,
                    reason="binding succeeded but the watch never showed the pod bound",
                )
                current = self.cache.pod_state(pod.uid)
                if current is not None:
                    self.handlers.sync_queue(current.record)
                self.queue.move_all("AssumeExpired")

    # ------------------------------------------------------------------ config reload
    @property
    def config(self) -> Config:
        """The config in force (the last one a reload applied)."""
        return self.reload.current

    def _apply_config(self, config: Config) -> None:
        """Apply a config as a file change or SIGHUP does (config_reload.ConfigReload.apply)."""
        self.reload.apply(config)

    def reload_config(self) -> None:
        """SIGHUP: read the config file now and apply it, changed or not."""
        self.reload.reload()

    def _reconfigure(self, config: Config) -> list[str]:
        """Hand every component the new config (none keeps a copy from the start); the profiles served."""
        settings = config.scheduling
        self._apply_api_settings()
        self.cache.set_assume_timeout(settings.assume_timeout_seconds)
        self.cache.gpus.staleness = config.gpu.staleness_seconds
        self.reserver.backfill = settings.backfill
        if not settings.reservation:
            self.reserver.current = None
        self.gang_scheduler.reconfigure(settings)
        self.feedback.repeat_window = settings.event_repeat_seconds
        self.feedback.component = config.scheduler_name
        self.tenancy.reconfigure(config, [s.record for s in self.cache.pods.values() if s.node])
        self.priorities.reconfigure(config)
        self.frameworks = build_frameworks(config, self.cache, self.rng)
        self.handlers.watch_optional(config)
        # Pods of a profile that came or went join or leave the queue; the others are counted in the
        # queue their namespace now gives them.
        self.handlers.sync_pending()
        self.queue.reconfigure(
            initial_backoff=settings.initial_backoff_seconds,
            max_backoff=settings.max_backoff_seconds,
            unschedulable_flush=settings.unschedulable_flush_seconds,
        )
        self.priorities.refresh(self.queue.pending())
        self.queue.reprioritize()
        self.queue.move_all("ConfigReload")
        return sorted(self.frameworks)


async def run_scheduler(
    config: Config,
    *,
    kubeconfig: str | None,
    master: str | None,
    logger: JsonLogger,
    config_path: str | None = None,
) -> None:
    """Connect, run until SIGTERM/SIGINT, reload the config on SIGHUP, and close cleanly (the `run`
    sub-command)."""
    import signal

    client = await KubeClient.connect(
        kubeconfig, host=master, pool_size=config.scheduling.bind_concurrency + 16
    )
    scheduler = Scheduler(config, client, logger, config_path=config_path)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, scheduler.stop)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, scheduler.reload_config)
    try:
        await scheduler.run()
    finally:
        await client.close()
