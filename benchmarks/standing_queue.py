"""The scheduling core under a standing queue: what each departure costs with 10,000 pods waiting.

Issue 21, point 3. A cluster of `--nodes` 8-GPU nodes is filled by one-GPU pods that start at once;
then `--pending` pods arrive that cannot start (one, two, four and eight GPUs, of four users, a few
shapes each) and wait. Over the next simulated minutes `--departures` of the running pods end, one every
two seconds; each departure frees one GPU, which the first waiting one-GPU pod takes, and every other
waiting pod is retried for nothing. That is the daemon's loop under a standing queue (the same core,
driven by the trace simulator instead of watches), measured per departure: the run's wall time past
the same run without departures, over the departures, and the scheduling attempts per departure.

Two arms on the same workload, one after the other in one process (so side by side on a noisy
machine): `retry-all` (every waiting pod retried on every event: the daemon's default) and `hints`
(queueing hints and the equivalence of identical pods, schedule_one.py). Both must place the same pods
on the same nodes at the same times; the benchmark checks it. Reservations are off in both (with
reservations on, no pod gets a hint: scheduler/core.py).

    python benchmarks/standing_queue.py --nodes 1000 --pending 10000 --departures 20
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

from ai_scheduler.config import parse_config
from ai_scheduler.trace import NodeSpec, TraceJob
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.records import Mode, SimResult

GI = 2**30
NEVER = 10.0**7  # seconds: runs past every horizon here
SPACING = 2.0  # seconds between departures
USERS = ("u0", "u1", "u2", "u3")


def workload(nodes: int, pending: int, departures: int) -> list[TraceJob]:
    """The pods that fill the cluster (the first `departures` end one every SPACING seconds), then the
    waiting ones."""
    jobs = [TraceJob(name=f"run-{i}", submit_time=0.0, gpus=1, cpu=4000, memory=16 * GI, user=USERS[i % 4],
                     duration=10.0 + SPACING * i if i < departures else NEVER) for i in range(8 * nodes)]
    shapes = ((1, 4000), (1, 8000), (2, 8000), (4, 16000), (8, 32000))
    for i in range(pending):
        gpus, cpu = shapes[i % len(shapes)]
        jobs.append(TraceJob(name=f"wait-{i}", submit_time=1.0, gpus=gpus, cpu=cpu, memory=16 * GI * gpus,
                             user=USERS[(i // len(shapes)) % 4], duration=NEVER))
    return jobs


def run(nodes: int, jobs: list[TraceJob], departures: int, hints: bool) -> tuple[float, SimResult]:
    cluster = [NodeSpec(name=f"n{i:05d}", cpu=64000, memory=512 * GI, gpus=8, gpu_model="A100-80GB",
                        gpu_memory=80 * GI, managed=True) for i in range(nodes)]
    config = parse_config({"scheduling": {"reservation": False, "backfill": False}})
    horizon = 10.0 + SPACING * departures
    started = time.perf_counter()
    result = Simulation(config, cluster, jobs, Mode.TIMED, queueing_hints=hints, horizon=horizon).run()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--departures", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    full = workload(args.nodes, args.pending, args.departures)
    rows: dict[str, list[tuple[float, int]]] = {"retry-all": [], "hints": []}
    placed: dict[str, list[tuple[str, str | None, float | None]]] = {}
    waiting = 0
    for _ in range(args.repeat):
        for arm, hints in (("retry-all", False), ("hints", True)):
            base, base_result = run(args.nodes, full, 0, hints)
            wall, result = run(args.nodes, full, args.departures, hints)
            attempts = sum(p.attempts for p in result.pods) - sum(p.attempts for p in base_result.pods)
            rows[arm].append(((wall - base) / args.departures, attempts // args.departures))
            placed[arm] = [(p.name, p.node, p.start) for p in result.pods]
            waiting = sum(not p.node for p in result.pods)
            print(f"{arm}: {wall:.2f} s with {args.departures} departures, {base:.2f} s without; "
                  f"{attempts // args.departures} attempts per departure", flush=True)
    if placed["retry-all"] != placed["hints"]:
        raise SystemExit("the arms placed pods differently: the hints changed a decision")
    print(f"\nPython {platform.python_version()}, numpy {np.__version__}; {args.nodes} nodes x 8 GPUs, "
          f"{args.pending} pods waiting ({waiting} still at the end), {args.departures} departures; "
          f"medians of {args.repeat}; the same placements in both arms")
    print(f"{'arm':<10} {'ms per departure':>17} {'attempts per departure':>23}")
    for arm, values in rows.items():
        ms = statistics.median(v[0] for v in values) * 1000
        print(f"{arm:<10} {ms:>17.1f} {statistics.median(v[1] for v in values):>23.0f}")
    median = {arm: statistics.median(v[0] for v in values) for arm, values in rows.items()}
    ratio = median["hints"] / median["retry-all"]
    print(f"hints / retry-all: {ratio:.3f}")


if __name__ == "__main__":
    main()
