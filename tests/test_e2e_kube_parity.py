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
from ai_scheduler.scheduler.plugins.node_ports import NO_FREE_PORTS
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
