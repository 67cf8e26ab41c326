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

Memory: a simulation is a second scheduling core with a record of every pod of the cluster, so run in
the daemon's process it would hold a second copy of the cluster while it runs (about as much as the
cache itself), and the heap it leaves behind once freed is fragmented, not handed back to the system:
the daemon's resident memory would keep the peak of its largest forecast. The daemon's `forecaster`
therefore forks (where the platform can): the child process is a copy-on-write snapshot of the daemon
at the instant of the fork, taken on the event loop between two callbacks, so that it is consistent;
the child takes the snapshot, simulates, writes the expected starts to a pipe and exits, and everything
it allocated goes back to the system with it. The daemon holds no copy at any time and keeps
scheduling meanwhile, on its own core (the simulation no longer competes with it for the interpreter);
the work the daemon runs on a worker thread only reads the pipe and reaps the child. In the child the
garbage collector's generations are frozen first, so that a collection does not write to (and copy) the
pages of the daemon's objects. A child that fails, or exits without a result, fails the forecast (the
daemon logs it and goes on); the child dies with the daemon (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Mapping

import orjson

from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import Config
from ai_scheduler.log import parse_time
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.framework.plugins.gpu import DEVICE_PLUGIN_GPU
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
    """The daemon's `visibility.Forecaster`: a copy-on-write snapshot now (a forked child, see the
    module), its expected starts when called; in this process where the platform cannot fork."""
    if not FORK:
        taken = snapshot(core, horizon_s=horizon_s)
        return lambda: taken.run().starts
    return _forked(core, horizon_s)


FORK = hasattr(os, "fork") and sys.platform == "linux"
PR_SET_PDEATHSIG = 1  # prctl(2)
READ_CHUNK = 64 * 1024  # bytes per read of the child's report
_FAILED = b"!"  # the first byte of a child's report that is an error message, not the result


def _die_with_parent() -> None:
    """The child gets SIGKILL when the daemon goes, so that no forecast outlives it (Linux prctl)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _child(core: SchedulerCore, horizon_s: float, out: int) -> None:
    """In the forked child: simulate, report on `out`, and exit without running any of the daemon's
    exit handlers or flushing its buffers (`os._exit`)."""
    status = 0
    try:
        gc.freeze()  # the daemon's objects are never traversed: their pages stay shared
        _die_with_parent()
        with contextlib.suppress(ValueError):  # not on the main thread: no wakeup fd was set there
            signal.set_wakeup_fd(-1)  # the daemon's event loop's: a signal here must not wake it
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        report = orjson.dumps(dict(forecast(core, horizon_s=horizon_s).starts))
    except BaseException as error:
        report = _FAILED + f"{type(error).__name__}: {error}".encode()
        status = 1
    try:
        view = memoryview(report)
        while view:
            view = view[os.write(out, view):]
    finally:
        os._exit(status)


def _forked(core: SchedulerCore, horizon_s: float) -> Callable[[], Mapping[str, float]]:
    """Fork now (on the daemon's loop: the child sees the state between two callbacks); the returned
    work reads the child's report and reaps it."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns that a child of a threaded process may find a lock held by another thread:
        # this child takes none (it runs the simulation alone, logs nothing, and leaves with os._exit).
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        os.close(read_end)
        _child(core, horizon_s, write_end)
    os.close(write_end)

    def work() -> Mapping[str, float]:
        chunks = []
        try:
            while chunk := os.read(read_end, READ_CHUNK):
                chunks.append(chunk)
        finally:
            os.close(read_end)
            _, status = os.waitpid(pid, 0)
        report = b"".join(chunks)
        if report.startswith(_FAILED):
            raise RuntimeError(f"forecast process: {report[1:].decode(errors='replace')}")
        if not report:
            raise RuntimeError(f"forecast process ended without a result ({_exit_reason(status)})")
        starts: dict[str, float] = orjson.loads(report)
        return starts

    return work


def _exit_reason(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
