"""Random scheduling cases whose outcome does not depend on tie-breaks, for the differential test.

`tests/e2e/test_e2e_differential.py` runs every case twice on one real control plane, once under
kube-scheduler and once under ai-scheduler, and compares what any correct scheduler must agree on.
Scores differ between any two schedulers (and kube-scheduler breaks ties at random), so a case is
built such that *which* node a pod takes never changes *how many* pods can be placed, nor, once no
more fit, why each node refuses the next one:

- every incoming pod of a case is the same pod (1 cpu, 1Gi; the same labels, tolerations, node
  selector and constraint), so any order of placement is as good as another;
- node-level filters are static: a taint the pods do or do not tolerate, a disk label the pods may
  select, a zone the pods may exclude by node affinity, a cordoned node;
- one "family" per case adds what depends on other pods:
  `fit` (capacity only), `hostport` (hostPort 8080, existing pods on some nodes holding it over TCP,
  or over UDP, which does not conflict), `anti-host` / `anti-zone` (required anti-affinity of the
  pods to their own kind; existing pods of that kind, or existing pods whose own anti-affinity
  selects the incoming ones, block a domain), `affinity-zone` (required affinity to `db` pods in the
  same zone; sometimes the pods are `db` pods themselves, and the first may then go anywhere),
  `spread-zone` / `spread-host` (DoNotSchedule topology spread of the pods' own kind, maxSkew 1 or 2,
  sometimes minDomains above the number of domains; untolerated or cordoned nodes stay domains,
  nodeTaintsPolicy being Ignore);
- or one of the volume families: `pv-bound` (one claim shared by all the pods, bound to a volume
  pinned to a zone by its node affinity (VolumeBinding) or by its zone label (VolumeZone)),
  `pvc-immediate` (an unbound claim of an Immediate class that nothing provisions: the pods wait in
  PreFilter), `rwop` (one ReadWriteOncePod claim, sometimes already used by an existing pod: one
  pod at most runs), `wffc-local` (a claim per pod, of a WaitForFirstConsumer class without a
  provisioner, and local volumes pinned to some of the case's nodes: a node takes as many pods as it
  has free volumes and room), `volume-limit` (a claim per pod bound to its own CSI volume; CSINodes
  give some nodes an attach limit, which existing pods with CSI volumes of their own use up);
- or one of the Dynamic Resource Allocation families (a third of the cases, drawn apart so that the
  others stay the cases they were): nodes publish 0-8 GPUs in ResourceSlices shaped like NVIDIA's
  driver's (H100 or A100 products), some of them allocated already to a claim of no pod; each pod
  asks for `gpu_count` devices of the class `diff-gpu` through a claim of its own (`dra-claim`), a
  claim from a template (`dra-template`), a claim whose CEL selector takes only H100s by product name
  or memory capacity (`dra-selector`), a template asking for All of a node's devices (`dra-all`: one
  pod per node whose devices are all free), one claim shared by all the pods (`dra-shared`: they go
  where it was allocated; ample capacity), or a plain `nvidia.com/gpu` request that the class
  `diff-gpu-extended` maps onto the devices (`dra-extended`, KEP-5004). A node takes as many pods as
  its free devices and its room allow, whatever the order;
- where the node that takes a pod could change the reason another node gives later (a zone's pod
  landing on a node with one free slot turns that node's "anti-affinity" into "Insufficient cpu"),
  the family gets ample capacity, so that no node of the case ever runs out. (In `wffc-local` and
  `volume-limit` each node's final state is fixed whatever the order: as many pods as both its room
  and its volumes allow, once the pods outnumber what the case can take.)

`expected_bound` simulates a case with random choices several times and refuses a case whose count
of placed pods differs between choices: the generator's claim of independence is checked, not
assumed, and the count is a third opinion beside the two schedulers'.

Cases share one cluster. Each case has its own nodes per scheduler (names, zones and a case label
prefixed by `c<index>-<copy>`), its pods are pinned to them by a node selector on the case label
(with nodeAffinityPolicy Honor that also keeps spread domains to the case's nodes), and all its label
values carry the case's prefix, so that no selector of one case matches a pod of another. The two
copies of a case are in two namespaces (`diff-kube`, `diff-ai`), which affinity terms and spread
constraints default to. Cluster-scoped volume objects (PersistentVolumes, CSINodes) carry the prefix
in their names; the storage classes are shared by all cases (`STORAGE_CLASSES`).
"""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import yaml
from builders import (
    NVIDIA_DRIVER,
    claim_spec,
    device_request,
    make_claim_template,
    make_device_class,
    make_gpu_slice,
    make_node,
    make_pod,
    make_pv,
    make_pvc,
    make_resource_claim,
    make_storage_class,
    pod_claim,
)

