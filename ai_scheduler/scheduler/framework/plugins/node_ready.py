"""NodeReady: a node whose Ready condition is not True takes only pods that tolerate that state.

On a real cluster the node lifecycle controller expresses readiness as the
`node.kubernetes.io/not-ready` / `unreachable` NoSchedule taints, which
TaintToleration already honours. The taint lags the condition (and a node
created without status has neither), so we read the condition too, with the
same toleration rule, and never place work on a node that says it is not ready.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable

from ai_scheduler.cache.records import NodeRecord, PodRecord, Taint, Toleration
from ai_scheduler.scheduler.framework.interface import StaticFilterPlugin

REASON = "node(s) were not ready"
NOT_READY_TAINT = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")
UNREACHABLE_TAINT = Taint("node.kubernetes.io/unreachable", "", "NoSchedule")


class NodeReady(StaticFilterPlugin):
    name = "NodeReady"

    def signature(self, pod: PodRecord) -> Hashable | None:
        return _signature(pod.tolerations)

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        if node.ready == "True":
            return None
        taint = UNREACHABLE_TAINT if node.ready == "Unknown" else NOT_READY_TAINT
        if any(t.tolerates(taint) for t in pod.tolerations):
            return None
        return REASON


@functools.lru_cache(maxsize=4096)
def _signature(tolerations: tuple[Toleration, ...]) -> tuple[bool, bool] | None:
    """Which of the two states the tolerations tolerate (None: both, no opinion); pods of one template share
    one tuple of tolerations (records.py), so this is worked out once per template."""
    not_ready = any(t.tolerates(NOT_READY_TAINT) for t in tolerations)
    unreachable = any(t.tolerates(UNREACHABLE_TAINT) for t in tolerations)
    if not_ready and unreachable:
        return None
    return (not_ready, unreachable)
