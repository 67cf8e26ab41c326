"""What users see: the PodScheduled condition and the Scheduled / FailedScheduling events.

API calls are the scarce resource at thousands of pods per second, so a placed
pod costs one event, and an unschedulable pod costs calls only when what we
would tell it changes: the condition is patched when its message differs from
the last one written, and FailedScheduling is sent once per pod, then
aggregated (count, latest message and lastTimestamp patched on that event) at
most once per repeat window, however often the pod is retried.
Everything goes through a bounded queue drained by a few workers, so a slow
API server delays events instead of the scheduling loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.scheduler.metrics import Metrics

MAX_PENDING_CALLS = 20_000


@dataclass(slots=True)
class _Reported:
    condition: str = ""  # the message of the PodScheduled condition we last wrote (or found)
    event_name: str = ""
    count: int = 0
    last_sent: float = 0.0


class Feedback:
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
        self._reported: dict[str, _Reported] = {}
        self._calls: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(MAX_PENDING_CALLS)
        self._workers = [asyncio.create_task(self._work()) for _ in range(workers)]

    async def close(self, drain_seconds: float = 2.0) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._calls.join(), drain_seconds)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    def idle(self) -> bool:
        return self._calls.empty()

    def _submit(self, kind: str, payload: Any) -> None:
        try:
            self._calls.put_nowait((kind, payload))
        except asyncio.QueueFull:
            self.metrics.events_dropped.inc()

    # ------------------------------------------------------------------ what the scheduler reports
    def scheduled(self, pod: PodRecord, node: str) -> None:
        self._reported.pop(pod.uid, None)
        self._submit(
            "event", (pod, "Normal", "Scheduled", f"Successfully assigned {pod.key} to {node}", 1, "")
        )

    def unschedulable(self, pod: PodRecord, message: str) -> None:
        """Condition when its text changes; one FailedScheduling event, then aggregation per window."""
        state = self._reported.get(pod.uid)
        if state is None:
            known = pod.scheduled_condition
            state = self._reported[pod.uid] = _Reported(
                condition=known[2] if known and known[:2] == ("False", "Unschedulable") else ""
            )
        if state.condition != message:
            state.condition = message
            self._submit("condition", (pod, message))
        now = self._clock()
        state.count += 1
        if not state.event_name:
            state.event_name = f"{pod.name}.{uuid.uuid4().hex[:16]}"
            state.last_sent = now
            self._submit("event", (pod, "Warning", "FailedScheduling", message, 1, state.event_name))
        elif now - state.last_sent >= self.repeat_window:
            state.last_sent = now
            self._submit("event-repeat", (pod, state.event_name, state.count, message))

    def forget(self, uid: str) -> None:
        self._reported.pop(uid, None)

    # ------------------------------------------------------------------ API calls
    async def _work(self) -> None:
        while True:
            kind, payload = await self._calls.get()
            try:
                if kind == "condition":
                    await self._write_condition(*payload)
                elif kind == "event":
                    await self._create_event(*payload)
                else:
                    await self._repeat_event(*payload)
            except Exception as exc:  # keep the worker alive whatever one call does
                self.log.error("feedback.failed", call=kind, error=f"{type(exc).__name__}: {exc}")
            finally:
                self._calls.task_done()

    async def _write_condition(self, pod: PodRecord, message: str) -> None:
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": rfc3339(millis=False),
                    }
                ]
            }
        }
        result = await self.client.patch_pod_status(pod.namespace, pod.name, patch)
        if not result.ok and result.status != 404:
            self.metrics.api_errors.labels("pod_status", str(result.status)).inc()
            self.log.warning(
                "feedback.condition_failed", pod=pod.key, code=result.status, error=result.message
            )

    async def _create_event(
        self, pod: PodRecord, kind: str, reason: str, message: str, count: int, name: str
    ) -> None:
        now = rfc3339(millis=False)
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name or f"{pod.name}.{uuid.uuid4().hex[:16]}", "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": count,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component},
            "reportingComponent": self.component,
        }
        result = await self.client.create_event(pod.namespace, event)
        if not result.ok:
            self.metrics.api_errors.labels("event", str(result.status)).inc()
            self.log.warning(
                "feedback.event_failed", pod=pod.key, reason=reason, code=result.status, error=result.message
            )

    async def _repeat_event(self, pod: PodRecord, name: str, count: int, message: str) -> None:
        patch = {"count": count, "message": message, "lastTimestamp": rfc3339(millis=False)}
        result = await self.client.patch_event(pod.namespace, name, patch)
        if not result.ok:
            self.metrics.api_errors.labels("event", str(result.status)).inc()