CLASSIC_FAMILIES = ("fit", "hostport", "anti-host", "anti-zone", "affinity-zone", "spread-zone",
                    "spread-host", "pv-bound", "pvc-immediate", "rwop", "wffc-local", "volume-limit")
VOLUME_FAMILIES = CLASSIC_FAMILIES[7:]
DRA_FAMILIES = ("dra-claim", "dra-template", "dra-selector", "dra-all", "dra-shared", "dra-extended")
FAMILIES = CLASSIC_FAMILIES + DRA_FAMILIES
DRA_SHARE = 0.35  # of the cases, drawn with a generator of their own so that the others stay as they were
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
CASE_LABEL = "diff.ai-scheduler.io/case"
ROLE_LABEL = "diff.ai-scheduler.io/role"
DISK_LABEL = "diff.ai-scheduler.io/disk"
TAINT = {"key": "diff.ai-scheduler.io/dedicated", "value": "gpu", "effect": "NoSchedule"}
HOST_PORT = 8080
AMPLE_CPU = 16
PREEMPTION_PART = " preemption: "
# kube-scheduler v1.37 with DynamicResources on: when a PreFilter refuses the pod before DynamicResources'
# own PreFilter ran (an unbound Immediate claim, a claim not created yet), DynamicResources' PostFilter
# fails to read its cycle state and its error, "not found", takes the place of DefaultPreemption's
# verdict: `0/8 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found`.
# Like the preemption part, it is not compared.
KUBE_DRA_POSTFILTER_ERROR = " not found"
# kube-scheduler v1.36 says `node(s) had untolerated taint(s)`; ai-scheduler names the taint, as the
# contract's example message and older kube-scheduler versions do: `... untolerated taint {key: value}`.
KUBE_UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"
UNTOLERATED_TAINT_PREFIX = "node(s) had untolerated taint {"
LOCAL_CLASS = "diff-local"  # WaitForFirstConsumer, no provisioner: only the case's local volumes
IMMEDIATE_CLASS = "diff-immediate"  # Immediate, no provisioner: its claims stay unbound
CSI_DRIVER = "diff.csi.ai-scheduler.io"
# Dynamic Resource Allocation: GPUs in ResourceSlices shaped like NVIDIA's driver's, two products.
GPU_CLASS = "diff-gpu"  # selects the driver's devices
EXTENDED_GPU_CLASS = "diff-gpu-extended"  # maps nvidia.com/gpu onto them (KEP-5004)
H100, A100 = ("NVIDIA H100 80GB HBM3", "80Gi"), ("NVIDIA A100-SXM4-40GB", "40Gi")
DEVICE_CLASSES = (
    make_device_class(GPU_CLASS),
    make_device_class(EXTENDED_GPU_CLASS, extended_resource="nvidia.com/gpu"),
)
SELECTORS = (
    f'device.attributes["{NVIDIA_DRIVER}"].productName == "{H100[0]}"',
    f'device.capacity["{NVIDIA_DRIVER}"].memory.compareTo(quantity("{H100[1]}")) >= 0',
)
STORAGE_CLASSES = (
    make_storage_class(LOCAL_CLASS, provisioner="kubernetes.io/no-provisioner"),
    make_storage_class(IMMEDIATE_CLASS, provisioner="kubernetes.io/no-provisioner", binding_mode="Immediate"),
)


@dataclass
class NodeSpec:
    zone: int
    cpu: int  # whole cpus; pods take 1 each
    memory_gi: int  # pods take 1Gi each
    tainted: bool = False
    cordoned: bool = False
    ssd: bool = True
    gpus: int = 0  # DRA families: devices in the node's ResourceSlice
    used: int = 0  # of them, allocated already to a claim of no pod
    h100: bool = True  # the product of its devices (dra-selector selects H100s)


@dataclass
class ExistingPod:
    """A pod bound by the test itself (`nodeName`) before the incoming pods arrive.

    kind: `peer` (labelled as the incoming pods), `peer-anti` (also carries their anti-affinity),
    `guard` (another label, with anti-affinity against the incoming pods), `db` (what `affinity-zone`
    pods look for), `port` (holds hostPort 8080/TCP), `port-udp` (8080/UDP: no conflict), `other`."""

    node: int
    kind: str


