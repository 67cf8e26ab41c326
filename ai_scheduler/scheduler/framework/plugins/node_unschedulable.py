"""NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods that tolerate the cordon."""

from __future__ import annotations

import functools
from collections.abc import Hashable

from ai_scheduler.cache.records import NodeRecord, PodRecord, Taint, Toleration
from ai_scheduler.scheduler.framework.interface import StaticFilterPlugin

REASON = "node(s) were unschedulable"
CORDON_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


class NodeUnschedulable(StaticFilterPlugin):
    name = "NodeUnschedulable"

    def signature(self, pod: PodRecord) -> Hashable | None:
        return None if _tolerates_cordon(pod.tolerations) else True

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        return REASON if node.unschedulable else None


@functools.lru_cache(maxsize=4096)
def _tolerates_cordon(tolerations: tuple[Toleration, ...]) -> bool:
    """Pods of one template share one tuple of tolerations (records.py): answered once per template."""
    return any(t.tolerates(CORDON_TAINT) for t in tolerations)
