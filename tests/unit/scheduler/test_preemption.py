"""Preemption's choices (PostFilter) without an API server: victims on a node, the node, and the verdict.

The cases follow kube-scheduler's own tables (plugins/defaultpreemption/default_preemption_test.go:
TestSelectNodesForPreemption's PodDisruptionBudget cases and TestPickOneNodeForPreemption), written
over our records: nodes of 5 cpus; "small", "medium", "large" and "very large" pods of 1, 2, 3 and 5
cpus; priorities low 0, mid 100, high 1000, negative -100.
"""

from __future__ import annotations

import io
from typing import Any, cast

import numpy as np
import pytest
from builders import Pod, make_node, make_pdb, make_pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.gpus import GPU_COUNT_ANNOTATION, GPU_IDS_ANNOTATION
from ai_scheduler.cache.records import PODS, NodeRecord, PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import default_config
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.framework.plugins import build_filters
from ai_scheduler.scheduler.framework.runtime import Decision, Framework
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Evictions
from ai_scheduler.scheduler.preemption import (
    NO_VICTIMS,
    NOT_ELIGIBLE_NEVER,
    NOT_HELPFUL,
    Preemptor,
    ResourceRoom,
    VictimGroup,
    pick_one_node,
    select_victims,
)
from ai_scheduler.scheduler.victims import Plan, VictimKind
from ai_scheduler.trace import NodeSpec

LOW, MID, HIGH, NEGATIVE = 0, 100, 1000, -100
SMALL, MEDIUM, LARGE, VERY_LARGE = "1", "2", "3", "5"
DAY1, DAY2, DAY3, DAY9 = (f"2026-01-0{d}T00:00:00Z" for d in (1, 2, 3, 9))


def victim(
    name: str,
    cpu: str = MEDIUM,
    priority: int = MID,
    *,
    node: str = "node1",
    labels: dict[str, str] | None = None,
    started: str = "",
) -> PodRecord:
    obj = make_pod(name, cpu=cpu, memory=None, priority=priority, labels=labels, node_name=node)
    obj["metadata"]["uid"] = f"uid-{name}"
    if started:
        obj.setdefault("status", {})["startTime"] = started
    return PodRecord.from_api(obj)


def group(pod: PodRecord, kind: VictimKind = VictimKind.PRIORITY) -> VictimGroup:
    return VictimGroup([pod], kind, {"cpu": pod.requests["cpu"], PODS: 1})


def select(
    incoming_cpu: str, pods: list[PodRecord], budgets: DisruptionBudgets, node_cpu: int = 5000
) -> tuple[list[str], int]:
    """select_victims on one node of `node_cpu` millicpus holding `pods` (all candidates): the victims'
    names, sorted (kube's tables compare them as sets), and how many break a budget."""
    used = sum(p.requests["cpu"] for p in pods)
    need = {"cpu": int(float(incoming_cpu) * 1000), PODS: 1}
    free = {"cpu": node_cpu - used, PODS: 110 - len(pods)}
    selection = select_victims([group(p) for p in pods], budgets, ResourceRoom(need, free))
    assert not selection.reasons
    return sorted(g.pods[0].name for g in selection.victims), selection.violations


def budgets_of(*pdbs: dict[str, Any]) -> DisruptionBudgets:
    budgets = DisruptionBudgets()
    budgets.replace(pdbs)
    return budgets


FOO = {"app": "foo"}


def test_a_budget_broken_by_two_victims_is_counted_once() -> None:
    """kube: "preemption with violation of same pdb"."""
    pods = [victim("p1.1", labels=FOO), victim("p1.2", labels=FOO)]
    budgets = budgets_of(make_pdb("pdb", FOO, disruptions_allowed=1))
    assert select(VERY_LARGE, pods, budgets) == (["p1.1", "p1.2"], 1)


def test_a_disruption_already_granted_to_another_pod_does_not_change_the_count() -> None:
    """kube: "... the victim doesn't belong to DisruptedPods"."""
    pods = [victim("p1.1", labels=FOO), victim("p1.2", labels=FOO)]
    budgets = budgets_of(make_pdb("pdb", FOO, disruptions_allowed=1, disrupted_pods=["p2"]))
    assert select(VERY_LARGE, pods, budgets) == (["p1.1", "p1.2"], 1)


