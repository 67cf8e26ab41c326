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
        total = np.zeros(rows.shape[0], dtype=np.int64)
        weights = np.zeros(rows.shape[0], dtype=np.int64)
        for resource, weight in self.resources.items():
            if resource not in ALWAYS_SCORED and not pod.requests.get(resource):
                continue
            col = cache.column(resource)
            if col < 0:
                continue
            allocatable = cache.allocatable[rows, col]
            requested = cache.score_requested[rows, col] + pod_scored.get(resource, 0)
            has = allocatable > 0
            total += np.where(has, self._resource_score(requested, np.maximum(allocatable, 1)), 0) * weight
            weights += np.where(has, weight, 0)
        return np.where(weights > 0, total // np.maximum(weights, 1), 0)


class LeastAllocated(_ResourceAllocation):
    """Prefer nodes with more free capacity after placing the pod (spread)."""

    name = "NodeResourcesLeastAllocated"

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        return np.where(requested > allocatable, 0, (allocatable - requested) * MAX_NODE_SCORE // allocatable)


class MostAllocated(_ResourceAllocation):
    """Prefer nodes that are already busy (binpack), keeping whole nodes free for large jobs."""

    name = "NodeResourcesMostAllocated"

    @staticmethod
    def _resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        scores: np.ndarray = np.minimum(requested, allocatable) * MAX_NODE_SCORE // allocatable
        return scores
