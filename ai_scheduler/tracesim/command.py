"""`ai-scheduler simulate`: read a cluster and a trace, run them under one config or two, and report.

One run prints the summary table (metrics.summarize, report.summary_table); `--compare A.yaml B.yaml`
runs both configs on the same workload (the same inflated clones, the same seed) and prints both tables
and their differences. `--events`, `--plots` and `--summary-json` write the JSON-lines event file, the
PNG plots and the summary's figures (for a run under two configs, one file per config, suffixed with
the config's name). A progress bar shows on a terminal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ai_scheduler.config import Config, ConfigError, default_config, load_config
from ai_scheduler.log import JsonLogger
from ai_scheduler.trace import TraceError, inflate, read_cluster, read_workload, total_gpus
from ai_scheduler.trace.records import TraceJob
from ai_scheduler.tracesim.records import Mode, SimResult

if TYPE_CHECKING:
    from ai_scheduler.tracesim.metrics import Summary


def add_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--cluster", metavar="FILE", required=True,
                         help="the cluster: a CSV or YAML node list (see ai_scheduler/trace/cluster.py)")
    command.add_argument("--trace", metavar="FILE", required=True,
                         help="the workload: a CSV trace (generic, Alibaba GPU v2023, Philly or Helios)")
    command.add_argument("--format", default="auto",
                         choices=["auto", "generic", "alibaba", "philly", "helios"],
                         help="the trace's format (default: told from its columns)")
    command.add_argument("--config", metavar="FILE",
                         help="scheduler config (default: the shipped defaults)")
    command.add_argument("--compare", metavar="FILE", nargs=2,
                         help="run two configs on the same workload and print the differences")
    command.add_argument("--mode", choices=[m.value for m in Mode], default=Mode.TIMED.value,
                         help="timed: arrivals and departures on the trace's clock; placement: each pod "
                         "tried once in file order, never leaving (FGD's method) (default: timed)")
    command.add_argument("--inflate", metavar="X", type=float,
                         help="placement mode: append random clones until GPU requests reach X times the "
                         "capacity (e.g. 1.3)")
    command.add_argument("--seed", type=int, default=0,
                         help="seed of the inflation and of the scheduler's tie-breaks (default: 0)")
    command.add_argument("--events", metavar="FILE", help="write the JSON-lines event file here")
    command.add_argument("--plots", metavar="DIR", help="write PNG plots into this directory")
    command.add_argument("--summary-json", metavar="FILE", help="write the summary's figures as JSON")
    command.add_argument("--decision-log", metavar="FILE",
                         help="write the scheduling core's JSON log (decisions included) here")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")


def missing_extras(command: str, exc: ImportError) -> int:
    """The exit status and message of a simulator command whose optional libraries are not installed."""
    print(f"ai-scheduler {command}: {exc}; install the simulator's extras: pip install 'ai-scheduler[sim]'",
          file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    # Imported here: `ai-scheduler run` builds this parser too, and needs neither the engine nor matplotlib.
    try:
        from ai_scheduler.tracesim.engine import Simulation, typical_device_memory, workload_fragmentation
        from ai_scheduler.tracesim.metrics import summarize
        from ai_scheduler.tracesim.report import compare, summary_table
    except ImportError as exc:
        return missing_extras("simulate", exc)

    try:
        nodes = read_cluster(args.cluster)
        workload = read_workload(args.trace, args.format)
        configs = [_config(path) for path in (args.compare or [args.config])]
    except (TraceError, ConfigError, OSError) as exc:
        print(f"ai-scheduler simulate: {exc}", file=sys.stderr)
        return 2
    for problem in workload.problems[:10]:
        print(f"ai-scheduler simulate: {args.trace}: skipped {problem}", file=sys.stderr)
    if len(workload.problems) > 10:
        left = len(workload.problems) - 10
        print(f"ai-scheduler simulate: ... and {left} more rows skipped", file=sys.stderr)
    mode = Mode(args.mode)
    jobs: list[TraceJob] = list(workload.jobs)
    if args.inflate:
        if mode is not Mode.PLACEMENT:
            print("ai-scheduler simulate: --inflate is for --mode placement", file=sys.stderr)
            return 2
        # A memory share counts as its part of the cluster's typical device, as the engine counts it.
        device_memory = typical_device_memory(nodes) or None
        jobs = inflate(jobs, total_gpus(nodes), args.inflate, seed=args.seed, device_memory=device_memory)
    fragmentation = workload_fragmentation(jobs, nodes)
    summaries: list[Summary] = []
    for (name, config) in configs:
        log_path = _suffixed(args.decision_log, name, len(configs)) if args.decision_log else None
        log = log_path.open("wb") if log_path is not None else None
        try:
            simulation = Simulation(
                config, nodes, jobs, mode, seed=args.seed, config_name=name,
                logger=JsonLogger(stream=log) if log is not None else None,
                fragmentation=fragmentation, progress=False if args.no_progress else None,
            )
            result = simulation.run()
        finally:
            if log is not None:
                log.close()
        summary = summarize(result)
        summaries.append(summary)
        print(summary_table(summary))
        print(f"{len(jobs)} pods on {len(nodes)} nodes in {result.wall_seconds:.2f} s "
              f"({len(jobs) / max(result.wall_seconds, 1e-9) * 60:,.0f} pods per minute)\n")
        _write(args, result, summary, name, len(configs))
    if len(summaries) == 2:
        print(compare(summaries[0], summaries[1], configs[0][0], configs[1][0]))
    return 0


def _config(path: str | None) -> tuple[str, Config]:
    if path is None:
        return "default", default_config()
    return Path(path).stem, load_config(path)


def _suffixed(path: str, name: str, runs: int) -> Path:
    """The output path for the run under config `name`: as given for one run, suffixed for two."""
    target = Path(path)
    return target if runs == 1 else target.with_name(f"{target.stem}-{name}{target.suffix}")


def _write(args: argparse.Namespace, result: SimResult, summary: Summary, name: str, runs: int) -> None:
    import orjson

    from ai_scheduler.tracesim.report import write_events, write_plots

    if args.events:
        write_events(result, _suffixed(args.events, name, runs))
    if args.summary_json:
        path = _suffixed(args.summary_json, name, runs)
        path.parent.mkdir(parents=True, exist_ok=True)
        options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
        path.write_bytes(orjson.dumps(summary.as_dict(), option=options))
    if args.plots:
        directory = Path(args.plots) / name if runs > 1 else Path(args.plots)
        for written in write_plots(result, directory):
            print(f"plot: {written}")
