"""A plugin's one-row verdicts (`failing_one`, `score_one`) are its `run` and `score` over that row.

The resource plugins say them in plain Python numbers (interface.py: a placement asks one row again,
gang_shapes.py), a second writing of their arithmetic. Random clusters hold both writings to the same
verdicts on every row: nodes with and without GPUs (device-plugin and managed), few pod slots, a
resource no node has, nodes whose running pods ask more than they hold, room held for nominated
pods; pods asking for every mix of those.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest
from builders import Node, gpu_report, make_pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.framework.interface import FilterPlugin, ScorePlugin, StaticResults
from ai_scheduler.scheduler.framework.plugins import build_filters, build_scores
from ai_scheduler.scheduler.framework.plugins.gpu import GpuBinpack, GpuSpread
from ai_scheduler.scheduler.framework.plugins.resource_allocation import (
    BalancedAllocation,
    GpuAwareAllocation,
    LeastAllocated,
    MostAllocated,
)
from ai_scheduler.scheduler.framework.plugins.resource_fit import NodeResourcesFit

GPU = "nvidia.com/gpu"
WEIGHTS = {"cpu": 1, "memory": 2, GPU: 3, "example.com/fpga": 1}
NODES = 40


def _node(rng: random.Random, i: int) -> dict[str, Any]:
    extra = {"example.com/fpga": str(rng.choice([0, 2]))} if rng.random() < 0.3 else None
    node = Node(f"node-{i}", cpu=str(rng.choice([2, 8, 32])), memory=f"{rng.choice([4, 64])}Gi",
                pods=rng.choice([1, 3, 110]), gpus=rng.choice([0, 0, 4, 8]), extra_allocatable=extra)
    if rng.random() < 0.15:  # GPUs that ai-scheduler assigns itself, from the node agent's report
        node.managed_gpus(orjson.dumps(gpu_report(rng.choice([2, 8]))).decode())
    return node.obj()


def _pod(rng: random.Random, name: str, node: str | None = None) -> PodRecord:
    pod = make_pod(name, node_name=node, cpu=rng.choice([None, "100m", "1", "6", "40"]),
                   memory=rng.choice([None, "128Mi", "8Gi", "100Gi"]), gpus=rng.choice([0, 0, 1, 4, 9]))
    requests = pod["spec"]["containers"][0].setdefault("resources", {}).setdefault("requests", {})
    if rng.random() < 0.2:
        requests["example.com/fpga"] = "1"
    if rng.random() < 0.1:
        requests["example.com/nothing"] = "1"  # no node has it
    pod["metadata"].update(uid=f"uid-{name}", resourceVersion="1")
    pod["status"] = {"phase": "Running" if node else "Pending"}
    return PodRecord.from_api(pod)


def _cluster(seed: int) -> tuple[SchedulerCache, list[PodRecord]]:
    """Nodes, pods running on them (asking more than some nodes hold), pending pods, three nominated."""
    rng = random.Random(seed)
    cache = SchedulerCache(initial_rows=64)
    for i in range(NODES):
        cache.set_node(NodeRecord.from_api(_node(rng, i)))
    for i in range(60):
        cache.set_pod(_pod(rng, f"running-{i}", f"node-{rng.randrange(NODES)}"))
    pending = [_pod(rng, f"pending-{i}") for i in range(12)]
    for pod in pending:
        cache.set_pod(pod)
    for pod in pending[:3]:  # room held for nominated preemptors, the pod's own among them
        cache.nominate(pod, f"node-{rng.randrange(NODES)}")
    return cache, pending


def _plugins() -> tuple[list[FilterPlugin], list[ScorePlugin]]:
    """The default profile's plugins, and every resource score besides."""
    config = default_config()
    scores = [
        *build_scores(config.profiles[0]), LeastAllocated(1, WEIGHTS), MostAllocated(1, WEIGHTS),
        GpuAwareAllocation(1, WEIGHTS), BalancedAllocation(1, WEIGHTS), GpuBinpack(1), GpuSpread(1),
    ]
    return [*build_filters(config, config.profiles[0]), NodeResourcesFit()], scores


@pytest.mark.parametrize("seed", range(8))
def test_one_row_verdicts_are_the_plugins_own(seed: int) -> None:
    cache, pods = _cluster(seed)
    static = StaticResults(cache)
    filters, scores = _plugins()
    failed = 0
    for pod in pods:
        for row in (cache.row_of(f"node-{i}") for i in range(NODES)):
            window = slice(row, row + 1)
            for plugin in filters:
                masks = plugin.run(pod, cache, cache.valid[window].copy(), static, window)
                expected = tuple(reason for reason, mask in masks if mask[0])
                assert plugin.failing_one(pod, cache, row, static) == expected, (plugin.name, pod.key, row)
                failed += bool(expected)
            for scorer in scores:
                values = scorer.score(pod, cache, np.array([row], dtype=np.intp), static)
                one = scorer.score_one(pod, cache, row, static)
                assert one == (None if values is None else int(values[0])), (scorer.name, pod.key, row)
    assert failed, "some rows fail a filter"
