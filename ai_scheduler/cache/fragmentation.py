"""GPU fragmentation as the FGD paper measures it, over all node rows at once.

FGD (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent", USENIX ATC'23) asks, for a node n and a task shape m (cpu, memory and a GPU request
in thousandths of a GPU: a share d < 1000 of one device, or k whole devices), which of n's unallocated
GPU capacity m could not use. That is the fragment F_n(m):

- all of n's free GPU capacity when m does not fit on n at all (too little cpu or memory, no device
  with d free, fewer than k wholly free devices), and when m asks no GPU (it can use none of it);
- otherwise the free capacity of the devices m cannot use: for a share d, the devices whose free part
  is below d; for whole devices, the free part of the devices that are partly used.

Both cases are one formula: with d the per-device need (the share, or 1000 for whole devices), the
devices with at least d free are usable, and F_n(m) is the free capacity outside them. A node's
expected fragmentation is sum_m p_m F_n(m), p_m the popularity of shape m in the workload; FGD places
a pod where that expectation grows least, and on that node on the device where it grows least.

Everything here is arrays: per-device free thousandths as a (rows, devices) int array (-1 where there
is no usable device), free cpu (millicores) and memory (bytes) per row, and a few dozen shapes. The
per-shape work groups shapes by their per-device need (G distinct needs, G <= S shapes), so the cost
of a placement is a handful of (rows, devices, G) array operations: it grows with the cluster only
inside numpy. A share's effect on each device is exact (each device tried, as FGD does): replacing
device j's free part changes only j's term of the sums, which is what `placement` computes for all
rows and devices at once.

`typical_shapes` is FGD's own target workload ("typical pods", its simulator's `GetTypicalPods` with the
artifact's settings): the pods of a workload known up front, counted by exact cpu and GPU request (memory
is not part of FGD's measure), CPU-only pods included, each pod weighing one; the most popular shapes
(count first, then larger cpu, then larger GPU request) are kept until they cover 95% of the pods, and
their counts renormalised into probabilities.

`ShapeDistribution` learns the shapes from what the scheduler sees: a bounded table of shape keys
(GPU thousandths, cpu and memory rounded up to three significant bits) with exponentially decayed
counts (a half-life in observations), the least popular key evicted when a new one arrives at the
cap. The same functions serve the score plugin (scheduler/framework/plugins/gpu_fragmentation.py) and a
simulator's metrics (`fragmentation`, the cluster total in GPU thousandths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MILLI = 1000  # thousandths of a GPU in one device
NO_DEVICE = -1


@dataclass(frozen=True, slots=True)
class PodShape:
    """A pod as fragmentation sees it: cpu millicores, memory bytes, GPU thousandths (k*1000 for k whole
    devices, below 1000 for a share of one, 0 for none)."""

    cpu: int = 0
    memory: int = 0
    gpu: int = 0


@dataclass(slots=True)
class Shapes:
    """Shapes as parallel arrays, with their probabilities (summing to 1)."""

    cpu: np.ndarray
    memory: np.ndarray
    gpu: np.ndarray
    prob: np.ndarray
    # What every evaluation against these shapes reads of them, worked out once (the arrays are not
    # changed once made): `needs`, `reserve`, `multi_gpu`.
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def needs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shapes' distinct per-device needs, each shape's index into them and its device count."""
        if "needs" not in self._derived:
            self._derived["needs"] = _needs(self.gpu)
        needs: tuple[np.ndarray, np.ndarray, np.ndarray] = self._derived["needs"]
        return needs

    def reserve(self) -> Reserve:
        """`whole_gpu_reserve` of these shapes."""
        if "reserve" not in self._derived:
            self._derived["reserve"] = whole_gpu_reserve(self)
        reserve: Reserve = self._derived["reserve"]
        return reserve

    def multi_gpu(self) -> tuple[np.ndarray, np.ndarray]:
        """`multi_gpu_shapes` of these shapes."""
        if "multi_gpu" not in self._derived:
            self._derived["multi_gpu"] = multi_gpu_shapes(self)
        multi: tuple[np.ndarray, np.ndarray] = self._derived["multi_gpu"]
        return multi

    def distance(self, other: Shapes) -> float:
        """The total variation distance between the two distributions: half the sum over all shapes of
        either of the difference in probability (0 for the same shapes with the same probabilities, 1
        for distributions with no shape in common). A few dozen shapes, once per snapshot."""
        mine: dict[tuple[int, int, int], float] = dict(zip(self.keys(), self.prob.tolist(), strict=True))
        theirs: dict[tuple[int, int, int], float] = dict(zip(other.keys(), other.prob.tolist(), strict=True))
        keys = mine.keys() | theirs.keys()
        return 0.5 * sum(abs(mine.get(key, 0.0) - theirs.get(key, 0.0)) for key in keys)

    def keys(self) -> list[tuple[int, int, int]]:
        return list(zip(self.gpu.tolist(), self.cpu.tolist(), self.memory.tolist(), strict=True))

    @classmethod
    def of(cls, shapes: list[PodShape], weights: list[float] | None = None) -> Shapes:
        """Shapes from a list (equally likely unless `weights` are given)."""
        w = np.ones(len(shapes)) if weights is None else np.asarray(weights, dtype=np.float64)
        return cls(
            cpu=np.array([s.cpu for s in shapes], dtype=np.int64),
            memory=np.array([s.memory for s in shapes], dtype=np.int64),
            gpu=np.array([s.gpu for s in shapes], dtype=np.int64),
            prob=w / w.sum() if w.sum() > 0 else w,
        )

    def __len__(self) -> int:
        return int(self.gpu.shape[0])


