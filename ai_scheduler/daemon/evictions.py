"""Evictions through the API: how the daemon carries out a preemption the core has decided.

The preemptor (preemption.py) chooses the node and the victims, nominates the pod there and logs the
plan, all in the cycle; this is the outbox side (outbox.Evictions), run as a task so that the loop
goes on: the preemptor's `nominatedNodeName` in its status, then per victim the `DisruptionTarget`
condition kube-scheduler writes, a `Preempted` event, and the deletion (a victim already gone is no
failure).
"""

from __future__ import annotations

import asyncio

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.daemon.reports import pod_reference
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.scheduler.outbox import Reports
from ai_scheduler.scheduler.victims import Plan, VictimKind


class KubeEvictions:
    def __init__(self, client: KubeClient, reports: Reports, logger: JsonLogger) -> None:
        self.client = client
        self.reports = reports
        self.log = logger
        self._tasks: set[asyncio.Task[None]] = set()

    def evict(self, pod: PodRecord, plan: Plan) -> None:
        task = asyncio.create_task(self._evict(pod, plan))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def _evict(self, pod: PodRecord, plan: Plan) -> None:
        message = f"{pod.scheduler_name}: preempting to accommodate a higher priority pod {pod.key}"
        if plan.reason is VictimKind.RECLAIM:
            message = f"{pod.scheduler_name}: reclaiming the guaranteed quota of {pod.key}'s group"
        await self.client.patch_pod_status(
            pod.namespace, pod.name, {"status": {"nominatedNodeName": plan.node}}
        )
        for victim in plan.victims:
            condition = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": message,
                "lastTransitionTime": rfc3339(millis=False),
            }
            await self.client.patch_pod_status(
                victim.namespace, victim.name, {"status": {"conditions": [condition]}}
            )
            self.reports.event(
                pod_reference(victim),
                "Normal",
                "Preempted",
                f"Preempted by {pod.key} on node {plan.node}",
                component=pod.scheduler_name,
            )
            result = await self.client.delete_pod(victim.namespace, victim.name)
            if not result.ok and result.status != 404:
                self.log.warning(
                    "preemption.delete_failed", victim=victim.key, code=result.status, error=result.message
                )
