"""What `ai-scheduler status` asks of the API server, with the user's own credentials.

Nothing here has rights of its own: every request carries the user's kubeconfig credentials, so RBAC
decides, and a refusal is shown as kubectl shows it (`Error from server (Forbidden): <the API's
message>`) with a non-zero exit status.

Reads go to the visibility API that the daemon serves through the Kubernetes API (an aggregated API,
group `visibility.ai-scheduler.io`). Where that API is not registered, or its backend is down, the API
server answers 404 or 503 on the group's paths: that is reported as such, not as a missing pod.

Writes need no daemon API, only the pod and its annotations:
- `hold`: Kubernetes accepts spec.schedulingGates only at creation (after it, gates can be removed, never
  added), so an existing pending pod is held with the annotation `ai-scheduler.io/hold: "true"`, which
  the scheduler treats as a scheduling gate. The patch carries the pod's resourceVersion, so a pod bound
  between our read and our write is never marked (409, read again, refused as bound);
- `release`: one JSON patch removes the annotation and the scheduling gate `ai-scheduler.io/hold` (a pod
  may be created with it), each removal guarded by a `test` of what it removes;
- `requeue`: a new value of `ai-scheduler.io/requeue-at` (now, RFC 3339 with milliseconds); the
  scheduler retries the pod at once, its backoff started over;
- on a Task (`task/NAME`), each sets a field of the Task's spec that its controller acts on (a merge
  patch; docs/users/tasks.md): `hold` sets `suspend: true` (its pods are removed, made again on
  `release`, which sets it false), `requeue` sets `requeueAt` (a new run starts), `cancel` sets
  `cancel: true` (its pods are deleted, phase Cancelled; the Task stays, with its record);
- `cancel`: deletes the pod, or a whole gang: its PodGroup (if any) first, then every member found by
  the gang keys docs/users/gangs.md lists in the namespace. RBAC's answer for a verb is the same for
  every pod of a namespace, so a refusal comes on the first request, before anything is deleted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ai_scheduler.api.kube import JSON_PATCH, MERGE_PATCH, ApiResult, KubeClient
from ai_scheduler.cache.gangs import PODGROUP_API, gang_ref
from ai_scheduler.cache.records import HOLD_ANNOTATION, HOLD_GATE, REQUEUE_ANNOTATION, PodRecord
from ai_scheduler.cache.tasks import FINISHED, TASK_GROUP, TASK_PLURAL, TASK_VERSION
from ai_scheduler.log import rfc3339

VISIBILITY_VERSION = "visibility.ai-scheduler.io/v1alpha1"
VISIBILITY = f"/apis/{VISIBILITY_VERSION}"
NOT_SERVED = "the visibility API is not served: is ai-scheduler running with it?"
RETRIES = 5  # reads and writes again when the pod changed under us (409, a failed JSON patch test)
PAGE = 500


class StatusError(Exception):
    """What the user is told on stderr, with exit status 1."""


def server_error(result: ApiResult) -> StatusError:
    """kubectl's wording for an API error; status 0 is no answer at all."""
    if result.status == 0:
        return StatusError(f"cannot reach the API server: {result.message}")
    reason = str(result.body.get("reason") or f"HTTP {result.status}")
    return StatusError(f"Error from server ({reason}): {result.message}")


@dataclass(frozen=True, slots=True)
class Target:
    """What a write command names: `NAME` or `pod/NAME`, `gang/NAME` or `podgroup/NAME`, `task/NAME`."""

    kind: str  # "pod" | "gang" | "task"
    name: str

    @classmethod
    def parse(cls, text: str) -> Target:
        kind, slash, name = text.partition("/")
        if not slash:
            return cls("pod", text)
        if kind in ("pod", "pods", "po") and name:
            return cls("pod", name)
        if kind in ("gang", "gangs", "podgroup", "podgroups", "pg") and name:
            return cls("gang", name)
        if kind in ("task", "tasks", "tk") and name:
            return cls("task", name)
        raise StatusError(f"cannot read {text!r}: give NAME, pod/NAME, gang/NAME or task/NAME")

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One object's result of a write command: `pod/train-0 held`, or why not."""

    kind: str  # "pod" | "podgroup"
    namespace: str
    name: str
    ok: bool
    message: str

    @classmethod
    def of(cls, pod: dict[str, Any], ok: bool, message: str) -> Outcome:
        meta = pod.get("metadata") or {}
        return cls("pod", str(meta.get("namespace") or ""), str(meta.get("name") or ""), ok, message)

    def __str__(self) -> str:
        return f"{self.kind}/{self.name} {self.message}" if self.ok else self.message

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name, "ok": self.ok,
                "message": self.message}


# ---------------------------------------------------------------------------------------------- reads

