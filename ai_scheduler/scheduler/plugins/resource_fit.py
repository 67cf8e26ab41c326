"""NodeResourcesFit: the node's free allocatable must cover every resource the pod requests.

Pod requests already follow kube-scheduler's arithmetic (init containers,
sidecars, overhead; see cache.records.pod_requests). As in kube-scheduler,
only resources the pod asks for are checked, plus one pod slot.
"""

from __future__ import annotations

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PODS, PodRecord
from ai_scheduler.scheduler.framework import ALL_ROWS, FilterPlugin, Reasons, StaticResults

TOO_MANY_PODS = "Too many pods"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class NodeResourcesFit(FilterPlugin):
    name = "NodeResourcesFit"

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: slice = ALL_ROWS,
    ) -> Reasons:
        allocatable = cache.allocatable[window]
        requested = cache.requested[window]
        if cache.nominations:
            # Room held for nominated preemptors counts as taken, except the pod's own.
            requested = requested + cache.nominated[window]
            own = cache.nominations.get(pod.uid)
            if own is not None:
                row, amounts = own
                local = row - (window.start or 0)
                if 0 <= local < requested.shape[0]:
                    for name, value in amounts.items():
                        requested[local, cache.resource_index[name]] -= value
        pods_col = cache.resource_index[PODS]
        reasons: Reasons = [
            (TOO_MANY_PODS, allocatable[:, pods_col] - requested[:, pods_col] < 1),
        ]
        for resource, amount in pod.requests.items():
            if resource == PODS:
                continue
            col = cache.column(resource)
            if col < 0:
                reasons.append((insufficient(resource), np.ones(allocatable.shape[0], dtype=bool)))
                continue
            reasons.append((insufficient(resource), allocatable[:, col] - requested[:, col] < amount))
        return reasons
