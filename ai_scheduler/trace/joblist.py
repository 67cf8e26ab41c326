"""Job lists in the style of Microsoft's Philly trace and SenseTime's Helios trace: one row per job.

Philly (as the trace is usually flattened to CSV): `job_id,user,vc,submit_time,gpu_num,duration,status`.
Helios (its `cluster_log.csv`): `job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,
start_time,end_time,duration,queue`. Both readers accept the columns of either; `job_id`, `submit_time`
and `gpu_num` are required (and `state` for Helios, which is how the two are told apart). Other columns
are ignored.

- Times (`submit_time`, `start_time`, `end_time`) are epoch seconds or ISO date-times
  (`2020-04-01 00:00:00`, UTC unless an offset is given). Submit times are made relative to the earliest
  one read, so the trace starts at 0.
- `vc`, the virtual cluster, becomes the group; `user` the user. Neither trace has a queue, priority or
  estimate: they stay empty.
- `duration` is seconds; empty, it is `end_time` - `start_time` when both are given, else unknown.
  `trace_wait` is Helios' `queue` (its queueing delay, in seconds; not a queue name), else
  `start_time` - `submit_time` when both are given.
- `status` (Philly: Pass, Killed, Failed) or `state` (Helios: COMPLETED, CANCELLED, FAILED, TIMEOUT,
  NODE_FAIL) becomes the status.
- `cpu_num` is cores. Neither trace gives memory: it is 0.
- A job is one pod when it fits one node. Helios says over how many nodes a job ran (`node_num`): a job
  of n > 1 nodes becomes a gang of n pods, named `<job_id>-0` .. `<job_id>-<n-1>`, each with an even
  part of its GPUs and CPUs (the first pods take one more where they do not divide). Philly does not
  say: a job of more than `max_gpus_per_pod` GPUs (8 by default, the largest common node) becomes a
  gang of as few pods as hold its GPUs at that bound, split the same way.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ai_scheduler.trace.records import Problem, TraceError, TraceFormat, TraceJob, Workload, parse_status
from ai_scheduler.trace.table import Row, RowError, Table, build_jobs, load_table

PHILLY_REQUIRED = ("job_id", "submit_time", "gpu_num")
HELIOS_REQUIRED = (*PHILLY_REQUIRED, "state")
PHILLY_COLUMNS = ("job_id", "user", "vc", "submit_time", "gpu_num", "duration", "status")
HELIOS_COLUMNS = ("job_id", "user", "vc", "jobname", "gpu_num", "cpu_num", "node_num", "state", "submit_time",
                  "start_time", "end_time", "duration", "queue")
DEFAULT_MAX_GPUS_PER_POD = 8


def read_philly(path: str | Path, *, max_gpus_per_pod: int = DEFAULT_MAX_GPUS_PER_POD) -> Workload:
    """Read a Philly-style job list."""
    return parse_job_list(load_table(path), TraceFormat.PHILLY, max_gpus_per_pod)


def read_helios(path: str | Path, *, max_gpus_per_pod: int = DEFAULT_MAX_GPUS_PER_POD) -> Workload:
    """Read a Helios-style job list."""
    return parse_job_list(load_table(path), TraceFormat.HELIOS, max_gpus_per_pod)


def parse_job_list(table: Table, trace_format: TraceFormat, max_gpus_per_pod: int) -> Workload:
    if max_gpus_per_pod < 1:
        raise ValueError(f"max_gpus_per_pod must be at least 1, got {max_gpus_per_pod}")
    required = HELIOS_REQUIRED if trace_format is TraceFormat.HELIOS else PHILLY_REQUIRED
    missing = [column for column in required if column not in table.columns]
    if missing:
        raise TraceError(
            f"{table.path}: a {trace_format.value} trace needs the column(s) {', '.join(missing)}"
        )
    problems: list[Problem] = []
    jobs = build_jobs(table, problems, lambda row: _pods(row, max_gpus_per_pod))
    if jobs:
        start = min(job.submit_time for job in jobs)
        jobs = [replace(job, submit_time=job.submit_time - start) for job in jobs]
    return Workload(trace_format, table.path, jobs, problems)


def _pods(row: Row, max_gpus_per_pod: int) -> list[TraceJob]:
    job_id = row.name("job_id")
    submitted = row.time("submit_time")
    if submitted is None:
        raise RowError("submit_time is missing")
    started = row.time("start_time")
    ended = row.time("end_time")
    duration = row.number("duration")
    if duration is None and started is not None and ended is not None:
        duration = ended - started
    wait = row.number("queue")
    if wait is None and started is not None:
        wait = started - submitted
    gpus = row.integer("gpu_num")
    cpu = row.integer("cpu_num") * 1000
    nodes = row.integer("node_num")
    if not nodes:
        nodes = max(-(-gpus // max_gpus_per_pod), 1)
    template = TraceJob(
        name=job_id,
        submit_time=submitted,
        duration=duration,
        user=row.text("user"),
        group=row.text("vc"),
        status=parse_status(row.text("status") or row.text("state")),
        trace_wait=wait,
        row=row.line,
    )
    if nodes == 1:
        return [replace(template, gpus=gpus, cpu=cpu)]
    return [replace(template, name=f"{job_id}-{i}", gpus=pod_gpus, cpu=pod_cpu, gang=job_id, gang_size=nodes)
            for i, (pod_gpus, pod_cpu) in enumerate(zip(_even(gpus, nodes), _even(cpu, nodes), strict=True))]


def _even(total: int, parts: int) -> list[int]:
    """`total` in `parts` whole parts as even as can be, the larger first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
