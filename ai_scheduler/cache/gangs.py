"""Gangs: which pods must start together, and what we know of each group.

A pod joins a gang in one of these ways (docs/users/gangs.md), read in this order:
1. `spec.schedulingGroup.podGroupName: NAME` -> the Kubernetes PodGroup NAME (`scheduling.k8s.io/v1beta1`):
   its `gang` policy is all-or-nothing with `minCount`, its `basic` policy means ordinary pods;
2. label `scheduling.x-k8s.io/pod-group: NAME` -> the scheduler-plugins PodGroup custom resource NAME;
3. label `pod-group.scheduling.sigs.k8s.io: NAME` (older scheduler-plugins) -> the PodGroup NAME;
4. labels `pod-group.scheduling.sigs.k8s.io/name` + `.../min-available` -> a gang with no CRD;
5. annotations `gang.scheduling.koordinator.sh/name` + `.../min-available` (Koordinator);
6. annotation `scheduling.k8s.io/group-name` (Volcano) or `pod-group-name` (KAI Scheduler): read as the
   name of a scheduler-plugins PodGroup, as a name label without min-available is;
7. inferred from the workload that made the pod (pod_grouper.py), unless annotation
   `ai-scheduler.io/gang-inference: "off"`.
A name without a min-available falls back to the PodGroup of that name.
Gangs are namespaced: NAME is looked up in the pod's namespace. A gang's key is `NAMESPACE/NAME` for the
scheduler-plugins kinds (2-6), `NAMESPACE/PodGroup/NAME` for a Kubernetes PodGroup and
`NAMESPACE/KIND/NAME` for an inferred one, so that groups of different origins never merge.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.cache.pod_grouper import OwnerSpec, infer_gang, inference_problem, parse_owner
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.messages import echo
from ai_scheduler.quantity import QuantityError, parse_go_int, to_units

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
LEGACY_POD_GROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
GROUP_NAME_LABEL = "pod-group.scheduling.sigs.k8s.io/name"
GROUP_MIN_LABEL = "pod-group.scheduling.sigs.k8s.io/min-available"
KOORDINATOR_NAME = "gang.scheduling.koordinator.sh/name"
KOORDINATOR_MIN = "gang.scheduling.koordinator.sh/min-available"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
KAI_GROUP = "pod-group-name"
SAME_DOMAIN_ANNOTATION = "ai-scheduler.io/same-domain"
NATIVE = "PodGroup"  # the kind part of a Kubernetes PodGroup gang's key
# A gang's preemption policy where its API has no field for it (scheduler/gang_preemption.py): on the
# PodGroup object, or on the member pods of a gang declared by labels. "Never" or "PreemptLowerPriority".
PREEMPTION_POLICY_ANNOTATION = "ai-scheduler.io/preemption-policy"

PODGROUP_API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
NATIVE_PODGROUP_API = ("scheduling.k8s.io", "v1beta1", "podgroups")


def gang_key(namespace: str, name: str, kind: str = "") -> str:
    return f"{namespace}/{kind}/{name}" if kind else f"{namespace}/{name}"


@dataclass(frozen=True, slots=True)
class GangRef:
    """What a pod says about its gang."""

    namespace: str
    name: str
    min_member: int | None  # declared on the pod itself; None: the PodGroup object says
    source: str
    error: str = ""
    declared_by: str = ""  # the label or annotation that names the gang, for messages
    kind: str = ""  # "" (scheduler-plugins kinds), NATIVE, or the owner kind of an inferred gang
    owner: tuple[str, str, str] | None = None  # inferred: (kind, namespace, name) of what gives its minimum

    @property
    def key(self) -> str:
        return gang_key(self.namespace, self.name, self.kind)


def _min_available(text: str, key: str) -> tuple[int | None, str]:
    """As the schedulers that defined these keys read them (Go's strconv.Atoi): ASCII digits, no blanks."""
    value = parse_go_int(text)
    if value is None or value < 1:
        return None, f"{key} must be a positive integer, got {echo(text)}"
    return value, ""


OwnerLookup = Callable[[str, str, str], OwnerSpec | None]


def gang_ref(pod: PodRecord, owners: OwnerLookup | None = None, *, native: bool = True) -> GangRef | None:
    """The gang a pod declares (or, given the owners seen, the one its owner implies), or None.
    `native=False` reads past `spec.schedulingGroup`."""
    labels, annotations, ns = pod.labels, pod.annotations, pod.namespace
    if pod.scheduling_group and native:
        group = pod.scheduling_group
        return GangRef(ns, group, None, "scheduling.k8s.io", declared_by="spec.schedulingGroup", kind=NATIVE)
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
    for key in (VOLCANO_GROUP, KAI_GROUP):
        if annotations.get(key):
            return GangRef(ns, annotations[key], None, "PodGroup", declared_by=f"annotation {key}")
    if owners is None:
        return None
    problem = inference_problem(pod)
    if problem:  # a one-pod group that only says what is wrong
        return GangRef(ns, pod.name, None, "inferred", problem, kind="Pod")
    inferred = infer_gang(pod, owners)
    if inferred is None:
        return None
    return GangRef(ns, inferred.name, inferred.minimum, "inferred", inferred.problem, inferred.declared_by,
                   inferred.kind, inferred.owner)


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
class NativePodGroupSpec:
    """The parts of a Kubernetes PodGroup (`scheduling.k8s.io/v1beta1`) the scheduler uses."""

    uid: str
    generation: int
    gang: bool  # schedulingPolicy.gang; False: basic (ordinary pods)
    min_count: int
    status: dict[str, Any]
    error: str = ""
    preemption_policy: str = ""  # spec.preemptionPolicy (KEP-5710) or our annotation; "": the members' own

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> NativePodGroupSpec:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        policy = spec.get("schedulingPolicy") or {}
        gang = policy.get("gang") if isinstance(policy, dict) else None
        error = ""
        min_count = 1
        if isinstance(gang, dict):
            value = gang.get("minCount")
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
                error = f"spec.schedulingPolicy.gang.minCount must be a positive integer, got {echo(value)}"
            else:
                min_count = value
        elif not (isinstance(policy, dict) and isinstance(policy.get("basic"), dict)):
            error = f"spec.schedulingPolicy must set basic or gang, got {echo(policy)}"
        generation = meta.get("generation")
        annotations = meta.get("annotations") or {}
        policy = spec.get("preemptionPolicy") or annotations.get(PREEMPTION_POLICY_ANNOTATION) or ""
        if policy not in ("", "Never", "PreemptLowerPriority"):
            said_by = "spec.preemptionPolicy" if spec.get("preemptionPolicy") else (
                f"annotation {PREEMPTION_POLICY_ANNOTATION}")
            error = "; ".join(filter(None, (error, f"{said_by} must be Never or PreemptLowerPriority, "
                                                   f"got {echo(policy)}")))
            policy = ""
        return cls(
            uid=meta.get("uid") or "",
            generation=generation if isinstance(generation, int) else 0,
            gang=isinstance(gang, dict),
            min_count=min_count,
            status=dict(obj.get("status") or {}),
            error=error,
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
    kind: str = ""  # as GangRef.kind
    native: NativePodGroupSpec | None = None  # kind NATIVE: its PodGroup, once seen
    owner: tuple[str, str, str] | None = None  # inferred: the owner object its minimum is read from
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
        return gang_key(self.namespace, self.name, self.kind)

    @property
    def min_member(self) -> int:
        if self.declared_min is not None:
            return self.declared_min
        if self.native is not None:
            return self.native.min_count
        return self.podgroup.min_member if self.podgroup else 1

    @property
    def basic(self) -> bool:
        """A Kubernetes PodGroup with the basic policy: its pods are scheduled one by one."""
        return self.native is not None and not self.native.gang and not self.native.error

    @property
    def problem(self) -> str:
        """Why this gang cannot be scheduled as declared, or ''."""
        # The key first: a long name cut off with the end of the message must not take the key with it.
        if self.declared_error:
            return f"{self.declared_error} (gang {self.key})"
        if self.kind == NATIVE:
            if self.native is None:  # kube-scheduler's GangScheduling PreEnqueue, word for word
                return f'waiting for pods\'s pod group "{self.name}" to appear in scheduling queue'
            return f"pod group {self.key}: {self.native.error}" if self.native.error else ""
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
        # The gangs whose attempt window is open (`first_attempt` set), in the order their windows opened:
        # the only ones a timeout can strike (GangScheduler.check_timeouts reads these, not every gang).
        # A gang leaves when its window closes (placed, timed out) or it is dropped.
        self.attempting: dict[str, Gang] = {}
        # The owner objects inferred gangs read their minimum from, by (kind, namespace, name), and the
        # gangs that read each.
        self.owners: dict[tuple[str, str, str], OwnerSpec] = {}
        self._owned: dict[tuple[str, str, str], set[str]] = {}

    def _gang(self, namespace: str, name: str, kind: str = "") -> Gang:
        key = gang_key(namespace, name, kind)
        gang = self.gangs.get(key)
        if gang is None:
            gang = self.gangs[key] = Gang(namespace, name, kind=kind)
        return gang

    def gang_of(self, pod: PodRecord) -> Gang | None:
        """The gang the pod is scheduled with; None for a lone pod or one of a basic PodGroup."""
        key = self._gang_of.get(pod.uid)
        gang = self.gangs.get(key) if key else None
        return None if gang is None or gang.basic else gang

    def group_of(self, pod: PodRecord) -> Gang | None:
        """The group the pod belongs to, a basic PodGroup included."""
        key = self._gang_of.get(pod.uid)
        return self.gangs.get(key) if key else None

    def owner_spec(self, kind: str, namespace: str, name: str) -> OwnerSpec | None:
        return self.owners.get((kind, namespace, name))

    def _ref(self, pod: PodRecord) -> GangRef | None:
        """gang_ref, but past the basic PodGroup that v1.37's Job controller gives every Job by default
        (WorkloadWithJob, no `spec.scheduling` on the Job): that one does not hide what inference finds."""
        ref = gang_ref(pod, self.owner_spec)
        if ref is None or ref.kind != NATIVE or pod.owner is None or pod.owner[:2] != ("batch", "Job"):
            return ref
        group = self.gangs.get(ref.key)
        if group is None or not group.basic:
            return ref
        job = self.owners.get(("Job", pod.namespace, pod.owner[2]))
        if job is not None and job.scheduling:
            return ref
        inferred = gang_ref(pod, self.owner_spec, native=False)
        if inferred is not None and inferred.owner is None:  # an explicit key below schedulingGroup: no
            return ref
        return inferred or ref

    def observe_pod(self, pod: PodRecord) -> Gang | None:
        ref = self._ref(pod)
        old_key = self._gang_of.get(pod.uid)
        if old_key and (ref is None or ref.key != old_key):
            self.forget_pod(pod.uid)
        if ref is None:
            return None
        gang = self._gang(ref.namespace, ref.name, ref.kind)
        gang.declared_by = ref.declared_by or gang.declared_by
        if ref.min_member is not None or ref.error:
            gang.declared_min, gang.declared_error, gang.source = ref.min_member, ref.error, ref.source
        if ref.owner is not None and gang.owner != ref.owner:
            gang.owner = ref.owner
            self._owned.setdefault(ref.owner, set()).add(gang.key)
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
        """Take `other`'s PodGroups and owners (specs are immutable): a forecast's registry starts from the
        daemon's."""
        for gang in other.gangs.values():
            if gang.podgroup is not None:
                self._gang(gang.namespace, gang.name).podgroup = gang.podgroup
            if gang.native is not None:
                self._gang(gang.namespace, gang.name, NATIVE).native = gang.native
        self.owners.update(other.owners)

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

    def end_attempt(self, gang: Gang) -> None:
        """The gang's attempt window closed (it was placed, or timed out)."""
        gang.first_attempt = None
        self.attempting.pop(gang.key, None)

    def _drop_if_empty(self, gang: Gang) -> None:
        if not gang.members and gang.podgroup is None and gang.native is None:
            self.gangs.pop(gang.key, None)
            self.dirty.discard(gang.key)
            self.attempting.pop(gang.key, None)
            if gang.owner is not None:
                owned = self._owned.get(gang.owner)
                if owned is not None:
                    owned.discard(gang.key)
                    if not owned:
                        del self._owned[gang.owner]

    # ------------------------------------------------------------------ Kubernetes PodGroups
    def set_native_podgroup(self, obj: dict[str, Any]) -> Gang:
        meta = obj.get("metadata") or {}
        gang = self._gang(meta.get("namespace") or "", meta.get("name") or "", NATIVE)
        gang.native = NativePodGroupSpec.from_api(obj)
        self.dirty.add(gang.key)
        return gang

    def native_members(self, gang: Gang) -> list[str]:
        """The pods to read again when a basic PodGroup appears (see `_ref`)."""
        return list(gang.members) if gang.basic else []

    def remove_native_podgroup(self, obj: dict[str, Any]) -> Gang | None:
        meta = obj.get("metadata") or {}
        gang = self.gangs.get(gang_key(meta.get("namespace") or "", meta.get("name") or "", NATIVE))
        if gang is not None:
            gang.native = None
            self._drop_if_empty(gang)
        return gang

    def replace_native_podgroups(self, items: list[dict[str, Any]]) -> None:
        seen = {self.set_native_podgroup(obj).key for obj in items}
        for gang in list(self.gangs.values()):
            if gang.native is not None and gang.key not in seen:
                gang.native = None
                self._drop_if_empty(gang)

    # ------------------------------------------------------------------ owners of inferred gangs
    def set_owner(self, kind: str, obj: dict[str, Any] | None, key: tuple[str, str, str]) -> list[str]:
        """An owner object seen (None: deleted); returns the pods whose group must be read again, those of
        the gangs that read it, when what it says for inference changed."""
        if kind == "Job" and obj is not None and not _indexed(obj):
            obj = None  # only indexed Jobs imply gangs: the others are not kept
        spec = parse_owner(kind, obj) if obj is not None else None
        if spec == self.owners.get(key):
            return []
        if spec is None:
            self.owners.pop(key, None)
        else:
            self.owners[key] = spec
        return [uid for gang in self._owned.get(key, ()) for uid in self.gangs[gang].members]

    def replace_owners(self, kind: str, items: list[dict[str, Any]]) -> list[str]:
        """A fresh list of one owner kind; returns the pods whose group must be read again."""
        listed = {_owner_key(kind, obj): obj for obj in items}
        stale = [key for key in self.owners if key[0] == kind and key not in listed]
        uids = [uid for key in stale for uid in self.set_owner(kind, None, key)]
        for key, obj in listed.items():
            uids += self.set_owner(kind, obj, key)
        return uids

    def start_attempt(self, gang: Gang, now: float) -> None:
        if gang.first_attempt is None:
            gang.first_attempt = now
            self.attempting[gang.key] = gang
        if gang.schedule_start is None:
            gang.schedule_start = time.time()


def _indexed(job: dict[str, Any]) -> bool:
    spec = job.get("spec")
    return isinstance(spec, dict) and spec.get("completionMode") == "Indexed"


def _owner_key(kind: str, obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return kind, meta.get("namespace") or "", meta.get("name") or ""


def owner_key(kind: str, obj: dict[str, Any]) -> tuple[str, str, str]:
    """The registry's key of an owner object (for `set_owner`)."""
    return _owner_key(kind, obj)
