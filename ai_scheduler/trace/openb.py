"""A synthetic workload and cluster shaped like Alibaba's openb trace (the FGD paper's), seeded.

The FGD paper (USENIX ATC'23) replays `openb_pod_list_default.csv` on the 1,213 GPU nodes of
`openb_node_list_gpu_node.csv`. Neither file ships here, so this writes files of the same shape that the
project's trace readers read (`ai_scheduler.trace.read_cluster`, `read_workload`):

- `cluster.csv` (the cluster format of ai_scheduler/trace/cluster.py): 1,213 nodes, 6,212 GPUs and
  about 107,000 vCPU, in the openb models: G2 8-GPU x 549, T4 2-GPU x 387, P100 2-GPU x 131, G3 8-GPU
  x 39, V100M32 8-GPU x 24, V100M16 4-GPU x 40, G1 8-GPU x 9 and A10 (1- and 2-GPU) x 34. The GPUs
  are managed (the scheduler assigns devices and shares); 8-GPU nodes have one NVLink island.
- `workload.csv` (Alibaba v2023 columns, ai_scheduler/trace/alibaba.py): 8,152 pods, of which 13%
  CPU-only, 38% a share of one GPU (0.05-0.9, mostly 0.5 and 0.25 as in openb), 48% one whole GPU and
  the rest 2, 4 and 8 GPUs, the 8-GPU ones with 64 cores or more. Pods arrive in random order (a
  Poisson process), each with a duration; some name the GPU models they accept (`gpu_spec`).

The pod kinds are exact counts (rounded shares of the total), their order and sizes drawn from
`numpy.random.default_rng(seed)`: the same seed writes the same files.

    python -m ai_scheduler.trace.openb --out DIR --seed S
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ai_scheduler.trace.alibaba import COLUMNS
from ai_scheduler.trace.cluster import read_cluster, total_gpus
from ai_scheduler.trace.workload import read_workload

PODS = 8152
CPU_ONLY_SHARE = 0.13
GPU_SHARE_SHARE = 0.38
# Pods of several GPUs (the rest, after CPU-only, shares and one GPU, which take 48%).
MULTI_GPU_PODS = {2: 41, 4: 24, 8: 16}
# Shares of one GPU in thousandths and their weights: openb asks 0.5 and 0.25 most.
SHARES = {500: 30, 250: 15, 100: 8, 200: 7, 300: 7, 400: 6, 600: 6, 700: 5, 750: 4, 800: 4, 900: 4,
          150: 2, 50: 2}
QOS = {"LS": 45, "BE": 25, "Burstable": 25, "Guaranteed": 5}


@dataclass(frozen=True, slots=True)
class Shape:
    """One kind of node: `count` of them named `name-0`.., cpu in cores, memory and GPU memory in GiB."""

    name: str
    count: int
    cpu: int
    memory: int
    gpus: int
    model: str
    gpu_memory: int
    nvlink: int = 0


NODES = (
    Shape("g2", 549, 96, 768, 8, "G2", 32, 8),
    Shape("t4", 387, 96, 384, 2, "T4", 16),
    Shape("p100", 131, 48, 256, 2, "P100", 16),
    Shape("g3", 39, 96, 768, 8, "G3", 32, 8),
    Shape("v100m32", 24, 96, 768, 8, "V100M32", 32, 8),
    Shape("v100m16", 40, 64, 512, 4, "V100M16", 16),
    Shape("g1", 9, 96, 512, 8, "G1", 16, 8),
    Shape("a10-1g", 20, 32, 128, 1, "A10", 24),
    Shape("a10-2g", 14, 32, 256, 2, "A10", 24),
)
CLUSTER_COLUMNS = ("name", "count", "cpu", "memory", "gpus", "gpu_model", "gpu_memory", "nvlink_island")
NODE_COUNT = 1213
GPU_COUNT = 6212


def pod_counts(pods: int = PODS) -> dict[str, int]:
    """Pods of each kind: `cpu`, `share`, `gpu1`, `gpu2`, `gpu4`, `gpu8` (adding up to `pods`)."""
    counts = {"cpu": round(pods * CPU_ONLY_SHARE), "share": round(pods * GPU_SHARE_SHARE)}
    scale = pods / PODS
    counts.update({f"gpu{k}": round(n * scale) for k, n in MULTI_GPU_PODS.items()})
    counts["gpu1"] = pods - sum(counts.values())
    return counts


def write_cluster(path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CLUSTER_COLUMNS)
        for s in NODES:
            writer.writerow([s.name, s.count, s.cpu, f"{s.memory}Gi", s.gpus, s.model, f"{s.gpu_memory}Gi",
                             s.nvlink])


def _choice(rng: np.random.Generator, weights: dict[str, int] | dict[int, int], size: int) -> np.ndarray:
    keys = list(weights)
    p = np.array([weights[k] for k in keys], dtype=np.float64)  # type: ignore[index]
    return np.array(keys)[rng.choice(len(keys), size=size, p=p / p.sum())]


def _models(gpus: int) -> list[str]:
    """Models of the nodes that hold `gpus` GPUs."""
    return sorted({s.model for s in NODES if s.gpus >= gpus})


def workload_rows(seed: int, pods: int = PODS) -> list[list[str]]:
    """The pods as rows of the Alibaba v2023 columns, in arrival order."""
    rng = np.random.default_rng(seed)
    counts = pod_counts(pods)
    kinds = np.concatenate([np.full(n, kind) for kind, n in counts.items()])
    rng.shuffle(kinds)
    arrivals = np.cumsum(rng.exponential(30.0, size=pods)).astype(np.int64)
    durations = np.maximum(rng.lognormal(8.0, 1.5, size=pods), 60).astype(np.int64)
    shares = _choice(rng, SHARES, pods)
    qos = _choice(rng, QOS, pods)
    rows = []
    for i, kind in enumerate(kinds.tolist()):
        gpus = 0 if kind in ("cpu", "share") else int(kind[3:])
        milli = int(shares[i]) if kind == "share" else 1000 if gpus else 0
        if kind == "cpu":
            cores = float(rng.choice([0.5, 1, 2, 4, 8, 16, 32], p=[0.1, 0.2, 0.25, 0.2, 0.15, 0.07, 0.03]))
        elif kind == "share":
            cores = float(rng.choice([2, 4, 6, 8, 12]))
        elif gpus == 1:
            cores = float(rng.choice([4, 8, 12, 16, 32], p=[0.2, 0.35, 0.2, 0.2, 0.05]))
        elif gpus == 8:
            cores = float(rng.choice([64, 72, 80, 88]))
        else:
            cores = gpus * float(rng.choice([6, 8, 10, 12]))
        memory_mib = int(cores * 1024 * rng.choice([2, 3, 4, 6]))
        spec = ""
        if gpus or milli:
            models = _models(max(gpus, 1))
            if rng.random() < 0.1:
                picked = rng.choice(len(models), size=min(2, len(models)), replace=False)
                spec = "|".join(sorted(models[j] for j in picked.tolist()))
        created = int(arrivals[i])
        running = rng.random() < 0.2
        rows.append([
            f"openb-pod-{i:04d}", str(int(cores * 1000)), str(memory_mib), str(max(gpus, 1 if milli else 0)),
            str(milli), spec, str(qos[i]), "Running" if running else "Succeeded", str(created),
            str(created + int(durations[i])), str(created),
        ])
    return rows


def write_workload(path: Path, seed: int, pods: int = PODS) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        writer.writerows(workload_rows(seed, pods))


def write(out: Path, seed: int, pods: int = PODS) -> tuple[Path, Path]:
    """Write `cluster.csv` and `workload.csv` into `out` (made if missing); their paths."""
    out.mkdir(parents=True, exist_ok=True)
    cluster, workload = out / "cluster.csv", out / "workload.csv"
    write_cluster(cluster)
    write_workload(workload, seed, pods)
    return cluster, workload


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for cluster.csv and workload.csv")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pods", type=int, default=PODS)
    args = parser.parse_args()
    cluster, workload = write(args.out, args.seed, args.pods)
    nodes = read_cluster(cluster)
    jobs = read_workload(workload)
    cpu = sum(n.cpu for n in nodes) // 1000
    print(f"{cluster}: {len(nodes)} nodes, {total_gpus(nodes)} GPUs, {cpu} vCPU")
    print(f"{workload}: {len(jobs.jobs)} pods, {len(jobs.problems)} rows not read")


if __name__ == "__main__":
    main()