TYPICAL_COVER = 0.95  # FGD's podPopularityThreshold: the typical shapes cover 95% of the pods


def typical_shapes(pods: list[PodShape], cover: float = TYPICAL_COVER) -> Shapes:
    """FGD's typical pods of a workload (see the module docstring): exact (cpu, GPU) shapes by
    popularity until they cover `cover` of the pods, memory left out (0), probabilities renormalised."""
    if not pods:
        return Shapes.of([])
    keys = np.array([(s.cpu, s.gpu) for s in pods], dtype=np.int64)
    unique, counts = np.unique(keys, axis=0, return_counts=True)
    # Most popular first; ties by larger cpu, then larger GPU request (FGD's reversed order).
    order = np.lexsort((-unique[:, 1], -unique[:, 0], -counts))
    unique, counts = unique[order], counts[order]
    cumulative = np.cumsum(counts)
    keep = min(int(np.searchsorted(cumulative, cover * len(pods), side="left")) + 1, len(counts))
    kept = counts[:keep].astype(np.float64)
    return Shapes(cpu=unique[:keep, 0].copy(), memory=np.zeros(keep, dtype=np.int64),
                  gpu=unique[:keep, 1].copy(), prob=kept / kept.sum())


def bucket(value: int) -> int:
    """`value` rounded up to three significant bits (at most 25% more): nearby requests share a key."""
    if value <= 0:
        return 0
    shift = max(value.bit_length() - 3, 0)
    return ((value + (1 << shift) - 1) >> shift) << shift


