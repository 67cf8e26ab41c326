"""Run-time prediction and run-time-aware policies on a Helios-shaped trace (issue 10, points 3 and 6).

For each seed, `ai_scheduler.trace.helios` writes one synthetic history of `2 * --jobs` jobs on `--nodes`
nodes of 8 GPUs (heavy-tailed run times, per-user job kinds, users' estimates missing for 40% of the
jobs, rounded up to 1/4/12/24 h for 30%, off by a factor of 1/3 to 5 for the rest), arriving at
`--load` times the cluster's GPU time over the arrival window (above 1, so that a queue forms). It is
split by submit time: the earlier half is the history a model learns from, the later half (its
submit times shifted to start at 0) is simulated in timed mode, under arms that differ only in
their config and in whether the pods carry the users' estimates:

- fifo: the policy `{waitingTime: 1}` with maxWaitSeconds 10^6 s (tune.py's `FIFO_POLICY`), no
  reservation and no backfill; the pods carry the users' estimates (unused by this policy);
- fifo-strict: the same policy in a StrictFIFO queue (scheduler/strict_fifo.py): no pod starts while
  one ahead of it waits, the papers' FIFO baseline;
- fifo-reserve: the same with the shipped reservation and backfill on (a reference: EASY-backfill-like
  FIFO, whose reservations and backfill read the users' estimates);
- user-estimates: the run-time-aware policy `RUNTIME_POLICY` (shortest estimate first, with aging:
  `{waitingTime: 1, estimatedRuntime: -W}`, maxWaitSeconds `--max-wait`), no reservation and no
  backfill; the pods carry the users' estimates, and a pod with none counts as the longest;
- learned: the same policy, the pods carry no estimate (`estimate=None`), `prediction.model` is a model
  fitted on the history without the estimate feature (the same features at training and serving),
  `prediction.learnOnline: true`, reservation and backfill on (reservations and backfill read the
  prediction's upper quantile);
- learned-no-reserve: learned without reservation and backfill (to tell the two effects apart).

Per arm: the mean and p95 of the pods' JCT (end - submit) and wait (start - submit) (a gang's two pods
count as two, as `summarize` counts pods), the GPU allocation as the time-weighted mean over the
makespan (`gpu_alloc_mean`) and over the arrival window only (`alloc_arrivals`: from the first to the
last submit, while work is arriving, the window where a policy can lose utilisation), the makespan and
the ratio of the mean JCT to fifo's. Then the medians over seeds, and the prediction error table of
point 3 (`prediction.report_table`) on seed 0's history: as `ai-scheduler learn` makes it (the
estimate a feature; the last 20% of the history held out), and for the model arm `learned` uses (no
estimate feature) scored on the simulated half.

    python benchmarks/runtime_policies.py --seeds 3
    python benchmarks/runtime_policies.py --seeds 1 --first-seed 2 --jobs 500 --nodes 8 --load 1.3

A real history instead (`--trace`, a Philly or Helios job list, with `--cluster`, the cluster file):
the model learns from the first `--train-share` (0.7) of its pods by submit time, and the rest, submit
times shifted to start at 0, is simulated on the cluster (the traces' `*_loaded.csv`, sized so that a
queue stands). These traces carry no users' estimates, so arm user-estimates is left out; `--limit N`
simulates only the first N pods of the test part (said in the output: a timed run with a standing
queue of thousands of pods is slow).

    python benchmarks/runtime_policies.py --trace ../shared/traces/philly/philly_gpw.csv \
        --cluster ../shared/traces/philly/philly_loaded.csv
    python benchmarks/runtime_policies.py --trace ../shared/traces/helios/helios_gpw.csv \
        --cluster ../shared/traces/helios/helios_loaded.csv --limit 1500

Our FIFO (`fifo`) is not strict: a pod that fits may start while an older one waits (the queue is
tried in order, and each pod that fits is placed), as kube-scheduler does; the papers' FIFO baselines
(Helios' QSSF, Tiresias) are strict, as `fifo-strict` is, so ratios against `fifo` are smaller than
theirs. Each arm's ratio is printed against both.

The defaults are small (500 jobs on 8 nodes) because a timed run with a long queue is slow (each
scheduling pass tries every waiting pod): about 40 s per arm and seed on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import sklearn

from ai_scheduler.config import Config, parse_config
from ai_scheduler.prediction import RunTimeModel, evaluate, report_table, split_by_time
from ai_scheduler.trace import TraceJob, helios, read_cluster, read_workload
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.learn import samples_of
from ai_scheduler.tracesim.metrics import summarize
from ai_scheduler.tracesim.records import Mode, SimResult
from ai_scheduler.tracesim.tune import FIFO_POLICY

ARMS = ("fifo", "fifo-strict", "fifo-reserve", "user-estimates", "learned-no-reserve", "learned")
QUANTILE = 0.9


def runtime_policy(weight: float, max_wait: float) -> dict[str, Any]:
    """The run-time-aware policy of arms user-estimates and learned (the config file's form)."""
    return {"weights": {"waitingTime": 1.0, "estimatedRuntime": -weight}, "maxWaitSeconds": max_wait}


def arm_config(arm: str, weight: float, max_wait: float, model: Path | None) -> Config:
    fifo = {"weights": dict(FIFO_POLICY.weights), "maxWaitSeconds": FIFO_POLICY.max_wait_seconds}
    policy = fifo if arm.startswith("fifo") else runtime_policy(weight, max_wait)
    reserve = arm in ("fifo-reserve", "learned")
    data: dict[str, Any] = {
        "policies": {arm: policy}, "activePolicy": arm,
        "scheduling": {"reservation": reserve, "backfill": reserve},
    }
    if arm == "fifo-strict":  # the papers' FIFO: the queue's head blocks it (no overtaking)
        data["queues"] = [{"name": "default", "queueingStrategy": "StrictFIFO"}]
    if arm.startswith("learned"):
        data["prediction"] = {"model": str(model), "learnOnline": True}
    return parse_config(data)


def alloc_over_arrivals(result: SimResult) -> float | None:
    """The time-weighted mean GPU allocation from the first submit to the last (see the docstring)."""
    if not result.samples or not result.pods or result.capacity_gpu_milli <= 0:
        return None
    first = min(p.submit for p in result.pods)
    last = max(p.submit for p in result.pods)
    samples = sorted(result.samples, key=lambda s: s.time)
    times = np.array([s.time for s in samples], dtype=np.float64)
    values = np.array([s.allocated_gpu_milli for s in samples], dtype=np.float64)
    # the state holds from each sample's time to the next: clip the steps to [first, last]
    starts = np.clip(times, first, last)
    ends = np.clip(np.append(times[1:], last), first, last)
    spans = ends - starts
    if spans.sum() <= 0:
        return None
    return float(np.dot(values, spans) / spans.sum() / result.capacity_gpu_milli)


def split_history(jobs: list[TraceJob], share: float = 0.5) -> tuple[list[TraceJob], list[TraceJob]]:
    """The earlier `share` of the jobs by submit time (a gang's pods stay together: the cut is a submit
    time), and the rest with its submit times shifted to start at 0."""
    ordered = sorted(jobs, key=lambda job: (job.submit_time, job.name))
    cut = ordered[min(int(len(ordered) * share), len(ordered) - 1)].submit_time
    history = [job for job in ordered if job.submit_time < cut]
    later = [job for job in ordered if job.submit_time >= cut]
    return history, [dataclasses.replace(job, submit_time=job.submit_time - cut) for job in later]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first seed (seeds first-seed .. first-seed + seeds - 1)")
    parser.add_argument("--jobs", type=int, default=500, help="jobs simulated (as many again are history)")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--load", type=float, default=1.3,
                        help="GPU time requested over the arrival window, over the capacity")
    parser.add_argument("--weight", type=float, default=200.0,
                        help="the estimatedRuntime weight W of the run-time-aware policy")
    parser.add_argument("--max-wait", type=float, default=86400.0,
                        help="its maxWaitSeconds (the waiting time that earns the full waitingTime weight)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--trace", metavar="FILE",
                        help="a real job list (Philly or Helios) instead of the generator")
    parser.add_argument("--format", default="auto",
                        help="the trace's format (default: told from its columns)")
    parser.add_argument("--cluster", metavar="FILE", help="with --trace: the cluster file it runs on")
    parser.add_argument("--train-share", type=float, default=0.7,
                        help="with --trace: the earlier share of the pods (by submit time) the model "
                        "learns from")
    parser.add_argument("--limit", type=int, default=0,
                        help="with --trace: simulate only the first N pods of the test part (0: all)")
    args = parser.parse_args()
    if args.trace and not args.cluster:
        parser.error("--trace needs --cluster")
    arms = [a for a in args.arms if not (args.trace and a == "user-estimates")]  # no estimates in the traces
    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    tables: list[str] = []
    seeds = range(args.first_seed, args.first_seed + (1 if args.trace else args.seeds))
    with tempfile.TemporaryDirectory() as directory:
        for seed in seeds:
            out = Path(directory) / str(seed)
            out.mkdir(parents=True, exist_ok=True)
            if args.trace:
                nodes = read_cluster(args.cluster)
                history, simulated = split_history(list(read_workload(args.trace, args.format).jobs),
                                                   args.train_share)
                if args.limit and len(simulated) > args.limit:  # cut at a submit time: gangs stay whole
                    last = sorted(job.submit_time for job in simulated)[args.limit - 1]
                    simulated = [job for job in simulated if job.submit_time <= last]
            else:
                cluster, workload = helios.write(out, seed, jobs=2 * args.jobs, nodes=args.nodes,
                                                 load=args.load)
                nodes = read_cluster(cluster)
                history, simulated = split_history(list(read_workload(workload).jobs))
            samples, _ = samples_of(history)
            blind = [dataclasses.replace(s, features=dataclasses.replace(s.features, estimate=None))
                     for s in samples]
            model = RunTimeModel.fit([s.features for s in blind], [s.duration for s in blind], QUANTILE,
                                     seed=seed)
            model_path = out / "model.npz"
            model.save(str(model_path))
            if seed == 0:
                _, report = evaluate(*split_by_time(samples, 0.2), QUANTILE, seed=seed)
                tables.append("as `ai-scheduler learn` reports it (the users' estimate a feature), on the "
                              "history:\n" + report_table(report))
                later, _ = samples_of(simulated)
                later_blind = [dataclasses.replace(s, features=dataclasses.replace(s.features, estimate=None))
                               for s in later]
                _, report = evaluate(blind, later_blind, QUANTILE, model=model)
                tables.append("the model of arm `learned` (no estimate feature), fitted on the whole "
                              "history, on the simulated jobs:\n" + report_table(report))
            fifo_jct: float | None = None
            strict_jct: float | None = None
            for arm in arms:
                learned = arm.startswith("learned")
                jobs = [dataclasses.replace(j, estimate=None) for j in simulated] if learned else simulated
                config = arm_config(arm, args.weight, args.max_wait, model_path)
                # Queueing hints and the equivalence of identical pods: the same placements as retrying
                # every pod on every event (tests/unit/queue/test_queueing_hints.py), at a fraction of the
                # attempts.
                result = Simulation(config, nodes, jobs, Mode.TIMED, seed=seed, config_name=arm,
                                    queueing_hints=True).run()
                s = summarize(result)
                if arm == "fifo":
                    fifo_jct = s.jct.mean
                elif arm == "fifo-strict":
                    strict_jct = s.jct.mean
                row = {"arm": arm, "seed": seed, "pods": s.pods, "finished": s.finished,
                       "never_placed": s.never_placed,
                       "jct_mean": s.jct.mean, "jct_p95": s.jct.p95,
                       "wait_mean": s.wait.mean, "wait_p95": s.wait.p95,
                       "gpu_alloc_mean": s.gpu_alloc_mean, "alloc_arrivals": alloc_over_arrivals(result),
                       "gpu_util": s.gpu_util, "makespan": s.makespan, "backfilled": s.backfilled,
                       "jct_vs_fifo": s.jct.mean / fifo_jct if fifo_jct and s.jct.mean is not None else None,
                       "jct_vs_strict": (s.jct.mean / strict_jct
                                         if strict_jct and s.jct.mean is not None else None),
                       "wall_s": round(result.wall_seconds, 2)}
                rows[arm].append(row)
                print(orjson.dumps(row).decode(), flush=True)
    if args.trace:
        limited = f" (the first {args.limit} of the rest only)" if args.limit else " (all the rest)"
        workload_text = (f"{args.trace} on {args.cluster}: learnt from the first {args.train_share:.0%} of "
                         f"the pods by submit time, {len(simulated)} pods simulated{limited}")
    else:
        workload_text = (f"{args.seeds} seeds, {args.jobs} jobs simulated after {args.jobs} of history, "
                         f"{args.nodes} nodes x 8 GPUs, load {args.load}")
    print(f"\nPython {platform.python_version()}, numpy {np.__version__}, "
          f"scikit-learn {sklearn.__version__}; {workload_text}; "
          f"policy {runtime_policy(args.weight, args.max_wait)}; medians:")
    print(f"{'arm':<15} {'JCT mean':>9} {'JCT p95':>9} {'wait mean':>10} {'wait p95':>9} "
          f"{'vs fifo':>8} {'vs strict':>9} "
          f"{'alloc':>7} {'alloc arr':>9} {'makespan':>9} {'backfill':>8}")
    for arm, runs in rows.items():
        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(float(r[key] or 0.0) for r in runs)

        def ratio(key: str, runs: list[dict[str, Any]] = runs) -> str:  # "-": that baseline did not run
            values = [float(r[key]) for r in runs if r[key] is not None]
            return f"{statistics.median(values):.2f}" if values else "-"
        print(f"{arm:<15} {median('jct_mean') / 3600:>7.2f} h {median('jct_p95') / 3600:>7.2f} h "
              f"{median('wait_mean') / 3600:>8.2f} h {median('wait_p95') / 3600:>7.2f} h "
              f"{ratio('jct_vs_fifo'):>8} {ratio('jct_vs_strict'):>9} "
              f"{median('gpu_alloc_mean'):>7.2%} "
              f"{median('alloc_arrivals'):>9.2%} "
              f"{median('makespan') / 3600:>7.1f} h {median('backfilled'):>8.0f}")
    for table in tables:
        print("\n" + table)


if __name__ == "__main__":
    main()
