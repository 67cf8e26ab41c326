"""Resource scores: least-allocated (spread) and most-allocated (binpack), weighted per resource.

Integer arithmetic as in kube-scheduler's resource_allocation.go, so ties
happen where they happen there. cpu and memory use the non-zero request
defaults for pods without requests; any other resource (nvidia.com/gpu, ...)
is scored only when the pod requests it, so that a cpu-only pod is not drawn
to GPU nodes by their idle GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework import MAX_NODE_SCORE, ScorePlugin, StaticResults

ALWAYS_SCORED = frozenset({"cpu", "memory", "ephemeral-storage"})


class _ResourceAllocation(ScorePlugin):
    def __init__(self, weight: int, resources: Mapping[str, int]) -> None:
        super().__init__(weight)
        self.resources = dict(resources)

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        pod_scored = pod.score_requests()
        cols: list[int] = []
        weights: list[int] = []
        amounts: list[int] = []
        for resource, weight in self.resources.items():
            if resource not in ALWAYS_SCORED and not pod.requests.get(resource):
                continue
            col = cache.column(resource)
            if col < 0:
                continue
            cols.append(col)
            weights.append(weight)
            amounts.append(pod_scored.get(resource, 0))
        if not cols:
            return np.zeros(rows.shape[0], dtype=np.int64)
        # All scored resources at once, one (rows x resources) block: a decision's cost is mostly numpy's
        # fixed cost per call, so one pass over the block is cheaper than one pass per resource.
        allocatable = cache.allocatable.take(rows, axis=0)[:, cols]
        requested = cache.score_requested.take(rows, axis=0)[:, cols] + np.array(amounts, dtype=np.int64)
        weight_vector = np.array(weights, dtype=np.int64)
        has = allocatable > 0  # a node without the resource neither scores nor weighs for it
        if has.all():  # the usual case: every node has every scored resource
            scores: np.ndarray = self._resource_score(requested, allocatable) @ weight_vector // sum(weights)
            return scores
        per_resource = self._resource_score(requested, np.maximum(allocatable, 1)) * has
        total = per_resource @ weight_vector
        weight_sum = has.astype(np.int64) @ weight_vector
        result: np.ndarray = np.where(weight_sum > 0, total // np.maximum(weight_sum, 1), 0)
        return result


class LeastAllocated(_ResourceAllocation):
    """Prefer nodes with more free capacity after placing the pod (spread)."""

    name = "NodeResourcesLeastAllocated"

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        # (allocatable - requested) * 100 // allocatable, and 0 where the request is more than the node has
        score: np.ndarray = np.maximum(allocatable - requested, 0) * MAX_NODE_SCORE // allocatable
        return score


class MostAllocated(_ResourceAllocation):
    """Prefer nodes that are already busy (binpack), keeping whole nodes free for large jobs."""

    name = "NodeResourcesMostAllocated"

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        scores: np.ndarray = np.minimum(requested, allocatable) * MAX_NODE_SCORE // allocatable
        return scores
