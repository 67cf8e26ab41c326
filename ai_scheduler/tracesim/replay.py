"""`ai-scheduler replay`: rebuild a cluster and its workload from the daemon's log and run them again.

The daemon's JSON-lines log (format v1, daemon/history.py) holds every Node and Pod as the
scheduler read them (`node.spec`, `pod.spec`), each decision (`decision`), each pod's end
(`pod.finished`) and the config in force (`config.active`). A replay reads it back:

- the cluster: each node's first logged object, in the order the daemon first saw them (the order of
  its node table, on which node-order tie-breaks depend), as `NodeSpec.from_node`;
- the workload: each pod the daemon had to place (its schedulerName is one of the config's profiles,
  and it arrived unbound), as the Pod it logged (`TraceJob.manifest`: the same parser reads it as in
  the daemon), arriving when the daemon first saw it (pods listed before the daemon was ready arrive
  together at 0, as the daemon's first cycle finds them all), running for as long as it ran in the
  log (from its placement to its `pod.finished` line: both are the daemon's own clock, to the
  millisecond), or to the end when it did not finish;
- the config: the logged one (`--config` runs another beside it).

It then runs the simulator (timed mode, the same seed) and compares: with the logged config, pod by
pod, the node (and managed GPUs) the daemon chose against the replay's; with another config, the
simulator's figures side by side. What the log cannot replay is counted in `notes`, never dropped
silently: pods placed before the log began or by another scheduler, pods deleted while pending,
nodes changed or removed during the log (the replay's cluster is each node's first state), and
Dynamic Resource Allocation: the log has the DRA objects (`dra.object`) and each decision's allocated
devices (`claims`), but the simulator models no ResourceSlices, so pods with ResourceClaims are
replayed without them (counted).

Sources: a file, several, or a directory of rotated logs (`*.gz` read as gzip); lines are taken in
their own time order (`ts`), whatever the files' order. Logs collected by a cluster's logging wrap
each line: `field` is the dotted path to the original (an object, or a string holding the JSON line,
as Fluent Bit's `log` or Docker's `log` field). Lines that are not JSON, or not ours, are skipped and
counted.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ai_scheduler.cache.gangs import gang_ref
from ai_scheduler.cache.gpus import FRACTION_UNITS, gpu_request
from ai_scheduler.cache.records import ESTIMATE_ANNOTATION, PodRecord
from ai_scheduler.cache.tenancy import QUEUE_LABEL, USER_LABEL
from ai_scheduler.config import Config, ConfigError, default_config, load_config, parse_config
from ai_scheduler.log import SCHEMA_VERSION, parse_time
from ai_scheduler.prediction import TASK_TYPE_LABEL, WORKLOAD_CLASS_LABEL
from ai_scheduler.quantity import parse_duration
from ai_scheduler.trace.cluster import NodeSpec
from ai_scheduler.trace.records import JobStatus, TraceJob
from ai_scheduler.tracesim.command import missing_extras
from ai_scheduler.tracesim.records import Mode

VERSION = SCHEMA_VERSION  # the lines' format, as the daemon writes it (log.py)
HISTORY_EVENTS = frozenset({"node.spec", "node.removed", "pod.spec", "pod.finished", "config.active",
                            "dra.object", "dra.removed"})
TASK_EVENTS = frozenset({"task.spec", "task.phase", "task.finished"})  # daemon/tasks.py

Placement = tuple[str, str, tuple[int, ...]]  # pod (namespace/name), node, managed GPU ids
# How a pod's `pod.finished` phase reads as a trace job's status (one still running at the end: RUNNING).
PHASES = {"Succeeded": JobStatus.SUCCEEDED, "Failed": JobStatus.FAILED, "Deleted": JobStatus.KILLED}


class ReplayError(Exception):
    """The log cannot be replayed (no history lines, or a config that does not parse)."""


def _files(sources: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for source in map(Path, sources):
        files.extend(sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source])
    return files


def _unwrap(value: Any, path: Sequence[str]) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, str | bytes):
        value = orjson.loads(value)
    return value


def read_lines(
    sources: Sequence[str | Path], field_path: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Our log lines from the sources, in time order, and how many lines were skipped. Files are taken
    oldest first (by their first line, then their last), so that lines of one millisecond split by a
    rotation keep their order."""
    path = field_path.split(".") if field_path else []
    files: list[list[dict[str, Any]]] = []
    skipped = 0
    for file in _files(sources):
        lines: list[dict[str, Any]] = []
        with gzip.open(file, "rb") if file.suffix == ".gz" else file.open("rb") as stream:
            for raw in stream:
                if not raw.strip():
                    continue
                line = _line(raw, path)
                if line is None:
                    skipped += 1
                else:
                    lines.append(line)
        if lines:
            files.append(lines)
    files.sort(key=lambda lines: (lines[0]["_t"], lines[-1]["_t"]))
    ordered = [line for lines in files for line in lines]
    ordered.sort(key=lambda line: line["_t"])  # stable: lines of one instant keep their order
    return ordered, skipped


