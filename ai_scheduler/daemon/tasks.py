"""The Task controller: runs each `tasks.ai-scheduler.io` object through its whole life, in the leader.

Two informers feed it on every replica (so that a standby that takes over knows every Task and its pods
at once): the Tasks (an optional kind: a cluster without the CRD has none), and the pods that carry
the label `ai-scheduler.io/task` (a label selector, so only those). A change to either marks the Task
dirty; the leader's loop (`run`, from `Scheduler._lead`) reconciles the dirty Tasks every
`FLUSH_SECONDS` and every Task that is not finished every `REFRESH_SECONDS` (its queue position,
expected start and run time move without any event; its run-time limit runs out).

One reconcile is `cache/tasks.py`'s `reconcile` (pure: the state machine and the pods of a run), then
its plan written in order: the deletions, the status (a merge patch of the status subresource; a plan
that starts a new run creates its pods only once the status saying so is written, so that no pod of
a run is made while the Task says another), then the creations. A write refused for a reason that will
not pass (403, 422) is logged and shown on the Task's status (`message`) rather than retried in a loop.
What the controller wrote is kept at once from the API's answers (the Task's status, each pod
created), so that the next reconcile never acts on an older picture than its own writes: an informer
event older than the status kept (by resourceVersion) does not replace it.

The status carries the task view the design describes: the phase and its reason, and, while queued,
what the scheduler knows of the Task's pods (`queue_view`): the position among the waiting jobs (a
gang counts once), the priority and its factors, the predicted run time and the expected start from
the last forecast, the scheduler's latest reason; the nodes and GPUs it holds, its times, restarts and
exit reason.

The replayable log gains the Task's lines (docs/reference/decision-log.md): `task.spec` at first sight
(and again when the spec changes), `task.phase` on each change of phase with its reason, and
`task.finished` with the time it waited and ran and the GPU-seconds its pods held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.tasks import (
    FINISHED,
    QUEUED,
    TASK_LABEL,
    TASK_RESOURCE,
    TaskPod,
    TaskSpec,
    reconcile,
)
from ai_scheduler.config import Config
from ai_scheduler.daemon.informer import Informer
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.visibility.resources import ExpectedStarts, queue_view

FLUSH_SECONDS = 0.5
REFRESH_SECONDS = 2.0
# A queued Task's place, priority and expected start move all the time (the waiting-time factor grows
# every second): a change of these alone is written at most this often per Task, unless a field appears
# that was not shown yet. Everything else (the scheduler's reason too) is written at once.
VOLATILE = frozenset({"queuePosition", "priority", "predictedStart", "predictedRunTime"})
VOLATILE_SECONDS = 10.0
PERMANENT = (400, 403, 422)  # refused for a reason a retry does not change


def _version(obj: dict[str, Any]) -> int:
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else -1


class TaskController:
    """Keeps the Tasks and their pods from two informers; the leader reconciles them (module doc)."""

    def __init__(
        self, client: KubeClient, core: SchedulerCore, logger: JsonLogger, metrics: Metrics,
        expected: Callable[[], ExpectedStarts], config: Callable[[], Config],
    ) -> None:
        """`expected`: the last forecast's starts; `config`: the config in force (its `taskRules`)."""
        self.client = client
        self.config = config
        self.core = core
        self.log = logger
        self.metrics = metrics
        self.expected = expected
        self.tasks: dict[str, dict[str, Any]] = {}  # namespace/name -> the Task object as last known
        self.pods: dict[str, dict[str, TaskPod]] = {}  # namespace/task -> pod name -> pod
        self.dirty: set[str] = set()
        self._spec_logged: dict[str, int] = {}  # Task key -> its generation last logged (task.spec)
        self._refused: dict[str, str] = {}  # Task key -> the last write refused, shown on its status
        self._written: dict[str, float] = {}  # Task key -> time.monotonic() of its last status write
        # Tasks whose deletion the watch reported: only their pods are deleted by the controller. A Task
        # merely absent from a list (its CRD not served yet, a relist) is left to the garbage collector,
        # which follows the pods' owner references: a controller never deletes pods on a missing answer.
        self._deleted: set[str] = set()

    # ------------------------------------------------------------------ informers
    def informers(self, build: Callable[..., Informer[Any]]) -> dict[str, Informer[Any]]:
        """The two informers, made with the daemon's `build(resource, on_event, on_replace, **extra)`."""
        return {
            TASK_RESOURCE: build(TASK_RESOURCE, self.on_task_event, self.replace_tasks, optional=True),
            "pods@tasks": build("pods", self.on_pod_event, self.replace_pods,
                                params={"label_selector": TASK_LABEL}),
        }

    def on_task_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED":
            self.tasks.pop(key, None)
            self._deleted.add(key)
        else:
            self._deleted.discard(key)
            known = self.tasks.get(key)
            if known is not None and _version(obj) < _version(known):
                return  # older than the status our own write returned
            self.tasks[key] = obj
        self.dirty.add(key)

    def replace_tasks(self, objects: list[dict[str, Any]]) -> None:
        fresh = {f"{o['metadata'].get('namespace')}/{o['metadata'].get('name')}": o for o in objects}
        self.dirty.update(set(self.tasks) | set(fresh))
        self.tasks = fresh

    def on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        task = (meta.get("labels") or {}).get(TASK_LABEL)
        pod = TaskPod.from_api(obj)
        if not task or pod is None:
            return
        key = f"{meta.get('namespace')}/{task}"
        pods = self.pods.setdefault(key, {})
        if kind == "DELETED":
            pods.pop(pod.name, None)
        else:
            pods[pod.name] = pod
        self.dirty.add(key)

    def replace_pods(self, objects: list[dict[str, Any]]) -> None:
        old = set(self.pods)
        self.pods = {}
        for obj in objects:
            self.on_pod_event("ADDED", obj)
        self.dirty.update(old)

    # ------------------------------------------------------------------ the leader's loop
    async def run(self) -> None:
        last_refresh = 0.0
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            now = time.monotonic()
            if now - last_refresh >= REFRESH_SECONDS:
                last_refresh = now
                self.dirty.update(k for k, t in self.tasks.items()
                                  if (t.get("status") or {}).get("phase") not in FINISHED)
            await self.flush()

    async def flush(self) -> None:
        dirty, self.dirty = self.dirty, set()
        waiting: dict[str, dict[str, Any]] | None = None
        for key in sorted(dirty):
            obj = self.tasks.get(key)
            if obj is None:
                if key in self._deleted:
                    await self._orphaned(key)
                continue
            if waiting is None and (obj.get("status") or {}).get("phase") in (None, QUEUED):
                waiting = self._waiting()
            try:
                await self._reconcile(key, obj, waiting or {})
            except Exception as error:  # one Task must not stop the others
                self.log.error("task.reconcile_failed", task=key, error=f"{type(error).__name__}: {error}")
                self.dirty.add(key)

    async def _orphaned(self, key: str) -> None:
        """A Task deleted: its pods go too (the garbage collector would, on a real cluster, in its time)."""
        namespace = key.partition("/")[0]
        for pod in list(self.pods.get(key, {}).values()):
            if not pod.deleting:
                await self._delete(key, namespace, pod.name)
        if not self.pods.get(key):
            self.pods.pop(key, None)
            self._deleted.discard(key)
        self._spec_logged.pop(key, None)
        self._written.pop(key, None)

    async def _reconcile(self, key: str, obj: dict[str, Any], waiting: dict[str, dict[str, Any]]) -> None:
        task = TaskSpec.from_api(obj)
        self._log_spec(key, task, obj)
        status = obj.get("status") or {}
        pods = self.pods.get(key, {})
        now = time.time()
        terms = {name: d.terms() for name, d in self.core.domains.table.domains.items()}
        plan = reconcile(task, status, pods.values(), now, self.config().task_rules, terms)
        for name in plan.delete:
            await self._delete(key, task.namespace, name)
        new = plan.status
        if new.get("phase") == QUEUED:
            run = [p for p in pods.values() if p.run == new.get("run") and p.active]
            self._queue_facts(new, run, waiting)
        else:  # no longer waiting: no place in the queue, no expected start
            new.pop("queuePosition", None)
            new.pop("predictedStart", None)
        if key in self._refused:
            new["message"] = self._refused[key]
        for phase, reason, message in plan.changes:
            self.log.info("task.phase", task=key, uid=task.uid, phase=phase, reason=reason, message=message,
                          run=new.get("run"), restarts=new.get("restarts"))
            if phase in FINISHED:
                self._log_finished(key, task, new)
        if new != status and self._due(key, status, new) and not await self._write_status(key, obj, new):
            return
        for pod in plan.create:
            await self._create(key, pod)

    def _queue_facts(self, status: dict[str, Any], pods: list[TaskPod], waiting: dict[str, dict[str, Any]]
                     ) -> None:
        """What the scheduler knows of a queued run's pods: its place, priority, predictions, reason."""
        entries = [waiting[p.uid] for p in pods if p.uid in waiting]
        if not entries:
            for field in ("queuePosition", "priority", "predictedStart"):
                status.pop(field, None)
            return
        first = min(entries, key=lambda e: e["position"])
        status["queuePosition"] = first["unitPosition"]
        status["queue"] = first["queue"]
        status["priority"] = {"score": first["priority"], "factors": first["factors"]}
        if first["runTime"] is not None:
            status["predictedRunTime"] = first["runTime"]
        starts = [e["expectedStart"] for e in entries]
        status["predictedStart"] = max(starts) if all(starts) else None
        if first["reason"]:
            status["message"] = first["reason"]

    def _waiting(self) -> dict[str, dict[str, Any]]:
        """The queue's entries by pod uid, each with the position of its job (a gang counts once)."""
        view = queue_view(self.core, self.expected())
        units: dict[str, int] = {}
        entries: dict[str, dict[str, Any]] = {}
        for entry in view["pods"]:
            unit = entry["gang"] or entry["uid"]
            entry["unitPosition"] = units.setdefault(unit, len(units) + 1)
            entries[entry["uid"]] = entry
        return entries

    def _due(self, key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Whether a changed status is written now: at once, unless only VOLATILE fields that were shown
        already changed, and the last write is less than VOLATILE_SECONDS old."""
        changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
        if not changed <= VOLATILE or any(old.get(k) in (None, "") for k in changed):
            return True
        return time.monotonic() - self._written.get(key, -VOLATILE_SECONDS) >= VOLATILE_SECONDS

    # ------------------------------------------------------------------ writes
    async def _write_status(self, key: str, obj: dict[str, Any], status: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        old = obj.get("status") or {}
        # A merge patch: fields the new status no longer has are set to null.
        patch = {**{k: None for k in old if k not in status}, **status}
        result = await self.client.patch_task_status(meta["namespace"], meta["name"], {"status": patch})
        if result.ok:
            self._written[key] = time.monotonic()
            fresh = result.body
            known = self.tasks.get(key)
            if known is not None and _version(fresh) >= _version(known):
                self.tasks[key] = fresh
            return True
        self.metrics.api_errors.labels("task_status", str(result.status)).inc()
        if result.status != 404:
            self.log.warning("task.status_failed", task=key, code=result.status, error=result.message)
            self.dirty.add(key)
        return False

    async def _create(self, key: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        result = await self.client.create_pod(pod)
        if result.ok:
            made = TaskPod.from_api(result.body)
            if made is not None:
                self.pods.setdefault(key, {})[made.name] = made
            self._refused.pop(key, None)
            return
        if result.status == 409:  # made before (a reconcile that ran twice, a new leader): the watch has it
            return
        self.metrics.api_errors.labels("task_pod_create", str(result.status)).inc()
        self.log.warning("task.pod_create_failed", task=key, pod=meta["name"], code=result.status,
                         error=result.message)
        if result.status in PERMANENT:
            self._refused[key] = f"pod {meta['name']} refused by the API server: {result.message}"
        self.dirty.add(key)

    async def _delete(self, key: str, namespace: str, name: str) -> None:
        result = await self.client.delete_pod(namespace, name)
        if result.ok or result.status == 404:
            pods = self.pods.get(key, {})
            if name in pods:
                pods[name] = _deleting(pods[name])
            return
        self.metrics.api_errors.labels("task_pod_delete", str(result.status)).inc()
        self.log.warning("task.pod_delete_failed", task=key, pod=name, code=result.status,
                         error=result.message)
        self.dirty.add(key)

    # ------------------------------------------------------------------ the replayable log's lines
    def _log_spec(self, key: str, task: TaskSpec, obj: dict[str, Any]) -> None:
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        if self._spec_logged.get(key) == generation:
            return
        self._spec_logged[key] = generation
        self.log.info(
            "task.spec", task=key, uid=task.uid, generation=generation, queue=task.queue,
            priority_class=task.priority_class, kind=task.kind, domain=task.domain, framework=task.framework,
            model_parameters=task.model_parameters, dataset_bytes=task.dataset_bytes,
            estimated_run_time=task.estimated_run_time, run_time_limit=task.run_time_limit,
            roles=[{"name": r.name, "replicas": r.replicas, "minimum": r.minimum} for r in task.roles],
            suspend=task.suspend, error=task.error or None,
        )

    def _log_finished(self, key: str, task: TaskSpec, status: dict[str, Any]) -> None:
        run = float(status.get("runSeconds") or 0.0)
        gpus = int(status.get("gpus") or 0)
        self.log.info(
            "task.finished", task=key, uid=task.uid, phase=status.get("phase"), reason=status.get("reason"),
            wait_seconds=status.get("waitSeconds"), run_seconds=status.get("runSeconds"), gpus=gpus,
            gpu_seconds=round(gpus * run, 3), nodes=status.get("nodes") or [],
            restarts=status.get("restarts"), finished_at=status.get("finishedAt") or rfc3339(),
        )


def _deleting(pod: TaskPod) -> TaskPod:
    return replace(pod, deleting=True)
