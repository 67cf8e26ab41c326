"""The default keeps GPU nodes' cpu and memory with their GPUs (issue 13, point 5), and the tie-break.

NodeResourcesGPUAware scores like NodeResourcesMostAllocated on GPU nodes
(device-plugin `nvidia.com/gpu` or managed) and like
NodeResourcesLeastAllocated elsewhere; the expected scores are worked out by
hand from those two formulas. The stranding scenario is the one the issue
measured: CPU-only pods that spill onto GPU nodes must not take the cpu that a
pod of 8 GPUs and 64 cores needs next to a node's 8 free GPUs.
`scheduling.tieBreak: nodeOrder` picks the first node of the node table among
the best; `random` one at random (kube-scheduler's way). Packing fills nodes,
so the search for feasible nodes widens its first window after meeting full
ones (a cost measure only: the same nodes are kept).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from builders import Node, Pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.config.schema import DEFAULT_SCORE_RESOURCES
from ai_scheduler.scheduler.framework.interface import ScorePlugin, StaticResults
from ai_scheduler.scheduler.framework.plugins import build_filters, build_scores
from ai_scheduler.scheduler.framework.plugins.gpu import gpu_nodes
from ai_scheduler.scheduler.framework.plugins.resource_allocation import (
    GpuAwareAllocation,
    LeastAllocated,
    MostAllocated,
)
from ai_scheduler.scheduler.framework.runtime import Framework

GPU = "nvidia.com/gpu"
RESOURCES = {"cpu": 1, "memory": 1, GPU: 1}


def packed_node(name: str, *, cpu: str = "8", memory: str = "16Gi", gpus: int = 0) -> NodeRecord:
    gpu = {GPU: str(gpus)} if gpus else {}
    return (Node.bare(name).labels({"kubernetes.io/hostname": name})
            .allocatable({"cpu": cpu, "memory": memory, "pods": "110", **gpu}, ready=True).record())


def managed_node(name: str) -> NodeRecord:
    """A node whose GPUs ai-scheduler assigns itself: no nvidia.com/gpu in allocatable, one device."""
    report = '[{"index": 0, "uuid": "GPU-0", "model": "H100", "memoryTotalMiB": 81920, "memoryUsedMiB": 0}]'
    node = Node.bare(name).managed_gpus(report)
    return node.allocatable({"cpu": "8", "memory": "16Gi", "pods": "110"}, ready=True).record()


def packed_pod(name: str, *, cpu: str, memory: str = "1Gi", gpus: int = 0, node_name: str = "") -> PodRecord:
    gpu = {GPU: str(gpus)} if gpus else {}
    return (Pod.bare(name).uid().container("c", requests={"cpu": cpu, "memory": memory, **gpu}, limits=gpu)
            .on(node_name).phase("Running" if node_name else "Pending").record())


def cluster(*nodes: NodeRecord) -> SchedulerCache:
    cache = SchedulerCache()
    for rec in nodes:
        cache.set_node(rec)
    return cache


def framework(
    cache: SchedulerCache,
    scores: Sequence[ScorePlugin] | None = None,
    tie_break: str = "random",
    seed: int = 1,
) -> Framework:
    """The default profile's filters, and its scores unless `scores` is given."""
    config = default_config()
    profile = config.profiles[0]
    chosen = build_scores(profile) if scores is None else scores
    filters = build_filters(config, profile)
    return Framework("ai-scheduler", filters, chosen, cache, rng=random.Random(seed), tie_break=tie_break)


def scores_of(plugin: ScorePlugin, fw: Framework, p: PodRecord, names: Sequence[str]) -> list[int]:
    rows = np.array([fw.cache.row_of(n) for n in names], dtype=np.int64)
    values = plugin.score(p, fw.cache, rows, fw.static)
    assert values is not None
    return [int(v) for v in values]


# ------------------------------------------------------------------------------- NodeResourcesGPUAware
def test_the_default_profile_scores_resources_with_the_gpu_aware_scorer() -> None:
    names = [spec.name for spec in default_config().profiles[0].scores]
    assert "NodeResourcesGPUAware" in names
    assert "NodeResourcesLeastAllocated" not in names and "NodeResourcesMostAllocated" not in names


