"""NodeAffinity: nodeSelector and required node affinity filter; preferred node affinity scores."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import orjson

from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.selectors import requirement_matches
from ai_scheduler.scheduler.framework.interface import StaticFilterPlugin, StaticScorePlugin

REASON = "node(s) didn't match Pod's node affinity/selector"


def term_matches(term: Mapping[str, Any], node: NodeRecord) -> bool:
    """A NodeSelectorTerm: all expressions and fields must match; an empty term matches nothing."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    if not all(requirement_matches(req, node.labels) for req in expressions):
        return False
    return all(requirement_matches(req, {"metadata.name": node.name}) for req in fields)


def _node_affinity(pod: PodRecord) -> Mapping[str, Any]:
    return pod.affinity.get("nodeAffinity") or {}


class NodeAffinityFilter(StaticFilterPlugin):
    name = "NodeAffinity"

    def signature(self, pod: PodRecord) -> Hashable | None:
        required = _node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution")
        if not pod.node_selector and not required:
            return None
        return (
            tuple(sorted(pod.node_selector.items())),
            orjson.dumps(required, option=orjson.OPT_SORT_KEYS) if required else b"",
        )

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        labels = node.labels
        for key, value in pod.node_selector.items():
            if labels.get(key) != value:
                return REASON
        required = _node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution")
        if required is not None:
            terms = required.get("nodeSelectorTerms") or []
            if not any(term_matches(term, node) for term in terms):
                return REASON
        return None


class NodeAffinityScore(StaticScorePlugin):
    """Sum of the weights of the preferred terms a node matches, scaled by the best node."""

    name = "NodeAffinity"

    def signature(self, pod: PodRecord) -> Hashable | None:
        preferred = _node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution")
        if not preferred:
            return None
        return orjson.dumps(preferred, option=orjson.OPT_SORT_KEYS)

    def raw_score(self, pod: PodRecord, node: NodeRecord) -> int:
        total = 0
        for item in _node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []:
            weight = int(item.get("weight") or 0)
            if weight and term_matches(item.get("preference") or {}, node):
                total += weight
        return total
