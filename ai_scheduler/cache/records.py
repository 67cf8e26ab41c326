"""Our own small records built straight from API JSON (dicts from orjson).

kubernetes_asyncio model objects never travel past api/; everything the
scheduler reasons about is one of these slotted classes.

Memory: the cache holds one PodRecord per pod of the cluster, so a record keeps
no reference into the parsed JSON. Strings that repeat across pods (namespaces,
node and scheduler names, phases, label keys and values) are interned, equal
toleration lists are one shared tuple, and the one annotation known to be large
and never read (`kubectl.kubernetes.io/last-applied-configuration`) is dropped.
Pods of one template also share their requests: equal `requests` and
`nonzero_requests` are one `Frozen` dict (read-only: a write raises), as are the
empty label, annotation, node selector and affinity maps, and an amount parsed
from a quantity string is one int object. tests/perf_budgets/test_memory_budgets.py holds the
bytes per pod and per node to a budget.

A record is the pod parsed once, when it enters the cache (kube-scheduler's PodInfo: requests, scoring
requests, parsed affinity and spread); what the scheduler derives from it later (tenant, quota
amounts, managed-GPU request) is its PodInfo (cache/pod_info.py), made on first use.
"""

from __future__ import annotations

import enum
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ai_scheduler.cache.pod_info import PodInfo
from ai_scheduler.cache.selectors import NO_AFFINITY, PodAffinityTerms, SelectorError, pod_affinity_terms
from ai_scheduler.cache.spread import NO_SPREAD, SpreadConstraints, spread_constraints
from ai_scheduler.messages import echo
from ai_scheduler.quantity import QuantityError, parse_duration, to_units

# kube-scheduler scores pods without cpu/memory requests as if they asked for these
# (schedutil.DefaultMilliCPURequest / DefaultMemoryRequest), so that empty pods still spread.
DEFAULT_SCORE_CPU_MILLI = 100
DEFAULT_SCORE_MEMORY = 200 * 1024 * 1024

PODS = "pods"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# kube-scheduler's HostPortInfo defaults: an empty hostIP binds every address, an empty protocol is TCP.
BIND_ALL_HOST_IP = "0.0.0.0"
DEFAULT_PROTOCOL = "TCP"
MAX_PORT = 65535

HostPort = tuple[str, str, int]  # (hostIP, protocol, hostPort), with kube-scheduler's defaults filled in
ClaimRef = tuple[str, bool]  # (PersistentVolumeClaim name, whether a generic ephemeral volume's)


class PortError(ValueError):
    """A malformed entry of a container's `ports`; the message names the field."""


class Taint:
    __slots__ = ("effect", "key", "value")

    def __init__(self, key: str, value: str, effect: str) -> None:
        self.key = key
        self.value = value
        self.effect = effect

    def describe(self) -> str:
        """kube-scheduler's rendering in `untolerated taint {key: value}`."""
        return f"{{{self.key}: {self.value}}}"

    def __repr__(self) -> str:
        return f"Taint({self.key}={self.value}:{self.effect})"

    def identity(self) -> tuple[str, str, str]:
        return (self.key, self.value, self.effect)


