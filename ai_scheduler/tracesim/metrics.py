"""The figures of one trace simulation, computed from its records (`SimResult`) alone.

`summarize` turns a run into a `Summary`: waits and job completion times overall and per queue level,
group and user; the makespan; how many pods were placed, refused and never placed; the GPU allocation
and fragmentation as FGD reports them; Jain's fairness index across groups; and the longest wait.
`Summary.as_dict` flattens it into the JSON-able dictionary that the comparison (`report.compare`) and
objective expressions read, with the same keys in every run.

Design:

- Only the records are read (no scheduler, no engine), so a run written to disk and read back can be
  summarised the same way. Pods and samples are turned into numpy arrays once; every statistic is then
  an array operation, never a loop over samples.
- A figure that a run cannot give is None, never NaN and never a made-up zero: an empty `Stats` has
  `count` 0 and None for mean, p50, p95 and max; `alloc_at` is None when no sample arrived at that
  percentage; the time-weighted means are None in placement mode, where simulated time does not flow.
  A zero wait for a run that placed nothing would rank it first on waits; None says there is nothing.
- Percentiles are numpy's default (linear interpolation between the closest ranks).

Definitions (ratios are fractions, 0.0 to 1.0 and beyond, not percentages):

- wait = start - submit, for placed pods; JCT = end - submit, for pods that ended. A preempted pod's
  `start` is its last placement, so its wait runs up to the placement that held.
- makespan = the last end (timed mode; the last start if no pod ended) or the last start (placement
  mode), minus the first submit. None if no pod was placed.
- failed = the last sample's cumulative `failed` count (pods refused in placement mode); without
  samples, the never-placed pods in placement mode and 0 in timed mode. never_placed = pods whose
  `start` is None, whatever the mode.
- GPU allocation at a sample = allocated_gpu_milli / capacity_gpu_milli. `gpu_alloc_mean` is its
  time-weighted mean over the samples in timed mode: each sample's state holds from its time to the next
  sample's time (the last sample, the state at the end, weighs nothing; if all samples share one time,
  the last sample's value). `cpu_alloc_mean` is the same for CPU. `gpu_alloc_peak` is the highest and
  `gpu_alloc_final` the last sample's value (FGD's final allocation in placement mode).
- GPU utilisation (`gpu_util`, timed mode) = the GPU thousandth-seconds held by placed pods, each from
  its start to its end (or the last sample's time if still running), over capacity times the window from
  the first submit to the later of the last end and the last sample. It is computed from the pods, not
  the samples, so it checks the samples' allocation from the other side.
- `alloc_at(result, p)` (FGD's allocation ratio at an arrived workload of p percent): the mean
  allocation over the samples whose arrived GPU request, requested_gpu_milli / capacity_gpu_milli in
  percent, rounds (half up) to p. None if no sample does. The summary reports p = 100 and 130.
- `frag_at(result, p)`: FGD's fragmentation ratio, fragmentation_milli / capacity_gpu_milli, averaged
  over the same samples; `frag_mean` is its time-weighted mean (timed mode, as for the allocation).
- Jain's fairness index across groups: each group's service ratio x_g is the mean, over its placed pods
  with a duration, of run / (wait + run) (run = the pod's duration; a pod with wait + run = 0 counts
  1.0). Jain = (sum x_g)^2 / (n * sum x_g^2) over the n groups that have such pods: 1.0 when every group
  is served alike, 1/n when one group gets everything. A single group gives 1.0; all ratios zero give
  1.0 (all alike); no group with such pods gives None.
- longest wait: the largest wait of a placed pod, or of a pod never placed in timed mode, whose wait
  runs up to the last sample's time (it was still waiting when the run ended). In placement mode a pod
  never placed was refused at once and waited for nothing. `longest_wait_pod` names the pod (and
  `longest_wait_user` its user); `longest_wait_placed` says whether it was placed in the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ai_scheduler.tracesim.records import Mode, PodOutcome, SimResult

FloatArray = npt.NDArray[np.float64]

_K = TypeVar("_K")

ALLOC_POINTS = (100, 130)  # the arrived-workload percentages FGD reports the allocation ratio at


@dataclass(slots=True)
class Stats:
    """Mean, median, 95th percentile and maximum of some durations in seconds; None for each if empty."""

    mean: float | None
    p50: float | None
    p95: float | None
    max: float | None
    count: int

    @classmethod
    def of(cls, values: Sequence[float] | FloatArray) -> Stats:
        data = np.asarray(values, dtype=np.float64)
        if data.size == 0:
            return cls(mean=None, p50=None, p95=None, max=None, count=0)
        p50, p95 = np.percentile(data, [50.0, 95.0])
        return cls(
            mean=float(data.mean()),
            p50=float(p50),
            p95=float(p95),
            max=float(data.max()),
            count=int(data.size),
        )

    def as_dict(self, prefix: str) -> dict[str, float | int | None]:
        return {
            f"{prefix}_mean": self.mean,
            f"{prefix}_p50": self.p50,
            f"{prefix}_p95": self.p95,
            f"{prefix}_max": self.max,
            f"{prefix}_count": self.count,
        }


@dataclass(slots=True)
class Breakdown:
    """The waits and completion times of one slice of the pods (a queue level, a group, a user)."""

    pods: int
    placed: int
    wait: Stats
    jct: Stats

    def as_dict(self) -> dict[str, float | int | None]:
        return {
            "pods": self.pods,
            "placed": self.placed,
            **self.wait.as_dict("wait"),
            **self.jct.as_dict("jct"),
        }


@dataclass(slots=True)
class Summary:
    """The figures of one run; see the module docstring for each definition."""

    mode: Mode
    config: str
    nodes: int
    capacity_gpu_milli: int
    capacity_cpu: int
    pods: int
    placed: int
    failed: int
    never_placed: int
    finished: int
    running_at_end: int
    wait: Stats
    jct: Stats
    makespan: float | None
    gpu_alloc_mean: float | None
    gpu_alloc_peak: float | None
    gpu_alloc_final: float | None
    cpu_alloc_mean: float | None
    gpu_util: float | None
    alloc_at: dict[int, float | None]
    frag_at: dict[int, float | None]
    frag_mean: float | None
    jain_groups: float | None
    preemptions: int
    backfilled: int
    longest_wait: float | None
    longest_wait_pod: str
    longest_wait_user: str
    longest_wait_placed: bool
    wall_seconds: float
    by_level: dict[int, Breakdown] = field(default_factory=dict)
    by_group: dict[str, Breakdown] = field(default_factory=dict)
    by_user: dict[str, Breakdown] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Flat figures, then `levels`, `groups` and `users`: name -> that slice's flat figures.

        Always the same keys (None where a run has no value), JSON-able as is: level keys are strings.
        """
        out: dict[str, Any] = {
            "mode": str(self.mode),
            "config": self.config,
            "nodes": self.nodes,
            "capacity_gpu_milli": self.capacity_gpu_milli,
            "capacity_cpu": self.capacity_cpu,
            "pods": self.pods,
            "placed": self.placed,
            "failed": self.failed,
            "never_placed": self.never_placed,
            "finished": self.finished,
            "running_at_end": self.running_at_end,
            **self.wait.as_dict("wait"),
            **self.jct.as_dict("jct"),
            "makespan": self.makespan,
            "gpu_alloc_mean": self.gpu_alloc_mean,
            "gpu_alloc_peak": self.gpu_alloc_peak,
            "gpu_alloc_final": self.gpu_alloc_final,
            "cpu_alloc_mean": self.cpu_alloc_mean,
            "gpu_util": self.gpu_util,
        }
        out.update({f"alloc_at_{point}": value for point, value in self.alloc_at.items()})
        out.update({f"frag_at_{point}": value for point, value in self.frag_at.items()})
        out.update(
            {
                "frag_mean": self.frag_mean,
                "jain_groups": self.jain_groups,
                "preemptions": self.preemptions,
                "backfilled": self.backfilled,
                "longest_wait": self.longest_wait,
                "longest_wait_pod": self.longest_wait_pod,
                "longest_wait_user": self.longest_wait_user,
                "longest_wait_placed": self.longest_wait_placed,
                "wall_seconds": self.wall_seconds,
                "levels": {str(level): part.as_dict() for level, part in self.by_level.items()},
                "groups": {name: part.as_dict() for name, part in self.by_group.items()},
                "users": {name: part.as_dict() for name, part in self.by_user.items()},
            }
        )
        return out


