r"""Tasks (`tasks.ai-scheduler.io`): the spec read once, a Task's pods, and its life as a pure function.

A Task is what a user submits instead of a set of pods: roles (each a pod template, a number of replicas
and a minimum: the gang), a queue, a priority class, declared attributes (kind, domain, framework, model
and dataset size, an estimated run time), a run-time limit, a retry policy, `suspend` (hold), and the user
actions the kubectl plugin sets (`cancel`, `requeueAt`). The daemon's controller (daemon/tasks.py) runs
it; this module decides, and talks to no one:

- `TaskSpec.from_api` reads and checks the object once. A spec that cannot be run (no roles, a minimum
  above the replicas, a template without containers, an unknown kind) is a Task that fails at once with
  the reason on its status, never one that is silently half-created.
- `task_pods` makes the pods of one run: every replica of every role at once, as one gang whose
  minimum is the sum of the roles' minimums (labels `pod-group.scheduling.sigs.k8s.io/name` and
  `/min-available`). The queue, the quotas, the priority policies, preemption and the visibility API
  all work on pods, so a Task's pods wait in the queue like any other gang: the core places them all or
  none and binds none before the whole minimum has a node. So pods are created at once, ungated: a gated
  pod is out of the queue, where it would have no position, no quota check and no expected start.
  The declared attributes go on the pods where the run-time model reads them (labels `task-type` and
  `workload-class`, the `estimated-runtime` annotation).
- `reconcile` is the Task's state machine: from the spec, the status the controller last wrote, the pods
  of the Task and the time, it returns a `Plan`: pods to create, pods to delete, the new status and the
  phase changes to log. It is called again after every change, and writing its plan twice does no harm
  (a pod created twice is refused by name, one deleted twice is already gone).

The phases (`status.phase`)::

    (created) -> Queued -----> Admitted ----> Running ----> Succeeded
                  ^  |  \          |             |  \
                  |  |   \         v             v   `---> Failed (a pod failed, retries spent;
                  |  |    `-----> Held <--------'              or over its run-time limit)
                  |  v             |
                  |  Cancelled <---'  (cancel: from any phase that is not finished)
                  `-- a restart: a pod failed with retries left, a pod preempted or lost, a requeue

- Queued: the run's pods wait in the scheduler's queue. Admitted: the whole minimum is bound to nodes.
  Running: the whole minimum runs (`startedAt` is when it first did in this run; the run-time limit
  counts from it). Held: `spec.suspend`; the run's pods are deleted (a running Task stops, as a
  suspended Job does) and made again when it is released, which queues it anew.
- A restart deletes the run's pods and makes the next run's (`status.run`; pod names and the gang carry
  it, so no pod of an old run is ever counted in a new one). Failures count against
  `retryPolicy.maxRestarts`; a preemption, a lost pod and a user's requeue do not.
- Succeeded: every pod of the roles named by `successPolicy.roles` (default: all roles) succeeded; the
  pods still running (workers of a launcher that finished) are deleted. Finished pods are kept unless
  `podsAfterFinish: Delete`.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.cache.domains import DOMAIN_LABEL
from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL
from ai_scheduler.cache.records import (
    DATASET_BYTES_ANNOTATION,
    ESTIMATE_ANNOTATION,
    MODEL_PARAMETERS_ANNOTATION,
    TASK_TYPE_LABEL,
    WORKLOAD_CLASS_LABEL,
)
from ai_scheduler.cache.tenancy import QUEUE_LABEL
from ai_scheduler.config import TASK_DOMAINS, TASK_KINDS, TaskRuleSpec
from ai_scheduler.log import parse_time, rfc3339
from ai_scheduler.quantity import parse_duration, parse_quantity

TASK_GROUP, TASK_VERSION, TASK_PLURAL = "ai-scheduler.io", "v1alpha1", "tasks"
TASK_API_VERSION = f"{TASK_GROUP}/{TASK_VERSION}"
TASK_RESOURCE = f"{TASK_GROUP}/{TASK_VERSION}/{TASK_PLURAL}"  # the informer's GROUP/VERSION/PLURAL
TASK_LABEL = "ai-scheduler.io/task"  # on each pod: the Task's name
ROLE_LABEL = "ai-scheduler.io/task-role"
RUN_LABEL = "ai-scheduler.io/task-run"

KINDS, DOMAINS = TASK_KINDS, TASK_DOMAINS
QUEUED, ADMITTED, RUNNING, HELD = "Queued", "Admitted", "Running", "Held"
SUCCEEDED, FAILED, CANCELLED = "Succeeded", "Failed", "Cancelled"
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
SCHEDULER_NAME = "ai-scheduler"
GPU = "nvidia.com/gpu"
MAX_NAME = 63  # a label value's limit: the gang's name is one


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    replicas: int
    minimum: int
    template: Mapping[str, Any]
    gpus: int = 0  # whole GPUs each pod asks (nvidia.com/gpu)


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A Task as read once from the API object; `error` says why it cannot run ("" when it can)."""

    namespace: str
    name: str
    uid: str
    roles: tuple[Role, ...] = ()
    queue: str = ""
    priority_class: str = ""
    kind: str = ""
    domain: str = ""
    framework: str = ""
    model_parameters: int = 0
    dataset_bytes: int = 0
    estimated_run_time: float | None = None
    run_time_limit: float | None = None
    max_restarts: int = 0
    success_roles: tuple[str, ...] = ()
    suspend: bool = False
    cancel: bool = False
    requeue_at: str = ""
    keep_pods: bool = True
    node_domain: str = ""  # spec.placement.domain: the logical domain of nodes (cache/domains.py)
    domain_required: bool = True  # spec.placement.domainPolicy: Required (default) or Preferred
    error: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def minimum(self) -> int:
        return sum(role.minimum for role in self.roles)

    @property
    def replicas(self) -> int:
        return sum(role.replicas for role in self.roles)

    @property
    def gpus(self) -> int:
        """Whole GPUs all its pods ask (nvidia.com/gpu)."""
        return sum(role.replicas * role.gpus for role in self.roles)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> TaskSpec:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        if not isinstance(spec, dict):
            spec = {"roles": None, "_error": f"spec must be an object, got {type(spec).__name__}"}
        ident = {"namespace": str(meta.get("namespace") or "default"), "name": str(meta.get("name") or ""),
                 "uid": str(meta.get("uid") or "")}
        errors: list[str] = [spec["_error"]] if "_error" in spec else []
        roles = _roles(spec.get("roles"), errors)
        attributes = spec.get("attributes") or {}
        if not isinstance(attributes, dict):
            errors.append("spec.attributes must be an object")
            attributes = {}
        kind = str(attributes.get("kind") or "")
        if kind and kind not in KINDS:
            errors.append(f"spec.attributes.kind must be one of {', '.join(KINDS)}, got {kind!r}")
        domain = str(attributes.get("domain") or "")
        if domain and domain not in DOMAINS:
            errors.append(f"spec.attributes.domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
        parameters = _count(attributes.get("modelParameters"), "spec.attributes.modelParameters", errors)
        dataset = _bytes(attributes.get("datasetSize"), "spec.attributes.datasetSize", errors)
        estimate = _duration(attributes.get("estimatedRunTime"), "spec.attributes.estimatedRunTime", errors)
        limit = _duration(spec.get("runTimeLimit"), "spec.runTimeLimit", errors)
        retry = spec.get("retryPolicy") or {}
        policy = spec.get("successPolicy") or {}
        restarts = _count(retry.get("maxRestarts") if isinstance(retry, dict) else None,
                          "spec.retryPolicy.maxRestarts", errors)
        success = (policy.get("roles") if isinstance(policy, dict) else policy) or ()
        names = {role.name for role in roles}
        if not isinstance(success, list | tuple) or any(r not in names for r in success):
            known = ", ".join(sorted(names))
            errors.append(f"spec.successPolicy.roles must name roles of the Task ({known}), got {success!r}")
            success = ()
        placement = spec.get("placement") or {}
        if not isinstance(placement, dict):
            errors.append("spec.placement must be an object")
            placement = {}
        policy = placement.get("domainPolicy") or "Required"
        if policy not in ("Required", "Preferred"):
            errors.append(f'spec.placement.domainPolicy must be "Required" or "Preferred", got {policy!r}')
        after = spec.get("podsAfterFinish") or "Keep"
        if after not in ("Keep", "Delete"):
            errors.append(f'spec.podsAfterFinish must be "Keep" or "Delete", got {after!r}')
        if len(ident["name"]) > MAX_NAME:
            errors.append(f"the Task's name may have at most {MAX_NAME} characters (it is a label value on "
                          "its pods)")
        return cls(
            **ident, roles=roles, queue=str(spec.get("queue") or ""),
            priority_class=str(spec.get("priorityClassName") or ""), kind=kind, domain=domain,
            framework=str(attributes.get("framework") or ""), model_parameters=parameters,
            dataset_bytes=dataset, estimated_run_time=estimate, run_time_limit=limit,
            max_restarts=restarts, success_roles=tuple(success), suspend=spec.get("suspend") is True,
            cancel=spec.get("cancel") is True, requeue_at=str(spec.get("requeueAt") or ""),
            keep_pods=after != "Delete", node_domain=str(placement.get("domain") or ""),
            domain_required=policy != "Preferred", error="; ".join(errors),
        )


def _roles(raw: Any, errors: list[str]) -> tuple[Role, ...]:
    if not isinstance(raw, list) or not raw:
        errors.append("spec.roles must list at least one role")
        return ()
    roles: list[Role] = []
    for index, item in enumerate(raw):
        where = f"spec.roles[{index}]"
        if not isinstance(item, dict):
            errors.append(f"{where} must be an object")
            continue
        name = str(item.get("name") or "")
        if not name or not name.replace("-", "").isalnum() or name != name.lower():
            errors.append(f"{where}.name must be a lower-case name such as worker, got {name!r}")
        if any(role.name == name for role in roles):
            errors.append(f"{where}.name {name!r} is used twice")
        replicas = _count(item.get("replicas", 1), f"{where}.replicas", errors)
        minimum = _count(item.get("minimum", replicas), f"{where}.minimum", errors)
        if minimum > replicas:
            errors.append(f"{where}.minimum ({minimum}) is above its replicas ({replicas})")
        template = item.get("template")
        if not isinstance(template, dict) or not isinstance(template.get("metadata") or {}, dict):
            errors.append(f"{where}.template must be a pod template (metadata and spec)")
            template = {}
        containers = (template.get("spec") or {}).get("containers")
        if not isinstance(containers, list) or not containers:
            errors.append(f"{where}.template.spec.containers must list at least one container")
            template = {}
        roles.append(Role(name, replicas, minimum, template, _gpus(containers or ())))
    if roles and not sum(role.replicas for role in roles):
        errors.append("spec.roles make no pod: every role has 0 replicas")
    return tuple(roles)


def _gpus(containers: Iterable[Any]) -> int:
    """Whole GPUs a pod's containers ask (nvidia.com/gpu, a limit or a request); unreadable: none."""
    total = 0
    for container in containers:
        resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        amount = str(limits.get(GPU) or requests.get(GPU) or 0)
        total += int(amount) if amount.isdigit() else 0
    return total


def _count(value: Any, where: str, errors: list[str]) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        errors.append(f"{where} must be a whole number of 0 or more, got {value!r}")
        return 0
    return value


def _duration(value: Any, where: str, errors: list[str]) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        seconds: float | None = None
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = parse_duration(value) if isinstance(value, str) else None
    if seconds is None or seconds <= 0:
        errors.append(f"{where} must be a duration such as 90m or 2h30m, got {value!r}")
        return None
    return seconds


def _bytes(value: Any, where: str, errors: list[str]) -> int:
    if value is None or value == "":
        return 0
    try:
        return max(int(parse_quantity(str(value))), 0)
    except ValueError:
        errors.append(f"{where} must be a quantity such as 500Gi, got {value!r}")
        return 0


# ------------------------------------------------------------------------------------------------ pods
@dataclass(frozen=True, slots=True)
class TaskPod:
    """What the controller keeps of one pod of a Task (from the API object, or a create's answer)."""

    name: str
    uid: str
    role: str
    run: int
    phase: str = "Pending"
    node: str = ""
    deleting: bool = False
    gpus: int = 0
    started: float | None = None
    finished: float | None = None
    disrupted: str = ""  # the DisruptionTarget condition's reason (a preemption, an eviction)
    exit: str = ""  # why it ended: its container's terminated reason and exit code, or the pod's reason

    @property
    def active(self) -> bool:
        return self.phase not in ("Succeeded", "Failed") and not self.deleting

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> TaskPod | None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        try:
            run = int(labels.get(RUN_LABEL, "0"))
        except ValueError:
            return None
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        gpus = _gpus(spec.get("containers") or ())
        exit_reason = str(status.get("reason") or "")
        finished: float | None = None
        for container in status.get("containerStatuses") or ():
            terminated = (container.get("state") or {}).get("terminated")
            if terminated:
                exit_reason = exit_reason or f"{terminated.get('reason') or 'Terminated'} " \
                    f"(exit code {terminated.get('exitCode')})"
                finished = max(finished or 0.0, parse_time(terminated.get("finishedAt")) or 0.0) or None
        disrupted = next((str(c.get("reason") or "DisruptionTarget") for c in status.get("conditions") or ()
                          if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), "")
        return cls(
            name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
            role=str(labels.get(ROLE_LABEL, "")), run=run, phase=str(status.get("phase") or "Pending"),
            node=str(spec.get("nodeName") or ""), deleting=bool(meta.get("deletionTimestamp")), gpus=gpus,
            started=parse_time(status.get("startTime")),
            finished=finished, disrupted=disrupted, exit=exit_reason,
        )


def gang_name(task: TaskSpec, run: int) -> str:
    """The gang of a run: the Task's name, `-r<run>` after it from the second run on. It is a label value
    (at most MAX_NAME characters): a long name whose run number would pass the limit is cut, and a
    digest of the whole name kept before the run, so that two Tasks whose names differ only past the
    cut still have gangs of their own."""
    name = task.name if run == 0 else f"{task.name}-r{run}"
    if len(name) <= MAX_NAME:
        return name
    suffix = f"-{hashlib.sha256(task.name.encode()).hexdigest()[:8]}-r{run}"
    return task.name[: MAX_NAME - len(suffix)] + suffix


def pod_name(task: TaskSpec, role: str, index: int, run: int) -> str:
    return f"{task.name}-{role}-{index}" if run == 0 else f"{task.name}-{role}-{index}-r{run}"


def matching_rules(task: TaskSpec, rules: Iterable[TaskRuleSpec]) -> list[TaskRuleSpec]:
    """The administrator's task rules (config `taskRules`) whose every condition the Task meets."""
    return [rule for rule in rules
            if rule.kind in (None, task.kind) and rule.domain in (None, task.domain)
            and task.model_parameters >= rule.min_model_parameters and task.gpus >= rule.min_gpus
            and (rule.prefer or rule.avoid)]


def system_affinity(rules: Iterable[TaskRuleSpec]) -> list[dict[str, Any]]:
    """The rules applied, as the Task's status shows them."""
    return [{"rule": r.name, "prefer": dict(r.prefer), "avoid": dict(r.avoid), "weight": r.weight,
             "required": r.required} for r in rules]


def _with_rules(spec: dict[str, Any], rules: list[TaskRuleSpec]) -> None:
    """Add the rules' node affinity to a pod spec: a preferred term per rule (`In` the labels preferred,
    `NotIn` those avoided), or, for a required rule, its expressions added to every required term (the
    terms are ORed, so each must carry them)."""
    if not rules:
        return
    node = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    for rule in rules:
        expressions = [{"key": key, "operator": operator, "values": [value]}
                       for operator, labels in (("In", rule.prefer), ("NotIn", rule.avoid))
                       for key, value in sorted(labels.items())]
        if rule.required:
            required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
            terms = required.setdefault("nodeSelectorTerms", []) or [{}]
            for term in terms:
                term["matchExpressions"] = [*(term.get("matchExpressions") or ()), *expressions]
            required["nodeSelectorTerms"] = terms
        else:
            node.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
                {"weight": rule.weight, "preference": {"matchExpressions": expressions}})