@dataclass(slots=True)
class ShapeDistribution:
    """The popularity of recent pod shapes: decayed counts per shape key, at most `max_shapes` keys.

    Each observation adds a weight that grows by 2**(1/half_life) per observation, which is the same as
    decaying all older counts by that factor without touching them; the weights are rescaled before
    they overflow. Keys keep their first-seen order, so the arrays (and every sum over them) come out in
    the same order for the same history.
    """

    max_shapes: int = 32
    half_life: float = 2000.0  # observations after which a count weighs half
    _keys: dict[tuple[int, int, int], int] = field(default_factory=dict)
    _cpu: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _memory: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _gpu: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _weight: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    _scale: float = 1.0
    _cached: Shapes | None = None

    def __post_init__(self) -> None:
        if self.max_shapes < 1 or self.half_life <= 0:
            raise ValueError("max_shapes must be at least 1 and half_life positive")
        self._cpu = np.zeros(self.max_shapes, dtype=np.int64)
        self._memory = np.zeros(self.max_shapes, dtype=np.int64)
        self._gpu = np.zeros(self.max_shapes, dtype=np.int64)
        self._weight = np.zeros(self.max_shapes, dtype=np.float64)

    def __len__(self) -> int:
        return len(self._keys)

    @staticmethod
    def key(shape: PodShape) -> tuple[int, int, int]:
        return shape.gpu, bucket(shape.cpu), bucket(shape.memory)

    def observe(self, shape: PodShape, count: float = 1.0) -> None:
        """Count one pod (or `count`) of this shape."""
        self._scale *= 2.0 ** (1.0 / self.half_life)
        if self._scale > 1e100:  # rescale before the weights overflow
            self._weight /= self._scale
            self._scale = 1.0
        key = self.key(shape)
        index = self._keys.get(key)
        if index is None:
            if len(self._keys) < self.max_shapes:
                index = len(self._keys)
            else:  # evict the least popular key (the first of them on ties)
                index = int(np.argmin(self._weight))
                del self._keys[next(k for k, i in self._keys.items() if i == index)]
                self._weight[index] = 0.0
            self._keys[key] = index
            self._gpu[index], self._cpu[index], self._memory[index] = key
        self._weight[index] += count * self._scale
        self._cached = None

    def shapes(self) -> Shapes:
        """The known shapes and their probabilities (empty arrays before any observation)."""
        if self._cached is None:
            n = len(self._keys)
            weight = self._weight[:n]
            total = weight.sum()
            self._cached = Shapes(
                cpu=self._cpu[:n].copy(),
                memory=self._memory[:n].copy(),
                gpu=self._gpu[:n].copy(),
                prob=weight / total if total > 0 else weight.copy(),
            )
        return self._cached


