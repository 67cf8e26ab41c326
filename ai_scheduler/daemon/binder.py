"""Binder: sends bindings asynchronously, a bounded number in flight.

The scheduling loop has already assumed the pod in the cache; the binder only
reports back. Success starts the assumption's expiry clock (the watch confirms
it); a failure with an answer (409 Conflict, 404, 500, ...) forgets the
assumption at once and sends the pod back to the queue with backoff.

A request that got no answer (status 0: the transport failed or nothing came
back within `apiRequestTimeoutSeconds`; or 502/503/504) may or may not have
landed. The binder then keeps the assumption, so the pod's resources stay
counted on the chosen node, and tries the same request again with a backoff of
at most `BIND_RETRY_MAX_SECONDS` (cut short when the API server answers again
after an outage), until an answer comes. A 409 on such a retry that says the pod
is already assigned to the very node we chose is our earlier attempt having
landed: a success. Any other 409 is handled as always (forget, requeue; the
watch shows where the pod went). So a binding is never lost and never made
twice, and the scheduling loop waits for room while bindings cannot get out.

The binding's outcome is the attempt's outcome in kube-scheduler's metrics: a
success counts the attempt as `scheduled` (from the start of its cycle to the
end of the binding) and observes the pod's SLI latency and attempts; a binding
the API server refused counts it as `error`.

A pod with PersistentVolumeClaims first goes through VolumeBinding's PreBind
(volume_prebind.py): its claims are bound or handed to their provisioner for
the chosen node, and the binding waits until they are bound, as kube-scheduler
waits. That wait can be long (a provisioner at work), so it holds no binding
slot and does not count against the room the scheduling loop waits for; a
failure there is handled as a refused binding (forget, requeue).

A pod with DRA claims then goes through DynamicResources' PreBind (dra_prebind.py): the
allocations assumed at Reserve (`decision.claims`) are written to its claims' status with the pod
in reservedFor; a failure there is a refused binding too, and nothing is bound.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from ai_scheduler.api.kube import UNREACHABLE, ApiResult, KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gpus import gpu_annotations
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.daemon.dra_prebind import DraPreBind
from ai_scheduler.daemon.reports import PodReports
from ai_scheduler.daemon.volume_prebind import VolumePreBind
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import QueuedPod, SchedulingQueue
from ai_scheduler.scheduler.framework.plugins.dynamic_resources import DraPlan, DynamicResources
from ai_scheduler.scheduler.framework.plugins.volume_binding import NodeVolumes
from ai_scheduler.scheduler.framework.runtime import Decision
from ai_scheduler.scheduler.metrics import ERROR, Metrics

BIND_RETRY_INITIAL_SECONDS = 0.1
BIND_RETRY_MAX_SECONDS = 2.0


def landed_earlier(result: ApiResult, node: str) -> bool:
    """A 409 that says the pod is already on `node`: the API server's words for a binding to it that landed
    (kube-apiserver: `pod NAME is already assigned to node "NODE"`)."""
    return result.status == 409 and f'already assigned to node "{node}"' in result.message


class Binder:
    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        feedback: PodReports,
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
        self._room = asyncio.Event()
        self._room.set()
        self.volumes = VolumePreBind(client, cache, logger, clock=clock)
        self._volume_waits = 0  # bindings waiting in VolumeBinding's PreBind (they hold no slot)
        self._volume_plans: dict[str, NodeVolumes | str] = {}  # reserved pods' volume plans, by uid
        self.claims = DraPreBind(client, cache, logger)
        self._claim_plans: dict[str, DraPlan] = {}  # reserved pods' DRA allocations, by uid
        self.handed: set[str] = set()  # submitted since the cycle began; cleared by CycleGuard
        # Gang bookkeeping listens here (who was bound, whose binding failed).
        self.on_success: Callable[[PodRecord, str], None] | None = None
        self.on_failure: Callable[[PodRecord, ApiResult], None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def wait_for_room(self) -> None:
        """Hold the scheduling loop while `concurrency` bindings are outstanding, so that
        assumptions never run far ahead of what the API server has accepted."""
        while len(self._tasks) - self._volume_waits >= self.concurrency:
            self._room.clear()
            await self._room.wait()

    def reserve(self, pod: PodRecord, decision: Decision) -> None:
        """Reserve (kube's point of that name): assume the pod on the chosen node in the cache, and its
        volumes' bindings (VolumeBinding's AssumePodVolumes), before the next cycle looks."""
        node = decision.node or ""
        self.cache.assume(pod, node, decision.gpu_ids)
        if pod.claims:
            self._volume_plans[pod.uid] = self.volumes.assume(pod, node)
        if isinstance(decision.claims, DraPlan):
            DynamicResources.assume(decision.claims, self.cache)
            self._claim_plans[pod.uid] = decision.claims

    def unreserve(self, pod: PodRecord) -> None:
        """Unreserve: undo `reserve` for a pod that will not be bound after all."""
        self.cache.forget(pod.uid)
        self.volumes.revert(self._volume_plans.pop(pod.uid, None))
        DynamicResources.release(self._claim_plans.pop(pod.uid, None), self.cache)

    def submit(self, qp: QueuedPod, pod: PodRecord, decision: Decision) -> None:
        """Bind a reserved pod in the background; at most `concurrency` requests are on the wire at once."""
        # The cycle that chose the node has just ended: it began `decision.duration` ago.
        cycle_start = self._clock() - decision.duration
        node = decision.node or ""
        volumes = self._volume_plans.pop(pod.uid, None)
        if pod.claims and volumes is None:  # reserved by the cache alone (a caller that skipped `reserve`)
            volumes = self.volumes.assume(pod, node)
        claims = self._claim_plans.pop(pod.uid, None)
        if claims is None and isinstance(decision.claims, DraPlan):  # a caller that skipped `reserve`
            claims = decision.claims
            DynamicResources.assume(claims, self.cache)
        annotations = gpu_annotations(decision.gpu_ids, decision.gpu_uuids)
        task = asyncio.create_task(self._bind(qp, pod, node, annotations, cycle_start, volumes, claims))
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        self.handed.add(pod.uid)  # only once the binding really is on its way

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if len(self._tasks) - self._volume_waits < self.concurrency:
            self._room.set()

    async def _prebind_volumes(self, pod: PodRecord, node: str, plan: NodeVolumes | str) -> str:
        """VolumeBinding's PreBind, outside the slots: '' once the claims are bound, else why not."""
        self._volume_waits += 1
        self._room.set()
        try:
            return await self.volumes.bind(pod, node, plan)
        finally:
            self._volume_waits -= 1

    async def _prebind(self, pod: PodRecord, annotations: dict[str, str]) -> ApiResult | None:
        """PreBind: write the chosen devices on the pod; a failure here means nothing gets bound."""
        patch = {"metadata": {"annotations": annotations, "uid": pod.uid}}
        result = await self.client.patch_pod(pod.namespace, pod.name, patch)
        if result.ok:
            return None
        self.log.warning(
            "prebind.failed", pod=pod.key, code=result.status, error=result.message, annotations=annotations
        )
        return result

    async def drain(self, timeout: float) -> None:
        """Wait for the bindings in flight; those still retrying after `timeout` are given up."""
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)

    async def _attempt(self, pod: PodRecord, node: str, annotations: dict[str, str]) -> ApiResult:
        result = await self._prebind(pod, annotations) if annotations else None
        if result is None:
            result = await self.client.bind(pod.namespace, pod.name, pod.uid, node)
        return result

    async def _bind(
        self,
        qp: QueuedPod,
        pod: PodRecord,
        node: str,
        annotations: dict[str, str],
        cycle_start: float,
        volumes: NodeVolumes | str | None,
        claims: DraPlan | None = None,
    ) -> None:
        if volumes is not None:
            failure = await self._prebind_volumes(pod, node, volumes)
            if failure:
                self.volumes.revert(volumes)
                DynamicResources.release(claims, self.cache)
                self.log.warning("prebind.failed", pod=pod.key, uid=pod.uid, node=node, error=failure)
                gone = self.cache.pod_state(pod.uid) is None  # deleted while it waited: not to be retried
                self._failed(qp, pod, ApiResult(404 if gone else 500, {"message": failure}), cycle_start)
                return
        if claims is not None:
            failure = await self.claims.bind(pod, node, claims)
            if failure:
                self.log.warning("prebind.failed", pod=pod.key, uid=pod.uid, node=node, error=failure)
                gone = self.cache.pod_state(pod.uid) is None
                self._failed(qp, pod, ApiResult(404 if gone else 500, {"message": failure}), cycle_start)
                return
        async with self._slots:
            started = self._clock()
            retries = 0
            while True:
                epoch = self.client.epoch
                result = await self._attempt(pod, node, annotations)
                if result.status not in UNREACHABLE:
                    break
                # No answer: the binding may have landed or not. Keep the assumption, try the same again.
                retries += 1
                self.metrics.bind_errors.labels(str(result.status)).inc()
                self.log.warning(
                    "bind.retry",
                    pod=pod.key,
                    uid=pod.uid,
                    node=node,
                    code=result.status,
                    error=result.message,
                    retry=retries,
                )
                delay = min(BIND_RETRY_MAX_SECONDS, BIND_RETRY_INITIAL_SECONDS * 2 ** (retries - 1))
                await self.client.retry_pause(delay * random.uniform(0.8, 1.2), epoch)
            if retries and landed_earlier(result, node):
                self.log.info("bind.landed_earlier", pod=pod.key, uid=pod.uid, node=node, retries=retries)
                result = ApiResult(201, {})
        now = self._clock()
        self.metrics.bind_duration.observe(now - started)
        if result.ok:
            self.cache.binding_finished(pod.uid)
            self.queue.done(pod.uid)
            self.metrics.scheduled(
                pod.scheduler_name, now - cycle_start, now - qp.initial_attempt, qp.attempts
            )
            self.feedback.scheduled(pod, node)
            if self.on_success is not None:
                self.on_success(pod, node)
            if self.log.enabled("debug"):
                self.log.debug("bind.ok", pod=pod.key, node=node, bind_ms=round((now - started) * 1000, 3))
            return
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
        if claims is not None:  # Unreserve: the reservations PreBind wrote are taken back
            await self.claims.unreserve(pod, claims)
        self._failed(qp, pod, result, cycle_start)

    def _failed(self, qp: QueuedPod, pod: PodRecord, result: ApiResult, cycle_start: float) -> None:
        """A binding (or its PreBind) that will not happen: forget the assumption, requeue the pod."""
        self.cache.forget(pod.uid)
        self.metrics.attempt(ERROR, pod.scheduler_name, self._clock() - cycle_start)
        if result.status == 404:
            self.queue.delete(pod.uid)  # the pod is gone
        else:
            # 409 usually means someone else bound it: the watch will show that and drop it from the queue.
            self.queue.requeue(qp, unschedulable=False, reason=f"binding failed: {result.message}")
        self.queue.move_all("BindingFailed")  # the forgotten reservation frees room for others
        if self.on_failure is not None:
            self.on_failure(pod, result)