@dataclass
class Case:
    index: int
    family: str
    nodes: list[NodeSpec]
    existing: list[ExistingPod]
    incoming: int
    tolerates: bool = False
    wants_ssd: bool = False
    excluded_zone: int | None = None
    max_skew: int = 1
    min_domains: int | None = None
    self_db: bool = False  # affinity-zone: the incoming pods are db pods themselves
    volume_zone: int | None = None  # pv-bound: the zone of the shared volume
    volume_by_label: bool = False  # pv-bound: pinned by its zone label (VolumeZone), not node affinity
    local_volumes: list[int] | None = None  # wffc-local: the node of each local volume
    # volume-limit: each node's CSI attach limit (None: no CSINode)
    volume_limits: list[int | None] | None = None
    gpu_count: int = 1  # DRA families: devices each pod's claim asks for (dra-shared: the one claim)
    selector: int = 0  # dra-selector: which of SELECTORS

    def yaml(self) -> str:
        return yaml.safe_dump(asdict(self), sort_keys=False)


# ---------------------------------------------------------------------------------------------- generator

def generate(seed: int, index: int) -> Case:
    """Case `index` of run `seed`: the same pair always gives the same case."""
    only = [f for f in os.environ.get("AI_SCHEDULER_DIFF_FAMILIES", "").split(",") if f]
    dra_rng = random.Random(f"{seed}/{index}/dra")
    if only or dra_rng.random() < DRA_SHARE:
        families = tuple(f for f in FAMILIES if any(f.startswith(o) for o in only)) or DRA_FAMILIES
        rng = dra_rng
        while True:
            case = _draw(rng, index, rng.choice(families))
            if expected_bound(case, rng) is not None:
                return case
    rng = random.Random(f"{seed}/{index}")
    while True:
        case = _draw(rng, index)
        if expected_bound(case, rng) is not None:
            return case


