"""GPU packing: the same random GPU workload placed with GPUBinpack versus GPUSpread.

The scheduling core in-process (cache, filters, scores, device choice), on
managed nodes of 8 GPUs x 80 GiB in two NVLink islands. Pods arrive, and some
finish along the way, as on a busy cluster; at the end the benchmark counts
the GPUs left partly used, the share of free GPU memory stranded on them, and
how many whole 8-GPU and 4-GPU (one NVLink island) pods would still fit.

    python benchmarks/gpu_packing.py --nodes 32 --pods 400 --seeds 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

import orjson

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gpus import (
    GPU_COUNT_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPUS_ANNOTATION,
    MANAGED_LABEL,
    UPDATED_ANNOTATION,
)
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import parse_config
from ai_scheduler.log import rfc3339
from ai_scheduler.scheduler.daemon import build_frameworks
from ai_scheduler.scheduler.plugins.gpu import nvlink_islands

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
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
