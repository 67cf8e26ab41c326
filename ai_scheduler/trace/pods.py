"""A trace job as the Pod a user would submit for it: what the simulator and the same-decisions test feed
to the scheduler.

The pod asks for the job's cpu and memory as container requests and for its GPUs with the scheduler's
annotations (`gpu-count`, `gpu-fraction`, `gpu-memory`: the nodes of a trace cluster are managed, see
cluster.py); GPU models become a required node affinity on `nvidia.com/gpu.product`. Who it belongs to
goes where the contract says: the namespace (the job's namespace, else its user, made a valid name),
the queue label, `spec.priority`, the estimate annotation, the task-type and workload-class labels, and
a gang's name and size in the scheduler-plugins labels.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL
from ai_scheduler.cache.gpus import GPU_COUNT_ANNOTATION, GPU_FRACTION_ANNOTATION, GPU_MEMORY_ANNOTATION
from ai_scheduler.cache.records import ESTIMATE_ANNOTATION, TASK_TYPE_LABEL, WORKLOAD_CLASS_LABEL
from ai_scheduler.cache.tenancy import QUEUE_LABEL, USER_LABEL
from ai_scheduler.sim.objects import make_pod
from ai_scheduler.trace.cluster import GPU_PRODUCT_LABEL
from ai_scheduler.trace.records import TraceJob

_INVALID = re.compile(r"[^a-z0-9-]+")


def dns_label(text: str, default: str = "default") -> str:
    """`text` as a valid DNS-1123 label (a namespace, a label value): lower case, other characters as
    '-', at most 63 characters, alphanumeric at both ends."""
    name = _INVALID.sub("-", text.lower()).strip("-")[:63].strip("-")
    return name or default


def pod_of(job: TraceJob, *, scheduler_name: str, uid: str = "", name: str = "") -> dict[str, Any]:
    """The Pod for `job`, named `name` (the job's name by default), with `uid` set when given (the
    simulator's own objects). A job replayed from a log (`job.manifest`) is that Pod, pending again,
    under its own name and namespace."""
    if job.manifest is not None:
        pod = copy.deepcopy(dict(job.manifest))
        pod.setdefault("metadata", {})
        pod.setdefault("spec", {}).pop("nodeName", None)
        pod["spec"]["schedulerName"] = pod["spec"].get("schedulerName") or scheduler_name
        if uid:
            pod["metadata"]["uid"] = uid
        return pod
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if job.gpus:
        annotations[GPU_COUNT_ANNOTATION] = str(job.gpus)
    elif job.gpu_fraction:
        annotations[GPU_FRACTION_ANNOTATION] = repr(job.gpu_fraction)
    elif job.gpu_memory:
        annotations[GPU_MEMORY_ANNOTATION] = str(job.gpu_memory)
    if job.estimate is not None:
        annotations[ESTIMATE_ANNOTATION] = f"{max(round(job.estimate), 1)}s"
    for key, value in ((USER_LABEL, job.user), (QUEUE_LABEL, job.queue), (TASK_TYPE_LABEL, job.task_type),
                       (WORKLOAD_CLASS_LABEL, job.workload_class)):
        if value:
            labels[key] = dns_label(value)
    if job.gang:
        labels[GROUP_NAME_LABEL] = dns_label(job.gang)
        labels[GROUP_MIN_LABEL] = str(job.gang_size)
    affinity = None
    if job.gpu_models:
        term = {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": list(job.gpu_models)}
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [term]}]}}}
    pod = make_pod(
        name or dns_label(job.name, "job"),
        namespace=dns_label(job.namespace or job.user),
        cpu=f"{job.cpu}m" if job.cpu else None,
        memory=str(job.memory) if job.memory else None,
        scheduler_name=scheduler_name,
        priority=job.priority or None,
        labels=labels,
        annotations=annotations,
        affinity=affinity,
    )
    if uid:
        pod["metadata"]["uid"] = uid
    return pod
