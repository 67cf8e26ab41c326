"""The simulation engine: the scheduling core driven over a trace on a simulated clock.

The core (ai_scheduler.scheduler.core) is the daemon's own, built here with the simulator's outbox
(`SimOutbox`) and clock (`SimClock`): everything that decides (queue order, policies, quotas, gangs, the
filters and scores, GPU choice, preemption, starvation reservations and backfill) is the code the
daemon runs. What differs is only what the daemon gets from the API server and sends to it:

- input: a trace cluster's Nodes and each job's Pod (trace.pods) go through the same event handlers
  as the daemon's informers (`on_node_event`, `on_pod_event`), a departure as the pod's deletion;
- output: a binding takes effect at once (the pod is seen bound, as the watch would show it), a reason
  is kept on the pod's outcome, an eviction deletes the victims and sends their jobs back to the queue
  (as a Job controller would recreate them), restarting their run.

Time is a float of simulated seconds from the start of the trace; the core's clock reads it as
wall-clock seconds from `EPOCH`, so that components comparing with timestamps (reservations with pods'
start times) work as in the daemon. Nothing sleeps: the queue's timers (backoff, the unschedulable
flush) are events the engine jumps to (`SchedulingQueue.deadlines`), and the periodic work of the
daemon (priority refresh, housekeeping) runs before a scheduling pass once its period has gone by.

Two modes (records.Mode):

- timed: arrivals at submit time, departures when the run time ends; after each batch of events at one
  instant, the queue is drained (every active pod popped once, as the daemon's loop does). A run ends
  when no event is left; pods still waiting then (nothing left that could free room) stay unplaced.
- placement: each pod (a gang: its members together) is tried exactly once, in file order, and never
  leaves; a pod that did not fit is counted `failed` and removed. Time is the place in the file (the
  n-th pod arrives at n seconds and is placed then or never), so waits are 0. There is no PostFilter
  (preemption) and no reservation: nothing ever leaves, so neither could help (FGD's method).

Simplifications, said plainly: GPU reports never go stale (the core's staleness bound is lifted);
bindings never fail; housekeeping (gang timeouts, nominations, assumptions) runs only at event times,
so a gang's timeout is noticed at the next event after it.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.fragmentation import PodShape, Shapes, fragmentation, typical_shapes
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.gpus import gpu_annotations
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import Config
from ai_scheduler.log import JsonLogger, NullStream, rfc3339
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.framework.plugins.gpu_fragmentation import GpuFragmentation, row_state
from ai_scheduler.scheduler.framework.runtime import Decision
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Outbox
from ai_scheduler.scheduler.runtimes import RunTimes
from ai_scheduler.scheduler.victims import Plan
from ai_scheduler.trace.cluster import NodeSpec
from ai_scheduler.trace.pods import dns_label, pod_of
from ai_scheduler.trace.records import TraceJob
from ai_scheduler.tracesim.records import Mode, PodOutcome, Sample, SimResult

EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated time 0, as the core's clock reads it
NEVER_STALE = 1e12  # seconds: the simulator's GPU reports never go stale
MILLI = 1000
HOUSEKEEPING_SECONDS = 1.0  # as the daemon's
ARRIVAL, DEPARTURE = 0, 1

Fragmentation = Callable[[SchedulerCache], float]


class _Bar(Protocol):
    def update(self, n: float | None = 1) -> bool | None: ...

    def close(self) -> None: ...


class _NoBar:
    def update(self, n: float | None = 1) -> bool | None:
        return None

    def close(self) -> None:
        return None


def _progress_bar(total: int, progress: bool | None) -> _Bar:
    """A progress bar (None: only when stderr is a terminal); without one, tqdm (of the `sim` extra) is
    not imported, so that the daemon's forecasts need nothing beyond its own dependencies."""
    if progress is False:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="pod", disable=None if progress is None else not progress, leave=False)


@dataclasses.dataclass(slots=True)
class SimClock:
    now: float = 0.0  # simulated seconds from the start of the trace
    epoch: float = EPOCH  # the wall time simulated time 0 stands for (a forecast's: now)

    def __call__(self) -> float:
        return self.epoch + self.now


@dataclasses.dataclass(slots=True)
class LiveState:
    """A running cluster to simulate forward from, instead of a trace's empty start (a forecast,
    tracesim/forecast.py): simulated time 0 is `epoch` (wall time); the nodes as the daemon's cache holds
    them; per job of the workload (by index), its pod as the cache holds it (bound: running there from
    time 0; else waiting, with its own creation time); the run times every component reads (fixed, so
    that nothing the simulation does teaches the daemon's predictor); and how far to look."""

    epoch: float
    nodes: Sequence[NodeRecord]
    pods: Mapping[int, PodRecord]
    runtimes: RunTimes
    gangs: GangRegistry | None = None  # whose PodGroups to take
    horizon: float = math.inf  # simulated seconds