async def visibility(api: KubeClient, path: str) -> dict[str, Any]:
    """GET a path of the visibility API. An API server that does not serve the group answers 404, or 503
    when its APIService's backend is down, or 403 when RBAC does not grant the path (authorization comes
    before routing): its discovery document then tells which it is."""
    result = await api.request("GET", f"{VISIBILITY}{path}")
    if result.ok:
        return result.body
    if result.status in (403, 404, 503) and not await _served(api):
        raise StatusError(NOT_SERVED)
    raise server_error(result)


async def _served(api: KubeClient) -> bool:
    """Whether the API server knows the group-version (its discovery document answers)."""
    return (await api.request("GET", VISIBILITY)).ok


async def pending_pods(api: KubeClient, namespace: str | None) -> dict[str, Any]:
    return await visibility(api, f"/namespaces/{namespace}/pendingpods" if namespace else "/pendingpods")


async def why(api: KubeClient, namespace: str, target: Target) -> list[dict[str, Any]]:
    """The queue entries of a pod, or of a gang's waiting members."""
    if target.kind == "pod":
        result = await api.request("GET", f"{VISIBILITY}/namespaces/{namespace}/pendingpods/{target.name}")
        if result.ok:
            return [result.body]
        if result.status in (403, 404, 503) and not await _served(api):
            raise StatusError(NOT_SERVED)
        if result.status == 404:
            raise StatusError(f"pod {namespace}/{target.name} is not waiting in ai-scheduler's queue "
                              "(bound, held or gated, finished, not found, or not ai-scheduler's)")
        raise server_error(result)
    body = await pending_pods(api, namespace)
    members = [item for item in body.get("items") or () if item.get("gang") == f"{namespace}/{target.name}"]
    if not members:
        raise StatusError(f"gang {namespace}/{target.name} has no pods waiting in ai-scheduler's queue")
    return members


# ---------------------------------------------------------------------------------------------- writes

async def pods_of(api: KubeClient, namespace: str, target: Target) -> list[dict[str, Any]]:
    """The pod named, or the members of the gang named (none: an error)."""
    if target.kind == "pod":
        result = await api.get_pod(namespace, target.name)
        if not result.ok:
            raise server_error(result)
        return [result.body]
    members = [pod for pod in await _list_pods(api, namespace) if _gang_of(pod) == target.name]
    if not members:
        raise StatusError(f"no pods of gang {target.name} in namespace {namespace}")
    return members


def _gang_of(pod: dict[str, Any]) -> str | None:
    """The gang's key without its namespace: `NAME`, or `PodGroup/NAME` for a Kubernetes PodGroup's (as the
    visibility API shows it). Gangs inferred from the owner are the daemon's to see, not this command's."""
    ref = gang_ref(PodRecord.from_api(pod))
    return ref.key.partition("/")[2] if ref is not None else None


