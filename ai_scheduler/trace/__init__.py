"""The input of the trace simulator (`ai-scheduler simulate`): workloads and clusters read from files.

A workload is a CSV trace in one of four formats (generic, Alibaba GPU cluster trace v2023, Philly- and
Helios-style job lists), read into `TraceJob`s in the scheduler's units, with the rows that could not be
read reported beside them (`Workload.problems`) rather than dropped or fatal. A cluster is a CSV or YAML
list of node shapes (`NodeSpec`), each of which makes the Kubernetes Node the embedded simulated cluster
uses. `inflate` grows a workload for placement mode as the FGD paper does.

This package reads and converts; it runs nothing. It imports the quantity parser, the simulated
cluster's object builders and the GPU annotation names, never the scheduler.
"""

from ai_scheduler.trace.alibaba import read_alibaba
from ai_scheduler.trace.cluster import NodeSpec, read_cluster, total_gpus
from ai_scheduler.trace.generic import read_generic
from ai_scheduler.trace.inflate import inflate
from ai_scheduler.trace.joblist import read_helios, read_philly
from ai_scheduler.trace.records import (
    GpuKind,
    JobStatus,
    Problem,
    TraceError,
    TraceFormat,
    TraceJob,
    Workload,
    parse_status,
)
from ai_scheduler.trace.workload import REQUIRED_COLUMNS, detect_format, read_workload

__all__ = [
    "REQUIRED_COLUMNS",
    "GpuKind",
    "JobStatus",
    "NodeSpec",
    "Problem",
    "TraceError",
    "TraceFormat",
    "TraceJob",
    "Workload",
    "detect_format",
    "inflate",
    "parse_status",
    "read_alibaba",
    "read_cluster",
    "read_generic",
    "read_helios",
    "read_philly",
    "read_workload",
    "total_gpus",
]
