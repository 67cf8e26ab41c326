"""GPUFragmentation: FGD's score, the growth of expected GPU fragmentation, over a learned workload.

Each pod the plugin scores is counted once (by uid) in a `ShapeDistribution` (cache/fragmentation.py):
the recent popularity of pod shapes, which stands for the workload FGD's target distribution describes.
A node's score is the negated increase of its expected fragmentation, sum_m p_m F_n(m), that placing
the pod causes, scaled to [0, 100] over the candidate nodes: the node(s) where it grows least get 100,
any other at most 99, so that the plugin's own best is never blurred into a tie by rounding. Before
any history the pod's own shape is the distribution.

The rows' state is read from the cache as arrays: managed GPUs from the GPU table (free part of each
device in thousandths, see `free_thousandths`), device-plugin GPUs (`nvidia.com/gpu`) as that many
wholly free devices, and free cpu and memory from the allocatable and requested columns.

`FGDScore` is FGD as its own artifact runs it (hkust-adsl/kubernetes-scheduler-simulator,
pkg/simulator/plugin/fgd_score.go with pkg/utils/frag.go), for comparisons with the paper:

- the target workload is FGD's "typical pods" (`typical_shapes`): taken up front from a workload known
  before the run, as FGD's simulator does from the pods it is given (`set_target`; the trace simulator
  hands over the original pods, clones excluded); exact cpu and GPU request, no memory. Without a
  target (the daemon knows no workload up front) it learns shapes online as GPUFragmentation does;
- the score is FGD's: sigmoid(fragmentation decrease in GPUs) x 100, truncated to an integer and not
  normalised over the candidates, so that nodes whose decrease differs by a few hundredths of a GPU tie
  and the framework's tie-break decides. FGD's runs break ties by the smallest node name (its simulator
  builds on a fork of kube-scheduler 1.20.5 whose selectHost does so "for reproducibility"), which is
  `scheduling.tieBreak: nodeOrder` over a node list in name order: a fixed first-fit order, which keeps
  the nodes late in it whole (benchmarks/RESULTS.md: 95.3% at alloc@130 on openb, 90.1% with random
  ties);
- on the chosen node a share takes the first device of the best such integer score.

`FGDScoreCoupled` is that absolute score over GPUFragmentationCoupled's measure (below), shapes learned
online: a node's score reads only that node (PER_NODE), unlike the normalised scores of the others.

Beyond FGD, three choices, each measurable on its own:

- `couple_cpu` ("GPUFragmentationCoupled"): cpu and memory stay with GPUs. Each learned whole-GPU
  shape says how much cpu and memory a GPU needs beside it (`whole_gpu_reserve`); a placement that
  leaves a node's free cpu or memory below its wholly free GPUs times a shape's need strands GPUs for
  that shape, and the expected stranded GPU thousandths it adds, weighted over the shapes by the GPUs
  they ask (`stranding`), count as fragmentation. Per shape rather than one need for all: a node that
  keeps cores for the light shapes but not for the heavy ones strands part of its GPUs, not all or
  none (a single need, the heaviest shape's, measured 0.1 to 0.6 points lower on openb and on the
  synthetic workload; benchmarks/RESULTS.md). A pod without GPUs also pays a small part
  (`cpu_only_penalty`) of the GPUs its cpu and memory would reserve (at the shapes' mean need) on a
  node with free GPUs, so that CPU-only work goes to nodes without free GPUs first.
- `islands` (also "GPUFragmentationCoupled"): NVLink islands stay whole for multi-GPU pods. For each
  learned shape of k >= 2 devices, the wholly free devices of a node outside the islands that still
  hold k of them count as fragmentation (the shape would reach them only over PCIe), before and after
  the placement; whole devices are taken from islands as GPUFilter takes them (the smallest island
  that holds the request), so the score sees the island the pod will really use.
- Ties: the increase is rounded to a millionth of a GPU before scaling, so that nodes whose state is
  the same score the same whatever the order of the sums, and the framework's tie-break
  (`scheduling.tieBreak`: `nodeOrder` takes the first node of the table, `random` one at random)
  decides between them. On the chosen node a share takes the device where the fragmentation grows
  least, the lowest index on ties (`Placement.device`, handed to GPUFilter's pick through
  `preferred_device`), as FGD does; whole devices keep GPUFilter's NVLink-island choice.

What a pod's evaluation costs (a handful of (rows, devices, needs) array operations over every candidate
row) is paid once per pod shape and row state, not once per pod. A row's evaluation reads only that
row's state (free GPU thousandths, free cpu and memory, device sizes and islands), the pod's shape and
the shapes measured against, so the plugin keeps it (`Evaluations`, kept_evaluations.py): per pod shape,
each row's before, after and device, stamped with the cache's `row_version` of the row (which moves
whenever the row's allocatable, requests or GPUs change). Only rows whose version moved since the
shape's last evaluation have their state read and are evaluated again: after one placement, one row.
Their state is read at the cluster's device width (`device_width`), so that rows read alone or together
line up. The learned shapes are the other input; they would change at every pod (each
observation decays every count), so the plugin measures against a snapshot of them (`shapes_for`) that
it takes again once a quarter of the observations so far came after it, at least every observation and
at most every `refresh` (1,024): exactly the learned shapes while few pods are known, at most about a
thousand observations behind once the distribution is settled (its half-life is 2,000). A new snapshot
is taken only when the learned shapes moved more than `tolerance` (5%, total variation,
`Shapes.distance`) from the one measured against, and only then drops every kept evaluation; a target
given up front never changes. Each
row's figures are sums of its own terms only (`weigh`), so a row evaluated alone or with others gives
the same figure to the bit, and the same decisions (tests/unit/cache/test_fragmentation.py compares
both pod by pod). After a placement, the row that moved usually holds a state that another row held
when it was evaluated (nodes of one kind, used alike): for a few rows at a time the plugin also keeps
evaluations by the row's state itself (`row_key`; kept_evaluations.py's `by_state`), which makes a gang
member's rescoring on the fast path a lookup instead of dozens of numpy calls.

Gangs. The framework tells the plugin of every pod that reaches the scores (`learn`, which counts it),
whichever path scores it, and a gang's attempt holds the snapshot (`hold`: no new one until the attempt
ends): the gang fast path scores a member shape once for all its members, the per-member path once per
member, and both must score alike (tests/unit/scheduler/test_gang_shapes.py). For the same reason
`preferred_device` reads the chosen row's evaluation (kept, or made then) rather than what the last
scoring found: on the fast path that scoring was another member's.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.fragmentation import (
    MILLI,
    NO_DEVICE,
    Placement,
    PodShape,
    Reserve,
    ShapeDistribution,
    Shapes,
    free_thousandths,
    island_counts,
    placement,
    share_thousandths,
    split_islands,
    stranding,
    take_whole,
)
from ai_scheduler.cache.gpus import FRACTION_UNITS, gpu_request
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    PER_NODE,
    DevicePreference,
    StaticResults,
)
from ai_scheduler.scheduler.framework.plugins.gpu import DEVICE_PLUGIN_GPU, gpu_node, gpu_nodes, wants_gpus
from ai_scheduler.scheduler.framework.plugins.kept_evaluations import (
    FEW_ROWS,
    Evaluated,
    Evaluations,
    PodKey,
)

ROUNDING = 1e-3  # thousandths of a GPU: increases closer than a millionth of a GPU tie
SEEN_UIDS = 4096  # pods remembered so that a pod scored again is not counted twice
REFRESH = 1024  # observations between two snapshots of the learned shapes, at most (`shapes_for`)
TOLERANCE = 0.05  # a new snapshot is taken only when the learned shapes moved more than this (`distance`)


def pod_shape(pod: PodRecord, largest_device: int = 0) -> PodShape:
    """The pod's shape: cpu, memory and its GPUs in thousandths (managed or device-plugin). A memory share
    counts as its part of the largest device known (of one whole GPU when none is)."""
    cpu = pod.requests.get("cpu", 0)
    memory = pod.requests.get("memory", 0)
    request, _ = gpu_request(pod)
    if request is None:
        return PodShape(cpu, memory, pod.requests.get(DEVICE_PLUGIN_GPU, 0) * MILLI)
    if request.count:
        return PodShape(cpu, memory, request.count * MILLI)
    if request.fraction:
        return PodShape(cpu, memory, min(share_thousandths(request.fraction, FRACTION_UNITS), MILLI))
    if not largest_device:
        return PodShape(cpu, memory, MILLI)
    return PodShape(cpu, memory, min(-(-request.memory * MILLI // largest_device), MILLI))


def device_width(cache: SchedulerCache) -> int:
    """Devices per row that `row_state` reads at: the GPU table's width, or more device-plugin GPUs."""
    col = cache.column(DEVICE_PLUGIN_GPU)
    width = cache.gpus.total.shape[1]
    return width if col < 0 else max(width, int(cache.allocatable[:, col].max(initial=0)))


