"""Gangs inferred from the workload that made the pod, with no label: the rules, in one place.

Training and serving frameworks start their pods through an operator, and the
operator's object says how many of them must run together. As KAI Scheduler's
pod grouper does, a pod is put in a group named after that workload and the
group's minimum is read from the workload:

| owner (what on the pod says so)        | group                  | minimum                           |
|----------------------------------------|------------------------|-----------------------------------|
| LeaderWorkerSet (1)                    | each group: NAME-INDEX | annotation .../size               |
| JobSet, so Trainer v2's TrainJob (2)   | the JobSet             | replicas x parallelism, summed    |
| PyTorchJob, MPIJob (3)                 | the job                | minAvailable, else all replicas   |
| RayCluster, so RayJob, RayService (4)  | the cluster            | head + workers' minReplicas       |
| indexed Job (5)                        | the Job                | min(parallelism, completions)     |

(1) labels `leaderworkerset.sigs.k8s.io/name` and `/group-index`, annotation `/size`; with the
    LeaderWorkerSet's `startupPolicy: LeaderReady` the leader is placed alone and its workers
    (size - 1) together, as the workers are made only once the leader runs.
(2) label `jobset.sigs.k8s.io/jobset-name`; parallelism is min(parallelism, completions); with
    `startupPolicy.startupPolicyOrder: InOrder` one group per replicatedJob (`JOBSET-RJOB`), as they
    start one after another.
(3) label `training.kubeflow.org/job-name`, the kind from the owner reference or label
    `training.kubeflow.org/operator-name`; minimum `runPolicy.schedulingPolicy.minAvailable`, else
    (PyTorchJob) `elasticPolicy.minReplicas`, else the sum of the replica specs' replicas; an MPIJob
    with `launcherCreationPolicy: WaitForWorkersReady` counts its workers only.
(4) label `ray.io/cluster` and owner RayCluster (a RayJob's or RayService's pods are their
    RayCluster's); a worker group counts minReplicas x numOfHosts when autoscaling or minReplicas > 0,
    else replicas x numOfHosts, and nothing when suspended.
(5) owner Job and annotation `batch.kubernetes.io/job-completion-index` (a JobSet's Jobs are (2)).
A minimum of 1 or less is no gang.

The LeaderWorkerSet's size is on the pod; every other minimum lives only in the
owner object, read through an optional informer per kind (OWNER_RESOURCES; a
kind whose CRD is not installed is simply never seen). A pod whose owner has
not been seen yet waits with a reason that says so; a malformed owner (a
negative count, minReplicas above replicas) leaves its pods waiting with the
owner's problem as the reason, never a gang of the wrong size.

Annotation `ai-scheduler.io/gang-inference: "off"` on a pod (set it in the
workload's pod template) keeps it out of inference. Explicit keys (labels,
annotations, `spec.schedulingGroup`) come first (gangs.gang_ref).

The functions here are pure: `parse_owner` turns an owner object into its
OwnerSpec once per watch event, and `infer_gang` reads a pod and a lookup of
OwnerSpecs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.messages import echo
from ai_scheduler.quantity import parse_go_int

INFERENCE_ANNOTATION = "ai-scheduler.io/gang-inference"

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
KUBEFLOW_OPERATOR = "training.kubeflow.org/operator-name"
RAY_CLUSTER = "ray.io/cluster"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# The owner kinds read, as (API group, version, plural, kind): an optional informer each.
OWNER_RESOURCES: tuple[tuple[str, str, str, str], ...] = (
    ("batch", "v1", "jobs", "Job"),
    ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    ("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    ("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    ("ray.io", "v1", "rayclusters", "RayCluster"),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"),
)
KUBEFLOW_KINDS = {"PyTorchJob": "PyTorchJob", "MPIJob": "MPIJob"}
KUBEFLOW_OPERATORS = {
    "pytorchjob-controller": "PyTorchJob", "mpi-operator": "MPIJob", "mpijob-controller": "MPIJob"
}


def resource_key(group: str, version: str, plural: str) -> str:
    """The informer's resource name for an owner kind (api/kube.py lists `GROUP/VERSION/PLURAL`)."""
    return f"{group}/{version}/{plural}"