def _draw(rng: random.Random, index: int, family: str | None = None) -> Case:
    family = family or rng.choice(CLASSIC_FAMILIES)
    ample = family in ("anti-zone", "affinity-zone", "spread-zone", "spread-host", "dra-shared")
    zones = rng.randint(1, 3)
    nodes = []
    for _ in range(rng.randint(2, 5)):
        cpu = AMPLE_CPU if ample else rng.choice((1, 2, 3, 4))
        memory = rng.choice((cpu, 2)) if not ample and rng.random() < 0.2 else 64
        nodes.append(NodeSpec(zone=rng.randrange(zones), cpu=cpu, memory_gi=memory,
                              tainted=rng.random() < 0.2, cordoned=rng.random() < 0.1,
                              ssd=rng.random() < 0.7))
    case = Case(index=index, family=family, nodes=nodes, existing=[], incoming=rng.randint(2, 7),
                tolerates=rng.random() < 0.5, wants_ssd=rng.random() < 0.3)
    if rng.random() < 0.2 and zones > 1:
        case.excluded_zone = rng.randrange(zones)
    kinds = {
        "fit": ["other"],
        "hostport": ["port", "port-udp", "other"],
        "anti-host": ["peer", "peer-anti", "guard", "other"],
        "anti-zone": ["peer", "peer-anti", "guard", "other"],
        "affinity-zone": ["db", "other"],
        "spread-zone": ["peer", "other"],
        "spread-host": ["peer", "other"],
        "rwop": ["rwop", "other"],
        "volume-limit": ["csi", "csi", "other"],
    }.get(family, ["other"])
    used = [0] * len(nodes)
    for _ in range(rng.randint(0, 4)):
        node = rng.randrange(len(nodes))
        limit = min(nodes[node].cpu, nodes[node].memory_gi) - (2 if ample else 0)
        kind = rng.choice(kinds)
        taken = kind in ("port", "rwop") and any(e.kind == kind for e in case.existing)
        if used[node] < limit and not taken:
            used[node] += 1
            case.existing.append(ExistingPod(node=node, kind=kind))
    if family.startswith("spread"):
        case.max_skew = rng.choice((1, 2))
        if rng.random() < 0.25:
            case.min_domains = len(_domains(case)) + 1
    if family == "affinity-zone":
        case.self_db = rng.random() < 0.3
    if family == "pv-bound":
        case.volume_zone = rng.randrange(zones)
        case.volume_by_label = rng.random() < 0.4
    if family == "wffc-local":
        case.local_volumes = sorted(rng.randrange(len(nodes)) for _ in range(rng.randint(0, 2 * len(nodes))))
    if family == "volume-limit":
        case.volume_limits = [rng.choice((None, 0, 1, 2, 3)) for _ in nodes]
    if family.startswith("dra-"):
        case.gpu_count = 1 if family == "dra-all" else rng.choice((1, 1, 2, 3))
        case.selector = rng.randrange(len(SELECTORS))
        for spec in nodes:
            spec.gpus = rng.choice((0, 1, 2, 2, 4, 4, 8))
            spec.used = rng.choice((0, 0, spec.gpus // 2, spec.gpus)) if spec.gpus else 0
            spec.h100 = rng.random() < 0.6
    return case


# ---------------------------------------------------------------------------------------------- semantics

def statically_feasible(case: Case, node: int) -> bool:
    """Whether an incoming pod passes the filters that do not look at other pods."""
    spec = case.nodes[node]
    return (not spec.cordoned and (case.tolerates or not spec.tainted) and (spec.ssd or not case.wants_ssd)
            and spec.zone != case.excluded_zone and case.volume_zone in (None, spec.zone))


def eligible(case: Case, node: int) -> bool:
    """Whether a node counts as a spread domain of the pods: their node selector and node affinity
    (nodeAffinityPolicy Honor); taints and cordons do not matter (nodeTaintsPolicy Ignore)."""
    spec = case.nodes[node]
    return (spec.ssd or not case.wants_ssd) and spec.zone != case.excluded_zone


def domain_of(case: Case, node: int) -> int:
    """The node's domain for the family's topology key (its zone, or the node itself)."""
    return case.nodes[node].zone if case.family in ("anti-zone", "affinity-zone", "spread-zone") else node


def _domains(case: Case) -> set[int]:
    return {domain_of(case, n) for n in range(len(case.nodes)) if eligible(case, n)}


def _blocks(kind: str) -> bool:
    return kind in ("peer", "peer-anti", "guard")


def _counted_by_spread(kind: str) -> bool:
    return kind in ("peer", "peer-anti")


def allowed(case: Case, node: int, placed: Counter[int]) -> bool:
    """Whether one more incoming pod may go to `node`, `placed` incoming pods being on each node."""
    if not statically_feasible(case, node):
        return False
    spec = case.nodes[node]
    on_node = [e for e in case.existing if e.node == node]
    if len(on_node) + placed[node] + 1 > min(spec.cpu, spec.memory_gi):
        return False
    family = case.family
    if family == "hostport":
        return placed[node] == 0 and not any(e.kind == "port" for e in on_node)
    if family in ("anti-host", "anti-zone"):
        domain = domain_of(case, node)
        same = [n for n in range(len(case.nodes)) if domain_of(case, n) == domain]
        return not any(placed[n] for n in same) and not any(
            _blocks(e.kind) for e in case.existing if e.node in same)
    if family == "affinity-zone":
        db_nodes = {e.node for e in case.existing if e.kind == "db"}
        if case.self_db:
            db_nodes |= {n for n, count in placed.items() if count}
        if not db_nodes:
            return case.self_db  # kube-scheduler: a pod matching its own terms, when no pod does
        return any(case.nodes[n].zone == spec.zone for n in db_nodes)
    if family.startswith("spread"):
        counts = Counter({d: 0 for d in _domains(case)})
        for e in case.existing:
            if _counted_by_spread(e.kind) and eligible(case, e.node):
                counts[domain_of(case, e.node)] += 1
        for n, count in placed.items():
            counts[domain_of(case, n)] += count
        minimum = min(counts.values())
        if case.min_domains is not None and len(counts) < case.min_domains:
            minimum = 0
        return counts[domain_of(case, node)] + 1 - minimum <= case.max_skew
    if family.startswith("dra-"):
        return (placed[node] + 1) * case.gpu_count <= device_room(case, node, placed)
    return placed[node] + 1 <= volume_room(case, node) - (sum(placed.values()) - placed[node]
                                                          if family == "rwop" else 0)


def free_devices(case: Case, node: int) -> int:
    """The node's unallocated devices that the case's requests can take."""
    spec = case.nodes[node]
    if case.family == "dra-selector" and not spec.h100:
        return 0
    return spec.gpus - spec.used


def device_room(case: Case, node: int, placed: Counter[int]) -> int:
    """How many devices the node's pods of the case may take in all (`gpu_count` per pod; dra-all: all
    the node's devices for one pod, when none is taken; dra-shared: the one claim's, on one node)."""
    spec = case.nodes[node]
    if case.family == "dra-all":
        return 1 if spec.gpus and not spec.used else 0
    if case.family == "dra-shared":
        if sum(placed.values()) - placed[node]:
            return 0  # the claim is allocated on another node
        return AMPLE_CPU * case.gpu_count if free_devices(case, node) >= case.gpu_count else 0
    return free_devices(case, node)


def volume_room(case: Case, node: int) -> int:
    """How many incoming pods the node's volumes allow, other pods aside (rwop: in the whole case)."""
    family = case.family
    if family == "pvc-immediate":
        return 0
    if family == "rwop":
        return 0 if any(e.kind == "rwop" for e in case.existing) else 1
    if family == "wffc-local":
        return (case.local_volumes or []).count(node)
    if family == "volume-limit":
        limit = (case.volume_limits or [])[node]
        if limit is not None:
            return max(0, limit - sum(e.kind == "csi" and e.node == node for e in case.existing))
    return AMPLE_CPU * 8


def expected_bound(case: Case, rng: random.Random, trials: int = 6) -> int | None:
    """How many incoming pods any correct scheduler places, or None when that depends on choices."""
    results = set()
    for _ in range(trials):
        placed: Counter[int] = Counter()
        for _ in range(case.incoming):
            options = [n for n in range(len(case.nodes)) if allowed(case, n, placed)]
            if not options:
                break
            placed[rng.choice(options)] += 1
        results.add(sum(placed.values()))
    return results.pop() if len(results) == 1 else None


# ---------------------------------------------------------------------------------------------- objects

def prefix(case: Case, copy: str) -> str:
    return f"c{case.index}-{copy}"


def node_name(case: Case, copy: str, node: int) -> str:
    return f"{prefix(case, copy)}-n{node}"


def nodes_for(case: Case, copy: str) -> list[dict[str, Any]]:
    """The case's nodes for one scheduler, taints included (the test sets them after creation, which
    also takes off the not-ready taint that admission puts on every new node)."""
    p = prefix(case, copy)
    return [
        make_node(node_name(case, copy, i), cpu=str(spec.cpu), memory=f"{spec.memory_gi}Gi",
                  labels={CASE_LABEL: p, ZONE: f"{p}-z{spec.zone}", DISK_LABEL: "ssd" if spec.ssd else "hdd"},
                  taints=[dict(TAINT)] if spec.tainted else None, unschedulable=spec.cordoned)
        for i, spec in enumerate(case.nodes)
    ]


def _volume(claim: str) -> list[dict[str, Any]]:
    return [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]


def _csi_volume(name: str, claim: str, namespace: str) -> dict[str, Any]:
    volume = make_pv(name, claim_ref={"namespace": namespace, "name": claim})
    del volume["spec"]["hostPath"]
    volume["spec"]["csi"] = {"driver": CSI_DRIVER, "volumeHandle": name}
    return volume


@dataclass
class VolumeObjects:
    """A case copy's volume objects, to create before its pods: `claims` are created after `volumes`;
    `bound` names the claims the PV controller must have bound before the pods come."""

    volumes: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    csi_nodes: list[dict[str, Any]]
    bound: list[str]


def claim_of(case: Case, copy: str, pod: int | None = None, existing: int | None = None) -> str | None:
    """The claim an incoming pod (by index) or an existing one mounts, if any."""
    p = prefix(case, copy)
    if existing is not None:
        kind = case.existing[existing].kind
        return f"{p}-data" if kind == "rwop" else f"{p}-e{existing}-data" if kind == "csi" else None
    if case.family in ("pv-bound", "pvc-immediate", "rwop"):
        return f"{p}-data"
    if case.family in ("wffc-local", "volume-limit"):
        return f"{p}-data{pod}"
    return None


def volumes_for(case: Case, copy: str, namespace: str) -> VolumeObjects:
    p = prefix(case, copy)
    found = VolumeObjects([], [], [], [])
    shared = f"{p}-data"
    if case.family in ("pv-bound", "rwop"):
        modes = ("ReadWriteOncePod",) if case.family == "rwop" else ("ReadWriteMany",)
        zone = f"{p}-z{case.volume_zone}"
        in_zone = {"key": ZONE, "operator": "In", "values": [zone]}
        affinity = {"nodeSelectorTerms": [{"matchExpressions": [in_zone]}]}
        pinned = case.family == "pv-bound" and not case.volume_by_label
        found.volumes.append(make_pv(
            f"{p}-pv", access_modes=modes, claim_ref={"namespace": namespace, "name": shared},
            node_affinity=affinity if pinned else None,
            labels={ZONE: zone} if case.family == "pv-bound" and case.volume_by_label else None))
        found.claims.append(make_pvc(shared, namespace=namespace, storage_class="", access_modes=modes,
                                     volume_name=f"{p}-pv"))
        found.bound.append(shared)
    if case.family == "pvc-immediate":
        found.claims.append(make_pvc(shared, namespace=namespace, storage_class=IMMEDIATE_CLASS))
    if case.family == "wffc-local":
        for k, node in enumerate(case.local_volumes or []):
            host = {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOSTNAME, "operator": "In", "values": [node_name(case, copy, node)]}]}]}
            found.volumes.append(make_pv(f"{p}-lv{k}", storage_class=LOCAL_CLASS, node_affinity=host))
        found.claims += [make_pvc(f"{p}-data{i}", namespace=namespace, storage_class=LOCAL_CLASS)
                         for i in range(case.incoming)]
    if case.family == "volume-limit":
        claims = [f"{p}-data{i}" for i in range(case.incoming)]
        claims += [f"{p}-e{i}-data" for i, e in enumerate(case.existing) if e.kind == "csi"]
        for claim in claims:
            found.volumes.append(_csi_volume(f"{claim}-pv", claim, namespace))
            found.claims.append(make_pvc(claim, namespace=namespace, storage_class="",
                                         volume_name=f"{claim}-pv"))
            found.bound.append(claim)
        for n, limit in enumerate(case.volume_limits or []):
            if limit is not None:
                name = node_name(case, copy, n)
                found.csi_nodes.append({
                    "apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
                    "spec": {"drivers": [{"name": CSI_DRIVER, "nodeID": name,
                                          "allocatable": {"count": limit}}]}})
    return found