@dataclasses.dataclass(slots=True)
class _Live:
    """A job's pod as the simulator holds it."""

    index: int  # the job's place in the workload
    pod: PodRecord  # as the scheduler's event handlers were last told of it
    gpu_milli: int = 0  # what it holds while placed (a memory share's part of its device)
    generation: int = 0  # bumped when the pod is deleted, so that its stale departure is ignored


class SimBindings:
    """Bindings that take effect at once: the pod is seen bound as the watch would show it."""

    def __init__(self, engine: Simulation) -> None:
        self.engine = engine
        self.handed: set[str] = set()
        self.on_success: Callable[[PodRecord, str], None] | None = None
        self.on_failure: Callable[[PodRecord, Any], None] | None = None

    @property
    def in_flight(self) -> int:
        return 0

    async def wait_for_room(self) -> None:
        return None

    def reserve(self, pod: PodRecord, decision: Decision) -> None:
        self.engine.core.cache.assume(pod, decision.node or "", decision.gpu_ids)

    def unreserve(self, pod: PodRecord) -> None:
        self.engine.core.cache.forget(pod.uid)

    def submit(self, qp: QueuedPod, pod: PodRecord, decision: Decision) -> None:
        self.handed.add(pod.uid)
        self.engine.bound(pod, decision)
        if self.on_success is not None:
            self.on_success(pod, decision.node or "")


class SimReports:
    """Reasons kept on the pods' outcomes; events counted."""

    def __init__(self, engine: Simulation) -> None:
        self.engine = engine
        self.events = 0

    def scheduled(self, pod: PodRecord, node: str) -> None:
        self.events += 1

    def unschedulable(self, pod: PodRecord, message: str) -> None:
        self.engine.refused(pod, message)

    def error(self, pod: PodRecord, message: str) -> None:
        self.engine.refused(pod, message)

    def event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, *, component: str = ""
    ) -> None:
        self.events += 1

    def forget(self, uid: str) -> None:
        return None


class SimEvictions:
    """Victims deleted at once; their jobs go back to the queue and run again from the start."""

    def __init__(self, engine: Simulation) -> None:
        self.engine = engine

    def evict(self, pod: PodRecord, plan: Plan) -> None:
        for victim in plan.victims:
            self.engine.preempted(victim)

    async def drain(self, timeout: float) -> None:
        return None


