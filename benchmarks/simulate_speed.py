"""How fast `ai-scheduler simulate` runs, start to end, on the openb-shaped cluster (1,213 nodes).

Each run is the command itself in a fresh process (interpreter start, imports, reading the files,
the simulation, the summary), timed from outside; the simulated pods per minute count the pods the
run placed or tried over that whole time, and over the simulation alone (the engine's own clock, from
the cluster's first node to the last pod, as the summary's `wall_seconds`). Two runs per repetition,
side by side:

- placement mode inflated to 130% (about 11,900 pods), the FGD paper's method;
- timed mode over the 8,152 pods with their arrivals and durations.

    python benchmarks/simulate_speed.py --repeat 3
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from ai_scheduler.trace import openb


def timed_run(cluster: Path, workload: Path, summary: Path, *extra: str) -> tuple[float, float, int]:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ai_scheduler", "simulate", "--cluster", str(cluster),
         "--trace", str(workload), "--summary-json", str(summary), "--no-progress", *extra],
        check=True, stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - started
    figures = orjson.loads(summary.read_bytes())
    return wall, float(figures["wall_seconds"]), int(figures["pods"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    runs = {"placement --inflate 1.3": ["--mode", "placement", "--inflate", "1.3", "--seed", str(args.seed)],
            "timed": ["--mode", "timed"]}
    walls: dict[str, list[float]] = {name: [] for name in runs}
    engine: dict[str, list[float]] = {name: [] for name in runs}
    pods: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as directory:
        cluster, workload = openb.write(Path(directory), args.seed)
        for _ in range(args.repeat):
            for name, extra in runs.items():
                wall, run, count = timed_run(cluster, workload, Path(directory) / "summary.json", *extra)
                walls[name].append(wall)
                engine[name].append(run)
                pods[name] = count
                line = {"run": name, "pods": count, "wall_s": round(wall, 2), "simulation_s": round(run, 2)}
                print(orjson.dumps(line).decode(), flush=True)
    print(f"\nPython {platform.python_version()}, numpy {np.__version__}; 1,213 nodes; "
          f"medians of {args.repeat}:")
    for name, values in walls.items():
        wall, run = statistics.median(values), statistics.median(engine[name])
        print(f"{name:<24} {pods[name]:>6} pods  {wall:6.2f} s start to end "
              f"({pods[name] / wall * 60:>7,.0f} pods/min)  {run:6.2f} s simulating "
              f"({pods[name] / run * 60:>7,.0f} pods/min)")


if __name__ == "__main__":
    main()
