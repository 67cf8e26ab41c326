"""The performance guard: reduced runs of the main benchmarks, compared with a recorded baseline.

    python benchmarks/guard.py            # compare with benchmarks/guard_baseline.json; exit 1 if moved
    python benchmarks/guard.py --record   # write the figures of this run as the new baseline

It runs, in a few minutes on the project's 2-core machine, reduced versions of

- the decision (throughput.py --in-process: 1,000 nodes, 3,000 pods, three runs);
- gangs: gang.py's gangs of 8 on its 5,000 nodes in 10 zones placed by the core in-process (150
  gangs, three runs), and gang.py itself, full path over HTTP (1,000 nodes, 300 gangs) for the
  scheduler's peak memory;
- memory (memory.py, full path: 1,000 nodes, 8,000 pods of which 7,000 bound, keep 2,000, two churn
  rounds), and tracemalloc bytes per pod in the scheduler's cache and at a forecast's peak;
- the simulator (simulate_speed.py's `ai-scheduler simulate`, placement mode inflated to 130%, two
  runs, which must place the same pods);
- the work counts of budgets.py (plugin calls, Framework passes, tenant resolutions per attempt),

each through the benchmark's own functions, and prints per figure the baseline, the value now, their
ratio and OK or MOVED. Three kinds of figures:

- time, as a ratio to a fixed reference computation (pure Python and small numpy operations, about
  the scheduler's mix) timed in this process right before and right after the benchmark (median of
  several repeats each), so that a machine that is slower, or busier, for both does not move it; in
  mref, thousandths of the reference's time (a decision of 2 mref takes 0.2% of the reference). All
  of it is CPU time (the reference's, a decision's or gang attempt's in this process, the CPU time of
  the scheduler process of gang.py or of `ai-scheduler simulate`), not wall time: on a shared machine
  other work delays a process by whole time slices, which wall time counts and CPU time does not;
- memory (MiB of resident memory, bytes per pod): absolute, with a tolerance of a few percent;
- counts: exactly reproducible from the seed, so a tolerance of 0.

A figure MOVED when it is further than its tolerance from the baseline in either direction: worse is a
regression; better should be recorded (`--record`), or a later regression back to the old figure
would pass unseen. The exit status is 1 when anything moved. Different Python or numpy versions from
the baseline's are said first: time ratios may then move for that reason alone.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import budgets  # noqa: E402
import gang  # noqa: E402
import memory  # noqa: E402
import simulate_speed  # noqa: E402
import throughput  # noqa: E402
from common import bench_pod, cpu_count, kwok_node  # noqa: E402

from ai_scheduler.scheduler.framework.runtime import Framework  # noqa: E402
from ai_scheduler.scheduler.gang import GangScheduler  # noqa: E402
from ai_scheduler.trace import openb  # noqa: E402

BASELINE = HERE / "guard_baseline.json"
SEED = 0
REFERENCE_REPEATS = 7
RUNS = 3  # runs of a timed benchmark; the median is kept


@dataclass(frozen=True, slots=True)
class Figure:
    name: str
    unit: str
    tolerance: float  # relative: 0.25 is 25% either way; 0 for exact counts


# Tolerances: time ratios vary run to run on a shared machine by about 10% (the reference cancels the
# machine's speed, not all of its noise); the full-path figures (scheduler in its own process) more.
# Memory varies by a few percent with the allocator; counts do not vary.
FIGURES = [
    Figure("decision.p50_mref", "mref", 0.25),
    Figure("decision.mean_mref", "mref", 0.30),
    Figure("gang.attempt_mref", "mref", 0.25),
    Figure("gang.daemon_cpu_per_gang_mref", "mref", 0.30),
    Figure("gang.scheduler_peak_rss_mib", "MiB", 0.10),
    Figure("memory.rss_at_scale_mib", "MiB", 0.10),
    Figure("memory.rss_after_churn_mib", "MiB", 0.10),
    Figure("memory.cache_bytes_per_pod", "B/pod", 0.05),
    Figure("memory.forecast_peak_bytes_per_pod", "B/pod", 0.10),
    Figure("simulate.placement_cpu_mref", "mref", 0.25),
    Figure("simulate.placement_placed", "pods", 0.0),
    Figure("simulate.placement_gpu_alloc", "share", 0.0),
    *(
        Figure(f"{kind}.{count}", "/att.", 0.0)
        for kind in ("decision_counts", "gang_counts")
        for count in ("framework_schedule", "filter_runs", "prefilter_runs", "score_runs", "feasible_rows",
                      "tenant_of", "tenant_resolve", "nodes_evaluated")
    ),
]
BY_NAME = {figure.name: figure for figure in FIGURES}


# ------------------------------------------------------------------------------------------ reference
def _reference_work() -> int:
    """Fixed work of the scheduler's kind: dict and tuple handling in Python, masks over small arrays."""
    rng = np.random.default_rng(0)
    free = rng.integers(0, 32_000, size=(1000, 4))
    total = 0
    for i in range(900):
        need = np.array([100 * (i % 7), 128 << 20, 0, 1])
        fits = (free >= need).all(axis=1)
        rows = np.flatnonzero(fits)
        total += int(rows[: 10].sum())
        labels = {"app": str(i % 13), "tier": "x", "name": f"pod-{i}"}
        requests: dict[str, int] = {}
        for key in ("cpu", "memory", "pods", "gpu"):
            requests[key] = i * 3 + len(key)
        total += len(sorted(labels.items())) + sum(requests.values())
        for j in range(40):
            total += hash((i, j, "x")) & 7
    return total