@dataclass
class DraObjects:
    """A case copy's DRA objects, to create before its pods: a ResourceSlice per node with devices,
    claims (each incoming pod's, or the one shared claim), a template, and `blockers`: claims whose
    allocation the test writes (devices in use by no pod)."""

    slices: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    templates: list[dict[str, Any]]
    blockers: list[tuple[dict[str, Any], dict[str, Any]]]  # (claim, its status)


def _claim_spec(case: Case) -> dict[str, Any]:
    selectors = [SELECTORS[case.selector]] if case.family == "dra-selector" else []
    request = device_request("gpu", device_class=GPU_CLASS, count=case.gpu_count,
                             all_devices=case.family == "dra-all", selectors=selectors)
    return claim_spec([request])


def pod_claims_of(case: Case, copy: str, pod: int) -> list[dict[str, str]] | None:
    p = prefix(case, copy)
    if case.family in ("dra-claim", "dra-selector"):
        return [pod_claim("gpu", claim=f"{p}-gpu{pod}")]
    if case.family == "dra-shared":
        return [pod_claim("gpu", claim=f"{p}-gpu")]
    if case.family in ("dra-template", "dra-all"):
        return [pod_claim("gpu", template=f"{p}-gpu")]
    return None


def dra_for(case: Case, copy: str, namespace: str) -> DraObjects:
    found = DraObjects([], [], [], [])
    if not case.family.startswith("dra-"):
        return found
    p = prefix(case, copy)
    for n, spec in enumerate(case.nodes):
        if not spec.gpus:
            continue
        name = node_name(case, copy, n)
        product, memory = H100 if spec.h100 else A100
        found.slices.append(make_gpu_slice(name, gpus=spec.gpus, product=product, memory=memory))
        if spec.used:
            blocker = make_resource_claim(f"{p}-n{n}-used", namespace=namespace,
                                          spec=claim_spec(count=spec.used, device_class=GPU_CLASS))
            results = [{"request": "gpu", "driver": NVIDIA_DRIVER, "pool": name, "device": f"gpu-{d}"}
                       for d in range(spec.used)]
            selector = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [name]}]}]}
            found.blockers.append((blocker, {"allocation": {"devices": {"results": results},
                                                            "nodeSelector": selector}}))
    if case.family in ("dra-claim", "dra-selector"):
        found.claims += [make_resource_claim(f"{p}-gpu{i}", namespace=namespace, spec=_claim_spec(case))
                         for i in range(case.incoming)]
    if case.family == "dra-shared":
        found.claims.append(make_resource_claim(f"{p}-gpu", namespace=namespace, spec=_claim_spec(case)))
    if case.family in ("dra-template", "dra-all"):
        found.templates.append(make_claim_template(f"{p}-gpu", namespace=namespace, spec=_claim_spec(case)))
    return found


