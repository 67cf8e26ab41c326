"""Logical domains of nodes (`domains.ai-scheduler.io`): the nodes each holds, as masks over the cache rows.

A Domain (cluster-scoped, deploy/crds/ai-scheduler.io_domains.yaml) names its nodes by a label
selector (`spec.nodeSelector`: `matchLabels` and `matchExpressions`, as a Deployment's selector) or by
name (`spec.nodes`), or both (a node in either belongs). Nodes join and leave as their labels change:
the masks are taken again whenever a node is added, removed or relabelled (the cache's
`static_version`) or a Domain changes, never per scheduling attempt.

A Domain may be kept (`spec.keptFor`) for work above a size or a priority: gangs (or lone pods) asking
at least `minGpus` GPUs in all, or of priority at least `minPriority`. What else may run there is the
core's business (scheduler/domains.py). Pods and gangs name the domain they require with the label
`ai-scheduler.io/domain: <name>` (a Task: `spec.domain`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache

DOMAIN_LABEL = "ai-scheduler.io/domain"  # on a pod (or every member of a gang): the domain it requires
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    nodes: frozenset[str] = frozenset()
    selector: tuple[Requirement, ...] | None = None  # None: no selector (only `nodes`)
    min_gpus: int | None = None  # keptFor.minGpus
    min_priority: int | None = None  # keptFor.minPriority
    error: str = ""

    @property
    def kept(self) -> bool:
        return self.min_gpus is not None or self.min_priority is not None

    def holds(self, name: str, labels: Mapping[str, str]) -> bool:
        if name in self.nodes:
            return True
        return self.selector is not None and all(r.matches(labels) for r in self.selector)

    def eligible(self, gpus: int, priority: int) -> bool:
        """Whether work of `gpus` GPUs in all and `priority` is what the domain is kept for."""
        return (self.min_gpus is not None and gpus >= self.min_gpus) or (
            self.min_priority is not None and priority >= self.min_priority)

    def terms(self) -> list[dict[str, Any]]:
        """Node selector terms (ORed) that select the domain's nodes: its selector, its named nodes."""
        terms: list[dict[str, Any]] = []
        if self.selector is not None:
            terms.append({"matchExpressions": [
                {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                for r in self.selector]})
        if self.nodes:
            terms.append({"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": sorted(self.nodes)}]})
        return terms

    def kept_for(self) -> str:
        parts = []
        if self.min_gpus is not None:
            parts.append(f"gangs of at least {self.min_gpus} GPUs")
        if self.min_priority is not None:
            parts.append(f"priority {self.min_priority} and above")
        return " or ".join(parts)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Domain:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        name = str(meta.get("name") or "")
        errors: list[str] = []
        if not isinstance(spec, dict):
            return cls(name, error="spec must be an object")
        nodes = spec.get("nodes") or []
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            errors.append("spec.nodes must list node names")
            nodes = []
        selector: tuple[Requirement, ...] | None = None
        raw = spec.get("nodeSelector")
        if raw is not None:
            selector = _selector(raw, errors)
        if selector is None and not nodes:
            errors.append("a Domain names its nodes: spec.nodeSelector or spec.nodes")
        kept = spec.get("keptFor") or {}
        limits: dict[str, int | None] = {}
        for key in ("minGpus", "minPriority"):
            value = kept.get(key) if isinstance(kept, dict) else None
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                errors.append(f"spec.keptFor.{key} must be a whole number, got {value!r}")
                value = None
            limits[key] = value
        if errors:  # a Domain that cannot be read holds no node and keeps nothing
            return cls(name, error="; ".join(errors))
        return cls(name, frozenset(nodes), selector, limits["minGpus"], limits["minPriority"])


def _selector(raw: Any, errors: list[str]) -> tuple[Requirement, ...] | None:
    if not isinstance(raw, dict):
        errors.append("spec.nodeSelector must be a label selector (matchLabels, matchExpressions)")
        return None
    requirements = [Requirement(str(k), "In", (str(v),)) for k, v in (raw.get("matchLabels") or {}).items()]
    for index, expression in enumerate(raw.get("matchExpressions") or ()):
        operator = (expression or {}).get("operator") if isinstance(expression, dict) else None
        if operator not in _OPERATORS or not (expression or {}).get("key"):
            errors.append(f"spec.nodeSelector.matchExpressions[{index}]: a key and an operator of "
                          f"{', '.join(_OPERATORS)}")
            continue
        values = tuple(str(v) for v in expression.get("values") or ())
        requirements.append(Requirement(str(expression["key"]), str(operator), values))
    return tuple(requirements)


@dataclass(slots=True)
class DomainTable:
    """The Domains by name, and each one's nodes as a mask over the cache's rows (taken again when nodes
    or Domains change)."""

    cache: SchedulerCache
    domains: dict[str, Domain] = field(default_factory=dict)
    version: int = 0  # moves with every change of a Domain
    _masks: dict[str, np.ndarray] = field(default_factory=dict)
    _taken_at: tuple[int, int, int] = (-1, -1, -1)

    def apply(self, event: str, obj: Mapping[str, Any]) -> bool:
        """A watch event of a Domain; whether what is in force changed."""
        domain = Domain.from_api(obj)
        before = self.domains.get(domain.name)
        if event == "DELETED":
            self.domains.pop(domain.name, None)
        else:
            self.domains[domain.name] = domain
        changed = before != (None if event == "DELETED" else domain)
        if changed:
            self.version += 1
        return changed

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> bool:
        fresh = {d.name: d for d in (Domain.from_api(o) for o in objects)}
        changed = fresh != self.domains
        self.domains = fresh
        if changed:
            self.version += 1
        return changed

    def mask(self, name: str) -> np.ndarray | None:
        """The rows of the domain's nodes (None: no such Domain)."""
        if name not in self.domains:
            return None
        cache = self.cache
        key = (cache.static_version, cache.rows, self.version)
        if key != self._taken_at:
            self._masks = {}
            self._taken_at = key
        mask = self._masks.get(name)
        if mask is None:
            domain = self.domains[name]
            mask = np.zeros(cache.rows, dtype=bool)
            for row, record in enumerate(cache.row_records):
                if record is not None and domain.holds(record.name, record.labels):
                    mask[row] = True
            self._masks[name] = mask
        return mask

    def names_by_row(self) -> dict[int, list[str]]:
        """The Domains each row belongs to, by name (for the resource view, never per attempt)."""
        rows: dict[int, list[str]] = {}
        for name in sorted(self.domains):
            mask = self.mask(name)
            if mask is not None:
                for row in np.flatnonzero(mask).tolist():
                    rows.setdefault(row, []).append(name)
        return rows
