"""Binder: sends bindings asynchronously, a bounded number in flight.

The scheduling loop has already assumed the pod in the cache; the binder only
reports back. Success starts the assumption's expiry clock (the watch confirms
it); any failure (409 Conflict, 404, a transport error) forgets the assumption
at once and sends the pod back to the queue with backoff.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import QueuedPod, SchedulingQueue
from ai_scheduler.scheduler.feedback import Feedback
from ai_scheduler.scheduler.metrics import Metrics


class Binder:
    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        feedback: Feedback,
        metrics: Metrics,
        logger: JsonLogger,
        *,
        concurrency: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.cache = cache
        self.queue = queue
        self.feedback = feedback
        self.metrics = metrics
        self.log = logger
        self.concurrency = concurrency
        self._clock = clock
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def reserve_slot(self) -> None:
        """Wait for room before the next cycle, so that assumptions never run far ahead of bindings."""
        await self._slots.acquire()

    def release_slot(self) -> None:
        self._slots.release()

    def submit(self, qp: QueuedPod, pod: PodRecord, node: str) -> None:
        """Bind in the background; takes over the slot reserved for this cycle."""
        task = asyncio.create_task(self._bind(qp, pod, node))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def _bind(self, qp: QueuedPod, pod: PodRecord, node: str) -> None:
        started = self._clock()
        try:
            result = await self.client.bind(pod.namespace, pod.name, pod.uid, node)
        finally:
            self._slots.release()
        now = self._clock()
        self.metrics.bind_duration.observe(now - started)
        if result.ok:
            self.cache.binding_finished(pod.uid)
            self.queue.done(pod.uid)
            self.metrics.e2e_latency.observe(now - qp.initial_attempt)
            self.feedback.scheduled(pod, node)
            if self.log.enabled("debug"):
                self.log.debug("bind.ok", pod=pod.key, node=node, bind_ms=round((now - started) * 1000, 3))
            return
        self.cache.forget(pod.uid)
        self.metrics.bind_errors.labels(str(result.status)).inc()
        self.log.warning(
            "bind.failed",
            pod=pod.key,
            uid=pod.uid,
            node=node,
            code=result.status,
            error=result.message,
            attempt=qp.attempts,
        )
        if result.status == 404:
            self.queue.delete(pod.uid)  # the pod is gone
        else:
            # 409 usually means someone else bound it: the watch will show that and drop it from the queue.
            self.queue.requeue(qp, unschedulable=False, reason=f"binding failed: {result.message}")
        self.queue.move_all("BindingFailed")  # the forgotten reservation frees room for others