def free_thousandths(share_free: np.ndarray, whole_free: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Per device, its free part in thousandths (the GpuTable's bytes: share_free / total), -1 where there
    is no device or it is held whole. A wholly free device is exactly 1000; a partly used one at most
    999, so that only wholly free devices count for whole-GPU requests. Rounded to the nearest
    thousandth, as the shares' own thousandths are (`share_thousandths`)."""
    present = (total > 0) & (share_free >= 0)
    part = (share_free * MILLI + total // 2) // np.maximum(total, 1)
    part = np.minimum(part, MILLI - 1)
    out: np.ndarray = np.where(whole_free & present, MILLI, np.where(present, part, NO_DEVICE))
    return out


def weigh(matrix: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Each row of `matrix` (the last axis) weighted by `weights` and summed, row by row: a row's sum
    does not depend on the other rows evaluated with it (a matrix product may sum in another order for
    another number of rows, and a last-bit difference would flip a tie), so a row evaluated alone or in
    a batch gives the same figure to the bit (the plugin keeps evaluations per row)."""
    out: np.ndarray = (matrix * weights).sum(axis=-1)
    return out


def _needs(gpu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct per-device needs of the shapes, each shape's index into them, and its device count."""
    per_device = np.minimum(gpu, MILLI)
    needs, index = np.unique(per_device, return_inverse=True)
    count = np.where(gpu >= MILLI, gpu // MILLI, 1)
    return needs, index.reshape(-1), count


@dataclass(slots=True)
class _State:
    """What every shape's fragment reads of the rows: free capacity, usable devices and their fragment."""

    free: np.ndarray  # (R, D) as given, -1 for none
    clipped: np.ndarray  # (R, D) free, 0 for none
    total: np.ndarray  # (R,) free thousandths
    usable_mask: np.ndarray  # (R, G, D) device has the need free
    usable: np.ndarray  # (R, G) such devices
    fit_fragment: np.ndarray  # (R, G) free capacity outside them


def _state(free: np.ndarray, needs: np.ndarray) -> _State:
    clipped = np.maximum(free, 0)
    total = clipped.sum(axis=1)
    usable_mask = free[:, None, :] >= np.maximum(needs, 1)[None, :, None]
    usable = usable_mask.sum(axis=2)
    fit_fragment = total[:, None] - (clipped[:, None, :] * usable_mask).sum(axis=2)
    return _State(free, clipped, total, usable_mask, usable, fit_fragment)


def _fragments(
    usable: np.ndarray,
    fit_fragment: np.ndarray,
    total: np.ndarray,
    resources_fit: np.ndarray,
    shapes: Shapes,
    index: np.ndarray,
    count: np.ndarray,
) -> np.ndarray:
    """F_n(m) for every row (any leading axes) and shape (last axis): the capacity outside the usable
    devices where m fits, all free capacity where it does not or asks no GPU."""
    fits = resources_fit & (shapes.gpu > 0) & (usable[..., index] >= count)
    out: np.ndarray = np.where(fits, fit_fragment[..., index], total[..., None])
    return out


def _resources_fit(free_cpu: np.ndarray, free_memory: np.ndarray, shapes: Shapes) -> np.ndarray:
    """(R, S): the shape's cpu and memory fit the row's free cpu and memory."""
    cpu_fit = free_cpu[:, None] >= shapes.cpu[None, :]
    fit: np.ndarray = cpu_fit & (free_memory[:, None] >= shapes.memory[None, :])
    return fit


def fragment_matrix(
    free: np.ndarray, free_cpu: np.ndarray, free_memory: np.ndarray, shapes: Shapes
) -> np.ndarray:
    """(rows, shapes): F_n(m) in GPU thousandths for each row n and shape m."""
    needs, index, count = shapes.needs()
    state = _state(free, needs)
    return _fragments(
        state.usable, state.fit_fragment, state.total, _resources_fit(free_cpu, free_memory, shapes),
        shapes, index, count,
    )


def expected_fragmentation(
    free: np.ndarray, free_cpu: np.ndarray, free_memory: np.ndarray, shapes: Shapes
) -> np.ndarray:
    """(rows,): sum_m p_m F_n(m), each row's expected fragment in GPU thousandths."""
    if not len(shapes):
        return np.zeros(free.shape[0])
    out: np.ndarray = weigh(fragment_matrix(free, free_cpu, free_memory, shapes), shapes.prob)
    return out


def fragmentation(free: np.ndarray, free_cpu: np.ndarray, free_memory: np.ndarray, shapes: Shapes) -> float:
    """The cluster's expected fragmentation: the rows' sum, in GPU thousandths (1000 = one GPU)."""
    return float(expected_fragmentation(free, free_cpu, free_memory, shapes).sum())


def share_thousandths(fraction_units: int, units_per_device: int) -> int:
    """A fraction of a device (in `units_per_device` units) as thousandths, rounded, at least 1."""
    return max((fraction_units * MILLI + units_per_device // 2) // units_per_device, 1)


@dataclass(slots=True)
class Placement:
    """The effect of placing one pod on each row: `before` and `after` expected fragmentation (after is
    inf where the pod's GPU request does not fit the row), their difference `delta`, and the device a
    share would take (the one where the fragmentation grows least, the lowest index on ties; -1 for
    whole devices and pods without GPUs)."""

    before: np.ndarray
    after: np.ndarray
    device: np.ndarray
    # For a share: (rows, devices) expected fragmentation after placing it on each device (inf where
    # it does not fit); None for other pods.
    per_device: np.ndarray | None = None

    @property
    def delta(self) -> np.ndarray:
        out: np.ndarray = self.after - self.before
        return out


def placement(
    free: np.ndarray,
    free_cpu: np.ndarray,
    free_memory: np.ndarray,
    shapes: Shapes,
    pod: PodShape,
    share: np.ndarray | int | None = None,
) -> Placement:
    """Expected fragmentation of every row before and after placing `pod` there.

    `share`: for a share pod, the thousandths it takes on each device ((rows, devices), for memory
    requests that weigh differently on devices of different sizes), `pod.gpu` by default. Whole-GPU
    pods take wholly free devices, all alike; pods without GPUs change only cpu and memory.
    """
    rows, width = free.shape
    needs, index, count = shapes.needs()
    state = _state(free, needs)
    fit_before = _resources_fit(free_cpu, free_memory, shapes)
    before = _fragments(state.usable, state.fit_fragment, state.total, fit_before, shapes, index, count)
    before_e = weigh(before, shapes.prob) if len(shapes) else np.zeros(rows)
    fit_after = _resources_fit(free_cpu - pod.cpu, free_memory - pod.memory, shapes)
    no_device = np.full(rows, NO_DEVICE, dtype=np.int64)
    if pod.gpu <= 0 or pod.gpu >= MILLI:
        k = pod.gpu // MILLI
        whole = (free >= MILLI).sum(axis=1)
        ok = whole >= k
        usable = state.usable - np.where(needs > 0, k, 0)[None, :]
        total = state.total - k * MILLI
        after = _fragments(usable, state.fit_fragment, total, fit_after, shapes, index, count)
        after_e = weigh(after, shapes.prob) if len(shapes) else np.zeros(rows)
        return Placement(before_e, np.where(ok, after_e, np.inf), no_device)
    x = np.broadcast_to(np.asarray(pod.gpu if share is None else share, dtype=np.int64), (rows, width))
    ok = (free >= 0) & (free >= x)
    # Only the (row, device) pairs where the share fits are evaluated: M pairs, M <= R x D (padding and
    # full devices cost nothing). Device j's terms of the sums are replaced by its state after the share.
    pair_row, pair_dev = np.nonzero(ok)
    taken = x[pair_row, pair_dev]  # (M,)
    left = free[pair_row, pair_dev] - taken  # (M,): the device's free part once the share is on it
    floor = np.maximum(needs, 1)[None, :]
    mask_after = left[:, None] >= floor  # (M, G)
    mask_before = state.usable_mask[pair_row, :, pair_dev]  # (M, G)
    usable = state.usable[pair_row] + mask_after.astype(np.int64) - mask_before
    fit_fragment = (
        state.fit_fragment[pair_row]
        - taken[:, None]
        + state.clipped[pair_row, pair_dev][:, None] * mask_before
        - np.maximum(left, 0)[:, None] * mask_after
    )
    total = state.total[pair_row] - taken
    after = _fragments(usable, fit_fragment, total, fit_after[pair_row], shapes, index, count)
    per_device = np.full((rows, width), np.inf)
    if len(shapes):
        per_device[pair_row, pair_dev] = weigh(after, shapes.prob)
    else:
        per_device[pair_row, pair_dev] = 0.0
    device = np.argmin(per_device, axis=1)
    after_e = per_device[np.arange(rows), device]
    return Placement(before_e, after_e, np.where(np.isfinite(after_e), device, NO_DEVICE), per_device)


@dataclass(frozen=True, slots=True)
class Reserve:
    """What the workload's whole-GPU shapes need beside their GPUs, one entry per shape: cpu (millicores)
    and memory (bytes) per GPU, and the shape's weight (its probability times its GPUs, normalised: the
    share of the GPUs the workload asks that the shape asks). A node whose free cpu or memory falls below
    its wholly free GPUs times a shape's need strands GPUs for that shape (`stranding`)."""

    cpu: np.ndarray
    memory: np.ndarray
    weight: np.ndarray
    # For cpu and memory, where some shape needs it: the need per GPU as a (1, K) row (1 where a shape
    # needs none, so that the division is defined) and, unless every shape needs it, which shapes do.
    parts: tuple[tuple[np.ndarray, np.ndarray | None, int], ...] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = []
        for column, per_gpu in enumerate((self.cpu, self.memory)):
            need = per_gpu > 0
            if need.any():
                per = np.where(need, per_gpu, 1.0)[None, :]
                parts.append((per, None if need.all() else need[None, :], column))
        object.__setattr__(self, "parts", tuple(parts))

    @property
    def any(self) -> bool:
        return bool(((self.cpu > 0) | (self.memory > 0)).any())

    def mean(self) -> tuple[float, float]:
        """The weighted mean cpu and memory per GPU: what a GPU of the workload needs beside it."""
        return float(self.cpu @ self.weight), float(self.memory @ self.weight)


def whole_gpu_reserve(shapes: Shapes, min_share: float = 0.002) -> Reserve:
    """The cpu and memory per GPU of each whole-GPU shape with at least `min_share` of the workload,
    weighted by the GPUs it asks (empty without whole-GPU shapes)."""
    pick = (shapes.gpu >= MILLI) & (shapes.prob >= min_share)
    gpus = shapes.gpu[pick] / MILLI
    weight = shapes.prob[pick] * gpus
    total = weight.sum()
    return Reserve(shapes.cpu[pick] / gpus, shapes.memory[pick] / gpus,
                   weight / total if total > 0 else weight)


def stranding(
    whole_free: np.ndarray, free_cpu: np.ndarray, free_memory: np.ndarray, reserve: Reserve
) -> np.ndarray:
    """(rows,): expected GPU thousandths whose cpu or memory is gone. For each shape of the reserve, the
    shortfall of free cpu (memory) below `whole_free` GPUs times its need per GPU, counted in GPUs of
    that need (the larger of the two, at most `whole_free`); weighted over the shapes. A node that keeps
    enough for the most demanding shape strands nothing; one that keeps enough only for the light
    shapes strands part of its GPUs, by how much of the workload would find them short."""
    whole = whole_free[:, None].astype(np.float64)  # (R, 1)
    stranded: np.ndarray | None = None  # (R, K), every entry at least 0
    for per, need, column in reserve.parts:
        free = free_cpu if column == 0 else free_memory
        short = whole * per
        short -= np.maximum(free, 0)[:, None]
        np.maximum(short, 0.0, out=short)
        short /= per
        np.minimum(short, whole, out=short)
        if need is not None:  # 0 for the shapes that do not need it
            short *= need
        stranded = short if stranded is None else np.maximum(stranded, short, out=stranded)
    if stranded is None:
        return np.zeros(whole_free.shape[0])
    out: np.ndarray = weigh(stranded, reserve.weight) * MILLI
    return out


# ------------------------------------------------------------------------------- NVLink islands
def island_counts(whole_free: np.ndarray, island: np.ndarray) -> np.ndarray:
    """(rows, islands): the wholly free devices of each island, the island named by its lowest device
    index (`GpuTable.island`; -1 for no device), so column i counts island i (0 where no island is i)."""
    ids = np.arange(island.shape[1])
    member = (island[:, :, None] == ids[None, None, :]) & whole_free[:, :, None]
    counts: np.ndarray = member.sum(axis=1)
    return counts


def multi_gpu_shapes(shapes: Shapes) -> tuple[np.ndarray, np.ndarray]:
    """The device counts (k >= 2) of the whole multi-GPU shapes and their probabilities."""
    multi = shapes.gpu >= 2 * MILLI
    return shapes.gpu[multi] // MILLI, shapes.prob[multi]


def split_islands(counts: np.ndarray, ks: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """(rows,): expected GPU thousandths that multi-GPU shapes could use only across NVLink islands.

    For a shape of k devices (probability p) on a row with at least k wholly free devices: the wholly
    free devices outside the islands that hold k of them, each a device the shape would reach only over
    PCIe. FGD counts a row with fewer than k as all fragment for the shape already, so it adds nothing.
    """
    if not ks.shape[0]:
        return np.zeros(counts.shape[0])
    whole = counts.sum(axis=1)[:, None]  # (R, 1)
    inside = (counts[:, :, None] * (counts[:, :, None] >= ks[None, None, :])).sum(axis=1)  # (R, K)
    split = np.where(whole >= ks[None, :], whole - inside, 0)
    out: np.ndarray = weigh(split, probs) * MILLI
    return out


def take_whole(counts: np.ndarray, k: int) -> np.ndarray:
    """Island counts once k whole devices are taken the way GPUFilter takes them (`choose_whole`): from
    the island with the fewest free devices that holds k (the lowest on ties); when none does, from the
    smallest islands up (the filter then goes by PCIe closeness, which the counts do not know)."""
    after = counts.copy()
    fits = counts >= k
    inside = fits.any(axis=1)
    pick = np.where(fits, counts, np.iinfo(np.int64).max).argmin(axis=1)
    rows = np.flatnonzero(inside)
    after[rows, pick[rows]] -= k
    span = np.flatnonzero(~inside)
    if span.size:
        sub = counts[span]
        order = np.argsort(np.where(sub > 0, sub, np.iinfo(np.int64).max), axis=1, kind="stable")
        ordered = np.take_along_axis(sub, order, axis=1)
        taken = np.clip(k - (np.cumsum(ordered, axis=1) - ordered), 0, ordered)
        np.put_along_axis(sub, order, ordered - taken, axis=1)
        after[span] = sub
    return after
