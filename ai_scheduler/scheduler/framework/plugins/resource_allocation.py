"""Resource scores: least-allocated (spread) and most-allocated (binpack), weighted per resource.

Integer arithmetic as in kube-scheduler's resource_allocation.go, so ties
happen where they happen there. cpu and memory use the non-zero request
defaults for pods without requests; any other resource (nvidia.com/gpu, ...)
is scored only when the pod requests it, so that a cpu-only pod is not drawn
to GPU nodes by their idle GPUs.

The default is neither: NodeResourcesGPUAware packs on GPU nodes and spreads
on the others (issue 13). On a GPU node the cpu and memory matter most next to
free GPUs, since a pod of 8 GPUs and 64 cores needs all of them on one node.
Spreading there sends every pod that lands on GPU nodes (CPU-only pods once
the CPU nodes are full, small GPU pods' cpu) to the GPU node with the most
free cpu, which is the one whose GPUs are free, until no node with 8 free GPUs
has 64 free cores; packing keeps idle GPU nodes whole, as MostAllocated does,
while CPU nodes keep kube-scheduler's spreading. benchmarks/gpu_packing.py
(`--workload large`) measures the three side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    NO_OPINION,
    PER_NODE,
    ScorePlugin,
    StaticResults,
)
from ai_scheduler.scheduler.framework.plugins.gpu import gpu_node, gpu_nodes, wants_gpus

ALWAYS_SCORED = frozenset({"cpu", "memory", "ephemeral-storage"})


# What a pod's score reads, per scored resource: the cache's columns, the pod's scoring amounts and the
# weights, as arrays and as lists (for one row's score), and the weights' sum (None: no resource to score).
_Plan = tuple[np.ndarray, np.ndarray, np.ndarray, int, list[int], list[int], list[int]] | None


def _least_allocated(requested: int, allocatable: int) -> int:
    """LeastAllocated._resource_score of one resource on one node (`allocatable` > 0)."""
    return max(allocatable - requested, 0) * MAX_NODE_SCORE // allocatable


def _most_allocated(requested: int, allocatable: int) -> int:
    """MostAllocated._resource_score of one resource on one node (`allocatable` > 0)."""
    return min(requested, allocatable) * MAX_NODE_SCORE // allocatable


class _ResourceAllocation(ScorePlugin):
    def __init__(self, weight: int, resources: Mapping[str, int]) -> None:
        super().__init__(weight)
        self.resources = dict(resources)
        # The last pod template's plan: its requests and scoring requests (maps that the pods of one
        # template share, records.py), the cache and its column count it was made for, and the plan.
        # A gang's members, and the same pod's cycles, read it again instead of walking the resources.
        self._last: tuple[object, object, SchedulerCache, int, _Plan] | None = None

    def _plan(self, pod: PodRecord, cache: SchedulerCache) -> _Plan:
        requests, pod_scored = pod.requests, pod.score_requests()
        last = self._last
        if (
            last is not None
            and last[0] is requests
            and last[1] is pod_scored
            and last[2] is cache
            and last[3] == len(cache.resource_index)
        ):
            return last[4]
        cols: list[int] = []
        weights: list[int] = []
        amounts: list[int] = []
        for resource, weight in self.resources.items():
            if resource not in ALWAYS_SCORED and not requests.get(resource):
                continue
            col = cache.column(resource)
            if col < 0:
                continue
            cols.append(col)
            weights.append(weight)
            amounts.append(pod_scored.get(resource, 0))
        plan: _Plan = None
        if cols:
            plan = (
                np.array(cols, dtype=np.intp),
                np.array(amounts, dtype=np.int64),
                np.array(weights, dtype=np.int64),
                sum(weights),
                cols,
                amounts,
                weights,
            )
        self._last = (requests, pod_scored, cache, len(cache.resource_index), plan)
        return plan

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return PER_NODE

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _scores(
        self,
        requested: np.ndarray,
        allocatable: np.ndarray,
        cache: SchedulerCache,
        rows: np.ndarray,
        node_allocatable: np.ndarray,
    ) -> np.ndarray:
        """Per row and scored resource, the score in 0..MAX_NODE_SCORE (`allocatable` has no zeros);
        `node_allocatable` holds the rows' whole lines of the cache's allocatable table."""
        return self._resource_score(requested, allocatable)

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        plan = self._plan(pod, cache)
        if plan is None:
            return np.zeros(rows.shape[0], dtype=np.int64)
        cols, amounts, weight_vector, weight_total = plan[:4]
        # All scored resources at once, one (rows x resources) block: a decision's cost is mostly numpy's
        # fixed cost per call, so one pass over the block is cheaper than one pass per resource.
        node_allocatable = cache.allocatable.take(rows, axis=0)
        allocatable = node_allocatable[:, cols]
        requested = cache.score_requested.take(rows, axis=0)[:, cols] + amounts
        has = allocatable > 0  # a node without the resource neither scores nor weighs for it
        if has.all():  # the usual case: every node has every scored resource
            per_resource = self._scores(requested, allocatable, cache, rows, node_allocatable)
            scores: np.ndarray = per_resource @ weight_vector // weight_total
            return scores
        per_resource = self._scores(requested, np.maximum(allocatable, 1), cache, rows, node_allocatable)
        per_resource *= has
        total = per_resource @ weight_vector
        weight_sum = has.astype(np.int64) @ weight_vector
        result: np.ndarray = np.where(weight_sum > 0, total // np.maximum(weight_sum, 1), 0)
        return result

    def _formula(
        self, cache: SchedulerCache, row: int, node_allocatable: list[int]
    ) -> Callable[[int, int], int]:
        """`_scores`' formula for one resource on the node of `row` (`node_allocatable`: its line of the
        cache's allocatable table)."""
        raise NotImplementedError

    def score_one(self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults) -> int | None:
        # `score` of one row in Python numbers: the same plan, formula and integer division.
        plan = self._plan(pod, cache)
        if plan is None:
            return 0
        cols, amounts, weights = plan[4:]
        node_allocatable = cache.allocatable[row].tolist()
        requested = cache.score_requested[row].tolist()
        formula = self._formula(cache, row, node_allocatable)
        total = weight_sum = 0
        for col, amount, weight in zip(cols, amounts, weights, strict=True):
            allocatable = node_allocatable[col]
            if allocatable > 0:  # a node without the resource neither scores nor weighs for it
                total += formula(requested[col] + amount, allocatable) * weight
                weight_sum += weight
        return total // weight_sum if weight_sum else 0