class Toleration:
    __slots__ = ("effect", "key", "operator", "value")

    def __init__(self, key: str, operator: str, value: str, effect: str) -> None:
        self.key = key
        self.operator = operator
        self.value = value
        self.effect = effect

    def tolerates(self, taint: Taint) -> bool:
        """v1.Toleration.ToleratesTaint: empty effect matches all, empty key with Exists matches all."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("Equal", ""):
            return self.value == taint.value
        return False

    def identity(self) -> tuple[str, str, str, str]:
        return (self.key, self.operator, self.value, self.effect)


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# The controllers whose selector kube-scheduler's default spreading uses (helper.DefaultSelector), by the
# ownerReference's (apiVersion, kind).
SPREAD_CONTROLLERS = frozenset(
    {("v1", "ReplicationController"), ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")}
)
ESTIMATE_ANNOTATION = "ai-scheduler.io/estimated-runtime"  # the user's run-time estimate ("90m", "2h")
# The task attributes the run-time model reads (prediction/features.py; docs/reference/contract.md): labels
# a user or a Task's controller (cache/tasks.py) sets, and a Task's declared sizes (whole numbers).
TASK_TYPE_LABEL = "ai-scheduler.io/task-type"
WORKLOAD_CLASS_LABEL = "ai-scheduler.io/workload-class"
MODEL_PARAMETERS_ANNOTATION = "ai-scheduler.io/model-parameters"
DATASET_BYTES_ANNOTATION = "ai-scheduler.io/dataset-bytes"
# A user's hold (`ai-scheduler status hold`): Kubernetes lets spec.schedulingGates only be removed after a
# pod's creation, never added, so a pending pod is held by this annotation ("true"), which the scheduler
# treats as one more scheduling gate; a pod may also be created with the scheduling gate of the same name.
HOLD_ANNOTATION = "ai-scheduler.io/hold"
HOLD_GATE = "ai-scheduler.io/hold"
# A user's "retry now" (`ai-scheduler status requeue`): a new value (RFC 3339) moves the pending pod to
# activeQ with its backoff reset.
REQUEUE_ANNOTATION = "ai-scheduler.io/requeue-at"


class Frozen(dict[str, Any]):
    """A dict shared by many records, so read-only: every write raises TypeError (a record that needs
    another map gets a new one: records are replaced, never edited, see `mark_bound`)."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a shared record map is read-only")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self) -> Frozen:
        return self

    def __deepcopy__(self, memo: Any) -> Frozen:
        return self

    def __reduce__(self) -> Any:
        return (Frozen, (dict(self),))


EMPTY = Frozen()  # the one empty map of every record that has none
SHARED_MAPS = 4096  # distinct request maps kept for sharing (templates of pods)


@functools.lru_cache(maxsize=SHARED_MAPS)
def _frozen(items: tuple[tuple[str, Any], ...]) -> Frozen:
    return Frozen(items)


def shared_map(mapping: Mapping[str, Any]) -> Frozen:
    """The shared, read-only copy of a small map of hashable values (pods of one template share it)."""
    if not mapping:
        return EMPTY
    if type(mapping) is Frozen:
        return mapping
    try:
        return _frozen(tuple(mapping.items()))
    except TypeError:  # an unhashable value (malformed input): its own copy
        return Frozen(mapping)


def newer_version(held: str, incoming: str) -> bool:
    """Whether an object at resourceVersion `incoming` may replace the one held at `held` (an older event
    may not; versions are compared as integers, and one that is missing or not a number never blocks)."""
    if not held or not incoming:
        return True
    try:
        return int(incoming) >= int(held)
    except ValueError:
        return True


def _shared(value: Any) -> Any:
    """The interned copy of a string (one object for every pod that carries it); anything else as is."""
    return sys.intern(value) if type(value) is str else value


def _shared_map(mapping: Any) -> dict[str, str]:
    """Labels or annotations with shared keys and values; not a dict (malformed input) reads as empty."""
    if not isinstance(mapping, dict) or not mapping:
        return EMPTY
    return {_shared(k): _shared(v) for k, v in mapping.items() if k != LAST_APPLIED} or EMPTY


@functools.lru_cache(maxsize=4096)
def _tolerations(identities: tuple[tuple[str, str, str, str], ...]) -> tuple[Toleration, ...]:
    """Pods of one template tolerate the same taints: they share one tuple of Toleration objects."""
    return tuple(Toleration(*identity) for identity in identities)


@functools.lru_cache(maxsize=4096)
def _controller(kind: str, name: str) -> tuple[str, str]:
    """Replicas of one workload share one (kind, name) tuple."""
    return (kind, name)


def _spread_controller(refs: Any) -> tuple[str, str] | None:
    """metav1.GetControllerOf, kept only for the workloads kube-scheduler's default spreading reads."""
    for ref in refs or ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, name = ref.get("kind"), ref.get("name")
            if (ref.get("apiVersion"), kind) in SPREAD_CONTROLLERS and isinstance(name, str):
                return _controller(_shared(kind), _shared(name))
            return None
    return None


