"""Preemption and reclaim end to end (PostFilter), with simulated kubelets that finish deleted pods."""

from __future__ import annotations

import asyncio
import functools
import random
from typing import Any

import pytest
from backends import Cluster
from builders import make_node, make_pdb, make_pod
from conftest import StartScheduler, create_all, fast_config, owner_job, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import parse_config
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.scheduler.preemption import NO_VICTIMS, NOT_ELIGIBLE_NEVER
from ai_scheduler.sim import SimApiServer
from e2e.test_e2e_gangs import member, podgroup
from e2e.test_e2e_scheduling import assert_not_overcommitted, events_for, pod_condition

HOSTNAME = "kubernetes.io/hostname"


def events(cluster: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.store.list("events") if e["reason"] == reason]


def unschedulable(cluster: Cluster, name: str) -> bool:
    return pod_condition(cluster, name).get("reason") == "Unschedulable"


def node_of(cluster: Cluster, name: str, namespace: str = "default") -> str | None:
    pod = cluster.store.get("pods", namespace, name)
    return pod["spec"].get("nodeName") if pod else None


async def test_higher_priority_preempts_the_fewest_lowest_priority_pods(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(
        api,
        [make_node("n1", cpu="4", memory="16Gi")],
        [
            make_pod("low-0", cpu="1", priority=0),
            make_pod("low-1", cpu="1", priority=0),
            make_pod("mid-0", cpu="2", priority=50),
        ],
    )
    await wait_for(lambda: all(node_of(cluster, n) for n in ("low-0", "low-1", "mid-0")), what="node full")
    await create_all(api, [], [make_pod("high", cpu="2", priority=100)])
    await wait_for(lambda: node_of(cluster, "high") == "n1", what="the preemptor placed")
    line = running.log_lines("preemption")[0]
    assert line["preemptor"] == "default/high" and line["reason"] == "priority" and line["node"] == "n1"
    assert sorted(v["pod"] for v in line["victims"]) == ["default/low-0", "default/low-1"], "lowest first"
    assert node_of(cluster, "mid-0") == "n1"
    preempted = events(cluster, "Preempted")
    assert {e["involvedObject"]["name"] for e in preempted} == {"low-0", "low-1"}
    assert preempted[0]["message"] == "Preempted by default/high on node n1"
    assert_not_overcommitted(cluster)


async def test_equal_priority_never_preempts(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(
        api, [make_node("n1", cpu="2", memory="16Gi")], [make_pod("first", cpu="2", priority=10)]
    )
    await wait_for(lambda: node_of(cluster, "first"), what="first placed")
    await create_all(api, [], [make_pod("peer", cpu="2", priority=10)])
    await wait_for(lambda: pod_condition(cluster, "peer").get("reason") == "Unschedulable", what="peer waits")
    assert running.log_lines("preemption") == [] and node_of(cluster, "first") == "n1"


async def test_a_lower_priority_pod_holding_a_host_port_is_preempted_and_the_other_spared(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """kube-scheduler's DefaultPreemption for a filter other than resources: NodePorts."""
    running = await start_scheduler()
    port = [{"containerPort": 8080, "hostPort": 8080}]
    await create_all(
        api,
        [make_node("n1", cpu="8", memory="16Gi")],
        [make_pod("launcher", cpu="1", priority=0, ports=port), make_pod("worker", cpu="1", priority=0)],
    )
    await wait_for(lambda: node_of(cluster, "launcher") and node_of(cluster, "worker"), what="both placed")
    await create_all(api, [], [make_pod("urgent", cpu="1", priority=100, ports=port)])
    await wait_for(lambda: node_of(cluster, "urgent") == "n1", what="the preemptor placed")
    [line] = running.log_lines("preemption")
    assert [v["pod"] for v in line["victims"]] == ["default/launcher"]
    assert node_of(cluster, "worker") == "n1"


@pytest.mark.backend("sim", reason="a deleted pod must stay Terminating to be read; kwok finishes it at once")
async def test_victims_get_the_disruption_target_condition(cluster: Cluster) -> None:
    # Without kubelets a deleted bound pod stays Terminating, so its conditions can be read.
    sim = SimApiServer(kubelets=False)
    await sim.start()
    try:
        client = await KubeClient.connect(host=sim.url)
        scheduler = Scheduler(fast_config(), client, JsonLogger(stream=NullStream()), serve_http=False)
        task = asyncio.create_task(scheduler.run())
        await create_all(client, [make_node("n1", cpu="1", memory="4Gi")], [make_pod("victim", cpu="1")])
        await wait_for(
            lambda: (sim.store.get("pods", "default", "victim") or {})["spec"].get("nodeName"),
            what="victim placed",
        )
        await create_all(client, [], [make_pod("vip", cpu="1", priority=1000)])
        await wait_for(
            lambda: (sim.store.get("pods", "default", "victim") or {})["metadata"].get("deletionTimestamp"),
            what="victim deleted gracefully",
        )
        victim = sim.store.get("pods", "default", "victim")
        assert victim is not None
        condition = next(c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget")
        assert condition["reason"] == "PreemptionByScheduler" and "default/vip" in condition["message"]
        await wait_for(
            lambda: (
                (sim.store.get("pods", "default", "vip") or {})["status"].get("nominatedNodeName") == "n1"
            ),
            what="the preemptor nominated",
        )
        scheduler.stop()
        await task
        await client.close()
    finally:
        await sim.stop()


async def test_c_group_below_min_reclaims_borrowed_gpus_and_takes_a_gang_whole(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    config = parse_config(
        {
            "server": {"port": 0, "bindAddress": "127.0.0.1"},
            "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
            "groups": {"a": {"max": {"nvidia.com/gpu": 16}}, "b": {"min": {"nvidia.com/gpu": 4}}},
            "users": {"ann": {"group": "a"}, "ben": {"group": "b"}},
            "namespaces": {"team-a": {"user": "ann"}, "default": {"user": "ben"}},
        }
    )
    running = await start_scheduler(config)
    await create_all(api, [make_node("dgx", cpu="64", memory="256Gi", gpus=8)], [])
    assert (await api.create_namespace("team-a")).status in (201, 409)
    group = podgroup("borrower", 4)
    group["metadata"]["namespace"] = "team-a"
    assert (await api.create_podgroup(group)).ok
    borrowers = []
    for i in range(4):
        pod = member("borrower", i, gpus=2)
        pod["metadata"]["namespace"] = "team-a"
        borrowers.append(pod)
    await create_all(api, [], borrowers)
    await wait_for(
        lambda: all(node_of(cluster, f"borrower-{i}", "team-a") for i in range(4)), what="A borrows all 8"
    )
    await create_all(api, [], [make_pod("owed", gpus=4, cpu="1", memory="1Gi")])
    await wait_for(lambda: node_of(cluster, "owed") == "dgx", timeout=10, what="B reclaims its guarantee")
    line = running.log_lines("preemption")[0]
    assert line["reason"] == "reclaim"
    assert sorted(v["pod"] for v in line["victims"]) == [f"team-a/borrower-{i}" for i in range(4)], (
        "gang whole"
    )
    await wait_for(
        lambda: not any(cluster.store.get("pods", "team-a", f"borrower-{i}") for i in range(4)),
        what="the victims gone (deleted gracefully)",
    )
    assert_not_overcommitted(cluster)


async def test_e_no_preemption_cascade_in_a_mixed_priority_churn(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    rng = random.Random(5)
    nodes = [make_node(f"n{i}", cpu="8", memory="32Gi") for i in range(4)]
    # Every slot first taken by a lowest-priority pod, so that the churn meets full nodes whatever the
    # pace of the API server (on a loaded machine, a queue sorted by priority could otherwise drain
    # without ever finding lower-priority pods in the way).
    fillers = [make_pod(f"f{i}", cpu="1", memory="256Mi", priority=0, duration=3.0) for i in range(32)]
    pods = fillers + [
        make_pod(
            f"p{i}",
            cpu="1",
            memory="256Mi",
            priority=rng.choice([0, 10, 20, 30]),
            duration=rng.uniform(0.3, 1.0),  # longer than the API server takes to create them all
        )
        for i in range(500)
    ]
    await create_all(api, nodes, fillers)
    await wait_for(
        lambda: all(stored_pod(cluster, f["metadata"]["name"])["spec"].get("nodeName") for f in fillers),
        what="every slot taken by a filler",
    )
    await create_all(api, [], pods[len(fillers):])

    def settled() -> bool:
        left = cluster.store.list("pods")
        return all(p.get("status", {}).get("phase") == "Succeeded" for p in left)

    await wait_for(settled, timeout=60, what="every pod finished or was preempted")
    preemptions = running.log_lines("preemption")
    assert len(preemptions) >= 5, "the churn really exercised preemption"
    priority_of = {p["metadata"]["name"]: p["spec"]["priority"] for p in pods}
    victims = set()
    for line in preemptions:
        preemptor = priority_of[line["preemptor"].split("/")[1]]
        for victim in line["victims"]:
            name = victim["pod"].split("/")[1]
            assert priority_of[name] < preemptor, f"cascade: {line}"
            victims.add(name)
    succeeded = {p["metadata"]["name"] for p in cluster.store.list("pods")}
    assert succeeded | victims == set(priority_of), "every pod ran or was preempted; none lost"
    assert not succeeded & victims


async def test_preemption_policy_never_is_honoured(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(api, [make_node("n1", cpu="1", memory="4Gi")], [make_pod("low", cpu="1", priority=0)])
    await wait_for(lambda: node_of(cluster, "low"), what="low placed")
    polite = make_pod("polite", cpu="1", priority=1000, preemption_policy="Never")
    await create_all(api, [], [polite])
    await wait_for(lambda: pod_condition(cluster, "polite").get("reason") == "Unschedulable", what="it waits")
    assert running.log_lines("preemption") == [] and node_of(cluster, "low") == "n1"


async def test_a_preempted_workload_is_not_placed_again_where_it_was_preempted(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    owner = [await owner_job(api, "job-x")]
    victim = make_pod("job-x-1", cpu="2", priority=0)
    victim["metadata"]["ownerReferences"] = owner
    await create_all(
        api,
        [make_node("n1", cpu="2", memory="8Gi"), make_node("n2", cpu="2", memory="8Gi")],
        [make_pod("filler", cpu="2", priority=500, duration=0.6)],
    )
    await wait_for(lambda: node_of(cluster, "filler"), what="filler placed")
    await create_all(api, [], [victim])
    await wait_for(lambda: node_of(cluster, "job-x-1"), what="victim placed")
    victim_node = node_of(cluster, "job-x-1")
    await create_all(api, [], [make_pod("urgent", cpu="2", priority=100, duration=0.3)])
    await wait_for(lambda: node_of(cluster, "urgent") == victim_node, what="urgent preempted the victim")
    # Both nodes empty out; the Job's replacement pod must not go back where it was just preempted.
    await wait_for(
        lambda: all(p.get("status", {}).get("phase") == "Succeeded" for p in cluster.store.list("pods")),
        what="urgent and filler finished",
    )
    replacement = make_pod("job-x-2", cpu="2", priority=0)
    replacement["metadata"]["ownerReferences"] = owner
    await create_all(api, [], [replacement])
    await wait_for(lambda: node_of(cluster, "job-x-2"), what="replacement placed")
    assert node_of(cluster, "job-x-2") != victim_node
    decision = next(d for d in running.log_lines("decision") if d["pod"] == "default/job-x-2")
    assert decision["filtered"] == {"node(s) its workload was just preempted from": 1}


async def test_preemption_spares_pods_a_disruption_budget_protects_and_says_why_it_cannot_help(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Two full nodes, each with one low-priority pod; a PodDisruptionBudget allows no disruption of one
    of them. The high-priority pod preempts the other, as kube-scheduler's DefaultPreemption would. Then
    a pod that no preemption can help, and one that may not preempt, get kube-scheduler's verdict after
    the filters' part of their message."""
    # No disruption controller runs in the test clusters: a budget's status reads as none allowed.
    assert (await api.create_pod_disruption_budget(make_pdb("db", {"app": "db"}, max_unavailable=0))).ok
    running = await start_scheduler()  # ready once its informers listed the budget
    nodes = [make_node(n, cpu="2", memory="8Gi") for n in ("a", "b")]
    low = [
        make_pod(name, cpu="2", priority=0, labels={"app": name}, node_selector={HOSTNAME: node})
        for name, node in (("db", "a"), ("batch", "b"))
    ]
    await create_all(api, nodes, low)
    await wait_for(lambda: node_of(cluster, "db") and node_of(cluster, "batch"), what="both nodes full")
    await create_all(api, [], [make_pod("vip", cpu="2", priority=1000)])
    await wait_for(lambda: node_of(cluster, "vip") == "b", what="vip placed where no budget is broken")
    line = running.log_lines("preemption")[0]
    assert [v["pod"] for v in line["victims"]] == ["default/batch"] and line["pdb_violations"] == 0
    assert node_of(cluster, "db") == "a" and not events_for(cluster, "db", "Preempted")

    polite = make_pod("polite", cpu="2", priority=2000, preemption_policy="Never")
    await create_all(api, [], [make_pod("peer", cpu="2", priority=0), polite])
    filters = "0/2 nodes are available: 2 Insufficient cpu."
    expected = {
        "peer": f"{filters} preemption: 0/2 nodes are available: 2 {NO_VICTIMS}.",
        "polite": f"{filters} preemption: {NOT_ELIGIBLE_NEVER}",
    }
    for name, message in expected.items():
        await wait_for(functools.partial(unschedulable, cluster, name), what=name)
        assert pod_condition(cluster, name)["message"] == message
        await wait_for(functools.partial(events_for, cluster, name, "FailedScheduling"), what="its event")
        assert events_for(cluster, name, "FailedScheduling")[0]["message"] == message
    assert running.log_lines("preemption")[1:] == []