class LeastAllocated(_ResourceAllocation):
    """Prefer nodes with more free capacity after placing the pod (spread)."""

    name = "NodeResourcesLeastAllocated"

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        # (allocatable - requested) * 100 // allocatable, and 0 where the request is more than the node has
        score: np.ndarray = np.maximum(allocatable - requested, 0) * MAX_NODE_SCORE // allocatable
        return score

    def _formula(
        self, cache: SchedulerCache, row: int, node_allocatable: list[int]
    ) -> Callable[[int, int], int]:
        return _least_allocated


class MostAllocated(_ResourceAllocation):
    """Prefer nodes that are already busy (binpack), keeping whole nodes free for large jobs."""

    name = "NodeResourcesMostAllocated"

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        scores: np.ndarray = np.minimum(requested, allocatable) * MAX_NODE_SCORE // allocatable
        return scores

    def _formula(
        self, cache: SchedulerCache, row: int, node_allocatable: list[int]
    ) -> Callable[[int, int], int]:
        return _most_allocated


class GpuAwareAllocation(_ResourceAllocation):
    """Pack on GPU nodes (MostAllocated), spread on the others (LeastAllocated): see the module's text.

    A GPU node has managed GPUs or `nvidia.com/gpu` in allocatable. The two are never weighed against
    each other for a GPU pod (only GPU nodes fit it); for a CPU-only pod GPUAvoidance, weighted above
    this score, keeps it on CPU nodes while they have room.
    """

    name = "NodeResourcesGPUAware"

    def __init__(self, weight: int, resources: Mapping[str, int], *, gpu_pods: bool = True) -> None:
        super().__init__(weight, resources)
        # False: no opinion on pods that ask for GPUs (a fragmentation score in the profile places them;
        # plugins.build_scores).
        self.gpu_pods = gpu_pods

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return PER_NODE if self.gpu_pods or not wants_gpus(pod) else NO_OPINION

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        if not self.gpu_pods and wants_gpus(pod):
            return None
        return super().score(pod, cache, rows, static)

    def score_one(self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults) -> int | None:
        if not self.gpu_pods and wants_gpus(pod):
            return None
        return super().score_one(pod, cache, row, static)

    def _scores(
        self,
        requested: np.ndarray,
        allocatable: np.ndarray,
        cache: SchedulerCache,
        rows: np.ndarray,
        node_allocatable: np.ndarray,
    ) -> np.ndarray:
        # MostAllocated counts the part in use after the pod, LeastAllocated the part left free: on a
        # mixed set of rows, one formula over the block that chooses per row which part.
        on_gpu_node = gpu_nodes(cache, rows, node_allocatable)
        if on_gpu_node.all():  # a cluster of GPU nodes only: no rows to choose between
            return MostAllocated._resource_score(requested, allocatable)
        if not on_gpu_node.any():  # or of nodes without GPUs (or a pod that only they fit)
            return LeastAllocated._resource_score(requested, allocatable)
        taken = np.minimum(requested, allocatable)
        counted = np.where(on_gpu_node[:, None], taken, allocatable - taken)
        scores: np.ndarray = counted * MAX_NODE_SCORE // allocatable
        return scores

    def _formula(
        self, cache: SchedulerCache, row: int, node_allocatable: list[int]
    ) -> Callable[[int, int], int]:
        return _most_allocated if gpu_node(cache, row, node_allocatable) else _least_allocated