def _controller_ref(refs: Any) -> tuple[str, str, str] | None:
    """metav1.GetControllerOf as (API group, kind, name): what a gang inferred from the owner starts from."""
    for ref in refs or ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            api, kind, name = ref.get("apiVersion"), ref.get("kind"), ref.get("name")
            if isinstance(api, str) and isinstance(kind, str) and isinstance(name, str):
                group = api.rpartition("/")[0]
                return _shared(group), _shared(kind), _shared(name)
            return None
    return None


def _parse_resources(section: dict[str, Any] | None) -> dict[str, int]:
    if not section:
        return {}
    return {name: to_units(name, value) for name, value in section.items()}


def _add_into(total: dict[str, int], part: dict[str, int]) -> None:
    for name, value in part.items():
        total[name] = total.get(name, 0) + value


def _max_into(total: dict[str, int], part: dict[str, int]) -> None:
    for name, value in part.items():
        if name not in total or value > total[name]:
            total[name] = value


def container_requests(container: dict[str, Any]) -> dict[str, int]:
    """Requests of one container; limits stand in for requests that are not set, as the API defaults them."""
    resources = container.get("resources") or {}
    requests = _parse_resources(resources.get("requests"))
    for name, value in _parse_resources(resources.get("limits")).items():
        requests.setdefault(name, value)
    return requests


