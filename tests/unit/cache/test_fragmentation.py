"""FGD's GPU fragmentation (cache/fragmentation.py) and the GPUFragmentation score plugin.

The expected fragments are worked out by hand from the paper's definition: F_n(m) is all of n's free
GPU capacity when m does not fit n (or asks no GPU), otherwise the free capacity of the devices m
cannot use (below its share, or partly used for whole GPUs). The plugin tests build a small cache from
the tests' builder (`Pod`, tests/builders.py) and `NodeSpec.to_node` (which makes managed GPU nodes
with the agent's report) and check that the node where the fragment grows least wins.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from builders import Node, Pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.fragmentation import (
    MILLI,
    PodShape,
    ShapeDistribution,
    Shapes,
    bucket,
    expected_fragmentation,
    fragment_matrix,
    fragmentation,
    free_thousandths,
    island_counts,
    multi_gpu_shapes,
    placement,
    split_islands,
    stranding,
    take_whole,
    whole_gpu_reserve,
)
from ai_scheduler.cache.gpus import GPU_COUNT_ANNOTATION, GPU_FRACTION_ANNOTATION, GPU_IDS_ANNOTATION, MIB
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.framework.interface import PER_NODE, StaticResults
from ai_scheduler.scheduler.framework.plugins import SCORES, build_filters
from ai_scheduler.scheduler.framework.plugins.gpu_fragmentation import (
    GpuFragmentation,
    GpuFragmentationCoupled,
    normalize,
    pod_shape,
    row_state,
)
from ai_scheduler.scheduler.framework.runtime import Framework
from ai_scheduler.trace import NodeSpec

GIB = 2**30
CORE = 1000
BIG = 10**15  # cpu or memory enough for any shape


def free(*rows: list[int]) -> np.ndarray:
    width = max(len(r) for r in rows)
    return np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int64)


def plenty(n: int) -> np.ndarray:
    return np.full(n, BIG, dtype=np.int64)


# ------------------------------------------------------------------------------- F_n(m) by hand
def test_fragment_of_a_share_and_of_a_whole_gpu_on_two_devices() -> None:
    """Free 1000 and 300: a 0.5 share cannot use the 300 (fragment 300), nor can a whole GPU (partly used)."""
    shapes = Shapes.of([PodShape(gpu=500), PodShape(gpu=MILLI), PodShape(gpu=200), PodShape(gpu=2 * MILLI)])
    f = fragment_matrix(free([1000, 300]), plenty(1), plenty(1), shapes)
    # 0.2 fits both devices: nothing is fragment; 2 GPUs do not fit: all 1300 is.
    assert f.tolist() == [[300, 300, 0, 1300]]


def test_a_node_short_of_cpu_or_memory_is_all_fragment() -> None:
    shapes = Shapes.of([PodShape(cpu=8 * CORE, memory=GIB, gpu=500)])
    nodes = free([1000, 300], [1000, 300], [1000, 300])
    cpu, memory = np.array([4 * CORE, 8 * CORE, 8 * CORE]), np.array([BIG, BIG, GIB // 2])
    f = fragment_matrix(nodes, cpu, memory, shapes)
    assert f[:, 0].tolist() == [1300, 300, 1300]


def test_a_pod_without_gpus_counts_all_free_gpu_and_whole_gpus_need_wholly_free_devices() -> None:
    shapes = Shapes.of([PodShape(cpu=CORE), PodShape(gpu=2 * MILLI)])
    f = fragment_matrix(free([1000, 1000, 400, -1], [1000, 600, 0, -1]), plenty(2), plenty(2), shapes)
    # Row 0: 2 GPUs fit (two wholly free), the 400 of the partly used device is fragment.
    # Row 1: one wholly free device only: 2 GPUs do not fit, all 1600 is fragment.
    assert f.tolist() == [[2400, 400], [1600, 1600]]


def test_expected_fragmentation_mixes_the_shapes_by_popularity() -> None:
    shapes = Shapes.of([PodShape(gpu=500), PodShape(gpu=200)], weights=[3, 1])
    nodes = free([1000, 300], [1000, 100])
    expected = expected_fragmentation(nodes, plenty(2), plenty(2), shapes)
    # Row 0: 0.5 -> 300, 0.2 -> 0. Row 1: 0.5 -> 100, 0.2 -> 100.
    assert expected.tolist() == pytest.approx([0.75 * 300, 100.0])
    assert fragmentation(nodes, plenty(2), plenty(2), shapes) == pytest.approx(325.0)


def test_placement_tries_each_device_for_a_share_and_takes_the_least_growth() -> None:
    shapes = Shapes.of([PodShape(gpu=500), PodShape(gpu=MILLI)])
    nodes = free([1000, 300], [1000, 1000])
    result = placement(nodes, plenty(2), plenty(2), shapes, PodShape(gpu=300))
    # Row 0 before: 300 (both shapes). On device 1 (300 -> 0) nothing is left over: 0.
    # Row 1 before: 0. On either device, 700 stays on a partly used one: 0.5 -> 0, 1 GPU -> 700.
    assert result.before.tolist() == pytest.approx([300.0, 0.0])
    assert result.after.tolist() == pytest.approx([0.0, 350.0])
    assert result.device.tolist() == [1, 0]  # row 1: a tie, the lowest index
    assert result.delta.tolist() == pytest.approx([-300.0, 350.0])


def test_placement_of_whole_gpus_and_of_a_pod_without_gpus() -> None:
    shapes = Shapes.of([PodShape(cpu=8 * CORE, gpu=MILLI)])
    nodes = free([1000, 1000], [1000, 500])
    big = PodShape(cpu=8 * CORE, gpu=2 * MILLI)
    whole = placement(nodes, np.array([16 * CORE] * 2), plenty(2), shapes, big)
    assert whole.after[0] == 0.0 and np.isinf(whole.after[1])  # row 1 has one wholly free device
    cpu_only = placement(nodes, np.array([16 * CORE, 8 * CORE]), plenty(2), shapes, PodShape(cpu=4 * CORE))
    # Row 1 keeps 4 cores after it: the 1-GPU shape no longer fits, all 1500 becomes fragment.
    assert cpu_only.delta.tolist() == pytest.approx([0.0, 1000.0])


def test_free_thousandths_of_the_gpu_table() -> None:
    total = np.array([[80 * GIB, 80 * GIB, 0]])
    share_free = np.array([[80 * GIB, 24 * GIB, -1]])
    whole_free = np.array([[True, False, False]])
    assert free_thousandths(share_free, whole_free, total).tolist() == [[1000, 300, -1]]


# ------------------------------------------------------------------------------- the distribution
def test_distribution_counts_decay_and_evicts_the_least_popular_key() -> None:
    dist = ShapeDistribution(max_shapes=2, half_life=1.0)
    for shape in (PodShape(gpu=500), PodShape(gpu=500), PodShape(gpu=MILLI), PodShape(gpu=250)):
        dist.observe(shape)
    shapes = dist.shapes()
    # Weights 2+4 (0.5), 8 (1 GPU); then 16 for 0.25, which takes the place of 0.5 (the lightest).
    assert sorted(zip(shapes.gpu.tolist(), shapes.prob.tolist(), strict=True)) == [
        (250, pytest.approx(2 / 3)),
        (1000, pytest.approx(1 / 3)),
    ]


def test_distribution_buckets_cpu_and_memory() -> None:
    assert [bucket(v) for v in (0, 7, 8, 9, 1000, 1024)] == [0, 7, 8, 10, 1024, 1024]
    dist = ShapeDistribution()
    dist.observe(PodShape(cpu=3900, gpu=500))
    dist.observe(PodShape(cpu=4000, gpu=500))
    assert len(dist) == 1 and dist.shapes().cpu.tolist() == [4096]


def test_reserve_and_stranding_of_whole_gpu_shapes() -> None:
    shapes = Shapes.of([PodShape(cpu=64 * CORE, memory=256 * GIB, gpu=8 * MILLI), PodShape(gpu=500)])
    reserve = whole_gpu_reserve(shapes)
    assert reserve.cpu.tolist() == [8 * CORE] and reserve.memory.tolist() == [32 * GIB]
    assert reserve.weight.tolist() == [1.0]
    # 8 wholly free GPUs, 40 free cores: 24 cores short, 3 GPUs' worth.
    assert stranding(np.array([8]), np.array([40 * CORE]), np.array([BIG]), reserve).tolist() == [3000.0]


def test_stranding_weighs_each_whole_gpu_shape_by_the_gpus_it_asks() -> None:
    # Half the pods ask 8 GPUs and 8 cores each, half 1 GPU and 2 cores: 8/9 of the GPUs asked go to the
    # heavy shape. 40 cores beside 8 free GPUs leave 3 GPUs short for it and none for the light one.
    shapes = Shapes.of([PodShape(cpu=64 * CORE, gpu=8 * MILLI), PodShape(cpu=2 * CORE, gpu=MILLI)])
    reserve = whole_gpu_reserve(shapes)
    assert reserve.weight.tolist() == pytest.approx([8 / 9, 1 / 9])
    assert reserve.mean() == pytest.approx((8 * CORE * 8 / 9 + 2 * CORE / 9, 0.0))
    cores = np.array([40 * CORE, 10 * CORE, 0])
    stranded = stranding(np.array([8, 8, 0]), cores, np.array([BIG] * 3), reserve)
    # 10 cores: 6.75 GPUs short for the heavy shape, 3 for the light one; no free GPU strands nothing.
    assert stranded.tolist() == pytest.approx([3000 * 8 / 9, (6.75 * 8 + 3) / 9 * 1000, 0.0])
    nothing = whole_gpu_reserve(Shapes.of([]))
    assert not nothing.any
    assert stranding(np.array([4]), np.array([0]), np.array([0]), nothing).tolist() == [0.0]


# ------------------------------------------------------------------------------- the plugin
def gpu_node(name: str, gpus: int = 2, cpu: int = 32) -> NodeRecord:
    spec = NodeSpec(name, cpu=cpu * CORE, memory=256 * GIB, gpus=gpus, gpu_model="T4",
                    gpu_memory=16 * GIB, managed=True)
    return NodeRecord.from_api(spec.to_node())


def cpu_node(name: str) -> NodeRecord:
    return NodeRecord.from_api(NodeSpec(name, cpu=32 * CORE, memory=256 * GIB).to_node())


def share_pod(name: str, fraction: str, *, node: str | None = None, device: int = 0) -> PodRecord:
    annotations = {GPU_FRACTION_ANNOTATION: fraction, **({GPU_IDS_ANNOTATION: str(device)} if node else {})}
    pod = Pod(name, cpu="1", memory="1Gi", annotations=annotations, node_name=node).uid()
    return (pod.phase("Running") if node else pod).record()


def whole_pod(name: str, count: int, cpu: str = "1") -> PodRecord:
    return Pod(name, cpu=cpu, memory="1Gi", annotations={GPU_COUNT_ANNOTATION: str(count)}).uid().record()


def cpu_pod(name: str, cpu: str) -> PodRecord:
    return Pod(name, cpu=cpu, memory="1Gi").uid().record()


def cluster(*nodes: NodeRecord) -> SchedulerCache:
    cache = SchedulerCache()
    for rec in nodes:
        cache.set_node(rec)
    return cache


def rows_of(cache: SchedulerCache, *names: str) -> np.ndarray:
    return np.array([cache.row_of(n) for n in names], dtype=np.int64)


def test_the_registry_builds_both_plugins() -> None:
    assert isinstance(SCORES["GPUFragmentation"](2, {}), GpuFragmentation)
    coupled = SCORES["GPUFragmentationCoupled"](1, {})
    assert isinstance(coupled, GpuFragmentationCoupled) and coupled.couple_cpu


def test_row_state_reads_the_gpu_table_and_free_cpu() -> None:
    cache = cluster(gpu_node("a"))
    cache.set_pod(share_pod("old", "0.7", node="a", device=1))
    state, free_cpu, _ = row_state(cache, rows_of(cache, "a"))
    assert state[:, :3].tolist() == [[1000, 300, -1]]  # the table is wider than the node
    assert free_cpu.tolist() == [31 * CORE]
    assert pod_shape(share_pod("p", "0.25")) == PodShape(CORE, GIB, 250)
    assert pod_shape(whole_pod("w", 2)).gpu == 2 * MILLI


def test_plugin_prefers_the_node_where_the_fragment_grows_least() -> None:
    cache = cluster(gpu_node("fresh"), gpu_node("used"))
    cache.set_pod(share_pod("old", "0.7", node="used", device=1))  # used: free 1000 and 300
    plugin = GpuFragmentation(1)
    for i, shape in enumerate(("0.5", "0.5", "0.5")):
        plugin.score(share_pod(f"seen{i}", shape), cache, rows_of(cache, "fresh"), StaticResults(cache))
    plugin.score(whole_pod("seen-whole", 1), cache, rows_of(cache, "fresh"), StaticResults(cache))
    rows = rows_of(cache, "fresh", "used")
    scores = plugin.score(share_pod("p", "0.3"), cache, rows, StaticResults(cache))
    assert scores is not None and scores.tolist() == [0, 100]  # 0.3 fills the 300 left on "used"
    result = plugin.evaluate(share_pod("p", "0.3"), cache, rows)
    assert result.device.tolist()[1] == 1


def test_plugin_falls_back_to_the_pod_shape_and_counts_a_pod_once() -> None:
    cache = cluster(gpu_node("a"), gpu_node("b"))
    cache.set_pod(share_pod("old", "0.5", node="b", device=0))  # b: free 500 and 1000
    plugin = GpuFragmentation(1)
    pod = share_pod("p", "0.5")
    scores = plugin.score(pod, cache, rows_of(cache, "a", "b"), StaticResults(cache))
    # Only 0.5 is known: on a its 500 leftover is usable by 0.5 (no growth), on b too: a tie.
    assert scores is not None and scores.tolist() == [100, 100]
    plugin.score(pod, cache, rows_of(cache, "a", "b"), StaticResults(cache))
    assert len(plugin.distribution) == 1
    assert plugin.distribution.shapes().prob.tolist() == [1.0]


def test_normalize_keeps_100_for_the_exact_best_only() -> None:
    assert normalize(np.array([0.0, 0.5, 100.0, np.inf])).tolist() == [100, 99, 0, 0]
    assert normalize(np.array([1e-12, 0.0])).tolist() == [100, 100]  # rounding noise ties


def test_coupled_plugin_keeps_cpu_for_eight_gpu_pods() -> None:
    cache = cluster(gpu_node("gpu", gpus=8, cpu=96), cpu_node("cpu"))
    rows = rows_of(cache, "gpu", "cpu")
    plain, coupled = GpuFragmentation(1), GpuFragmentationCoupled(1)
    for plugin in (plain, coupled):
        for i in range(3):
            big = whole_pod(f"big{i}", 8, cpu="80")
            plugin.score(big, cache, rows_of(cache, "gpu"), StaticResults(cache))
    # A CPU-only pod of 20 cores on the GPU node leaves 76 < 80 cores beside 8 free GPUs: FGD already
    # counts that (the 8-GPU shape no longer fits); a 4-core one leaves room, and only the coupled
    # plugin still steers it to the CPU node.
    assert (s := plain.score(cpu_pod("c20", "20"), cache, rows, StaticResults(cache))) is not None
    assert s.tolist() == [0, 100]
    assert (s := plain.score(cpu_pod("c4", "4"), cache, rows, StaticResults(cache))) is not None
    assert s.tolist() == [100, 100]
    assert (s := coupled.score(cpu_pod("c4", "4"), cache, rows, StaticResults(cache))) is not None
    assert s.tolist() == [0, 100]


def test_node_order_tie_break_takes_the_first_of_equal_nodes() -> None:
    cache = cluster(*(gpu_node(f"n{i}") for i in range(4)))
    config = default_config()
    filters = build_filters(config, config.profiles[0])
    fw = Framework("ai-scheduler", filters, [GpuFragmentation(1)], cache, rng=random.Random(0),
                   tie_break="nodeOrder")
    assert {fw.schedule(share_pod(f"p{i}", "0.5")).node for i in range(5)} == {"n0"}


def test_share_of_a_device_rounds_as_the_table_does() -> None:
    cache = cluster(gpu_node("a"))
    cache.set_pod(share_pod("old", "0.3", node="a", device=0))
    state, _, _ = row_state(cache, rows_of(cache, "a"))
    assert state[:, :2].tolist() == [[700, 1000]]
    assert cache.gpus.total[cache.row_of("a"), 0] == 16 * GIB and 16 * GIB % MIB == 0


def test_a_share_takes_the_device_where_fragmentation_grows_least_not_the_best_fit() -> None:
    # Devices free 800 and 500 thousandths; the workload is mostly halves. A 0.3 share on device 1 (the
    # best fit, 200 left) strands those 200 for every half; on device 0 it leaves 500 and 500, both
    # usable by a half: FGD takes device 0, the GPU filter alone device 1.
    def framework(scores: list[GpuFragmentation]) -> tuple[Framework, SchedulerCache]:
        cache = cluster(gpu_node("a"))
        cache.set_pod(share_pod("old0", "0.2", node="a", device=0))
        cache.set_pod(share_pod("old1", "0.5", node="a", device=1))
        config = default_config()
        fw = Framework("ai-scheduler", build_filters(config, config.profiles[0]), list(scores), cache,
                       rng=random.Random(0))
        return fw, cache

    fgd = GpuFragmentation(1)
    fw, cache = framework([fgd])
    for i in range(8):
        fgd.score(share_pod(f"half{i}", "0.5"), cache, rows_of(cache, "a"), StaticResults(cache))
    assert fw.schedule(share_pod("p", "0.3")).gpu_ids == (0,)
    # A member of the same shape that was never scored (the gang fast path scores one member) gets the same
    # device: the answer reads only the pod and the row.
    assert fgd.preferred_device(share_pod("other", "0.3"), cache, cache.row_of("a")) == 0
    plain, _ = framework([])
    assert plain.schedule(share_pod("p", "0.3")).gpu_ids == (1,)


# ------------------------------------------------------------------------------- NVLink islands
def test_island_counts_and_the_devices_multi_gpu_shapes_reach_only_across_islands() -> None:
    # Islands 0-3 and 4-7; wholly free: 0, 1 (island 0) and 4, 5, 6 (island 4).
    island = np.array([[0, 0, 0, 0, 4, 4, 4, 4]])
    whole = np.array([[True, True, False, False, True, True, True, False]])
    counts = island_counts(whole, island)
    assert counts[0].tolist() == [2, 0, 0, 0, 3, 0, 0, 0]
    # A 2-GPU shape fits in either island: nothing split. A 4-GPU shape fits the node (5 free) but no
    # island: all 5 count. An 8-GPU shape does not fit at all: FGD counts it already, this adds nothing.
    for k, expected in ((2, 0.0), (4, 5000.0), (8, 0.0)):
        assert split_islands(counts, np.array([k]), np.array([1.0])).tolist() == [expected]
    shapes = Shapes.of([PodShape(gpu=4 * MILLI), PodShape(gpu=MILLI), PodShape(gpu=500)], [1, 2, 1])
    ks, probs = multi_gpu_shapes(shapes)
    assert ks.tolist() == [4] and probs.tolist() == [0.25]


def test_take_whole_uses_the_smallest_island_that_holds_the_request_else_the_smallest_first() -> None:
    counts = np.array([[2, 0, 0, 0, 4, 0, 0, 0], [3, 0, 0, 0, 3, 0, 0, 0], [1, 0, 2, 0, 1, 0, 0, 0]])
    after = take_whole(counts, 2)
    assert after.tolist()[:2] == [[0, 0, 0, 0, 4, 0, 0, 0], [1, 0, 0, 0, 3, 0, 0, 0]]
    assert take_whole(counts[2:], 3).tolist() == [[0, 0, 1, 0, 0, 0, 0, 0]]  # spans: 1 + 1, then 1 of 2


def test_coupled_plugin_keeps_nvlink_islands_whole_for_four_gpu_pods() -> None:
    # Two 8-GPU nodes with islands of four. "whole" is all free; "half" has two GPUs of island 0 taken.
    # A 2-GPU pod on "half" fills island 0 and leaves island 4 whole for a 4-GPU pod; on "whole" it
    # breaks an island. Plain FGD sees no partly used device on either: a tie, the first node wins.
    def a100_node(name: str) -> NodeRecord:
        spec = NodeSpec(name, cpu=96 * CORE, memory=512 * GIB, gpus=8, gpu_model="A100",
                        gpu_memory=80 * GIB, managed=True, nvlink_island=4)
        return NodeRecord.from_api(spec.to_node())

    cache = cluster(a100_node("whole"), a100_node("half"))
    for i in range(2):
        annotations = {GPU_COUNT_ANNOTATION: "1", GPU_IDS_ANNOTATION: str(i)}
        cache.set_pod(Pod(f"old{i}", cpu="1", memory="1Gi", node_name="half", annotations=annotations)
                      .uid().phase("Running").record())
    assert cache.gpus.island[cache.row_of("half")].tolist() == [0, 0, 0, 0, 4, 4, 4, 4]
    config = default_config()
    chosen = {}
    for plugin in (GpuFragmentation(1), GpuFragmentationCoupled(1)):
        for i in range(6):
            plugin.observe(whole_pod(f"four{i}", 4), PodShape(CORE, GIB, 4 * MILLI))
        fw = Framework("ai-scheduler", build_filters(config, config.profiles[0]), [plugin], cache,
                       rng=random.Random(0), tie_break="nodeOrder")
        decision = fw.schedule(whole_pod("two", 2))
        chosen[plugin.name] = (decision.node, decision.gpu_ids)
    assert chosen == {"GPUFragmentation": ("whole", (0, 1)), "GPUFragmentationCoupled": ("half", (2, 3))}


# ------------------------------------------------------------------------------- kept evaluations
@pytest.mark.parametrize(
    "name", ["GPUFragmentation", "GPUFragmentationCoupled", "FGDScore", "FGDScoreCoupled"])
def test_kept_evaluations_decide_as_evaluating_every_row(name: str) -> None:
    """The plugin keeps each row's evaluation per pod shape and evaluates again only rows whose cache
    version moved (a placement, a pod leaving, a new node): the same decisions, pod by pod, as
    evaluating every candidate row for every pod, over pods arriving and leaving on managed, device-
    plugin and CPU nodes of several sizes (some join later: new rows)."""
    rng = random.Random(7)
    nodes = [gpu_node(f"g{i}", gpus=rng.choice((2, 4, 8)), cpu=rng.choice((16, 32, 96))) for i in range(20)]
    nodes += [Node(f"d{i}", cpu="64", memory="256Gi", gpus=gpus).record() for i, gpus in enumerate((2, 4))]
    nodes += [cpu_node("c0"), Node("d2", cpu="96", memory="512Gi", gpus=8).record()]
    nodes += [cpu_node(f"c{i}") for i in range(1, 3)]
    pods: list[PodRecord] = []
    for i in range(360):
        kind, cpu = rng.random(), str(rng.choice((1, 2, 4, 8, 12)))
        if kind < 0.45:
            pod = share_pod(f"s{i}", rng.choice(("0.1", "0.25", "0.5", "0.6", "0.8")))
        elif kind < 0.75:
            pod = whole_pod(f"w{i}", rng.choice((1, 1, 2, 4, 8)), cpu=cpu)
        elif kind < 0.85:
            pod = Pod(f"p{i}", cpu=cpu, memory="1Gi", gpus=rng.choice((1, 2, 4))).uid().record()
        else:
            pod = cpu_pod(f"c{i}", cpu)
        pods.append(pod)
    leaving = {i: rng.randrange(i) for i in range(40, 360, 3)}  # before pod i, an earlier pod leaves
    config = default_config()
    decisions: dict[bool, list[tuple[str | None, tuple[int, ...]]]] = {}
    for keep in (True, False):
        cache = cluster(*nodes[:-4])
        plugin = SCORES[name](1, {})
        assert isinstance(plugin, GpuFragmentation)
        plugin.keep = keep
        if name == "FGDScore":
            plugin.set_target(Shapes.of([pod_shape(p, 16 * GIB) for p in pods[:100]]))
        fw = Framework("ai-scheduler", build_filters(config, config.profiles[0]), [plugin], cache,
                       rng=random.Random(0), tie_break="nodeOrder")
        made = decisions[keep] = []
        for i, pod in enumerate(pods):
            if i == 150:
                for rec in nodes[-4:]:  # nodes joining: new rows
                    cache.set_node(rec)
            if i in leaving and cache.is_assumed(pods[leaving[i]].uid):
                cache.forget(pods[leaving[i]].uid)
            decision = fw.schedule(pod)
            made.append((decision.node, decision.gpu_ids))
            if decision.node is not None:
                cache.assume(pod, decision.node, decision.gpu_ids)
    placed = sum(1 for node, _ in decisions[True] if node is not None)
    assert 100 < placed < len(pods)  # the cluster fills: later pods meet full and partly used rows
    assert decisions[True] == decisions[False]


def test_fgd_score_coupled_is_per_node_and_keeps_cpu_for_eight_gpu_pods() -> None:
    """FGDScoreCoupled: FGD's absolute score over the coupled measure, so a node scores the same whether
    scored alone or with others (PER_NODE, what the gang fast path needs), and a CPU-only pod that would
    leave too few cores beside 8 free GPUs scores lower on that node than on a CPU node."""
    cache = cluster(gpu_node("gpu", gpus=8, cpu=96), gpu_node("small", gpus=2, cpu=16), cpu_node("cpu"))
    plugin = SCORES["FGDScoreCoupled"](1, {})
    assert isinstance(plugin, GpuFragmentation) and plugin.couple_cpu and plugin.islands
    assert plugin.locality(cpu_pod("any", "1"), cache) == PER_NODE
    for i in range(3):
        plugin.score(whole_pod(f"big{i}", 8, cpu="80"), cache, rows_of(cache, "gpu"), StaticResults(cache))
    rows = rows_of(cache, "gpu", "small", "cpu")
    for pod in (cpu_pod("c4", "4"), whole_pod("w1", 1, cpu="2"), share_pod("s", "0.5")):
        together = plugin.score(pod, cache, rows, StaticResults(cache))
        alone = [plugin.score_one(pod, cache, int(row), StaticResults(cache)) for row in rows]
        assert together is not None and together.tolist() == alone
    scores = plugin.score(cpu_pod("c4", "4"), cache, rows, StaticResults(cache))
    assert scores is not None and scores[0] < scores[2]


@pytest.mark.parametrize("name", ["FGDScoreCoupled", "GPUFragmentation"])
def test_a_row_whose_state_was_evaluated_before_is_not_evaluated_again(name: str) -> None:
    """Evaluations kept by row state (kept_evaluations.py's `by_state`): once one row holds a state that
    another row held when it was evaluated, its figures are those of that evaluation, to the bit, with no
    new evaluation; a state not seen before is evaluated."""
    cache = cluster(*[gpu_node(f"g{i}", gpus=8, cpu=96) for i in range(4)])
    plugin = SCORES[name](1, {})
    fresh = SCORES[name](1, {})
    assert isinstance(plugin, GpuFragmentation) and isinstance(fresh, GpuFragmentation)
    fresh.keep = False
    evaluated: list[int] = []
    evaluate = plugin._evaluate

    def counted(pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, *rest: object) -> object:
        evaluated.extend(rows.tolist())
        return evaluate(pod, cache, rows, *rest)  # type: ignore[arg-type]

    plugin._evaluate = counted  # type: ignore[method-assign,assignment]
    rows = rows_of(cache, "g0", "g1", "g2", "g3")
    member = whole_pod("m", 1, cpu="4")
    for i, pod in enumerate([member, share_pod("s", "0.5")]):
        for other in (plugin, fresh):
            other.observe(pod, pod_shape(pod, cache.gpus.largest_device))
        evaluated.clear()
        plugin.evaluate(pod, cache, rows)
        assert evaluated == rows.tolist()  # every row, once
        for node in ("g1", "g2"):  # g1 and g2 come to hold the same state, one after the other
            cache.assume(whole_pod(f"taken{i}-{node}", 2, cpu="8"), node, (2 * i, 2 * i + 1))
            evaluated.clear()
            kept = plugin.evaluate(pod, cache, rows)
            assert evaluated == ([int(rows[1])] if node == "g1" else [])
            alone = fresh.evaluate(pod, cache, rows)
            assert kept.before.tobytes() == alone.before.tobytes()
            assert kept.after.tobytes() == alone.after.tobytes()
            assert kept.device.tolist() == alone.device.tolist()


def test_distance_between_shape_distributions() -> None:
    a, b, c = PodShape(1000, 0, 1000), PodShape(2000, 0, 500), PodShape(4000, 0, 0)
    first = Shapes.of([a, b])
    assert first.distance(Shapes.of([b, a])) == 0.0  # the same shapes in another order
    assert first.distance(Shapes.of([c])) == 1.0  # no shape in common
    assert first.distance(Shapes.of([a, b], [3.0, 1.0])) == pytest.approx(0.25)
    assert first.distance(Shapes.of([a, c])) == pytest.approx(0.5)


def test_the_snapshot_of_learned_shapes_moves_only_when_they_moved_more_than_the_tolerance() -> None:
    """The plugin measures against a snapshot of the learned shapes; at each point where it would take a
    new one, it does only when the learned distribution moved more than `tolerance` (total variation)
    from the snapshot, and only then drops its kept evaluations."""
    cache = cluster(gpu_node("g0", gpus=8), gpu_node("g1", gpus=8))
    rows = rows_of(cache, "g0", "g1")
    plugin = SCORES["FGDScoreCoupled"](1, {})
    assert isinstance(plugin, GpuFragmentation) and plugin.tolerance == pytest.approx(0.05)
    plugin.refresh = 1  # a snapshot point at every observation
    for i in range(40):
        plugin.evaluate(whole_pod(f"a{i}", 1, cpu="4"), cache, rows)
    snapshot = plugin._snapshot
    assert snapshot is not None and len(snapshot) == 1
    plugin.evaluate(whole_pod("a-more", 1, cpu="4"), cache, rows)  # the same single shape: no move
    assert plugin._snapshot is snapshot
    plugin.evaluate(share_pod("b0", "0.5"), cache, rows)  # a new shape, 1/42 of the pods: within 0.05
    assert plugin._snapshot is snapshot
    for i in range(1, 6):  # 6/47 of the pods: more than 0.05 moved
        plugin.evaluate(share_pod(f"b{i}", "0.5"), cache, rows)
    assert plugin._snapshot is not snapshot and len(plugin._snapshot) == 2