@dataclass(slots=True)
class _PodArrays:
    """The pods' numbers as arrays, NaN where a pod has no start, end or duration."""

    submit: FloatArray
    start: FloatArray
    end: FloatArray
    duration: FloatArray
    gpu_milli: FloatArray

    @classmethod
    def of(cls, pods: Sequence[PodOutcome]) -> _PodArrays:
        nan = float("nan")
        return cls(
            submit=np.array([p.submit for p in pods], dtype=np.float64),
            start=np.array([nan if p.start is None else p.start for p in pods], dtype=np.float64),
            end=np.array([nan if p.end is None else p.end for p in pods], dtype=np.float64),
            duration=np.array([nan if p.duration is None else p.duration for p in pods], dtype=np.float64),
            gpu_milli=np.array([p.gpu_milli for p in pods], dtype=np.float64),
        )

    def take(self, index: npt.NDArray[np.intp]) -> _PodArrays:
        return _PodArrays(
            submit=self.submit[index],
            start=self.start[index],
            end=self.end[index],
            duration=self.duration[index],
            gpu_milli=self.gpu_milli[index],
        )

    @property
    def placed(self) -> npt.NDArray[np.bool_]:
        return ~np.isnan(self.start)

    @property
    def waits(self) -> FloatArray:
        placed = self.placed
        return self.start[placed] - self.submit[placed]

    @property
    def jcts(self) -> FloatArray:
        ended = ~np.isnan(self.end)
        return self.end[ended] - self.submit[ended]


