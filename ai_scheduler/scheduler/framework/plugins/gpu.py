"""GPUs: the filter and device choice for managed GPUs, and the GPU scores.

Managed GPUs (node label `ai-scheduler.io/gpu-managed`) are assigned by us:
`ai-scheduler.io/gpu-count` takes whole devices, chosen so that NVLink islands
(HiveD's cells) stay whole: from the most fragmented island that can hold the
request, then by PCIe closeness; `ai-scheduler.io/gpu-memory` takes a share of
one device, by best fit (the device left with the least free memory), never
on a device that a whole-GPU pod holds; `ai-scheduler.io/gpu-fraction` is such
a share too, of the fraction of each device's own memory (cache/gpus.py), so
best fit weighs every device by what the pod would take of it.

GPUBinpack fills partly used nodes and devices first (for managed GPUs and
device-plugin `nvidia.com/gpu` alike), so that whole nodes stay free for large
gangs; GPUAvoidance keeps GPU-less pods off GPU nodes when they can go elsewhere.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gpus import (
    GPU_MEMORY_ANNOTATION,
    Device,
    GpuRequest,
    gpu_request,
    nvlink_islands,
    share_need,
)
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.quantity import format_units
from ai_scheduler.scheduler.framework.interface import (
    ALL_ROWS,
    MAX_NODE_SCORE,
    NO_OPINION,
    PER_NODE,
    DevicePicker,
    Reasons,
    ScorePlugin,
    StaticResults,
    Window,
)

DEVICE_PLUGIN_GPU = "nvidia.com/gpu"
NOT_MANAGED = "node(s) didn't have GPUs managed by ai-scheduler"
NO_REPORT = "node(s) had no GPU report"
MALFORMED = "node(s) had malformed GPU report"
STALE = "node(s) had stale GPU report"
NO_WHOLE = "Insufficient free GPUs"
NO_MEMORY = "Insufficient GPU memory"


class GpuFilter(DevicePicker):
    name = "GPU"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if gpu_request(pod)[0] is None else PER_NODE

    def __init__(
        self, staleness: float, *, spread: bool = False, clock: Callable[[], float] = time.time
    ) -> None:
        self.staleness = staleness
        self.spread = spread  # a profile that spreads GPU work also takes the emptiest device for a share
        self._clock = clock

    def prefilter(self, pod: PodRecord, cache: SchedulerCache) -> str:
        """Reject at once what no node could take: a malformed request, or more memory than any GPU has."""
        request, error = gpu_request(pod)
        if error:
            return error
        largest = cache.gpus.largest_device
        if request is not None and request.memory and largest and request.memory > largest:
            return (
                f"{GPU_MEMORY_ANNOTATION} {format_units('memory', request.memory)} is more than any GPU "
                f"has (largest {format_units('memory', largest)})"
            )
        return ""

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        request, _ = gpu_request(pod)
        if request is None:
            return []
        g = cache.gpus
        managed, healthy, missing = g.managed[window], g.healthy[window], g.missing[window]
        stale = self._clock() - g.updated[window] > self.staleness
        usable = managed & healthy & ~stale
        if request.count:
            short = usable & (g.whole_free[window].sum(axis=1) < request.count)
            shortage = NO_WHOLE
        elif request.fraction:
            fits = (g.share_free[window] >= share_need(request, g.total[window])).any(axis=1)
            short = usable & ~fits
            shortage = NO_MEMORY
        else:
            short = usable & (g.share_free[window].max(axis=1) < request.memory)
            shortage = NO_MEMORY
        return [
            (NOT_MANAGED, ~managed),
            (NO_REPORT, managed & missing),
            (MALFORMED, managed & ~missing & ~healthy),
            (STALE, managed & healthy & stale),
            (shortage, short),
        ]

    def pick(
        self, pod: PodRecord, cache: SchedulerCache, row: int, prefer: int | None = None
    ) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The devices for the pod on the chosen node (empty for pods without managed GPUs): whole devices
        by NVLink islands (`choose_whole`), a share on `prefer` when it fits there, else by best fit (worst
        fit for the spread policy)."""
        request, _ = gpu_request(pod)
        if request is None:
            return (), ()
        g = cache.gpus
        devices = {d.index: d for d in g.devices(row) if not d.error}
        if request.count:
            free = [i for i in sorted(devices) if g.whole_free[row, i]]
            chosen = choose_whole(devices, free, request.count)
        else:
            need = share_need(request, g.total[row])
            if prefer is not None and prefer in devices and g.share_free[row, prefer] >= need[prefer]:
                chosen = (prefer,)
            else:
                chosen = ((worst_fit if self.spread else best_fit)(g.share_free[row], need),)
        return chosen, tuple(devices[i].uuid for i in chosen)


