"""A synthetic GPU training history shaped like the Philly and Helios traces, seeded.

Microsoft's Philly (Jeon et al., ATC'19) and SenseTime's Helios (Hu et al., SC'21) traces describe
deep-learning clusters whose jobs have heavy-tailed run times (most last minutes, a few days), whose
users submit the same kinds of jobs again and again (per-user regularity, which makes run times
predictable from history), and whose users' own estimates are poor (a round hour or day, or off by a
large factor). Neither trace ships here; this writes files of that shape for the project's readers:

- `cluster.csv` (ai_scheduler/trace/cluster.py): `nodes` nodes of 8 GPUs, 64 cores and 512 GiB;
- `workload.csv` (the generic format, ai_scheduler/trace/generic.py): `jobs` jobs of 1, 2, 4 or 8
  GPUs (a few of 16, as gangs of two 8-GPU pods), arriving as a Poisson process whose rate loads the
  cluster to about `load` of its GPU time. Each of `users` users (in groups of four) has two to five job
  kinds, each a name stem, a GPU count and a typical run time drawn log-normally (median ~20 min, a
  tail to days); a job's run time is its kind's typical one times log-normal noise (sigma 0.5). Its
  `estimate` is missing for 40% of jobs, rounded up to 1 h, 4 h, 12 h or 24 h for 30%, and the true
  run time times a factor between 1/3 and 5 for the rest.

The same seed writes the same files.

    python -m ai_scheduler.trace.helios --out DIR --seed S [--jobs N] [--nodes N] [--load 0.95]
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ai_scheduler.trace.generic import COLUMNS

ROUND_ESTIMATES = (3600.0, 4 * 3600.0, 12 * 3600.0, 24 * 3600.0)
KIND_STEMS = ("resnet", "bert", "gpt", "vit", "detr", "wav2vec", "t5", "unet", "clip", "moe")
GPU_CHOICES = (1, 2, 4, 8, 16)
GPU_WEIGHTS = (0.45, 0.2, 0.15, 0.15, 0.05)


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of job one user runs again and again."""

    stem: str
    gpus: int
    typical: float  # seconds


def _kinds(rng: np.random.Generator, user: int) -> list[Kind]:
    kinds = []
    for k in range(int(rng.integers(2, 6))):
        stem = f"{KIND_STEMS[int(rng.integers(len(KIND_STEMS)))]}-u{user}k{k}"
        gpus = int(rng.choice(GPU_CHOICES, p=GPU_WEIGHTS))
        typical = float(np.clip(rng.lognormal(np.log(1200.0), 1.6), 60.0, 4 * 86400.0))
        kinds.append(Kind(stem, gpus, typical))
    return kinds


def _estimate(rng: np.random.Generator, duration: float) -> str:
    draw = rng.random()
    if draw < 0.4:
        return ""
    if draw < 0.7:
        return f"{int(next((r for r in ROUND_ESTIMATES if r >= duration), ROUND_ESTIMATES[-1]))}s"
    return f"{max(int(duration * float(np.exp(rng.uniform(np.log(1 / 3), np.log(5))))), 1)}s"


def write(out: Path, seed: int, *, jobs: int = 3000, nodes: int = 32, users: int = 24,
          load: float = 0.95) -> tuple[Path, Path]:
    """Write `cluster.csv` and `workload.csv` into `out`; their paths."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    cluster = out / "cluster.csv"
    with cluster.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["name", "count", "cpu", "memory", "gpus", "gpu_model", "gpu_memory", "managed"])
        writer.writerow(["gpu", nodes, 64, "512Gi", 8, "A100", "80Gi", "true"])
    kinds = [_kinds(rng, user) for user in range(users)]
    activity = rng.dirichlet(np.ones(users) * 0.7)  # a few users submit most jobs
    rows: list[tuple[int, Kind, float]] = []
    for _ in range(jobs):
        user = int(rng.choice(users, p=activity))
        kind = kinds[user][int(rng.integers(len(kinds[user])))]
        duration = float(np.clip(kind.typical * rng.lognormal(0.0, 0.5), 30.0, 7 * 86400.0))
        rows.append((user, kind, duration))
    gpu_seconds = sum(kind.gpus * duration for _, kind, duration in rows)
    span = gpu_seconds / (nodes * 8 * load)  # the arrival window that loads the cluster to `load`
    submits = np.sort(rng.uniform(0.0, span, size=jobs))
    workload = out / "workload.csv"
    with workload.open("w", newline="") as stream:
        rows_out = csv.DictWriter(stream, fieldnames=list(COLUMNS), extrasaction="raise")
        rows_out.writeheader()
        for index, ((user, kind, duration), submit) in enumerate(zip(rows, submits, strict=True)):
            pods = 2 if kind.gpus > 8 else 1
            estimate = _estimate(rng, duration)
            for part in range(pods):
                rows_out.writerow({
                    "name": f"{kind.stem}-{index:05d}" + (f"-{part}" if pods > 1 else ""),
                    "submit_time": f"{submit:.1f}", "duration": f"{duration:.0f}",
                    "cpu": str(min(kind.gpus, 8) * 6), "memory": f"{min(kind.gpus, 8) * 48}Gi",
                    "gpus": str(min(kind.gpus, 8)),
                    "gang": f"{kind.stem}-{index:05d}" if pods > 1 else "",
                    "gang_size": str(pods) if pods > 1 else "",
                    "user": f"user-{user}", "group": f"group-{user // 4}", "estimate": estimate,
                    "task_type": "training", "workload_class": kind.stem.split("-")[0],
                    "status": "succeeded",
                })
    return cluster, workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--load", type=float, default=0.95)
    args = parser.parse_args()
    cluster, workload = write(args.out, args.seed, jobs=args.jobs, nodes=args.nodes, load=args.load)
    print(f"wrote {cluster} and {workload}")


if __name__ == "__main__":
    main()