def _line(raw: bytes, path: Sequence[str]) -> dict[str, Any] | None:
    """One of our lines (with its time as `_t`), or None for anything else."""
    try:
        line = _unwrap(orjson.loads(raw), path)
    except (orjson.JSONDecodeError, ValueError):
        return None
    if not isinstance(line, dict) or not isinstance(line.get("event"), str) or "ts" not in line:
        return None
    line["_t"] = parse_time(str(line["ts"]))
    return line if line["_t"] is not None else None


@dataclass(slots=True)
class ReplayInput:
    """What a log holds, rebuilt: the cluster, the workload, the config and the logged placements."""

    nodes: list[NodeSpec]
    jobs: list[TraceJob]
    config: Config
    config_content: Any
    placements: list[Placement]  # the daemon's, in its order (first placement of each pod)
    lines: int
    skipped: int
    notes: dict[str, int] = field(default_factory=dict)  # what was not replayed, and how many
    # The Tasks the log saw (daemon/tasks.py's lines), by namespace/name: their last `task.spec`, their
    # phases in order and their `task.finished` (None while running); their pods are among `jobs`.
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_log(
    sources: Sequence[str | Path], field_path: str | None = None, config: Config | None = None
) -> ReplayInput:
    """Rebuild the cluster, the workload and the config from a log (see the module docstring).
    `config`: the config whose profiles decide which pods are the scheduler's (the logged one by
    default)."""
    lines, skipped = read_lines(sources, field_path)
    history = [line for line in lines if line["event"] in HISTORY_EVENTS and line.get("v") == VERSION]
    if not history:
        raise ReplayError("no replayable lines (v1 node.spec / pod.spec) in the log")
    content = next((line.get("config") for line in history if line["event"] == "config.active"), None)
    try:
        logged = default_config() if content is None else parse_config(content)
    except ConfigError as exc:
        raise ReplayError(f"the logged config does not parse: {exc}") from exc
    profiles = {profile.scheduler_name for profile in (config or logged).profiles}
    ready = next((line["_t"] for line in lines if line["event"] == "scheduler.ready"), lines[0]["_t"])
    notes: dict[str, int] = {}

    def note(what: str) -> None:
        notes[what] = notes.get(what, 0) + 1

    nodes: dict[str, NodeSpec] = {}
    specs: dict[str, tuple[float, dict[str, Any]]] = {}  # uid -> (first seen, the spec to replay)
    decided: dict[str, tuple[float, Placement]] = {}  # uid -> (time, first placement)
    placements: list[Placement] = []
    finished: dict[str, tuple[float, str]] = {}  # uid -> (time, phase)
    tasks: dict[str, dict[str, Any]] = {}
    for line in lines:
        event = line["event"]
        if event == "node.spec" and line.get("v") == VERSION:
            name = str(line.get("node", ""))
            if name in nodes:
                note("node changes after its first state (not replayed)")
            elif isinstance(line.get("object"), dict):
                nodes[name] = NodeSpec.from_node(line["object"])
        elif event == "node.removed" and line.get("v") == VERSION:
            note("node removals (not replayed)")
        elif event == "pod.spec" and line.get("v") == VERSION and isinstance(line.get("object"), dict):
            uid = str(line.get("uid", ""))
            if uid in decided:
                continue  # a change after its placement (its status, labels): the placement stands
            # It arrives when first seen, or when its scheduling gates went; it is replayed as last seen.
            arrival = specs[uid][0] if uid in specs and not _gated(specs[uid][1]) else line["_t"]
            specs[uid] = (arrival, line["object"])
        elif event == "decision" and line.get("result") == "scheduled":
            uid = str(line.get("uid", ""))
            if uid not in decided:
                gpus = tuple(int(i) for i in (line.get("gpus") or {}).get("ids", ()))
                placement = (str(line.get("pod", "")), str(line.get("node", "")), gpus)
                decided[uid] = (line["_t"], placement)
                placements.append(placement)
        elif event == "pod.finished" and line.get("v") == VERSION:
            finished.setdefault(str(line.get("uid", "")), (line["_t"], str(line.get("phase", ""))))
        elif event in TASK_EVENTS and line.get("v") == VERSION and line.get("task"):
            task = tasks.setdefault(str(line["task"]), {"spec": None, "phases": [], "finished": None})
            if event == "task.spec":
                task["spec"] = line
            elif event == "task.phase":
                task["phases"].append(line.get("phase"))
            else:
                task["finished"] = line
        elif event == "dra.object" and line.get("v") == VERSION:
            note("DRA objects logged (ResourceSlices, DeviceClasses, claims: not modelled by the simulator)")
    jobs: list[TraceJob] = []
    for uid, (seen, manifest) in specs.items():
        spec = manifest.get("spec") or {}
        if spec.get("nodeName"):
            note("pods placed before the log began or by another scheduler (not replayed)")
            continue
        if (spec.get("schedulerName") or "default-scheduler") not in profiles:
            note("pods of other schedulers (not replayed)")
            continue
        placed = decided.get(uid)
        end = finished.get(uid)
        if placed is None and end is not None:
            note("pods deleted while pending (not replayed)")
            continue
        if spec.get("resourceClaims"):
            note("pods with DRA ResourceClaims (replayed without their claims: the simulator has no slices)")
            manifest = {**manifest, "spec": {k: v for k, v in spec.items() if k != "resourceClaims"}}
        duration = end[0] - placed[0] if placed is not None and end is not None else None
        status = PHASES.get(end[1], JobStatus.KILLED) if end is not None else JobStatus.RUNNING
        jobs.append(_job(manifest, max(seen - ready, 0.0), duration, status))
    jobs.sort(key=lambda job: job.submit_time)  # stable: pods seen together keep the log's order
    return ReplayInput(list(nodes.values()), jobs, config or logged, content, placements, len(lines), skipped,
                       notes, tasks)