def is_pod_level_resource(name: str) -> bool:
    """resourcehelper.IsSupportedPodLevelResource: pod-level spec.resources covers only these."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _aggregate_requests(spec: dict[str, Any], non_missing: dict[str, int] | None) -> dict[str, int]:
    """resourcehelper.AggregateContainerRequests; keeps zero-valued names, as Go's ResourceList does.

    `non_missing` (NonMissingContainerRequests) fills in, container by container, the
    names a container does not request at all.
    """

    def requests_of(container: dict[str, Any]) -> dict[str, int]:
        requests = container_requests(container)
        for name, value in (non_missing or {}).items():
            requests.setdefault(name, value)
        return requests

    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        _add_into(total, requests_of(container))

    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        requests = requests_of(container)
        if container.get("restartPolicy") == "Always":
            _add_into(sidecars, requests)
            _add_into(total, requests)
        else:
            step = dict(sidecars)
            _add_into(step, requests)
            _max_into(init_peak, step)
    _max_into(total, init_peak)
    return total


def _host_ports_of(containers: Any, path: str, sidecars_only: bool, host_network: bool) -> list[HostPort]:
    ports: list[HostPort] = []
    for i, container in enumerate(containers or ()):
        if not isinstance(container, dict):
            continue
        if sidecars_only and container.get("restartPolicy") != "Always":
            continue  # an ordinary init container has finished before the pod's containers start
        for j, port in enumerate(container.get("ports") or ()):
            where = f"{path}[{i}].ports[{j}]"
            if not isinstance(port, dict):
                raise PortError(f"{where} must be an object, got {echo(port)}")
            field = "hostPort"
            number = port.get(field)
            if host_network and not number:  # the API server's default: the container's port, on the host
                field = "containerPort"
                number = port.get(field)
            if number is None:
                continue
            if type(number) is not int or not 0 <= number <= MAX_PORT:
                got = echo(number)
                raise PortError(f"{where}.{field} must be an integer from 0 to {MAX_PORT}, got {got}")
            if number == 0:  # no host port: only the container's own port
                continue
            host_ip = port.get("hostIP") or BIND_ALL_HOST_IP
            protocol = port.get("protocol") or DEFAULT_PROTOCOL
            if not isinstance(host_ip, str):
                raise PortError(f"{where}.hostIP must be a string, got {echo(host_ip)}")
            if not isinstance(protocol, str):
                raise PortError(f"{where}.protocol must be a string, got {echo(protocol)}")
            ports.append((_shared(host_ip), _shared(protocol), number))
    return ports


def pod_host_ports(spec: dict[str, Any]) -> tuple[HostPort, ...]:
    """The host ports a pod takes on its node, as kube-scheduler's GetHostPorts finds them.

    Ports of the containers and of the init containers that run beside them
    (restartPolicy Always, sidecars); a hostPort of 0 (or none) takes nothing.
    An empty hostIP is 0.0.0.0 (every address) and an empty protocol TCP, as
    HostPortInfo fills them in. With `hostNetwork`, a port without a hostPort
    takes its containerPort on the host, as the API server defaults it (the
    simulated one does not). Raises PortError for a malformed entry.
    (The API server refuses a pod that names one host port twice.)
    """
    host_network = spec.get("hostNetwork") is True
    ports = _host_ports_of(spec.get("initContainers"), "spec.initContainers", True, host_network)
    ports += _host_ports_of(spec.get("containers"), "spec.containers", False, host_network)
    return tuple(dict.fromkeys(ports))  # a port named twice is one port (HostPortInfo is a set)


class PodResourceClaim:
    """An entry of spec.resourceClaims: a DRA claim named directly or made from a template."""

    __slots__ = ("claim_name", "name", "template_name")

    def __init__(self, name: str, claim_name: str, template_name: str) -> None:
        self.name = name
        self.claim_name = claim_name  # resourceClaimName ("" when from a template)
        self.template_name = template_name  # resourceClaimTemplateName

    def __repr__(self) -> str:
        return f"PodResourceClaim({self.name}, claim={self.claim_name!r}, template={self.template_name!r})"


def pod_resource_claims(spec: dict[str, Any], status: dict[str, Any]) -> tuple[
    tuple[PodResourceClaim, ...], dict[str, str], str
]:
    """spec.resourceClaims, status.resourceClaimStatuses (pod claim name -> generated claim's name; ""
    when the status says no claim is needed) and status.extendedResourceClaimStatus's claim name."""
    refs = []
    for item in spec.get("resourceClaims") or ():
        if isinstance(item, dict):
            refs.append(PodResourceClaim(
                str(item.get("name") or ""),
                str(item.get("resourceClaimName") or ""),
                str(item.get("resourceClaimTemplateName") or ""),
            ))
    statuses = {
        str(item.get("name") or ""): str(item.get("resourceClaimName") or "")
        for item in status.get("resourceClaimStatuses") or ()
        if isinstance(item, dict)
    }
    extended = status.get("extendedResourceClaimStatus")
    extended_name = str(extended.get("resourceClaimName") or "") if isinstance(extended, dict) else ""
    return tuple(refs), statuses, extended_name


def extended_containers(spec: dict[str, Any]) -> tuple[tuple[int, str, bool, list[str], dict[str, int]], ...]:
    """Containers with extended-resource requests, numbered as kube numbers them (init containers first):
    (index, name, long-lived (an app container or a sidecar), sorted request names, amounts), for the
    claim kube makes for DRA-backed extended resources (KEP-5004)."""
    inits = [c for c in spec.get("initContainers") or () if isinstance(c, dict)]
    apps = [c for c in spec.get("containers") or () if isinstance(c, dict)]
    out = []
    for index, container in enumerate(inits + apps):
        long_lived = index >= len(inits) or container.get("restartPolicy") == "Always"
        resources = container.get("resources") or {}
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        amounts = {}
        for name, value in requests.items():
            if "/" in str(name):
                try:
                    amounts[str(name)] = to_units(str(name), value)
                except QuantityError:
                    continue
        if amounts:
            name = str(container.get("name") or "")
            out.append((index, name, long_lived, sorted(str(k) for k in requests), amounts))
    return tuple(out)


