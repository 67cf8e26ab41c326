"""What a trace simulation produces: one outcome per pod, one sample per event, and the run's totals.

The engine (engine.py) fills these as it drives the scheduling core; the metrics (metrics.py) and the
reports (report.py) read them and nothing else, so that a run can be summarised, written and compared
without the scheduler that made it.

Units are the scheduler's: CPU in millicores, memory in bytes, GPUs in thousandths of one device
(`gpu_milli`, as FGD counts them: 1000 per whole device, a share's part of its device), time in
simulated seconds from the start of the trace.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Mode(enum.StrEnum):
    TIMED = "timed"  # arrivals at submit time, departures when the run time ends
    PLACEMENT = "placement"  # each pod tried once, in file order, never leaving (FGD's method)


@dataclass(slots=True)
class PodOutcome:
    """One pod of the workload: who asked, for what, and what the simulation did with it.

    `start` is when it was placed (None: never); `end` when it left (None: still running at the end,
    or never placed, or placement mode). `level` is its queue's level (lower is served first).
    `preemptions` counts the times it was preempted (each one sends it back to the queue);
    `backfilled` says it was placed on nodes held by a starvation reservation for another pod.
    `devices` are the managed GPUs (indices on `node`) it was given, for GPU requests by annotation.
    `reason` is the last Unschedulable message of a pod never placed.
    """

    name: str
    submit: float
    duration: float | None
    user: str
    group: str
    queue: str
    level: int
    gpu_milli: int
    cpu: int
    memory: int
    start: float | None = None
    end: float | None = None
    node: str = ""
    devices: tuple[int, ...] = ()
    attempts: int = 0
    preemptions: int = 0
    backfilled: bool = False
    reason: str = ""

    @property
    def wait(self) -> float | None:
        return None if self.start is None else self.start - self.submit

    @property
    def jct(self) -> float | None:
        """Job completion time: from submission to the end of the run."""
        return None if self.end is None else self.end - self.submit


@dataclass(slots=True)
class Sample:
    """The cluster after one simulated event (an arrival, a departure, a scheduling pass).

    Counts are cumulative from the start (`arrived`, `placed`, `failed`; `failed` counts pods refused
    in placement mode, where a pod is tried once); `requested_*` sum what the arrived pods ask for,
    `allocated_*` what the pods placed and not yet gone hold now; `fragmentation_milli` is FGD's
    fragmentation of the whole cluster now (GPU thousandths that the expected pod shapes cannot use).
    """

    time: float
    arrived: int
    placed: int
    failed: int
    running: int
    requested_gpu_milli: int
    requested_cpu: int
    allocated_gpu_milli: int
    allocated_cpu: int
    fragmentation_milli: float


@dataclass(slots=True)
class SimResult:
    """One run: its mode, the config it used, the cluster's capacity, and what happened."""

    mode: Mode
    config: str  # the config file's name ("default" for the shipped one)
    nodes: int
    capacity_gpu_milli: int
    capacity_cpu: int
    pods: list[PodOutcome] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    preemptions: int = 0
    wall_seconds: float = 0.0
