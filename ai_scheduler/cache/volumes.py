"""PersistentVolumes, PersistentVolumeClaims and StorageClasses, as VolumeBinding reads them.

kube-scheduler's VolumeBinding plugin works from listers of these three
kinds (and an "assume cache" over PVs and PVCs that holds its own writes until
the watch shows them). We keep the same: small records built from the
objects' JSON, filled by the daemon's informers, which it runs while a profile
filters with VolumeBinding (the default profile does, so in practice always,
as kube-scheduler watches them always).

Our own writes in PreBind (a PV's claimRef, a claim's selected-node
annotation) are applied here as soon as the API server answers them, and an
event older than what is held (a lower resourceVersion, compared as integers
as kube's assume cache does) is ignored, so that the answer to a write is
never undone by a late event from before it.

Each object gets a local `generation`, bumped on every change: the filter
caches its per-node results by the identity and generation of the objects it
read, so a change to any of them recomputes, and nothing else does.
`version` changes with every update of any object (memoisation of a pod's
claims, and the queue's wake-up).

`users` counts, per claim, the pods that name it in a `persistentVolumeClaim`
volume and count on a node (bound or assumed, not finished): kube's
usedPVCSet, which VolumeRestrictions reads for ReadWriteOncePod claims;
`node_claims` holds the claims (generic ephemeral ones too) of the pods
counting on each node, which NodeVolumeLimits reads, and `node_disks` their
inline in-tree disks, which VolumeRestrictions compares. The cache keeps both as
pods start and stop counting. CSINodes are kept only as their drivers'
allocatable volume counts per node (`csi_limits`).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.cache.records import InlineDisk, PodRecord, newer_version
from ai_scheduler.cache.selectors import LabelSelector, SelectorError, parse_selector
from ai_scheduler.quantity import QuantityError, to_units

PERSISTENT_VOLUMES = "persistentvolumes"
PERSISTENT_VOLUME_CLAIMS = "persistentvolumeclaims"
STORAGE_CLASSES = "storageclasses"
CSI_NODES = "csinodes"
RESOURCES = (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES, CSI_NODES)

# The annotations kube's PV controller and scheduler exchange (k8s.io/component-helpers/storage/volume).
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
# A class with this provisioner (or none) cannot provision volumes dynamically.
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
FILESYSTEM = "Filesystem"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"


class BindingMode(enum.Enum):
    """A StorageClass's volumeBindingMode (UNSET: the API server defaults it, but kube checks)."""

    IMMEDIATE = "Immediate"
    WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
    UNSET = ""


class ClaimPhase(enum.Enum):
    PENDING = "Pending"
    BOUND = "Bound"
    LOST = "Lost"


class VolumePhase(enum.Enum):
    PENDING = "Pending"
    AVAILABLE = "Available"
    BOUND = "Bound"
    RELEASED = "Released"
    FAILED = "Failed"


_generations = itertools.count(1)


def _resource_version(meta: Mapping[str, Any]) -> str:
    return str(meta.get("resourceVersion") or "")


def _storage(resources: Any) -> int:
    """The `storage` quantity of a requests or capacity map, in bytes (0 when absent or malformed)."""
    if not isinstance(resources, dict) or "storage" not in resources:
        return 0
    try:
        return to_units("storage", resources["storage"])
    except QuantityError:
        return 0


def _modes(value: Any) -> frozenset[str]:
    return frozenset(str(m) for m in value) if isinstance(value, list) else frozenset()


def _enum(kind: type[enum.Enum], value: Any, default: Any) -> Any:
    try:
        return kind(value)
    except ValueError:
        return default