@dataclass(slots=True)
class _SampleArrays:
    """The samples' numbers as arrays, in time order (stable, so events at one time keep their order)."""

    time: FloatArray
    requested_gpu: FloatArray
    allocated_gpu: FloatArray
    allocated_cpu: FloatArray
    fragmentation: FloatArray
    failed: npt.NDArray[np.int64]

    @classmethod
    def of(cls, result: SimResult) -> _SampleArrays:
        samples = result.samples
        time = np.array([s.time for s in samples], dtype=np.float64)
        order = np.argsort(time, kind="stable")
        return cls(
            time=time[order],
            requested_gpu=np.array([s.requested_gpu_milli for s in samples], dtype=np.float64)[order],
            allocated_gpu=np.array([s.allocated_gpu_milli for s in samples], dtype=np.float64)[order],
            allocated_cpu=np.array([s.allocated_cpu for s in samples], dtype=np.float64)[order],
            fragmentation=np.array([s.fragmentation_milli for s in samples], dtype=np.float64)[order],
            failed=np.array([s.failed for s in samples], dtype=np.int64)[order],
        )


def _ratio(values: FloatArray, capacity: int) -> FloatArray | None:
    return None if capacity <= 0 else values / float(capacity)


def time_weighted_mean(times: FloatArray, values: FloatArray) -> float | None:
    """The mean of a step function: values[i] holds from times[i] to times[i + 1] (times sorted).

    The last value weighs nothing (nothing follows it); if no time passes at all, the last value.
    None for no values.
    """
    if values.size == 0:
        return None
    spans = np.diff(times)
    total = float(spans.sum())
    if total <= 0.0:
        return float(values[-1])
    return float(np.dot(values[:-1], spans) / total)


