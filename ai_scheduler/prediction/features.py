"""What the run-time model knows of a job before it runs: `Features`, read from a pod or (in
tracesim/learn.py) from a trace job, so that a model fitted on a trace predicts for the daemon's pods.

Both readers must describe the same job the same way, so the conversions live here:
- GPUs are counted in thousandths of a GPU (`gpu_milli`): 1000 per whole device (the scheduler's
  `gpu-count` annotation or the device plugin's `nvidia.com/gpu`), a `gpu-fraction`'s thousandths, and a
  `gpu-memory` share as its part of a reference device of `REFERENCE_GPU_MEMORY` bytes (a request alone
  does not say which device it will get; the model only needs a consistent size).
- The name is reduced to its stem (`name_stem`): the replicas, retries and runs of one kind of job share
  it, and it is the best single hint of what the job does.
- The user's own estimate (annotation `ai-scheduler.io/estimated-runtime`) is a feature, not only a
  baseline: the model learns how far each user's estimates are off.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ai_scheduler.cache.gangs import gang_ref
from ai_scheduler.cache.gpus import FRACTION_UNITS, gpu_request
from ai_scheduler.cache.records import (  # the task attributes (docs/reference/contract.md)
    DATASET_BYTES_ANNOTATION,
    ESTIMATE_ANNOTATION,
    MODEL_PARAMETERS_ANNOTATION,
    TASK_TYPE_LABEL,
    WORKLOAD_CLASS_LABEL,
    PodRecord,
)
from ai_scheduler.quantity import parse_duration

DEVICE_PLUGIN_GPU = "nvidia.com/gpu"
MILLI = 1000
REFERENCE_GPU_MEMORY = 80 * 2**30  # the device a `gpu-memory` share is counted against (an 80 GiB A100/H100)


@dataclass(frozen=True, slots=True)
class Features:
    """One job as the model sees it. `cpu` in millicores, `memory` in bytes, `gpu_milli` in thousandths of
    a GPU (per pod), `gang_size` the pods of its gang (0 for a lone pod), `estimate` the user's estimate
    of the run time in seconds (None when not given). Strings are used as given; the model normalises
    their case and punctuation."""

    user: str = ""
    group: str = ""
    namespace: str = ""
    task_type: str = ""
    workload_class: str = ""
    cpu: int = 0
    memory: int = 0
    gpu_milli: int = 0
    gang_size: int = 0
    name_stem: str = ""
    model_parameters: float | None = None  # a Task's declared model size (annotation model-parameters)
    dataset_bytes: float | None = None  # a Task's declared dataset size (annotation dataset-bytes)
    estimate: float | None = None


# A trailing part of a name that tells one run of a job from another rather than what the job is: a
# number (an index, a Unix time, a date's parts), an index word with its number (`run3`, `worker-2`),
# a hex digest (`3f9a2c`, a git hash), a Kubernetes random suffix (`x7k2p`, a pod-template hash
# `7d9f8c6b5`; its alphabet has no vowels), and a compact date-time (`20240101t1200`).
_INDEX_WORDS = "run|trial|try|attempt|rep|replica|worker|rank|shard|part|iter|step|epoch|seed|job|task|node"
_INDEX_WORD = re.compile(_INDEX_WORDS)
_RUN_PART = re.compile(
    r"[0-9]+"
    rf"|(?:{_INDEX_WORDS})[0-9]+"
    r"|(?=[0-9a-f]*[0-9])[0-9a-f]{6,}"
    r"|(?=[bcdfghjklmnpqrstvwxz2456789]*[0-9])[bcdfghjklmnpqrstvwxz2456789]{5,10}"
    r"|[0-9]{8}t[0-9]{4,6}z?"
)
_UUID = re.compile(r"[-_.]?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_LAST_PART = re.compile(r"^(.+?)[-_.]+([^-_.]*)$")


def name_stem(name: str) -> str:
    """The name of a job or pod without what tells its runs apart, lower-cased:
    `resnet50-train-0042` -> `resnet50-train`, `bert-ft-2024-01-31-7d9f8c6b5-x7k2p` -> `bert-ft`,
    `sweep_lr.run3` -> `sweep_lr`. The first part is always kept (`0042` stays `0042`)."""
    stem = _UUID.sub("", name.strip().lower())
    after_number = False  # an index word whose number was just stripped goes too (`worker-3`)
    while match := _LAST_PART.match(stem):
        part = match.group(2)
        if part and not _RUN_PART.fullmatch(part) and not (after_number and _INDEX_WORD.fullmatch(part)):
            break
        stem, after_number = match.group(1), part.isdigit()
    return stem.strip("-_.") or name.strip().lower()


def gpu_milli_of(count: int = 0, fraction: float = 0.0, memory: int = 0) -> int:
    """A GPU request in thousandths of a GPU: `count` whole devices, `fraction` of one device (0..1], or
    `memory` bytes of a `REFERENCE_GPU_MEMORY` device (at most one device)."""
    if count:
        return count * MILLI
    if fraction:
        return max(round(fraction * MILLI), 1)
    if memory:
        return min(math.ceil(memory * MILLI / REFERENCE_GPU_MEMORY), MILLI)
    return 0


def features_of_pod(pod: PodRecord, user: str, group: str, *, gang_size: int | None = None) -> Features:
    """The features of a pod, for the user and group the tenancy gives it.

    `gang_size` is the gang's minMember where the caller knows it (a gang declared by a PodGroup object
    does not say it on the pod); by default it is read from the pod's gang labels, 0 for a lone pod.
    A malformed GPU request or estimate reads as none (the scheduler reports it to the pod's owner)."""
    request, _ = gpu_request(pod)
    if request is not None:
        gpu = gpu_milli_of(request.count, request.fraction / FRACTION_UNITS, request.memory)
    else:
        gpu = max(pod.requests.get(DEVICE_PLUGIN_GPU, 0), 0) * MILLI
    if gang_size is None:
        ref = gang_ref(pod)
        gang_size = (ref.min_member or 0) if ref is not None else 0
    return Features(
        user=user,
        group=group,
        namespace=pod.namespace,
        task_type=pod.labels.get(TASK_TYPE_LABEL, ""),
        workload_class=pod.labels.get(WORKLOAD_CLASS_LABEL, ""),
        cpu=max(pod.requests.get("cpu", 0), 0),
        memory=max(pod.requests.get("memory", 0), 0),
        gpu_milli=gpu,
        gang_size=gang_size,
        name_stem=name_stem(pod.name),
        model_parameters=_whole(pod.annotations.get(MODEL_PARAMETERS_ANNOTATION)),
        dataset_bytes=_whole(pod.annotations.get(DATASET_BYTES_ANNOTATION)),
        estimate=parse_duration(pod.annotations.get(ESTIMATE_ANNOTATION)),
    )


def _whole(text: str | None) -> float | None:
    """A declared size: a whole number of 0 or more, or None (absent or unreadable)."""
    return float(text) if text is not None and text.isdigit() else None
