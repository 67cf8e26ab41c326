"""Alibaba's GPU cluster trace v2023 (clusterdata/cluster-trace-gpu-v2023, the `openb_pod_list_*.csv` files
the FGD paper replays): one pod per row.

Header: `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
scheduled_time`. `name`, `num_gpu` and `creation_time` are required; the other columns may be absent or
empty (their default: no cpu, no memory, whole GPUs, any model, no qos, unknown phase, unknown times).
Other columns are ignored, so that derived files with extra columns read too.

- `cpu_milli` is millicores; `memory_mib` MiB (bytes = MiB x 2**20).
- `gpu_milli` is thousandths of ONE GPU per GPU. With `num_gpu` = 1 and 0 < `gpu_milli` < 1000 the pod
  asks a share of one GPU: `gpu_fraction` = gpu_milli / 1000. With `num_gpu` >= 1 and `gpu_milli` = 1000
  (or empty) it asks `num_gpu` whole GPUs. `num_gpu` = 0 is a CPU-only pod (its `gpu_milli` must be 0 or
  empty). Anything else (a share of several GPUs, num_gpu = 1 with gpu_milli = 0, above 1000) is a
  problem for that row: the trace defines no such request.
- `gpu_spec` lists acceptable models separated by `|` (`V100M16|V100M32`); empty (or `nan`) is any.
- Times are seconds from the trace's own origin, kept as they are: `submit_time` = `creation_time`;
  `duration` = `deletion_time` - `scheduled_time` when both are given (None otherwise: a pod still
  pending or running when the trace ended); `trace_wait` = `scheduled_time` - `creation_time`.
- `pod_phase` (Pending, Running, Succeeded, Failed) becomes `status`.
- `qos` becomes the queue (its name lowercased) and the priority, highest first:
  LS (latency sensitive) 3, Guaranteed 2, Burstable 1, BE (best effort) 0. An unknown qos keeps its
  lowercased name as the queue and priority 0; none leaves both empty.
"""

from __future__ import annotations

from pathlib import Path

from ai_scheduler.trace.generic import split_models
from ai_scheduler.trace.records import (
    MILLI,
    Problem,
    TraceError,
    TraceFormat,
    TraceJob,
    Workload,
    parse_status,
)
from ai_scheduler.trace.table import Row, RowError, Table, build_jobs, load_table

REQUIRED = ("name", "num_gpu", "creation_time")
COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
           "creation_time", "deletion_time", "scheduled_time")
QOS_PRIORITY = {"ls": 3, "guaranteed": 2, "burstable": 1, "be": 0}
MIB = 2**20


def read_alibaba(path: str | Path) -> Workload:
    """Read an Alibaba GPU cluster trace v2023 pod list."""
    return parse_alibaba(load_table(path))


def parse_alibaba(table: Table) -> Workload:
    missing = [column for column in REQUIRED if column not in table.columns]
    if missing:
        raise TraceError(f"{table.path}: an Alibaba v2023 trace needs the column(s) {', '.join(missing)}")
    problems: list[Problem] = []
    jobs = build_jobs(table, problems, _job)
    return Workload(TraceFormat.ALIBABA, table.path, jobs, problems)


def _job(row: Row) -> list[TraceJob]:
    created = row.number("creation_time")
    if created is None:
        raise RowError("creation_time is missing")
    scheduled = row.number("scheduled_time")
    deleted = row.number("deletion_time")
    duration = None
    if scheduled is not None and deleted is not None:
        if deleted < scheduled:
            raise RowError(f"deletion_time {deleted:g} is before scheduled_time {scheduled:g}")
        duration = deleted - scheduled
    wait = None
    if scheduled is not None:
        if scheduled < created:
            raise RowError(f"scheduled_time {scheduled:g} is before creation_time {created:g}")
        wait = scheduled - created
    gpus, fraction = _gpus(row)
    qos = row.text("qos").lower()
    memory_mib = row.number("memory_mib") or 0.0
    if memory_mib < 0:
        raise RowError(f"memory_mib must not be negative, got {memory_mib:g}")
    return [TraceJob(
        name=row.name("name"),
        submit_time=created,
        duration=duration,
        cpu=row.integer("cpu_milli"),
        memory=round(memory_mib * MIB),
        gpus=gpus,
        gpu_fraction=fraction,
        gpu_models=split_models(row.text("gpu_spec")),
        queue=qos,
        priority=QOS_PRIORITY.get(qos, 0),
        status=parse_status(row.text("pod_phase")),
        trace_wait=wait,
        row=row.line,
    )]


def _gpus(row: Row) -> tuple[int, float]:
    """(whole GPUs, fraction of one GPU) from num_gpu and gpu_milli."""
    count = row.integer("num_gpu")
    milli = row.integer("gpu_milli", default=MILLI if count else 0)
    if count == 0:
        if milli:
            raise RowError(f"gpu_milli is {milli} but num_gpu is 0")
        return 0, 0.0
    if milli == MILLI:
        return count, 0.0
    if not 0 < milli < MILLI:
        raise RowError(f"gpu_milli must be from 1 to 1000, got {milli}")
    if count > 1:
        raise RowError(f"a share of a GPU (gpu_milli {milli}) is of one GPU, but num_gpu is {count}")
    return 0, milli / MILLI