def row_state(
    cache: SchedulerCache, rows: np.ndarray, width: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free GPU thousandths per device (rows, at least `width` devices), free cpu and free memory of
    `rows`."""
    g = cache.gpus
    free = free_thousandths(g.share_free[rows], g.whole_free[rows], g.total[rows])
    col = cache.column(DEVICE_PLUGIN_GPU)
    if col >= 0:
        plugin_free = np.maximum(cache.allocatable[rows, col] - cache.requested[rows, col], 0)
        width = max(free.shape[1], width, int(plugin_free.max(initial=0)))
        if width > free.shape[1]:
            pad = np.full((free.shape[0], width - free.shape[1]), NO_DEVICE, dtype=free.dtype)
            free = np.hstack([free, pad])
        has_plugin = plugin_free > 0
        slots = np.arange(width)[None, :] < plugin_free[:, None]
        free = np.where(has_plugin[:, None] & ~cache.gpus.managed[rows, None],
                        np.where(slots, MILLI, NO_DEVICE), free)
    free_cpu = cache.allocatable[rows, 0] - cache.requested[rows, 0]
    free_memory = cache.allocatable[rows, 1] - cache.requested[rows, 1]
    return free, free_cpu, free_memory


def row_key(cache: SchedulerCache, row: int) -> tuple[bytes, ...]:
    """Everything an evaluation reads of `row` (`row_state`, `share_need`, the islands), as bytes: two
    rows with the same key evaluate alike (kept_evaluations.py's `by_state`)."""
    g = cache.gpus
    return (g.share_free[row].tobytes(), g.whole_free[row].tobytes(), g.total[row].tobytes(),
            g.island[row].tobytes(), g.managed[row].tobytes(), cache.allocatable[row].tobytes(),
            cache.requested[row].tobytes())


def share_need(pod: PodRecord, cache: SchedulerCache, rows: np.ndarray) -> np.ndarray | None:
    """For a memory share, its thousandths on each device of `rows` (None for other pods)."""
    request, _ = gpu_request(pod)
    if request is None or not request.memory:
        return None
    total = cache.gpus.total[rows]
    need: np.ndarray = np.where(total > 0, -(-request.memory * MILLI // np.maximum(total, 1)), MILLI + 1)
    return need


class GpuFragmentation(DevicePreference):
    """FGD: prefer the node whose expected GPU fragmentation grows least, and on it the device where it
    grows least (see the module docstring)."""

    name = "GPUFragmentation"

    def __init__(
        self,
        weight: int,
        *,
        couple_cpu: bool = False,
        islands: bool = False,
        max_shapes: int = 32,
        half_life: float = 2000.0,
        cpu_only_penalty: float = 0.1,
        refresh: int = REFRESH,
        tolerance: float = TOLERANCE,
        keep: bool = True,
    ) -> None:
        super().__init__(weight)
        self.couple_cpu = couple_cpu
        self.islands = islands
        self.cpu_only_penalty = cpu_only_penalty
        self.distribution = ShapeDistribution(max_shapes=max_shapes, half_life=half_life)
        self.target: Shapes | None = None  # a target workload given up front (`set_target`)
        self.refresh = max(refresh, 1)
        self.tolerance = tolerance
        self.keep = keep  # keep evaluations per row state (False: evaluate every row for every pod)
        self._observed = 0
        self._snapshot: Shapes | None = None  # the learned shapes measured against (`shapes_for`)
        self._next_snapshot = 0
        self._evaluations = Evaluations()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._held = False  # a gang's attempt: no new snapshot of the learned shapes (`hold`)

    def learn(self, pod: PodRecord, cache: SchedulerCache) -> None:
        self.observe(pod, pod_shape(pod, cache.gpus.largest_device))

    def hold(self, held: bool) -> None:
        self._held = held

    def observe(self, pod: PodRecord, shape: PodShape) -> None:
        """Count the pod in the learned distribution, once per uid."""
        uid = pod.uid or f"{pod.namespace}/{pod.name}"
        if uid in self._seen:
            self._seen.move_to_end(uid)
            return
        self._seen[uid] = None
        if len(self._seen) > SEEN_UIDS:
            self._seen.popitem(last=False)
        self.distribution.observe(shape)
        self._observed += 1

    def set_target(self, shapes: Shapes) -> None:
        """Measure against these shapes from now on, instead of the learned ones."""
        self.target = shapes if len(shapes) else None
        self._evaluations.clear()

    def shapes_for(self, shape: PodShape) -> Shapes:
        """The target shapes when given, else a snapshot of the learned ones (taken again once a quarter
        of the observations so far, at least 1 and at most `refresh`, came after it, but not while held;
        see the module), or the pod's own before any history."""
        if self.target is not None:
            return self.target
        if not len(self.distribution):
            return Shapes.of([shape])
        if self._snapshot is None or (self._observed >= self._next_snapshot and not self._held):
            snapshot = self.distribution.shapes()
            self._next_snapshot = self._observed + min(max(self._observed // 4, 1), self.refresh)
            if self._snapshot is None or snapshot.distance(self._snapshot) > self.tolerance:
                self._snapshot = snapshot
                self._evaluations.clear()  # what they were measured against changed
        return self._snapshot

    def evaluate(self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray) -> Placement:
        """Expected fragmentation of `rows` before and after the pod (with the coupling, when on): kept
        per row state (see the module), evaluated for the rows whose state moved."""
        key, shape, shapes = self._measured(pod, cache)
        if not self.keep:
            return self._evaluate(pod, cache, rows, shapes, shape, *row_state(cache, rows))
        width = device_width(cache)
        versions = cache.row_version
        evaluations = self._evaluations
        kept, stale = evaluations.stale(key, rows, cache, versions, width)
        if stale.any():
            sub = rows[stale]
            states: list[tuple[bytes, ...]] = []
            if sub.shape[0] <= FEW_ROWS:  # a few rows: those whose state was evaluated before are kept
                missed = []
                for row in sub.tolist():
                    state = self._by_state(key, kept, cache, row, int(versions[row]))
                    if state is not None:
                        missed.append(row)
                        states.append(state)
                sub = np.array(missed, dtype=np.intp)
            if sub.shape[0]:
                part = self._evaluate(pod, cache, sub, shapes, shape, *row_state(cache, sub, width))
                kept.store(sub, versions[sub], part)
                for row, state in zip(sub.tolist(), states, strict=False):
                    evaluations.keep_by_state(key, state, kept.row(row))
        return kept.placement(rows)

    def _measured(self, pod: PodRecord, cache: SchedulerCache) -> tuple[PodKey, PodShape, Shapes]:
        """The pod's key for kept evaluations, its shape (counted in the learned ones) and the shapes
        measured against."""
        shape = pod_shape(pod, cache.gpus.largest_device)
        self.observe(pod, shape)
        shapes = self.shapes_for(shape)
        request, _ = gpu_request(pod)
        key = (shape.cpu, shape.memory, shape.gpu, request.memory if request is not None else 0,
               cache.gpus.largest_device)
        return key, shape, shapes

    def evaluate_one(self, pod: PodRecord, cache: SchedulerCache, row: int) -> tuple[float, float]:
        """`evaluate` of one row, (before, after): read in Python numbers when the row's evaluation is kept
        at its version or by its state (a gang member's rescoring, gang_shapes.py), else evaluated."""
        if self.keep:
            key, _, _ = self._measured(pod, cache)
            versions = cache.row_version
            kept = self._evaluations.kept(key, cache, versions.shape[0], device_width(cache))
            version = int(versions[row])
            if int(kept.stamp[row]) == version or self._by_state(key, kept, cache, row, version) is None:
                return float(kept.before[row]), float(kept.after[row])
        result = self.evaluate(pod, cache, np.array([row], dtype=np.intp))
        return float(result.before[0]), float(result.after[0])

    def _by_state(
        self, key: PodKey, kept: Evaluated, cache: SchedulerCache, row: int, version: int
    ) -> tuple[bytes, ...] | None:
        """Take `row`'s evaluation kept by its state, if there is one (None), else its state (`row_key`),
        for the evaluation to come to be kept under."""
        state = row_key(cache, row)
        found = self._evaluations.by_state(key, state)
        if found is None:
            return state
        kept.store_one(row, version, found)
        return None

    def _evaluate(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        rows: np.ndarray,
        shapes: Shapes,
        shape: PodShape,
        free: np.ndarray,
        free_cpu: np.ndarray,
        free_memory: np.ndarray,
    ) -> Placement:
        result = placement(free, free_cpu, free_memory, shapes, shape, share_need(pod, cache, rows))
        if self.couple_cpu:
            reserve = shapes.reserve()
            if reserve.any:
                self._couple(result, free, free_cpu, free_memory, shape, reserve)
        if self.islands:
            ks, probs = shapes.multi_gpu()
            # A row whose devices are one island (its id, the lowest device index, is 0) splits nothing:
            # its term is 0 before and after, so rows that are all such need no figures of islands.
            if ks.shape[0] and bool((cache.gpus.island[rows] > 0).any()):
                self._split(result, cache, rows, free, shape, ks, probs)
        return result

    @staticmethod
    def _split(
        result: Placement,
        cache: SchedulerCache,
        rows: np.ndarray,
        free: np.ndarray,
        shape: PodShape,
        ks: np.ndarray,
        probs: np.ndarray,
    ) -> None:
        """Add the GPUs that multi-GPU shapes could reach only across NVLink islands, before and after
        the placement (whole devices taken as GPUFilter takes them; a share takes its device out of its
        island's wholly free ones). Device-plugin GPUs and nodes without NVLink are one island each."""
        island = cache.gpus.island[rows]
        if island.shape[1] < free.shape[1]:
            pad = np.full((island.shape[0], free.shape[1] - island.shape[1]), -1, dtype=island.dtype)
            island = np.hstack([island, pad])
        island = np.where((island < 0) & (free >= 0), 0, island[:, : free.shape[1]])
        whole = free >= MILLI
        counts = island_counts(whole, island)
        if shape.gpu >= MILLI:
            after = take_whole(counts, shape.gpu // MILLI)
        elif shape.gpu > 0:
            after = counts.copy()
            index = np.arange(rows.shape[0])
            device = np.maximum(result.device, 0)
            opened = np.flatnonzero((result.device != NO_DEVICE) & whole[index, device])
            np.subtract.at(after, (opened, island[opened, device[opened]]), 1)
        else:
            after = counts
        result.before = result.before + split_islands(counts, ks, probs)
        result.after = result.after + split_islands(after, ks, probs)

    def _couple(
        self,
        result: Placement,
        free: np.ndarray,
        free_cpu: np.ndarray,
        free_memory: np.ndarray,
        shape: PodShape,
        reserve: Reserve,
    ) -> None:
        """Add the GPUs stranded by the placement (cpu or memory gone below the reserve) to both sides."""
        whole = (free >= MILLI).sum(axis=1)
        taken = shape.gpu // MILLI if shape.gpu >= MILLI else 0
        whole_after = np.maximum(whole - taken, 0)
        # A share taken from a wholly free device leaves one fewer wholly free device.
        if 0 < shape.gpu < MILLI:
            rows = np.arange(free.shape[0])
            device = np.maximum(result.device, 0)
            opened = (result.device != NO_DEVICE) & (free[rows, device] >= MILLI)
            whole_after = whole_after - opened
        before = stranding(whole, free_cpu, free_memory, reserve)
        after = stranding(whole_after, free_cpu - shape.cpu, free_memory - shape.memory, reserve)
        result.before = result.before + before
        result.after = result.after + after
        if shape.gpu == 0 and self.cpu_only_penalty > 0:
            cpu, memory = reserve.mean()
            cpu_gpus = shape.cpu / cpu if cpu > 0 else 0.0
            memory_gpus = shape.memory / memory if memory > 0 else 0.0
            soft = np.minimum(max(cpu_gpus, memory_gpus), whole) * MILLI * self.cpu_only_penalty
            result.after = result.after + soft

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        if rows.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return normalize(self.evaluate(pod, cache, rows).delta)

    def devices(self, result: Placement) -> np.ndarray:
        """Per row of an evaluation, the device a share would take (NO_DEVICE for other pods)."""
        return result.device

    def preferred_device(self, pod: PodRecord, cache: SchedulerCache, row: int) -> int | None:
        """The device where the share's fragmentation grows least on `row` (None for whole devices and
        pods without GPUs): the row's evaluation, kept from this cycle's scoring or made now, so that it
        reads only the pod and the row, whichever path scored it (the gang fast path too)."""
        request, _ = gpu_request(pod)
        if request is None or request.count:  # only a share takes one device of the score's choosing
            return None
        device = int(self.devices(self.evaluate(pod, cache, np.array([row], dtype=np.intp)))[0])
        return None if device == NO_DEVICE else device


def normalize(delta: np.ndarray) -> np.ndarray:
    """Increases to scores: the least increase 100, the most 0, any other at most 99 (rows where the pod
    does not fit, inf, score 0)."""
    finite = np.isfinite(delta)
    if not finite.any():
        return np.zeros(delta.shape[0], dtype=np.int64)
    rounded = np.round(np.where(finite, delta, 0.0) / ROUNDING) * ROUNDING
    low, high = rounded[finite].min(), rounded[finite].max()
    if high <= low:
        return np.where(finite, MAX_NODE_SCORE, 0).astype(np.int64)
    worse = np.ceil((rounded - low) * MAX_NODE_SCORE / (high - low)).astype(np.int64)
    scores: np.ndarray = np.where(finite, MAX_NODE_SCORE - np.clip(worse, 0, MAX_NODE_SCORE), 0)
    return scores


class GpuFragmentationCoupled(GpuFragmentation):
    """GPUFragmentation that also keeps cpu and memory with GPUs for the multi-GPU shapes (`couple_cpu`)
    and keeps NVLink islands whole for them (`islands`)."""

    name = "GPUFragmentationCoupled"

    def __init__(self, weight: int) -> None:
        super().__init__(weight, couple_cpu=True, islands=True)


NO_CHANGE = MAX_NODE_SCORE // 2  # sigmoid_scores where before equals after: floor(100 x sigmoid(0))


def sigmoid_scores(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """FGD's score: floor(100 x sigmoid((before - after) / 1000)), the decrease in GPUs; -1 where `after`
    is inf (the pod does not fit)."""
    finite = np.isfinite(after)
    decrease = np.where(finite, before - np.where(finite, after, 0.0), 0.0) / MILLI
    value = np.floor(MAX_NODE_SCORE / (1.0 + np.exp(-decrease))).astype(np.int64)
    out: np.ndarray = np.where(finite, value, -1)
    return out


class FgdScore(GpuFragmentation):
    """FGD exactly as its artifact scores (see the module docstring): a target workload given up front,
    the truncated sigmoid score, the first device of the best score."""

    name = "FGDScore"
    TARGET_UP_FRONT = True  # the trace simulator hands it the workload's typical pods

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        if rows.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        result = self.evaluate(pod, cache, rows)
        scores: np.ndarray = np.maximum(sigmoid_scores(result.before, result.after), 0)
        return scores

    def devices(self, result: Placement) -> np.ndarray:
        """FGD's device: the first of the best truncated score (not the least fragmentation)."""
        if result.per_device is None:
            return result.device
        per_device = sigmoid_scores(result.before[:, None], result.per_device)
        device: np.ndarray = np.where(result.device != NO_DEVICE, np.argmax(per_device, axis=1), NO_DEVICE)
        return device


class FgdScoreCoupled(FgdScore):
    """FGD's absolute score (`sigmoid_scores`, truncated, not normalised over the candidates) over
    GPUFragmentationCoupled's measure (cpu and memory kept beside free GPUs, NVLink islands whole), with
    the shapes learned online as GPUFragmentation learns them (nothing up front). Each node's score
    reads only the pod and that node: PER_NODE, so a gang of identical members keeps the gang fast
    path, and equal nodes tie for the framework's tie-break."""

    name = "FGDScoreCoupled"
    TARGET_UP_FRONT = False

    def __init__(self, weight: int) -> None:
        GpuFragmentation.__init__(self, weight, couple_cpu=True, islands=True)

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return PER_NODE

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        if wants_gpus(pod) or rows.shape[0] == 0:
            return super().score(pod, cache, rows, static)
        # A pod without GPUs fragments nothing on a node without GPUs: such a node scores the sigmoid of
        # no change, without an evaluation (the pod still counts in the learned shapes).
        has_gpus = gpu_nodes(cache, rows)
        if has_gpus.all():
            return super().score(pod, cache, rows, static)
        self.observe(pod, pod_shape(pod, cache.gpus.largest_device))
        scores = np.full(rows.shape[0], NO_CHANGE, dtype=np.int64)
        if has_gpus.any():
            gpu_scores = super().score(pod, cache, rows[has_gpus], static)
            assert gpu_scores is not None
            scores[has_gpus] = gpu_scores
        return scores

    def score_one(self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults) -> int | None:
        """`score` of one row: its kept evaluation read in Python numbers (`evaluate_one`), the score by
        the same arrays arithmetic as `sigmoid_scores` (so the same integer as `score`)."""
        if not wants_gpus(pod) and not gpu_node(cache, row, cache.allocatable[row].tolist()):
            self.observe(pod, pod_shape(pod, cache.gpus.largest_device))
            return NO_CHANGE
        before, after = self.evaluate_one(pod, cache, row)
        return max(int(sigmoid_scores(np.array([before]), np.array([after]))[0]), 0)