async def _list_pods(api: KubeClient, namespace: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    token = ""
    while True:
        query = {"limit": str(PAGE), **({"continue": token} if token else {})}
        result = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
        if not result.ok:
            raise server_error(result)
        pods.extend(result.body.get("items") or ())
        token = str((result.body.get("metadata") or {}).get("continue") or "")
        if not token:
            return pods


def _key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _not_pending(pod: dict[str, Any]) -> str:
    """Why a pod cannot be held or requeued ('' when it is pending)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return f"already bound to node {node}: only a pending pod can be held or requeued"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "being deleted"
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return f"already finished ({phase})"
    return ""


async def _reread(api: KubeClient, pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    result = await api.get_pod(meta.get("namespace") or "", meta.get("name") or "")
    if not result.ok:
        raise server_error(result)
    return result.body


async def hold(api: KubeClient, pod: dict[str, Any]) -> Outcome:
    for _ in range(RETRIES):
        meta = pod.get("metadata") or {}
        refused = _not_pending(pod)
        if refused:
            return Outcome.of(pod, False, f"pod {_key(pod)} is {refused}")
        if (meta.get("annotations") or {}).get(HOLD_ANNOTATION) == "true":
            return Outcome.of(pod, True, "already held")
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                              "annotations": {HOLD_ANNOTATION: "true"}}}
        result = await api.patch_pod(meta.get("namespace") or "", meta.get("name") or "", patch)
        if result.ok:
            return Outcome.of(pod, True, "held")
        if result.status != 409:
            raise server_error(result)
        pod = await _reread(api, pod)  # changed since we read it: maybe bound meanwhile
    return Outcome.of(pod, False, f"pod {_key(pod)} kept changing; try again")


def _release_ops(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations that remove our hold annotation and our scheduling gate, each guarded."""
    ops: list[dict[str, Any]] = []
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if HOLD_ANNOTATION in annotations:
        path = "/metadata/annotations/" + HOLD_ANNOTATION.replace("~", "~0").replace("/", "~1")
        ops += [{"op": "test", "path": path, "value": annotations[HOLD_ANNOTATION]},
                {"op": "remove", "path": path}]
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    for index in reversed(range(len(gates))):  # from the end, so that earlier indices stay valid
        if (gates[index] or {}).get("name") == HOLD_GATE:
            ops += [{"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": HOLD_GATE},
                    {"op": "remove", "path": f"/spec/schedulingGates/{index}"}]
    return ops


async def release(api: KubeClient, pod: dict[str, Any]) -> Outcome:
    for _ in range(RETRIES):
        meta = pod.get("metadata") or {}
        ops = _release_ops(pod)
        if not ops:
            return Outcome.of(pod, True, "not held")
        result = await api.request(
            "PATCH", f"/api/v1/namespaces/{meta.get('namespace')}/pods/{meta.get('name')}", body=ops,
            content_type=JSON_PATCH)
        if result.ok:
            others = [g.get("name") for g in (result.body.get("spec") or {}).get("schedulingGates") or []]
            return Outcome.of(pod, True, "released" + (
                f" (still gated by {', '.join(map(str, others))})" if others else ""))
        if result.status not in (409, 422):  # 422: a test failed, the pod changed since we read it
            raise server_error(result)
        pod = await _reread(api, pod)
    return Outcome.of(pod, False, f"pod {_key(pod)} kept changing; try again")


async def requeue(api: KubeClient, pod: dict[str, Any]) -> Outcome:
    meta = pod.get("metadata") or {}
    refused = _not_pending(pod)
    if refused:
        return Outcome.of(pod, False, f"pod {_key(pod)} is {refused}")
    gates = [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]
    if (meta.get("annotations") or {}).get(HOLD_ANNOTATION) == "true" or HOLD_GATE in gates:
        return Outcome.of(pod, False, f"pod {_key(pod)} is held: release it to let it be scheduled")
    patch = {"metadata": {"annotations": {REQUEUE_ANNOTATION: rfc3339(time.time())}}}
    result = await api.patch_pod(meta.get("namespace") or "", meta.get("name") or "", patch)
    if not result.ok:
        raise server_error(result)
    return Outcome.of(pod, True, "requeued" + (
        f" (it still waits for its scheduling gates: {', '.join(map(str, gates))})" if gates else ""))


async def cancel(api: KubeClient, namespace: str, target: Target) -> list[Outcome]:
    """Delete the pod, or the gang's PodGroup (if there is one) and then all its members."""
    if target.kind == "pod":
        result = await api.delete_pod(namespace, target.name)
        if not result.ok:
            raise server_error(result)
        return [Outcome("pod", namespace, target.name, True, "deleted")]
    group, version, plural = PODGROUP_API
    path = f"/apis/{group}/{version}/namespaces/{namespace}/{plural}/{target.name}"
    result = await api.request("DELETE", path)
    if not result.ok and result.status != 404:  # 404: no PodGroup (a gang of labels), or no CRD at all
        raise server_error(result)
    outcomes = [Outcome("podgroup", namespace, target.name, True, "deleted")] if result.ok else []
    members = [pod for pod in await _list_pods(api, namespace) if _gang_of(pod) == target.name]
    if not members and not outcomes:
        raise StatusError(f"no gang {target.name} in namespace {namespace}: no PodGroup, no pods")
    for pod in members:
        meta = pod.get("metadata") or {}
        result = await api.delete_pod(namespace, meta.get("name") or "")
        if result.ok:
            outcomes.append(Outcome.of(pod, True, "deleted"))
        elif result.status == 404:
            outcomes.append(Outcome.of(pod, True, "already gone"))
        else:
            raise server_error(result)
    return outcomes


# ---------------------------------------------------------------------------------------------- Tasks
TASK_SPEC_CHANGES: dict[str, tuple[dict[str, object], str]] = {
    "hold": ({"suspend": True}, "held"),
    "release": ({"suspend": False}, "released"),
    "requeue": ({}, "requeued"),  # requeueAt: now, set below
    "cancel": ({"cancel": True}, "cancelled"),
}


async def task_action(api: KubeClient, command: str, namespace: str, name: str) -> Outcome:
    """Set the Task's spec field for `command` (hold, release, requeue, cancel); a finished Task refuses."""
    path = f"/apis/{TASK_GROUP}/{TASK_VERSION}/namespaces/{namespace}/{TASK_PLURAL}/{name}"
    result = await api.request("GET", path)
    if not result.ok:
        raise server_error(result)
    phase = (result.body.get("status") or {}).get("phase")
    if phase in FINISHED:
        return Outcome("task", namespace, name, False,
                       f"task {namespace}/{name} is already finished ({phase})")
    change, done = TASK_SPEC_CHANGES[command]
    spec: dict[str, object] = dict(change)
    if command == "requeue":
        spec["requeueAt"] = rfc3339(time.time())
    result = await api.request("PATCH", path, body={"spec": spec}, content_type=MERGE_PATCH)
    if not result.ok:
        raise server_error(result)
    return Outcome("task", namespace, name, True, done)