def pod_claims(pod_name: str, volumes: Any) -> tuple[ClaimRef, ...]:
    """The claims a pod's volumes use, in order: a `persistentVolumeClaim` volume's claimName, and a generic
    ephemeral volume's claim, which its controller names `<pod>-<volume>` (ephemeral.VolumeClaimName)."""
    claims: list[ClaimRef] = []
    for volume in volumes if isinstance(volumes, list) else ():
        if not isinstance(volume, dict):
            continue
        source = volume.get("persistentVolumeClaim")
        if isinstance(source, dict):
            claims.append((str(source.get("claimName") or ""), False))
        elif isinstance(volume.get("ephemeral"), dict):
            claims.append((f"{pod_name}-{volume.get('name') or ''}", True))
    return tuple(claims)


class DiskKind(enum.Enum):
    GCE_PERSISTENT_DISK = "gcePersistentDisk"
    AWS_ELASTIC_BLOCK_STORE = "awsElasticBlockStore"
    ISCSI = "iscsi"
    RBD = "rbd"


@dataclass(frozen=True, slots=True)
class InlineDisk:
    """A disk a pod names inline, by the fields kube's VolumeRestrictions compares (isVolumeConflict)."""

    kind: DiskKind
    name: str  # pdName, volumeID, iqn, or the RBD image
    read_only: bool = False
    pool: str = ""  # RBD only
    monitors: frozenset[str] = frozenset()  # RBD only


def inline_disks(volumes: Any) -> tuple[InlineDisk, ...]:
    """The GCE PD, AWS EBS, iSCSI and RBD volumes of a pod's `volumes`."""
    disks: list[InlineDisk] = []
    for volume in volumes if isinstance(volumes, list) else ():
        if not isinstance(volume, dict):
            continue
        for kind in DiskKind:
            source = volume.get(kind.value)
            if not isinstance(source, dict):
                continue
            read_only = source.get("readOnly") is True
            if kind is DiskKind.GCE_PERSISTENT_DISK:
                disks.append(InlineDisk(kind, str(source.get("pdName") or ""), read_only))
            elif kind is DiskKind.AWS_ELASTIC_BLOCK_STORE:
                disks.append(InlineDisk(kind, str(source.get("volumeID") or ""), read_only))
            elif kind is DiskKind.ISCSI:
                disks.append(InlineDisk(kind, str(source.get("iqn") or ""), read_only))
            else:  # the API server defaults the pool to "rbd"
                monitors = frozenset(str(m) for m in source.get("monitors") or ())
                pool = str(source.get("pool") or "rbd")
                disks.append(InlineDisk(kind, str(source.get("image") or ""), read_only, pool, monitors))
    return tuple(disks)


def _pod_level_requests(spec: dict[str, Any]) -> dict[str, int]:
    section = (spec.get("resources") or {}).get("requests") or {}
    return {name: to_units(name, value) for name, value in section.items() if is_pod_level_resource(name)}


def _pod_requests(spec: dict[str, Any], non_missing: dict[str, int] | None = None) -> dict[str, int]:
    total = _aggregate_requests(spec, non_missing)
    total.update(_pod_level_requests(spec))
    overhead = spec.get("overhead")
    if overhead:
        _add_into(total, _parse_resources(overhead))
    return total


def pod_requests(spec: dict[str, Any]) -> dict[str, int]:
    """What a pod needs on a node, computed as kube-scheduler's resourcehelper.PodRequests does.

    Regular containers and restartable init containers (sidecars) run together;
    each ordinary init container runs alone beside the sidecars started before
    it; the pod needs the larger of the two peaks, plus its overhead. Pod-level
    `spec.resources` replaces the container sum for the resources it names
    (cpu, memory, hugepages-*).

    A `pods` request is dropped: the pod takes one pod slot, which the cache
    counts itself. kube-scheduler reads it into Resource.AllowedPodNumber, which
    neither NodeResourcesFit nor the node's usage looks at (and the API server
    refuses it in a container), so it must neither block the pod nor take slots.
    """
    return {name: value for name, value in _pod_requests(spec).items() if value and name != PODS}