@dataclass(frozen=True, slots=True)
class OwnerSpec:
    """What inference needs from one owner object, parsed once per watch event."""

    kind: str
    namespace: str
    name: str
    minimum: int = 0  # the whole group's minimum
    error: str = ""  # the owner's spec cannot give a minimum: its pods wait with this reason
    in_order: bool = False  # JobSet: replicatedJobs start one after another (one group each)
    per_part: Mapping[str, int] = field(default_factory=dict)  # JobSet replicatedJob -> its minimum
    leader_ready: bool = False  # LeaderWorkerSet: workers are created once the leader is ready
    launcher_later: int = 0  # MPIJob WaitForWorkersReady: launcher replicas, not in the quorum
    scheduling: bool = False  # Job: spec.scheduling set (WorkloadWithJob), its own choice of policy


@dataclass(frozen=True, slots=True)
class Inferred:
    """The group a pod belongs to by its owner."""

    kind: str  # the owner kind the group is named after; the gang's key is NAMESPACE/KIND/NAME
    name: str
    owner: tuple[str, str, str]  # (kind, namespace, name) of the object whose changes re-read the group
    minimum: int | None  # None: not known yet (see `problem`)
    problem: str = ""  # why the minimum is unknown or invalid: the pods wait with this reason
    declared_by: str = ""  # the label that names the group, for messages


OwnerLookup = Callable[[str, str, str], OwnerSpec | None]


def _count(value: Any, what: str, default: int) -> tuple[int, str]:
    """A replica count as the CRDs declare it: a non-negative integer (absent: `default`)."""
    if value is None:
        return default, ""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        return default, f"{what} must be a non-negative integer, got {echo(value)}"
    return value, ""