def test_scores_by_hand_most_allocated_on_gpu_nodes_least_allocated_elsewhere() -> None:
    cache = cluster(packed_node("gpu", gpus=4), packed_node("cpu"))
    for name in ("gpu", "cpu"):
        cache.set_pod(packed_pod(f"old-{name}", cpu="4", memory="8Gi", node_name=name))
    fw = framework(cache)
    p = packed_pod("p", cpu="2", memory="4Gi")
    aware = GpuAwareAllocation(1, RESOURCES)
    # gpu node, MostAllocated: cpu 6/8 -> 75, memory 12/16 -> 75; the idle GPUs are not scored for a
    # cpu-only pod. cpu node, LeastAllocated: cpu 2/8 free -> 25, memory 4/16 -> 25.
    assert scores_of(aware, fw, p, ["gpu", "cpu"]) == [75, 25]
    assert scores_of(aware, fw, p, ["gpu"]) == scores_of(MostAllocated(1, RESOURCES), fw, p, ["gpu"])
    assert scores_of(aware, fw, p, ["cpu"]) == scores_of(LeastAllocated(1, RESOURCES), fw, p, ["cpu"])
    # a GPU pod on the gpu node: cpu 75, memory 75, GPUs 1/4 -> 25 -> (75 + 75 + 25) / 3 = 58
    assert scores_of(aware, fw, packed_pod("g", cpu="2", memory="4Gi", gpus=1), ["gpu"]) == [58]
    # resource weights apply as in the other two: cpu three times memory, a pod asking for cpu alone
    # (memory 0 -> its share as it is): gpu node cpu 75, memory 8/16 -> 50 -> (3*75 + 50) / 4 = 68;
    # cpu node cpu 25, memory 50 -> (3*25 + 50) / 4 = 31
    weighted = GpuAwareAllocation(1, {"cpu": 3, "memory": 1})
    assert scores_of(weighted, fw, packed_pod("c", cpu="2", memory="0"), ["gpu", "cpu"]) == [68, 31]


def test_a_request_beyond_the_node_scores_like_the_two_scorers() -> None:
    cache = cluster(packed_node("gpu", gpus=4), packed_node("cpu"))
    fw = framework(cache)
    huge = packed_pod("p", cpu="16", memory="32Gi")
    aware = GpuAwareAllocation(1, RESOURCES)
    assert scores_of(aware, fw, huge, ["gpu", "cpu"]) == [100, 0]


def test_managed_gpu_nodes_count_as_gpu_nodes() -> None:
    cache = cluster(managed_node("managed"), packed_node("plain-gpu", gpus=8), packed_node("cpu"))
    rows = np.array([cache.row_of(n) for n in ("managed", "plain-gpu", "cpu")], dtype=np.int64)
    assert gpu_nodes(cache, rows).tolist() == [True, True, False]
    assert gpu_nodes(cache, rows, cache.allocatable.take(rows, axis=0)).tolist() == [True, True, False]
    fw = framework(cache)
    # managed node, MostAllocated: cpu 2/8 -> 25, memory 4/16 -> 25; cpu node, LeastAllocated: 75
    p = packed_pod("p", cpu="2", memory="4Gi")
    assert scores_of(GpuAwareAllocation(1, RESOURCES), fw, p, ["managed", "cpu"]) == [25, 75]


def test_packs_gpu_nodes_and_spreads_cpu_nodes() -> None:
    cache = cluster(packed_node("gpu-busy", gpus=8), packed_node("gpu-idle", gpus=8),
                    packed_node("cpu-busy"), packed_node("cpu-idle"))
    cache.set_pod(packed_pod("old-gpu", cpu="2", node_name="gpu-busy"))
    cache.set_pod(packed_pod("old-cpu", cpu="2", node_name="cpu-busy"))
    only_gpu = np.array([cache.row_of(n) is not None and n.startswith("gpu") for n in cache.row_names])
    only_cpu = np.array([cache.row_of(n) is not None and n.startswith("cpu") for n in cache.row_names])
    fw = framework(cache, [GpuAwareAllocation(1, RESOURCES)])
    for i in range(3):
        p = packed_pod(f"g{i}", cpu="1")
        decision = fw.schedule(p, node_mask=only_gpu)
        assert decision.node == "gpu-busy"
        cache.assume(p, "gpu-busy")
    for i in range(2):
        p = packed_pod(f"c{i}", cpu="1")
        decision = fw.schedule(p, node_mask=only_cpu)
        assert decision.node == "cpu-idle"
        cache.assume(p, "cpu-idle")


def _stranding_cluster() -> SchedulerCache:
    """Two GPU nodes (8 GPUs, 96 cores) and one CPU node already full: CPU-only pods must use GPU nodes."""
    cache = cluster(
        packed_node("gpu-a", cpu="96", memory="768Gi", gpus=8),
        packed_node("gpu-b", cpu="96", memory="768Gi", gpus=8),
        packed_node("cpu", cpu="64", memory="256Gi"),
    )
    cache.set_pod(packed_pod("filler", cpu="64", memory="64Gi", node_name="cpu"))
    return cache


