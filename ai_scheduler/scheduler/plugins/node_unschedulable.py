"""NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods that tolerate the cordon."""

from __future__ import annotations

from collections.abc import Hashable

from ai_scheduler.cache.records import NodeRecord, PodRecord, Taint
from ai_scheduler.scheduler.framework import StaticFilterPlugin

REASON = "node(s) were unschedulable"
CORDON_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


class NodeUnschedulable(StaticFilterPlugin):
    name = "NodeUnschedulable"

    def signature(self, pod: PodRecord) -> Hashable | None:
        if any(t.tolerates(CORDON_TAINT) for t in pod.tolerations):
            return None
        return True

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        return REASON if node.unschedulable else None
