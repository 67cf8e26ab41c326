"""Gang preemption's choices (gang_preemption.py) without an API server: who is a victim, which
victims, the nodes the members are nominated to, the gang's preemption policy, and the verdicts."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from builders import NativePodGroup, Node, Pod, PodGroup, make_node, make_pdb, make_pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import (
    GROUP_MIN_LABEL,
    GROUP_NAME_LABEL,
    PREEMPTION_POLICY_ANNOTATION,
    Gang,
    GangRegistry,
)
from ai_scheduler.cache.gpus import GPU_COUNT_ANNOTATION, GPU_IDS_ANNOTATION
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import default_config
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.framework.plugins import build_filters
from ai_scheduler.scheduler.framework.runtime import Framework
from ai_scheduler.scheduler.gang_preemption import NO_GROUP_VICTIMS, GangPreemptor, GangVerdict
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.preemption import (
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    POST_FILTER_PREFIX,
    Preemptor,
)
from ai_scheduler.scheduler.victims import Plan
from ai_scheduler.trace import NodeSpec

LOW, MID, HIGH = 10, 50, 1000


class RecordedEvictions:
    """The outbox's Evictions, recording each intent."""

    def __init__(self) -> None:
        self.intents: list[tuple[str, Plan]] = []

    def evict(self, pod: PodRecord, plan: Plan) -> None:
        self.intents.append((pod.name, plan))

    async def drain(self, timeout: float) -> None:
        return None


def gpu_node(name: str, gpus: int = 4) -> dict[str, Any]:
    return Node(name, cpu="16", memory="64Gi", gpus=gpus).obj()


def member(
    group: str, i: int, priority: int, node: str = "", *, size: int = 4, crd: bool = False,
    labels: dict[str, str] | None = None, gpus: int = 1, **kwargs: Any,
) -> dict[str, Any]:
    declared = {} if crd else {GROUP_NAME_LABEL: group, GROUP_MIN_LABEL: str(size)}
    pod = Pod(f"{group}-{i}", cpu="1", memory="1Gi", gpus=gpus, priority=priority, node_name=node or None,
              labels={**declared, **(labels or {})}, **kwargs)
    return (pod.pod_group(group) if crd else pod).obj()


def placed_gang(group: str, priority: int, nodes: list[str], **kwargs: Any) -> list[dict[str, Any]]:
    return [member(group, i, priority, node, size=len(nodes), **kwargs) for i, node in enumerate(nodes)]