def reference_ms(repeats: int = REFERENCE_REPEATS) -> list[float]:
    """The reference computation's CPU times (this process's), ms, one per repeat.

    The cyclic garbage collector is off while it runs: its passes cost in proportion to the objects
    alive, which the benchmark before it leaves more or fewer of, and the reference must not depend on
    what ran before it."""
    times = []
    gc.collect()
    gc.disable()
    try:
        _reference_work()  # warm-up, not counted
        for _ in range(repeats):
            started = time.process_time()
            _reference_work()
            times.append((time.process_time() - started) * 1000)
    finally:
        gc.enable()
    return times


def around(measure: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], float]:
    """Run `measure` between two rounds of the reference; (its result, the reference's median CPU ms)."""
    before = reference_ms()
    result = measure()
    after = reference_ms()
    return result, statistics.median(before + after)


# ------------------------------------------------------------------------------------------ benchmarks
@contextlib.contextmanager
def cpu_timed(owner: Any, name: str, durations: list[float]) -> Iterator[None]:
    """Note the CPU time (ms) of every call of `owner.name` while the block runs; the real one runs."""
    real = getattr(owner, name)

    @functools.wraps(real)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            durations.append((time.process_time() - started) * 1000)

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, real)


def decision() -> dict[str, float]:
    """throughput.py --in-process at 1,000 nodes, 3,000 pods, three runs: the CPU time of each decision
    (Framework.schedule, what that benchmark times by the wall clock), median and mean over all."""
    args = argparse.Namespace(nodes=1000, pods=3000, percentage_of_nodes_to_score=None,
                              resource_score="NodeResourcesGPUAware", tie_break="random")
    durations: list[float] = []

    def runs() -> dict[str, Any]:
        with cpu_timed(Framework, "schedule", durations):
            results = [throughput.in_process(args) for _ in range(RUNS)]
        return {"p50": statistics.median(durations), "mean": statistics.fmean(durations),
                "wall_p50": statistics.median(r["decision_ms"]["p50"] for r in results)}

    result, ref = around(runs)
    return {
        "decision.p50_mref": 1000 * result["p50"] / ref,
        "decision.mean_mref": 1000 * result["mean"] / ref,
        "_decision.cpu_p50_ms": result["p50"],
        "_decision.wall_p50_ms": result["wall_p50"],
        "_decision.reference_cpu_ms": ref,
    }


def _uvloop_run(coroutine: Any) -> Any:
    import uvloop

    return uvloop.run(coroutine)


