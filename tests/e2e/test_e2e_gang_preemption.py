"""A gang preempts as one unit (KEP-5710's semantics), end to end on both backends.

Nodes of 4 GPUs filled with lower-priority gangs; a high-priority gang that fits nowhere evicts whole
gangs (never part of one), the fewest and lowest first, sparing what a PodDisruptionBudget protects,
and lands whole on the room it made. One that could only fit by evicting its equals or betters, or
whose PodGroup says `Never`, waits with kube's `preemption:` verdict and evicts nothing. Priorities
come from PriorityClasses (`make_pod(priority=N)` names one; conftest.create_all creates it).
"""

from __future__ import annotations

from typing import Any

from backends import Cluster
from builders import Pod, gpu_nodes, make_pdb, make_pod
from conftest import StartScheduler, create_all, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gangs import (
    GROUP_MIN_LABEL,
    GROUP_NAME_LABEL,
    POD_GROUP_LABEL,
    PREEMPTION_POLICY_ANNOTATION,
)
from ai_scheduler.scheduler.gang_preemption import NO_GROUP_VICTIMS
from ai_scheduler.scheduler.preemption import NOT_ELIGIBLE_NEVER
from e2e.test_e2e_gangs import podgroup
from e2e.test_e2e_scheduling import assert_not_overcommitted, pod_condition

HOSTNAME = "kubernetes.io/hostname"
INSUFFICIENT = "Insufficient nvidia.com/gpu"


def four_gpu_nodes(count: int) -> list[dict[str, Any]]:
    return gpu_nodes(count, "g", cpu="16", memory="64Gi", gpus=4)


def gang(name: str, size: int, priority: int, *, crd: bool = True, labels: dict[str, str] | None = None,
         **kwargs: Any) -> list[dict[str, Any]]:
    """`size` pods of one GPU each: a PodGroup's members (`crd`), or a gang declared by labels alone."""
    declared = {} if crd else {GROUP_NAME_LABEL: name, GROUP_MIN_LABEL: str(size)}
    pods = [Pod(f"{name}-{i}", cpu="1", memory="1Gi", gpus=1, priority=priority,
                labels={**declared, **(labels or {})}, **kwargs) for i in range(size)]
    return [(pod.pod_group(name) if crd else pod).obj() for pod in pods]


def bound(cluster: Cluster, name: str) -> int:
    """Members of gang `name` bound to a node and not being deleted."""
    return sum(
        1
        for p in cluster.store.list("pods")
        if p["metadata"]["name"].startswith(name + "-")
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
    )


def present(cluster: Cluster, name: str) -> int:
    return sum(1 for p in cluster.store.list("pods") if p["metadata"]["name"].startswith(name + "-"))


def preempted(cluster: Cluster) -> set[str]:
    return {e["involvedObject"]["name"] for e in cluster.store.list("events") if e["reason"] == "Preempted"}


async def fill(api: KubeClient, cluster: Cluster, gangs: dict[str, list[dict[str, Any]]]) -> None:
    for name, pods in gangs.items():
        if POD_GROUP_LABEL in pods[0]["metadata"]["labels"]:
            assert (await api.create_podgroup(podgroup(name, len(pods)))).ok
        await create_all(api, [], pods)
    await wait_for(
        lambda: all(bound(cluster, name) == len(pods) for name, pods in gangs.items()),
        timeout=60,
        what="the lower-priority gangs placed",
    )


def waiting_with(cluster: Cluster, name: str, size: int, text: str) -> bool:
    return all(
        pod_condition(cluster, f"{name}-{i}").get("reason") == "Unschedulable"
        and text in pod_condition(cluster, f"{name}-{i}").get("message", "")
        for i in range(size)
    )


async def test_a_gang_of_8_preempts_two_smaller_lower_priority_gangs_whole_and_lands_whole(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(api, four_gpu_nodes(3), [])
    await fill(
        api,
        cluster,
        {
            "low-a": gang("low-a", 4, 10),
            "low-b": gang("low-b", 4, 10, crd=False),
            "mid": gang("mid", 4, 50),
        },
    )
    assert (await api.create_podgroup(podgroup("big", 8))).ok
    await create_all(api, [], gang("big", 8, 1000))
    await wait_for(lambda: bound(cluster, "big") == 8, timeout=60, what="the gang of 8 placed whole")
    await wait_for(
        lambda: present(cluster, "low-a") == 0 and present(cluster, "low-b") == 0,
        timeout=60,
        what="both lower gangs gone whole",
    )
    assert bound(cluster, "mid") == 4, "the higher of the lower gangs is spared"
    lines = running.log_lines("gang.preemption")
    assert len(lines) == 1, "one preemption for the whole gang"
    line = lines[0]
    assert line["gang"] == "default/big" and line["victim_units"] == 2 and line["pdb_violations"] == 0
    victims = sorted(v["pod"] for v in line["victims"])
    assert victims == sorted(f"default/{g}-{i}" for g in ("low-a", "low-b") for i in range(4))
    assert sorted(line["nominated"]) == sorted(f"default/big-{i}" for i in range(8))
    assert preempted(cluster) == {f"{g}-{i}" for g in ("low-a", "low-b") for i in range(4)}
    # Each big member landed where it was nominated: the room the preemption made.
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in cluster.store.list("pods")}
    assert all(nodes[key.split("/")[1]] == node for key, node in line["nominated"].items())
    admitted = [a for a in running.log_lines("gang.admitted") if a["gang"] == "default/big"]
    assert len(admitted) == 1 and admitted[0]["placed"] == 8
    assert_not_overcommitted(cluster)

    # No cascade: the displaced gang, back again (as its controller would make it), cannot take the room
    # back; it waits, told that nothing may be preempted for it.
    await create_all(api, [], gang("low-a", 4, 10))
    filters = f"0/3 nodes are available: 3 {INSUFFICIENT}."
    await wait_for(
        lambda: waiting_with(cluster, "low-a", 4, f"{filters} preemption: {NO_GROUP_VICTIMS}"),
        what="the displaced gang waits",
    )
    assert len(running.log_lines("gang.preemption")) == 1 and bound(cluster, "big") == 8