def _gated(manifest: Mapping[str, Any]) -> bool:
    return bool((manifest.get("spec") or {}).get("schedulingGates"))


def _job(manifest: dict[str, Any], submit: float, duration: float | None, status: JobStatus) -> TraceJob:
    """The trace job of a logged Pod: the Pod itself (`manifest`), and what the metrics read of it."""
    pod = PodRecord.from_api(manifest)
    request, _ = gpu_request(pod)
    gang = gang_ref(pod)
    shape: dict[str, Any] = {}
    if request is not None and request.count:
        shape["gpus"] = request.count
    elif request is not None and request.fraction:
        shape["gpu_fraction"] = request.fraction / FRACTION_UNITS
    elif request is not None and request.memory:
        shape["gpu_memory"] = request.memory
    return TraceJob(
        name=pod.key, submit_time=submit, duration=max(duration, 0.0) if duration is not None else None,
        cpu=pod.requests.get("cpu", 0), memory=pod.requests.get("memory", 0),
        gang=gang.key if gang is not None else "",
        gang_size=(gang.min_member or 0) if gang is not None else 0,
        user=pod.labels.get(USER_LABEL, pod.namespace), namespace=pod.namespace,
        queue=pod.labels.get(QUEUE_LABEL, ""), priority=pod.priority, manifest=manifest, status=status,
        estimate=parse_duration(pod.annotations.get(ESTIMATE_ANNOTATION)),
        task_type=pod.labels.get(TASK_TYPE_LABEL, ""),
        workload_class=pod.labels.get(WORKLOAD_CLASS_LABEL, ""), **shape,
    )


@dataclass(slots=True)
class Comparison:
    """The daemon's placements against a replay's, pod by pod (each pod's first placement)."""

    logged: int
    identical: int
    differences: list[tuple[str, str, str]]  # pod, logged node (or ""), replayed node (or "")
    same_order: bool

    @property
    def share(self) -> float:
        return self.identical / self.logged if self.logged else 1.0