def test_a_victim_whose_eviction_was_already_granted_does_not_count() -> None:
    """kube: "... the victim belongs to DisruptedPods"."""
    pods = [victim("p1.1", labels=FOO), victim("p1.2", labels=FOO)]
    budgets = budgets_of(make_pdb("pdb", FOO, disruptions_allowed=1, disrupted_pods=["p1.2"]))
    assert select(VERY_LARGE, pods, budgets) == (["p1.1", "p1.2"], 0)


def test_a_granted_victim_is_non_violating_but_the_others_still_use_up_the_budget() -> None:
    """kube: "... the victim which belongs to DisruptedPods is treated as 'nonViolating'"."""
    pods = [victim("p1.1", labels=FOO), victim("p1.2", labels=FOO), victim("p1.3", labels=FOO)]
    budgets = budgets_of(make_pdb("pdb", FOO, disruptions_allowed=1, disrupted_pods=["p1.3"]))
    assert select("6", pods, budgets, node_cpu=6000) == (["p1.1", "p1.2", "p1.3"], 1)


def test_protected_pods_are_reprieved_first_so_the_unprotected_ones_are_taken() -> None:
    """Room for one more cpu: of two equal candidates, the one a budget protects stays, in either order."""
    for protected in ("a", "b"):
        pods = [victim(n, labels={"app": "db"} if n == protected else {"app": "web"}) for n in ("a", "b")]
        budgets = budgets_of(make_pdb("db", {"app": "db"}, disruptions_allowed=0))
        taken = "b" if protected == "a" else "a"
        assert select("3", pods, budgets) == ([taken], 0)


def test_a_protected_pod_is_taken_when_nothing_else_makes_room_and_counted() -> None:
    pods = [victim("db", MEDIUM, LOW, labels={"app": "db"}), victim("web", SMALL, LOW, labels={"app": "web"})]
    budgets = budgets_of(make_pdb("db", {"app": "db"}, disruptions_allowed=0))
    assert select("4", pods, budgets) == (["db"], 1)


def test_the_most_important_pods_are_reprieved_first() -> None:
    """kube's selectVictimsOnNode: the highest priority first, then the one started earlier."""
    pods = [
        victim("low-old", SMALL, LOW, started=DAY1),
        victim("low-new", SMALL, LOW, started=DAY2),
        victim("mid", SMALL, MID),
    ]
    # 2 cpus free; 3 wanted: one small pod must go, the newest of the lowest priority.
    assert select("3", pods, DisruptionBudgets()) == (["low-new"], 0)


def test_budget_selectors_follow_kube_schedulers_reading() -> None:
    """Other namespaces, pods without labels, empty and null selectors: no match."""
    budgets = budgets_of(
        make_pdb("elsewhere", FOO, namespace="other", disruptions_allowed=0),
        {"metadata": {"name": "empty", "namespace": "default"}, "spec": {"selector": {}}},
        {"metadata": {"name": "null", "namespace": "default"}, "spec": {}},
    )
    assert budgets.violating([victim("a", labels=FOO), victim("b")]) == set()
    budgets.apply("ADDED", make_pdb("here", {"app": "foo"}, disruptions_allowed=0))
    assert budgets.violating([victim("a", labels=FOO), victim("b")]) == {"uid-a"}
    budgets.apply("DELETED", make_pdb("here", {"app": "foo"}))
    assert budgets.violating([victim("a", labels=FOO)]) == set() and len(budgets) == 3


def test_a_node_that_cannot_fit_the_pod_even_empty_says_which_resource() -> None:
    need = {"cpu": 6000, PODS: 1}
    full = {"cpu": 0, PODS: 109}
    room = ResourceRoom(need, full)
    selection = select_victims([group(victim("a", VERY_LARGE))], DisruptionBudgets(), room)
    assert selection.reasons == ("Insufficient cpu",) and not selection.victims
    assert select_victims([], DisruptionBudgets(), ResourceRoom(need, full)).reasons == (NO_VICTIMS,)


# ---------------------------------------------------------------------------------- pickOneNodeForPreemption


def plan(node: str, *victims: PodRecord, violations: int = 0) -> Plan:
    return Plan(node, list(victims), violations=violations)