class Cluster:
    """A cache with nodes and bound pods, gangs registered, and the gang preemptor over them."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        config = default_config()
        self.cache = SchedulerCache()
        tenancy = Tenancy(config)
        self.cache.tenancy = tenancy
        self.gangs = GangRegistry()
        for node in nodes:
            self.cache.set_node(NodeRecord.from_api(node))
        for obj in pods:
            self.add(obj)
        self.framework = Framework(config.scheduler_name, build_filters(config, config.profiles[0]), [],
                                   self.cache)
        self.budgets = DisruptionBudgets()
        self.evictions = RecordedEvictions()
        self.preemptor = Preemptor(
            self.cache, tenancy, self.gangs, self.evictions, JsonLogger(stream=io.BytesIO()), Metrics(),
            self.budgets,
        )
        self.gang_preemptor = GangPreemptor(self.preemptor)

    def add(self, obj: dict[str, Any], *, running: bool = True) -> PodRecord:
        obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
        if running and obj["spec"].get("nodeName"):
            obj.setdefault("status", {})["phase"] = "Running"
        pod = PodRecord.from_api(obj)
        self.cache.set_pod(pod)
        self.gangs.observe_pod(pod)
        return pod

    def incoming(self, pods: list[dict[str, Any]]) -> tuple[Gang, list[PodRecord]]:
        records = [self.add(obj) for obj in pods]
        gang = self.gangs.gang_of(records[0])
        assert gang is not None
        return gang, records

    def post_filter(self, gang: Gang, records: list[PodRecord], needed: int | None = None) -> GangVerdict:
        before = self.cache.requested.copy()
        verdict = self.gang_preemptor.post_filter(gang, records, needed or len(records), self.framework)
        assert np.array_equal(before, self.cache.requested), "the what-if left the cache as it was"
        assert not self.cache.check_consistency()
        return verdict


def victims(verdict: GangVerdict) -> list[str]:
    return sorted(pod.name for unit in verdict.victims for pod in unit.pods)


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


def test_a_gang_of_8_takes_the_two_lowest_gangs_whole_and_every_member_gets_a_node() -> None:
    cluster = Cluster(
        [gpu_node(f"n{i}") for i in range(3)],
        placed_gang("low-a", LOW, ["n0"] * 4)
        + placed_gang("low-b", LOW, ["n1", "n1", "n2", "n2"])
        + placed_gang("mid", MID, ["n2", "n2", "n1", "n1"]),
    )
    gang, records = cluster.incoming([member("big", i, HIGH, size=8) for i in range(8)])
    verdict = cluster.post_filter(gang, records)
    assert verdict.message == POST_FILTER_PREFIX + "found a placement for podgroup, preempting 8 victims"
    assert victims(verdict) == sorted(names("low-a", 4) + names("low-b", 4))
    nominated = [node for _, node in verdict.nominations]
    assert len(nominated) == 8 and {n: nominated.count(n) for n in nominated} == {"n0": 4, "n1": 2, "n2": 2}


def test_equal_and_higher_priorities_are_never_victims() -> None:
    cluster = Cluster(
        [gpu_node("n0"), gpu_node("n1")],
        placed_gang("peer", HIGH, ["n0"] * 4) + placed_gang("better", HIGH + 1, ["n1"] * 4),
    )
    gang, records = cluster.incoming([member("big", i, HIGH) for i in range(4)])
    verdict = cluster.post_filter(gang, records)
    assert not verdict.preempts and verdict.message == POST_FILTER_PREFIX + NO_GROUP_VICTIMS


class WalkedPods(dict[str, Any]):
    """The cache's pods, counting the passes over them (each one calls through)."""

    walks = 0

    def items(self) -> Any:
        self.walks += 1
        return super().items()


def test_no_pass_over_the_pods_while_no_placed_pod_has_a_lower_priority() -> None:
    """A standing queue of waiting gangs asks for preemption at every attempt: while no placed pod is
    below the gang's priority (the tenancy's counts say so), the answer comes without walking the pods.
    Once one is, the pass is made and finds it."""
    cluster = Cluster([gpu_node("n0"), gpu_node("n1")], placed_gang("peer", HIGH, ["n0"] * 4))
    for i in range(50):  # waiting pods are in the cache too: the pass would read them all
        cluster.add(member(f"waiting-{i}", 0, HIGH))
    pods = cluster.cache.pods = WalkedPods(cluster.cache.pods)
    gang, records = cluster.incoming([member("big", i, HIGH, size=8) for i in range(8)])

    def post_filter() -> tuple[GangVerdict, int]:
        before = pods.walks
        verdict = cluster.gang_preemptor.post_filter(gang, records, len(records), cluster.framework)
        return verdict, pods.walks - before

    verdict, walks = post_filter()
    assert verdict.message == POST_FILTER_PREFIX + NO_GROUP_VICTIMS and walks == 0
    cluster.add(member("low", 0, LOW, "n1", size=1))
    verdict, walks = post_filter()
    assert walks == 1 and not verdict.preempts
    assert verdict.message == "preemption: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_when_the_lower_ones_are_not_enough_nothing_is_taken_and_the_filters_say_why() -> None:
    cluster = Cluster(
        [gpu_node("n0"), gpu_node("n1")],
        placed_gang("peer", HIGH, ["n0"] * 4) + placed_gang("low", LOW, ["n1"] * 4),
    )
    gang, records = cluster.incoming([member("big", i, HIGH, size=8) for i in range(8)])
    verdict = cluster.post_filter(gang, records)
    assert not verdict.preempts and verdict.victims == []
    assert verdict.message == "preemption: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_a_gang_with_a_member_that_may_not_be_preempted_is_no_candidate() -> None:
    # `mixed` has one member of high priority: taking the rest would leave it running alone.
    pods = placed_gang("mixed", LOW, ["n0"] * 4)
    pods[3] = member("mixed", 3, HIGH + 5, "n0")
    cluster = Cluster([gpu_node("n0")], pods)
    gang, records = cluster.incoming([member("big", i, HIGH, size=2) for i in range(2)])
    assert cluster.post_filter(gang, records).message == POST_FILTER_PREFIX + NO_GROUP_VICTIMS