@dataclass(slots=True)
class Claim:
    """A PersistentVolumeClaim."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    storage_class: str = ""  # GetPersistentVolumeClaimClass: the beta annotation, else spec.storageClassName
    volume_name: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    phase: ClaimPhase = ClaimPhase.PENDING
    deleting: bool = False
    requested: int = 0  # spec.resources.requests.storage, bytes
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    selector: LabelSelector | None = None  # spec.selector; None: no selector
    selector_error: str = ""
    owner_uid: str = ""  # the controlling owner's uid (a generic ephemeral volume's pod)
    generation: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def selected_node(self) -> str:
        return self.annotations.get(ANN_SELECTED_NODE, "")

    @property
    def fully_bound(self) -> bool:
        """isPVCFullyBound: a volume named and the PV controller's bind-completed annotation set."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Claim:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        claim = cls(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        claim.uid = str(meta.get("uid") or "")
        claim.resource_version = _resource_version(meta)
        claim.annotations = annotations
        if ANN_BETA_STORAGE_CLASS in annotations:
            claim.storage_class = annotations[ANN_BETA_STORAGE_CLASS]
        else:
            claim.storage_class = str(spec.get("storageClassName") or "")
        claim.volume_name = str(spec.get("volumeName") or "")
        claim.phase = _enum(ClaimPhase, (obj.get("status") or {}).get("phase"), ClaimPhase.PENDING)
        claim.deleting = bool(meta.get("deletionTimestamp"))
        claim.requested = _storage((spec.get("resources") or {}).get("requests"))
        claim.access_modes = _modes(spec.get("accessModes"))
        claim.volume_mode = str(spec.get("volumeMode") or FILESYSTEM)
        if spec.get("selector") is not None:
            try:
                claim.selector = parse_selector(spec["selector"], "spec.selector")
            except SelectorError as exc:
                claim.selector_error = str(exc)
        for ref in meta.get("ownerReferences") or ():
            if isinstance(ref, dict) and ref.get("controller") is True:
                claim.owner_uid = str(ref.get("uid") or "")
        claim.generation = next(_generations)
        return claim


@dataclass(slots=True)
class Volume:
    """A PersistentVolume."""

    name: str
    resource_version: str = ""
    storage_class: str = ""  # GetPersistentVolumeClass: the beta annotation, else spec.storageClassName
    capacity: int = 0  # spec.capacity.storage, bytes
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    phase: VolumePhase = VolumePhase.PENDING
    deleting: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    claim_ref: tuple[str, str, str] | None = None  # (namespace, name, uid)
    csi_driver: str = ""  # spec.csi.driver and volumeHandle ("" for other volume sources)
    csi_handle: str = ""
    # spec.nodeAffinity.required.nodeSelectorTerms (JSON); None when the volume has no required affinity.
    node_terms: tuple[Mapping[str, Any], ...] | None = None
    generation: int = 0

    def bound_to(self, claim: Claim) -> bool:
        """IsVolumeBoundToClaim: the claimRef names the claim (and its uid, when the ref has one)."""
        ref = self.claim_ref
        if ref is None or (ref[0], ref[1]) != claim.key:
            return False
        return not ref[2] or ref[2] == claim.uid

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Volume:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        volume = cls(str(meta.get("name") or ""))
        volume.resource_version = _resource_version(meta)
        volume.annotations = annotations
        if ANN_BETA_STORAGE_CLASS in annotations:
            volume.storage_class = annotations[ANN_BETA_STORAGE_CLASS]
        else:
            volume.storage_class = str(spec.get("storageClassName") or "")
        volume.capacity = _storage(spec.get("capacity"))
        volume.access_modes = _modes(spec.get("accessModes"))
        volume.volume_mode = str(spec.get("volumeMode") or FILESYSTEM)
        volume.phase = _enum(VolumePhase, (obj.get("status") or {}).get("phase"), VolumePhase.PENDING)
        volume.deleting = bool(meta.get("deletionTimestamp"))
        volume.labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        ref = spec.get("claimRef")
        if isinstance(ref, dict):
            volume.claim_ref = (
                str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or "")
            )
        csi = spec.get("csi")
        if isinstance(csi, dict):
            volume.csi_driver = str(csi.get("driver") or "")
            volume.csi_handle = str(csi.get("volumeHandle") or "")
        required = ((spec.get("nodeAffinity") or {}).get("required") or None)
        if isinstance(required, dict):
            terms = required.get("nodeSelectorTerms") or ()
            volume.node_terms = tuple(t for t in terms if isinstance(t, dict))
        volume.generation = next(_generations)
        return volume


