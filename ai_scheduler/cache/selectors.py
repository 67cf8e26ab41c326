"""Label selectors and pod affinity terms, parsed once per distinct spec.

A pod's `podAffinity` / `podAntiAffinity` is turned into `PodAffinityTerms`:
four tuples of `AffinityTerm` (required and preferred, affinity and
anti-affinity), each with its parsed label selector, the namespaces it applies
to and its topology key, as kube-scheduler's framework.PodInfo holds them.
Pods made from one template share one parsed object (it is interned by the
spec, the pod's namespace and the labels that `matchLabelKeys` reads), so a
cluster of 50,000 replicas holds a handful of them, and the cache can group
existing pods by it.

Semantics follow Kubernetes:
- a LabelSelector is the AND of its matchLabels and matchExpressions (In,
  NotIn, Exists, DoesNotExist); an empty selector matches every pod, a missing
  one (null) matches none;
- a term applies to the namespaces it lists, plus those whose labels match its
  `namespaceSelector` (an empty one: every namespace); with neither, to the
  pod's own namespace;
- `matchLabelKeys` / `mismatchLabelKeys` add `key in (pod's value)` /
  `key notin (pod's value)` to the selector, as kube-apiserver does at
  admission (doing it again for a pod the API server already merged changes
  nothing);
- an invalid spec (unknown operator, `In` without values, a term without a
  topology key) raises `SelectorError`, which the pod record keeps as its
  reason.

`requirement_matches` is the node side: one NodeSelectorRequirement (In,
NotIn, Exists, DoesNotExist, and Gt/Lt on 64-bit integers as Go parses them)
against a node's labels or fields, for node affinity, PersistentVolumes' node
affinity and Dynamic Resource Allocation's node selectors alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ai_scheduler.messages import echo


class SelectorError(ValueError):
    """A label selector or affinity term that Kubernetes' validation would refuse."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None  # DoesNotExist


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """The AND of requirements; `nothing` for a null selector (matches no pod)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(requirement.matches(labels) for requirement in self.requirements)

    @property
    def everything(self) -> bool:
        return not self.nothing and not self.requirements

    def required_pairs(self) -> tuple[tuple[str, frozenset[str]], ...]:
        """(key, allowed values) that a matching pod must carry: narrows the pods to look at."""
        return tuple((r.key, r.values) for r in self.requirements if r.operator == "In")

    def with_requirements(self, extra: tuple[Requirement, ...]) -> LabelSelector:
        if self.nothing or not extra:
            return self
        return LabelSelector(self.requirements + extra)


NOTHING = LabelSelector(nothing=True)
EVERYTHING = LabelSelector()


def parse_selector(spec: Any, where: str) -> LabelSelector:
    """A metav1.LabelSelector (JSON) as a LabelSelector; None/absent is NOTHING."""
    if spec is None:
        return NOTHING
    if not isinstance(spec, dict):
        raise SelectorError(f"{where} must be a label selector, got {echo(spec)}")
    requirements: list[Requirement] = []
    match_labels = spec.get("matchLabels") or {}
    if not isinstance(match_labels, dict):
        raise SelectorError(f"{where}.matchLabels must be a map, got {echo(match_labels)}")
    for key, value in sorted(match_labels.items()):
        requirements.append(Requirement(str(key), "In", frozenset((str(value),))))
    for i, expression in enumerate(spec.get("matchExpressions") or ()):
        path = f"{where}.matchExpressions[{i}]"
        if not isinstance(expression, dict):
            raise SelectorError(f"{path} must be a requirement, got {echo(expression)}")
        key = expression.get("key")
        operator = expression.get("operator")
        values = expression.get("values") or []
        if not isinstance(key, str) or not key:
            raise SelectorError(f"{path}.key must be a label key, got {echo(key)}")
        if operator not in _OPERATORS:
            raise SelectorError(
                f"{path}.operator must be one of {', '.join(_OPERATORS)}, got {echo(operator)}"
            )
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{path}.values must be a list of strings, got {echo(values)}")
        if operator in ("In", "NotIn") and not values:
            raise SelectorError(f"{path}.values must be non-empty for operator {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{path}.values must be empty for operator {operator}")
        requirements.append(Requirement(key, operator, frozenset(values)))
    return LabelSelector(tuple(requirements))


_INT64 = re.compile(r"[+-]?[0-9]+")


def _as_int(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64), which labels.Requirement uses for Gt/Lt.

    Python's int() is laxer: it takes "1_000", surrounding blanks and non-ASCII
    digits, and has no 64-bit range; such label values do not match in Kubernetes.
    """
    if not isinstance(text, str) or not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def requirement_matches(requirement: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    """One NodeSelectorRequirement against a label (or field) map, with Kubernetes' operator rules."""
    key = requirement.get("key", "")
    operator = requirement.get("operator", "")
    values = requirement.get("values") or []
    present = key in values_of
    value = values_of.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, bound = _as_int(value or ""), _as_int(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A PodAffinityTerm (with its weight when preferred), resolved against the owning pod."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector  # NOTHING when the term has none
    topology_key: str
    weight: int = 0

    def applies_to_namespace(self, namespace: str, namespace_labels: Mapping[str, str] | None) -> bool:
        if namespace in self.namespaces:
            return True
        if self.namespace_selector.nothing:
            return False
        if self.namespace_selector.everything:
            return True
        return namespace_labels is not None and self.namespace_selector.matches(namespace_labels)

    def matches(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None
    ) -> bool:
        """Does a pod (namespace, labels) match this term? (kube's AffinityTerm.Matches)"""
        return self.applies_to_namespace(namespace, namespace_labels) and self.selector.matches(labels)


@dataclass(frozen=True, slots=True, eq=False)
class PodAffinityTerms:
    """A pod's inter-pod affinity, parsed; compared by identity (one object per distinct spec)."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()

    @property
    def has_required(self) -> bool:
        return bool(self.required_affinity or self.required_anti_affinity)

    @property
    def has_preferred(self) -> bool:
        return bool(self.preferred_affinity or self.preferred_anti_affinity)


def _label_key_requirements(
    term: dict[str, Any], labels: Mapping[str, str], where: str
) -> tuple[Requirement, ...]:
    extra: list[Requirement] = []
    for field, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        keys = term.get(field) or []
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise SelectorError(f"{where}.{field} must be a list of label keys, got {echo(keys)}")
        for key in keys:
            if key in labels:
                extra.append(Requirement(key, operator, frozenset((labels[key],))))
    return tuple(extra)


def _parse_term(
    term: Any, namespace: str, labels: Mapping[str, str], where: str, weight: int = 0
) -> AffinityTerm:
    if not isinstance(term, dict):
        raise SelectorError(f"{where} must be a pod affinity term, got {echo(term)}")
    topology_key = term.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise SelectorError(f"{where}.topologyKey must be a non-empty label key, got {echo(topology_key)}")
    selector = parse_selector(term.get("labelSelector"), f"{where}.labelSelector")
    selector = selector.with_requirements(_label_key_requirements(term, labels, where))
    listed = term.get("namespaces") or []
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        raise SelectorError(f"{where}.namespaces must be a list of names, got {echo(listed)}")
    raw_ns_selector = term.get("namespaceSelector")
    ns_selector = parse_selector(raw_ns_selector, f"{where}.namespaceSelector")
    namespaces = frozenset(listed)
    if not namespaces and raw_ns_selector is None:
        namespaces = frozenset((namespace,))
    return AffinityTerm(selector, namespaces, ns_selector, topology_key, weight)


def _parse_weighted(
    items: Any, namespace: str, labels: Mapping[str, str], where: str
) -> tuple[AffinityTerm, ...]:
    if not isinstance(items, list):
        raise SelectorError(f"{where} must be a list, got {echo(items)}")
    terms = []
    for i, item in enumerate(items):
        path = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise SelectorError(f"{path} must be a weighted term, got {echo(item)}")
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise SelectorError(f"{path}.weight must be an integer from 1 to 100, got {echo(weight)}")
        terms.append(
            _parse_term(item.get("podAffinityTerm"), namespace, labels, f"{path}.podAffinityTerm", weight)
        )
    return tuple(terms)


def _parse_required(
    items: Any, namespace: str, labels: Mapping[str, str], where: str
) -> tuple[AffinityTerm, ...]:
    if not isinstance(items, list):
        raise SelectorError(f"{where} must be a list, got {echo(items)}")
    return tuple(_parse_term(item, namespace, labels, f"{where}[{i}]") for i, item in enumerate(items))


NO_AFFINITY = PodAffinityTerms()
_INTERNED: dict[tuple[str, bytes, tuple[tuple[str, str], ...]], PodAffinityTerms] = {}
_MAX_INTERNED = 4096
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def pod_affinity_terms(
    affinity: Mapping[str, Any], namespace: str, labels: Mapping[str, str]
) -> PodAffinityTerms:
    """The parsed podAffinity/podAntiAffinity of a pod's spec.affinity (NO_AFFINITY when it has none)."""
    if not isinstance(affinity, Mapping):
        raise SelectorError(f"spec.affinity must be an object, got {echo(affinity)}")
    pod_affinity = affinity.get("podAffinity") or {}
    anti_affinity = affinity.get("podAntiAffinity") or {}
    if not pod_affinity and not anti_affinity:
        return NO_AFFINITY
    if not isinstance(pod_affinity, dict) or not isinstance(anti_affinity, dict):
        raise SelectorError("spec.affinity.podAffinity and podAntiAffinity must be objects")
    spec = orjson.dumps([pod_affinity, anti_affinity], option=orjson.OPT_SORT_KEYS)
    # Only the labels named by matchLabelKeys/mismatchLabelKeys change the parse; other labels do not.
    named = tuple(sorted((k, v) for k, v in labels.items() if b'"' + k.encode() + b'"' in spec))
    key = (namespace, spec, named)
    terms = _INTERNED.get(key)
    if terms is not None:
        return terms
    where = "spec.affinity"
    terms = PodAffinityTerms(
        _parse_required(
            pod_affinity.get(_REQUIRED) or [], namespace, labels, f"{where}.podAffinity.{_REQUIRED}"
        ),
        _parse_required(
            anti_affinity.get(_REQUIRED) or [], namespace, labels, f"{where}.podAntiAffinity.{_REQUIRED}"
        ),
        _parse_weighted(
            pod_affinity.get(_PREFERRED) or [], namespace, labels, f"{where}.podAffinity.{_PREFERRED}"
        ),
        _parse_weighted(
            anti_affinity.get(_PREFERRED) or [], namespace, labels, f"{where}.podAntiAffinity.{_PREFERRED}"
        ),
    )
    if not (terms.has_required or terms.has_preferred):
        terms = NO_AFFINITY
    if len(_INTERNED) >= _MAX_INTERNED:
        _INTERNED.clear()
    _INTERNED[key] = terms
    return terms
