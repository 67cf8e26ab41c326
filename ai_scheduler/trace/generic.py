"""The generic trace: one pod per row, in our own column names, for workloads written by hand or converted.

Columns (any case, any order; only `name` and `submit_time` are required; an empty field takes the
default):

| column          | meaning                                                         | default        |
|-----------------|-----------------------------------------------------------------|----------------|
| name            | the pod's name, unique in the file                              | required       |
| submit_time     | seconds from the start of the trace                             | required       |
| duration        | run time: seconds, or a Go duration (`90m`, `1h30m`)             | unknown (None) |
| cpu             | Kubernetes quantity (`500m`, `2`)                                | 0              |
| memory          | Kubernetes quantity (`4Gi`)                                      | 0              |
| gpus            | whole GPUs                                                       | 0              |
| gpu_fraction    | a share of one GPU whatever its model, above 0 and at most 1     | none           |
| gpu_memory      | a share of one GPU as a quantity of its memory (`10Gi`)          | none           |
| gpu_model       | acceptable GPU models, separated by `|` (`A100-80GB|H100`)       | any            |
| gang            | the gang (pod group) the pod belongs to                          | none           |
| gang_size       | pods of the gang that must start together (minMember)           | its rows       |
| user            | the user who submitted it                                        | ""             |
| group           | the user's group                                                 | ""             |
| namespace       | the pod's namespace                                              | ""             |
| queue           | the queue (`ai-scheduler.io/queue`)                              | ""             |
| priority        | the pod's priority (any whole number)                            | 0              |
| estimate        | the user's estimate of the run time, as `duration`              | none (None)    |
| task_type       | `training`, `inference`, `batch`, ...                            | ""             |
| workload_class  | `cv`, `nlp`, ...                                                 | ""             |
| status          | how it ended: succeeded, failed, killed, ... (see JobStatus)    | unknown        |

At most one of gpus, gpu_fraction and gpu_memory may be set. A gang's `gang_size` may be left empty on
all its rows (it is then the number of its rows) or given on some; two rows of one gang giving different
sizes make the later one a problem. An unknown column is an error for the whole file rather than a
column ignored: in a hand-written file it is a misspelling (`gpu_fracton`) that would otherwise change
the workload without a word.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from ai_scheduler.trace.records import Problem, TraceError, TraceFormat, TraceJob, Workload, parse_status
from ai_scheduler.trace.table import Row, RowError, Table, build_jobs, load_table

REQUIRED = ("name", "submit_time")
COLUMNS = (
    *REQUIRED, "duration", "cpu", "memory", "gpus", "gpu_fraction", "gpu_memory", "gpu_model", "gang",
    "gang_size", "user", "group", "namespace", "queue", "priority", "estimate", "task_type",
    "workload_class", "status",
)


def read_generic(path: str | Path) -> Workload:
    """Read a trace in the generic format (the columns above)."""
    return parse_generic(load_table(path))


def parse_generic(table: Table) -> Workload:
    missing = [column for column in REQUIRED if column not in table.columns]
    if missing:
        raise TraceError(f"{table.path}: a generic trace needs the column(s) {', '.join(missing)}")
    unknown = [column for column in table.columns if column not in COLUMNS]
    if unknown:
        raise TraceError(
            f"{table.path}: unknown column(s) {', '.join(map(repr, unknown))} in a generic trace; "
            f"its columns are {', '.join(COLUMNS)}"
        )
    problems: list[Problem] = []
    jobs = _settle_gangs(build_jobs(table, problems, _job), problems)
    problems.sort(key=lambda problem: problem.row)
    return Workload(TraceFormat.GENERIC, table.path, jobs, problems)


def _job(row: Row) -> list[TraceJob]:
    submit = row.number("submit_time")
    if submit is None:
        raise RowError("submit_time is missing")
    fraction = row.number("gpu_fraction") or 0.0
    return [TraceJob(
        name=row.name("name"),
        submit_time=submit,
        duration=row.seconds("duration"),
        cpu=row.quantity("cpu", "cpu"),
        memory=row.quantity("memory", "memory"),
        gpus=row.integer("gpus"),
        gpu_fraction=fraction,
        gpu_memory=row.quantity("gpu_memory", "memory"),
        gpu_models=split_models(row.text("gpu_model")),
        gang=row.text("gang"),
        gang_size=row.integer("gang_size"),
        user=row.text("user"),
        group=row.text("group"),
        namespace=row.text("namespace"),
        queue=row.text("queue"),
        priority=row.signed_integer("priority"),
        estimate=row.seconds("estimate"),
        task_type=row.text("task_type"),
        workload_class=row.text("workload_class"),
        status=parse_status(row.text("status")),
        row=row.line,
    )]


def split_models(text: str) -> tuple[str, ...]:
    """GPU models separated by `|` (`V100M16|V100M32`); empty for any."""
    return tuple(model for model in (part.strip() for part in text.split("|")) if model)


def _settle_gangs(jobs: list[TraceJob], problems: list[Problem]) -> list[TraceJob]:
    """Give each gang one size: the first one its rows give, else the number of its rows."""
    sizes: dict[str, int] = {}
    kept: list[TraceJob] = []
    for job in jobs:
        if job.gang and job.gang_size:
            first = sizes.setdefault(job.gang, job.gang_size)
            if job.gang_size != first:
                problems.append(Problem(job.row, f"gang {job.gang!r} has gang_size {first} on an earlier "
                                                 f"row, {job.gang_size} here"))
                continue
        kept.append(job)
    members = Counter(job.gang for job in kept if job.gang)
    return [replace(job, gang_size=sizes.get(job.gang, members[job.gang])) if job.gang and not job.gang_size
            else job for job in kept]
