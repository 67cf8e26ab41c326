"""Managed GPUs: report parsing, accounting in the cache, device choice and GPU scores, with known answers."""

from __future__ import annotations

import time
from typing import Any

import pytest
from builders import Node, Pod, gpu_report_text

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gpus import (
    FRACTION_UNITS,
    GPU_COUNT_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_IDS_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GpuRequest,
    gpu_request,
    nvlink_islands,
    parse_report,
    share_need,
)
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.tenancy import GPU_FRACTION, quota_amounts
from ai_scheduler.scheduler.framework.plugins.gpu import (
    NOT_MANAGED,
    GpuAvoidance,
    GpuBinpack,
    GpuFilter,
    best_fit,
    choose_whole,
)
from ai_scheduler.scheduler.framework.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.framework.runtime import Framework

GI = 2**30


def report(count: int = 8, **fields: Any) -> str:
    """An agent report (`gpu_report`): NVLink inside each island, PXB inside an island, SYS across islands."""
    return gpu_report_text(count, **fields)


def managed_node(
    name: str, text: str | None = None, *, updated: float | None = None, labels: dict[str, str] | None = None
) -> NodeRecord:
    node = Node.bare(name).labels(labels or {}).managed_gpus(text, updated=updated)
    return node.allocatable({"cpu": "64", "memory": "512Gi", "pods": "110"}, ready=True).record()


def plain_node(name: str, gpus: int = 0) -> NodeRecord:
    gpu = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", **gpu}
    return Node.bare(name).allocatable(allocatable, ready=True).record()


def gpu_pod(
    name: str,
    *,
    count: int | None = None,
    memory: str | None = None,
    fraction: str | None = None,
    node: str = "",
    ids: str | None = None,
) -> PodRecord:
    wanted = {GPU_COUNT_ANNOTATION: count, GPU_MEMORY_ANNOTATION: memory, GPU_FRACTION_ANNOTATION: fraction,
              GPU_IDS_ANNOTATION: ids}
    annotations = {key: str(value) for key, value in wanted.items() if value is not None}
    pod = Pod.bare(name, "ml").uid().annotations(annotations).container("c", requests={"cpu": "1"}).on(node)
    return pod.phase("Running" if node else "Pending").record()


def framework(cache: SchedulerCache, staleness: float = 120.0) -> Framework:
    return Framework(
        "ai-scheduler", [NodeResourcesFit(), GpuFilter(staleness)], [GpuBinpack(3), GpuAvoidance(2)], cache
    )


# ----------------------------------------------------------------------------------------- requests
BAD_FRACTIONS = ("0", "-0.5", "1.01", "2", "NaN", "inf", "half", "500m", " 0.5", "", "0x1p-1",
                 "1e" + "9" * 19)
FRACTION_RULE = "must be a number above 0 and at most 1, such as 0.5"


