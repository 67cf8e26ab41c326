"""The experiments of issue 13 that showed placements kube-scheduler would never make, on both backends.

Each one is a small workload a team moving over would run, checked against
what kube-scheduler does with it (its plugins' semantics and its
Unschedulable message). kube-scheduler adds its PostFilter's verdict to the
message (` preemption: 0/N nodes are available: ...`); where our message has
that part too, the check is on what comes before it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from backends import Cluster
from builders import Node, Pod, make_node, make_pod, make_pv, make_pvc, make_storage_class
from conftest import StartScheduler, create_all, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.scheduler.framework.plugins.inter_pod_affinity import AFFINITY_RULES, ANTI_AFFINITY_RULES
from ai_scheduler.scheduler.framework.plugins.node_ports import NO_FREE_PORTS
from ai_scheduler.scheduler.framework.plugins.node_volume_limits import MAX_VOLUME_COUNT
from ai_scheduler.scheduler.framework.plugins.pod_topology_spread import CONSTRAINTS_NOT_MATCH
from ai_scheduler.scheduler.framework.plugins.volume_binding import (
    BIND_CONFLICT,
    UNBOUND_IMMEDIATE,
    claim_not_found,
)
from ai_scheduler.scheduler.framework.plugins.volume_restrictions import READ_WRITE_ONCE_POD_CONFLICT
from e2e.test_e2e_scheduling import events_for, pod_condition

PREEMPTION_PART = " preemption: "


def web_pod(name: str) -> dict[str, Any]:
    """A pod that serves on port 8080 of its node (a launcher, an exporter): `hostPort: 8080`."""
    return Pod(name, cpu="500m", memory="512Mi", ports=[{"containerPort": 8080, "hostPort": 8080}]).obj()


def nodes_of(cluster: Cluster, names: list[str]) -> list[str]:
    return [stored_pod(cluster, n)["spec"].get("nodeName") or "" for n in names]


def fit_error(message: str) -> str:
    """The filters' part of an Unschedulable message (without kube-scheduler's preemption verdict)."""
    head, _, tail = message.partition(PREEMPTION_PART)
    if tail:
        assert tail.startswith(("0/", "not eligible due to ")), message
    return head


async def test_pods_with_one_host_port_each_take_a_node_of_their_own(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Three pods with `hostPort: 8080` on three nodes that could hold them all: one per node, although
    the spreading scores alone would put all three on the large node."""
    running = await start_scheduler()
    names = [f"web-{i}" for i in range(3)]
    nodes = [make_node("node-0", cpu="64", memory="256Gi")]
    nodes += [make_node(f"node-{i}", cpu="4", memory="8Gi") for i in (1, 2)]
    await create_all(api, nodes, [web_pod(n) for n in names])
    await wait_for(lambda: all(nodes_of(cluster, names)), what="all three pods bound")
    assert sorted(nodes_of(cluster, names)) == ["node-0", "node-1", "node-2"]
    assert running.scheduler.cache.check_consistency() == []


