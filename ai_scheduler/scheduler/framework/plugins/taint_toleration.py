"""TaintToleration: NoSchedule/NoExecute taints must be tolerated; PreferNoSchedule ones lower the score."""

from __future__ import annotations

import functools
from collections.abc import Hashable

from ai_scheduler.cache.records import NodeRecord, PodRecord, Toleration
from ai_scheduler.scheduler.framework.interface import StaticFilterPlugin, StaticScorePlugin

HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def _toleration_signature(pod: PodRecord) -> Hashable:
    return _identities(pod.tolerations)


@functools.lru_cache(maxsize=4096)
def _identities(tolerations: tuple[Toleration, ...]) -> tuple[tuple[str, str, str, str], ...]:
    """Pods of one template share one tuple of tolerations (records.py): its signature is made once."""
    return tuple(t.identity() for t in tolerations)


class TaintTolerationFilter(StaticFilterPlugin):
    name = "TaintToleration"

    def signature(self, pod: PodRecord) -> Hashable | None:
        return _toleration_signature(pod)

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        for taint in node.taints:
            if taint.effect in HARD_EFFECTS and not any(t.tolerates(taint) for t in pod.tolerations):
                return f"node(s) had untolerated taint {taint.describe()}"
        return None


class TaintTolerationScore(StaticScorePlugin):
    """Fewer untolerated PreferNoSchedule taints score higher (reverse-normalised count)."""

    name = "TaintToleration"
    reverse = True

    def signature(self, pod: PodRecord) -> Hashable | None:
        return _toleration_signature(pod)

    def raw_score(self, pod: PodRecord, node: NodeRecord) -> int:
        soft = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
        return sum(
            1
            for taint in node.taints
            if taint.effect == "PreferNoSchedule" and not any(t.tolerates(taint) for t in soft)
        )