def task_pods(task: TaskSpec, run: int, rules: Iterable[TaskRuleSpec] = (),
              domain_terms: Mapping[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Every pod of a run: one gang of all replicas, the minimum the roles' sum (see the module's doc),
    with the node affinity of the task rules it matches, and its domain: required, the label
    `ai-scheduler.io/domain` (the core keeps it off other nodes); preferred, a preferred node affinity
    term made of the domain's selector (`domain_terms`: the node selector terms of each Domain)."""
    applied = matching_rules(task, rules)
    pods = []
    owner = {"apiVersion": TASK_API_VERSION, "kind": "Task", "name": task.name, "uid": task.uid,
             "controller": True}
    for role in task.roles:
        for index in range(role.replicas):
            template = role.template
            meta = template.get("metadata") or {}
            labels = {**(meta.get("labels") or {}), TASK_LABEL: task.name, ROLE_LABEL: role.name,
                      RUN_LABEL: str(run), GROUP_NAME_LABEL: gang_name(task, run),
                      GROUP_MIN_LABEL: str(task.minimum)}
            if task.queue:
                labels[QUEUE_LABEL] = task.queue
            if task.kind:
                labels[TASK_TYPE_LABEL] = task.kind
            if task.domain:
                labels[WORKLOAD_CLASS_LABEL] = task.domain
            annotations = dict(meta.get("annotations") or {})
            if task.estimated_run_time is not None:
                annotations[ESTIMATE_ANNOTATION] = f"{round(task.estimated_run_time)}s"
            if task.model_parameters:
                annotations[MODEL_PARAMETERS_ANNOTATION] = str(task.model_parameters)
            if task.dataset_bytes:
                annotations[DATASET_BYTES_ANNOTATION] = str(task.dataset_bytes)
            spec = copy.deepcopy(dict(template.get("spec") or {}))
            spec["schedulerName"] = SCHEDULER_NAME
            spec["restartPolicy"] = "Never"  # the Task restarts a run, not the kubelet a container
            if task.priority_class:
                spec["priorityClassName"] = task.priority_class
            _with_rules(spec, applied)
            if task.node_domain and task.domain_required:
                labels[DOMAIN_LABEL] = task.node_domain
            elif task.node_domain:
                node = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                preferred = node.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
                for term in (domain_terms or {}).get(task.node_domain, []):
                    preferred.append({"weight": 100, "preference": term})
            pods.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name(task, role.name, index, run), "namespace": task.namespace,
                             "labels": labels, "annotations": annotations, "ownerReferences": [owner]},
                "spec": spec,
            })
    return pods


