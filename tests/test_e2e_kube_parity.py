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
from conftest import StartScheduler, create_all, stored_pod, wait_for
from test_e2e_scheduling import events_for, pod_condition

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.scheduler.plugins.inter_pod_affinity import AFFINITY_RULES, ANTI_AFFINITY_RULES
from ai_scheduler.scheduler.plugins.node_ports import NO_FREE_PORTS
from ai_scheduler.scheduler.plugins.pod_topology_spread import CONSTRAINTS_NOT_MATCH
from ai_scheduler.sim import make_node, make_pod

PREEMPTION_PART = " preemption: "


def web_pod(name: str) -> dict[str, Any]:
    """A pod that serves on port 8080 of its node (a launcher, an exporter): `hostPort: 8080`."""
    return make_pod(name, cpu="500m", memory="512Mi", ports=[{"containerPort": 8080, "hostPort": 8080}])


def nodes_of(cluster: Cluster, names: list[str]) -> list[str]:
    return [stored_pod(cluster, n)["spec"].get("nodeName") or "" for n in names]


def fit_error(message: str) -> str:
    """The filters' part of an Unschedulable message (without kube-scheduler's preemption verdict)."""
    head, _, tail = message.partition(PREEMPTION_PART)
    if tail:
        assert tail.startswith("0/"), message
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
    nodes = [make_node(f"node-{z}{i}", cpu="8", memory="32Gi", labels={zone: z}) for z in "ab" for i in (0, 1)]
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
    return make_pod(name, cpu="500m", memory="512Mi", labels={"app": "spread"}, topology_spread=[constraint])


def zoned_node(name: str, zone: str, cpu: str) -> dict[str, Any]:
    return make_node(name, cpu=cpu, memory="256Gi", labels={ZONE: zone})


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