@pytest.mark.parametrize(
    ("case", "plans", "expected"),
    [
        (
            "node with min highest priority pod is picked",
            [
                plan("node1", victim("p1.1", priority=MID), victim("p1.2", priority=LOW)),
                plan("node2", victim("p2.1", priority=MID), victim("p2.2", priority=MID)),
                plan("node3", victim("p3.1", priority=LOW), victim("p3.2", priority=LOW)),
            ],
            "node3",
        ),
        (
            "when highest priorities are the same, minimum sum of lower priority pods is used",
            [
                plan("node1", victim("p1.1", priority=MID), victim("p1.2", priority=LOW)),
                plan("node2", victim("p2.1", priority=MID), victim("p2.2", priority=MID)),
                plan(
                    "node3",
                    victim("p3.1", priority=MID),
                    victim("p3.2", priority=LOW),
                    victim("p3.3", priority=LOW),
                ),
            ],
            "node1",
        ),
        (
            "when highest priority and sum are the same, minimum number of pods is used",
            [
                plan("node1", victim("p1.1", priority=MID), victim("p1.2", priority=NEGATIVE)),
                plan("node2", victim("p2.1", priority=MID), victim("p2.2", priority=NEGATIVE)),
                plan("node3", victim("p3.1", priority=MID)),
            ],
            "node3",
        ),
        (
            "sum of adjusted priorities is considered",
            [
                plan("node1", victim("p1.1", priority=MID), victim("p1.2", priority=NEGATIVE)),
                plan(
                    "node2",
                    victim("p2.1", priority=MID),
                    victim("p2.2", priority=NEGATIVE),
                    victim("p2.3", priority=NEGATIVE),
                ),
            ],
            "node1",
        ),
        (
            "same priority, same number of victims, different start time for each node's pod",
            [
                plan("node1", victim("p1.1", started=DAY1), victim("p1.2", started=DAY1)),
                plan("node2", victim("p2.1", started=DAY3), victim("p2.2", started=DAY3)),
                plan("node3", victim("p3.1", started=DAY2), victim("p3.2", started=DAY2)),
            ],
            "node2",
        ),
        (
            "different priority, same number of victims: the start of the highest-priority victims counts",
            [
                plan(
                    "node1",
                    victim("p1.1", priority=MID, started=DAY1),
                    victim("p1.2", priority=LOW, started=DAY9),
                ),
                plan(
                    "node2",
                    victim("p2.1", priority=MID, started=DAY2),
                    victim("p2.2", priority=LOW, started=DAY1),
                ),
            ],
            "node2",
        ),
        (
            "fewest PodDisruptionBudget violations first, whatever the priorities",
            [
                plan("node1", victim("p1.1", priority=LOW), violations=1),
                plan("node2", victim("p2.1", priority=MID), victim("p2.2", priority=MID)),
            ],
            "node2",
        ),
        (
            "a full tie: the first node",
            [plan("node1", victim("p1.1")), plan("node2", victim("p2.1"))],
            "node1",
        ),
    ],
)
def test_pick_one_node_for_preemption(case: str, plans: list[Plan], expected: str) -> None:
    chosen = pick_one_node(plans)
    assert chosen is not None and chosen.node == expected, case


# ---------------------------------------------------------------------------------- the whole PostFilter