def compare_placements(logged: Iterable[Placement], replayed: Iterable[Placement]) -> Comparison:
    def first(placements: Iterable[Placement]) -> dict[str, Placement]:
        out: dict[str, Placement] = {}
        for placement in placements:
            out.setdefault(placement[0], placement)
        return out

    a, b = first(logged), first(replayed)
    identical = [pod for pod in a if pod in b and a[pod][1:] == b[pod][1:]]
    differences = [
        (pod, a[pod][1] if pod in a else "", b[pod][1] if pod in b else "")
        for pod in [*a, *(p for p in b if p not in a)]
        if not (pod in a and pod in b and a[pod][1:] == b[pod][1:])
    ]
    order = [pod for pod in b if pod in a]
    return Comparison(len(a), len(identical), differences, order == [pod for pod in a if pod in b])


def explain(difference: tuple[str, str, str]) -> str:
    pod, logged, replayed = difference
    if not replayed:
        return f"{pod}: placed on {logged} by the daemon, not placed in the replay"
    if not logged:
        return f"{pod}: placed on {replayed} in the replay, not by the daemon"
    if logged == replayed:
        return f"{pod}: same node {logged}, other GPUs"
    return f"{pod}: {logged} by the daemon, {replayed} in the replay"


# ------------------------------------------------------------------------------- the command
def add_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("log", nargs="+", metavar="LOG",
                         help="the daemon's JSON-lines log: files, or a directory of rotated logs (*.gz too)")
    command.add_argument("--config", metavar="FILE",
                         help="also run this config on the same cluster and workload; print the differences")
    command.add_argument("--field", metavar="PATH",
                         help="the dotted path to the original line in each collected record (e.g. log, or "
                         "kubernetes.log); its value may be an object or a string holding the JSON line")
    command.add_argument("--seed", type=int, default=1,
                         help="seed of the scheduler's tie-breaks, as the daemon's (default: 1)")
    command.add_argument("--json", metavar="FILE", help="write the comparison and the figures as JSON")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    try:
        from ai_scheduler.tracesim.engine import Simulation
        from ai_scheduler.tracesim.metrics import summarize
        from ai_scheduler.tracesim.report import compare, summary_table
    except ImportError as exc:
        return missing_extras("replay", exc)
    try:
        other = load_config(args.config) if args.config else None
        replay = read_log(args.log, args.field)
    except (ReplayError, ConfigError, OSError) as exc:
        print(f"ai-scheduler replay: {exc}", file=sys.stderr)
        return 2
    print(f"{replay.lines} log lines ({replay.skipped} skipped): {len(replay.nodes)} nodes, "
          f"{len(replay.jobs)} pods, {len(replay.placements)} placements by the daemon")
    for what, count in replay.notes.items():
        print(f"  {count} {what}")
    if replay.tasks:
        done = [t["finished"] for t in replay.tasks.values() if t["finished"] is not None]
        held = sum(float(t.get("gpu_seconds") or 0.0) for t in done) / 3600
        print(f"  {len(replay.tasks)} Tasks ({len(done)} finished, {held:.2f} GPU-hours held); their pods "
              "are replayed as pods")
    progress = False if args.no_progress else None
    simulation = Simulation(replay.config, replay.nodes, replay.jobs, Mode.TIMED, seed=args.seed,
                            config_name="logged", progress=progress)
    logged = summarize(simulation.run())
    comparison = compare_placements(replay.placements, simulation.placements)
    print(f"\nplacements: {comparison.identical} of {comparison.logged} identical ({comparison.share:.1%}), "
          f"{'in the same order' if comparison.same_order else 'in another order'}")
    for difference in comparison.differences[:20]:
        print(f"  {explain(difference)}")
    if len(comparison.differences) > 20:
        print(f"  ... and {len(comparison.differences) - 20} more")
    print()
    print(summary_table(logged))
    figures: dict[str, Any] = {
        "placements": {"logged": comparison.logged, "identical": comparison.identical,
                       "same_order": comparison.same_order,
                       "differences": [explain(d) for d in comparison.differences]},
        "notes": replay.notes, "logged": logged.as_dict(),
    }
    if other is not None:
        name = Path(args.config).stem
        again = Simulation(other, replay.nodes, replay.jobs, Mode.TIMED, seed=args.seed, config_name=name,
                           progress=progress)
        changed = summarize(again.run())
        print(summary_table(changed))
        print(compare(logged, changed, "logged", name))
        figures[name] = changed.as_dict()
    if args.json:
        options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
        Path(args.json).write_bytes(orjson.dumps(figures, option=options))
    return 0