def pod_score_requests(spec: dict[str, Any]) -> dict[str, int]:
    """The requests scoring sees (kube-scheduler's NonZeroRequested / calculatePodResourceRequest).

    Every container that does not request cpu or memory counts as requesting
    DEFAULT_SCORE_CPU_MILLI / DEFAULT_SCORE_MEMORY, container by container (so a
    pod of two request-less containers counts 200m). With pod-level requests set,
    the defaults apply only to the names the pod's total does not mention at all
    (getNonMissingContainerRequests).
    """
    defaults = {"cpu": DEFAULT_SCORE_CPU_MILLI, "memory": DEFAULT_SCORE_MEMORY}
    if _pod_level_requests(spec):
        present = _pod_requests(spec)
        defaults = {name: value for name, value in defaults.items() if name not in present}
    result = _pod_requests(spec, defaults) if defaults else _pod_requests(spec)
    return {name: value for name, value in result.items() if value and name != PODS}


class PodRecord:
    """A pod as the scheduler sees it."""

    __slots__ = (
        "_info",
        "affinity",
        "annotations",
        "claim_statuses",
        "claims",
        "controller",
        "creation",
        "deleting",
        "disks",
        "extended_claim",
        "gated",
        "host_ports",
        "labels",
        "name",
        "namespace",
        "node_name",
        "node_selector",
        "nonzero_requests",
        "owner",
        "owners",
        "phase",
        "pod_affinity",
        "preempts",
        "priority",
        "requests",
        "resource_claims",
        "resource_version",
        "scheduled_condition",
        "scheduler_name",
        "scheduling_group",
        "spec_error",
        "spread",
        "started",
        "tolerations",
        "uid",
    )

    def __init__(self) -> None:
        self.uid = ""
        self.namespace = ""
        self.name = ""
        self.resource_version = ""
        self.scheduler_name = ""
        self.node_name = ""
        self.phase = ""
        self.priority = 0
        self.creation = ""
        self.deleting = False
        self.gated = False  # spec.schedulingGates, or a user's hold (HOLD_ANNOTATION): never tried
        self.labels: dict[str, str] = EMPTY
        self.annotations: dict[str, str] = EMPTY
        self.node_selector: dict[str, str] = EMPTY
        self.owners: tuple[str, ...] = ()
        # The controlling owner when it is a workload that kube-scheduler's default spreading reads
        # (ReplicaSet, StatefulSet, ReplicationController): (kind, name); None otherwise.
        self.controller: tuple[str, str] | None = None
        # The controlling owner reference as (API group, kind, name), for gangs inferred from the owner
        # (cache/pod_grouper.py); None without one.
        self.owner: tuple[str, str, str] | None = None
        # spec.schedulingGroup.podGroupName (Kubernetes v1.36+): the `scheduling.k8s.io` PodGroup it joins.
        self.scheduling_group = ""
        self.started = ""  # status.startTime: when the kubelet started it
        self.preempts = True  # spec.preemptionPolicy is not Never
        self.affinity: dict[str, Any] = EMPTY
        self.pod_affinity: PodAffinityTerms = NO_AFFINITY  # parsed podAffinity / podAntiAffinity
        self.spread: SpreadConstraints = NO_SPREAD  # parsed topologySpreadConstraints
        self.tolerations: tuple[Toleration, ...] = ()
        self.requests: dict[str, int] = EMPTY
        self.host_ports: tuple[HostPort, ...] = ()
        self.claims: tuple[ClaimRef, ...] = ()  # the PersistentVolumeClaims its volumes use (VolumeBinding)
        self.disks: tuple[InlineDisk, ...] = ()  # in-tree disks named inline (VolumeRestrictions)
        self.resource_claims: tuple[PodResourceClaim, ...] = ()  # spec.resourceClaims (DRA)
        self.claim_statuses: dict[str, str] = {}  # status.resourceClaimStatuses: name -> generated claim
        self.extended_claim = ""  # status.extendedResourceClaimStatus.resourceClaimName (KEP-5004)
        self.nonzero_requests: dict[str, int] | None = None  # None: derived from `requests`
        self.scheduled_condition: tuple[str, str, str] | None = None
        self.spec_error = ""
        self._info: PodInfo | None = None  # `info`, made on first use

    @property
    def info(self) -> PodInfo:
        """What the scheduler derives from this version of the pod once (cache/pod_info.py: its tenant,
        quota amounts, managed-GPU request); a changed pod is a new record, with a new one. Made on first
        use: a record that never enters the scheduling (a command line's, a test's) never needs one."""
        info = self._info
        if info is None:
            info = self._info = PodInfo()
        return info

    def forget_derived(self) -> None:
        """Drop the PodInfo: for a copy of the record whose requests, annotations or identity change (a
        what-if without requests, a simulation's copy under another uid), which derives its own."""
        self._info = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def mark_bound(self, node: str, annotations: Mapping[str, str], started: str) -> None:
        """Make this record the pod as a watch shows it once bound to `node` with `annotations`
        (PreBind's) and started, in place: what the trace simulator applies for a binding, without a
        round trip through the API form. In place, so that the cache sees the very record it assumed
        and confirms it without taking its resources off the node and on again (`set_pod`); nothing
        derived from a pending pod changes by its binding (the gpu-ids annotation is the cache's own
        choice, which it already holds)."""
        self.node_name, self.phase, self.started = node, "Running", started
        self.annotations = {**self.annotations, **annotations}

    @property
    def pending(self) -> bool:
        """Waiting for a node: unbound, alive and not gated."""
        return not self.node_name and not self.deleting and not self.terminal

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> PodRecord:
        """Build from a Pod's JSON. A malformed resource quantity is kept as `spec_error`, not raised,
        so that the pod is reported to its owner rather than lost."""
        rec = cls()
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        rec.uid = meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        rec.namespace = _shared(meta.get("namespace") or "")
        rec.name = meta.get("name") or ""
        rec.resource_version = meta.get("resourceVersion") or ""
        rec.creation = _shared(meta.get("creationTimestamp") or "")
        rec.deleting = bool(meta.get("deletionTimestamp"))
        rec.labels = shared_map(_shared_map(meta.get("labels")))  # a template's pods: one map
        rec.annotations = _shared_map(meta.get("annotations"))
        rec.owners = tuple(_shared(ref.get("name", "")) for ref in meta.get("ownerReferences") or ())
        rec.controller = _spread_controller(meta.get("ownerReferences"))
        rec.owner = _controller_ref(meta.get("ownerReferences"))
        group = spec.get("schedulingGroup")
        if group:
            rec.scheduling_group = _shared(group.get("podGroupName") or "") if isinstance(group, dict) else ""
        rec.scheduler_name = _shared(spec.get("schedulerName") or "default-scheduler")
        rec.node_name = _shared(spec.get("nodeName") or "")
        try:
            rec.priority = int(spec.get("priority") or 0)
        except (TypeError, ValueError):
            rec.spec_error = f"invalid spec.priority {echo(spec.get('priority'))}"
        rec.gated = bool(spec.get("schedulingGates")) or rec.annotations.get(HOLD_ANNOTATION) == "true"
        rec.preempts = spec.get("preemptionPolicy") != "Never"
        rec.node_selector = _shared_map(spec.get("nodeSelector"))
        rec.affinity = spec.get("affinity") or EMPTY
        rec.tolerations = _tolerations(tuple(
            (
                _shared(t.get("key") or ""),
                _shared(t.get("operator") or "Equal"),
                _shared(t.get("value") or ""),
                _shared(t.get("effect") or ""),
            )
            for t in spec.get("tolerations") or ()
        ))
        rec.phase = _shared(status.get("phase") or "Pending")
        rec.started = _shared(status.get("startTime") or "")
        for cond in status.get("conditions") or ():
            if cond.get("type") == "PodScheduled":
                rec.scheduled_condition = (
                    cond.get("status") or "",
                    cond.get("reason") or "",
                    cond.get("message") or "",
                )
        try:
            rec.requests = shared_map(pod_requests(spec))
            rec.nonzero_requests = shared_map(pod_score_requests(spec))
        except QuantityError as exc:
            rec.requests = {}
            rec.nonzero_requests = None
            rec.spec_error = f"invalid resource quantity: {exc}"
        try:
            rec.host_ports = pod_host_ports(spec)
        except PortError as exc:
            rec.spec_error = rec.spec_error or f"invalid container port: {exc}"
        if spec.get("volumes"):
            rec.claims = pod_claims(rec.name, spec["volumes"])
            rec.disks = inline_disks(spec["volumes"])
        if any("/" in name and not name.startswith("hugepages-") for name in rec.requests):
            rec.info.containers = extended_containers(spec)
        if spec.get("resourceClaims") or status.get("extendedResourceClaimStatus"):
            rec.resource_claims, rec.claim_statuses, rec.extended_claim = pod_resource_claims(spec, status)
        if rec.affinity:
            try:
                rec.pod_affinity = pod_affinity_terms(rec.affinity, rec.namespace, rec.labels)
            except SelectorError as exc:
                rec.spec_error = rec.spec_error or f"invalid pod affinity: {exc}"
        if spec.get("topologySpreadConstraints"):
            try:
                rec.spread = spread_constraints(spec["topologySpreadConstraints"], rec.labels)
            except SelectorError as exc:
                rec.spec_error = rec.spec_error or f"invalid topology spread constraint: {exc}"
        estimate = rec.annotations.get(ESTIMATE_ANNOTATION)
        if estimate is not None and not rec.spec_error and parse_duration(estimate) is None:
            got = echo(estimate)
            rec.spec_error = f"annotation {ESTIMATE_ANNOTATION} must be a duration such as 1h30m, got {got}"
        return rec

    def score_requests(self) -> dict[str, int]:
        """Requests as kube-scheduler's scoring sees them (see pod_score_requests): the record's shared,
        read-only map, parsed once; derived from `requests` for a record built without one."""
        if self.nonzero_requests is not None:
            return self.nonzero_requests
        scored = dict(self.requests)
        scored.setdefault("cpu", DEFAULT_SCORE_CPU_MILLI)
        scored.setdefault("memory", DEFAULT_SCORE_MEMORY)
        return scored

    def __repr__(self) -> str:
        return f"PodRecord({self.key}, node={self.node_name or '-'}, phase={self.phase})"


