"""GPU-sharing packing as the FGD paper measures it: placement mode, inflated to 130% of the GPUs.

The trace simulator (`ai_scheduler.tracesim`) places an openb-shaped workload
(`ai_scheduler.trace.openb`: 1,213 nodes, 6,212 GPUs, 8,152 pods) once per pod in file order,
inflated with random clones until the GPU requests reach 130% of the capacity, under five profiles
that differ only in their scores:

- random: no score, ties broken at random (a feasible node drawn uniformly);
- best-fit: GPUBinpack alone (gpushare's rule: the device with the least room that fits);
- default: the shipped default profile;
- fgd: GPUFragmentation alone (FGD as published: the node where the expected fragmentation grows
  least, against the learned distribution of pod shapes);
- fgd-coupled: GPUFragmentationCoupled (FGD with cpu and memory kept beside free GPUs) with
  GPUBinpack as the device choice's companion, ties by node order.

For each seed (a new workload and a new inflation) it reports FGD's `alloc@100` and `alloc@130`
(allocated GPU thousandths over capacity, at the samples where the arrived GPU request is 100% and
130% of the capacity), the pods refused, and the run's wall time; then the median over seeds.

    python benchmarks/fgd_packing.py --seeds 10
    python benchmarks/fgd_packing.py --seeds 3 --policies default fgd fgd-coupled
    python benchmarks/fgd_packing.py --seeds 10 --nvlink-island 4

`--nvlink-island 4` splits the 8-GPU nodes into two NVLink islands of four (as on DGX-1-like
machines; openb's own nodes are one island each) and also reports, of the multi-GPU pods placed, the
share whose devices span islands (reaching each other over PCIe only).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ai_scheduler.config import Config, default_config, parse_config
from ai_scheduler.trace import inflate, openb, read_cluster, read_workload, total_gpus
from ai_scheduler.tracesim.engine import Simulation, workload_fragmentation
from ai_scheduler.tracesim.metrics import summarize
from ai_scheduler.tracesim.records import Mode, SimResult

DEFAULT_FILTERS = list(default_config().profiles[0].filters)
POLICIES: dict[str, tuple[list[dict[str, Any]], str]] = {
    "random": ([], "random"),
    "best-fit": ([{"name": "GPUBinpack", "weight": 1}], "random"),
    "default": ([], "default"),
    "fgd": ([{"name": "GPUFragmentation", "weight": 1}], "random"),
    "fgd-coupled": (
        [{"name": "GPUFragmentationCoupled", "weight": 10}, {"name": "GPUBinpack", "weight": 1}],
        "nodeOrder",
    ),
}


def policy_config(name: str) -> Config:
    scores, tie_break = POLICIES[name]
    if tie_break == "default":
        return default_config()
    return parse_config({
        "profiles": [{"filters": DEFAULT_FILTERS, "scores": scores}],
        "scheduling": {"tieBreak": tie_break},
    })


def split_share(result: SimResult, island: dict[str, int]) -> float | None:
    """Of the placed pods of two or more GPUs, the share whose devices span NVLink islands (`island`:
    devices per island by node name; None when no multi-GPU pod was placed)."""
    multi = [p for p in result.pods if len(p.devices) >= 2]
    if not multi:
        return None
    return sum(1 for p in multi if len({d // island[p.node] for d in p.devices}) > 1) / len(multi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--inflate", type=float, default=1.3)
    parser.add_argument("--policies", nargs="+", choices=sorted(POLICIES), default=list(POLICIES))
    parser.add_argument("--nvlink-island", type=int, default=0,
                        help="devices per NVLink island on the 8-GPU nodes (default: as openb, one island)")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in args.policies}
    with tempfile.TemporaryDirectory() as directory:
        for seed in range(args.seeds):
            cluster, workload = openb.write(Path(directory) / str(seed), seed)
            nodes = read_cluster(cluster)
            if args.nvlink_island:
                nodes = [replace(n, nvlink_island=args.nvlink_island) if n.gpus == 8 else n for n in nodes]
            island = {n.name: n.nvlink_island or n.gpus or 1 for n in nodes}
            jobs = inflate(read_workload(workload).jobs, total_gpus(nodes), args.inflate, seed=seed)
            measure = workload_fragmentation(jobs, nodes)
            for name in args.policies:
                result = Simulation(policy_config(name), nodes, jobs, Mode.PLACEMENT, seed=seed,
                                    config_name=name, fragmentation=measure).run()
                figures = summarize(result).as_dict()
                row = {"policy": name, "seed": seed, "pods": len(jobs),
                       "alloc_at_100": figures["alloc_at_100"], "alloc_at_130": figures["alloc_at_130"],
                       "frag_at_130": figures["frag_at_130"], "failed": figures["failed"],
                       "split_multi_gpu": split_share(result, island),
                       "wall_s": round(result.wall_seconds, 2)}
                rows[name].append(row)
                print(orjson.dumps(row).decode(), flush=True)
    print(f"\nPython {platform.python_version()}, numpy {np.__version__}; {args.seeds} seeds, "
          f"inflated to {args.inflate:.0%}; medians:")
    print(f"{'policy':<12} {'alloc@100':>10} {'alloc@130':>10} {'frag@130':>9} {'failed':>7} "
          f"{'split':>7} {'wall s':>7}")
    for name, runs in rows.items():
        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(float(r[key] or 0.0) for r in runs)
        print(f"{name:<12} {median('alloc_at_100'):>10.2%} {median('alloc_at_130'):>10.2%} "
              f"{median('frag_at_130'):>9.2%} {median('failed'):>7.0f} {median('split_multi_gpu'):>7.2%} "
              f"{median('wall_s'):>7.2f}")


if __name__ == "__main__":
    main()