def _app(case: Case, copy: str, kind: str) -> str:
    return f"{prefix(case, copy)}-{kind}"


def _term(case: Case, copy: str, kind: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": _app(case, copy, kind)}}, "topologyKey": key}


def _anti(case: Case, copy: str) -> dict[str, Any]:
    key = ZONE if case.family == "anti-zone" else HOSTNAME
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term(case, copy, "peer", key)]}}


def pods_for(case: Case, copy: str, namespace: str, scheduler: str) -> tuple[list[dict[str, Any]],
                                                                              list[dict[str, Any]]]:
    """(existing pods, bound by nodeName; incoming pods, in the order to create them)."""
    p = prefix(case, copy)
    existing = []
    for i, pod in enumerate(case.existing):
        kind = "peer" if pod.kind == "peer-anti" else pod.kind
        port_protocol = {"port": "TCP", "port-udp": "UDP"}.get(pod.kind)
        existing.append(make_pod(
            f"{p}-e{i}", namespace=namespace, cpu="1", memory="1Gi", scheduler_name=scheduler,
            labels={"app": _app(case, copy, kind), CASE_LABEL: p, ROLE_LABEL: "existing"},
            node_name=node_name(case, copy, pod.node),
            affinity=_anti(case, copy) if pod.kind in ("peer-anti", "guard") else None,
            ports=[{"containerPort": HOST_PORT, "hostPort": HOST_PORT, "protocol": port_protocol}]
            if port_protocol else None,
            volumes=_volume(claim) if (claim := claim_of(case, copy, existing=i)) else None,
        ))
    affinity: dict[str, Any] = {}
    required = [{"key": CASE_LABEL, "operator": "In", "values": [p]}]
    if case.excluded_zone is not None:
        required.append({"key": ZONE, "operator": "NotIn", "values": [f"{p}-z{case.excluded_zone}"]})
    affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": required}]}}
    if case.family in ("anti-host", "anti-zone"):
        affinity.update(_anti(case, copy))
    if case.family == "affinity-zone":
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term(case, copy, "db", ZONE)]}
    kind = "db" if case.self_db else "peer" if case.family != "affinity-zone" else "web"
    spread = None
    if case.family.startswith("spread"):
        constraint: dict[str, Any] = {
            "maxSkew": case.max_skew, "topologyKey": ZONE if case.family == "spread-zone" else HOSTNAME,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": _app(case, copy, "peer")}},
        }
        if case.min_domains is not None:
            constraint["minDomains"] = case.min_domains
        spread = [constraint]
    ports = [{"containerPort": HOST_PORT, "hostPort": HOST_PORT}] if case.family == "hostport" else None
    incoming = [
        make_pod(f"{p}-p{i}", namespace=namespace, cpu="1", memory="1Gi", scheduler_name=scheduler,
                 labels={"app": _app(case, copy, kind), CASE_LABEL: p, ROLE_LABEL: "incoming"},
                 node_selector={DISK_LABEL: "ssd"} if case.wants_ssd else None,
                 tolerations=[{**TAINT, "operator": "Equal"}] if case.tolerates else None,
                 affinity=affinity, topology_spread=spread,
                 ports=ports, volumes=_volume(claim) if (claim := claim_of(case, copy, pod=i)) else None,
                 gpus=case.gpu_count if case.family == "dra-extended" else 0,
                 resource_claims=pod_claims_of(case, copy, i))
        for i in range(case.incoming)
    ]
    return existing, incoming


