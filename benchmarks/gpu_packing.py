"""GPU packing: the same random GPU workload placed with GPUBinpack versus GPUSpread.

The scheduling core in-process (cache, filters, scores, device choice), on
managed nodes of 8 GPUs x 80 GiB in two NVLink islands. Pods arrive, and some
finish along the way, as on a busy cluster; at the end the benchmark counts
the GPUs left partly used, the share of free GPU memory stranded on them, and
how many whole 8-GPU and 4-GPU (one NVLink island) pods would still fit.

    python benchmarks/gpu_packing.py --nodes 32 --pods 400 --seeds 5

`--workload large` (issue 13): device-plugin GPU nodes (8 x `nvidia.com/gpu`,
96 cores) next to CPU-only nodes (64 cores), and a mix of CPU-only pods, small
GPU pods (1-2 GPUs) and large ones (8 GPUs with 64-80 cores). It compares
whole profiles that differ only in their resource scorer: the default
(NodeResourcesGPUAware: spread on CPU nodes, pack on GPU nodes; GPU pods left to
FGDScoreCoupled), the default before issue 13 (NodeResourcesLeastAllocated), and
NodeResourcesMostAllocated; and the default before FGDScoreCoupled
(`binpack-default`: GPUBinpack, NodeResourcesGPUAware scoring GPU pods too);
each with ties among the best nodes broken at random and by node order
(scheduling.tieBreak). Counted: pods placed and refused by kind, the large
pods refused while some node still had 8 free GPUs (stranded: its cpu or
memory was gone) and the arrival at which that first happened (the number of
pods when it never did), and the mean share of GPUs in use, sampled at every
arrival.

    python benchmarks/gpu_packing.py --workload large --gpu-nodes 16 --cpu-nodes 8 --pods 400 --seeds 7
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import orjson
from common import BINPACK_DEFAULT_SCORES

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gpus import (
    GPU_COUNT_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPUS_ANNOTATION,
    MANAGED_LABEL,
    UPDATED_ANNOTATION,
    nvlink_islands,
)
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import default_config, parse_config
from ai_scheduler.config.schema import DEFAULT_SCORE_RESOURCES
from ai_scheduler.log import rfc3339
from ai_scheduler.scheduler.core import build_frameworks
from ai_scheduler.scheduler.framework.interface import ScorePlugin
from ai_scheduler.scheduler.framework.plugins import build_filters, build_scores
from ai_scheduler.scheduler.framework.plugins.gpu import DEVICE_PLUGIN_GPU
from ai_scheduler.scheduler.framework.plugins.resource_allocation import (
    GpuAwareAllocation,
    LeastAllocated,
    MostAllocated,
)
from ai_scheduler.scheduler.framework.runtime import Framework

GIB = 2**30
ISLANDS = [[0, 1, 2, 3], [4, 5, 6, 7]]


def node(name: str) -> NodeRecord:
    island_of = {i: n for n, island in enumerate(ISLANDS) for i in island}
    devices = [
        {
            "index": i,
            "uuid": f"GPU-{name}-{i}",
            "model": "H100",
            "memoryTotalMiB": 80 * 1024,
            "memoryUsedMiB": 0,
            "utilizationPct": 0,
            "nvlinkPeers": [j for j in ISLANDS[island_of[i]] if j != i],
            "pcie": {str(j): "PXB" if island_of[j] == island_of[i] else "SYS" for j in range(8) if j != i},
        }
        for i in range(8)
    ]
    return NodeRecord.from_api(
        {
            "metadata": {
                "name": name,
                "labels": {MANAGED_LABEL: "true"},
                "annotations": {
                    GPUS_ANNOTATION: orjson.dumps(devices).decode(),
                    UPDATED_ANNOTATION: rfc3339(millis=False),
                },
            },
            "status": {
                "allocatable": {"cpu": "128", "memory": "1Ti", "pods": "250"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def workload(count: int, rng: random.Random) -> list[dict[str, str]]:
    """Inference shares of 5-40 GiB (70%) and training jobs of 1, 2 or 4 whole GPUs (30%)."""
    pods = []
    for _ in range(count):
        if rng.random() < 0.7:
            pods.append({GPU_MEMORY_ANNOTATION: f"{rng.choice([5, 10, 10, 20, 20, 40])}Gi"})
        else:
            pods.append({GPU_COUNT_ANNOTATION: str(rng.choice([1, 1, 2, 4]))})
    return pods


def place(policy: str, nodes: int, requests: list[dict[str, str]], seed: int) -> dict[str, Any]:
    score = "GPUBinpack" if policy == "binpack" else "GPUSpread"
    config = parse_config({"profiles": [{"scores": [{"name": score, "weight": 3}]}]})
    cache = SchedulerCache()
    for i in range(nodes):
        cache.set_node(node(f"n{i}"))
    framework = build_frameworks(config, cache, random.Random(seed))[config.scheduler_name]
    rng = random.Random(seed + 1)
    running: list[PodRecord] = []
    placed = refused = 0
    started = time.perf_counter()
    for i, wanted in enumerate(requests):
        if running and rng.random() < 0.35:  # a running pod finishes
            cache.remove_pod(running.pop(rng.randrange(len(running))).uid)
        pod = PodRecord.from_api(
            {
                "metadata": {"name": f"p{i}", "namespace": "ml", "uid": f"u{i}", "annotations": wanted},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            }
        )
        decision = framework.schedule(pod)
        if decision.node is None:
            refused += 1
            continue
        cache.assume(pod, decision.node, decision.gpu_ids)
        running.append(pod)
        placed += 1
    elapsed = time.perf_counter() - started
    gpus = cache.gpus
    partly = whole_nodes = islands_of_four = 0
    free = stranded = 0
    for row in gpus.nodes:
        stats = gpus.allocation(row)
        free += stats["free_bytes"]
        stranded += stats["stranded_bytes"]
        devices = {d.index: d for d in gpus.devices(row)}
        free_whole = [i for i in devices if gpus.whole_free[row, i]]
        partly += sum(1 for i in devices if not gpus.whole_free[row, i] and gpus.share_free[row, i] > 0)
        whole_nodes += len(free_whole) == len(devices)
        islands_of_four += sum(1 for island in nvlink_islands(devices) if set(island) <= set(free_whole))
    return {
        "policy": policy,
        "placed": placed,
        "refused": refused,
        "running_at_end": len(running),
        "partly_used_gpus": partly,
        "stranded_free_memory_pct": round(100 * stranded / free, 1) if free else 0.0,
        "free_8_gpu_nodes": whole_nodes,
        "free_4_gpu_islands": islands_of_four,
        "ms_per_pod": round(elapsed * 1000 / len(requests), 3),
    }


GPU_NODE = {"cpu": "96", "memory": "768Gi", DEVICE_PLUGIN_GPU: "8", "pods": "250"}
CPU_NODE = {"cpu": "64", "memory": "256Gi", "pods": "250"}
GPU_NODE_GPUS = 8
Request = tuple[str, int, int, int]  # kind, cores, GiB of memory, GPUs


def plain_node(name: str, allocatable: dict[str, str]) -> NodeRecord:
    return NodeRecord.from_api(
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def large_workload(count: int, rng: random.Random) -> list[Request]:
    """(kind, cores, GiB, GPUs): 65% CPU-only pods of 2-32 cores, 25% GPU pods of 1-2 GPUs with 4-8 cores
    and 32 GiB per GPU, 10% large pods of 8 GPUs with 64-80 cores and 512 GiB."""
    pods = []
    for _ in range(count):
        draw = rng.random()
        if draw < 0.65:
            cores = rng.choice([2, 4, 8, 16, 32])
            pods.append(("cpu", cores, 4 * cores, 0))
        elif draw < 0.9:
            gpus = rng.choice([1, 1, 2])
            pods.append(("small", gpus * rng.choice([4, 8]), 32 * gpus, gpus))
        else:
            pods.append(("large", rng.choice([64, 72, 80]), 512, GPU_NODE_GPUS))
    return pods


def profile_scores(name: str) -> list[ScorePlugin]:
    """The default profile's scores, or those with the old default's resource scorer (LeastAllocated, before
    issue 13) or with MostAllocated in its place, or the binpack default's (`common.BINPACK_DEFAULT_SCORES`:
    GPUBinpack, before FGDScoreCoupled)."""
    if name == "binpack-default":
        return build_scores(parse_config({"profiles": [{"scores": BINPACK_DEFAULT_SCORES}]}).profiles[0])
    scores = build_scores(default_config().profiles[0])
    if name == "new-default":
        return scores
    resource_scorer = LeastAllocated if name == "old-default" else MostAllocated
    result: list[ScorePlugin] = []
    for plugin in scores:
        if isinstance(plugin, GpuAwareAllocation):
            result.append(resource_scorer(plugin.weight, DEFAULT_SCORE_RESOURCES))
        else:
            result.append(plugin)
    return result


def place_large(
    profile: str, tie_break: str, args: argparse.Namespace, requests: list[Request], seed: int
) -> dict[str, Any]:
    config = default_config()
    cache = SchedulerCache()
    for i in range(args.gpu_nodes):
        cache.set_node(plain_node(f"gpu{i}", GPU_NODE))
    for i in range(args.cpu_nodes):
        cache.set_node(plain_node(f"cpu{i}", CPU_NODE))
    framework = Framework(
        config.scheduler_name,
        build_filters(config, config.profiles[0]),
        profile_scores(profile),
        cache,
        rng=random.Random(seed),
        tie_break=tie_break,
    )
    gpu_col = cache.column(DEVICE_PLUGIN_GPU)
    total_gpus = args.gpu_nodes * GPU_NODE_GPUS
    rng = random.Random(seed + 1)
    running: list[PodRecord] = []
    placed = {"cpu": 0, "small": 0, "large": 0}
    refused = {"cpu": 0, "small": 0, "large": 0}
    stranded = 0
    first_stranded = len(requests)  # the arrival at which a large pod first found 8 free GPUs but no room
    gpu_use: list[float] = []
    started = time.perf_counter()
    for i, (kind, cores, gib, gpus) in enumerate(requests):
        if running and rng.random() < args.finish:  # a running pod finishes
            cache.remove_pod(running.pop(rng.randrange(len(running))).uid)
        gpu_use.append(float(cache.requested[:, gpu_col].sum()) / total_gpus)
        wanted = {"cpu": str(cores), "memory": f"{gib}Gi"}
        limits = {DEVICE_PLUGIN_GPU: str(gpus)} if gpus else {}
        if gpus:
            wanted[DEVICE_PLUGIN_GPU] = str(gpus)
        pod = PodRecord.from_api(
            {
                "metadata": {"name": f"p{i}", "namespace": "ml", "uid": f"u{i}"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": wanted, "limits": limits}}]},
            }
        )
        decision = framework.schedule(pod)
        if decision.node is None:
            refused[kind] += 1
            free_gpus = cache.allocatable[:, gpu_col] - cache.requested[:, gpu_col]
            if kind == "large" and bool((free_gpus[cache.valid] >= GPU_NODE_GPUS).any()):
                stranded += 1
                first_stranded = min(first_stranded, i)
            continue
        cache.assume(pod, decision.node)
        running.append(pod)
        placed[kind] += 1
    elapsed = time.perf_counter() - started
    return {
        "placed": sum(placed.values()),
        "refused": sum(refused.values()),
        **{f"{kind}_placed": count for kind, count in placed.items()},
        **{f"{kind}_refused": count for kind, count in refused.items()},
        "large_refused_with_8_free_gpus": stranded,
        "first_such_refusal_at_pod": first_stranded,
        "mean_gpus_in_use_pct": round(100 * statistics.mean(gpu_use), 1),
        "ms_per_pod": round(elapsed * 1000 / len(requests), 3),
    }


def main_large(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict[str, Any]]] = {}
    for seed in range(args.seeds):
        requests = large_workload(args.pods, random.Random(seed))
        for profile in ("binpack-default", "old-default", "new-default", "most-allocated"):
            for tie_break in ("random", "nodeOrder"):
                runs.setdefault(f"{profile}/{tie_break}", []).append(
                    place_large(profile, tie_break, args, requests, seed)
                )
    summary = {
        name: {key: statistics.median(run[key] for run in results) for key in results[0]}
        for name, results in runs.items()
    }
    print(
        json.dumps(
            {
                "workload": "large",
                "gpu_nodes": args.gpu_nodes,
                "cpu_nodes": args.cpu_nodes,
                "pods": args.pods,
                "finish": args.finish,
                "seeds": args.seeds,
                "median": summary,
            },
            indent=2,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=("shares", "large"), default="shares")
    parser.add_argument("--nodes", type=int, default=32, help="managed GPU nodes (shares)")
    parser.add_argument("--gpu-nodes", type=int, default=16, help="device-plugin GPU nodes (large)")
    parser.add_argument("--cpu-nodes", type=int, default=8, help="nodes without GPUs (large)")
    parser.add_argument(
        "--finish", type=float, default=0.35, help="chance that a running pod ends per arrival (large)"
    )
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    if args.workload == "large":
        main_large(args)
        return
    results: dict[str, list[dict[str, Any]]] = {"binpack": [], "spread": []}
    for seed in range(args.seeds):
        requests = workload(args.pods, random.Random(seed))
        for policy in results:
            results[policy].append(place(policy, args.nodes, requests, seed))
    summary = {}
    for policy, runs in results.items():
        summary[policy] = {
            key: statistics.median(run[key] for run in runs) for key in runs[0] if key != "policy"
        }
    print(
        json.dumps({"nodes": args.nodes, "pods": args.pods, "seeds": args.seeds, "median": summary}, indent=2)
    )


if __name__ == "__main__":
    main()