@dataclass(slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: BindingMode = BindingMode.UNSET
    # allowedTopologies[].matchLabelExpressions as (key, allowed values) per term; () allows every node.
    allowed_topologies: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()
    generation: int = 0

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NOT_SUPPORTED_PROVISIONER

    def allows(self, labels: Mapping[str, str]) -> bool:
        """v1helper.MatchTopologySelectorTerms: no terms match every node; else any term, all its keys."""
        if not self.allowed_topologies:
            return True
        return any(all(labels.get(k) in values for k, values in term) for term in self.allowed_topologies)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> StorageClass:
        meta = obj.get("metadata") or {}
        terms = []
        for term in obj.get("allowedTopologies") or ():
            expressions = (term or {}).get("matchLabelExpressions") or ()
            terms.append(tuple(
                (str(e.get("key") or ""), frozenset(str(v) for v in e.get("values") or ()))
                for e in expressions
                if isinstance(e, dict)
            ))
        return cls(
            str(meta.get("name") or ""),
            str(obj.get("provisioner") or ""),
            _enum(BindingMode, obj.get("volumeBindingMode") or "", BindingMode.UNSET),
            tuple(terms),
            next(_generations),
        )


def csi_limits(obj: Mapping[str, Any]) -> dict[str, int]:
    """A CSINode's drivers that report an allocatable volume count (getVolumeLimits)."""
    limits: dict[str, int] = {}
    for driver in (obj.get("spec") or {}).get("drivers") or ():
        count = ((driver or {}).get("allocatable") or {}).get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            limits[str(driver.get("name") or "")] = count
    return limits


class VolumeIndex:
    """The three kinds by name, with the PVs grouped by storage class (kube's pvCache.ListPVs)."""

    def __init__(self) -> None:
        self.version = 0
        self.claims: dict[tuple[str, str], Claim] = {}
        self.volumes: dict[str, Volume] = {}
        self.classes: dict[str, StorageClass] = {}
        self._by_class: dict[str, dict[str, Volume]] = {}
        self.users: Counter[tuple[str, str]] = Counter()
        self.node_claims: dict[str, Counter[tuple[str, str]]] = {}
        self.node_disks: dict[str, Counter[InlineDisk]] = {}
        self.csi_limits: dict[str, dict[str, int]] = {}  # node -> CSI driver -> allocatable volume count
        # Our assumptions (kube's assume cache): name -> (the informer's object, the assumed one).
        self._assumed_volumes: dict[str, tuple[Volume, Volume]] = {}
        self._assumed_claims: dict[tuple[str, str], tuple[Claim, Claim]] = {}

    def count_users(self, pod: PodRecord, node: str, sign: int) -> None:
        """The pod starts (1) or stops (-1) counting on `node`: the users of its claims and disks."""
        if pod.disks:
            disks = self.node_disks.setdefault(node, Counter())
            for disk in pod.disks:
                disks[disk] += sign
                if disks[disk] <= 0:
                    del disks[disk]
            if not disks:
                del self.node_disks[node]
        if not pod.claims:
            return
        on_node = self.node_claims.setdefault(node, Counter())
        for name, ephemeral in pod.claims:
            key = (pod.namespace, name)
            on_node[key] += sign
            if on_node[key] <= 0:
                del on_node[key]
            if not ephemeral:
                self.users[key] += sign
                if self.users[key] <= 0:
                    del self.users[key]
        if not on_node:
            del self.node_claims[node]

    def _changed(self) -> None:
        self.version += 1

    # ------------------------------------------------------------------ informer input
    def apply(self, resource: str, event: str, obj: Mapping[str, Any]) -> None:
        """A watch event (ADDED, MODIFIED, DELETED) for one object of `resource`."""
        deleted = event == "DELETED"
        if resource == PERSISTENT_VOLUME_CLAIMS:
            claim = Claim.from_api(obj)
            if deleted:
                self.claims.pop(claim.key, None)
            else:
                self.set_claim(claim)
        elif resource == PERSISTENT_VOLUMES:
            volume = Volume.from_api(obj)
            if deleted:
                self._drop_volume(volume.name)
            else:
                self.set_volume(volume)
        elif resource == STORAGE_CLASSES:
            storage_class = StorageClass.from_api(obj)
            if deleted:
                self.classes.pop(storage_class.name, None)
            else:
                self.classes[storage_class.name] = storage_class
        elif resource == CSI_NODES:
            name = str((obj.get("metadata") or {}).get("name") or "")
            if deleted:
                self.csi_limits.pop(name, None)
            else:
                self.csi_limits[name] = csi_limits(obj)
        self._changed()

    def replace(self, resource: str, objs: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list of `resource`."""
        if resource == PERSISTENT_VOLUME_CLAIMS:
            self.claims = {c.key: c for c in map(Claim.from_api, objs)}
        elif resource == PERSISTENT_VOLUMES:
            self.volumes = {}
            self._by_class = {}
            for volume in map(Volume.from_api, objs):
                self.set_volume(volume)
        elif resource == STORAGE_CLASSES:
            self.classes = {c.name: c for c in map(StorageClass.from_api, objs)}
        elif resource == CSI_NODES:
            self.csi_limits = {str((o.get("metadata") or {}).get("name") or ""): csi_limits(o) for o in objs}
        self._changed()

    # ------------------------------------------------------------------ our own writes, and reads
    def assume_volume(self, volume: Volume, claim: Claim) -> Volume:
        """AssumePodVolumes for a static match: the PV held as bound to the claim until our write's answer
        or the watch brings a newer object, or `revert` puts the informer's one back."""
        held = self.volumes.get(volume.name, volume)
        assumed = dataclasses.replace(
            held, claim_ref=(claim.namespace, claim.name, claim.uid), generation=next(_generations)
        )
        original = self._assumed_volumes.get(volume.name, (held, held))[0]
        self._assumed_volumes[volume.name] = (original, assumed)
        self._put_volume(assumed)
        return assumed

    def assume_claim(self, claim: Claim, node: str) -> Claim:
        """AssumePodVolumes for a claim to provision: held with `node` as its selected node."""
        held = self.claims.get(claim.key, claim)
        annotations = {**held.annotations, ANN_SELECTED_NODE: node}
        assumed = dataclasses.replace(held, annotations=annotations, generation=next(_generations))
        original = self._assumed_claims.get(claim.key, (held, assumed))[0]
        self._assumed_claims[claim.key] = (original, assumed)
        self.claims[claim.key] = assumed
        self._changed()
        return assumed

    def revert(self, volumes: Iterable[str], claims: Iterable[tuple[str, str]]) -> None:
        """RevertAssumedPodVolumes: where an assumed object is still held (nothing newer came), the
        informer's object it replaced is held again."""
        for name in volumes:
            pair = self._assumed_volumes.pop(name, None)
            if pair is not None and self.volumes.get(name) is pair[1]:
                self._put_volume(pair[0])
        for key in claims:
            claim_pair = self._assumed_claims.pop(key, None)
            if claim_pair is not None and self.claims.get(key) is claim_pair[1]:
                self.claims[key] = claim_pair[0]
                self._changed()

    def settle(self, volumes: Iterable[str], claims: Iterable[tuple[str, str]]) -> None:
        """The writes were answered: nothing to put back any more."""
        for name in volumes:
            self._assumed_volumes.pop(name, None)
        for key in claims:
            self._assumed_claims.pop(key, None)

    def set_claim(self, claim: Claim) -> None:
        held = self.claims.get(claim.key)
        if held is None or newer_version(held.resource_version, claim.resource_version):
            self.claims[claim.key] = claim
            self._changed()

    def set_volume(self, volume: Volume) -> None:
        held = self.volumes.get(volume.name)
        if held is not None and not newer_version(held.resource_version, volume.resource_version):
            return
        self._put_volume(volume)

    def _put_volume(self, volume: Volume) -> None:
        if volume.name in self.volumes:
            self._drop_volume(volume.name)
        self.volumes[volume.name] = volume
        self._by_class.setdefault(volume.storage_class, {})[volume.name] = volume
        self._changed()

    def _drop_volume(self, name: str) -> None:
        volume = self.volumes.pop(name, None)
        if volume is not None:
            group = self._by_class.get(volume.storage_class)
            if group is not None:
                group.pop(name, None)
                if not group:
                    del self._by_class[volume.storage_class]

    def volumes_of_class(self, storage_class: str) -> list[Volume]:
        """The PVs of a storage class, in name order (kube's order is its cache's; ours is stable)."""
        group = self._by_class.get(storage_class)
        return sorted(group.values(), key=lambda v: v.name) if group else []