# ---------------------------------------------------------------------------------------------- checks

def violations(case: Case, copy: str, bound: dict[str, str]) -> tuple[list[str], int]:
    """What a placement of the incoming pods (pod name -> node name) breaks, and how many checks ran.

    Holds for any valid placement, whatever the order: each pod on a node of its case that passes
    the static filters (a bound volume's zone among them), no node over capacity or over what its
    volumes allow (free local volumes, CSI attach limit; one pod in all for a ReadWriteOncePod
    claim), one pod per free host port, no domain with two pods that anti-affinity keeps apart,
    every affinity pod in a zone with a db pod, and every spread domain that got pods within maxSkew
    of the final minimum (a domain's last pod went in when the minimum was at most what it is at the
    end)."""
    names = {node_name(case, copy, i): i for i in range(len(case.nodes))}
    placed: Counter[int] = Counter()
    problems: list[str] = []
    checks = 0
    for pod, node in sorted(bound.items()):
        checks += 1
        if node not in names:
            problems.append(f"{pod} on {node}, not a node of its case")
            continue
        placed[names[node]] += 1
        checks += 1
        if not statically_feasible(case, names[node]):
            problems.append(f"{pod} on {node}, which its taints, selector, node affinity or cordon exclude")
    for n in range(len(case.nodes)):
        spec = case.nodes[n]
        on_node = [e for e in case.existing if e.node == n]
        checks += 1
        if len(on_node) + placed[n] > min(spec.cpu, spec.memory_gi):
            problems.append(f"node {n} over capacity: {len(on_node)} existing + {placed[n]} placed")
        if case.family == "hostport":
            checks += 1
            holders = placed[n] + sum(e.kind == "port" for e in on_node)
            if holders > 1:
                problems.append(f"node {n}: {holders} pods hold hostPort {HOST_PORT}/TCP")
        if case.family in ("wffc-local", "volume-limit", "pvc-immediate"):
            checks += 1
            if placed[n] > volume_room(case, n):
                problems.append(f"node {n}: {placed[n]} placed pods, its volumes allow "
                                f"{volume_room(case, n)}")
        if case.family.startswith("dra-"):
            checks += 1
            if placed[n] * case.gpu_count > device_room(case, n, placed):
                problems.append(f"node {n}: {placed[n]} placed pods of {case.gpu_count} devices each, "
                                f"room for {device_room(case, n, placed)} devices")
    if case.family == "dra-shared":
        checks += 1
        if len(placed) > 1:
            problems.append(f"pods of one shared claim on nodes {sorted(placed)}")
    if case.family == "rwop":
        checks += 1
        if sum(placed.values()) > volume_room(case, 0):
            problems.append(f"{sum(placed.values())} pods placed with one ReadWriteOncePod claim, "
                            f"held already: {volume_room(case, 0) == 0}")
    if case.family in ("anti-host", "anti-zone"):
        per_domain: Counter[int] = Counter()
        for n, count in placed.items():
            per_domain[domain_of(case, n)] += count
        for domain, count in per_domain.items():
            checks += 1
            blocked = any(_blocks(e.kind) and domain_of(case, e.node) == domain for e in case.existing)
            if count > 1 or (count and blocked):
                problems.append(f"domain {domain}: {count} placed pods, existing peer or guard: {blocked}")
    if case.family == "affinity-zone":
        db_zones = {case.nodes[e.node].zone for e in case.existing if e.kind == "db"}
        if case.self_db and not db_zones:
            db_zones = {case.nodes[n].zone for n in placed}
            checks += 1
            if len(db_zones) > 1:
                problems.append(f"self-affine db pods in zones {sorted(db_zones)}")
        for n in placed:
            checks += 1
            if case.nodes[n].zone not in db_zones:
                problems.append(f"pod on node {n} (zone {case.nodes[n].zone}), no db pod in that zone")
    if case.family.startswith("spread"):
        counts = Counter({d: 0 for d in _domains(case)})
        for e in case.existing:
            if _counted_by_spread(e.kind) and eligible(case, e.node):
                counts[domain_of(case, e.node)] += 1
        for n, count in placed.items():
            counts[domain_of(case, n)] += count
        minimum = min(counts.values(), default=0)
        if case.min_domains is not None and len(counts) < case.min_domains:
            minimum = 0
        for domain in {domain_of(case, n) for n in placed}:
            checks += 1
            if counts[domain] - minimum > case.max_skew:
                problems.append(f"domain {domain}: {counts[domain]} pods, minimum {minimum}, "
                                f"maxSkew {case.max_skew}")
    return problems, checks


def reasons(message: str) -> tuple[str, Counter[str]]:
    """An Unschedulable message's node total ("0/N") and its filter reasons counted, without
    kube-scheduler's preemption verdict: `0/9 nodes are available: 5 A, 4 B.` -> ("0/9", {A: 5, B: 4})."""
    head = message.partition(PREEMPTION_PART)[0].strip()
    if head.endswith(KUBE_DRA_POSTFILTER_ERROR):
        head = head.removesuffix(KUBE_DRA_POSTFILTER_ERROR)
    match = re.match(r"(\d+/\d+) nodes are available: (.*?)\.?$", head)
    if not match:
        return head, Counter()
    counted: Counter[str] = Counter()
    for part in re.split(r", (?=\d+ )", match.group(2)):
        number, _, reason = part.partition(" ")
        if not number.isdigit():  # PreFilter's message, for the pod rather than per node
            counted[part] = 0
            continue
        if reason.startswith(UNTOLERATED_TAINT_PREFIX):
            reason = KUBE_UNTOLERATED_TAINT  # a deliberate difference: see docs/contributing/testing.md
        counted[reason] += int(number)
    return match.group(1), counted
