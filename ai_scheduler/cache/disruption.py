"""PodDisruptionBudgets, as kube-scheduler's DefaultPreemption reads them.

Preemption must not take a pod whose eviction would break a PodDisruptionBudget
(policy/v1) when another choice exists: kube-scheduler's selectVictimsOnNode
reprieves such pods first, and pickOneNodeForPreemption prefers the node with
the fewest victims that break one. We keep, per namespace, what that needs of
each budget: its selector, `status.disruptionsAllowed`, and the names in
`status.disruptedPods` (evictions the API server already granted, which do not
count twice). The daemon's informer fills it; nothing here does I/O.

`violating()` is kube's filterPodsWithPDBViolation: walking the candidates in
the order given (most important first), every budget that selects a pod loses
one allowed disruption; a pod that takes some budget below zero is violating.
As in kube-scheduler, a budget with a null or empty selector selects nothing
(the scheduler's reading, stricter than the eviction API's), a pod without
labels matches no budget, and a budget whose selector cannot be parsed is
ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.selectors import NOTHING, LabelSelector, SelectorError, parse_selector

RESOURCE = "poddisruptionbudgets"


@dataclass(slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector  # NOTHING for a null, empty or invalid selector
    disruptions_allowed: int
    disrupted_pods: frozenset[str]  # pod names the API server already counted (status.disruptedPods)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> DisruptionBudget:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        try:
            selector = parse_selector(spec.get("selector"), "spec.selector")
        except SelectorError:
            selector = NOTHING
        if selector.everything:
            selector = NOTHING
        allowed = status.get("disruptionsAllowed")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            selector=selector,
            disruptions_allowed=allowed if isinstance(allowed, int) else 0,
            disrupted_pods=frozenset(status.get("disruptedPods") or ()),
        )

    def selects(self, pod: PodRecord) -> bool:
        return pod.namespace == self.namespace and bool(pod.labels) and self.selector.matches(pod.labels)


class DisruptionBudgets:
    """The budgets by namespace and name, from a list and watch of poddisruptionbudgets."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, DisruptionBudget]] = {}

    def apply(self, event: str, obj: Mapping[str, Any]) -> None:
        """A watch event (ADDED, MODIFIED, DELETED)."""
        budget = DisruptionBudget.from_api(obj)
        held = self._by_namespace.get(budget.namespace)
        if event == "DELETED":
            if held is not None:
                held.pop(budget.name, None)
                if not held:
                    del self._by_namespace[budget.namespace]
            return
        self._by_namespace.setdefault(budget.namespace, {})[budget.name] = budget

    def replace(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list."""
        self._by_namespace = {}
        for obj in objs:
            self.apply("ADDED", obj)

    def in_namespace(self, namespace: str) -> list[DisruptionBudget]:
        return list((self._by_namespace.get(namespace) or {}).values())

    def __len__(self) -> int:
        return sum(len(held) for held in self._by_namespace.values())

    @property
    def empty(self) -> bool:
        """No budget at all: nothing can be violated (callers skip the walk)."""
        return not self._by_namespace

    def violating(self, pods: Sequence[PodRecord]) -> set[str]:
        """The uids of `pods` (most important first) whose eviction, after those before them, would take
        some budget below zero: kube-scheduler's filterPodsWithPDBViolation."""
        allowed: dict[tuple[str, str], int] = {}
        found: set[str] = set()
        if not self._by_namespace:
            return found
        for pod in pods:
            if not pod.labels:
                continue
            for budget in self._by_namespace.get(pod.namespace, {}).values():
                if not budget.selects(pod) or pod.name in budget.disrupted_pods:
                    continue
                key = (budget.namespace, budget.name)
                left = allowed.get(key, budget.disruptions_allowed) - 1
                allowed[key] = left
                if left < 0:
                    found.add(pod.uid)
        return found
