"""Group quotas from scheduler-plugins' ElasticQuota objects, merged under the config file's tenancy.

Capacity Scheduling (kubernetes-sigs/scheduler-plugins) gives each namespace a quota with an
`ElasticQuota` (scheduling.x-k8s.io/v1alpha1): `spec.min`, the share guaranteed to the namespace, and
`spec.max`, what it may use at most, borrowing idle capacity in between. That is what a group of the
config is (`GroupSpec.min` and `.max`), so that manifests written for Capacity Scheduling keep working
here, each ElasticQuota becomes a group of the namespace's pods:

- group and user both named `<namespace>/<name>` of the ElasticQuota (a name the config's own
  groups and users do not use in practice; where one does, the config's stands and the quota is left
  out), with the quota's `min` and `max`; the namespace is mapped to that user;
- the config file stays the default source and wins: a namespace the config maps to a user keeps its
  user, group and quotas, and its ElasticQuota is ignored;
- one quota per namespace, as Capacity Scheduling's webhook allows: of several, the first by name counts;
- a quota that does not parse (a quantity that is none, a min above its max) is left out, with the reason
  in `ElasticQuotas.errors`, rather than stopping every quota.

The result is a Config like any other: `Tenancy` then refuses, preemption reclaims towards `min`, and the
quota views show them, with no code of their own. The daemon merges again whenever the file or an
ElasticQuota changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ai_scheduler.config.schema import Config, FrozenMap, GroupSpec, NamespaceSpec, UserSpec
from ai_scheduler.quantity import QuantityError, format_units, to_units


@dataclass(frozen=True, slots=True)
class ElasticQuota:
    namespace: str
    name: str
    min: Mapping[str, int]
    max: Mapping[str, int]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class ElasticQuotaError(ValueError):
    """An ElasticQuota that cannot be used, with the reason."""


def parse_amounts(section: Any, where: str) -> FrozenMap[int]:
    if section is None:
        return FrozenMap()
    if not isinstance(section, Mapping):
        raise ElasticQuotaError(f"{where} must be a map of resource names to quantities")
    amounts = {}
    for resource, value in section.items():
        try:
            units = to_units(str(resource), value)
        except QuantityError:
            raise ElasticQuotaError(f"{where}[{resource!r}]: invalid quantity {value!r}") from None
        if units < 0:
            raise ElasticQuotaError(f"{where}[{resource!r}] must not be negative, got {value!r}")
        amounts[str(resource)] = units
    return FrozenMap(amounts)


def parse_elastic_quota(obj: Mapping[str, Any]) -> ElasticQuota:
    """An ElasticQuota object as the API serves it; raises ElasticQuotaError for one that cannot be used."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    quota = ElasticQuota(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        min=parse_amounts(spec.get("min"), "spec.min"),
        max=parse_amounts(spec.get("max"), "spec.max"),
    )
    check_min_under_max(quota.min, quota.max)
    return quota


def check_min_under_max(minimum: Mapping[str, int], maximum: Mapping[str, int]) -> None:
    """Raise ElasticQuotaError for a guaranteed amount above the maximum of the same resource."""
    for resource, guaranteed in minimum.items():
        limit = maximum.get(resource)
        if limit is not None and guaranteed > limit:
            raise ElasticQuotaError(
                f"spec.min[{resource!r}] ({format_units(resource, guaranteed)}) is above spec.max "
                f"({format_units(resource, limit)})"
            )


class ElasticQuotas:
    """The ElasticQuota objects the daemon sees, by namespace/name, and those that could not be used."""

    def __init__(self) -> None:
        self.quotas: dict[str, ElasticQuota] = {}
        self.errors: dict[str, str] = {}

    def apply(self, event: str, obj: Mapping[str, Any]) -> bool:
        """A watch event (ADDED, MODIFIED, DELETED); whether the quotas in force changed."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
        before = self.quotas.get(key)
        self.errors.pop(key, None)
        if event == "DELETED":
            self.quotas.pop(key, None)
            return before is not None
        try:
            quota = parse_elastic_quota(obj)
        except ElasticQuotaError as exc:
            self.errors[key] = str(exc)
            self.quotas.pop(key, None)
            return before is not None
        self.quotas[key] = quota
        return quota != before

    def described(self) -> dict[str, dict[str, dict[str, str]]]:
        """The quotas in force as a log line shows them: {"ns/name": {"min": {...}, "max": {...}}}."""
        return {
            key: {bound: {r: format_units(r, n) for r, n in amounts.items()}
                  for bound, amounts in (("min", quota.min), ("max", quota.max))}
            for key, quota in sorted(self.quotas.items())
        }

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> bool:
        """A relist: the quotas are exactly these; whether the quotas in force changed."""
        before = dict(self.quotas)
        self.quotas.clear()
        self.errors.clear()
        for obj in objects:
            self.apply("ADDED", obj)
        return self.quotas != before


def with_elastic_quotas(config: Config, quotas: Iterable[ElasticQuota]) -> Config:
    """`config` with a group, a user and a namespace mapping per ElasticQuota, the config winning."""
    groups, users, namespaces = dict(config.groups), dict(config.users), dict(config.namespaces)
    added = False
    for quota in sorted(quotas, key=lambda q: (q.namespace, q.name)):
        key = quota.key
        if quota.namespace in namespaces or key in groups or key in users:
            continue  # the config's mapping stands, as does an earlier quota of the namespace
        groups[key] = GroupSpec(name=key, min=quota.min, max=quota.max)
        users[key] = UserSpec(name=key, group=key)
        namespaces[quota.namespace] = NamespaceSpec(name=quota.namespace, user=key)
        added = True
    if not added:
        return config
    return dataclasses.replace(
        config, groups=FrozenMap(groups), users=FrozenMap(users), namespaces=FrozenMap(namespaces)
    )