def _spill_then_large(fw: Framework) -> str | None:
    cache = fw.cache
    for i in range(10):  # 80 cores of CPU-only work: 40 on each GPU node leaves 56 free on each
        p = packed_pod(f"cpu-{i}", cpu="8", memory="16Gi")
        decision = fw.schedule(p)
        assert decision.node is not None and decision.node.startswith("gpu"), decision.message
        cache.assume(p, decision.node)
    large = packed_pod("large", cpu="64", memory="512Gi", gpus=8)
    decision = fw.schedule(large)
    if decision.node is None:
        assert decision.message == (
            "0/3 nodes are available: 1 Insufficient memory, 1 Insufficient nvidia.com/gpu, "
            "3 Insufficient cpu."
        )
    return decision.node


def test_default_keeps_a_gpu_node_whole_for_a_pod_of_8_gpus_and_64_cores() -> None:
    assert _spill_then_large(framework(_stranding_cluster())) is not None


def test_least_allocated_strands_the_gpus_the_default_keeps() -> None:
    """The default before issue 13 (LeastAllocated in place of NodeResourcesGPUAware) spread the
    spilled cpu over both GPU nodes: 8 free GPUs on each, and not 64 free cores on either."""
    old = [
        LeastAllocated(s.weight, DEFAULT_SCORE_RESOURCES) if isinstance(s, GpuAwareAllocation) else s
        for s in build_scores(default_config().profiles[0])
    ]
    assert _spill_then_large(framework(_stranding_cluster(), old)) is None


# ------------------------------------------------------------------------------------------ tie-break
def test_node_order_tie_break_picks_the_first_node_of_the_table_among_the_best() -> None:
    cache = cluster(*(packed_node(f"n{i}") for i in range(6)))
    fw = framework(cache, [], tie_break="nodeOrder")
    assert {fw.schedule(packed_pod(f"p{i}", cpu="1")).node for i in range(10)} == {"n0"}
    # only the best count: n0 made worse by a busy pod, the first of the rest is taken
    cache.set_pod(packed_pod("busy", cpu="4", node_name="n0"))
    fw = framework(cache, [LeastAllocated(1, RESOURCES)], tie_break="nodeOrder")
    assert fw.schedule(packed_pod("q", cpu="1")).node == "n1"


def test_node_order_ignores_where_the_search_started() -> None:
    """The first row among the tied ones, not the first one the (rotating) search found."""
    cache = cluster(*(packed_node(f"n{i}") for i in range(6)))
    fw = framework(cache, [], tie_break="nodeOrder")
    rows = np.array([4, 5, 0, 1], dtype=np.int64)  # a search that wrapped round from row 4
    assert fw._pick(rows, np.array([0, 1, 3])) == 3  # row 1, the lowest of rows 4, 5 and 1


def test_random_tie_break_spreads_over_the_tied_nodes() -> None:
    cache = cluster(*(packed_node(f"n{i}") for i in range(6)))
    fw = framework(cache, [], tie_break="random", seed=3)
    assert len({fw.schedule(packed_pod(f"p{i}", cpu="1")).node for i in range(30)}) > 1


# ------------------------------------------------------------------------------ search window margin
class RowsScored(ScorePlugin):
    """No opinion; notes which rows each cycle scored."""

    name = "RowsScored"

    def __init__(self) -> None:
        super().__init__(1)
        self.seen: list[list[int]] = []

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        self.seen.append(rows.tolist())
        return None


def test_a_search_that_met_full_nodes_widens_the_next_window_but_keeps_the_same_nodes() -> None:
    """Packing fills nodes; a search that met some looks at a few more rows next time, in one window,
    and still keeps the first `wanted` feasible nodes in search order (420 of 1,000)."""
    cache = cluster(*(packed_node(f"n{i}", cpu="1" if i < 10 else "8") for i in range(1000)))
    seen = RowsScored()
    fw = framework(cache, [seen])
    first = fw.schedule(packed_pod("p", cpu="2"))
    assert first.feasible == 420 and seen.seen[0] == list(range(10, 430))
    assert first.reasons == {"Insufficient cpu": 10}
    assert (fw.last_looked_at, fw.last_found) == (420 + 64, 410 + 64)  # a second window of 64 rows
    second = fw.schedule(packed_pod("q", cpu="2"))
    assert second.feasible == 420 and seen.seen[1] == list(range(430, 850))
    # one window: 420 rows, and 4 x 10/484 of them (34) plus 16 more
    assert second.evaluated == 420 + 4 * 420 * 10 // 484 + 16 and fw.next_start == 850
