"""What the queue knows, for people: the waiting pods in order, why each waits, and when it should start.

`QueueView` is read-only over the core and kept current by the daemon: the pending pods ordered as the
scheduler orders them (queue level, queue fairness, the policy's score, `spec.priority`, then arrival),
each with its position overall and in its queue, its priority with each factor of the formula, the run
time the hook gives it, the last Unschedulable reason, and its expected start from the last forecast.

The same data reaches users through the Kubernetes API (`visibility/server.py`, the aggregated API
`visibility.ai-scheduler.io/v1alpha1`) as Kubernetes-style objects: `pending_pod_items` (one PendingPod
per waiting pod, with its gang's completeness and the reservation that holds room for it),
`quota_items` (each group's and user's min, max and use), `gpu_node_items` (each managed GPU, its
free memory, NVLink island and holders, and each GPU nodes publish through DRA ResourceSlices, with
the pods whose claims hold it) and `decision_items` (the last scheduling decisions, which
`RecentDecisions` keeps as the core logs them). These functions only read; the API module decides
who sees what.

The forecast is a simulation of the daemon's own state (tracesim/forecast.py, above this layer): the
daemon is handed a `Forecaster`, takes the snapshot on its event loop (copies of records, nothing
shared that the loop mutates) and runs the simulation on a worker thread, so that scheduling goes on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ai_scheduler.cache.dra_gpus import held_claims, node_gpus, nodes_with_gpus
from ai_scheduler.cache.dra_gpus import holders as dra_holders
from ai_scheduler.cache.tenancy import Tenancy, show_amount
from ai_scheduler.config.schema import GroupSpec, UserSpec
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.core import SchedulerCore

LAST = (10**9,)  # the order of a pod with no computed priority yet: after the others


class Forecaster(Protocol):
    """Snapshot `core` now (on the event loop) and return the work that simulates it (on any thread):
    its result maps a waiting pod's uid to its expected start (wall time); a pod absent has none within
    `horizon_s`."""

    def __call__(self, core: SchedulerCore, horizon_s: float) -> Callable[[], Mapping[str, float]]: ...


@dataclass(slots=True)
class ExpectedStarts:
    """The last forecast: starts by uid, and when it was made (wall time; None: none made yet)."""

    starts: Mapping[str, float] = field(default_factory=dict)
    made_at: float | None = None
    seconds: float = 0.0  # how long it took


def _order(core: SchedulerCore, qp: QueuedPod) -> tuple[Any, ...]:
    priority = core.priorities.explain(qp.pod.uid)
    if priority is None:
        return (*LAST, qp.initial_attempt, qp.seq)
    return (
        priority.queue_level, -round(priority.queue_fairness, 3), -round(priority.score, 6),
        -qp.pod.priority, qp.initial_attempt, qp.seq,
    )


def queue_view(core: SchedulerCore, expected: ExpectedStarts) -> dict[str, Any]:
    """The pending pods in order, as JSON-ready data (the `/queue` endpoint's body)."""
    pending = sorted(core.queue.pending(), key=lambda qp: _order(core, qp))
    in_queue: dict[str, int] = {}
    entries: list[dict[str, Any]] = []
    for position, qp in enumerate(pending, start=1):
        pod = qp.pod
        tenant = core.tenancy.tenant_of(pod)
        in_queue[tenant.queue] = in_queue.get(tenant.queue, 0) + 1
        priority = core.priorities.explain(pod.uid)
        gang = core.gangs.gang_of(pod)
        start = expected.starts.get(pod.uid)
        run = priority.run_time if priority is not None else None
        entries.append({
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
            "gang": gang.key if gang is not None else None,
            "queue": tenant.queue,
            "user": tenant.user,
            "group": tenant.group,
            "level": priority.queue_level if priority is not None else None,
            "position": position,
            "positionInQueue": in_queue[tenant.queue],
            "priority": round(priority.score, 6) if priority is not None else None,
            "factors": {k: round(v, 6) for k, v in priority.factors.items()} if priority is not None else {},
            "promoted": priority.promoted if priority is not None else False,
            "runTime": None if run is None else {
                "medianSeconds": round(run.median, 1),
                "upperSeconds": round(run.upper, 1),
                "source": run.source,
            },
            "attempts": qp.attempts,
            "reason": qp.reason,
            "expectedStart": None if start is None else rfc3339(start, millis=False),
        })
    return {
        "pending": len(entries),
        "forecastAt": None if expected.made_at is None else rfc3339(expected.made_at, millis=False),
        "forecastSeconds": round(expected.seconds, 3),
        "pods": entries,
    }


# ---------------------------------------------------------------------- the visibility API's objects
API_VERSION = "visibility.ai-scheduler.io/v1alpha1"
MIB = 1 << 20


def pending_pod_items(core: SchedulerCore, expected: ExpectedStarts) -> list[dict[str, Any]]:
    """One PendingPod per waiting pod, in queue order: `queue_view`'s entry with the pod's identity under
    `metadata`, plus why it waits beyond the last reason: its gang's completeness (`gangStatus`) and the
    reservation holding room for it (`reservation`, with the nodes and the time they should be free)."""
    reservation = core.reserver.current
    items = []
    for entry in queue_view(core, expected)["pods"]:
        item: dict[str, Any] = {
            "apiVersion": API_VERSION, "kind": "PendingPod",
            "metadata": {"namespace": entry.pop("namespace"), "name": entry.pop("name"),
                         "uid": entry.pop("uid")},
        }
        item.update(entry)
        item["gangStatus"] = None
        item["reservation"] = None
        uid = item["metadata"]["uid"]
        qp = core.queue.pending_info(uid)
        pod = qp.pod if qp is not None else None
        gang = core.gangs.gang_of(pod) if pod is not None else None
        if gang is not None:
            item["gangStatus"] = {"minMember": gang.min_member, **gang.counts(), "problem": gang.problem}
        if reservation is not None and uid in reservation.uids:
            item["reservation"] = {
                "holder": reservation.holder,
                "nodes": list(reservation.nodes),
                "due": None if reservation.due == float("inf") else rfc3339(reservation.due, millis=False),
            }
        items.append(item)
    return items


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {resource: show_amount(resource, amount) for resource, amount in sorted(amounts.items())}


def quota_items(tenancy: Tenancy) -> list[dict[str, Any]]:
    """Each configured group, user and queue (Tenancy.quotas) with its level, quotas and what its placed
    pods use now, quantities as strings ("8", "500m", "40Gi")."""
    items: list[dict[str, Any]] = []
    for state in tenancy.quotas(every_queue=True):
        spec = state.spec
        item: dict[str, Any] = {"kind": state.kind, "name": state.name}
        if isinstance(spec, GroupSpec):
            item.update(level=spec.level, share=spec.share)
        elif isinstance(spec, UserSpec):
            item.update(group=spec.group, level=spec.level)
        else:
            item.update(level=spec.level, weight=spec.weight)
        item.update(min=_quantities(state.min), max=_quantities(state.max), used=_quantities(state.used))
        items.append(item)
    return items


def gpu_node_items(core: SchedulerCore) -> list[dict[str, Any]]:
    """Each node with managed GPUs (label ai-scheduler.io/gpu-managed), by name: its devices as the
    agent reported them, with the memory our placements leave free, the NVLink island (named by its
    lowest device index), the pods holding each (a whole device, or a share's memory), and the logical
    domains (Domain objects) the node belongs to."""
    cache = core.cache
    gpus = cache.gpus
    domains = core.domains.table.names_by_row()
    nodes = []
    for row in sorted(gpus.nodes, key=lambda r: cache.row_names[r]):
        state = gpus.nodes[row]
        holders: dict[int, list[dict[str, Any]]] = {}
        for uid in sorted(state.holders):
            assignment = gpus.assignments.get(uid)
            pod = cache.pods.get(uid)
            if assignment is None or pod is None:
                continue
            for index in assignment.indices:
                holders.setdefault(index, []).append({
                    "namespace": pod.record.namespace, "name": pod.record.name,
                    "memoryMiB": assignment.memory // MIB if assignment.memory else None,
                    "whole": not assignment.memory,
                })
        devices = []
        width = gpus.share_free.shape[1]
        for device in state.devices:
            i = device.index
            free = int(gpus.share_free[row, i]) if 0 <= i < width else -1
            devices.append({
                "index": i, "uuid": device.uuid, "model": device.model,
                "memoryMiB": device.total // MIB, "freeMemoryMiB": max(free, 0) // MIB,
                "wholeFree": bool(gpus.whole_free[row, i]) if 0 <= i < width else False,
                "island": int(gpus.island[row, i]) if 0 <= i < width else -1,
                "error": device.error or None,
                "holders": holders.get(i, []),
            })
        nodes.append({
            "apiVersion": API_VERSION, "kind": "GpuNode",
            "metadata": {"name": cache.row_names[row]},
            "healthy": bool(gpus.healthy[row]), "problem": state.problem or None,
            "updated": None if state.updated is None else rfc3339(state.updated, millis=False),
            "domains": domains.get(row, []),
            "devices": devices,
        })
    return _with_dra_gpus(core, nodes, domains)


def _with_dra_gpus(
    core: SchedulerCore, nodes: list[dict[str, Any]], domains: Mapping[int, list[str]]
) -> list[dict[str, Any]]:
    """The GPUs nodes publish through DRA ResourceSlices (cache/dra_gpus.py) added to the managed ones,
    `source: dra`: index, UUID, model and memory from the driver's attributes, free when no claim holds
    it, and its holders: the pods each allocated claim is reserved for (`claim` names it; a claim
    reserved for nobody holds the device under its own name)."""
    dra = core.cache.dra
    named = sorted(nodes_with_gpus(dra))
    if not named:
        return nodes
    by_name = {item["metadata"]["name"]: item for item in nodes}
    held = dra_holders(held_claims(dra))
    for name in named:
        devices = []
        for gpu in node_gpus(dra, name):
            holding = held.get(gpu.device.device_id, [])
            memory = gpu.memory // MIB if gpu.memory else None
            devices.append({
                "index": gpu.index, "uuid": gpu.uuid, "model": gpu.model, "memoryMiB": memory,
                "freeMemoryMiB": 0 if holding else memory, "wholeFree": not holding, "island": None,
                "error": None, "source": "dra", "device": "/".join(gpu.device.device_id),
                "holders": [{"namespace": namespace, "name": pod or claim.name, "memoryMiB": None,
                             "whole": True, "claim": claim.name} for claim, namespace, pod in holding],
            })
        item = by_name.get(name)
        if item is None:
            item = by_name[name] = {
                "apiVersion": API_VERSION, "kind": "GpuNode", "metadata": {"name": name},
                "healthy": True, "problem": None, "updated": None,
                "domains": domains.get(core.cache.row_of(name), []), "devices": [],
            }
        item["devices"] = [*item["devices"], *devices]
    return [by_name[name] for name in sorted(by_name)]


DECISIONS_KEPT = 200


class RecentDecisions(JsonLogger):
    """The core's logger: every line goes to `inner` as it would have (written if its level is), and the
    last DECISIONS_KEPT `decision` lines (schedule_one.py: one per attempt) are kept whatever the log
    level, with their wall time, for the visibility API's `decisions` and the web page."""

    def __init__(self, inner: JsonLogger, keep: int = DECISIONS_KEPT) -> None:
        # No JsonLogger.__init__: nothing is written here, every line goes to `inner`.
        self.inner = inner
        self.recent: deque[tuple[float, dict[str, Any]]] = deque(maxlen=keep)

    def enabled(self, level: str) -> bool:
        return self.inner.enabled(level)

    def wants(self, event: str, level: str) -> bool:
        return event == "decision" or self.inner.enabled(level)  # kept here whatever the level

    def log(self, level: str, event: str, **fields: Any) -> None:
        if event == "decision":
            self.recent.append((time.time(), fields))
        self.inner.log(level, event, **fields)

    def flush(self) -> None:
        self.inner.flush()


def decision_items(recent: RecentDecisions) -> list[dict[str, Any]]:
    """The last decisions, newest first: the pod (`metadata` and `pod`, "ns/name"), its queue, the result
    (`scheduled`, `unschedulable`, ...), the node chosen and, for a pod not placed, the message."""
    items = []
    for at, fields in reversed(recent.recent):
        key = str(fields.get("pod", ""))
        namespace, _, name = key.partition("/")
        items.append({
            "metadata": {"namespace": namespace, "name": name, "uid": fields.get("uid")},
            "time": rfc3339(at, millis=False), "pod": key, "queue": fields.get("queue"),
            "result": fields.get("result"), "node": fields.get("node"), "message": fields.get("message"),
        })
    return items