class Cluster:
    """A cache with nodes and bound pods, the default profile's filters, and a Preemptor over them."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        config = default_config()
        self.cache = SchedulerCache()
        tenancy = Tenancy(config)
        self.cache.tenancy = tenancy
        for node in nodes:
            self.cache.set_node(NodeRecord.from_api(node))
        for i, obj in enumerate(pods):
            obj["metadata"]["uid"] = f"uid-{i}-{obj['metadata']['name']}"
            obj.setdefault("status", {})["phase"] = "Running"
            self.cache.set_pod(PodRecord.from_api(obj))
        filters = build_filters(config, config.profiles[0])
        self.framework = Framework(config.scheduler_name, filters, [], self.cache)
        self.budgets = DisruptionBudgets()
        # Choosing does no I/O: the evictions are only used when a plan is carried out.
        self.preemptor = Preemptor(
            self.cache,
            tenancy,
            GangRegistry(),
            cast(Evictions, object()),
            JsonLogger(stream=io.BytesIO()),
            Metrics(),
            self.budgets,
        )

    def post_filter(self, obj: dict[str, Any]) -> tuple[Decision, Plan | None]:
        obj["metadata"]["uid"] = "uid-incoming"
        pod = PodRecord.from_api(obj)
        decision = self.framework.schedule(pod)
        assert decision.node is None
        verdict = self.preemptor.post_filter(pod, self.framework, decision)
        decision.post_filter = verdict.message
        return decision, verdict.plan


def bound(
    name: str, node: str, cpu: str, priority: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return Pod(name, cpu=cpu, memory=None, priority=priority, node_name=node, labels=labels).obj()


def test_the_node_whose_victims_no_budget_protects_is_chosen() -> None:
    cluster = Cluster(
        [make_node("a", cpu="2"), make_node("b", cpu="2")],
        [bound("db", "a", "2", LOW, {"app": "db"}), bound("batch", "b", "2", LOW, {"app": "batch"})],
    )
    cluster.budgets.apply("ADDED", make_pdb("db", {"app": "db"}, disruptions_allowed=0))
    decision, chosen = cluster.post_filter(make_pod("vip", cpu="2", memory=None, priority=HIGH))
    assert chosen is not None and chosen.node == "b" and [v.name for v in chosen.victims] == ["batch"]
    assert decision.message == "0/2 nodes are available: 2 Insufficient cpu."  # a plan: no verdict


def test_with_only_protected_victims_the_budget_is_broken_and_counted() -> None:
    cluster = Cluster([make_node("a", cpu="2")], [bound("db", "a", "2", LOW, {"app": "db"})])
    cluster.budgets.apply("ADDED", make_pdb("db", {"app": "db"}, disruptions_allowed=0))
    _, chosen = cluster.post_filter(make_pod("vip", cpu="2", memory=None, priority=HIGH))
    assert chosen is not None and chosen.violations == 1 and [v.name for v in chosen.victims] == ["db"]


def test_no_victims_found_is_said_as_kube_scheduler_says_it() -> None:
    cluster = Cluster(
        [make_node(f"n{i}", cpu="2") for i in range(3)],
        [bound(f"peer-{i}", f"n{i}", "2", MID) for i in range(3)],
    )
    decision, chosen = cluster.post_filter(make_pod("same", cpu="2", memory=None, priority=MID))
    assert chosen is None
    assert decision.message == (
        f"0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 {NO_VICTIMS}."
    )


def test_nodes_preemption_cannot_help_and_nodes_too_small_even_empty_are_counted_apart() -> None:
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    cluster = Cluster(
        [make_node("tainted", taints=taint), make_node("small", cpu="2"), make_node("full", cpu="4")],
        [bound("low-s", "small", "2", LOW), bound("low-f", "full", "4", MID)],
    )
    decision, chosen = cluster.post_filter(make_pod("big", cpu="3", memory=None, priority=MID))
    assert chosen is None
    assert decision.post_filter == (
        f"preemption: 0/3 nodes are available: 1 Insufficient cpu, 1 {NO_VICTIMS}, 1 {NOT_HELPFUL}."
    )


# ------------------------------------------------------- filters other than resources (FilterRoom)
PORT = [{"containerPort": 8080, "hostPort": 8080}]


def test_a_lower_priority_pod_holding_the_host_port_is_preempted() -> None:
    """kube's selectVictimsOnNode runs NodePorts again without the victims: the port holder goes, the
    other low-priority pod on the node is reprieved (resources were never short)."""
    holder = bound("holder", "n1", "1", LOW)
    holder["spec"]["containers"][0]["ports"] = PORT
    cluster = Cluster([make_node("n1", cpu="8")], [holder, bound("other", "n1", "1", LOW)])
    decision, chosen = cluster.post_filter(make_pod("web", cpu="1", memory=None, priority=HIGH, ports=PORT))
    assert decision.message.startswith("0/1 nodes are available: 1 node(s) didn't have free ports")
    assert chosen is not None and chosen.node == "n1" and [v.name for v in chosen.victims] == ["holder"]
    # The what-if left the cache as it was: the port is still held.
    assert cluster.framework.schedule(PodRecord.from_api(make_pod("again", ports=PORT))).node is None


def test_a_host_port_held_by_an_equal_priority_pod_finds_no_victims() -> None:
    holder = bound("holder", "n1", "1", HIGH)
    holder["spec"]["containers"][0]["ports"] = PORT
    cluster = Cluster([make_node("n1", cpu="8")], [holder, bound("low", "n1", "1", LOW)])
    decision, chosen = cluster.post_filter(make_pod("web", cpu="1", memory=None, priority=HIGH, ports=PORT))
    assert chosen is None
    assert decision.post_filter == (
        "preemption: 0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    )


def test_pod_anti_affinity_on_hostname_is_resolved_by_evicting_the_matching_pod() -> None:
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    nodes = [make_node("n1", cpu="8"), make_node("n2", cpu="8")]
    pods = [bound("db-1", "n1", "1", LOW, {"app": "db"}), bound("db-2", "n2", "1", HIGH, {"app": "db"}),
            bound("cache", "n1", "1", LOW, {"app": "cache"})]
    cluster = Cluster(nodes, pods)
    incoming = make_pod("db-3", cpu="1", memory=None, priority=HIGH, labels={"app": "x"}, affinity=anti)
    decision, chosen = cluster.post_filter(incoming)
    assert chosen is not None and chosen.node == "n1" and [v.name for v in chosen.victims] == ["db-1"]
    assert decision.message == "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."


def test_pod_affinity_that_nothing_satisfies_is_not_helped_by_preemption() -> None:
    affinity = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "nowhere"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    cluster = Cluster([make_node("n1", cpu="8")], [bound("low", "n1", "1", LOW)])
    decision, chosen = cluster.post_filter(
        make_pod("follower", cpu="1", memory=None, priority=HIGH, labels={"app": "f"}, affinity=affinity))
    assert chosen is None
    assert decision.post_filter == f"preemption: 0/1 nodes are available: 1 {NOT_HELPFUL}."


def test_a_pod_that_may_not_preempt_says_so() -> None:
    cluster = Cluster([make_node("n1", cpu="1")], [bound("low", "n1", "1", LOW)])
    decision, chosen = cluster.post_filter(
        make_pod("polite", cpu="1", memory=None, priority=HIGH, preemption_policy="Never")
    )
    assert chosen is None
    expected = f"0/1 nodes are available: 1 Insufficient cpu. preemption: {NOT_ELIGIBLE_NEVER}"
    assert decision.message == expected


# ---------------------------------------------------------------------------------- blocked nodes (C)


def test_a_reserved_node_is_charged_only_when_the_pod_could_otherwise_use_it() -> None:
    nodes = [make_node("small", cpu="1"), make_node("big", cpu="8"), make_node("big2", cpu="8")]
    cluster = Cluster(nodes, [])
    reserved = np.array([True, True, False] + [False] * (cluster.cache.rows - 3))
    pod = PodRecord.from_api(make_pod("p", cpu="4", memory=None))
    decision = cluster.framework.schedule(pod, blocked=[(reserved, "node(s) reserved for gang default/g")])
    assert decision.node == "big2"
    decision = cluster.framework.schedule(
        pod, blocked=[(np.ones(cluster.cache.rows, dtype=bool), "node(s) reserved for gang default/g")]
    )
    assert decision.node is None
    assert decision.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) reserved for gang default/g."
    )


def gpu_holder(name: str, node: str, priority: int, device: int) -> dict[str, Any]:
    return (Pod(name, cpu="1", memory=None, priority=priority, node_name=node)
            .annotations({GPU_COUNT_ANNOTATION: "1", GPU_IDS_ANNOTATION: str(device)}).obj())


def test_a_pod_asking_for_managed_gpus_evicts_the_lowest_pod_holding_one() -> None:
    # Two managed GPUs, both held: the GPU filter refuses the node, and removing one holder makes room.
    node = NodeSpec("g0", cpu=32_000, memory=128 * 2**30, gpus=2, gpu_model="A100",
                    gpu_memory=80 * 2**30, managed=True).to_node()
    cluster = Cluster([node], [gpu_holder("older", "g0", LOW + 1, 0), gpu_holder("newer", "g0", LOW, 1)])
    incoming = make_pod("vip", cpu="1", memory=None, priority=HIGH, annotations={GPU_COUNT_ANNOTATION: "1"})
    _decision, plan = cluster.post_filter(incoming)
    assert plan is not None and plan.node == "g0"
    assert [v.name for v in plan.victims] == ["newer"], "one GPU is enough: the least important holder goes"
    # The what-if gave the devices back as they were.
    assert cluster.cache.gpus.assignments["uid-1-newer"].indices == (1,)


def test_no_plan_for_managed_gpus_when_the_holders_outrank_the_pod() -> None:
    node = NodeSpec("g0", cpu=32_000, memory=128 * 2**30, gpus=1, gpu_model="A100",
                    gpu_memory=80 * 2**30, managed=True).to_node()
    cluster = Cluster([node], [gpu_holder("vip", "g0", HIGH, 0)])
    incoming = make_pod("batch", cpu="1", memory=None, priority=LOW, annotations={GPU_COUNT_ANNOTATION: "1"})
    _decision, plan = cluster.post_filter(incoming)
    assert plan is None
