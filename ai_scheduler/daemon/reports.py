"""What users see: the PodScheduled condition and events (Scheduled, FailedScheduling, gang events).

API calls are the scarce resource at thousands of pods per second, so a placed
pod costs one event, and an unschedulable pod costs calls only when what we
would tell it changes: the condition is patched when its message differs from
the last one written, and an event with the same reason about the same object
is sent once, then aggregated (count, latest message and lastTimestamp patched
on that event) at most once per repeat window, however often the pod is retried.
Everything goes through a bounded queue drained by a few workers, so a slow
API server delays events instead of the scheduling loop.

A call that gets no answer or a transient error (status 0, 429, 5xx) is tried
again with backoff, a few times: a reason must not be lost to a dropped
connection. A condition is retried only while it is still the one we mean to
write; if it never lands, it is forgotten, so the pod's next attempt writes it
again instead of believing it is there.

Events speak as the profile that handled the pod: `source.component` and
`reportingComponent` are the pod's schedulerName, as kube-scheduler's event
recorder of each profile writes them (`component`, the top-level schedulerName,
only for an event no profile is known for).

Two reasons on the condition, as kube-scheduler gives them: `Unschedulable`
when no node fits, `SchedulerError` when the attempt itself failed (a bug, an
unexpected value) and the pod is retried with backoff. Messages are capped at
1 KiB, as kube-scheduler caps its event messages (ai_scheduler.messages).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.messages import truncate
from ai_scheduler.scheduler.metrics import Metrics

MAX_PENDING_CALLS = 20_000
TRANSIENT = frozenset({0, 429, 500, 502, 503, 504})  # no answer, throttled, or the server's own trouble
RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0, 4.0)  # seconds before each further try of a transient failure


class ConditionReason(StrEnum):
    """`reason` of a PodScheduled=False condition (v1.PodReasonUnschedulable, v1.PodReasonSchedulerError)."""

    UNSCHEDULABLE = "Unschedulable"
    SCHEDULER_ERROR = "SchedulerError"


@dataclass(slots=True)
class _Series:
    """One event about one object, and how often it has happened since it was written."""

    name: str
    count: int
    last_sent: float


def pod_reference(pod: PodRecord) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}


class PodReports:
    """The outbox's Reports in the daemon: pods' PodScheduled conditions and events (see the module)."""

    def __init__(
        self,
        client: KubeClient,
        logger: JsonLogger,
        metrics: Metrics,
        *,
        component: str,
        repeat_window: float,
        workers: int = 8,
        clock: Any = time.monotonic,
    ) -> None:
        self.client = client
        self.log = logger
        self.metrics = metrics
        self.component = component
        self.repeat_window = repeat_window
        self._clock = clock
        self._series: dict[str, dict[str, _Series]] = {}  # involved uid -> reason -> series
        self._conditions: dict[str, tuple[str, str]] = {}  # pod uid -> (reason, message) we wrote
        self._calls: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue(MAX_PENDING_CALLS)
        self._worker_count = workers
        self._stamp = 0  # the last event name's nanoseconds
        self._workers: list[asyncio.Task[None]] = []  # started with the first call (on the running loop)

    async def close(self, drain_seconds: float = 2.0) -> None:
        if self._workers:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._calls.join(), drain_seconds)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    def _submit(self, *call: Any) -> None:
        if not self._workers:
            self._workers = [asyncio.create_task(self._work()) for _ in range(self._worker_count)]
        try:
            self._calls.put_nowait(call)
        except asyncio.QueueFull:
            self.metrics.events_dropped.inc()

    # ------------------------------------------------------------------ what the scheduler reports
    def scheduled(self, pod: PodRecord, node: str) -> None:
        self.forget(pod.uid)
        self.event(
            pod_reference(pod),
            "Normal",
            "Scheduled",
            f"Successfully assigned {pod.key} to {node}",
            component=pod.scheduler_name,
        )

    def unschedulable(self, pod: PodRecord, message: str) -> None:
        """The PodScheduled=False condition when its text changes, and an aggregated FailedScheduling."""
        self._failed(pod, ConditionReason.UNSCHEDULABLE, message)

    def error(self, pod: PodRecord, message: str) -> None:
        """The attempt failed (not for want of a node): reason SchedulerError, and a FailedScheduling."""
        self._failed(pod, ConditionReason.SCHEDULER_ERROR, message)

    def _failed(self, pod: PodRecord, reason: ConditionReason, message: str) -> None:
        message = truncate(message)
        written = self._conditions.get(pod.uid)
        if written is None and pod.scheduled_condition and pod.scheduled_condition[0] == "False":
            written = pod.scheduled_condition[1:]  # already on the pod, e.g. written before a restart
        if written != (reason, message):
            self._conditions[pod.uid] = (reason, message)
            self._submit("condition", pod, reason, message)
        self.event(pod_reference(pod), "Warning", "FailedScheduling", message, component=pod.scheduler_name)

    def event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, *, component: str = ""
    ) -> None:
        """An event about any object, sent once and then aggregated per repeat window; `component` is the
        profile (schedulerName) reporting it, `self.component` if not given."""
        message = truncate(message)
        now = self._clock()
        by_reason = self._series.setdefault(involved.get("uid") or involved["name"], {})
        series = by_reason.get(reason)
        if series is None:
            # kube's event recorder names an event NAME.<UnixNano in hex>; strictly increasing here, so that
            # two events of one object in the same nanosecond still get two names (no urandom per event).
            self._stamp = max(time.time_ns(), self._stamp + 1)
            name = f"{involved['name']}.{self._stamp:x}"
            by_reason[reason] = _Series(name, 1, now)
            self._submit("create", involved, kind, reason, message, name, component or self.component)
            return
        series.count += 1
        if now - series.last_sent >= self.repeat_window:
            series.last_sent = now
            self._submit("repeat", involved.get("namespace") or "default", series.name, series.count, message)

    def forget(self, uid: str) -> None:
        self._series.pop(uid, None)
        self._conditions.pop(uid, None)

    # ------------------------------------------------------------------ API calls
    async def _work(self) -> None:
        while True:
            call = await self._calls.get()
            try:
                if call[0] == "condition":
                    await self._write_condition(*call[1:])
                elif call[0] == "create":
                    await self._create_event(*call[1:])
                else:
                    await self._repeat_event(*call[1:])
            except Exception as exc:  # keep the worker alive whatever one call does
                self.log.error("feedback.failed", call=call[0], error=f"{type(exc).__name__}: {exc}")
            finally:
                self._calls.task_done()

    async def _write_condition(self, pod: PodRecord, reason: ConditionReason, message: str) -> None:
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": str(reason),
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": rfc3339(millis=False),
                    }
                ]
            }
        }
        wanted = (reason, message)
        for delay in (0.0, *RETRY_DELAYS):
            if self._conditions.get(pod.uid) != wanted:
                return  # a newer reason was submitted, or the pod was placed or has gone
            await asyncio.sleep(delay)
            result = await self.client.patch_pod_status(pod.namespace, pod.name, patch)
            if result.ok or result.status == 404:
                latest = self._conditions.get(pod.uid)
                if result.ok and latest is not None and latest != wanted:
                    # A newer reason was submitted while this one was on the wire, and another worker may
                    # have written it first: write it again, so that the pod ends with the newest reason.
                    self._submit("condition", pod, *latest)
                return
            self.metrics.api_errors.labels("pod_status", str(result.status)).inc()
            self.log.warning(
                "feedback.condition_failed", pod=pod.key, code=result.status, error=result.message
            )
            if result.status not in TRANSIENT:
                break
        if self._conditions.get(pod.uid) == wanted:
            del self._conditions[pod.uid]  # not written: the next attempt of the pod writes it again

    async def _create_event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, name: str, component: str
    ) -> None:
        now = rfc3339(millis=False)
        namespace = involved.get("namespace") or "default"
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": component},
            "reportingComponent": component,
        }
        for delay in RETRY_DELAYS:
            result = await self.client.create_event(namespace, event)
            if result.ok or result.status not in TRANSIENT:
                break
            await asyncio.sleep(delay)
        if not result.ok and result.status != 409:  # 409: an earlier try landed after all (names are unique)
            self.metrics.api_errors.labels("event", str(result.status)).inc()
            self.log.warning(
                "feedback.event_failed",
                object=f"{namespace}/{involved['name']}",
                reason=reason,
                code=result.status,
                error=result.message,
            )

    async def _repeat_event(self, namespace: str, name: str, count: int, message: str) -> None:
        patch = {"count": count, "message": message, "lastTimestamp": rfc3339(millis=False)}
        result = await self.client.patch_event(namespace, name, patch)
        if not result.ok:
            self.metrics.api_errors.labels("event", str(result.status)).inc()
