"""Reading a workload trace of any known format, the format told from the CSV header.

A format matches when its required columns are all in the header; they are tried from the most
specific to the least, so the first match is the right one for the files each format's readers write:
Alibaba v2023 (`name`, `num_gpu`, `creation_time`), Helios (`job_id`, `submit_time`, `gpu_num`,
`state`), Philly (`job_id`, `submit_time`, `gpu_num`), generic (`name`, `submit_time`). A header that
none matches is an error that names every format and its required columns, so whoever wrote the file
sees which column is missing.
"""

from __future__ import annotations

from pathlib import Path

from ai_scheduler.trace import alibaba, generic, joblist
from ai_scheduler.trace.records import TraceError, TraceFormat, Workload
from ai_scheduler.trace.table import Table, load_table

# In the order they are tried.
REQUIRED_COLUMNS: dict[TraceFormat, tuple[str, ...]] = {
    TraceFormat.ALIBABA: alibaba.REQUIRED,
    TraceFormat.HELIOS: joblist.HELIOS_REQUIRED,
    TraceFormat.PHILLY: joblist.PHILLY_REQUIRED,
    TraceFormat.GENERIC: generic.REQUIRED,
}


def detect_format(columns: tuple[str, ...] | list[str], source: str | Path = "trace") -> TraceFormat:
    """The format whose required columns a header (lowercased names) has; TraceError if none."""
    present = set(columns)
    for trace_format, required in REQUIRED_COLUMNS.items():
        if present.issuperset(required):
            return trace_format
    known = "; ".join(f"{trace_format.value} ({', '.join(required)})"
                      for trace_format, required in REQUIRED_COLUMNS.items())
    raise TraceError(f"{source}: header {', '.join(columns)} is of no known trace format; the formats and "
                     f"the columns they require are: {known}")


def read_workload(path: str | Path, format: TraceFormat | str = "auto",
                  *, max_gpus_per_pod: int = joblist.DEFAULT_MAX_GPUS_PER_POD) -> Workload:
    """Read a trace; `format` is "auto" (from the header) or one of TraceFormat's values.

    `max_gpus_per_pod` bounds the pods a Philly or Helios job is split into (see joblist)."""
    table = load_table(path)
    if format == "auto":
        trace_format = detect_format(table.columns, table.path)
    else:
        try:
            trace_format = TraceFormat(format)
        except ValueError:
            names = ", ".join(["auto", *(f.value for f in TraceFormat)])
            raise TraceError(f"unknown trace format {format!r}; the formats are {names}") from None
    return parse_table(table, trace_format, max_gpus_per_pod)


def parse_table(table: Table, trace_format: TraceFormat,
                max_gpus_per_pod: int = joblist.DEFAULT_MAX_GPUS_PER_POD) -> Workload:
    if trace_format is TraceFormat.GENERIC:
        return generic.parse_generic(table)
    if trace_format is TraceFormat.ALIBABA:
        return alibaba.parse_alibaba(table)
    return joblist.parse_job_list(table, trace_format, max_gpus_per_pod)
