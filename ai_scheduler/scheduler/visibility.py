"""What the queue knows, for people: the waiting pods in order, why each waits, and when it should start.

`QueueView` is read-only over the core and kept current by the daemon: the pending pods ordered as the
scheduler orders them (queue level, queue fairness, the policy's score, `spec.priority`, then arrival),
each with its position overall and in its queue, its priority with each factor of the formula, the run
time the hook gives it, the last Unschedulable reason, and its expected start from the last forecast.

The forecast is a simulation of the daemon's own state (tracesim/forecast.py, above this layer): the
daemon is handed a `Forecaster`, takes the snapshot on its event loop (copies of records, nothing
shared that the loop mutates) and runs the simulation on a worker thread, so that scheduling goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ai_scheduler.log import rfc3339
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
