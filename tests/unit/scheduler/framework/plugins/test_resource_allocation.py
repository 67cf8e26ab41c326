"""NodeResourcesBalancedAllocation against kube-scheduler v1.36's balanced_allocation_test.go table.

Its nodes are built with cpu in millicores and memory in bytes (makeNode), and
its pods with `.Req(...)` per container; the same numbers are used here, with
its expected scores. Its DRA cases have no counterpart (no DRA here).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from builders import Node, Pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import default_config, parse_config
from ai_scheduler.scheduler.framework.interface import StaticResults
from ai_scheduler.scheduler.framework.plugins import build_scores
from ai_scheduler.scheduler.framework.plugins.resource_allocation import (
    BalancedAllocation,
    _two_resource_balances,
    balance,
)
from ai_scheduler.scheduler.framework.runtime import Framework

GPU = "nvidia.com/gpu"
CPU_MEMORY = {"cpu": 1, "memory": 1}
CPU_MEMORY_GPU = {"cpu": 1, "memory": 1, GPU: 1}

Requests = Mapping[str, str]


def table_node(name: str, milli_cpu: int, memory: int, gpus: int | None = None) -> NodeRecord:
    gpu = {GPU: str(gpus)} if gpus is not None else {}
    allocatable = {"cpu": f"{milli_cpu}m", "memory": str(memory), "pods": "110", **gpu}
    return Node.bare(name).allocatable(allocatable).record()


def table_pod(name: str, *containers: Requests, node_name: str = "") -> PodRecord:
    pod = Pod.bare(name).uid(name).on(node_name)
    for i, requests in enumerate(containers):
        pod.container(f"c{i}", requests=dict(requests))
    return (pod if containers else pod.container("c0")).record()


def cpu_only(cpu: str) -> Requests:
    return {"cpu": cpu}


def cpu_and_memory(cpu: str, memory: str) -> Requests:
    return {"cpu": cpu, "memory": memory}


def scores(incoming: PodRecord, nodes: Sequence[NodeRecord], existing: Sequence[PodRecord],
           resources: Mapping[str, int] = CPU_MEMORY) -> list[int] | None:
    cache = SchedulerCache()
    for node_rec in nodes:
        cache.set_node(node_rec)
    for pod_rec in existing:
        cache.set_pod(pod_rec)
    rows = np.array([cache.row_of(n.name) for n in nodes])
    values = BalancedAllocation(1, resources).score(incoming, cache, rows, StaticResults(cache))
    return None if values is None else [int(v) for v in values]


ONE_TWO = (cpu_and_memory("1000m", "2000"), cpu_and_memory("2000m", "3000"))


def test_best_effort_pod_gets_no_score() -> None:
    """"nothing scheduled, nothing requested, skip in PreScore"."""
    assert scores(table_pod("p"), [table_node("node1", 4000, 10000), table_node("node2", 4000, 10000)],
                  []) is None


def test_a_pod_requesting_only_unscored_resources_is_best_effort_here() -> None:
    assert scores(table_pod("p", {GPU: "1"}), [table_node("node1", 4000, 10000, gpus=8)], []) is None


KUBE_CASES: list[tuple[str, PodRecord, list[NodeRecord], list[PodRecord], Mapping[str, int], list[int]]] = [
    (
        "nothing scheduled, resources requested, differently sized nodes",
        table_pod("p", *ONE_TWO),
        [table_node("node1", 4000, 10000), table_node("node2", 6000, 10000)],
        [],
        CPU_MEMORY,
        [68, 75],
    ),
    (
        "resources requested, pods scheduled with resources",
        table_pod("p", *ONE_TWO),
        [table_node("node1", 10000, 20000), table_node("node2", 10000, 20000)],
        [table_pod("e1", cpu_only("1000m"), cpu_only("2000m"), node_name="node1"),
         table_pod("e2", *ONE_TWO, node_name="node2")],
        CPU_MEMORY,
        [73, 74],
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        table_pod("p", *ONE_TWO),
        [table_node("node1", 10000, 20000), table_node("node2", 10000, 50000)],
        [table_pod("e1", cpu_only("1000m"), cpu_only("2000m"), node_name="node1"),
         table_pod("e2", *ONE_TWO, node_name="node2")],
        CPU_MEMORY,
        [73, 70],
    ),
    (
        "resources requested, pods scheduled with resources, nodes to reach min/max score",
        table_pod("p", {"memory": "2000"}, {"memory": "3000"}),
        [table_node("node1", 3000, 5000), table_node("node2", 3000, 5000)],
        [table_pod("e1", cpu_only("1000m"), cpu_only("2000m"), node_name="node1")],
        CPU_MEMORY,
        [100, 50],
    ),
    (
        "requested resources at node capacity",
        table_pod("p", cpu_only("1000m"), cpu_only("2000m")),
        [table_node("node1", 6000, 10000), table_node("node2", 6000, 10000)],
        [table_pod("e1", cpu_only("1000m"), cpu_only("2000m"), node_name="node1"),
         table_pod("e2", *ONE_TWO, node_name="node2")],
        CPU_MEMORY,
        [62, 62],
    ),
    (
        "scalar resource is included in the score computation if pod requests the scalar resource",
        table_pod("p", {"cpu": "0", "memory": "0", GPU: "1"}),
        [table_node("node1", 3500, 40000, gpus=8), table_node("node2", 3500, 40000, gpus=8)],
        [table_pod("e1", cpu_and_memory("1000m", "2000"), {"cpu": "2000m", "memory": "3000", GPU: "3"},
                   node_name="node1"),
         table_pod("e2", *ONE_TWO, node_name="node2")],
        CPU_MEMORY_GPU,
        [75, 76],
    ),
    (
        "scalar resource is not included in the score computation if pod doesn't request the scalar resource",
        table_pod("p", *ONE_TWO),
        [table_node("node1", 3500, 40000, gpus=8), table_node("node2", 3500, 40000)],
        [],
        CPU_MEMORY_GPU,
        [56, 56],
    ),
]


@pytest.mark.parametrize(("incoming", "nodes", "existing", "resources", "expected"),
                         [c[1:] for c in KUBE_CASES], ids=[c[0] for c in KUBE_CASES])
def test_kube_scheduler_cases(incoming: PodRecord, nodes: list[NodeRecord], existing: list[PodRecord],
                              resources: Mapping[str, int], expected: list[int]) -> None:
    assert scores(incoming, nodes, existing, resources) == expected


def test_pods_without_requests_count_nothing_on_the_node() -> None:
    """useRequested: the node's plain requests, so request-less pods on it change nothing (unlike
    LeastAllocated, which counts them as 100m and 200Mi)."""
    nodes = [table_node("node1", 4000, 10000), table_node("node2", 4000, 10000)]
    empty = [table_pod(f"e{i}", node_name="node1") for i in range(5)]
    incoming = table_pod("p", *ONE_TWO)
    assert scores(incoming, nodes, empty) == scores(table_pod("p", *ONE_TWO), nodes, []) == [68, 68]


def test_a_node_without_a_scored_resource_leaves_it_out() -> None:
    """node2 has no memory at all: only cpu is left, one fraction, no spread (100 before and after)."""
    assert scores(table_pod("p", *ONE_TWO), [table_node("node1", 4000, 10000), table_node("node2", 4000, 0)],
                  []) == [68, 75]


def test_three_resources_use_the_standard_deviation() -> None:
    # fractions after: cpu 0.5, memory 0.25, gpu 0.5: mean 5/12, std = sqrt(((1/12)^2 * 2 + (2/12)^2) / 3)
    # = 0.11785 -> 88; before: all 0 -> 100; 50 + (50 + 88 - 100) // 2 = 69
    incoming = table_pod("p", {"cpu": "2000m", "memory": "2500", GPU: "4"})
    assert scores(incoming, [table_node("node1", 4000, 10000, gpus=8)], [], CPU_MEMORY_GPU) == [69]


def test_balance_takes_gos_shortcut_for_two_fractions() -> None:
    requested = np.array([[3000, 5000], [1, 3]])
    allocatable = np.array([[4000.0, 10000.0], [3.0, 3.0]])
    has = np.ones((2, 2), dtype=bool)
    assert balance(requested, allocatable, has).tolist() == [87, 66]
    # the same with a third column that no node has: the general path gives the same answers
    wide = np.array([[3000, 5000, 0], [1, 3, 0]])
    assert balance(wide, np.hstack([allocatable, [[1.0], [1.0]]]),
                   np.array([[True, True, False]] * 2)).tolist() == [87, 66]


def test_the_two_resource_shortcut_agrees_with_the_general_formula() -> None:
    rng = np.random.default_rng(7)
    cache = SchedulerCache(initial_rows=1024)
    for i in range(1000):
        cache.set_node(table_node(f"n{i}", int(rng.integers(1, 64_000)), int(rng.integers(1, 2**40))))
    cpu, memory = cache.column("cpu"), cache.column("memory")
    cache.requested[:1000, cpu] = rng.integers(0, 70_000, 1000)  # some above allocatable: capped at 1
    cache.requested[:1000, memory] = rng.integers(0, 2**40, 1000)
    rows = np.arange(1000)
    wanted = [int(rng.integers(0, 8000)), int(rng.integers(0, 2**34))]
    quick = _two_resource_balances(cache, rows, [cpu, memory], wanted)
    assert quick is not None
    allocatable = cache.allocatable[:1000][:, [cpu, memory]]
    before = cache.requested[:1000][:, [cpu, memory]]
    has = np.ones((1000, 2), dtype=bool)
    assert quick[0].tolist() == balance(before, allocatable.astype(np.float64), has).tolist()
    assert quick[1].tolist() == balance(before + wanted, allocatable.astype(np.float64), has).tolist()


def test_a_profile_naming_balanced_allocation_scores_cpu_and_memory_by_default() -> None:
    """Not in the default profile yet (it would take the decision past 0.2 ms at 5,000 nodes): a profile
    names it, and without `resources` it weighs cpu and memory, as kube-scheduler's default args do."""
    assert not any(s.name == "NodeResourcesBalancedAllocation" for s in default_config().profiles[0].scores)
    scores = [{"name": "NodeResourcesBalancedAllocation", "weight": 1}]
    config = parse_config({"profiles": [{"scores": scores}]})
    profile = config.profiles[0]
    spec = next(s for s in profile.scores if s.name == "NodeResourcesBalancedAllocation")
    assert (spec.weight, dict(spec.resources)) == (1, CPU_MEMORY)
    assert any(isinstance(s, BalancedAllocation) for s in build_scores(profile))


def test_balance_steers_a_memory_heavy_pod_to_the_cpu_heavy_node() -> None:
    """Through a whole cycle: with equal free room overall, the pod goes where it evens usage out."""
    cache = SchedulerCache()
    for rec in (table_node("cpu-busy", 8000, 8 * 2**30), table_node("mem-busy", 8000, 8 * 2**30)):
        cache.set_node(rec)
    cache.set_pod(table_pod("e1", {"cpu": "4000m", "memory": str(2**30)}, node_name="cpu-busy"))
    cache.set_pod(table_pod("e2", {"cpu": "1000m", "memory": str(4 * 2**30)}, node_name="mem-busy"))
    fw = Framework("ai-scheduler", [], [BalancedAllocation(1, CPU_MEMORY)], cache, rng=random.Random(3))
    decision = fw.schedule(table_pod("p", {"cpu": "500m", "memory": str(3 * 2**30)}))
    assert decision.node == "cpu-busy"