# ------------------------------------------------------------------------------------------- the plan
@dataclass(slots=True)
class Plan:
    """What the controller does for one Task now: deletions first, then the status, then creations."""

    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # (phase, reason, message)


def reconcile(task: TaskSpec, status: Mapping[str, Any], pods: Iterable[TaskPod], now: float,
              rules: Iterable[TaskRuleSpec] = (),
              domain_terms: Mapping[str, list[dict[str, Any]]] | None = None) -> Plan:
    """The Task's next step (see the module's doc); `status` is what the controller last wrote, `rules`
    the administrator's task rules (config `taskRules`), `domain_terms` the Domains' node selector terms
    (for a preferred domain)."""
    plan = _step(task, status, pods, now, tuple(rules), domain_terms or {})
    _set_conditions(plan.status, now)
    return plan


# The conditions (`status.conditions`, metav1.Condition's fields) and the phases in which each is True.
CONDITIONS = (
    ("Admitted", (ADMITTED, RUNNING)),  # the whole minimum placed
    ("Running", (RUNNING,)),
    ("Held", (HELD,)),
    ("Finished", FINISHED),
)


def _set_conditions(status: dict[str, Any], now: float) -> None:
    """One condition per type, True in its phases, with the phase's reason and message; its
    lastTransitionTime moves only when its status does."""
    phase, old = status.get("phase"), {c.get("type"): c for c in status.get("conditions") or ()}
    conditions = []
    for kind, phases in CONDITIONS:
        value = "True" if phase in phases else "False"
        before = old.get(kind)
        if before is None and value == "False":
            continue
        since = before.get("lastTransitionTime") if before and before.get("status") == value else rfc3339(now)
        if value == "True" or before is None or before.get("status") == "True":
            reason, message = str(status.get("reason") or phase), str(status.get("message") or "")
        else:
            reason, message = str(before.get("reason") or ""), str(before.get("message") or "")
        conditions.append({"type": kind, "status": value, "reason": reason, "message": message,
                           "lastTransitionTime": since})
    status["conditions"] = conditions


