"""The pod selectors of Services and of the controllers kube-scheduler's default spreading reads.

kube-scheduler's PodTopologySpread applies its system default constraints
(hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) to a pod that sets none
of its own, spreading it among the pods that helper.DefaultSelector finds for
it: the `spec.selector` of every Service of its namespace that selects it,
merged, plus the selector of its controller when that is a
ReplicationController (merged the same way), a ReplicaSet or a StatefulSet
(its requirements added). A pod that nothing selects gets no default
constraints.

We keep only those selectors, not the objects, filled by the daemon's
informers for services, replicationcontrollers, replicasets and statefulsets,
which it runs only when a profile scores with PodTopologySpread. `version`
changes with every update, so the selector a pod gets is memoised per
(namespace, labels, controller) until the next one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.selectors import LabelSelector, Requirement, SelectorError, parse_selector

SERVICES = "services"
REPLICATION_CONTROLLERS = "replicationcontrollers"
REPLICA_SETS = "replicasets"
STATEFUL_SETS = "statefulsets"
RESOURCES = (SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS)
# An ownerReference's kind (PodRecord.controller) and the resource it lives in.
_KIND_RESOURCE = {
    "ReplicationController": REPLICATION_CONTROLLERS,
    "ReplicaSet": REPLICA_SETS,
    "StatefulSet": STATEFUL_SETS,
}

# A Service's or ReplicationController's selector (a label map; None: selects nothing), or a ReplicaSet's
# or StatefulSet's (parsed; None when it cannot be parsed, as kube skips it then).
Selector = Mapping[str, str] | LabelSelector | None
_MemoKey = tuple[str, tuple[tuple[str, str], ...], tuple[str, str] | None]


def _label_map(value: Any) -> Mapping[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


def _selector_of(resource: str, obj: Mapping[str, Any]) -> Selector:
    spec = obj.get("spec") or {}
    if resource in (SERVICES, REPLICATION_CONTROLLERS):
        return _label_map(spec.get("selector"))
    try:
        return parse_selector(spec.get("selector"), "spec.selector")
    except SelectorError:
        return None


def _where(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class WorkloadSelectors:
    """Selectors by (resource, namespace, name); `default_selector` is kube's helper.DefaultSelector."""

    def __init__(self) -> None:
        self.version = 0
        self._by_resource: dict[str, dict[str, dict[str, Selector]]] = {r: {} for r in RESOURCES}
        self._memo: dict[_MemoKey, LabelSelector | None] = {}
        self._memo_version = 0

    def _changed(self) -> None:
        self.version += 1

    def apply(self, resource: str, event: str, obj: Mapping[str, Any]) -> None:
        """A watch event (ADDED, MODIFIED, DELETED) for one object of `resource`."""
        namespace, name = _where(obj)
        by_namespace = self._by_resource[resource]
        if event == "DELETED":
            held = by_namespace.get(namespace)
            if held is None or name not in held:
                return
            del held[name]
            if not held:
                del by_namespace[namespace]
        else:
            by_namespace.setdefault(namespace, {})[name] = _selector_of(resource, obj)
        self._changed()

    def replace(self, resource: str, objs: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list of `resource`."""
        by_namespace: dict[str, dict[str, Selector]] = {}
        for obj in objs:
            namespace, name = _where(obj)
            by_namespace.setdefault(namespace, {})[name] = _selector_of(resource, obj)
        self._by_resource[resource] = by_namespace
        self._changed()

    def default_selector(self, pod: PodRecord) -> LabelSelector | None:
        """The selector of the pods `pod` spreads among under the system defaults; None: no defaults."""
        services = self._by_resource[SERVICES].get(pod.namespace)
        if pod.controller is None and not services:
            return None
        if self._memo_version != self.version:
            self._memo.clear()
            self._memo_version = self.version
        key = (pod.namespace, tuple(sorted(pod.labels.items())), pod.controller)
        if key in self._memo:
            return self._memo[key]
        selector = self._default_selector(pod, services or {})
        if len(self._memo) >= 4096:
            self._memo.clear()
        self._memo[key] = selector
        return selector

    def _default_selector(self, pod: PodRecord, services: Mapping[str, Selector]) -> LabelSelector | None:
        labels = pod.labels
        label_set: dict[str, str] = {}
        for selector in services.values():
            # A Service without a selector selects nothing; an empty one selects every pod.
            if isinstance(selector, Mapping) and all(labels.get(k) == v for k, v in selector.items()):
                label_set.update(selector)
        added: tuple[Requirement, ...] = ()
        if pod.controller is not None:
            kind, name = pod.controller
            owner = self._by_resource[_KIND_RESOURCE[kind]].get(pod.namespace, {}).get(name)
            if isinstance(owner, LabelSelector):
                added = owner.requirements  # a ReplicaSet's or StatefulSet's; none for a null selector
            elif owner is not None:
                label_set.update(owner)  # a ReplicationController's
        requirements = tuple(Requirement(k, "In", frozenset((v,))) for k, v in sorted(label_set.items()))
        requirements += added
        return LabelSelector(requirements) if requirements else None

    def __len__(self) -> int:
        return sum(len(names) for by_ns in self._by_resource.values() for names in by_ns.values())