def _path(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def parse_owner(kind: str, obj: dict[str, Any]) -> OwnerSpec:
    """The OwnerSpec of one object of an OWNER_RESOURCES kind."""
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    parser = _PARSERS.get(kind)
    if parser is None:
        return OwnerSpec(kind, ns, name, error=f"no inference rule for kind {kind}")
    values, problems = parser(spec)
    if problems:
        return OwnerSpec(kind, ns, name, error=f"{kind} {ns}/{name}: " + "; ".join(problems))
    return OwnerSpec(kind, ns, name, **values)


def _job(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    parallelism, error = _count(spec.get("parallelism"), "spec.parallelism", 1)
    problems += [error] if error else []
    completions, error = _count(spec.get("completions"), "spec.completions", parallelism)
    problems += [error] if error else []
    return {"minimum": min(parallelism, completions)}, problems


def _replicated_job_minimum(rj: Any, index: int) -> tuple[str, int, list[str]]:
    if not isinstance(rj, dict):
        return "", 0, [f"spec.replicatedJobs[{index}] must be an object"]
    problems: list[str] = []
    replicas, error = _count(rj.get("replicas"), f"spec.replicatedJobs[{index}].replicas", 1)
    problems += [error] if error else []
    job, job_problems = _job(_path(rj, "template", "spec") or {})
    problems += [f"spec.replicatedJobs[{index}].template.{p}" for p in job_problems]
    return str(rj.get("name") or ""), replicas * job["minimum"], problems


def _jobset(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    jobs = spec.get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        return {}, ["spec.replicatedJobs must list at least one replicated job"]
    problems: list[str] = []
    parts: dict[str, int] = {}
    for index, rj in enumerate(jobs):
        name, minimum, rj_problems = _replicated_job_minimum(rj, index)
        problems += rj_problems
        parts[name] = minimum
    order = _path(spec, "startupPolicy", "startupPolicyOrder")
    return {"minimum": sum(parts.values()), "in_order": order == "InOrder", "per_part": parts}, problems


Parser = Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]]


def _kubeflow(replica_key: str, launcher: str) -> Parser:
    def parse(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        problems: list[str] = []
        replicas = spec.get(replica_key)
        if not isinstance(replicas, dict) or not replicas:
            return {}, [f"spec.{replica_key} must map replica types to their specs"]
        total = 0
        counts: dict[str, int] = {}
        for rtype, rspec in replicas.items():
            count, error = _count(_path(rspec, "replicas"), f"spec.{replica_key}.{rtype}.replicas", 1)
            problems += [error] if error else []
            counts[rtype] = count
            total += count
        minimum = total
        least = _path(spec, "elasticPolicy", "minReplicas")
        elastic, error = _count(least, "spec.elasticPolicy.minReplicas", 0)
        problems += [error] if error else []
        if elastic:
            minimum = elastic
        declared, error = _count(
            _path(spec, "runPolicy", "schedulingPolicy", "minAvailable"),
            "spec.runPolicy.schedulingPolicy.minAvailable",
            0,
        )
        problems += [error] if error else []
        if declared:
            minimum = declared
        later = 0
        if launcher and spec.get("launcherCreationPolicy") == "WaitForWorkersReady":
            later = counts.get(launcher, 0)
            minimum = max(minimum - later, 1)
        return {"minimum": minimum, "launcher_later": later}, problems

    return parse


def _raycluster(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    minimum = 1  # the head
    autoscaling = spec.get("enableInTreeAutoscaling") is True
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        return {}, ["spec.workerGroupSpecs must be a list"]
    for index, group in enumerate(groups):
        where = f"spec.workerGroupSpecs[{index}]"
        if not isinstance(group, dict):
            problems.append(f"{where} must be an object")
            continue
        if group.get("suspended") is True:
            continue
        replicas, error = _count(group.get("replicas"), f"{where}.replicas", 0)
        problems += [error] if error else []
        least, error = _count(group.get("minReplicas"), f"{where}.minReplicas", 0)
        problems += [error] if error else []
        hosts, error = _count(group.get("numOfHosts"), f"{where}.numOfHosts", 1)
        problems += [error] if error else []
        if least > replicas:
            problems.append(f"{where}.minReplicas ({least}) is above its replicas ({replicas})")
            continue
        minimum += (least if autoscaling or least > 0 else replicas) * hosts
    return {"minimum": minimum}, problems


def _leaderworkerset(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    size, error = _count(_path(spec, "leaderWorkerTemplate", "size"), "spec.leaderWorkerTemplate.size", 1)
    problems += [error] if error else []
    return {"minimum": size, "leader_ready": spec.get("startupPolicy") == "LeaderReady"}, problems


def _standalone_job(spec: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    values, problems = _job(spec)
    return {**values, "scheduling": spec.get("scheduling") is not None}, problems


_PARSERS: dict[str, Parser] = {
    "Job": _standalone_job,
    "JobSet": _jobset,
    "PyTorchJob": _kubeflow("pytorchReplicaSpecs", ""),
    "MPIJob": _kubeflow("mpiReplicaSpecs", "Launcher"),
    "RayCluster": _raycluster,
    "LeaderWorkerSet": _leaderworkerset,
}


def inference_problem(pod: PodRecord) -> str:
    """The inference annotation's value is not one we know: '' when it is absent, "on" or "off"."""
    value = pod.annotations.get(INFERENCE_ANNOTATION)
    if value is None or value in ("on", "off"):
        return ""
    return f'annotation {INFERENCE_ANNOTATION} must be "on" or "off", got {echo(value)}'


def _not_seen(kind: str, namespace: str, name: str) -> str:
    return f"waiting for {kind} {namespace}/{name} to be seen, to read its gang's minimum"


def infer_gang(pod: PodRecord, owners: OwnerLookup) -> Inferred | None:
    """The group the pod's owner implies, or None (no rule applies, inference is off, or the group is
    of one pod)."""
    if pod.annotations.get(INFERENCE_ANNOTATION) == "off":
        return None
    labels, ns = pod.labels, pod.namespace
    lws = labels.get(LWS_NAME)
    if lws:
        return _leaderworkerset_group(pod, lws, owners)
    jobset = labels.get(JOBSET_NAME)
    if jobset:
        return _jobset_group(pod, jobset, owners)
    owner = pod.owner
    kubeflow = labels.get(KUBEFLOW_JOB_NAME)
    if kubeflow:
        kind = KUBEFLOW_KINDS.get(owner[1] if owner else "") or KUBEFLOW_OPERATORS.get(
            labels.get(KUBEFLOW_OPERATOR) or ""
        )
        if kind:
            return _owned(kind, ns, kubeflow, f"label {KUBEFLOW_JOB_NAME}", owners)
    ray = labels.get(RAY_CLUSTER)
    if ray and owner is not None and owner[1] == "RayCluster":
        return _owned("RayCluster", ns, ray, f"label {RAY_CLUSTER}", owners)
    if owner is not None and owner[:2] == ("batch", "Job") and JOB_COMPLETION_INDEX in pod.annotations:
        return _owned("Job", ns, owner[2], "its indexed Job", owners)
    return None


def _owned(kind: str, ns: str, name: str, by: str, owners: OwnerLookup) -> Inferred | None:
    spec = owners(kind, ns, name)
    key = (kind, ns, name)
    if spec is None:
        return Inferred(kind, name, key, None, _not_seen(kind, ns, name), by)
    if spec.error:
        return Inferred(kind, name, key, None, spec.error, by)
    # An MPIJob's launcher made after its workers run (WaitForWorkersReady) is not in the quorum: it joins
    # a gang already placed, as an extra member.
    if spec.minimum <= 1:
        return None
    return Inferred(kind, name, key, spec.minimum, "", by)


def _leaderworkerset_group(pod: PodRecord, lws: str, owners: OwnerLookup) -> Inferred | None:
    ns = pod.namespace
    index = pod.labels.get(LWS_GROUP_INDEX)
    by = f"label {LWS_NAME}"
    key = ("LeaderWorkerSet", ns, lws)
    if index is None or parse_go_int(index) is None:
        problem = f"label {LWS_GROUP_INDEX} must be a group index, got {echo(index)}"
        return Inferred("LeaderWorkerSet", lws, key, None, problem, by)
    name = f"{lws}-{index}"
    size_text = pod.annotations.get(LWS_SIZE)
    size = parse_go_int(size_text) if size_text is not None else None
    spec = owners(*key)
    if size is None and spec is not None and not spec.error:
        size = spec.minimum
    if size is None or size < 1:
        problem = (
            f"annotation {LWS_SIZE} must be a positive group size, got {echo(size_text)}"
            if size_text is not None
            else _not_seen(*key)
        )
        return Inferred("LeaderWorkerSet", name, key, None, problem, by)
    if spec is not None and spec.leader_ready:
        # The workers are created once the leader runs: the leader is placed alone, the workers together.
        if pod.labels.get(LWS_WORKER_INDEX) == "0":
            return None
        size -= 1
        name = f"{name}-workers"
    if size <= 1:
        return None
    return Inferred("LeaderWorkerSet", name, key, size, "", by)


def _jobset_group(pod: PodRecord, jobset: str, owners: OwnerLookup) -> Inferred | None:
    ns = pod.namespace
    key = ("JobSet", ns, jobset)
    by = f"label {JOBSET_NAME}"
    spec = owners(*key)
    if spec is None:
        return Inferred("JobSet", jobset, key, None, _not_seen(*key), by)
    if spec.error:
        return Inferred("JobSet", jobset, key, None, spec.error, by)
    if spec.in_order:
        part = pod.labels.get(JOBSET_REPLICATED_JOB) or ""
        minimum = spec.per_part.get(part)
        if minimum is None:
            problem = f"label {JOBSET_REPLICATED_JOB} {echo(part)} names no replicated job of {ns}/{jobset}"
            return Inferred("JobSet", f"{jobset}-{part}", key, None, problem, by)
        return Inferred("JobSet", f"{jobset}-{part}", key, minimum, "", by) if minimum > 1 else None
    return Inferred("JobSet", jobset, key, spec.minimum, "", by) if spec.minimum > 1 else None
