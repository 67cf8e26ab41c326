"""Quotas that group administrators delegate: GroupQuota and UserQuota objects, merged under the config's.

Two custom resources (deploy/crds/, `ai-scheduler.io/v1alpha1`) split the work RBAC can split:

- `GroupQuota` (cluster-scoped, named after the group): `spec.level`, `spec.share`, `spec.min`,
  `spec.max`, a group of the config. Cluster administrators write them (a ClusterRole no one else has).
- `UserQuota` (namespaced): the user named by the object, whose pods are those of its namespace, in the
  group `spec.group`, with `spec.level` and `spec.max`. A group's administrators write them in their
  group's namespaces (the ClusterRole `ai-scheduler-group-admin`, bound by a RoleBinding in each
  namespace of the group): they cannot touch another group's namespaces, and the admission policy of
  deploy/quota-delegation.yaml refuses a UserQuota whose `spec.group` is not its namespace's label
  `ai-scheduler.io/group`, or whose `max` is above what the group has left (its max less the
  `status.allocated` this module computes). Users read their own (`ai-scheduler-quota-reader`).

Merged into the config as ElasticQuotas are (config/elasticquota.py), the config file winning: a group
or user the file defines, or a namespace it maps, keeps the file's. UserQuotas are taken in creation
order; each is checked again here, where every object is known at once (an admission policy sees one
object at a time, and two changes at the same moment can both pass it):

- a UserQuota whose group is neither in the file nor a GroupQuota, or whose user or namespace another
  UserQuota has already, is refused: the namespace stays unmapped, as without it;
- a `max` above what its group has left of a resource is cut to what is left (never above the group's
  max, so the group's own limit holds whatever was written), and refused: the status says so;
- what each group has allocated (the sum of its users' max, the file's users included) is written on
  the GroupQuota's status, which the admission policy reads.

`merge` returns the Config, each UserQuota's outcome (applied or why not) and each group's allocation;
the daemon writes the last two on the objects (daemon/quotas.py) and applies the Config at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.config.elasticquota import ElasticQuotaError, check_min_under_max, parse_amounts
from ai_scheduler.config.schema import Config, FrozenMap, GroupSpec, NamespaceSpec, UserSpec
from ai_scheduler.quantity import format_units

GROUP_LABEL = "ai-scheduler.io/group"  # a namespace's group, set by cluster administrators


@dataclass(frozen=True, slots=True)
class GroupQuota:
    name: str
    level: int = 0
    share: float = 1.0
    min: Mapping[str, int] = field(default_factory=FrozenMap)
    max: Mapping[str, int] = field(default_factory=FrozenMap)


@dataclass(frozen=True, slots=True)
class UserQuota:
    namespace: str
    name: str  # the user
    group: str
    level: int = 0
    max: Mapping[str, int] = field(default_factory=FrozenMap)
    created: str = ""  # metadata.creationTimestamp: the order they are applied in

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a UserQuota: applied as written, or why not and the max it got instead."""

    applied: bool
    reason: str = ""
    max: Mapping[str, int] = field(default_factory=FrozenMap)

    def status(self) -> dict[str, Any]:
        return {"applied": self.applied, "reason": self.reason,
                "effectiveMax": {r: format_units(r, n) for r, n in sorted(self.max.items())}}