def gangs_in_process(nodes: int = 5000, count: int = 150, size: int = 8, zones: int = 10) -> dict[str, float]:
    """gang.py's gangs on gang.py's nodes (5,000 in 10 zones), placed by the scheduling core in-process
    (budgets.py's placement run): the CPU time per gang attempt (GangScheduler.schedule, timed by a
    wrapper round it), mean over the attempts of three runs, as gang.py reports its mean (the mean
    moves with the occasional costly attempt, which the median does not see: from df9bcad to the
    baseline's commit the mean went up 43%, the median 22%)."""
    durations: list[float] = []

    def runs() -> dict[str, Any]:
        placed = []
        for _ in range(RUNS):
            objects = budgets.kwok_nodes(nodes, zones), budgets.gang_pods(count, size)
            simulation = budgets.placement(*objects, SEED)
            with cpu_timed(GangScheduler, "schedule", durations):
                result = simulation.run()
            placed.append(sum(1 for outcome in result.pods if outcome.node))
        if placed != [count * size] * RUNS:
            raise RuntimeError(f"gangs in-process: {placed} pods placed, not {count * size} each run")
        return {"ms": statistics.median(durations), "mean_ms": statistics.fmean(durations)}

    result, ref = around(runs)
    return {
        "gang.attempt_mref": 1000 * result["mean_ms"] / ref,
        "_gang.attempt_cpu_mean_ms": result["mean_ms"],
        "_gang.attempt_cpu_p50_ms": result["ms"],
        "_gang.reference_cpu_ms": ref,
    }


def gangs_full_path() -> dict[str, float]:
    """gang.py itself, reduced: the scheduler process's CPU time per gang (from its start to the last
    binding: its start-up, informers, attempts, bindings and whatever else it runs meanwhile, forecasts
    included) against the reference's CPU time, and its peak memory. Its own wall-clock time per attempt
    is shown, not judged: the scheduler shares the machine with the API server and this process, and
    what it waits for them the reference does not see."""
    args = argparse.Namespace(nodes=1000, gangs=300, size=8, zones=10, scheduler_name="ai-scheduler",
                              timeout=300.0, backend="sim")
    result, ref = around(lambda: _uvloop_run(gang.run(args)))
    if result["gangs_complete"] != args.gangs:
        raise RuntimeError(f"gang.py: {result['gangs_complete']} of {args.gangs} gangs complete")
    return {
        "gang.daemon_cpu_per_gang_mref": 1000 * result["scheduler_cpu_ms_per_gang"] / ref,
        "gang.scheduler_peak_rss_mib": result["scheduler_peak_rss_mib"],
        "_gang.daemon_cpu_ms_per_gang": result["scheduler_cpu_ms_per_gang"],
        "_gang.daemon_attempt_ms": result["mean_ms_per_gang_attempt"],
        "_gang.daemon_attempt_mref": 1000 * result["mean_ms_per_gang_attempt"] / ref,
        "_gang.daemon_gangs_per_s": result["gangs_per_s_from_ready"],
        "_gang.daemon_reference_cpu_ms": ref,
    }


def memory_full_path() -> dict[str, float]:
    args = argparse.Namespace(nodes=1000, pods=8000, bound=7000, keep=2000, rounds=2, timeout=600.0,
                              json=True, forecast_seconds=60.0)  # memory.py's defaults: forecasts on
    result = _uvloop_run(memory.run(args))
    return {
        "memory.rss_at_scale_mib": result["scale"]["rss_mib"],
        "memory.rss_after_churn_mib": result["rounds"][-1]["rss_mib"],
    }