async def test_a_gang_that_could_only_fit_by_evicting_its_equals_or_betters_waits_and_evicts_nothing(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(api, four_gpu_nodes(2), [])
    await fill(api, cluster, {"peer": gang("peer", 4, 1000), "low": gang("low", 4, 10)})
    # Evicting `low` alone leaves room for 4 of 8: the peer's equal priority protects it.
    assert (await api.create_podgroup(podgroup("big", 8))).ok
    await create_all(api, [], gang("big", 8, 1000))
    filters = f"0/2 nodes are available: 2 {INSUFFICIENT}."
    expected = f"{filters} preemption: {filters}"
    await wait_for(lambda: waiting_with(cluster, "big", 8, expected), what="big told why it waits")
    message = pod_condition(cluster, "big-0")["message"]
    assert message == f"gang default/big needs 8 pods placed together and they do not all fit: {expected}"
    # A gang below everyone: nothing may be preempted for it.
    await create_all(api, [], gang("tiny", 2, 1, crd=False))
    await wait_for(
        lambda: waiting_with(cluster, "tiny", 2, f"{filters} preemption: {NO_GROUP_VICTIMS}"),
        what="tiny told that no victim exists",
    )
    assert running.log_lines("gang.preemption") == [] and running.log_lines("preemption") == []
    assert bound(cluster, "low") == 4 and bound(cluster, "peer") == 4 and preempted(cluster) == set()
    assert bound(cluster, "big") == 0 and bound(cluster, "tiny") == 0


async def test_a_disruption_budget_is_respected_and_a_never_gang_does_not_preempt(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    # No disruption may be taken from gang `a` (a new budget's status allows none until the disruption
    # controller, where one runs, says the same for maxUnavailable 0).
    assert (await api.create_pod_disruption_budget(make_pdb("a", {"app": "a"}, max_unavailable=0))).ok
    running = await start_scheduler()
    await create_all(api, four_gpu_nodes(3), [])
    await fill(api, cluster, {name: gang(name, 4, 10, labels={"app": name}) for name in ("a", "b", "c")})

    never = podgroup("polite", 4, annotations={PREEMPTION_POLICY_ANNOTATION: "Never"})
    assert (await api.create_podgroup(never)).ok
    await create_all(api, [], gang("polite", 4, 1000))
    await wait_for(
        lambda: waiting_with(cluster, "polite", 4, f"preemption: {NOT_ELIGIBLE_NEVER}"),
        what="the Never gang waits",
    )
    assert running.log_lines("gang.preemption") == [] and preempted(cluster) == set()
    for i in range(4):
        assert (await api.delete_pod("default", f"polite-{i}")).ok

    assert (await api.create_podgroup(podgroup("big", 8))).ok
    await create_all(api, [], gang("big", 8, 1000))
    await wait_for(lambda: bound(cluster, "big") == 8, timeout=60, what="big placed whole")
    line = running.log_lines("gang.preemption")[0]
    assert line["pdb_violations"] == 0
    assert sorted(v["pod"] for v in line["victims"]) == sorted(
        f"default/{g}-{i}" for g in ("b", "c") for i in range(4)
    )
    assert bound(cluster, "a") == 4, "the gang the budget protects is spared"
    await wait_for(lambda: present(cluster, "b") + present(cluster, "c") == 0, what="b and c gone")
    assert_not_overcommitted(cluster)


async def test_a_victim_gang_is_evicted_whole_even_from_nodes_the_preemptor_does_not_use(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(api, four_gpu_nodes(2), [])
    # `spread` has two members on each node; lone pods of a higher priority fill the rest.
    spread = gang("spread", 4, 5)
    for i, pod in enumerate(spread):
        pod["spec"]["nodeSelector"] = {HOSTNAME: f"g{i % 2}"}
    solos = [
        make_pod(f"solo-{i}", cpu="1", memory="1Gi", gpus=1, priority=10,
                 node_selector={HOSTNAME: f"g{i % 2}"})
        for i in range(4)
    ]
    await fill(api, cluster, {"spread": spread})
    await create_all(api, [], solos)
    await wait_for(lambda: bound(cluster, "solo") == 4, what="the lone pods placed")

    assert (await api.create_podgroup(podgroup("pair", 2))).ok
    await create_all(api, [], gang("pair", 2, 1000))
    await wait_for(lambda: bound(cluster, "pair") == 2, timeout=60, what="the pair placed whole")
    line = running.log_lines("gang.preemption")[0]
    assert sorted(v["pod"] for v in line["victims"]) == [f"default/spread-{i}" for i in range(4)]
    assert {v["node"] for v in line["victims"]} == {"g0", "g1"}, "all of it, on both nodes"
    await wait_for(lambda: present(cluster, "spread") == 0, what="the victim gang gone whole")
    assert bound(cluster, "solo") == 4
    assert_not_overcommitted(cluster)
