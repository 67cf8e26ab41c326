"""`ai-scheduler learn`: fit the run-time model on a trace, report how good it is, write it.

The trace is read with the simulator's readers (any of the four formats). A job counts when the trace
gives its run time and it did not end badly (succeeded, or a status the trace does not say): a failed or
killed job's run time is not how long that job needs. A gang is one job, not one per pod: the first of
its pods stands for it.

The report comes from a model fitted on the earlier part of the history and scored on the later part
(prediction.evaluate); the model written to `--out` is then fitted on the whole history, so that the
daemon gets everything learnt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import default_config
from ai_scheduler.prediction import (
    Features,
    ModelError,
    RunTimeModel,
    Sample,
    evaluate,
    gpu_milli_of,
    name_stem,
    report_table,
    split_by_time,
)
from ai_scheduler.scheduler.runtimes import pod_features
from ai_scheduler.trace import JobStatus, TraceError, TraceJob, read_workload
from ai_scheduler.tracesim.command import missing_extras
from ai_scheduler.tracesim.replay import VERSION as LOG_VERSION
from ai_scheduler.tracesim.replay import ReplayError, read_log

MIN_JOBS = 10
# Every job that ended: a failed, killed or timed-out job held its GPUs for its whole run time as a
# successful one did (a large share of the Philly and Helios traces), and how long a job holds them is what
# the model predicts. Only jobs still pending or running (no run time yet) are left out.
USABLE = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.KILLED, JobStatus.TIMEOUT, JobStatus.UNKNOWN}
)


def features_of_job(job: TraceJob) -> Features:
    """A trace job's features, as `features_of_pod` reads the pod the simulator makes of it (its
    namespace is its user's where it has none, as trace/pods.py names it)."""
    return Features(
        user=job.user,
        group=job.group,
        namespace=job.namespace or job.user,
        task_type=job.task_type,
        workload_class=job.workload_class,
        cpu=job.cpu,
        memory=job.memory,
        gpu_milli=gpu_milli_of(job.gpus, job.gpu_fraction, job.gpu_memory),
        gang_size=job.gang_size,
        name_stem=name_stem(job.name),
        estimate=job.estimate,
    )


def _from_log(sources: list[str], field_path: str | None) -> tuple[list[TraceJob], str, Tenancy]:
    """The pods of a replayable log as trace jobs: each its logged Pod (`manifest`), the run time it had
    from its placement to its end, and how it ended. Their features are read from the Pod itself, as the
    daemon reads them (`features_of`)."""
    replay = read_log(sources, field_path)
    return replay.jobs, f"log v{LOG_VERSION}", Tenancy(replay.config)


def features_of(job: TraceJob, tenancy: Tenancy | None = None) -> Features:
    """A job's features: from its logged Pod when it has one, read as the daemon reads it
    (`pod_features`, with the logged config's tenancy), else from the trace's columns."""
    if job.manifest is None:
        return features_of_job(job)
    return pod_features(PodRecord.from_api(dict(job.manifest)), tenancy or Tenancy(default_config()))


def samples_of(jobs: list[TraceJob], tenancy: Tenancy | None = None) -> tuple[list[Sample], int]:
    """The history the model learns from, and how many pods were left out (no run time: pending, running)."""
    samples: list[Sample] = []
    gangs: set[tuple[str, str, float]] = set()
    skipped = 0
    for job in jobs:
        if job.gang:
            key = (job.gang, job.user, job.submit_time)
            if key in gangs:
                continue
            gangs.add(key)
        if job.duration is None or job.status not in USABLE:
            skipped += 1
            continue
        samples.append(Sample(features_of(job, tenancy), job.duration, job.submit_time))
    return samples, skipped


def add_arguments(command: argparse.ArgumentParser) -> None:
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", metavar="FILE",
                        help="the history: a CSV trace (generic, Alibaba GPU v2023, Philly or Helios)")
    source.add_argument("--log", metavar="LOG", nargs="+",
                        help="the history: the daemon's replayable log (files or a directory of rotated "
                        "logs, as `ai-scheduler replay` reads them)")
    command.add_argument("--field", metavar="PATH",
                         help="with --log: the dotted path to the original line in each collected record")
    command.add_argument("--format", default="auto",
                         choices=["auto", "generic", "alibaba", "philly", "helios"],
                         help="the trace's format (default: told from its columns)")
    command.add_argument("--out", metavar="FILE", required=True,
                         help="write the model here (the daemon's prediction.model)")
    command.add_argument("--report", metavar="FILE", help="write the report's figures here as JSON")
    command.add_argument("--quantile", type=float, default=0.9,
                         help="the upper quantile predicted beside the median (default: 0.9)")
    command.add_argument("--test-fraction", type=float, default=0.2,
                         help="the latest share of the jobs held out to score the model (default: 0.2)")
    command.add_argument("--seed", type=int, default=0, help="seed of the model's fit (default: 0)")


def run(args: argparse.Namespace) -> int:
    def fail(message: str) -> int:
        print(f"ai-scheduler learn: {message}", file=sys.stderr)
        return 2

    if not 0.5 < args.quantile < 1:
        return fail(f"--quantile must be above 0.5 and below 1, got {args.quantile}")
    if not 0 < args.test_fraction < 1:
        return fail(f"--test-fraction must be above 0 and below 1, got {args.test_fraction}")
    try:
        tenancy = None
        if args.log:
            history, source_format, tenancy = _from_log(args.log, args.field)
        else:
            workload = read_workload(args.trace, args.format)
            history, source_format = workload.jobs, workload.format.value
            if workload.problems:
                print(f"ai-scheduler learn: {args.trace}: skipped {len(workload.problems)} unreadable rows "
                      f"(first: {workload.problems[0]})", file=sys.stderr)
    except (TraceError, ReplayError, OSError) as exc:
        return fail(str(exc))
    where = args.trace or " ".join(args.log)
    samples, skipped = samples_of(history, tenancy)
    if len(samples) < MIN_JOBS:
        return fail(f"{where}: {len(samples)} jobs that ended with a run time; "
                    f"a model needs at least {MIN_JOBS}")
    train, test = split_by_time(samples, args.test_fraction)
    try:
        _, report = evaluate(train, test, args.quantile, seed=args.seed)
        model = RunTimeModel.fit([s.features for s in samples], [s.duration for s in samples],
                                 args.quantile, seed=args.seed)
        model.info.update({"trace": where, "format": source_format})
        model.save(args.out)
    except ImportError as exc:  # scikit-learn: the offline tools' extra
        return missing_extras("learn", exc)
    except (ModelError, OSError) as exc:
        return fail(str(exc))
    print(f"{len(samples)} jobs from {where} ({source_format}); {skipped} left out "
          "(no run time: still pending or running)")
    print(report_table(report))
    print(f"model: {args.out} (fitted on all {len(samples)} jobs)")
    if args.report:
        import orjson

        figures = {"trace": where, "format": source_format, "jobs": len(samples),
                   "left_out": skipped, "model": str(args.out), **report.as_dict()}
        path = Path(args.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
        print(f"report: {path}")
    return 0