class NodeRecord:
    """A node as the scheduler sees it."""

    __slots__ = (
        "allocatable",
        "annotations",
        "labels",
        "name",
        "ready",
        "resource_version",
        "spec_error",
        "taints",
        "unschedulable",
    )

    def __init__(self) -> None:
        self.name = ""
        self.resource_version = ""
        self.labels: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.taints: tuple[Taint, ...] = ()
        self.unschedulable = False
        self.ready = "Unknown"
        self.allocatable: dict[str, int] = {}
        self.spec_error = ""

    @classmethod
    def from_api(cls, obj: dict[str, Any]) -> NodeRecord:
        rec = cls()
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        rec.name = meta.get("name") or ""
        rec.resource_version = meta.get("resourceVersion") or ""
        rec.labels = _shared_map(meta.get("labels"))
        rec.annotations = _shared_map(meta.get("annotations"))
        rec.unschedulable = bool(spec.get("unschedulable"))
        rec.taints = tuple(
            Taint(t.get("key") or "", t.get("value") or "", t.get("effect") or "")
            for t in spec.get("taints") or ()
        )
        for cond in status.get("conditions") or ():
            if cond.get("type") == "Ready":
                rec.ready = cond.get("status") or "Unknown"
        try:
            rec.allocatable = _parse_resources(status.get("allocatable") or status.get("capacity"))
        except QuantityError as exc:
            rec.allocatable = {}
            rec.spec_error = f"invalid allocatable quantity: {exc}"
        return rec

    def static_identity(self) -> tuple[Any, ...]:
        """Everything static filters and scores read; a change here invalidates their cached results."""
        return (
            tuple(sorted(self.labels.items())),
            tuple(t.identity() for t in self.taints),
            self.unschedulable,
            self.ready,
        )

    def __repr__(self) -> str:
        return f"NodeRecord({self.name})"