class Simulation:
    """One run of a workload on a cluster under a config."""

    def __init__(
        self,
        config: Config,
        nodes: Sequence[NodeSpec],
        jobs: Sequence[TraceJob],
        mode: Mode = Mode.TIMED,
        *,
        seed: int = 0,
        config_name: str = "default",
        logger: JsonLogger | None = None,
        fragmentation: Fragmentation | None = None,
        progress: bool | None = False,
        state: LiveState | None = None,
        target: Sequence[TraceJob] | None = None,
        queueing_hints: bool = False,
        horizon: float | None = None,
    ) -> None:
        self.config = dataclasses.replace(
            config, gpu=dataclasses.replace(config.gpu, staleness_seconds=NEVER_STALE)
        )
        self.nodes = list(nodes)
        self.jobs = list(jobs)
        self.mode = mode
        self.clock = SimClock()
        self.log = logger or JsonLogger(stream=NullStream(), level="error")
        self.fragmentation = fragmentation
        self.progress = progress  # None: a bar when stderr is a terminal
        self.reports: SimReports | None = None

        def outbox(_core: SchedulerCore) -> Outbox:
            self.reports = SimReports(self)
            return Outbox(SimBindings(self), self.reports, SimEvictions(self))

        self.state = state
        # Simulated seconds after which the run stops (a forecast's own horizon, or one given).
        self.horizon = horizon if horizon is not None else math.inf if state is None else state.horizon
        if state is not None:
            self.clock.epoch = state.epoch
        # A forecast's run times are the daemon's, fixed: the config's model is not loaded again.
        self.core = SchedulerCore(self.config, self.log, Metrics(), outbox, clock=self.clock, seed=seed,
                                  runtimes=state.runtimes if state is not None else None,
                                  queueing_hints=queueing_hints)
        if target is not None:
            self._give_target(target)
        if mode is Mode.PLACEMENT:
            self.core.cycle.preemptor = None  # no PostFilter, no reservation: nothing would ever leave
            self.core.gang_scheduler.preemptor = None  # nor for gangs
        self.placements: list[tuple[str, str, tuple[int, ...]]] = []  # (pod, node, GPU ids), in order
        self._scheduler_name = self.config.scheduler_name
        self._live: dict[str, _Live] = {}  # by uid
        self._events: list[tuple[float, int, int, str, int]] = []  # (time, order, kind, uid, generation)
        self._order = 0
        self._device_memory = typical_device_memory(self.nodes)
        self._names = pod_names(self.jobs)
        self.result = SimResult(
            mode=mode,
            config=config_name,
            nodes=len(self.nodes),
            capacity_gpu_milli=sum(n.gpus for n in self.nodes) * MILLI,
            capacity_cpu=sum(n.cpu for n in self.nodes),
        )
        self._counts = {"arrived": 0, "placed": 0, "failed": 0, "running": 0}
        self._requested = [0, 0]  # GPU thousandths, millicores
        self._allocated = [0, 0]
        self._frag = (-1, 0.0)  # (arrived percent it was measured at, value)

    def _give_target(self, target: Sequence[TraceJob]) -> None:
        """Hand the target workload's typical pods to the score plugins that take them up front (FGD's
        own procedure: the distribution comes from the workload given, not from what has arrived)."""
        shapes = target_shapes(target, typical_device_memory(self.nodes))
        for framework in self.core.frameworks.values():
            for scorer in framework.scores:
                if isinstance(scorer, GpuFragmentation) and getattr(scorer, "TARGET_UP_FRONT", False):
                    scorer.set_target(shapes)

    # ------------------------------------------------------------------ running
    def run(self) -> SimResult:
        started = time.perf_counter()
        core = self.core
        updated = time.time()
        for spec in self.nodes:
            core.handlers.on_node_event("ADDED", spec.to_node(updated=updated))
        if self.state is not None:
            for record in self.state.nodes:
                core.handlers.node_set(record)
            if self.state.gangs is not None:
                core.gangs.copy_podgroups(self.state.gangs)
        for index, job in enumerate(self.jobs):
            self.result.pods.append(self._outcome(index, job))
            if self.mode is Mode.TIMED:
                self._push(job.submit_time, ARRIVAL, f"sim-{index}", 0)
        core.start()
        bar = _progress_bar(len(self.jobs), self.progress)
        try:
            if self.mode is Mode.PLACEMENT:
                self._run_placement(bar)
            else:
                self._run_timed(bar)
        finally:
            bar.close()
        self.result.wall_seconds = time.perf_counter() - started
        return self.result

    def _run_placement(self, bar: _Bar) -> None:
        jobs = self.jobs
        index = 0
        while index < len(jobs):
            batch = [index]  # a gang's members (consecutive in the file) arrive together
            while jobs[index].gang and index + 1 < len(jobs) and jobs[index + 1].gang == jobs[index].gang:
                index += 1
                batch.append(index)
            index += 1
            self.clock.now = float(batch[0])  # placement mode's time: the place in the file
            for i in batch:
                self._arrive(f"sim-{i}")
            self._drain()
            for i in batch:
                uid = f"sim-{i}"
                live = self._live.get(uid)
                if live is not None and not live.pod.node_name:
                    self._counts["failed"] += 1
                    self._delete(uid)
            bar.update(len(batch))
            self._sample()

    def _run_timed(self, bar: _Bar) -> None:
        core = self.core
        settings = self.config.scheduling
        last_refresh = last_housekeeping = -math.inf
        while True:
            # The unschedulable flush is not waited for: it recovers from events the daemon missed, and the
            # simulator misses none (a pod that did not fit is tried again when something leaves).
            backoff, _flush = core.queue.deadlines() if len(core.queue) else (None, None)
            if self._events:
                due = min(self._events[0][0], math.inf if backoff is None else backoff - self.clock.epoch)
            elif backoff is not None:
                due = backoff - self.clock.epoch  # pods moved by the last event wait out their backoff
            else:
                break  # nothing arrives or leaves any more: the pods still waiting never fit
            if due > self.horizon:
                break  # a forecast looks no further
            self.clock.now = now = max(self.clock.now, due)
            while self._events and self._events[0][0] <= now:
                _, _, kind, uid, generation = heapq.heappop(self._events)
                if kind == ARRIVAL:
                    self._arrive(uid)
                    bar.update(1)
                elif (live := self._live.get(uid)) is not None and live.generation == generation:
                    self._depart(uid)
            core.queue.flush_due()
            if now - last_refresh >= settings.priority_refresh_seconds:
                core.refresh_priorities()
                last_refresh = now
            if now - last_housekeeping >= HOUSEKEEPING_SECONDS:
                core.housekeeping()
                last_housekeeping = now
            self._drain()
            self._sample()

    def _drain(self) -> None:
        """One pass of the daemon's loop: pop every active pod once, each cycle under the guard."""
        core = self.core
        cycle, guard, queue = core.cycle, core.cycle.guard, core.queue
        assert guard is not None
        while (qp := queue.pop_nowait()) is not None:
            guard.run(qp, cycle.schedule_one)

    # ------------------------------------------------------------------ what happens to pods
    def _push(self, at: float, kind: int, uid: str, generation: int) -> None:
        self._order += 1
        heapq.heappush(self._events, (at, self._order, kind, uid, generation))

    def _arrive(self, uid: str) -> None:
        index = int(uid.split("-")[1])
        job = self.jobs[index]
        given = self.state.pods.get(index) if self.state is not None else None
        if given is not None:  # a forecast's pod, as the daemon's cache holds it
            pod = copy.copy(given)
            pod.uid = uid
            pod.forget_derived()  # what a cycle derives is the simulation's own
        else:
            obj = pod_of(job, scheduler_name=self._scheduler_name, uid=uid, name=self._names[index])
            obj["metadata"]["creationTimestamp"] = rfc3339(self.clock(), millis=False)
            # A version, as the API server gives every object: what is memoised per pod version (its
            # tenant) holds. The simulator never changes a pod's labels or spec.
            obj["metadata"]["resourceVersion"] = "1"
            pod = PodRecord.from_api(obj)
        live = self._live[uid] = _Live(index, pod)
        self._counts["arrived"] += 1
        self._requested[0] += self.job_gpu_milli(job, self._device_memory)
        self._requested[1] += job.cpu
        self.core.handlers.pod_event("ADDED", pod)
        if pod.node_name:  # a forecast's running pod: it runs where it is until its run time ends
            self._running(live, pod.node_name, ())

    def bound(self, pod: PodRecord, decision: Decision) -> None:
        """The outbox's binding: the pod is bound now; it leaves when its run time ends (timed mode)."""
        live = self._live[pod.uid]
        node = decision.node or ""
        live.pod.mark_bound(
            node, gpu_annotations(decision.gpu_ids, decision.gpu_uuids), rfc3339(self.clock(), millis=False)
        )
        cache = self.core.cache
        self.core.handlers.pod_event("MODIFIED", live.pod)
        cache.binding_finished(pod.uid)
        self.core.queue.done(pod.uid)
        self.result.pods[live.index].backfilled = self._backfilled(pod, node)
        self._running(live, node, decision.gpu_ids)

    def _running(self, live: _Live, node: str, devices: tuple[int, ...]) -> None:
        """`live`'s pod runs on `node` from now: counted, and its departure set for when its run ends."""
        job = self.jobs[live.index]
        outcome = self.result.pods[live.index]
        outcome.start = self.clock.now if self.mode is Mode.TIMED else outcome.submit  # placement: no wait
        outcome.node = node
        outcome.devices = devices
        live.gpu_milli = self.job_gpu_milli(job, self._node_device_memory(node))
        self._allocated[0] += live.gpu_milli
        self._allocated[1] += job.cpu
        self._counts["placed"] += 1
        self._counts["running"] += 1
        self.placements.append((live.pod.key, node, devices))
        if self.mode is Mode.TIMED and job.duration is not None:
            self._push(self.clock.now + job.duration, DEPARTURE, live.pod.uid, live.generation)

    def refused(self, pod: PodRecord, message: str) -> None:
        live = self._live.get(pod.uid)
        if live is not None:
            outcome = self.result.pods[live.index]
            outcome.reason = message
            outcome.attempts += 1

    def preempted(self, victim: PodRecord) -> None:
        """A victim is deleted; its job is submitted again at once (a Job controller's new pod)."""
        live = self._live.get(victim.uid)
        if live is None:
            return
        self.result.preemptions += 1
        outcome = self.result.pods[live.index]
        outcome.preemptions += 1
        outcome.start, outcome.node = None, ""
        self._delete(victim.uid)
        self._counts["arrived"] -= 1  # the same job arrives again: counted once
        job = self.jobs[live.index]
        self._requested[0] -= self.job_gpu_milli(job, self._device_memory)
        self._requested[1] -= job.cpu
        self._arrive(victim.uid)
        # The new pod keeps the generation _delete bumped, so that the victim's pending departure is stale.
        self._live[victim.uid].generation = live.generation

    def _depart(self, uid: str) -> None:
        live = self._live[uid]
        outcome = self.result.pods[live.index]
        outcome.end = self.clock.now
        if outcome.start is not None and self.state is None:
            # It succeeded: the core learns its run time (online prediction); a forecast learns nothing.
            self.core.completed(live.pod, outcome.end - outcome.start)
        self._delete(uid)

    def _delete(self, uid: str) -> None:
        live = self._live.pop(uid)
        live.generation += 1
        if live.pod.node_name:
            self._allocated[0] -= live.gpu_milli
            self._allocated[1] -= self.jobs[live.index].cpu
            self._counts["running"] -= 1
        self.core.handlers.pod_event("DELETED", live.pod)

    # ------------------------------------------------------------------ records
    def _outcome(self, index: int, job: TraceJob) -> PodOutcome:
        level = 0
        if job.queue and self.config.queues:
            queue = self.config.queue(job.queue)
            level = queue.level if queue is not None else 0
        return PodOutcome(
            name=self._names[index], duration=job.duration, user=job.user,
            submit=job.submit_time if self.mode is Mode.TIMED else float(index),
            group=job.group or job.namespace, queue=job.queue or "default", level=level,
            gpu_milli=self.job_gpu_milli(job, self._device_memory), cpu=job.cpu, memory=job.memory,
        )

    def _sample(self) -> None:
        counts, result = self._counts, self.result
        percent = round(100 * self._requested[0] / max(result.capacity_gpu_milli, 1))
        if self.fragmentation is not None and percent != self._frag[0]:
            self._frag = (percent, self.fragmentation(self.core.cache))
        result.samples.append(Sample(
            time=self.clock.now, arrived=counts["arrived"], placed=counts["placed"],
            failed=counts["failed"], running=counts["running"],
            requested_gpu_milli=self._requested[0], requested_cpu=self._requested[1],
            allocated_gpu_milli=self._allocated[0], allocated_cpu=self._allocated[1],
            fragmentation_milli=self._frag[1],
        ))

    def _backfilled(self, pod: PodRecord, node: str) -> bool:
        """Placed on a node that a starvation reservation holds for another pod."""
        current = self.core.reserver.current
        return current is not None and pod.uid not in current.uids and node in current.nodes

    @staticmethod
    def job_gpu_milli(job: TraceJob, device_memory: int) -> int:
        """The job's GPU thousandths; a memory share as its part of a device of `device_memory` bytes (0
        on a cluster without GPU memory to measure it by)."""
        if job.gpu_memory and not device_memory:
            return 0
        return job.gpu_milli(device_memory or None)

    def _node_device_memory(self, node: str) -> int:
        row = self.core.cache.row_of(node)
        totals = self.core.cache.gpus.total[row] if row >= 0 else None
        return int(totals.max()) if totals is not None and totals.size else self._device_memory


