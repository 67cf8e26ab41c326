"""A pod's `topologySpreadConstraints`, parsed once per distinct spec.

kube-scheduler's PodTopologySpread turns each v1.TopologySpreadConstraint into
an internal record at every PreFilter and PreScore (its selector parsed, its
optional fields defaulted). We do it once, when the pod record is built from
the API's JSON, and intern the result by the spec and the pod labels that
`matchLabelKeys` reads, so that the replicas of one template share one
`SpreadConstraints` object (and a plugin can tell "same constraints" by
identity).

Semantics follow kube-scheduler v1.36 (podtopologyspread/common.go):
- `minDomains` unset is 1; `nodeAffinityPolicy` unset is Honor and
  `nodeTaintsPolicy` unset is Ignore;
- `matchLabelKeys` adds `key in (the pod's value)` to the selector for each
  key the pod carries, as kube-apiserver does at admission (doing it again for
  a pod whose selector the API server already merged changes nothing); a
  missing `labelSelector` stays a selector that matches no pod;
- DoNotSchedule constraints filter (`hard`), ScheduleAnyway ones score (`soft`).

What kube-apiserver's validation refuses (maxSkew < 1, an unknown
whenUnsatisfiable or inclusion policy, minDomains < 1 or with ScheduleAnyway,
no topologyKey, a topologyKey twice with the same whenUnsatisfiable, a bad
selector) raises `SelectorError` with the field's path; the pod record keeps
it as the pod's reason, so the pod is reported, never scheduled against a
constraint half understood.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ai_scheduler.cache.selectors import LabelSelector, Requirement, SelectorError, parse_selector
from ai_scheduler.messages import echo

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"
_WHEN = (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)
_POLICIES = (HONOR, IGNORE)
_FIELD = "spec.topologySpreadConstraints"


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topology spread constraint, defaults filled in and its selector parsed."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    hard: bool = False  # whenUnsatisfiable DoNotSchedule (filter); else ScheduleAnyway (score)
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy Honor: only nodes the pod may use are domains
    honor_node_taints: bool = False  # nodeTaintsPolicy Honor: only nodes whose taints the pod tolerates


@dataclass(frozen=True, slots=True, eq=False)
class SpreadConstraints:
    """A pod's constraints, split by what they do; compared by identity (one object per distinct spec)."""

    hard: tuple[SpreadConstraint, ...] = ()
    soft: tuple[SpreadConstraint, ...] = ()


# The pod sets no constraints: kube-scheduler's system defaults may apply to it (scoring only).
NO_SPREAD = SpreadConstraints()

_INTERNED: dict[tuple[bytes, tuple[tuple[str, str], ...]], SpreadConstraints] = {}
_MAX_INTERNED = 4096


def _positive(item: Mapping[str, Any], field: str, where: str, default: int | None = None) -> int:
    value = item.get(field, default)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SelectorError(f"{where}.{field} must be an integer greater than zero, got {echo(value)}")
    return value


def _policy(item: Mapping[str, Any], field: str, where: str, default: str) -> bool:
    value = item.get(field)
    if value is None:
        value = default
    if value not in _POLICIES:
        raise SelectorError(f"{where}.{field} must be Honor or Ignore, got {echo(value)}")
    return bool(value == HONOR)


def _parse_one(item: Any, labels: Mapping[str, str], where: str) -> SpreadConstraint:
    if not isinstance(item, dict):
        raise SelectorError(f"{where} must be a topology spread constraint, got {echo(item)}")
    max_skew = _positive(item, "maxSkew", where)
    topology_key = item.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise SelectorError(f"{where}.topologyKey must be a non-empty label key, got {echo(topology_key)}")
    when = item.get("whenUnsatisfiable")
    if when not in _WHEN:
        raise SelectorError(
            f"{where}.whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway, got {echo(when)}"
        )
    hard = when == DO_NOT_SCHEDULE
    min_domains = 1
    if item.get("minDomains") is not None:
        if not hard:
            raise SelectorError(f"{where}.minDomains can only be used with whenUnsatisfiable DoNotSchedule")
        min_domains = _positive(item, "minDomains", where)
    selector = parse_selector(item.get("labelSelector"), f"{where}.labelSelector")
    keys = item.get("matchLabelKeys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        raise SelectorError(f"{where}.matchLabelKeys must be a list of label keys, got {echo(keys)}")
    extra = tuple(Requirement(key, "In", frozenset((labels[key],))) for key in keys if key in labels)
    return SpreadConstraint(
        max_skew,
        topology_key,
        selector.with_requirements(extra),
        hard,
        min_domains,
        _policy(item, "nodeAffinityPolicy", where, HONOR),
        _policy(item, "nodeTaintsPolicy", where, IGNORE),
    )


def spread_constraints(spec: Any, labels: Mapping[str, str]) -> SpreadConstraints:
    """The parsed `spec.topologySpreadConstraints` of a pod with these labels (NO_SPREAD when none)."""
    if not spec:
        return NO_SPREAD
    if not isinstance(spec, list):
        raise SelectorError(f"{_FIELD} must be a list, got {echo(spec)}")
    raw = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
    # Only the labels that matchLabelKeys names change the parse; other labels do not.
    named = tuple(sorted((k, v) for k, v in labels.items() if b'"' + k.encode() + b'"' in raw))
    key = (raw, named)
    parsed = _INTERNED.get(key)
    if parsed is not None:
        return parsed
    constraints = [_parse_one(item, labels, f"{_FIELD}[{i}]") for i, item in enumerate(spec)]
    seen: dict[tuple[str, bool], int] = {}
    for i, constraint in enumerate(constraints):
        pair = (constraint.topology_key, constraint.hard)
        if pair in seen:
            raise SelectorError(
                f"{_FIELD}[{i}] repeats topologyKey {echo(constraint.topology_key)} with the same "
                f"whenUnsatisfiable as {_FIELD}[{seen[pair]}]"
            )
        seen[pair] = i
    parsed = SpreadConstraints(
        tuple(c for c in constraints if c.hard), tuple(c for c in constraints if not c.hard)
    )
    if len(_INTERNED) >= _MAX_INTERNED:
        _INTERNED.clear()
    _INTERNED[key] = parsed
    return parsed


# kube-scheduler's systemDefaultConstraints (PodTopologySpreadArgs defaultingType System), applied by the
# score to pods that set no constraints of their own, with the selector of the workload they belong to.
SYSTEM_DEFAULT_CONSTRAINTS = (
    SpreadConstraint(3, HOSTNAME_KEY, LabelSelector(nothing=True)),
    SpreadConstraint(5, ZONE_KEY, LabelSelector(nothing=True)),
)