def memory_traced(nodes: int = 1000, pods: int = 10000) -> dict[str, float]:
    """tracemalloc: bytes per pod the scheduler's cache holds (bound pods, as the informer hands them
    over), and the peak of one forecast over that state, per pod (with some pods waiting, as in a
    daemon that forecasts)."""
    from ai_scheduler.cache.records import PodRecord
    from ai_scheduler.config import default_config
    from ai_scheduler.tracesim.engine import Simulation
    from ai_scheduler.tracesim.forecast import forecast

    core = Simulation(default_config(), [], [], seed=SEED).core
    for i in range(nodes):
        core.handlers.on_node_event("ADDED", kwok_node(f"bench-node-{i}"))
    objects = []
    for i in range(pods):
        obj = bench_pod(f"pod-{i}", "another-scheduler" if i % 10 else "ai-scheduler")
        obj["metadata"] |= {"uid": f"uid-{i}", "resourceVersion": "1",
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
        if i % 10:
            obj["spec"]["nodeName"] = f"bench-node-{i % nodes}"
        objects.append(obj)
    core.start()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for obj in objects:
            core.handlers.pod_event("ADDED", PodRecord.from_api(obj))
        cached = tracemalloc.get_traced_memory()[0] - before
        objects.clear()
        tracemalloc.reset_peak()
        at_start = tracemalloc.get_traced_memory()[0]
        made = forecast(core, seed=SEED)
        peak = tracemalloc.get_traced_memory()[1] - at_start
    finally:
        tracemalloc.stop()
    if len(core.cache.pods) != pods:
        raise RuntimeError(f"the cache holds {len(core.cache.pods)} pods, not {pods}")
    return {
        "memory.cache_bytes_per_pod": round(cached / pods),
        "memory.forecast_peak_bytes_per_pod": round(peak / pods),
        "_memory.forecast_starts": len(made.starts),
    }


def simulate() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        cluster, workload = openb.write(folder, SEED)
        summary = folder / "summary.json"

        def run() -> dict[str, Any]:
            cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall, engine, _pods = simulate_speed.timed_run(
                cluster, workload, summary, "--mode", "placement", "--inflate", "1.3", "--seed", str(SEED)
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu_s = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
            summary_figures: dict[str, Any] = orjson.loads(summary.read_bytes())
            return {"wall": wall, "engine": engine, "cpu": cpu_s} | summary_figures

        def runs() -> dict[str, Any]:
            results = [run() for _ in range(2)]
            for other in results[1:]:
                if (other["placed"], other["gpu_alloc_final"]) != (results[0]["placed"],
                                                                   results[0]["gpu_alloc_final"]):
                    raise RuntimeError("two simulations with one seed placed differently")
            times = {key: statistics.median(r[key] for r in results) for key in ("wall", "engine", "cpu")}
            return results[0] | times

        result, ref = around(runs)
    return {
        "simulate.placement_cpu_mref": 1000 * result["cpu"] * 1000 / ref,
        "simulate.placement_placed": result["placed"],
        "simulate.placement_gpu_alloc": round(result["gpu_alloc_final"], 4),
        "_simulate.placement_s": result["engine"],
        "_simulate.wall_s": result["wall"],
        "_simulate.cpu_s": result["cpu"],
        "_simulate.reference_cpu_ms": ref,
    }


def counts() -> dict[str, float]:
    figures: dict[str, float] = {}
    for kind, run in (("decision_counts", budgets.decision_counts), ("gang_counts", budgets.gang_counts)):
        result = run(seed=SEED)
        per = result["per_attempt"]
        for name in ("framework_schedule", "filter_runs", "prefilter_runs", "score_runs", "feasible_rows",
                     "tenant_of", "tenant_resolve"):
            figures[f"{kind}.{name}"] = per.get(name, 0)
        figures[f"{kind}.nodes_evaluated"] = result["nodes_evaluated_per_attempt"]
    return figures


STEPS: list[tuple[str, Callable[[], dict[str, float]]]] = [
    ("counts", counts),
    ("decision", decision),
    ("memory (tracemalloc)", memory_traced),
    ("simulate", simulate),
    ("gang (in-process)", gangs_in_process),
    ("gang (full path)", gangs_full_path),
    ("memory (full path)", memory_full_path),
]


# ------------------------------------------------------------------------------------------ comparing
def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                             text=True, check=True).stdout.strip()
        # Changes to what the figures measure (the package, the benchmarks), not to docs or tests.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                "../ai_scheduler", ".", "../pyproject.toml"], cwd=HERE,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out + ("+changes" if dirty else "")


def environment() -> dict[str, Any]:
    return {
        "commit": _git_commit(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": f"{platform.machine()}, {cpu_count()} cores",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def verdict(figure: Figure, baseline: float | None, now: float) -> tuple[str, str]:
    """(ratio text, OK / MOVED and which way)."""
    if baseline is None:
        return "", "NEW (not in the baseline)"
    if baseline == now:
        return "1.000", "OK"
    ratio = now / baseline if baseline else float("inf")
    if abs(ratio - 1) <= figure.tolerance:
        return f"{ratio:.3f}", "OK"
    way = "worse" if now > baseline else "better: record it (--record)"
    if figure.unit in ("pods", "share"):
        way = "changed"  # a simulation's outcome: neither way is better in itself
    return f"{ratio:.3f}", f"MOVED ({way})"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() or abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}"


def compare(now: dict[str, float], baseline: dict[str, Any]) -> int:
    """Print the table; how many figures moved."""
    recorded = baseline.get("figures", {})
    env = baseline.get("environment", {})
    here = environment()
    for key in ("python", "numpy"):
        if env.get(key) and env[key] != here[key]:
            print(f"note: the baseline was recorded with {key} {env[key]}, this is {here[key]}: "
                  "time ratios may move for that alone")
    print(f"baseline: commit {env.get('commit', '?')}, Python {env.get('python', '?')}, "
          f"numpy {env.get('numpy', '?')}, {env.get('date', '?')}")
    if env.get("amended"):
        print(f"amended:  {env['amended']}")
    print(f"now:      commit {here['commit']}, Python {here['python']}, numpy {here['numpy']}")
    print()
    width = max(len(f.name) for f in FIGURES)
    columns = ("unit", 6, "<"), ("baseline", 10, ">"), ("now", 10, ">"), ("ratio", 6, ">"), ("tol", 4, ">")
    print(f"{'figure':<{width}}  " + "  ".join(f"{name:{align}{size}}" for name, size, align in columns)
          + "  verdict")
    moved = 0
    for figure in FIGURES:
        if figure.name not in now:
            continue
        base = recorded.get(figure.name)
        ratio, status = verdict(figure, base, now[figure.name])
        moved += status.startswith("MOVED")
        value = _fmt(now[figure.name])
        print(f"{figure.name:<{width}}  {figure.unit:<6}  {_fmt(base):>10}  {value:>10}  {ratio:>6}  "
              f"{figure.tolerance:>4.0%}  {status}")
    return moved


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--record", action="store_true", help="write this run's figures as the baseline")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--only", action="append", choices=[name for name, _ in STEPS],
                        help="run only these steps (repeatable); a partial run cannot be recorded")
    args = parser.parse_args()
    if args.record and args.only:
        parser.error("--record needs every step: no --only")
    started = time.monotonic()
    now: dict[str, float] = {}
    for name, step in STEPS:
        if args.only and name not in args.only:
            continue
        step_started = time.monotonic()
        figures = step()
        now.update(figures)
        details = {k[1:]: round(v, 4) for k, v in figures.items() if k.startswith("_")}
        print(f"# {name}: {time.monotonic() - step_started:.1f} s {json.dumps(details)}", flush=True)
    shown = {k: v for k, v in now.items() if not k.startswith("_")}
    if args.record:
        record = {"environment": environment(),
                  "figures": {f.name: round(shown[f.name], 4) for f in FIGURES}}
        args.baseline.write_text(json.dumps(record, indent=2) + "\n")
        print(f"recorded {len(shown)} figures in {args.baseline} ({time.monotonic() - started:.0f} s)")
        return
    baseline = json.loads(args.baseline.read_text()) if args.baseline.exists() else {}
    moved = compare(shown, baseline)
    print(f"\n{moved} figure(s) moved; guard ran {time.monotonic() - started:.0f} s")
    sys.exit(1 if moved else 0)


if __name__ == "__main__":
    main()