def _spread_cost(devices: dict[int, Device], group: tuple[int, ...]) -> int:
    return sum(devices[a].rank_to(b) for a, b in itertools.combinations(group, 2))


def closest_group(devices: dict[int, Device], pool: list[int], count: int) -> tuple[int, ...]:
    """`count` devices of `pool` closest to each other (NVLink, then PCIe), lowest indices on ties."""
    if len(pool) <= count:
        return tuple(pool)
    if len(pool) <= 12:
        return min(itertools.combinations(pool, count), key=lambda g: (_spread_cost(devices, g), g))
    best: tuple[int, ...] | None = None
    for start in pool:  # greedy growth from each start; exact search is too large past a dozen devices
        group = [start]
        while len(group) < count:
            rest = [i for i in pool if i not in group]
            group.append(min(rest, key=lambda i: (sum(devices[i].rank_to(j) for j in group), i)))
        candidate = tuple(sorted(group))
        if best is None or (_spread_cost(devices, candidate), candidate) < (
            _spread_cost(devices, best),
            best,
        ):
            best = candidate
    assert best is not None
    return best


def choose_whole(devices: dict[int, Device], free: list[int], count: int) -> tuple[int, ...]:
    """HiveD-style: take from the most fragmented NVLink island that can hold the request, so that
    larger free islands stay whole; spread over islands by PCIe closeness only when none can."""
    free_set = set(free)
    blocks = [[i for i in island if i in free_set] for island in nvlink_islands(devices)]
    fitting = [block for block in blocks if len(block) >= count]
    if fitting:
        block = min(fitting, key=lambda b: (len(b), b))
        return closest_group(devices, block, count)
    return closest_group(devices, free, count)


def best_fit(share_free: np.ndarray, memory: int | np.ndarray) -> int:
    """The device left with the least free memory after taking `memory` (per device, for a fraction; lowest
    index on ties)."""
    leftover = np.where(share_free >= memory, share_free - memory, np.iinfo(np.int64).max)
    return int(np.argmin(leftover))


def worst_fit(share_free: np.ndarray, memory: int | np.ndarray) -> int:
    """The device left with the most free memory (for the spread policy)."""
    leftover = np.where(share_free >= memory, share_free - memory, -1)
    return int(np.argmax(leftover))


