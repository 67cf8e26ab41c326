"""Expected start times: the daemon's own state simulated forward by its own scheduling core.

A waiting pod's start depends on everything the scheduler will do until then: the pods ahead of it in
its queue and in higher levels, quotas, gangs that start whole, reservations and backfill, and when the
running pods end. Rather than a second, simpler model of all that (Slurm's `squeue --start` plans with
its backfill scheduler's own rules), the forecast runs the trace simulator's engine from the daemon's
state: the same core (tracesim/engine.py) on a fresh cache, with

- the nodes as the daemon's cache holds them;
- every pod that counts on a node (bound, or assumed while its binding is in flight) running there from
  now, until its start plus its median run time (a pod past it: ends in a second); with no known run
  time, it never ends;
- every pod in the scheduling queue waiting (gated pods are not: nobody knows when their gates go),
  with its own creation time, so that waiting-time factors and aging read as in the daemon, and its
  median run time once started (none known: it never ends);
- the daemon's PodGroups and its config;
- run times read once from the daemon's run-time hook (`FixedRunTimes`), so that nothing the
  simulation does feeds the daemon's online learning.

The engine's timed mode then runs until the horizon: a waiting pod's expected start is when the
simulation placed it; a pod still waiting then has none ("not within the horizon": also what a pod
waiting for room that only pods of unknown run time hold gets). It is a median-run-time estimate, not a
promise: arrivals after now (which a higher-priority job may overtake the forecast with), failures and
preemptions of other schedulers are not in it. Not carried over, said plainly: namespaces' labels (a
namespaceSelector matches none), PodDisruptionBudgets (preemption in the forecast respects none), and
the workloads behind kube-scheduler's default spreading.

`forecast` takes the snapshot (read the core's cache and queue: on the daemon's event loop) and
`Snapshot.run` simulates (on any thread: it shares nothing mutable with the daemon).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping

from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import Config
from ai_scheduler.log import parse_time
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.plugins.gpu import DEVICE_PLUGIN_GPU
from ai_scheduler.scheduler.runtimes import FixedRunTimes, RunTime
from ai_scheduler.trace.records import TraceJob
from ai_scheduler.tracesim.engine import LiveState, Simulation

DEFAULT_HORIZON_S = 7 * 86_400.0
OVERDUE_S = 1.0  # a running pod past its median run time ends this soon after now


@dataclasses.dataclass(frozen=True, slots=True)
class Forecast:
    """Expected starts (wall time) of waiting pods by uid; a waiting pod not in `starts` does not start
    within the horizon."""

    made_at: float  # wall time of the snapshot
    horizon_s: float
    starts: Mapping[str, float]
    waiting: int  # pods the forecast simulated as waiting
    running: int
    wall_seconds: float  # what simulating took

    def expected_start(self, uid: str) -> float | None:
        return self.starts.get(uid)


@dataclasses.dataclass(slots=True)
class Snapshot:
    """What a forecast simulates: the jobs (running ones first), their pods, and the daemon's state."""

    config: Config
    jobs: list[TraceJob]
    state: LiveState
    waiting_uids: dict[int, str]  # job index -> the daemon's uid of a waiting pod
    seed: int = 0

    def run(self) -> Forecast:
        started = time.perf_counter()
        simulation = Simulation(self.config, [], self.jobs, seed=self.seed, state=self.state)
        result = simulation.run()
        starts = {
            uid: self.state.epoch + outcome.start
            for index, uid in self.waiting_uids.items()
            if (outcome := result.pods[index]).start is not None
        }
        return Forecast(
            made_at=self.state.epoch, horizon_s=self.state.horizon, starts=starts,
            waiting=len(self.waiting_uids), running=len(self.jobs) - len(self.waiting_uids),
            wall_seconds=time.perf_counter() - started,
        )


def _job(pod: PodRecord, duration: float | None) -> TraceJob:
    """The trace job a pod stands for: its run time, and what the engine's own figures count."""
    return TraceJob(
        name=pod.name or pod.uid, submit_time=0.0, duration=duration,
        cpu=pod.requests.get("cpu", 0), memory=pod.requests.get("memory", 0),
        gpus=pod.requests.get(DEVICE_PLUGIN_GPU, 0), namespace=pod.namespace,
    )


def snapshot(core: SchedulerCore, *, horizon_s: float = DEFAULT_HORIZON_S, seed: int = 0) -> Snapshot:
    """The daemon's state now, as a forecast simulates it (read on the daemon's loop; copies only)."""
    cache, hook = core.cache, core.runtimes
    now = core.wall()
    jobs: list[TraceJob] = []
    pods: dict[int, PodRecord] = {}
    known: dict[str, RunTime | None] = {}
    waiting: dict[int, str] = {}

    def add(pod: PodRecord, run: RunTime | None, duration: float | None) -> int:
        index = len(jobs)
        jobs.append(_job(pod, duration))
        pods[index] = pod
        known[f"sim-{index}"] = run
        return index

    for placed in list(cache.pods.values()):
        if not placed.node:
            continue
        pod = copy.copy(placed.record)
        pod.node_name = placed.node  # an assumed pod: where its binding is going
        run = hook.estimate(placed.record)
        started = parse_time(pod.started) if pod.started else None
        start = started if started is not None else now
        remaining = None if run is None else max(start + run.median - now, OVERDUE_S)
        add(pod, run, remaining)
    for qp in core.queue.pending():
        run = hook.estimate(qp.pod)
        index = add(copy.copy(qp.pod), run, None if run is None else run.median)
        waiting[index] = qp.pod.uid
    nodes = [
        record for name in cache.row_names if name and (record := cache.node_record(name)) is not None
    ]
    podgroups = GangRegistry()
    podgroups.copy_podgroups(core.gangs)
    live = LiveState(now, nodes, pods, FixedRunTimes(known), podgroups, horizon_s)
    return Snapshot(core.config, jobs, live, waiting, seed)


def forecast(core: SchedulerCore, *, horizon_s: float = DEFAULT_HORIZON_S, seed: int = 0) -> Forecast:
    """Every waiting pod's expected start, from a simulation of the daemon's state (see the module)."""
    return snapshot(core, horizon_s=horizon_s, seed=seed).run()



def forecaster(core: SchedulerCore, horizon_s: float) -> Callable[[], Mapping[str, float]]:
    """The daemon's `visibility.Forecaster`: the snapshot now, the simulation when called."""
    taken = snapshot(core, horizon_s=horizon_s)
    return lambda: taken.run().starts