def _whole(value: Any, where: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise ElasticQuotaError(f"{where} must be a whole number 0..100, got {value!r}")
    return value


def _parts(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """An object's metadata and spec; ElasticQuotaError for a spec that is not an object."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ElasticQuotaError("spec must be an object")
    return meta, spec


def parse_group_quota(obj: Mapping[str, Any]) -> GroupQuota:
    meta, spec = _parts(obj)
    share = spec.get("share", 1.0)
    if isinstance(share, bool) or not isinstance(share, int | float) or not share > 0:
        raise ElasticQuotaError(f"spec.share must be a number above 0, got {share!r}")
    quota = GroupQuota(str(meta.get("name") or ""), _whole(spec.get("level"), "spec.level"), float(share),
                       parse_amounts(spec.get("min"), "spec.min"), parse_amounts(spec.get("max"), "spec.max"))
    check_min_under_max(quota.min, quota.max)
    return quota


def parse_user_quota(obj: Mapping[str, Any]) -> UserQuota:
    meta, spec = _parts(obj)
    group = spec.get("group")
    if not isinstance(group, str) or not group:
        raise ElasticQuotaError(f"spec.group must name a group, got {group!r}")
    return UserQuota(str(meta.get("namespace") or ""), str(meta.get("name") or ""), group,
                     _whole(spec.get("level"), "spec.level"), parse_amounts(spec.get("max"), "spec.max"),
                     str(meta.get("creationTimestamp") or ""))


class DelegatedQuotas:
    """The GroupQuota and UserQuota objects the daemon sees, and those that could not be read."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupQuota] = {}
        self.users: dict[str, UserQuota] = {}
        self.errors: dict[str, str] = {}  # "GroupQuota/NAME" or "UserQuota/NS/NAME" -> why unreadable

    def apply(self, kind: str, event: str, obj: Mapping[str, Any]) -> bool:
        """A watch event of a GroupQuota or a UserQuota (`kind`); whether what is in force changed."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        key = name if kind == "GroupQuota" else f"{meta.get('namespace') or ''}/{name}"
        held: dict[str, Any] = self.groups if kind == "GroupQuota" else self.users
        before = held.get(key)
        self.errors.pop(f"{kind}/{key}", None)
        if event == "DELETED":
            held.pop(key, None)
            return before is not None
        try:
            quota: Any = parse_group_quota(obj) if kind == "GroupQuota" else parse_user_quota(obj)
        except ElasticQuotaError as exc:
            self.errors[f"{kind}/{key}"] = str(exc)
            held.pop(key, None)
            return True
        held[key] = quota
        return bool(quota != before)

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> bool:
        held: dict[str, Any] = self.groups if kind == "GroupQuota" else self.users
        before = dict(held)
        held.clear()
        for error in [k for k in self.errors if k.startswith(f"{kind}/")]:
            del self.errors[error]
        for obj in objects:
            self.apply(kind, "ADDED", obj)
        return held != before


@dataclass(frozen=True, slots=True)
class Merged:
    config: Config
    outcomes: Mapping[str, Outcome]  # UserQuota namespace/name -> what became of it
    allocated: Mapping[str, Mapping[str, int]]  # group -> resource -> the sum of its users' max
    ignored_groups: Mapping[str, str]  # GroupQuota name -> why it is not in force


def merge(config: Config, quotas: DelegatedQuotas) -> Merged:
    """`config` with the GroupQuotas and UserQuotas merged under it (see the module's doc)."""
    groups, users, namespaces = dict(config.groups), dict(config.users), dict(config.namespaces)
    ignored: dict[str, str] = {}
    for name, group in sorted(quotas.groups.items()):
        if name in groups:
            ignored[name] = f"group {name} is defined in the config file, which wins"
            continue
        groups[name] = GroupSpec(name=name, level=group.level, share=group.share, min=group.min,
                                 max=group.max)
    allocated: dict[str, dict[str, int]] = {name: {} for name in groups}
    for user in users.values():
        for resource, amount in user.max.items():
            bucket = allocated.setdefault(user.group, {})
            bucket[resource] = bucket.get(resource, 0) + amount
    outcomes: dict[str, Outcome] = {}
    for quota in sorted(quotas.users.values(), key=lambda q: (q.created, q.key)):
        refusal = _refusal(quota, groups, users, namespaces)
        if refusal:
            outcomes[quota.key] = Outcome(False, refusal)
            continue
        limits, cut = {}, []
        group_max, used = groups[quota.group].max, allocated.setdefault(quota.group, {})
        for resource, amount in quota.max.items():
            left = group_max[resource] - used.get(resource, 0) if resource in group_max else None
            if left is not None and amount > left:
                cut.append(f"{resource} {format_units(resource, amount)} asked, "
                           f"{format_units(resource, max(left, 0))} left of the group's "
                           f"{format_units(resource, group_max[resource])}")
                amount = max(left, 0)
            limits[resource] = amount
            used[resource] = used.get(resource, 0) + amount
        users[quota.name] = UserSpec(name=quota.name, group=quota.group, level=quota.level,
                                     max=FrozenMap(limits))
        namespaces[quota.namespace] = NamespaceSpec(name=quota.namespace, user=quota.name)
        reason = (f"above what group {quota.group} has left: {'; '.join(cut)}; limited to what is left"
                  if cut else "")
        outcomes[quota.key] = Outcome(not cut, reason, FrozenMap(limits))
    merged = config if not quotas.groups and not quotas.users else dataclasses.replace(
        config, groups=FrozenMap(groups), users=FrozenMap(users), namespaces=FrozenMap(namespaces))
    return Merged(merged, outcomes, {g: FrozenMap(a) for g, a in allocated.items()}, ignored)


def _refusal(quota: UserQuota, groups: Mapping[str, GroupSpec], users: Mapping[str, UserSpec],
             namespaces: Mapping[str, NamespaceSpec]) -> str:
    if quota.group not in groups:
        return f"group {quota.group} is neither a GroupQuota nor in the config file"
    if quota.namespace in namespaces:
        return f"namespace {quota.namespace} already belongs to user {namespaces[quota.namespace].user}"
    if quota.name in users:
        return f"user {quota.name} is already defined (by the config file or an earlier UserQuota)"
    return ""
