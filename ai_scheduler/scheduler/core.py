"""The scheduling core: everything that decides, nothing that talks to Kubernetes.

Two drivers run it: the daemon (daemon/app.py), which feeds it list/watch events
and turns its intents into API calls, and the trace simulator
(ai_scheduler.tracesim), which feeds it a trace's arrivals and departures on a
simulated clock and applies its intents to its own state. Both drive the same
code, so the simulator makes the decisions the daemon would.

    driver events --> EventHandlers --> SchedulerCache, SchedulingQueue, GangRegistry
                                                |
    driver loop   --> SchedulingCycle.schedule_one (GangScheduler, Preemptor, Reserver)
                                                |
                      Outbox: Bindings, Reports, Evictions (outbox.py) --> driver effects

The core is built over one cache, with one clock for every component that
reads time (monotonic seconds in the daemon; simulated wall-clock seconds in the
simulator), one seeded random source for tie-breaks, and one run-time hook
(`runtimes`, runtimes.py) for every component that needs a pod's run time. The outbox is made by
the driver once the core's cache and queue exist (`outbox` is a factory). Config
reloads reach every component through `reconfigure`.

Queueing hints (`queueing_hints`, off by default: see below) let a pod leaving a node retry
only the waiting pods that may fit there, with the decisions of a queue that
retries them all (scheduling_queue.py says how); `hint_of` says which failed
pods may wait so, and `fits_row` whether one may fit on a node. A gang whose attempt
failed for room alone waits so too, its members as one unit (gang.py, `_hints`). They give the
same placements as retrying every pod (tests/unit/queue/test_queueing_hints.py; Philly and
Helios slices of 500 and 1,000 jobs on 24 nodes, reservation off). With them, a
pod with a hint that fails where an equivalent pod failed at the same room
version repeats that failure without the filters (schedule_one.py), which is
most attempts under a standing queue of like pods. They are still off by default
in the daemon: with reservations on (the default) no pod gets a hint, and a pod
whose backoff runs when room is freed is still moved and tried. The trace
benchmarks turn them on (benchmarks/runtime_policies.py).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from typing import Any

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import Config, PredictionSettings, SettingsView
from ai_scheduler.log import JsonLogger, parse_time
from ai_scheduler.prediction import ModelError, RunTimeModel, RunTimePredictor
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.decision_log import DecisionLog
from ai_scheduler.scheduler.domains import KeptDomains
from ai_scheduler.scheduler.eventhandlers import EventHandlers
from ai_scheduler.scheduler.framework.plugins import build_filters, build_scores
from ai_scheduler.scheduler.framework.runtime import Framework
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.scheduler.gang_preemption import GangPreemptor
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Clock, Outbox
from ai_scheduler.scheduler.preemption import Preemptor
from ai_scheduler.scheduler.priority import PriorityEngine
from ai_scheduler.scheduler.reservation import Reserver
from ai_scheduler.scheduler.runtimes import AnnotatedRunTimes, PredictedRunTimes, RunTimes
from ai_scheduler.scheduler.schedule_one import SchedulingCycle
from ai_scheduler.scheduler.session import Session


def build_frameworks(config: Config, cache: SchedulerCache, rng: random.Random) -> dict[str, Framework]:
    """One Framework (filters and scores) per profile, by schedulerName."""
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


HINT_SHAPES = 65_536  # distinct queueing-hint shapes numbered before `hint_number` starts again
_hint_numbers: dict[tuple[Any, ...], int] = {}
_hint_count = itertools.count()


def hint_number(shape: tuple[Any, ...]) -> int:
    """The number of a queueing hint's shape, the same for every core of the process (a pod's PodInfo keeps
    it, whichever core asked): the queue looks hints up per waiting pod and event, and a tuple hashes anew
    each time. Past HINT_SHAPES shapes the table starts again with new numbers, so a shape numbered before
    is only unlike the same shape numbered after (an equivalence missed: a full attempt instead); a number
    never stands for two shapes."""
    if len(_hint_numbers) > HINT_SHAPES:
        _hint_numbers.clear()
    number = _hint_numbers.get(shape)
    if number is None:
        number = _hint_numbers[shape] = next(_hint_count)
    return number


class SchedulerCore:
    def __init__(
        self,
        config: Config,
        logger: JsonLogger,
        metrics: Metrics,
        outbox: Callable[[SchedulerCore], Outbox],
        *,
        clock: Clock | None = None,
        seed: int | None = None,
        runtimes: RunTimes | None = None,
        queueing_hints: bool = False,
    ) -> None:
        timed: dict[str, Any] = {"clock": clock} if clock is not None else {}
        self._wall = clock if clock is not None else time.time  # wall-clock seconds, for pods' start times
        self.settings = SettingsView(config)  # the config in force, for every part of the core
        self.log = logger
        self.metrics = metrics
        self.rng = random.Random(seed)
        settings = config.scheduling
        cache = self.cache = SchedulerCache(assume_timeout=settings.assume_timeout_seconds, **timed)
        cache.gpus.staleness = config.gpu.staleness_seconds
        tenancy = self.tenancy = cache.tenancy = Tenancy(config)
        tenancy.dra = cache.dra  # GPUs held through DRA ResourceClaims count in quotas
        # The run-time hook (runtimes.py): the pod's own estimate, and a prediction when the config's
        # `prediction` section asks for one.
        self._runtimes: RunTimes = runtimes if runtimes is not None else self._runtimes_for(config.prediction)
        gangs = self.gangs = GangRegistry()
        self.budgets = DisruptionBudgets()  # PodDisruptionBudgets, which preemption respects
        self.priorities = PriorityEngine(config, tenancy, cache, self._job_members,
                                         runtimes=lambda: self._runtimes, **timed)
        queue = self.queue = SchedulingQueue(
            initial_backoff=settings.initial_backoff_seconds,
            max_backoff=settings.max_backoff_seconds,
            unschedulable_flush=settings.unschedulable_flush_seconds,
            queue_name_of=lambda pod: tenancy.tenant_of(pod).queue,
            sort_key=self.priorities.sort_key,
            on_incoming=metrics.incoming,
            **timed,
        )
        self.frameworks = build_frameworks(config, cache, self.rng)
        self.reserver = Reserver(
            cache,
            logger,
            backfill=settings.backfill,
            min_wait=settings.reservation_min_wait_seconds,
            runtimes=self._runtimes,
            **timed,
        )
        self.ready = asyncio.Event()  # set by the driver once the first state is in (first sync)
        out = self.outbox = outbox(self)
        monotonic = clock or time.monotonic
        # Logical domains (domains.ai-scheduler.io): fed by the daemon's informer (Domain objects).
        self.domains = KeptDomains(cache, self.reserver, lambda: self._runtimes)
        session = self.session = Session(
            settings=self.settings, cache=cache, queue=queue, gangs=gangs, tenancy=tenancy,
            priorities=self.priorities, reserver=self.reserver, outbox=out,
            decisions=DecisionLog(self.settings, tenancy, self.priorities, metrics, logger, monotonic),
            metrics=metrics, log=logger, clock=monotonic, domains=self.domains,
        )
        self.preemptor = Preemptor(
            cache, tenancy, gangs, out.evictions, logger, metrics, self.budgets, **timed
        )
        gang_scheduler = self.gang_scheduler = GangScheduler(session)
        gang_scheduler.preemptor = GangPreemptor(self.preemptor)
        cycle = self.cycle = SchedulingCycle(session, lambda: self.frameworks, gang_scheduler, self.preemptor)
        out.bindings.on_success = cycle.bound
        out.bindings.on_failure = lambda pod, result: gang_scheduler.bind_failed(pod, result.message)
        self.handlers = EventHandlers(
            cache, queue, gangs, self.budgets, self.reserver, out.reports, metrics, logger,
            lambda: self.frameworks, self.ready, finished=self.pod_finished,
        )
        self._reclaim_seen: tuple[Config | None, bool] = (None, False)  # `_reclaims`, for this config
        self._hints_forced = queueing_hints  # the simulator's own choice, whatever the config says
        self._set_hints(queueing_hints or config.scheduling.queueing_hints)

    def _set_hints(self, on: bool) -> None:
        """Queueing hints and equivalent pods on or off; off, the pods waiting with a hint lose it."""
        cycle = self.cycle
        if on:
            cycle.hint_of = self.gang_scheduler.hint_of = self.hint_of
            self.handlers.hint = self.fits_row
        elif cycle.hint_of is not None:
            cycle.hint_of = self.gang_scheduler.hint_of = None
            self.handlers.hint = None
            self.queue.unhint()

    def hint_of(self, pod: PodRecord) -> int | None:
        """What makes pods alike for the filters (the queue asks `fits_row` once per distinct value), when
        a pod that did not fit may wait for room on a node alone; None when other things may let it fit
        or its retries may do something: pod affinity, spread, ports, volumes, claims, a nomination, a
        preemption that may find victims (a lower spec.priority seen, or a group's min to reclaim)."""
        if (pod.pod_affinity.has_required or pod.pod_affinity.has_preferred or pod.spread.hard
                or pod.spread.soft or pod.host_ports or pod.claims or pod.disks or pod.resource_claims
                or self.cache.nominations):
            return None
        if pod.preempts:
            lowest = self.handlers.lowest_priority
            if lowest is None or pod.priority > lowest or self._reclaims():
                return None
        info = pod.info
        if info.hint is None:  # what is read of the pod alone, once per pod version (its PodInfo)
            gpu = tuple(sorted(
                (k, v) for k, v in pod.annotations.items() if k.startswith("ai-scheduler.io/gpu-")))
            shape = (
                pod.scheduler_name, pod.namespace, tuple(sorted(pod.requests.items())), gpu,
                tuple(sorted(pod.labels.items())), tuple(sorted(pod.node_selector.items())),
                tuple(t.identity() for t in pod.tolerations), repr(pod.affinity), pod.priority,
                # not the filters' but PostFilter's: its verdict ends the reason a repeat reads
                pod.preempts,
            )
            info.hint = hint_number(shape)
        return info.hint

    def _reclaims(self) -> bool:
        """Whether a group of the config in force has a min (that preemption may reclaim), asked once per
        config object."""
        config = self.config
        if self._reclaim_seen[0] is not config:
            self._reclaim_seen = (config, any(g.min for g in config.groups.values()))
        return self._reclaim_seen[1]

    def fits_row(self, pod: PodRecord, row: int) -> bool:
        """Whether `pod` may fit on the node of `row` now (its profile's filters; no profile: yes)."""
        framework = self.frameworks.get(pod.scheduler_name)
        return framework is None or framework.fits_row(pod, row)

    def wall(self) -> float:
        """Wall-clock seconds now, as the core reads them (the simulator's clock in a simulation)."""
        return self._wall()

    @property
    def config(self) -> Config:
        """The config in force (`settings.current`; a reload swaps it through `reconfigure`)."""
        return self.settings.current

    @property
    def runtimes(self) -> RunTimes:
        """The run-time hook every component that needs a run time asks (reservations, backfill)."""
        return self._runtimes

    @runtimes.setter
    def runtimes(self, runtimes: RunTimes) -> None:
        """Plug in another run-time source (a learned predictor): every user of the hook takes it."""
        self._runtimes = runtimes
        self.reserver.runtimes = runtimes

    def _runtimes_for(self, settings: PredictionSettings) -> RunTimes:
        """The run-time source the config asks for: the pods' own estimates, plus a prediction when a
        model is given or online learning is on. A model file that does not load is logged and left out
        (online learning, when on, still runs)."""
        if not settings.enabled:
            return AnnotatedRunTimes()
        model = None
        if settings.model is not None:
            try:
                model = RunTimeModel.load(settings.model)
            except (ModelError, OSError) as exc:
                self.log.error("prediction.model_invalid", path=settings.model, error=str(exc))
        learn_online = settings.learn_online if settings.learn_online is not None else model is not None
        if model is None and not learn_online:
            return AnnotatedRunTimes()
        self.log.info("prediction.ready", model=settings.model if model else None, learn_online=learn_online)
        return PredictedRunTimes(RunTimePredictor(model), self.tenancy, learn_online=learn_online,
                                 model_path=settings.model if model else None)

    def completed(self, pod: PodRecord, seconds: float) -> None:
        """`pod` ended after running `seconds`: online learning takes it (the simulator calls this
        with the exact run time; the daemon through `pod_finished`). A failed job held its GPUs for its
        run time as much as a successful one, and how long a pod holds them is what is predicted."""
        if isinstance(self._runtimes, PredictedRunTimes):
            self._runtimes.completed(pod, seconds)

    def pod_finished(self, pod: PodRecord, ran_to_end: bool) -> None:
        """The event handlers saw a placed pod end: ran to its end, succeeded or failed (its run time
        counts from its start), or left otherwise (deleted or evicted: cut short, nothing to learn)."""
        if not isinstance(self._runtimes, PredictedRunTimes):
            return
        started = parse_time(pod.started) if ran_to_end else None
        if started is not None:
            self.completed(pod, self._wall() - started)
        else:
            self._runtimes.forget(pod.uid)

    def _job_members(self, pod: PodRecord) -> int:
        gang = self.gangs.gang_of(pod)
        return gang.min_member if gang is not None else 1

    def gpu_allocation(self) -> dict[str, dict[str, int]]:
        """Per node, who holds which managed GPU (for metrics and tools)."""
        gpus = self.cache.gpus
        return {self.cache.row_names[row]: gpus.allocation(row) for row in list(gpus.nodes)}

    def cache_sizes(self) -> dict[str, int]:
        cache = self.cache
        return {"nodes": cache.node_count, "pods": len(cache.pods), "assumed_pods": cache.assumed_count}

    # ------------------------------------------------------------------ periodic work
    def start(self) -> None:
        """The first state is in: priorities' normalisers come from the waiting pods, before the first pop."""
        self.refresh_priorities()
        self.ready.set()

    def refresh_priorities(self) -> int:
        """Priorities move with waiting time and usage: recompute them; how many pods moved in the queue."""
        self.priorities.refresh(self.queue.pending())
        if not self.priorities.keys_may_move():
            return 0
        moved = self.queue.reprioritize()
        self.priorities.rekeyed()
        return moved

    def housekeeping(self) -> None:
        """Gangs past their timeout, unused nominations, and assumptions no watch ever confirmed."""
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
    def reconfigure(self, config: Config) -> list[str]:
        """Hand every component of the core the new config (none keeps a copy); the profiles served."""
        settings = config.scheduling
        previous = self.settings.swap(config)
        self.cache.set_assume_timeout(settings.assume_timeout_seconds)
        self.cache.gpus.staleness = config.gpu.staleness_seconds
        self.reserver.backfill = settings.backfill
        self.reserver.min_wait = settings.reservation_min_wait_seconds
        if not settings.reservation:
            self.reserver.current = None
        self._set_hints(self._hints_forced or settings.queueing_hints)
        self.cycle.forget_failures()  # a failure under the old profiles says nothing under the new ones
        self.cycle.strict.forget()
        self.tenancy.reconfigure(config, [s.record for s in self.cache.pods.values() if s.node])
        if config.prediction != previous.prediction:
            self.runtimes = self._runtimes_for(config.prediction)
        self.priorities.reconfigure(config)
        self.frameworks = build_frameworks(config, self.cache, self.rng)
        # Pods of a profile that came or went join or leave the queue; the others are counted in the
        # queue their namespace now gives them.
        self.handlers.sync_pending()
        self.queue.reconfigure(
            initial_backoff=settings.initial_backoff_seconds,
            max_backoff=settings.max_backoff_seconds,
            unschedulable_flush=settings.unschedulable_flush_seconds,
        )
        self.refresh_priorities()
        self.queue.move_all("ConfigReload")
        return sorted(self.frameworks)
