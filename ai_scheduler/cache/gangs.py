"""Gangs: which pods must start together, and what we know of each group.

A pod joins a gang in one of four ways (CONTRACT.md), read in this order:
1. label `scheduling.x-k8s.io/pod-group: NAME` -> the PodGroup custom resource NAME;
2. label `pod-group.scheduling.sigs.k8s.io: NAME` (older scheduler-plugins) -> the PodGroup NAME;
3. labels `pod-group.scheduling.sigs.k8s.io/name` + `.../min-available` -> a gang with no CRD;
4. annotations `gang.scheduling.koordinator.sh/name` + `.../min-available` (Koordinator).
A name without a min-available falls back to the PodGroup of that name.
Gangs are namespaced: NAME is looked up in the pod's namespace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.messages import echo
from ai_scheduler.quantity import QuantityError, parse_go_int, to_units

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
LEGACY_POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
GROUP_NAME_LABEL = "pod-group.scheduling.sigs.k8s.io/name"
GROUP_MIN_LABEL = "pod-group.scheduling.sigs.k8s.io/min-available"
KOORDINATOR_NAME = "gang.scheduling.koordinator.sh/name"
KOORDINATOR_MIN = "gang.scheduling.koordinator.sh/min-available"
SAME_DOMAIN_ANNOTATION = "ai-scheduler.io/same-domain"
# A gang's preemption policy where its API has no field for it (scheduler/gang_preemption.py): on the
# PodGroup object, or on the member pods of a gang declared by labels. "Never" or "PreemptLowerPriority".
PREEMPTION_POLICY_ANNOTATION = "ai-scheduler.io/preemption-policy"

PODGROUP_API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


@dataclass(frozen=True, slots=True)
class GangRef:
    """What a pod says about its gang."""

    namespace: str
    name: str
    min_member: int | None  # declared on the pod itself; None: the PodGroup object says
    source: str
    error: str = ""
    declared_by: str = ""  # the label or annotation that names the gang, for messages

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _min_available(text: str, key: str) -> tuple[int | None, str]:
    """As the schedulers that defined these keys read them (Go's strconv.Atoi): ASCII digits, no blanks."""
    value = parse_go_int(text)
    if value is None or value < 1:
        return None, f"{key} must be a positive integer, got {echo(text)}"
    return value, ""


def gang_ref(pod: PodRecord) -> GangRef | None:
    """The gang a pod declares, or None for a lone pod."""
    labels, annotations, ns = pod.labels, pod.annotations, pod.namespace
    if labels.get(POD_GROUP_LABEL):
        return GangRef(ns, labels[POD_GROUP_LABEL], None, "PodGroup", declared_by=f"label {POD_GROUP_LABEL}")
    if labels.get(LEGACY_POD_GROUP_LABEL):
        legacy = labels[LEGACY_POD_GROUP_LABEL]
        return GangRef(ns, legacy, None, "PodGroup", declared_by=f"label {LEGACY_POD_GROUP_LABEL}")
    for name_key, min_key, source, holder, kind in (
        (GROUP_NAME_LABEL, GROUP_MIN_LABEL, "labels", labels, "label"),
        (KOORDINATOR_NAME, KOORDINATOR_MIN, "koordinator", annotations, "annotation"),
    ):
        name = holder.get(name_key)
        if not name:
            continue
        if min_key not in holder:
            return GangRef(ns, name, None, "PodGroup", declared_by=f"{kind} {name_key}")
        minimum, error = _min_available(holder[min_key], min_key)
        return GangRef(ns, name, minimum, source, error)
    return None


@dataclass(slots=True)
class PodGroupSpec:
    """The parts of a PodGroup object the scheduler uses."""

    uid: str
    min_member: int
    min_resources: dict[str, int]
    timeout_seconds: float | None
    same_domain_required: bool
    status: dict[str, Any]
    error: str = ""
    preemption_policy: str = ""  # "Never", "PreemptLowerPriority", or "" (not said: the members' own)

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> PodGroupSpec:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        # Types as the CRD (deploy/crds) declares them: a real API server refuses anything else, but a
        # PodGroup may come from a CRD installed without its schema.
        errors = []
        min_member = spec.get("minMember")
        if min_member is None:
            min_member = 1
        elif isinstance(min_member, bool) or not isinstance(min_member, int) or abs(min_member) >= 2**31:
            errors.append(f"spec.minMember must be an integer, got {echo(min_member)}")
            min_member = 1
        min_resources: dict[str, int] = {}
        resources = spec.get("minResources")
        if resources is not None and not isinstance(resources, dict):
            errors.append(f"spec.minResources must map resources to quantities, got {echo(resources)}")
        else:
            try:
                min_resources = {k: to_units(k, v) for k, v in (resources or {}).items()}
            except QuantityError as exc:
                errors.append(f"spec.minResources: {exc}")
        timeout = spec.get("scheduleTimeoutSeconds")
        timeout_seconds = None
        if timeout is not None:  # 0: the default, as when it is not set
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 <= timeout < 2**31:
                errors.append(f"spec.scheduleTimeoutSeconds must be a number of seconds, got {echo(timeout)}")
            else:
                timeout_seconds = float(timeout) or None
        annotations = meta.get("annotations") or {}
        same_domain = annotations.get(SAME_DOMAIN_ANNOTATION)
        if same_domain is not None and same_domain != "required":
            got = echo(same_domain)
            errors.append(f'annotation {SAME_DOMAIN_ANNOTATION} must be "required" or absent, got {got}')
        # v1.37's PodGroupPreemptionPolicy field, else our annotation (on a PodGroup of any API).
        said_by = "spec.preemptionPolicy"
        if not spec.get("preemptionPolicy"):
            said_by = f"annotation {PREEMPTION_POLICY_ANNOTATION}"
        policy = spec.get("preemptionPolicy") or annotations.get(PREEMPTION_POLICY_ANNOTATION) or ""
        if policy not in ("", "Never", "PreemptLowerPriority"):
            errors.append(f"{said_by} must be Never or PreemptLowerPriority, got {echo(policy)}")
            policy = ""
        return cls(
            uid=meta.get("uid") or "",
            min_member=max(1, min_member),
            min_resources=min_resources,
            timeout_seconds=timeout_seconds,
            same_domain_required=same_domain == "required",
            status=dict(obj.get("status") or {}),
            error="; ".join(errors),
            preemption_policy=str(policy),
        )


@dataclass(slots=True)
class Member:
    phase: str
    node: str
    owners: tuple[str, ...]
    deleting: bool


@dataclass(slots=True)
class Gang:
    """One gang: its declaration, its members and its scheduling history."""

    namespace: str
    name: str
    declared_min: int | None = None
    declared_error: str = ""
    source: str = "PodGroup"
    declared_by: str = ""  # the key its members name it by (the last member seen), for messages
    podgroup: PodGroupSpec | None = None
    members: dict[str, Member] = field(default_factory=dict)
    first_attempt: float | None = None  # monotonic start of the current attempt window
    schedule_start: float | None = None  # wall time of the first attempt (status.scheduleStartTime)
    timeouts: int = 0
    not_before: float = 0.0  # backoff after a timeout (monotonic)
    failed_reason: str = ""  # set when the gang cannot be completed: reported as phase Failed
    last_reason: str = ""
    bind_failures: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def min_member(self) -> int:
        if self.declared_min is not None:
            return self.declared_min
        return self.podgroup.min_member if self.podgroup else 1

    @property
    def problem(self) -> str:
        """Why this gang cannot be scheduled as declared, or ''."""
        # The key first: a long name cut off with the end of the message must not take the key with it.
        if self.declared_error:
            return f"{self.declared_error} (gang {self.key})"
        if self.declared_min is None and self.podgroup is None:
            named = f"{self.declared_by}: " if self.declared_by else ""
            return f"{named}pod group {self.key} not found"
        if self.podgroup is not None and self.podgroup.error and self.declared_min is None:
            return f"pod group {self.key}: {self.podgroup.error}"
        return ""

    def timeout(self, default: float) -> float:
        if self.podgroup is not None and self.podgroup.timeout_seconds:
            return self.podgroup.timeout_seconds
        return default

    def counts(self) -> dict[str, int]:
        live = [m for m in self.members.values() if not m.deleting]
        return {
            "pods": len(live),
            "scheduled": sum(1 for m in live if m.node),
            "running": sum(1 for m in live if m.phase == "Running"),
            "succeeded": sum(1 for m in live if m.phase == "Succeeded"),
            "failed": sum(1 for m in live if m.phase == "Failed"),
        }


class GangRegistry:
    """Gangs by key, kept from the pod and PodGroup watches."""

    def __init__(self) -> None:
        self.gangs: dict[str, Gang] = {}
        self._gang_of: dict[str, str] = {}  # pod uid -> gang key
        self.dirty: set[str] = set()  # gangs whose status may need writing

    def _gang(self, namespace: str, name: str) -> Gang:
        key = f"{namespace}/{name}"
        gang = self.gangs.get(key)
        if gang is None:
            gang = self.gangs[key] = Gang(namespace, name)
        return gang

    def gang_of(self, pod: PodRecord) -> Gang | None:
        key = self._gang_of.get(pod.uid)
        return self.gangs.get(key) if key else None

    def observe_pod(self, pod: PodRecord) -> Gang | None:
        ref = gang_ref(pod)
        old_key = self._gang_of.get(pod.uid)
        if old_key and (ref is None or ref.key != old_key):
            self.forget_pod(pod.uid)
        if ref is None:
            return None
        gang = self._gang(ref.namespace, ref.name)
        gang.declared_by = ref.declared_by or gang.declared_by
        if ref.min_member is not None or ref.error:
            gang.declared_min, gang.declared_error, gang.source = ref.min_member, ref.error, ref.source
        gang.members[pod.uid] = Member(pod.phase, pod.node_name, pod.owners, pod.deleting)
        self._gang_of[pod.uid] = gang.key
        self.dirty.add(gang.key)
        return gang

    def forget_pod(self, uid: str) -> Gang | None:
        key = self._gang_of.pop(uid, None)
        gang = self.gangs.get(key) if key else None
        if gang is None:
            return None
        gang.members.pop(uid, None)
        gang.bind_failures.pop(uid, None)
        self.dirty.add(gang.key)
        self._drop_if_empty(gang)
        return gang

    def set_podgroup(self, obj: dict[str, Any]) -> Gang:
        meta = obj.get("metadata") or {}
        gang = self._gang(meta.get("namespace") or "", meta.get("name") or "")
        gang.podgroup = PodGroupSpec.from_api(obj)
        self.dirty.add(gang.key)
        return gang

    def copy_podgroups(self, other: GangRegistry) -> None:
        """Take `other`'s PodGroups (specs are immutable): a forecast's registry starts from the daemon's."""
        for gang in other.gangs.values():
            if gang.podgroup is not None:
                self._gang(gang.namespace, gang.name).podgroup = gang.podgroup

    def remove_podgroup(self, obj: dict[str, Any]) -> Gang | None:
        meta = obj.get("metadata") or {}
        gang = self.gangs.get(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        if gang is not None:
            gang.podgroup = None
            self._drop_if_empty(gang)
        return gang

    def replace_podgroups(self, items: list[dict[str, Any]]) -> None:
        seen = {self.set_podgroup(obj).key for obj in items}
        for gang in list(self.gangs.values()):
            if gang.podgroup is not None and gang.key not in seen:
                gang.podgroup = None
                self._drop_if_empty(gang)

    def _drop_if_empty(self, gang: Gang) -> None:
        if not gang.members and gang.podgroup is None:
            self.gangs.pop(gang.key, None)
            self.dirty.discard(gang.key)

    def start_attempt(self, gang: Gang, now: float) -> None:
        if gang.first_attempt is None:
            gang.first_attempt = now
        if gang.schedule_start is None:
            gang.schedule_start = time.time()