class BalancedAllocation(ScorePlugin):
    """Prefer nodes whose resources stay evenly used, and placements that even them out further.

    kube-scheduler's NodeResourcesBalancedAllocation (v1.36): per node, the
    used fraction of each scored resource (capped at 1), and its `balance` =
    (1 - their standard deviation) x 100, truncated, before and after the pod;
    the score is 50 + (50 + after - before) / 2, in [50, 100]. It reads plain
    requests on both sides (no defaults for pods without cpu or memory), so a
    pod that requests none of the scored resources gets no score at all
    (PreScore's Skip). The resource weights are not used, only which resources
    are scored; one beyond cpu, memory and ephemeral-storage counts only when
    the pod requests it, and a node without a resource leaves it out.
    """

    name = "NodeResourcesBalancedAllocation"

    def __init__(self, weight: int, resources: Mapping[str, int]) -> None:
        super().__init__(weight)
        self.resources = dict(resources)

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return PER_NODE

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        amounts = [pod.requests.get(resource, 0) for resource in self.resources]
        if not any(amounts):
            return None
        cols: list[int] = []
        wanted: list[int] = []
        for resource, amount in zip(self.resources, amounts, strict=True):
            if resource not in ALWAYS_SCORED and not amount:
                continue
            col = cache.column(resource)
            if col >= 0:
                cols.append(col)
                wanted.append(amount)
        if not cols:  # nothing to weigh on any node: every node balances alike
            return np.full(rows.shape[0], MAX_NODE_SCORE // 2 + MAX_NODE_SCORE // 4, dtype=np.int64)
        if len(cols) == 2:
            quick = _two_resource_balances(cache, rows, cols, wanted)
            if quick is not None:
                return _from_balances(*quick)
        allocatable = cache.allocatable.take(rows, axis=0)[:, cols]
        before = cache.requested.take(rows, axis=0)[:, cols]
        after = before + np.array(wanted, dtype=np.int64)
        has = allocatable > 0
        shares = np.maximum(allocatable, 1).astype(np.float64)
        return _from_balances(balance(before, shares, has), balance(after, shares, has))


def _from_balances(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    # A standard deviation of fractions in [0, 1] is at most 1/2, so each balance is in [50, 100] and
    # `change` is never negative: Go's truncating division and Python's floor agree on it.
    change = MAX_NODE_SCORE // 2 + after - before
    result: np.ndarray = MAX_NODE_SCORE // 2 + change // 2
    return result


def _two_resource_balances(
    cache: SchedulerCache, rows: np.ndarray, cols: list[int], wanted: list[int]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Balances before and after for two resources that every row has (cpu and memory); else None.

    The default case, with a third of the array operations of `balance`: the same floating-point steps
    as kube-scheduler's two-fraction shortcut, so the same truncations.
    """
    allocatable = cache.allocatable.take(rows, axis=0)
    requested = cache.requested.take(rows, axis=0)
    first, second = cols
    a0, a1 = allocatable[:, first], allocatable[:, second]
    if not (a0.all() and a1.all()):
        return None
    b0, b1 = requested[:, first], requested[:, second]
    result = []
    for add0, add1 in ((0, 0), (wanted[0], wanted[1])):
        f0 = np.minimum((b0 + add0) / a0, 1.0)
        f1 = np.minimum((b1 + add1) / a1, 1.0)
        f0 -= f1
        np.abs(f0, out=f0)
        f0 /= 2
        np.subtract(1, f0, out=f0)
        f0 *= MAX_NODE_SCORE
        result.append(f0.astype(np.int64))
    return result[0], result[1]


def balance(requested: np.ndarray, allocatable: np.ndarray, has: np.ndarray) -> np.ndarray:
    """kube-scheduler's balancedResourceScore per row: (1 - std of the used fractions) x 100, truncated.

    Only the columns marked in `has` count. Two fractions take Go's shortcut |a - b| / 2 (the standard
    deviation, rounded differently in floating point); three or more the full formula; fewer than two
    have no spread (100).
    """
    fractions = np.minimum(requested / allocatable, 1.0)
    count = has.sum(axis=1)
    high = np.where(has, fractions, -np.inf).max(axis=1)
    low = np.where(has, fractions, np.inf).min(axis=1)
    divisor = np.maximum(count, 1)
    mean = np.where(has, fractions, 0.0).sum(axis=1) / divisor
    deviation = np.sqrt((np.where(has, fractions - mean[:, None], 0.0) ** 2).sum(axis=1) / divisor)
    spread = np.where(count == 2, (high - low) / 2, np.where(count > 2, deviation, 0.0))
    scores: np.ndarray = ((1 - spread) * MAX_NODE_SCORE).astype(np.int64)
    return scores