class GpuBinpack(ScorePlugin):
    """Fill partly used GPUs first: best fit for shares, the fullest node for whole and device-plugin GPUs."""

    name = "GPUBinpack"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return PER_NODE

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        request, _ = gpu_request(pod)
        if request is not None:
            return self._managed(request, cache, rows)
        wanted = pod.requests.get(DEVICE_PLUGIN_GPU, 0)
        col = cache.column(DEVICE_PLUGIN_GPU)
        if not wanted or col < 0:
            return None
        allocatable = cache.allocatable[rows, col]
        after = np.minimum(cache.requested[rows, col] + wanted, allocatable)
        return np.where(allocatable > 0, after * MAX_NODE_SCORE // np.maximum(allocatable, 1), 0)

    def score_one(self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults) -> int | None:
        # Device-plugin GPUs in Python numbers (managed ones: `score` over the one row).
        request, _ = gpu_request(pod)
        if request is not None:
            return super().score_one(pod, cache, row, static)
        wanted = pod.requests.get(DEVICE_PLUGIN_GPU, 0)
        col = cache.column(DEVICE_PLUGIN_GPU)
        if not wanted or col < 0:
            return None
        allocatable = int(cache.allocatable[row, col])
        if allocatable <= 0:
            return 0
        return min(int(cache.requested[row, col]) + wanted, allocatable) * MAX_NODE_SCORE // allocatable

    @staticmethod
    def _managed(request: GpuRequest, cache: SchedulerCache, rows: np.ndarray) -> np.ndarray:
        g = cache.gpus
        if request.count:
            devices = (g.total[rows] > 0).sum(axis=1)
            used_after = np.minimum(devices - g.whole_free[rows].sum(axis=1) + request.count, devices)
            return np.where(devices > 0, used_after * MAX_NODE_SCORE // np.maximum(devices, 1), 0)
        free = g.share_free[rows]
        need = share_need(request, g.total[rows]) if request.fraction else request.memory
        leftover = np.where(free >= need, free - need, np.iinfo(np.int64).max)
        best = leftover.min(axis=1)
        scale = max(g.largest_device, 1)
        device_fit = MAX_NODE_SCORE - np.minimum(best, scale) * MAX_NODE_SCORE // scale
        # Second criterion: when the best device is a fresh one everywhere, open it on the busiest node,
        # so that shares do not end up scattered over every node.
        devices = np.maximum((g.total[rows] > 0).sum(axis=1), 1)
        node_used = (devices - g.whole_free[rows].sum(axis=1)) * MAX_NODE_SCORE // devices
        scores: np.ndarray = (9 * device_fit + node_used) // 10
        return scores


def wants_gpus(pod: PodRecord) -> bool:
    """Whether the pod asks for GPUs: device-plugin `nvidia.com/gpu` or managed GPUs (whole or a share)."""
    return bool(pod.requests.get(DEVICE_PLUGIN_GPU)) or gpu_request(pod)[0] is not None


def gpu_nodes(cache: SchedulerCache, rows: np.ndarray, allocatable: np.ndarray | None = None) -> np.ndarray:
    """Which of `rows` have GPUs: managed ones, or device-plugin `nvidia.com/gpu` in allocatable.

    `allocatable`: the rows' lines of `cache.allocatable`, when the caller has them already.
    """
    col = cache.column(DEVICE_PLUGIN_GPU)
    if col < 0:
        has_gpus = np.zeros(rows.shape[0], dtype=bool)
    else:
        has_gpus = (cache.allocatable[rows, col] if allocatable is None else allocatable[:, col]) > 0
    if cache.gpus.nodes:  # some node is managed (most clusters have none: no need to read the column)
        has_gpus |= cache.gpus.managed[rows]
    return has_gpus


def gpu_node(cache: SchedulerCache, row: int, allocatable: list[int]) -> bool:
    """`gpu_nodes` of one row (`allocatable`: its line of `cache.allocatable`, as a list)."""
    col = cache.column(DEVICE_PLUGIN_GPU)
    if col >= 0 and allocatable[col] > 0:
        return True
    return bool(cache.gpus.nodes) and bool(cache.gpus.managed[row])


class GpuAvoidance(ScorePlugin):
    """A pod that needs no GPU prefers nodes without GPUs, leaving GPU nodes to GPU work."""

    name = "GPUAvoidance"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if wants_gpus(pod) else ""

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        if wants_gpus(pod):
            return None
        has_gpus = gpu_nodes(cache, rows)
        if not has_gpus.any() or has_gpus.all():
            return None  # nothing to choose between: 0 (or 100) everywhere ranks the nodes as no score does
        return np.where(has_gpus, 0, MAX_NODE_SCORE)


class GpuSpread(GpuBinpack):
    """The opposite of GPUBinpack: GPU pods go to the emptiest nodes and devices (isolation over packing)."""

    name = "GPUSpread"

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        packed = super().score(pod, cache, rows, static)
        return None if packed is None else MAX_NODE_SCORE - packed

    def score_one(self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults) -> int | None:
        packed = super().score_one(pod, cache, row, static)
        return None if packed is None else MAX_NODE_SCORE - packed