def test_a_gang_with_a_member_still_being_bound_is_no_candidate() -> None:
    cluster = Cluster([gpu_node("n0")], placed_gang("low", LOW, ["n0"] * 3))
    binding = cluster.add(member("low", 3, LOW), running=False)
    cluster.cache.assume(binding, "n0")
    gang, records = cluster.incoming([member("big", i, HIGH, size=2) for i in range(2)])
    assert cluster.post_filter(gang, records).message == POST_FILTER_PREFIX + NO_GROUP_VICTIMS


def test_a_victim_gang_goes_whole_even_from_nodes_the_gang_does_not_use() -> None:
    cluster = Cluster(
        [gpu_node("n0"), gpu_node("n1")],
        placed_gang("spread", LOW - 5, ["n0", "n0", "n1", "n1"])
        + [member(f"solo{i}", 0, LOW, f"n{i % 2}", size=1) for i in range(4)],
    )
    gang, records = cluster.incoming([member("pair", i, HIGH, size=2) for i in range(2)])
    verdict = cluster.post_filter(gang, records)
    assert victims(verdict) == names("spread", 4)


def test_reprieve_keeps_the_fewest_victims() -> None:
    # The lowest pod alone is not enough; once the gang above it is taken, the pod is given back.
    cluster = Cluster(
        [gpu_node("n0"), gpu_node("n1")],
        [
            member("lowest", 0, LOW - 5, "n0", size=1),
            *placed_gang("filler", HIGH + 1, ["n0"] * 3),
            *placed_gang("low", LOW, ["n1"] * 4),
        ],
    )
    gang, records = cluster.incoming([member("big", i, HIGH) for i in range(4)])
    verdict = cluster.post_filter(gang, records)
    assert victims(verdict) == names("low", 4)
    assert [node for _, node in verdict.nominations] == ["n1"] * 4


def test_a_disruption_budget_makes_its_gang_the_last_choice() -> None:
    cluster = Cluster(
        [gpu_node(f"n{i}") for i in range(3)],
        [p for g in "abc" for p in placed_gang(g, LOW, [f"n{'abc'.index(g)}"] * 4, labels={"app": g})],
    )
    cluster.budgets.apply("ADDED", make_pdb("a", {"app": "a"}, disruptions_allowed=0))
    gang, records = cluster.incoming([member("big", i, HIGH, size=8) for i in range(8)])
    verdict = cluster.post_filter(gang, records)
    assert victims(verdict) == sorted(names("b", 4) + names("c", 4))
    assert sum(unit.violations for unit in verdict.victims) == 0


def test_a_budget_is_broken_when_nothing_else_makes_room_and_counted() -> None:
    cluster = Cluster([gpu_node("n0")], placed_gang("a", LOW, ["n0"] * 4, labels={"app": "a"}))
    cluster.budgets.apply("ADDED", make_pdb("a", {"app": "a"}, disruptions_allowed=1))
    gang, records = cluster.incoming([member("big", i, HIGH) for i in range(4)])
    verdict = cluster.post_filter(gang, records)
    assert victims(verdict) == names("a", 4) and verdict.victims[0].violations == 3