@pytest.mark.parametrize(
    ("annotations", "expected", "error"),
    [
        ({GPU_COUNT_ANNOTATION: "2"}, GpuRequest(count=2), ""),
        ({GPU_MEMORY_ANNOTATION: "10Gi"}, GpuRequest(memory=10 * GI), ""),
        ({GPU_COUNT_ANNOTATION: "0"}, None, "must be a positive integer, got '0'"),
        ({GPU_MEMORY_ANNOTATION: "lots"}, None, "must be a positive quantity such as 10Gi, got 'lots'"),
        ({GPU_COUNT_ANNOTATION: "1", GPU_MEMORY_ANNOTATION: "1Gi"}, None, "set only one of"),
        ({}, None, ""),
        ({GPU_FRACTION_ANNOTATION: "0.5"}, GpuRequest(fraction=FRACTION_UNITS // 2), ""),
        ({GPU_FRACTION_ANNOTATION: ".25"}, GpuRequest(fraction=FRACTION_UNITS // 4), ""),
        ({GPU_FRACTION_ANNOTATION: "5e-1"}, GpuRequest(fraction=FRACTION_UNITS // 2), ""),
        ({GPU_FRACTION_ANNOTATION: "1"}, GpuRequest(fraction=FRACTION_UNITS), ""),
        ({GPU_FRACTION_ANNOTATION: "0.1"}, GpuRequest(fraction=104857), ""),  # rounded down
        ({GPU_FRACTION_ANNOTATION: "1e-12"}, GpuRequest(fraction=1), ""),  # at least one unit
        *(
            ({GPU_FRACTION_ANNOTATION: bad}, None, f"{FRACTION_RULE}, got {bad!r}")
            for bad in BAD_FRACTIONS
        ),
        ({GPU_FRACTION_ANNOTATION: "0.5", GPU_MEMORY_ANNOTATION: "1Gi"}, None, "set only one of"),
        (
            {GPU_COUNT_ANNOTATION: "1", GPU_FRACTION_ANNOTATION: "0.5"},
            None,
            f"set only one of {GPU_COUNT_ANNOTATION} and {GPU_FRACTION_ANNOTATION}",
        ),
        (
            {GPU_COUNT_ANNOTATION: "1", GPU_MEMORY_ANNOTATION: "1Gi", GPU_FRACTION_ANNOTATION: "0.5"},
            None,
            f"set only one of {GPU_COUNT_ANNOTATION}, {GPU_MEMORY_ANNOTATION} and {GPU_FRACTION_ANNOTATION}",
        ),
    ],
)
def test_gpu_request(annotations: dict[str, str], expected: GpuRequest | None, error: str) -> None:
    pod = PodRecord.from_api({"metadata": {"name": "p", "annotations": annotations}, "spec": {}})
    request, problem = gpu_request(pod)
    assert request == expected
    assert error in problem and bool(problem) == bool(error)


def test_report_parsing_and_malformed_reports() -> None:
    devices, problem = parse_report(report(4, islands=[[0, 1], [2, 3]], errors={3: "GPU is lost"}))
    assert problem == ""
    assert [d.index for d in devices] == [0, 1, 2, 3]
    assert devices[0].nvlink == {1} and devices[0].pcie[2] == "SYS" and devices[0].total == 80 * GI
    assert devices[3].error == "GPU is lost"
    for text in (
        "not json",
        '{"index": 0}',
        '[{"index": 0}]',
        '[{"index": "x", "uuid": "u", "memoryTotalMiB": 1}]',
    ):
        assert parse_report(text)[1].startswith("malformed GPU report")
    assert parse_report(None)[1] == "no GPU report"


# ----------------------------------------------------------------------------------------- device choice
def _devices(count: int, islands: list[list[int]]) -> dict[int, Any]:
    return {d.index: d for d in parse_report(report(count, islands=islands))[0]}


def test_four_gpu_pod_lands_inside_one_nvlink_island() -> None:
    devices = _devices(8, [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert nvlink_islands(devices) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert choose_whole(devices, list(range(8)), 4) == (0, 1, 2, 3)
    # With island A half used, the 4-GPU pod takes the whole free island B.
    assert choose_whole(devices, [2, 3, 4, 5, 6, 7], 4) == (4, 5, 6, 7)


def test_two_gpu_pod_does_not_split_a_free_island_of_four() -> None:
    devices = _devices(8, [[0, 1, 2, 3], [4, 5, 6, 7]])
    # Island A has 2 free (0, 1 taken), island B has all 4: the pod takes A's two, B stays whole.
    assert choose_whole(devices, [2, 3, 4, 5, 6, 7], 2) == (2, 3)
    # A 1-GPU pod likewise takes from the most fragmented island.
    assert choose_whole(devices, [3, 4, 5, 6, 7], 1) == (3,)


def test_when_no_island_can_hold_the_pod_it_spreads_over_the_closest_devices() -> None:
    devices = _devices(8, [[0, 1], [2, 3], [4, 5], [6, 7]])
    # Free: 1 (island 0-1), 3 (island 2-3), 4 and 5 (island 4-5): a 3-GPU pod keeps the NVLink pair 4-5
    # and adds one more.
    chosen = choose_whole(devices, [1, 3, 4, 5], 3)
    assert {4, 5} <= set(chosen) and len(chosen) == 3


def test_best_fit_takes_the_device_left_with_least_memory() -> None:
    import numpy as np

    free = np.array([80, 30, 12, -1, 50]) * GI
    assert best_fit(free, 10 * GI) == 2
    assert best_fit(free, 20 * GI) == 1
    assert best_fit(free, 60 * GI) == 0


# ----------------------------------------------------------------------------------------- cache and cycle
def test_cache_accounts_shares_and_whole_devices_and_never_shares_a_whole_device() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("n1", report(2, memory_gib=80)))
    row = cache.row_of("n1")
    cache.set_pod(gpu_pod("whole", count=1, node="n1", ids="0"))
    cache.set_pod(gpu_pod("share", memory="30Gi", node="n1", ids="1"))
    assert list(cache.gpus.share_free[row, :2]) == [-1, 50 * GI]
    assert list(cache.gpus.whole_free[row, :2]) == [False, False]
    fw = framework(cache)
    decision = fw.schedule(gpu_pod("next", memory="40Gi"))
    assert decision.node == "n1" and decision.gpu_ids == (1,) and decision.gpu_uuids == ("GPU-0001",)
    too_big = fw.schedule(gpu_pod("big", memory="60Gi"))
    assert too_big.node is None and too_big.reasons == {"Insufficient GPU memory": 1}
    cache.remove_pod("uid-whole")
    assert cache.gpus.whole_free[row, 0]


def test_assumed_device_choice_holds_until_the_annotation_confirms_it() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("n1", report(8, islands=[[0, 1, 2, 3], [4, 5, 6, 7]])))
    fw = framework(cache)
    first = gpu_pod("a", count=4)
    decision = fw.schedule(first)
    assert decision.gpu_ids == (0, 1, 2, 3)
    assert decision.node is not None
    cache.assume(first, decision.node, decision.gpu_ids)
    second = fw.schedule(gpu_pod("b", count=4))
    assert second.gpu_ids == (4, 5, 6, 7), "the assumed devices are taken"
    # The watch shows the pod bound with the annotation PreBind wrote: the same devices stay taken.
    cache.set_pod(gpu_pod("a", count=4, node="n1", ids="0,1,2,3"))
    assert fw.schedule(gpu_pod("c", count=4)).gpu_ids == (4, 5, 6, 7)
    cache.forget("uid-a")  # no effect on a confirmed pod
    assert cache.gpus.whole_free[cache.row_of("n1")].sum() == 4


def test_shares_best_fit_across_nodes_and_keep_whole_gpus_free() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("busy", report(2)))
    cache.set_node(managed_node("idle", report(2)))
    cache.set_pod(gpu_pod("held", memory="60Gi", node="busy", ids="0"))
    decision = framework(cache).schedule(gpu_pod("small", memory="10Gi"))
    assert (decision.node, decision.gpu_ids) == ("busy", (0,)), "best fit: the partly used device"


def test_stale_missing_and_malformed_reports_make_managed_gpus_unavailable() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("fresh", report(1)))
    cache.set_node(managed_node("stale", report(1), updated=time.time() - 600))
    cache.set_node(managed_node("silent"))
    cache.set_node(managed_node("garbled", "{oops"))
    cache.set_node(plain_node("cpu"))
    fw = framework(cache, staleness=120)
    decision = fw.schedule(gpu_pod("p", count=1))
    assert decision.node == "fresh"
    cache.set_pod(gpu_pod("x", count=1, node="fresh", ids="0"))
    blocked = fw.schedule(gpu_pod("q", count=1))
    assert blocked.message == (
        "0/5 nodes are available: 1 Insufficient free GPUs, "
        "1 node(s) didn't have GPUs managed by ai-scheduler, "
        "1 node(s) had malformed GPU report, 1 node(s) had no GPU report, "
        "1 node(s) had stale GPU report."
    )


def test_a_memory_request_larger_than_any_gpu_is_rejected_at_once() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("n1", report(2, memory_gib=80)))
    decision = framework(cache).schedule(gpu_pod("huge", memory="100Gi"))
    assert decision.node is None
    assert decision.message == (
        "0/1 nodes are available: ai-scheduler.io/gpu-memory 100Gi is more than any GPU has (largest 80Gi)."
    )


def test_gpu_less_pods_avoid_gpu_nodes_and_device_plugin_gpus_binpack() -> None:
    cache = SchedulerCache()
    cache.set_node(plain_node("gpu-a", gpus=8))
    cache.set_node(plain_node("gpu-b", gpus=8))
    cache.set_node(plain_node("cpu"))
    fw = framework(cache)
    assert fw.schedule(gpu_pod("web")).node == "cpu"
    trainer = PodRecord.from_api(
        {
            "metadata": {"name": "t", "uid": "t"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        }
    )
    first = fw.schedule(trainer)
    assert first.node is not None
    cache.assume(trainer, first.node)
    second_pod = PodRecord.from_api(
        {
            "metadata": {"name": "t2", "uid": "t2"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        }
    )
    assert fw.schedule(second_pod).node == first.node, "binpack: the partly used GPU node first"


def test_spread_profile_takes_the_emptiest_node_and_device() -> None:
    from ai_scheduler.scheduler.framework.plugins.gpu import GpuSpread

    cache = SchedulerCache()
    cache.set_node(managed_node("busy", report(2)))
    cache.set_node(managed_node("idle", report(2)))
    cache.set_pod(gpu_pod("held", memory="60Gi", node="busy", ids="0"))
    spread = Framework("ai-scheduler", [GpuFilter(120, spread=True)], [GpuSpread(3)], cache)
    decision = spread.schedule(gpu_pod("small", memory="10Gi"))
    assert decision.node == "idle"
    cache.set_pod(gpu_pod("other", memory="30Gi", node="idle", ids="0"))
    # On a node with one partly used and one free device, spread takes the free one (worst fit).
    assert GpuFilter(120, spread=True).pick(gpu_pod("x", memory="10Gi"), cache, cache.row_of("idle"))[0] == (
        1,
    )
    assert GpuFilter(120).pick(gpu_pod("x", memory="10Gi"), cache, cache.row_of("idle"))[0] == (0,)


def test_a_share_finds_the_few_managed_nodes_of_a_large_cluster() -> None:
    # 1,000 CPU nodes first: the search stops early only once it has enough feasible nodes, so the two
    # GPU nodes at the end of the table are found, and the filter's window holds their devices.
    cache = SchedulerCache()
    for i in range(1000):
        cache.set_node(plain_node(f"cpu-{i}"))
    cache.set_node(managed_node("gpu-a", report(used_gib={3: 60})))
    cache.set_node(managed_node("gpu-b", report()))
    fw = framework(cache)
    decision = fw.schedule(gpu_pod("share", memory="20Gi"))
    assert decision.node == "gpu-a" and decision.gpu_ids == (3,), "best fit: the device with 20 GiB left"
    assert decision.feasible == 2 and decision.evaluated == 1002
    assert decision.reasons == {NOT_MANAGED: 1000}


# ----------------------------------------------------------------------------------------- fractions
@pytest.mark.parametrize("memory_gib", [80, 16])
def test_two_half_gpu_pods_share_one_device_whatever_its_size(memory_gib: int) -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("n1", report(2, memory_gib=memory_gib)))
    row = cache.row_of("n1")
    fw = framework(cache)
    placed = []
    for name in ("a", "b"):
        pod = gpu_pod(name, fraction="0.5")
        decision = fw.schedule(pod)
        assert decision.node == "n1", decision.message
        cache.assume(pod, decision.node, decision.gpu_ids)
        placed.append(decision.gpu_ids)
    assert placed == [(0,), (0,)], "the second half takes the rest of the first device (best fit)"
    assert list(cache.gpus.share_free[row, :2]) == [0, memory_gib * GI]
    assert list(cache.gpus.whole_free[row, :2]) == [False, True]
    # The device is full: a third half goes to the other one, and a whole GPU finds none left after it.
    third = gpu_pod("c", fraction="0.5")
    decision = fw.schedule(third)
    assert decision.gpu_ids == (1,)
    cache.assume(third, "n1", decision.gpu_ids)
    blocked = fw.schedule(gpu_pod("whole", count=1))
    assert blocked.node is None and blocked.reasons == {"Insufficient free GPUs": 1}
    cache.forget("uid-a")
    assert cache.gpus.share_free[row, 0] == memory_gib * GI // 2


def test_fractions_that_add_up_to_more_than_one_do_not_share_a_device() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("n1", report(2, memory_gib=80)))
    fw = framework(cache)
    big = gpu_pod("big", fraction="0.6")
    first = fw.schedule(big)
    assert first.gpu_ids == (0,)
    cache.assume(big, "n1", first.gpu_ids)
    assert fw.schedule(gpu_pod("half", fraction="0.5")).gpu_ids == (1,)
    # On a node of one device, the half waits, with the reason a memory share gets.
    single = SchedulerCache()
    single.set_node(managed_node("n1", report(1, memory_gib=16)))
    single.set_pod(gpu_pod("big", fraction="0.6", node="n1", ids="0"))
    decision = framework(single).schedule(gpu_pod("half", fraction="0.5"))
    assert decision.node is None and decision.reasons == {"Insufficient GPU memory": 1}
    # Three thirds do fit one device: fractions are rounded down, never up.
    thirds = SchedulerCache()
    thirds.set_node(managed_node("n1", report(1, memory_gib=80)))
    for name in ("t1", "t2"):
        thirds.set_pod(gpu_pod(name, fraction="0.333333", node="n1", ids="0"))
    assert framework(thirds).schedule(gpu_pod("t3", fraction="0.333333")).gpu_ids == (0,)


def test_a_fraction_and_a_memory_share_coexist_on_one_device() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("n1", report(2, memory_gib=80)))
    row = cache.row_of("n1")
    cache.set_pod(gpu_pod("mem", memory="40Gi", node="n1", ids="1"))
    fw = framework(cache)
    half = gpu_pod("half", fraction="0.5")
    decision = fw.schedule(half)
    assert decision.gpu_ids == (1,), "best fit: the device the memory share uses"
    cache.assume(half, "n1", decision.gpu_ids)
    assert cache.gpus.share_free[row, 1] == 0
    # And the other way round: a memory share fills what a fraction leaves.
    assert fw.schedule(gpu_pod("fill", memory="80Gi")).gpu_ids == (0,)
    cache.set_pod(gpu_pod("quarter", fraction="0.25", node="n1", ids="0"))
    assert cache.gpus.share_free[row, 0] == 60 * GI
    assert fw.schedule(gpu_pod("rest", memory="60Gi")).gpu_ids == (0,)
    assert fw.schedule(gpu_pod("more", memory="61Gi")).node is None


def test_a_fraction_weighs_each_device_by_its_own_size() -> None:
    import numpy as np

    total = np.array([80, 16, 0]) * GI
    free = np.array([80, 16, -1]) * GI
    need = share_need(GpuRequest(fraction=FRACTION_UNITS // 2), total)
    assert list(need[:2]) == [40 * GI, 8 * GI]
    assert best_fit(free, need) == 1, "half of the small device leaves the least free memory"
    # Across nodes: the best fit is the node whose device a half fills.
    cache = SchedulerCache()
    cache.set_node(managed_node("big", report(1, memory_gib=80)))
    cache.set_node(managed_node("small", report(1, memory_gib=16)))
    cache.set_pod(gpu_pod("held", fraction="0.5", node="small", ids="0"))
    assert framework(cache).schedule(gpu_pod("p", fraction="0.5")).node == "small"


def test_a_whole_fraction_takes_a_free_device_and_bound_fractions_are_charged_at_start() -> None:
    cache = SchedulerCache()
    cache.set_node(managed_node("n1", report(2, memory_gib=16)))
    row = cache.row_of("n1")
    cache.set_pod(gpu_pod("one", fraction="1", node="n1", ids="1"))
    assert list(cache.gpus.share_free[row, :2]) == [16 * GI, 0]
    assert list(cache.gpus.whole_free[row, :2]) == [True, False]
    fw = framework(cache)
    assert fw.schedule(gpu_pod("another", fraction="1")).gpu_ids == (0,)
    # A device in use by another process is no longer wholly free for a fraction of 1.
    busy = SchedulerCache()
    busy.set_node(managed_node("n1", report(1, memory_gib=16, used_gib={0: 1})))
    assert framework(busy).schedule(gpu_pod("p", fraction="1")).node is None
    # gpu-ids naming a device the report lacks: charged as a share of the largest device known.
    cache.set_pod(gpu_pod("odd", fraction="0.5", node="n1", ids="7"))
    assert cache.gpus.assignments["uid-odd"].memory == 8 * GI
    cache.remove_pod("uid-odd")
    cache.remove_pod("uid-one")
    assert cache.gpus.whole_free[row, 1]


def test_a_fraction_counts_against_quotas_in_thousandths_of_a_gpu() -> None:
    assert quota_amounts(gpu_pod("p", fraction="0.5"))[GPU_FRACTION] == 500
    assert quota_amounts(gpu_pod("p", fraction="0.3333"))[GPU_FRACTION] == 333
    assert quota_amounts(gpu_pod("p", fraction="1e-9"))[GPU_FRACTION] == 1
    assert quota_amounts(gpu_pod("p", fraction="1"))[GPU_FRACTION] == 1000
    from ai_scheduler.cache.tenancy import Tenancy
    from ai_scheduler.config import parse_config

    config = parse_config(
        {
            "groups": {"vision": {}},
            "users": {"alice": {"group": "vision", "max": {GPU_FRACTION: "1.5"}}},
            "namespaces": {"ml": {"user": "alice"}},
        }
    )
    tenancy = Tenancy(config)
    for name in ("a", "b"):
        tenancy.charge(gpu_pod(name, fraction="0.5", node="n1", ids="0"))
    pod = gpu_pod("c", fraction="0.75")
    refusal = tenancy.quota_refusal(tenancy.tenant_of(pod), quota_amounts(pod))
    assert refusal == f"exceeds quota of user alice: {GPU_FRACTION} 1/1500m"
    small = gpu_pod("d", fraction="0.5")
    assert tenancy.quota_refusal(tenancy.tenant_of(small), quota_amounts(small)) == ""