def _at_percent(requested: FloatArray, values: FloatArray, capacity: int, percent: int) -> float | None:
    if capacity <= 0 or requested.size == 0:
        return None
    chosen = np.floor(requested * 100.0 / capacity + 0.5) == percent  # rounded half up
    if not chosen.any():
        return None
    return float(values[chosen].mean() / capacity)


def alloc_at(result: SimResult, percent: int) -> float | None:
    """FGD's allocation ratio when the arrived GPU request is `percent` % of capacity (see module)."""
    arrays = _SampleArrays.of(result)
    return _at_percent(arrays.requested_gpu, arrays.allocated_gpu, result.capacity_gpu_milli, percent)


def frag_at(result: SimResult, percent: int) -> float | None:
    """FGD's fragmentation ratio when the arrived GPU request is `percent` % of capacity (see module)."""
    arrays = _SampleArrays.of(result)
    return _at_percent(arrays.requested_gpu, arrays.fragmentation, result.capacity_gpu_milli, percent)


def service_ratios(pods: Sequence[PodOutcome]) -> FloatArray:
    """run / (wait + run) of each placed pod with a duration (1.0 where wait + run is 0)."""
    arrays = _PodArrays.of(pods)
    usable = arrays.placed & ~np.isnan(arrays.duration)
    run = arrays.duration[usable]
    total = arrays.start[usable] - arrays.submit[usable] + run
    ratios = np.ones_like(run)
    np.divide(run, total, out=ratios, where=total > 0)
    return ratios


def jain_index(values: Sequence[float] | FloatArray) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2); 1.0 if all are zero, None if there are none."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return None
    squares = float(np.dot(data, data))
    if squares == 0.0:
        return 1.0
    return float(data.sum() ** 2 / (data.size * squares))


def jain_groups(pods: Sequence[PodOutcome]) -> float | None:
    """Jain's index of the groups' mean service ratios (see the module docstring)."""
    by_group = _split(pods, lambda pod: pod.group)
    means = [
        float(ratios.mean())
        for ratios in (service_ratios(members) for members in by_group.values())
        if ratios.size
    ]
    return jain_index(means)


def _split(pods: Iterable[PodOutcome], key: Callable[[PodOutcome], _K]) -> dict[_K, list[PodOutcome]]:
    parts: dict[_K, list[PodOutcome]] = {}
    for pod in pods:
        parts.setdefault(key(pod), []).append(pod)
    return parts


def _breakdown(pods: Sequence[PodOutcome]) -> Breakdown:
    arrays = _PodArrays.of(pods)
    return Breakdown(
        pods=len(pods),
        placed=int(arrays.placed.sum()),
        wait=Stats.of(arrays.waits),
        jct=Stats.of(arrays.jcts),
    )


def _makespan(result: SimResult, arrays: _PodArrays) -> float | None:
    if not arrays.placed.any():
        return None
    ended = ~np.isnan(arrays.end)
    last = arrays.end[ended].max() if result.mode is Mode.TIMED and ended.any() else np.nanmax(arrays.start)
    return float(last - arrays.submit.min())


def _gpu_util(result: SimResult, arrays: _PodArrays, samples: _SampleArrays) -> float | None:
    if result.mode is not Mode.TIMED or result.capacity_gpu_milli <= 0 or not arrays.placed.any():
        return None
    ended = ~np.isnan(arrays.end)
    horizon = max(
        float(arrays.end[ended].max()) if ended.any() else float(np.nanmax(arrays.start)),
        float(samples.time[-1]) if samples.time.size else float("-inf"),
    )
    window = horizon - float(arrays.submit.min())
    if window <= 0.0:
        return None
    placed = arrays.placed
    held = np.where(np.isnan(arrays.end[placed]), horizon, arrays.end[placed]) - arrays.start[placed]
    return float(np.dot(arrays.gpu_milli[placed], held) / (result.capacity_gpu_milli * window))