def _step(task: TaskSpec, status: Mapping[str, Any], pods: Iterable[TaskPod], now: float,
          rules: tuple[TaskRuleSpec, ...], domain_terms: Mapping[str, list[dict[str, Any]]]) -> Plan:
    new = copy.deepcopy(dict(status))
    plan = Plan(status=new)
    pods = list(pods)
    phase = str(new.get("phase") or "")
    run = int(new.get("run") or 0)
    new.setdefault("run", run)
    new.setdefault("restarts", 0)
    new.setdefault("failedRuns", 0)
    new.setdefault("queuedAt", rfc3339(now))
    stale = [p.name for p in pods if p.active and p.run != run]  # a run left behind by a restart
    current = [p for p in pods if p.run == run]

    def move(to: str, reason: str, message: str) -> None:
        if new.get("phase") != to or new.get("reason") != reason:
            plan.changes.append((to, reason, message))
        new.update(phase=to, reason=reason, message=message)

    def finish(to: str, reason: str, message: str) -> None:
        plan.delete.extend(p.name for p in pods if p.active or not task.keep_pods)
        _hold_times(new, current, now, finished=True)
        new["finishedAt"] = rfc3339(now)
        new["exitReason"] = message
        move(to, reason, message)

    if phase in FINISHED:
        plan.delete.extend(p.name for p in pods if p.active or (not task.keep_pods and not p.deleting))
        return plan
    if task.error:
        finish(FAILED, "InvalidSpec", task.error)
        return plan
    if task.cancel:
        finish(CANCELLED, "Cancelled", "cancelled by the user (spec.cancel)")
        return plan
    plan.delete.extend(stale)

    def next_run() -> None:
        """The run's pods go; the next run's are made when the status saying so is written."""
        plan.delete.extend(p.name for p in current if p.active)
        new.update(run=run + 1, podsCreated=False)
        new.pop("startedAt", None)
        new.pop("admittedAt", None)

    def restart(reason: str, message: str, *, failed: bool) -> None:
        next_run()
        new["restarts"] = int(new["restarts"]) + 1
        new.pop("waitSeconds", None)
        if failed:
            new["failedRuns"] = int(new["failedRuns"]) + 1
        new["queuedAt"] = rfc3339(now)
        move(QUEUED, reason, message)

    if task.requeue_at and task.requeue_at != new.get("requeueAt"):
        new["requeueAt"] = task.requeue_at
        if new.get("podsCreated"):
            restart("Requeued", f"requeued by the user at {task.requeue_at}", failed=False)
            return plan
    if task.suspend:
        if any(p.active for p in current) or new.get("podsCreated"):
            next_run()
        move(HELD, "Held", "held by the user (spec.suspend): its pods are made again when it is released")
        return plan
    if not new.get("podsCreated"):
        if phase == HELD:
            new["queuedAt"] = rfc3339(now)
        plan.create = task_pods(task, run, rules, domain_terms)
        new["systemAffinity"] = system_affinity(matching_rules(task, rules))
        new["podsCreated"] = True
        move(QUEUED, "Queued", f"{task.replicas} pods made (run {run}), waiting to be placed whole "
             f"(minimum {task.minimum})")
        return plan

    by_name = {p.name: p for p in current}
    expected = {pod_name(task, role.name, i, run): role.name
                for role in task.roles for i in range(role.replicas)}
    failed = next((p for p in current if p.phase == "Failed" and not p.disrupted), None)
    lost = [name for name in expected if name not in by_name]
    disrupted = next((p for p in current if p.disrupted), None)
    success_roles = set(task.success_roles or (role.name for role in task.roles))
    succeeded = all((pod := by_name.get(name)) is not None and pod.phase == "Succeeded"
                    for name, role in expected.items() if role in success_roles)
    if succeeded:
        finish(SUCCEEDED, "Succeeded", "every pod of " + ", ".join(sorted(success_roles)) + " succeeded")
        return plan
    if failed is not None:
        message = f"pod {failed.name} failed: {failed.exit or 'no reason given'}"
        if int(new["failedRuns"]) < task.max_restarts:
            restart("Restarted", message + f"; restart {int(new['failedRuns']) + 1} of {task.max_restarts}",
                    failed=True)
        else:
            finish(FAILED, "PodFailed", message)
        return plan
    if disrupted is not None or lost:
        what = (f"pod {disrupted.name} was disrupted ({disrupted.disrupted})" if disrupted is not None
                else f"pod {lost[0]} is gone")
        restart("Preempted" if disrupted is not None else "PodLost", what + "; the Task queues again",
                failed=False)
        return plan
    minimum = task.minimum
    running = [p for p in current if p.phase == "Running"]
    bound = [p for p in current if p.node]
    started = new.get("startedAt")
    if len(running) + sum(p.phase == "Succeeded" for p in current) >= minimum and running:
        if started is None:
            new["startedAt"] = started = rfc3339(now)
        new.setdefault("admittedAt", started)
        limit = task.run_time_limit
        began = parse_time(started)
        if limit is not None and began is not None and now - began > limit:
            finish(FAILED, "RunTimeLimitExceeded",
                   f"ran {now - began:.0f} s, over its run-time limit of {limit:.0f} s (spec.runTimeLimit)")
            return plan
        move(RUNNING, "Running", f"{len(running)} of {len(current)} pods running")
    elif len(bound) >= minimum:
        new.setdefault("admittedAt", rfc3339(now))
        move(ADMITTED, "Admitted", f"placed whole: {len(bound)} pods bound, minimum {minimum}")
    else:
        move(QUEUED, str(new.get("reason") or "Queued") if phase == QUEUED else "Queued",
             str(new.get("message") or "") if phase == QUEUED else "waiting to be placed whole")
    _hold_times(new, current, now)
    return plan


def _hold_times(status: dict[str, Any], current: list[TaskPod], now: float, *,
                finished: bool = False) -> None:
    """What the run holds (nodes, GPUs), its wait, and its run time when it has `finished`."""
    held = [p for p in current if p.node and p.active]
    nodes: dict[str, int] = {}
    for pod in held:
        nodes[pod.node] = nodes.get(pod.node, 0) + pod.gpus
    if held or "nodes" not in status:
        status["nodes"] = [{"name": node, "gpus": gpus} for node, gpus in sorted(nodes.items())]
        status["gpus"] = sum(nodes.values())
    # Written when they stop moving (a status rewritten every second would cost a write per Task per
    # second): the wait once the run started, the run time once it ended (`finished`).
    queued, started = parse_time(status.get("queuedAt")), parse_time(status.get("startedAt"))
    if queued is not None and started is not None:
        status["waitSeconds"] = round(started - queued, 3)
    if started is not None and finished:
        status["runSeconds"] = round(now - started, 3)
