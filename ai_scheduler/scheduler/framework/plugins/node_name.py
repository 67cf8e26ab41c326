"""NodeName: a pod that names its node fits only there (kube-scheduler's NodeName plugin)."""

from __future__ import annotations

from collections.abc import Hashable

from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.scheduler.framework.interface import StaticFilterPlugin

REASON = "node(s) didn't match the requested node name"


class NodeName(StaticFilterPlugin):
    name = "NodeName"

    def signature(self, pod: PodRecord) -> Hashable | None:
        return pod.node_name or None

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        return None if node.name == pod.node_name else REASON