def _longest_wait(
    result: SimResult, arrays: _PodArrays, samples: _SampleArrays
) -> tuple[float | None, PodOutcome | None]:
    waits = arrays.start - arrays.submit  # NaN for the pods never placed
    if result.mode is Mode.TIMED and samples.time.size:
        waits = np.where(arrays.placed, waits, samples.time[-1] - arrays.submit)
    if waits.size == 0 or np.isnan(waits).all():
        return None, None
    index = int(np.nanargmax(waits))
    return float(waits[index]), result.pods[index]


def summarize(result: SimResult) -> Summary:
    """The figures of one run (see the module docstring for their definitions)."""
    pods = result.pods
    arrays = _PodArrays.of(pods)
    samples = _SampleArrays.of(result)
    placed = arrays.placed
    never_placed = int((~placed).sum())
    if samples.failed.size:
        failed = int(samples.failed[-1])
    else:
        failed = never_placed if result.mode is Mode.PLACEMENT else 0

    gpu = _ratio(samples.allocated_gpu, result.capacity_gpu_milli)
    cpu = _ratio(samples.allocated_cpu, result.capacity_cpu)
    frag = _ratio(samples.fragmentation, result.capacity_gpu_milli)
    timed = result.mode is Mode.TIMED
    longest, longest_pod = _longest_wait(result, arrays, samples)

    return Summary(
        mode=result.mode,
        config=result.config,
        nodes=result.nodes,
        capacity_gpu_milli=result.capacity_gpu_milli,
        capacity_cpu=result.capacity_cpu,
        pods=len(pods),
        placed=int(placed.sum()),
        failed=failed,
        never_placed=never_placed,
        finished=int((~np.isnan(arrays.end)).sum()),
        running_at_end=int((placed & np.isnan(arrays.end)).sum()) if timed else 0,
        wait=Stats.of(arrays.waits),
        jct=Stats.of(arrays.jcts),
        makespan=_makespan(result, arrays),
        gpu_alloc_mean=time_weighted_mean(samples.time, gpu) if timed and gpu is not None else None,
        gpu_alloc_peak=float(gpu.max()) if gpu is not None and gpu.size else None,
        gpu_alloc_final=float(gpu[-1]) if gpu is not None and gpu.size else None,
        cpu_alloc_mean=time_weighted_mean(samples.time, cpu) if timed and cpu is not None else None,
        gpu_util=_gpu_util(result, arrays, samples),
        alloc_at={
            point: _at_percent(samples.requested_gpu, samples.allocated_gpu, result.capacity_gpu_milli, point)
            for point in ALLOC_POINTS
        },
        frag_at={
            point: _at_percent(samples.requested_gpu, samples.fragmentation, result.capacity_gpu_milli, point)
            for point in ALLOC_POINTS
        },
        frag_mean=time_weighted_mean(samples.time, frag) if timed and frag is not None else None,
        jain_groups=jain_groups(pods),
        preemptions=result.preemptions,
        backfilled=sum(1 for pod in pods if pod.backfilled),
        longest_wait=longest,
        longest_wait_pod=longest_pod.name if longest_pod else "",
        longest_wait_user=longest_pod.user if longest_pod else "",
        longest_wait_placed=longest_pod is not None and longest_pod.start is not None,
        wall_seconds=result.wall_seconds,
        by_level={
            level: _breakdown(members)
            for level, members in sorted(_split(pods, lambda pod: pod.level).items())
        },
        by_group={
            name: _breakdown(members) for name, members in sorted(_split(pods, lambda pod: pod.group).items())
        },
        by_user={
            name: _breakdown(members) for name, members in sorted(_split(pods, lambda pod: pod.user).items())
        },
    )
