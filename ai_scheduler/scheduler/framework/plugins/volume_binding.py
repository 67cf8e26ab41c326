"""VolumeBinding: a pod's PersistentVolumeClaims, as kube-scheduler's volumebinding plugin checks them.

PreFilter (kube's podHasPVCs and GetPodVolumeClaims), once per pod and cycle:
- a claim that does not exist, is being deleted, is Lost, or (for a generic
  ephemeral volume, whose claim is named `<pod>-<volume>`) is not owned by
  the pod stops the pod with kube's message, as UnschedulableAndUnresolvable;
- a claim is *bound* when it names a volume and carries the PV controller's
  `pv.kubernetes.io/bind-completed` annotation; an unbound claim whose class is
  WaitForFirstConsumer (and that names no volume yet) is *delayed*: the
  scheduler picks its node; any other unbound claim makes the pod wait with
  `pod has unbound immediate PersistentVolumeClaims` (the PV controller binds
  it, and the claim's update wakes the pod).

Filter (kube's FindPodVolumes), per node: a bound claim's PV must exist and its
required node affinity match the node's labels; each delayed claim either
already names this node in `volume.kubernetes.io/selected-node`, or is matched
to an available PV of its class that fits the node (capacity, volume mode,
access modes, the claim's selector, node affinity; smallest first, claims
smallest first, one PV per claim), or else its class must provision
dynamically (a provisioner other than `kubernetes.io/no-provisioner`) within
its `allowedTopologies`. The reasons are kube v1.36's: `node(s) didn't match
PersistentVolume's node affinity`, `node(s) didn't find available persistent volumes to
bind`, `node(s) unavailable due to one or more pvc(s) bound to non-existent
pv(s)`; a node can fail with several at once.

Cost: a pod without claims (most pods) returns at once at both points. For a
pod with claims, the per-node result reads only the node's labels and name and
the objects PreFilter found, so it is cached by StaticResults under a
signature made of those objects' identities and generations: it is computed
once per node, again only for nodes whose labels change or when one of those
objects changes.

PreBind (`prebind_plan`, run by the binder for the chosen node) gives what
kube's AssumePodVolumes / BindPodVolumes write: the static matches (the PV's
claimRef set to the claim) and the claims to provision (the chosen node in
their selected-node annotation); the binder then waits, as kube does, until
every claim is fully bound before it binds the pod.

Not done (said in docs/concepts/how-it-works.md): the CSIStorageCapacity check (kube's
`node(s) did not have enough free storage`; every node counts as having
room), and in-tree to CSI translation of PV topology.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.selectors import requirement_matches
from ai_scheduler.cache.volumes import (
    BindingMode,
    Claim,
    ClaimPhase,
    StorageClass,
    Volume,
    VolumeIndex,
    VolumePhase,
)
from ai_scheduler.scheduler.framework.interface import REASON_JOIN, StaticClaimFilterPlugin

UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


def claim_not_found(name: str) -> str:
    return f'persistentvolumeclaim "{name}" not found'


@dataclass(slots=True)
class PodVolumes:
    """What PreFilter found for a pod (kube's PodVolumeClaims), or the reason it cannot be placed at all."""

    error: str = ""
    bound: list[Volume | None] = field(default_factory=list)  # the PVs of bound claims (None: missing)
    delayed: list[Claim] = field(default_factory=list)  # unbound WaitForFirstConsumer claims
    candidates: dict[str, list[Volume]] = field(default_factory=dict)  # PVs per storage class of `delayed`
    classes: dict[str, StorageClass | None] = field(default_factory=dict)
    key: Hashable = ()  # identities and generations of all the above: the per-node results' signature


@dataclass(slots=True)
class NodeVolumes:
    """FindPodVolumes on one node: why it cannot take the pod, or what PreBind must write there."""

    reasons: tuple[str, ...] = ()
    bindings: list[tuple[Volume, Claim]] = field(default_factory=list)  # static matches
    provisions: list[Claim] = field(default_factory=list)  # claims to provision on this node


def resolve(pod: PodRecord, index: VolumeIndex) -> PodVolumes:
    """PreFilter: the pod's claims sorted into bound and delayed ones, or why none of them can do."""
    claims: list[Claim] = []
    for name, ephemeral in pod.claims:
        claim = index.claims.get((pod.namespace, name))
        if claim is None:
            if ephemeral:
                return PodVolumes(
                    f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
                )
            return PodVolumes(claim_not_found(name))
        if claim.phase is ClaimPhase.LOST:
            return PodVolumes(
                f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume "{claim.volume_name}"'
            )
        if claim.deleting:
            return PodVolumes(f'persistentvolumeclaim "{name}" is being deleted')
        if ephemeral and claim.owner_uid != pod.uid:
            return PodVolumes(
                f"PVC {pod.namespace}/{name} was not created for pod {pod.namespace}/{pod.name}"
                " (pod is not owner)"
            )
        claims.append(claim)
    found = PodVolumes()
    immediate = False
    for claim in claims:
        if claim.fully_bound:
            found.bound.append(index.volumes.get(claim.volume_name))
            continue
        delay = False
        if claim.storage_class:  # IsDelayBindingMode: no class, or a class that does not exist, is Immediate
            storage_class = index.classes.get(claim.storage_class)
            if storage_class is not None:
                if storage_class.binding_mode is BindingMode.UNSET:
                    return PodVolumes(f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"')
                delay = storage_class.binding_mode is BindingMode.WAIT_FOR_FIRST_CONSUMER
        if delay and not claim.volume_name:
            found.delayed.append(claim)
        else:  # a claim pre-bound to a volume is left to the PV controller, as an immediate one
            immediate = True
    if immediate:
        return PodVolumes(UNBOUND_IMMEDIATE)
    for claim in found.delayed:
        found.candidates[claim.storage_class] = index.volumes_of_class(claim.storage_class)
        found.classes[claim.storage_class] = index.classes.get(claim.storage_class)
    found.key = (
        tuple((v.name, v.generation) if v is not None else None for v in found.bound),
        tuple((c.name, c.generation) for c in found.delayed),
        tuple((name, tuple((v.name, v.generation) for v in vs)) for name, vs in found.candidates.items()),
        tuple((name, c.generation if c is not None else 0) for name, c in found.classes.items()),
    )
    return found


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    if not all(requirement_matches(r, labels) for r in expressions):
        return False
    # CheckNodeAffinity builds a node of the labels alone: a field requirement sees an empty name.
    return all(requirement_matches(r, {"metadata.name": ""}) for r in fields)


def affinity_allows(volume: Volume, labels: Mapping[str, str]) -> bool:
    """volume.CheckNodeAffinity: the PV's required node affinity (if any) matches the node's labels."""
    if volume.node_terms is None:
        return True
    return any(_term_matches(term, labels) for term in volume.node_terms)


def find_matching_volume(
    claim: Claim, volumes: list[Volume], labels: Mapping[str, str], excluded: set[str]
) -> Volume | None:
    """volume.FindMatchingVolume on the scheduler's path: a PV pre-bound to the claim, else the smallest
    available one that fits the claim and the node."""
    if claim.selector_error:
        return None
    smallest: Volume | None = None
    for volume in volumes:
        if volume.name in excluded:
            continue
        if volume.claim_ref is not None and not volume.bound_to(claim):
            continue
        if volume.capacity < claim.requested or volume.volume_mode != claim.volume_mode or volume.deleting:
            continue
        fits_node = affinity_allows(volume, labels)
        if volume.bound_to(claim):
            return volume if fits_node else None
        if volume.phase is not VolumePhase.AVAILABLE:
            continue
        if claim.selector is not None and not claim.selector.matches(volume.labels):
            continue
        if volume.storage_class != claim.storage_class or not fits_node:
            continue
        if not claim.access_modes <= volume.access_modes:
            continue
        if smallest is None or volume.capacity < smallest.capacity:
            smallest = volume
    return smallest


def find_pod_volumes(found: PodVolumes, labels: Mapping[str, str], node_name: str) -> NodeVolumes:
    """FindPodVolumes: bound claims' PVs against the node, then the delayed claims matched or provisioned."""
    bound_ok = pvs_exist = unbound_ok = True
    for volume in found.bound:
        if volume is None:
            pvs_exist = False
            break
        if not affinity_allows(volume, labels):
            bound_ok = False
            break
    result = NodeVolumes()
    to_match: list[Claim] = []
    for claim in found.delayed:
        selected = claim.selected_node
        if not selected:
            to_match.append(claim)
        elif selected == node_name:
            result.provisions.append(claim)
        else:  # kube's fast path: the claim is being provisioned for another node
            unbound_ok = False
            result.provisions.clear()
            to_match.clear()
            break
    if to_match:
        chosen: set[str] = set()
        for claim in sorted(to_match, key=lambda c: c.requested):
            volumes = found.candidates.get(claim.storage_class, [])
            volume = find_matching_volume(claim, volumes, labels, chosen)
            if volume is None:
                unbound_ok = False
                result.provisions.append(claim)
                continue
            chosen.add(volume.name)
            result.bindings.append((volume, claim))
    if result.provisions:  # checkVolumeProvisions: decides on its own whether the unbound claims can do
        unbound_ok = True
        for claim in result.provisions:
            storage_class = found.classes.get(claim.storage_class)
            if storage_class is None or not storage_class.provisions or not storage_class.allows(labels):
                unbound_ok = False
                break
    reasons = []
    if not bound_ok:
        reasons.append(NODE_CONFLICT)
    if not unbound_ok:
        reasons.append(BIND_CONFLICT)
    if not pvs_exist:
        reasons.append(PV_NOT_EXIST)
    result.reasons = tuple(reasons)
    return result


def prebind_plan(pod: PodRecord, index: VolumeIndex, node: NodeRecord) -> NodeVolumes | str:
    """What PreBind writes for `pod` on `node`, from the current objects; a reason string when the claims
    no longer allow that node (changed since the cycle)."""
    found = resolve(pod, index)
    if found.error:
        return found.error
    plan = find_pod_volumes(found, node.labels, node.name)
    if plan.reasons:
        return ", ".join(plan.reasons)
    return plan


class VolumeBinding(StaticClaimFilterPlugin):
    name = "VolumeBinding"

    def __init__(self) -> None:
        # The pod (uid) and VolumeIndex.version the last PreFilter result is for: the cycle asks again for
        # every window of nodes, and PreFilter's answer stands until an object changes.
        self._memo: tuple[str, int, PodVolumes] | None = None

    def pod_volumes(self, pod: PodRecord, index: VolumeIndex) -> PodVolumes:
        memo = self._memo
        if memo is not None and memo[0] == pod.uid and memo[1] == index.version:
            return memo[2]
        found = resolve(pod, index)
        self._memo = (pod.uid, index.version, found)
        return found

    def prefilter(self, pod: PodRecord, cache: SchedulerCache) -> str:
        if not pod.claims:
            return ""
        return self.pod_volumes(pod, cache.volumes).error

    def signature(self, pod: PodRecord) -> Hashable | None:
        memo = self._memo
        if memo is None or memo[0] != pod.uid or not (memo[2].bound or memo[2].delayed):
            return None
        return memo[2].key

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        memo = self._memo
        assert memo is not None and memo[0] == pod.uid  # set by run(), which asks for the signature first
        reasons = find_pod_volumes(memo[2], node.labels, node.name).reasons
        return REASON_JOIN.join(reasons) if reasons else None