def test_the_gangs_preemption_policy() -> None:
    cluster = Cluster([gpu_node("n0")], placed_gang("low", LOW, ["n0"] * 4))
    # A PodGroup that says Never, by the v1.37 field or by our annotation.
    never = {PREEMPTION_POLICY_ANNOTATION: "Never"}
    for field, said in (({"preemptionPolicy": "Never"}, {}), ({}, never)):
        cluster.gangs.set_podgroup(PodGroup.bare("pg").uid("pg").annotations(said)
                                   .spec(minMember=2, **field).obj())
        gang, records = cluster.incoming([member("pg", i, HIGH, crd=True) for i in range(2)])
        assert cluster.post_filter(gang, records).message == POST_FILTER_PREFIX + NOT_ELIGIBLE_NEVER
    # A Kubernetes PodGroup (scheduling.k8s.io/v1beta1) whose spec.preemptionPolicy says Never.
    cluster.gangs.set_native_podgroup(NativePodGroup.bare("kpg").uid("kpg").policy({"gang": {"minCount": 2}})
                                      .spec(preemptionPolicy="Never").obj())
    native = [Pod(f"kpg-{i}", cpu="1", memory="1Gi", gpus=1, priority=HIGH).labels({})
              .scheduling_group("kpg").obj() for i in range(2)]
    gang, records = cluster.incoming(native)
    assert gang.key == "default/PodGroup/kpg"
    assert cluster.post_filter(gang, records).message == POST_FILTER_PREFIX + NOT_ELIGIBLE_NEVER
    # A gang declared by labels: the annotation on its pods, or a member's own preemptionPolicy.
    gang, records = cluster.incoming(
        [member("ann", i, HIGH, size=2, annotations=never) for i in range(2)]
    )
    assert cluster.post_filter(gang, records).message == POST_FILTER_PREFIX + NOT_ELIGIBLE_NEVER
    gang, records = cluster.incoming(
        [member("own", i, HIGH, size=2, preemption_policy="Never") for i in range(2)]
    )
    assert cluster.post_filter(gang, records).message == POST_FILTER_PREFIX + NOT_ELIGIBLE_NEVER
    gang, records = cluster.incoming(
        [member("typo", i, HIGH, size=2, annotations={PREEMPTION_POLICY_ANNOTATION: "no"}) for i in range(2)]
    )
    message = cluster.post_filter(gang, records).message
    assert message.startswith(f"preemption: annotation {PREEMPTION_POLICY_ANNOTATION} of default/typo-0 must")
    # PreemptLowerPriority said outright preempts.
    gang, records = cluster.incoming([
        member("ok", i, HIGH, size=2, annotations={PREEMPTION_POLICY_ANNOTATION: "PreemptLowerPriority"})
        for i in range(2)
    ])
    assert cluster.post_filter(gang, records).preempts


def test_carrying_it_out_nominates_every_member_and_waits_for_the_victims() -> None:
    cluster = Cluster(
        [gpu_node("n0"), gpu_node("n1")],
        placed_gang("low", LOW, ["n0", "n0", "n1", "n1"]) + placed_gang("peer", HIGH, ["n0", "n0"])
        + placed_gang("peer2", HIGH, ["n1", "n1"]),
    )
    gang, records = cluster.incoming([member("pair", i, HIGH, size=2) for i in range(2)])
    verdict = cluster.post_filter(gang, records)
    assert victims(verdict) == names("low", 4)
    cluster.gang_preemptor.execute(gang, records[0], verdict)
    assert set(cluster.cache.nominations) == {"uid-pair-0", "uid-pair-1"}
    intents = cluster.evictions.intents
    assert [name for name, _ in intents] == ["pair-0", "pair-1"]
    assert sorted(p.name for _, plan in intents for p in plan.victims) == names("low", 4), "each victim once"
    # A victim goes with the intent of a member nominated to its node (else with the first member's).
    nominated = {node for _, node in verdict.nominations}
    for index, (_, plan) in enumerate(intents):
        for pod in plan.victims:
            state = cluster.cache.pod_state(pod.uid)
            assert state is not None
            assert plan.node == state.node if state.node in nominated else index == 0
    # While the victims are still there, the gang does not preempt again.
    again = cluster.post_filter(gang, records)
    assert again.message == POST_FILTER_PREFIX + NOT_ELIGIBLE_TERMINATING
    for name in names("low", 4):
        cluster.cache.remove_pod(f"uid-{name}")
    # Gone: the gang fits on its nominated room; a new what-if would find no victims and say so.
    assert cluster.framework.schedule(records[0]).node in {"n0", "n1"}


