"""NodeResourcesFit: the node's free allocatable must cover every resource the pod requests.

Pod requests already follow kube-scheduler's arithmetic (init containers,
sidecars, overhead; see cache.records.pod_requests). As in kube-scheduler,
only resources the pod asks for are checked, plus one pod slot.

An extended resource that a DeviceClass maps (DRA-backed, KEP-5004) is left to DynamicResources on
the nodes that do not list it in allocatable (kube's shouldDelegateResourceToDRA): there it is met
by devices from the node's ResourceSlices, not by allocatable.
"""

from __future__ import annotations

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PODS, PodRecord
from ai_scheduler.scheduler.framework.interface import (
    ALL_ROWS,
    PER_NODE,
    FilterPlugin,
    Reasons,
    StaticResults,
    Window,
    position_in_window,
)

TOO_MANY_PODS = "Too many pods"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class NodeResourcesFit(FilterPlugin):
    name = "NodeResourcesFit"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return PER_NODE  # the node's free room (and room held there for nominated pods)

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        # Free room per resource, for the window's rows: one subtraction over the block, then one
        # comparison per requested resource.
        free = self._free(pod, cache, window)
        reasons: Reasons = [(TOO_MANY_PODS, free[:, cache.resource_index[PODS]] < 1)]
        for reason, col, amount, delegated in self._checks(pod, cache):
            if col < 0:
                reasons.append((reason, np.ones(free.shape[0], dtype=bool)))
                continue
            short = free[:, col] < amount
            if delegated:  # nodes without it in allocatable serve it through DRA
                short &= cache.allocatable[window, col] > 0
            reasons.append((reason, short))
        return reasons

    def failing_one(
        self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults
    ) -> tuple[str, ...]:
        # `run`'s checks on one row, in Python numbers: one numpy pass for the row's free room.
        room = self._free(pod, cache, slice(row, row + 1))[0].tolist()
        failing = [TOO_MANY_PODS] if room[cache.resource_index[PODS]] < 1 else []
        for reason, col, amount, delegated in self._checks(pod, cache):
            if col < 0 or (room[col] < amount and (not delegated or cache.allocatable[row, col] > 0)):
                failing.append(reason)
        return tuple(failing)

    @staticmethod
    def _free(pod: PodRecord, cache: SchedulerCache, window: Window) -> np.ndarray:
        """Free room per resource on the window's rows (rows x resources); room held for nominated
        preemptors counts as taken, except the pod's own."""
        free = cache.allocatable[window] - cache.requested[window]
        if cache.nominations:
            free -= cache.nominated[window]
            own = cache.nominations.get(pod.uid)
            if own is not None:
                row, amounts = own
                local = position_in_window(window, row)
                if local >= 0:
                    for name, value in amounts.items():
                        free[local, cache.resource_index[name]] += value
        return free

    @staticmethod
    def _checks(pod: PodRecord, cache: SchedulerCache) -> list[tuple[str, int, int, bool]]:
        """Per requested resource but the pod slot: its reason, column (-1: no node has it, so every
        node fails it), amount, and whether DRA serves it on nodes without it in allocatable. A resource
        no node lists that DRA serves is left to DynamicResources altogether."""
        checks = []
        extended = cache.dra.extended
        for resource, amount in pod.requests.items():
            if resource == PODS:
                continue
            col = cache.column(resource)
            delegated = bool(extended) and resource in extended
            if col < 0 and delegated:
                continue
            checks.append((insufficient(resource), col, amount, delegated))
        return checks
