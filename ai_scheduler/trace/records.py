"""What a workload trace holds once read: jobs (one per pod), the rows that could not be read, and why.

A trace row describes one pod, or one job that the reader splits into the pods of a gang (Philly and
Helios list jobs of many GPUs, not pods). Every format is read into the same `TraceJob`, in the units the
scheduler uses (millicores, bytes, whole devices), so that the simulator never knows which format a job
came from.

A GPU request takes one of three forms, as the scheduler's annotations do (docs/users/gpus.md):
`gpus` whole devices, `gpu_fraction` of one device whatever its model, or `gpu_memory` bytes of one
device. At most one of them is set; `TraceJob` refuses anything else, so a reader that builds a job from
a bad row gets a ValueError with the reason, which it reports as that row's problem.

A row that cannot be read is never dropped silently and never stops the reader: it becomes a `Problem`
(its row number and the reason) in `Workload.problems`, beside the jobs that could be read. Errors that
make the whole file unreadable (no header, a header of no known format) raise `TraceError`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MILLI = 1000  # thousandths of a GPU, the unit of FGD's figures and of Alibaba's gpu_milli


class TraceError(ValueError):
    """A file that cannot be read as a trace or a cluster at all (its header, its structure)."""


class TraceFormat(enum.Enum):
    """The trace formats understood; the value is the name `read_workload(format=...)` takes."""

    GENERIC = "generic"
    ALIBABA = "alibaba"
    PHILLY = "philly"
    HELIOS = "helios"


class JobStatus(enum.Enum):
    """How the job ended (or stood) in the trace it comes from; UNKNOWN where the trace does not say."""

    UNKNOWN = "unknown"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    KILLED = "killed"
    TIMEOUT = "timeout"


# The words the traces use, lowercased: Philly's Pass/Killed/Failed, Helios' (Slurm's) COMPLETED/CANCELLED/
# FAILED/TIMEOUT/NODE_FAIL, Alibaba's pod phases Pending/Running/Succeeded/Failed, and our own names.
_STATUS_WORDS: dict[str, JobStatus] = {
    **{status.value: status for status in JobStatus},
    "pass": JobStatus.SUCCEEDED,
    "passed": JobStatus.SUCCEEDED,
    "completed": JobStatus.SUCCEEDED,
    "success": JobStatus.SUCCEEDED,
    "cancelled": JobStatus.KILLED,
    "canceled": JobStatus.KILLED,
    "node_fail": JobStatus.FAILED,
    "error": JobStatus.FAILED,
    "queued": JobStatus.PENDING,
}


def parse_status(text: str) -> JobStatus:
    """The status a trace's word stands for (any case); UNKNOWN for a word none of the traces uses."""
    return _STATUS_WORDS.get(text.strip().lower(), JobStatus.UNKNOWN)


class GpuKind(enum.Enum):
    """Which of the three forms of GPU request a job makes, if any."""

    NONE = "none"
    WHOLE = "whole"  # `gpus` whole devices
    FRACTION = "fraction"  # `gpu_fraction` of one device
    MEMORY = "memory"  # `gpu_memory` bytes of one device


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One pod of a workload, in the scheduler's units.

    `submit_time` is in seconds from the start of the trace; `duration` and `estimate` (the user's guess
    of the run time) in seconds, None when the trace does not give them. `trace_wait` is the queueing
    delay the trace recorded (its start time less its submit time), for comparing a simulation with what
    happened. `row` is the line of the file the job was read from (the header is line 1); the pods a job
    is split into share it. `gang_size` is 0 for a pod of no gang. `gpu_models` lists the GPU models the
    pod accepts (the value of the node label `nvidia.com/gpu.product`); empty means any. `clone_of` names
    the job that `inflate` copied, empty for a job of the trace.
    """

    name: str
    submit_time: float
    duration: float | None = None
    cpu: int = 0  # millicores
    memory: int = 0  # bytes
    gpus: int = 0  # whole devices
    gpu_fraction: float = 0.0  # of one device, in (0, 1]
    gpu_memory: int = 0  # bytes of one device
    gpu_models: tuple[str, ...] = ()
    gang: str = ""
    gang_size: int = 0
    user: str = ""
    group: str = ""
    namespace: str = ""
    queue: str = ""
    priority: int = 0
    estimate: float | None = None
    task_type: str = ""
    workload_class: str = ""
    status: JobStatus = JobStatus.UNKNOWN
    trace_wait: float | None = None
    row: int = 0
    clone_of: str = ""
    # The Pod itself, as a replayable log recorded it (tracesim/replay.py): `pod_of` starts from it
    # instead of building one from the fields above, which then only describe it for the metrics.
    manifest: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a job needs a name")
        _check_time("submit_time", self.submit_time)
        for label, seconds in (("duration", self.duration), ("estimate", self.estimate),
                               ("trace_wait", self.trace_wait)):
            if seconds is not None:
                _check_time(label, seconds)
        for label, amount in (("cpu", self.cpu), ("memory", self.memory), ("gpus", self.gpus),
                              ("gpu_memory", self.gpu_memory), ("gang_size", self.gang_size)):
            if amount < 0:
                raise ValueError(f"{label} must not be negative, got {amount}")
        if not (self.gpu_fraction == 0 or 0 < self.gpu_fraction <= 1):  # also refuses NaN
            raise ValueError(f"gpu_fraction must be above 0 and at most 1, got {self.gpu_fraction}")
        forms = [label for label, amount in (("gpus", self.gpus), ("gpu_fraction", self.gpu_fraction),
                                             ("gpu_memory", self.gpu_memory)) if amount]
        if len(forms) > 1:
            raise ValueError(f"set only one of gpus, gpu_fraction and gpu_memory, got {' and '.join(forms)}")
        if self.gang_size and not self.gang:
            raise ValueError("gang_size given without a gang name")

    @property
    def gpu_kind(self) -> GpuKind:
        if self.gpus:
            return GpuKind.WHOLE
        if self.gpu_fraction:
            return GpuKind.FRACTION
        if self.gpu_memory:
            return GpuKind.MEMORY
        return GpuKind.NONE

    def gpu_milli(self, device_memory: int | None = None) -> int:
        """The GPU request in thousandths of a GPU, as FGD counts it: 1000 per whole device, a fraction's
        thousandths (at least 1), and a memory share as its part of a device of `device_memory` bytes
        (at most 1000). A memory share needs `device_memory`: the request alone does not say what part of
        a device it is."""
        if self.gpus:
            return self.gpus * MILLI
        if self.gpu_fraction:
            return max(round(self.gpu_fraction * MILLI), 1)
        if self.gpu_memory:
            if not device_memory or device_memory <= 0:
                raise ValueError(f"job {self.name!r} asks for GPU memory: give the device memory to count it")
            return min(math.ceil(self.gpu_memory * MILLI / device_memory), MILLI)
        return 0


def _check_time(label: str, seconds: float) -> None:
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{label} must be a finite number of seconds, at least 0, got {seconds}")


@dataclass(frozen=True, slots=True)
class Problem:
    """A row that was not read: its line in the file (the header is line 1) and why."""

    row: int
    message: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.message}"


@dataclass(slots=True)
class Workload:
    """The jobs read from one trace file, in file order, and the rows that could not be read."""

    format: TraceFormat
    source: Path
    jobs: list[TraceJob] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