async def test_a_third_pod_on_two_nodes_waits_with_kube_schedulers_reason_then_takes_a_new_node(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    names = [f"web-{i}" for i in range(3)]
    nodes = [make_node(f"node-{i}", cpu="8", memory="32Gi") for i in range(2)]
    await create_all(api, nodes, [web_pod(n) for n in names])

    def two_placed_one_refused() -> str | None:
        placed = [n for n, node in zip(names, nodes_of(cluster, names), strict=True) if node]
        waiting = [n for n in names if pod_condition(cluster, n).get("reason") == "Unschedulable"]
        return waiting[0] if len(placed) == 2 and len(waiting) == 1 else None

    waiting = await wait_for(two_placed_one_refused, what="two pods bound, the third Unschedulable")
    assert Counter(nodes_of(cluster, names)) == Counter({"node-0": 1, "node-1": 1, "": 1})
    expected = f"0/2 nodes are available: 2 {NO_FREE_PORTS}."
    assert fit_error(pod_condition(cluster, waiting)["message"]) == expected
    await wait_for(lambda: events_for(cluster, waiting, "FailedScheduling"), what="FailedScheduling event")
    assert fit_error(events_for(cluster, waiting, "FailedScheduling")[0]["message"]) == expected

    assert (await api.create_node(make_node("node-2", cpu="8", memory="32Gi"))).ok
    await wait_for(lambda: stored_pod(cluster, waiting)["spec"].get("nodeName") == "node-2",
                   what="the waiting pod placed on the new node")
    assert sorted(nodes_of(cluster, names)) == ["node-0", "node-1", "node-2"]
    assert running.scheduler.cache.check_consistency() == []


def replica(name: str, app: str, *, anti: bool = False, affine_to: str | None = None,
            zone_key: str = "kubernetes.io/hostname") -> dict[str, Any]:
    """A replica labelled `app`, with required anti-affinity to its own kind per node (`anti`) or
    required affinity to pods labelled `affine_to` in the same domain of `zone_key`."""
    spec: dict[str, Any] = {}
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    if anti:
        spec["podAntiAffinity"] = {required: [
            {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}
    if affine_to:
        spec["podAffinity"] = {required: [
            {"labelSelector": {"matchLabels": {"app": affine_to}}, "topologyKey": zone_key}]}
    return make_pod(name, cpu="500m", memory="512Mi", labels={"app": app}, affinity=spec)


async def test_replicas_with_anti_affinity_take_a_node_each_and_the_extra_one_waits(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Four replicas with required podAntiAffinity on kubernetes.io/hostname and three nodes: one per
    node, the fourth Unschedulable with kube-scheduler's reason until a fourth node comes."""
    running = await start_scheduler()
    names = [f"ps-{i}" for i in range(4)]
    nodes = [make_node("node-0", cpu="64", memory="256Gi")]
    nodes += [make_node(f"node-{i}", cpu="8", memory="32Gi") for i in (1, 2)]
    await create_all(api, nodes, [replica(n, "ps", anti=True) for n in names])

    def three_placed_one_refused() -> str | None:
        placed = [n for n, node in zip(names, nodes_of(cluster, names), strict=True) if node]
        waiting = [n for n in names if pod_condition(cluster, n).get("reason") == "Unschedulable"]
        return waiting[0] if len(placed) == 3 and len(waiting) == 1 else None

    waiting = await wait_for(three_placed_one_refused, what="three replicas bound, the fourth Unschedulable")
    assert sorted(node for node in nodes_of(cluster, names) if node) == ["node-0", "node-1", "node-2"]
    expected = f"0/3 nodes are available: 3 {ANTI_AFFINITY_RULES}."
    assert fit_error(pod_condition(cluster, waiting)["message"]) == expected

    assert (await api.create_node(make_node("node-3", cpu="8", memory="32Gi"))).ok
    await wait_for(lambda: stored_pod(cluster, waiting)["spec"].get("nodeName") == "node-3",
                   what="the waiting replica placed on the new node")
    assert running.scheduler.cache.check_consistency() == []


async def test_a_pod_with_affinity_joins_its_peer_and_waits_for_one_when_there_is_none(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A worker with required affinity to the `db` pods' zone goes to that zone; a worker whose peer does
    not exist yet waits with kube-scheduler's reason, and is placed once the peer is bound."""
    running = await start_scheduler()
    zone = "topology.kubernetes.io/zone"
    nodes = [make_node(f"node-{z}{i}", cpu="8", memory="32Gi", labels={zone: z})
             for z in "ab" for i in (0, 1)]
    await create_all(api, nodes, [make_pod("db", cpu="500m", memory="512Mi", labels={"app": "db"},
                                           node_selector={"kubernetes.io/hostname": "node-b1"})])
    await wait_for(lambda: nodes_of(cluster, ["db"]) == ["node-b1"], what="db bound to node-b1")
    await create_all(api, [], [replica("worker", "worker", affine_to="db", zone_key=zone),
                               replica("cache-client", "client", affine_to="cache", zone_key=zone)])
    await wait_for(lambda: nodes_of(cluster, ["worker"])[0] != "", what="the worker bound")
    assert nodes_of(cluster, ["worker"])[0] in ("node-b0", "node-b1")
    await wait_for(lambda: pod_condition(cluster, "cache-client").get("reason") == "Unschedulable",
                   what="the client without a peer told why")
    expected = f"0/4 nodes are available: 4 {AFFINITY_RULES}."
    assert fit_error(pod_condition(cluster, "cache-client")["message"]) == expected

    await create_all(api, [], [make_pod("cache", cpu="500m", memory="512Mi", labels={"app": "cache"},
                                        node_selector={"kubernetes.io/hostname": "node-a0"})])
    await wait_for(lambda: nodes_of(cluster, ["cache-client"])[0] in ("node-a0", "node-a1"),
                   what="the client placed in its peer's zone once the peer is bound")
    assert running.scheduler.cache.check_consistency() == []


ZONE = "topology.kubernetes.io/zone"


def zoned_pod(name: str, min_domains: int | None = None) -> dict[str, Any]:
    """A replica of a workload spread over zones: maxSkew 1, DoNotSchedule, over the pods with app=spread."""
    constraint: dict[str, Any] = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }
    if min_domains is not None:
        constraint["minDomains"] = min_domains
    return Pod(name, cpu="500m", memory="512Mi", labels={"app": "spread"}, topology_spread=[constraint]).obj()


def zoned_node(name: str, zone: str, cpu: str) -> dict[str, Any]:
    return Node(name, cpu=cpu, memory="256Gi", labels={ZONE: zone}).obj()


async def test_pods_spread_over_zones_and_one_that_cannot_keep_the_skew_waits_for_a_new_zone(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Four replicas with maxSkew 1 over two zones end two per zone, although the spreading scores alone
    would put them all on zone-a's large node. A fifth that asks for three zones (minDomains 3) cannot keep
    the skew with two (the minimum is taken as 0), so it waits with kube-scheduler's reason, and takes
    the node of a third zone once one joins."""
    running = await start_scheduler()
    names = [f"spread-{i}" for i in range(4)]
    nodes = [zoned_node("zone-a-big", "zone-a", "64"), zoned_node("zone-b-small", "zone-b", "8")]
    await create_all(api, nodes, [zoned_pod(n) for n in names])
    await wait_for(lambda: all(nodes_of(cluster, names)), what="the four replicas bound")
    assert Counter(nodes_of(cluster, names)) == Counter({"zone-a-big": 2, "zone-b-small": 2})

    await create_all(api, [], [zoned_pod("spread-4", min_domains=3)])
    await wait_for(lambda: pod_condition(cluster, "spread-4").get("reason") == "Unschedulable",
                   what="the fifth replica Unschedulable")
    expected = f"0/2 nodes are available: 2 {CONSTRAINTS_NOT_MATCH}."
    assert fit_error(pod_condition(cluster, "spread-4")["message"]) == expected
    await wait_for(lambda: events_for(cluster, "spread-4", "FailedScheduling"), what="FailedScheduling event")
    assert fit_error(events_for(cluster, "spread-4", "FailedScheduling")[0]["message"]) == expected
    assert not stored_pod(cluster, "spread-4")["spec"].get("nodeName")

    assert (await api.create_node(zoned_node("zone-c-small", "zone-c", "8"))).ok
    await wait_for(lambda: stored_pod(cluster, "spread-4")["spec"].get("nodeName") == "zone-c-small",
                   what="the fifth replica placed in the new zone")
    assert Counter(nodes_of(cluster, [*names, "spread-4"])) == Counter(
        {"zone-a-big": 2, "zone-b-small": 2, "zone-c-small": 1}
    )
    assert running.scheduler.cache.check_consistency() == []


# ------------------------------------------------------------------ volumes (VolumeBinding)
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
HOSTNAME = "kubernetes.io/hostname"


def claimant(name: str, claim: str) -> dict[str, Any]:
    """A pod that mounts the claim `claim` (a dataset, a checkpoint directory)."""
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
    return Pod(name, cpu="500m", memory="512Mi", volumes=[volume]).obj()


def stored_claim(cluster: Cluster, name: str) -> dict[str, Any]:
    claim = cluster.store.get("persistentvolumeclaims", "default", name)
    assert claim is not None, f"claim {name} not found"
    return claim


def selected_node(cluster: Cluster, claim: str) -> str:
    return str((stored_claim(cluster, claim)["metadata"].get("annotations") or {}).get(SELECTED_NODE) or "")


def on_node(node: str) -> dict[str, Any]:
    requirement = {"key": HOSTNAME, "operator": "In", "values": [node]}
    return {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}


async def complete_binding(api: KubeClient, cluster: Cluster, claim: str, volume: str) -> None:
    """The PV controller's part once a volume names the claim: the claim names the volume, bind-completed.
    kube-controller-manager does it on the real backend; the test does it on the simulated one."""
    if cluster.backend == "kube":
        return
    patch = {"metadata": {"annotations": {BIND_COMPLETED: "yes"}}, "spec": {"volumeName": volume}}
    assert (await api.patch_persistent_volume_claim("default", claim, patch)).ok


async def play_provisioner(api: KubeClient, cluster: Cluster, claim: str, storage_class: str) -> str:
    """An external provisioner's part: once the scheduler selected a node for the claim, create a volume
    there, pre-bound to the claim; returns the node."""
    node = await wait_for(lambda: selected_node(cluster, claim), what=f"{claim}'s selected-node annotation")
    uid = stored_claim(cluster, claim)["metadata"]["uid"]
    volume = make_pv(f"pv-{claim}", storage="1Gi", storage_class=storage_class, node_affinity=on_node(node),
                     claim_ref={"namespace": "default", "name": claim, "uid": uid})
    assert (await api.create_persistent_volume(volume)).ok
    await complete_binding(api, cluster, claim, f"pv-{claim}")
    return node


async def test_a_pod_with_a_wait_for_first_consumer_claim_gets_its_node_selected_and_is_bound_there(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The issue's acceptance: the claim of a WaitForFirstConsumer class with a provisioner gets the chosen
    node in `volume.kubernetes.io/selected-node`; the pod waits (bound to nothing) while the provisioner
    works, as kube-scheduler's PreBind waits, and is bound to that very node once the claim is bound.
    No provisioner runs on either backend: the test plays it."""
    running = await start_scheduler()
    dynamic = make_storage_class("wffc-dynamic", provisioner="example.com/csi")
    assert (await api.create_storage_class(dynamic)).ok
    claim = make_pvc("checkpoints", storage_class="wffc-dynamic")
    assert (await api.create_persistent_volume_claim(claim)).ok
    nodes = [make_node(f"node-{i}", cpu="8", memory="32Gi") for i in range(3)]
    await create_all(api, nodes, [claimant("trainer", "checkpoints")])
    node = await wait_for(lambda: selected_node(cluster, "checkpoints"), what="the selected-node annotation")
    assert node in {"node-0", "node-1", "node-2"}
    assert not stored_pod(cluster, "trainer")["spec"].get("nodeName")  # waiting for its volume

    assert await play_provisioner(api, cluster, "checkpoints", "wffc-dynamic") == node
    await wait_for(lambda: stored_pod(cluster, "trainer")["spec"].get("nodeName"), what="the pod bound")
    assert stored_pod(cluster, "trainer")["spec"]["nodeName"] == node
    assert selected_node(cluster, "checkpoints") == node
    assert running.scheduler.cache.check_consistency() == []


async def test_a_claim_matched_to_a_local_volume_binds_it_and_the_pod_follows_the_volume(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A WaitForFirstConsumer claim of a class without a provisioner, and one available local volume on
    node-2: the scheduler binds the volume to the claim (its claimRef) and the pod goes to node-2."""
    running = await start_scheduler()
    local = make_storage_class("wffc-local", provisioner="kubernetes.io/no-provisioner")
    assert (await api.create_storage_class(local)).ok
    volume = make_pv("local-2", storage="10Gi", storage_class="wffc-local", node_affinity=on_node("node-2"))
    assert (await api.create_persistent_volume(volume)).ok
    if cluster.backend == "sim":  # the PV controller's first step (kube-controller-manager's on the real one)
        assert (await api.patch_persistent_volume_status("local-2", {"status": {"phase": "Available"}})).ok
    assert (await api.create_persistent_volume_claim(make_pvc("dataset", storage="5Gi",
                                                              storage_class="wffc-local"))).ok
    nodes = [make_node(f"node-{i}", cpu="8", memory="32Gi") for i in range(3)]
    await create_all(api, nodes, [claimant("reader", "dataset")])

    def claimed() -> bool:
        stored = cluster.store.get("persistentvolumes", "", "local-2") or {}
        return ((stored.get("spec") or {}).get("claimRef") or {}).get("name") == "dataset"

    await wait_for(claimed, what="the volume's claimRef")
    await complete_binding(api, cluster, "dataset", "local-2")
    await wait_for(lambda: stored_pod(cluster, "reader")["spec"].get("nodeName"), what="the pod bound")
    assert stored_pod(cluster, "reader")["spec"]["nodeName"] == "node-2"
    assert stored_claim(cluster, "dataset")["spec"].get("volumeName") == "local-2"
    assert running.scheduler.cache.check_consistency() == []


async def test_pods_wait_for_missing_and_unbound_immediate_claims_with_kube_schedulers_reasons(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A missing claim, and an unbound claim of an Immediate class, stop the pod at PreFilter with
    kube-scheduler's reasons; a WaitForFirstConsumer claim that no volume and no provisioner can serve
    fails every node; the pod with the missing claim is placed once the claim appears."""
    await start_scheduler()
    assert (await api.create_storage_class(
        make_storage_class("immediate", provisioner="example.com/csi", binding_mode="Immediate"))).ok
    assert (await api.create_storage_class(
        make_storage_class("wffc-none", provisioner="kubernetes.io/no-provisioner"))).ok
    assert (await api.create_persistent_volume_claim(make_pvc("eager", storage_class="immediate"))).ok
    assert (await api.create_persistent_volume_claim(make_pvc("nowhere", storage_class="wffc-none"))).ok
    nodes = [make_node(f"node-{i}", cpu="8", memory="32Gi") for i in range(2)]
    pods = [claimant("lost", "later"), claimant("eager", "eager"), claimant("stuck", "nowhere")]
    await create_all(api, nodes, pods)
    expected = {
        "lost": f"0/2 nodes are available: {claim_not_found('later')}.",
        "eager": f"0/2 nodes are available: {UNBOUND_IMMEDIATE}.",
        "stuck": f"0/2 nodes are available: 2 {BIND_CONFLICT}.",
    }
    for name, message in expected.items():
        def refused(name: str = name) -> bool:
            return bool(pod_condition(cluster, name).get("reason") == "Unschedulable")

        await wait_for(refused, what=f"{name} Unschedulable")
        assert fit_error(pod_condition(cluster, name)["message"]) == message

    later = make_storage_class("wffc-later", provisioner="example.com/csi")
    assert (await api.create_storage_class(later)).ok
    assert (await api.create_persistent_volume_claim(make_pvc("later", storage_class="wffc-later"))).ok
    node = await play_provisioner(api, cluster, "later", "wffc-later")
    await wait_for(lambda: stored_pod(cluster, "lost")["spec"].get("nodeName") == node, what="lost placed")


async def test_a_provisioner_that_gives_up_sends_the_pod_back_to_be_scheduled_again(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A provisioner that cannot create the volume removes the selected-node annotation: kube-scheduler's
    PreBind then fails (`provisioning failed for PVC "x"`), the pod is retried and its claim gets a node
    again, and the pod is bound once a volume comes."""
    running = await start_scheduler()
    flaky = make_storage_class("wffc-flaky", provisioner="example.com/csi")
    assert (await api.create_storage_class(flaky)).ok
    assert (await api.create_persistent_volume_claim(make_pvc("scratch", storage_class="wffc-flaky"))).ok
    await create_all(api, [make_node("node-0", cpu="8", memory="32Gi")], [claimant("worker", "scratch")])
    await wait_for(lambda: selected_node(cluster, "scratch"), what="the first selected-node annotation")
    reset = {"metadata": {"annotations": {SELECTED_NODE: None}}}
    assert (await api.patch_persistent_volume_claim("default", "scratch", reset)).ok

    def gave_up() -> bool:
        return any('provisioning failed for PVC "scratch"' in line.get("error", "")
                   for line in running.log_lines("prebind.failed"))

    await wait_for(gave_up, what="PreBind's failure")
    assert await play_provisioner(api, cluster, "scratch", "wffc-flaky") == "node-0"
    await wait_for(lambda: stored_pod(cluster, "worker")["spec"].get("nodeName") == "node-0", what="bound")
    assert running.scheduler.cache.check_consistency() == []


async def test_a_pod_whose_bound_volume_is_in_one_zone_goes_to_that_zone(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """VolumeZone: a claim bound to a volume labelled zone-b keeps its pod off zone-a's larger node,
    which the spreading scores alone would pick."""
    await start_scheduler()
    volume = make_pv("zonal-b", labels={ZONE: "zone-b"},
                     claim_ref={"namespace": "default", "name": "zonal"})
    assert (await api.create_persistent_volume(volume)).ok
    assert (await api.create_persistent_volume_claim(make_pvc("zonal", storage_class="",
                                                              volume_name="zonal-b"))).ok
    await complete_binding(api, cluster, "zonal", "zonal-b")

    def bound() -> bool:
        return BIND_COMPLETED in (stored_claim(cluster, "zonal")["metadata"].get("annotations") or {})

    await wait_for(bound, what="the claim bound")
    nodes = [zoned_node("zone-a-big", "zone-a", "64"), zoned_node("zone-b-small", "zone-b", "8")]
    await create_all(api, nodes, [claimant("zonal-reader", "zonal")])
    await wait_for(lambda: stored_pod(cluster, "zonal-reader")["spec"].get("nodeName"), what="bound")
    assert stored_pod(cluster, "zonal-reader")["spec"]["nodeName"] == "zone-b-small"


async def test_a_read_write_once_pod_claim_serves_one_pod_at_a_time(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """VolumeRestrictions: a second pod on a ReadWriteOncePod claim waits with kube-scheduler's reason while
    the first one runs, and is placed once the first is gone."""
    await start_scheduler()
    volume = make_pv("single-writer", access_modes=("ReadWriteOncePod",),
                     claim_ref={"namespace": "default", "name": "journal"})
    assert (await api.create_persistent_volume(volume)).ok
    claim = make_pvc("journal", storage_class="", volume_name="single-writer",
                     access_modes=("ReadWriteOncePod",))
    assert (await api.create_persistent_volume_claim(claim)).ok
    await complete_binding(api, cluster, "journal", "single-writer")

    def bound() -> bool:
        return BIND_COMPLETED in (stored_claim(cluster, "journal")["metadata"].get("annotations") or {})

    await wait_for(bound, what="the claim bound")
    nodes = [make_node(f"node-{i}", cpu="8", memory="32Gi") for i in range(2)]
    await create_all(api, nodes, [claimant("writer-0", "journal")])
    await wait_for(lambda: stored_pod(cluster, "writer-0")["spec"].get("nodeName"), what="the first bound")
    await create_all(api, [], [claimant("writer-1", "journal")])
    await wait_for(lambda: pod_condition(cluster, "writer-1").get("reason") == "Unschedulable",
                   what="the second Unschedulable")
    expected = f"0/2 nodes are available: 2 {READ_WRITE_ONCE_POD_CONFLICT}."
    assert fit_error(pod_condition(cluster, "writer-1")["message"]) == expected
    assert (await api.delete_pod("default", "writer-0", grace_period_seconds=0)).ok
    await wait_for(lambda: stored_pod(cluster, "writer-1")["spec"].get("nodeName"), what="the second bound")


def csi_volume(name: str, driver: str) -> dict[str, Any]:
    """A CSI PersistentVolume pre-bound to the claim of the same name."""
    volume = make_pv(name, claim_ref={"namespace": "default", "name": name})
    del volume["spec"]["hostPath"]
    volume["spec"]["csi"] = {"driver": driver, "volumeHandle": f"vol-{name}"}
    return volume


async def test_a_node_takes_no_more_csi_volumes_than_its_csinode_allows(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """NodeVolumeLimits: node-0's CSINode allows one volume of the driver; a second pod with another volume
    of it, held to node-0, waits with kube-scheduler's reason, and is placed once the first is gone."""
    await start_scheduler()
    driver = "csi.example.com"  # a CSI driver name is a DNS subdomain
    csi_node = {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node-0"},
                "spec": {"drivers": [{"name": driver, "nodeID": "node-0", "allocatable": {"count": 1}}]}}
    for name in ("disk-a", "disk-b"):
        assert (await api.create_persistent_volume(csi_volume(name, driver))).ok
        claim = make_pvc(name, storage_class="", volume_name=name)
        assert (await api.create_persistent_volume_claim(claim)).ok
        await complete_binding(api, cluster, name, name)
    await create_all(api, [make_node("node-0", cpu="8", memory="32Gi")], [])
    assert (await api.create_csi_node(csi_node)).ok
    on_node_0 = {HOSTNAME: "node-0"}

    def bound(name: str) -> bool:
        return BIND_COMPLETED in (stored_claim(cluster, name)["metadata"].get("annotations") or {})

    await wait_for(lambda: bound("disk-a") and bound("disk-b"), what="the claims bound")
    first, second = claimant("mount-a", "disk-a"), claimant("mount-b", "disk-b")
    for pod in (first, second):
        pod["spec"]["nodeSelector"] = on_node_0
    await create_all(api, [], [first])
    await wait_for(lambda: stored_pod(cluster, "mount-a")["spec"].get("nodeName"), what="the first bound")
    await create_all(api, [], [second])
    await wait_for(lambda: pod_condition(cluster, "mount-b").get("reason") == "Unschedulable",
                   what="the second Unschedulable")
    expected = f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT}."
    assert fit_error(pod_condition(cluster, "mount-b")["message"]) == expected
    assert (await api.delete_pod("default", "mount-a", grace_period_seconds=0)).ok
    await wait_for(lambda: stored_pod(cluster, "mount-b")["spec"].get("nodeName"), what="the second bound")