def target_shapes(jobs: Sequence[TraceJob], device_memory: int) -> Shapes:
    """FGD's typical pods of a workload (cache/fragmentation.py `typical_shapes`): exact cpu and GPU
    request, no memory, the most popular shapes covering 95% of the pods."""
    return typical_shapes([PodShape(job.cpu, 0, Simulation.job_gpu_milli(job, device_memory))
                           for job in jobs])


def workload_fragmentation(jobs: Sequence[TraceJob], nodes: Sequence[NodeSpec]) -> Fragmentation:
    """FGD's fragmentation of the cluster as its simulator reports it: against the typical pods of the
    workload (the paper's target workload: the original trace, without clones; `target_shapes`), with the
    scheduler's implementation (cache/fragmentation.py)."""
    shapes = target_shapes(jobs, typical_device_memory(nodes))

    def measure(cache: SchedulerCache) -> float:
        free, free_cpu, free_memory = row_state(cache, np.arange(cache.rows))
        return fragmentation(free, free_cpu, free_memory, shapes)

    return measure


def pod_names(jobs: Sequence[TraceJob]) -> list[str]:
    """Each job's pod name: the job's name as a valid name, with its place in the workload appended where
    the name is taken already (traces repeat names; inflation clones them)."""
    names: list[str] = []
    taken: set[str] = set()
    for index, job in enumerate(jobs):
        name = dns_label(job.name, "job")
        if name in taken:
            name = f"{name[:50]}-{index}"
        taken.add(name)
        names.append(name)
    return names


def typical_device_memory(nodes: Sequence[NodeSpec]) -> int:
    """The device memory of most of the cluster's GPUs (a memory share's part of "a GPU" at arrival)."""
    devices: Counter[int] = Counter()
    for node in nodes:
        if node.gpus and node.gpu_memory:
            devices[node.gpu_memory] += node.gpus
    common = devices.most_common(1)
    return common[0][0] if common else 0