def test_managed_gpus_are_planned_by_placing_the_gang_and_the_devices_come_back() -> None:
    nodes = [
        NodeSpec(f"g{i}", cpu=32_000, memory=128 * 2**30, gpus=2, gpu_model="A100", gpu_memory=80 * 2**30,
                 managed=True).to_node()
        for i in range(2)
    ]
    holders = []
    for i, (node, device) in enumerate([("g0", 0), ("g0", 1), ("g1", 0), ("g1", 1)]):
        held = {GPU_COUNT_ANNOTATION: "1", GPU_IDS_ANNOTATION: str(device)}
        pod = make_pod(f"holder-{i}", cpu="1", memory=None, priority=LOW if node == "g1" else HIGH + 1,
                       node_name=node, annotations=held)
        holders.append(pod)
    cluster = Cluster(nodes, holders)
    incoming = [
        make_pod(f"m-{i}", cpu="1", memory=None, priority=HIGH,
                 labels={GROUP_NAME_LABEL: "m", GROUP_MIN_LABEL: "2"},
                 annotations={GPU_COUNT_ANNOTATION: "1"})
        for i in range(2)
    ]
    gang, records = cluster.incoming(incoming)
    verdict = cluster.post_filter(gang, records)
    assert victims(verdict) == ["holder-2", "holder-3"]
    assert [node for _, node in verdict.nominations] == ["g1", "g1"]
    assert cluster.cache.gpus.assignments["uid-holder-2"].indices == (0,)


def test_when_nothing_makes_room_every_node_is_counted_with_its_reason() -> None:
    taint = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    cluster = Cluster(
        [make_node("tainted", cpu="16", memory="64Gi", gpus=4, taints=taint), gpu_node("n0"), gpu_node("n1")],
        placed_gang("peer", HIGH, ["n0"] * 4) + placed_gang("low", LOW, ["n1"] * 4),
    )
    gang, records = cluster.incoming([member("big", i, HIGH, size=8) for i in range(8)])
    verdict = cluster.post_filter(gang, records)
    assert not verdict.preempts
    assert verdict.message.startswith("preemption: 0/3 nodes are available: 1 node(s) had untolerated taint")
    assert verdict.message.endswith(", 2 Insufficient nvidia.com/gpu.")


def test_a_gang_bound_to_placement_domains_is_planned_by_placing_it_in_one() -> None:
    cluster = Cluster(
        [gpu_node("n0"), gpu_node("n1")],
        placed_gang("a", LOW, ["n0"] * 4) + [member(f"solo{i}", 0, LOW - 5, "n1", size=1) for i in range(4)],
    )
    zones = []
    for row in (cluster.cache.row_of("n0"), cluster.cache.row_of("n1")):
        mask = np.zeros(cluster.cache.rows, dtype=bool)
        mask[row] = True
        zones.append(mask)
    gang, records = cluster.incoming([member("big", i, HIGH) for i in range(4)])
    verdict = cluster.gang_preemptor.post_filter(gang, records, 4, cluster.framework, zones)
    assert not cluster.cache.check_consistency()
    # kube's order: every candidate off, the quorum placed in the first domain that takes it whole, and
    # the units on nodes it does not use given back.
    assert victims(verdict) == names("a", 4)
    assert {node for _, node in verdict.nominations} == {"n0"}


def test_a_podgroup_with_a_bad_preemption_policy_says_which_key() -> None:
    registry = GangRegistry()
    said = {PREEMPTION_POLICY_ANNOTATION: "Sometimes"}
    gang = registry.set_podgroup({
        "metadata": {"namespace": "ml", "name": "pg", "annotations": said}, "spec": {"minMember": 2},
    })
    assert gang.problem == (
        f"pod group ml/pg: annotation {PREEMPTION_POLICY_ANNOTATION} must be Never or PreemptLowerPriority, "
        "got 'Sometimes'"
    )
    gang = registry.set_podgroup({"metadata": {"namespace": "ml", "name": "pg"},
                                  "spec": {"minMember": 2, "preemptionPolicy": 3}})
    assert gang.problem.endswith("spec.preemptionPolicy must be Never or PreemptLowerPriority, got 3")
