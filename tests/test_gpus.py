"""Managed GPUs: report parsing, accounting in the cache, device choice and GPU scores, with known answers."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gpus import (
    GPU_COUNT_ANNOTATION,
    GPU_IDS_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPUS_ANNOTATION,
    MANAGED_LABEL,
    UPDATED_ANNOTATION,
    GpuRequest,
    gpu_request,
    parse_report,
)
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.log import rfc3339
from ai_scheduler.scheduler.cycle import Framework
from ai_scheduler.scheduler.plugins.gpu import (
    NOT_MANAGED,
    GpuAvoidance,
    GpuBinpack,
    GpuFilter,
    best_fit,
    choose_whole,
    nvlink_islands,
)
from ai_scheduler.scheduler.plugins.resource_fit import NodeResourcesFit

GI = 2**30


def report(
    count: int = 8,
    memory_gib: int = 80,
    islands: list[list[int]] | None = None,
    used_gib: dict[int, int] | None = None,
    errors: dict[int, str] | None = None,
) -> str:
    """An agent report: NVLink inside each island, PXB inside an island, SYS across islands."""
    islands = islands or [list(range(count))]
    island_of = {i: n for n, island in enumerate(islands) for i in island}
    devices: list[dict[str, Any]] = []
    for i in range(count):
        if errors and i in errors:
            devices.append({"index": i, "error": errors[i]})
            continue
        devices.append(
            {
                "index": i,
                "uuid": f"GPU-{i:04d}",
                "model": "NVIDIA H100 80GB HBM3",
                "memoryTotalMiB": memory_gib * 1024,
                "memoryUsedMiB": (used_gib or {}).get(i, 0) * 1024,
                "utilizationPct": 0,
                "nvlinkPeers": [j for j in islands[island_of[i]] if j != i],
                "pcie": {
                    str(j): ("PXB" if island_of[j] == island_of[i] else "SYS") for j in range(count) if j != i
                },
            }
        )
    return orjson.dumps(devices).decode()


def managed_node(
    name: str, text: str | None = None, *, updated: float | None = None, labels: dict[str, str] | None = None
) -> NodeRecord:
    annotations = {}
    if text is not None:
        annotations[GPUS_ANNOTATION] = text
        annotations[UPDATED_ANNOTATION] = rfc3339(time.time() if updated is None else updated, millis=False)
    return NodeRecord.from_api(
        {
            "metadata": {
                "name": name,
                "labels": {MANAGED_LABEL: "true", **(labels or {})},
                "annotations": annotations,
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def plain_node(name: str, gpus: int = 0) -> NodeRecord:
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return NodeRecord.from_api(
        {
            "metadata": {"name": name},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def gpu_pod(
    name: str, *, count: int | None = None, memory: str | None = None, node: str = "", ids: str | None = None
) -> PodRecord:
    annotations = {}
    if count is not None:
        annotations[GPU_COUNT_ANNOTATION] = str(count)
    if memory is not None:
        annotations[GPU_MEMORY_ANNOTATION] = memory
    if ids is not None:
        annotations[GPU_IDS_ANNOTATION] = ids
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    return PodRecord.from_api(
        {
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": annotations},
            "spec": spec,
            "status": {"phase": "Running" if node else "Pending"},
        }
    )


def framework(cache: SchedulerCache, staleness: float = 120.0) -> Framework:
    return Framework(
        "ai-scheduler", [NodeResourcesFit(), GpuFilter(staleness)], [GpuBinpack(3), GpuAvoidance(2)], cache
    )


# ----------------------------------------------------------------------------------------- requests
@pytest.mark.parametrize(
    ("annotations", "expected", "error"),
    [
        ({GPU_COUNT_ANNOTATION: "2"}, GpuRequest(count=2), ""),
        ({GPU_MEMORY_ANNOTATION: "10Gi"}, GpuRequest(memory=10 * GI), ""),
        ({GPU_COUNT_ANNOTATION: "0"}, None, "must be a positive integer, got '0'"),
        ({GPU_MEMORY_ANNOTATION: "lots"}, None, "must be a positive quantity such as 10Gi, got 'lots'"),
        ({GPU_COUNT_ANNOTATION: "1", GPU_MEMORY_ANNOTATION: "1Gi"}, None, "set only one of"),
        ({}, None, ""),
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
    from ai_scheduler.scheduler.plugins.gpu import GpuSpread

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
