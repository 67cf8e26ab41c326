"""GPU-sharing packing as the FGD paper measures it: placement mode, inflated to 130% of the GPUs.

Two workloads:

- `--trace DIR` (the judge): Alibaba's openb trace as FGD replays it. DIR holds
  `openb_node_list_gpu_node.csv` (read with the project's cluster reader), `openb_pod_list_default.csv`
  and FGD's pod order, `order.py` with `seq_42_51.json`: for each seed (42, 43, .. : `--seeds 10` is
  42..51) order.py writes the pods in FGD's placement order, clones up to 130% of the GPUs included,
  into a temporary folder. Each pod is tried once, in that order, and never leaves. The figures are
  means over the seeds, printed under FGD's published ones for the same seeds.
- without `--trace`: the synthetic openb-shaped workload of `ai_scheduler.trace.openb` (1,213 nodes,
  6,212 GPUs, 8,152 pods), a new one per seed, inflated with our own random clones; medians.

The trace simulator (`ai_scheduler.tracesim`) places the pods once each in file order under
profiles that differ in their scores and tie-breaks (the two defaults and the two coupled-node-order
ones keep the adaptive percentageOfNodesToScore; the others score every feasible node, as FGD's
`percentageOfNodesToScore: 100`):

- random: no score, ties broken at random (a feasible node drawn uniformly; FGD's Random also draws
  the device of a share at random, ours takes the best-fitting one);
- best-fit: GPUBinpack alone (gpushare's rule: the device with the least room that fits; FGD's
  BestFit scores free cpu and GPU together);
- default: the shipped default profile (FGDScoreCoupled 10 as its GPU packing, ties by node order);
- binpack-default: the default before that (GPUBinpack 3, NodeResourcesGPUAware scoring GPU pods too,
  random ties: `common.BINPACK_DEFAULT_SCORES`);
- fgd: FGD as its artifact runs it (`FGDScore`): the target workload's typical pods taken up front
  from the original pods (the simulator hands them to the plugin), the score sigmoid(fragmentation
  decrease in GPUs) x 100 truncated, cpu and memory fit among the filters, and ties to the node that
  comes first in the node list: FGD's simulator runs on a fork of kube-scheduler 1.20.5
  (mental2008/kubernetes v1.20.5-minor, `selectHost`) that breaks ties by the smallest node name, "for
  reproducibility", instead of at random; the openb node list is in name order, our table's order;
- fgd-random-ties: the same with kube-scheduler's own random choice among the best nodes;
- fgd-gpu-filter: FGDScore with no cpu or memory fit among the filters (only the GPU filter, as FGD's
  Open-Gpu-Share filter, which checks GPUs alone): pods may overcommit cpu and memory; ties at random;
- fgd-coupled: GPUFragmentationCoupled (FGD with cpu and memory kept beside free GPUs) with
  GPUBinpack as the device choice's companion, ties by node order;
- coupled-node-order: GPUFragmentationCoupled alone (shapes learned online, nothing up front), ties
  by node order, adaptive percentageOfNodesToScore;
- fgd-coupled-node-order: FGDScoreCoupled alone (FGD's absolute score, not normalised, over the
  coupled measure, shapes learned online: PER_NODE), ties by node order, adaptive
  percentageOfNodesToScore;

For each seed it reports FGD's `alloc@100` and `alloc@130` (allocated GPU thousandths over
capacity, at the samples where the arrived GPU request is 100% and 130% of the capacity), the
fragmentation at the same points (against the original workload's shapes), the pods refused, and the
run's wall time.

    python benchmarks/fgd_packing.py --trace ../shared/traces/openb --seeds 10
    python benchmarks/fgd_packing.py --seeds 10
    python benchmarks/fgd_packing.py --seeds 3 --policies default fgd fgd-coupled
    python benchmarks/fgd_packing.py --seeds 10 --nvlink-island 4

`--residue` also says, per policy and seed, where the GPUs that are not allocated at the end sit:
wholly free devices, and the free part of devices that shares use, by what those devices hold (the
share sizes on one device, e.g. `810` for a device with one 0.81-GPU share and nothing else), the
most wasteful holdings first. On openb at 130% no device is left wholly free; what is left is the
free part beside shares.

    python benchmarks/fgd_packing.py --trace ../shared/traces/openb --seeds 1 --policies default --residue

`--nvlink-island 4` splits the 8-GPU nodes into two NVLink islands of four (as on DGX-1-like
machines; openb's own nodes are one island each) and also reports, of the multi-GPU pods placed, the
share whose devices span islands (reaching each other over PCIe only).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from common import BINPACK_DEFAULT_SCORES, BINPACK_DEFAULT_TIE_BREAK

from ai_scheduler.cache.fragmentation import MILLI
from ai_scheduler.config import Config, default_config, parse_config
from ai_scheduler.trace import inflate, openb, read_cluster, read_workload, total_gpus
from ai_scheduler.trace.cluster import NodeSpec
from ai_scheduler.trace.records import TraceJob
from ai_scheduler.tracesim.engine import Simulation, workload_fragmentation
from ai_scheduler.tracesim.metrics import summarize
from ai_scheduler.tracesim.records import Mode, SimResult

DEFAULT_FILTERS = list(default_config().profiles[0].filters)
POLICIES: dict[str, tuple[list[dict[str, Any]], str]] = {
    "random": ([], "random"),
    "best-fit": ([{"name": "GPUBinpack", "weight": 1}], "random"),
    "default": ([], "default"),
    "binpack-default": (BINPACK_DEFAULT_SCORES, BINPACK_DEFAULT_TIE_BREAK),
    "fgd": ([{"name": "FGDScore", "weight": 1}], "nodeOrder"),
    "fgd-random-ties": ([{"name": "FGDScore", "weight": 1}], "random"),
    "fgd-gpu-filter": ([{"name": "FGDScore", "weight": 1}], "random"),
    "fgd-coupled": (
        [{"name": "GPUFragmentationCoupled", "weight": 10}, {"name": "GPUBinpack", "weight": 1}],
        "nodeOrder",
    ),
    "coupled-node-order": ([{"name": "GPUFragmentationCoupled", "weight": 1}], "nodeOrder"),
    "fgd-coupled-node-order": ([{"name": "FGDScoreCoupled", "weight": 1}], "nodeOrder"),
}


# Profiles whose filters leave out NodeResourcesFit: GPUs only, as FGD's Open-Gpu-Share filter checks.
GPU_FILTER_ONLY = frozenset({"fgd-gpu-filter"})
# Profiles that keep the default's adaptive percentageOfNodesToScore (the others score every node).
ADAPTIVE = frozenset({"coupled-node-order", "fgd-coupled-node-order", "binpack-default"})


def policy_config(name: str) -> Config:
    scores, tie_break = POLICIES[name]
    if tie_break == "default":
        return default_config()
    filters = [f for f in DEFAULT_FILTERS if name not in GPU_FILTER_ONLY or f != "NodeResourcesFit"]
    percentage = 0 if name in ADAPTIVE else 100
    return parse_config({
        "profiles": [{"filters": filters, "scores": scores}],
        "scheduling": {"tieBreak": tie_break, "percentageOfNodesToScore": percentage},
    })


# FGD's published means over seeds 42..51 (alloc@100, alloc@130), from the paper's artifact.
PUBLISHED = {"Random": (0.8630, 0.8747), "DotProd": (0.9062, 0.9085), "GpuClustering": (0.9165, 0.9188),
             "GpuPacking": (0.9178, 0.9200), "BestFit": (0.9286, 0.9308), "FGD": (0.9523, 0.9539)}
FIRST_SEED = 42  # order.py's seeds: 42..51
TRACE_NODES = "openb_node_list_gpu_node.csv"


def trace_workloads(trace: Path, seeds: int, directory: Path) -> Iterator[tuple[int, Path, Path]]:
    """(seed, node list, pod list in FGD's order) per seed, the pod lists written by the trace's own
    order.py into `directory`."""
    chosen = [str(FIRST_SEED + k) for k in range(seeds)]
    subprocess.run([sys.executable, str(trace / "order.py"), str(directory), *chosen], check=True)
    for seed in chosen:
        yield int(seed), trace / TRACE_NODES, directory / f"pods-seed{seed}.csv"


def synthetic_workloads(seeds: int, directory: Path) -> Iterator[tuple[int, Path, Path]]:
    for seed in range(seeds):
        cluster, workload = openb.write(directory / str(seed), seed)
        yield seed, cluster, workload


def prepare(cluster: Path, workload: Path, seed: int, args: argparse.Namespace
            ) -> tuple[list[NodeSpec], list[TraceJob], list[TraceJob]]:
    """The nodes, the jobs to place and the original workload (the jobs before any clone)."""
    nodes = read_cluster(cluster)
    if args.nvlink_island:
        nodes = [replace(n, nvlink_island=args.nvlink_island) if n.gpus == 8 else n for n in nodes]
    jobs = list(read_workload(workload).jobs)
    if args.trace:  # FGD's order, clones included: the originals are the names without a clone suffix
        return nodes, jobs, [job for job in jobs if "-clone-" not in job.name]
    return nodes, inflate(jobs, total_gpus(nodes), args.inflate, seed=seed), jobs


def split_share(result: SimResult, island: dict[str, int]) -> float | None:
    """Of the placed pods of two or more GPUs, the share whose devices span NVLink islands (`island`:
    devices per island by node name; None when no multi-GPU pod was placed)."""
    multi = [p for p in result.pods if len(p.devices) >= 2]
    if not multi:
        return None
    return sum(1 for p in multi if len({d // island[p.node] for d in p.devices}) > 1) / len(multi)


def residue(result: SimResult, nodes: list[NodeSpec], top: int = 8) -> dict[str, Any]:
    """Where the GPUs not allocated at the end sit (see the module): wholly free devices, the free part of
    devices that shares use, and the holdings (share sizes on one device) that leave the most free."""
    held: dict[tuple[str, int], list[int]] = {}
    whole = 0
    for pod in result.pods:
        if not pod.node or not pod.devices:
            continue
        if pod.gpu_milli >= MILLI:
            whole += len(pod.devices)
        else:
            held.setdefault((pod.node, pod.devices[0]), []).append(pod.gpu_milli)
    devices = sum(n.gpus for n in nodes)
    by_holding: dict[str, list[int]] = {}
    for shares in held.values():
        key = "+".join(str(share) for share in sorted(shares, reverse=True))
        by_holding.setdefault(key, []).append(MILLI - sum(shares))
    ranked = sorted(by_holding.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "free_whole_gpus": devices - whole - len(held),
        "free_beside_shares_gpus": round(sum(MILLI - sum(v) for v in held.values()) / MILLI, 2),
        "share_devices": len(held),
        **offline_packing([share for shares in held.values() for share in shares]),
        "holdings": [{"shares": key, "devices": len(free), "free_gpus": round(sum(free) / MILLI, 2)}
                     for key, free in ranked],
    }


def offline_packing(shares: list[int]) -> dict[str, Any]:
    """The same shares packed knowing them all up front: largest first, each onto the device with the
    least free part that holds it (best-fit decreasing), a new device when none does. The free part
    left beside them is what a packing of these shares could leave at best, give or take: a reference,
    not a bound the online placements could reach (they come in FGD's order, one at a time)."""
    free = np.full(len(shares), MILLI + 1, dtype=np.int64)  # MILLI + 1: a device not opened yet
    opened = 0
    for share in sorted(shares, reverse=True):
        room = np.where(free[:opened] >= share, free[:opened], MILLI + 1)
        best = int(room.argmin()) if opened else 0
        if not opened or room[best] > MILLI:
            best, opened = opened, opened + 1
            free[best] = MILLI
        free[best] -= share
    return {"offline_share_devices": opened,
            "offline_free_beside_shares_gpus": round(int(free[:opened].sum()) / MILLI, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, metavar="DIR",
                        help="the openb folder (node list, pod list, order.py): FGD's own workload")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--inflate", type=float, default=1.3, help="synthetic workload only")
    parser.add_argument("--policies", nargs="+", choices=sorted(POLICIES), default=list(POLICIES))
    parser.add_argument("--residue", action="store_true",
                        help="also print where the unallocated GPUs sit at the end (see above)")
    parser.add_argument("--nvlink-island", type=int, default=0,
                        help="devices per NVLink island on the 8-GPU nodes (default: as openb, one island)")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in args.policies}
    with tempfile.TemporaryDirectory() as directory:
        workloads = (trace_workloads(args.trace, args.seeds, Path(directory)) if args.trace
                     else synthetic_workloads(args.seeds, Path(directory)))
        for seed, cluster, workload in workloads:
            nodes, jobs, originals = prepare(cluster, workload, seed, args)
            island = {n.name: n.nvlink_island or n.gpus or 1 for n in nodes}
            measure = workload_fragmentation(originals, nodes)
            for name in args.policies:
                result = Simulation(policy_config(name), nodes, jobs, Mode.PLACEMENT, seed=seed,
                                    config_name=name, fragmentation=measure, target=originals).run()
                figures = summarize(result).as_dict()
                row = {"policy": name, "seed": seed, "pods": len(jobs),
                       "alloc_at_100": figures["alloc_at_100"], "alloc_at_130": figures["alloc_at_130"],
                       "frag_at_100": figures["frag_at_100"], "frag_at_130": figures["frag_at_130"],
                       "failed": figures["failed"], "split_multi_gpu": split_share(result, island),
                       "wall_s": round(result.wall_seconds, 2)}
                rows[name].append(row)
                print(orjson.dumps(row).decode(), flush=True)
                if args.residue:
                    print(orjson.dumps({"policy": name, "seed": seed, **residue(result, nodes)}).decode(),
                          flush=True)
    average = statistics.fmean if args.trace else statistics.median
    what = (f"openb trace, FGD's order for seeds {FIRST_SEED}..{FIRST_SEED + args.seeds - 1}; means"
            if args.trace else f"synthetic openb-shaped workload, inflated to {args.inflate:.0%}; medians")
    print(f"\nPython {platform.python_version()}, numpy {np.__version__}; {args.seeds} seeds, {what}:")
    print(f"{'policy':<14} {'alloc@100':>10} {'alloc@130':>10} {'frag@100':>9} {'frag@130':>9} "
          f"{'failed':>7} {'split':>7} {'wall s':>7}")
    for name, runs in rows.items():
        def stat(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return average(float(r[key] or 0.0) for r in runs)
        print(f"{name:<14} {stat('alloc_at_100'):>10.2%} {stat('alloc_at_130'):>10.2%} "
              f"{stat('frag_at_100'):>9.2%} {stat('frag_at_130'):>9.2%} {stat('failed'):>7.0f} "
              f"{stat('split_multi_gpu'):>7.2%} {stat('wall_s'):>7.2f}")
    if args.trace:
        print("FGD's published figures (its artifact, the same seeds; means):")
        for name, (at_100, at_130) in PUBLISHED.items():
            print(f"{'  ' + name:<14} {at_100:>10.2%} {at_130:>10.2%}")


if __name__ == "__main__":
    main()
