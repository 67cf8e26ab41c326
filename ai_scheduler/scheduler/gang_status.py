"""PodGroup status, kept as the scheduler-plugins project keeps it (phase, occupiedBy, counts, start time).

Gangs whose status may have changed are marked dirty by the watch handlers
and the gang scheduler; a writer flushes them every half second with a merge
patch, and only when the computed status differs from what the object says.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gangs import Gang, GangRegistry
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.scheduler.metrics import Metrics

FLUSH_SECONDS = 0.5


def podgroup_status(gang: Gang) -> dict[str, Any]:
    """The status block for a gang's PodGroup (phases as scheduler-plugins' PodGroup controller)."""
    counts = gang.counts()
    minimum = gang.min_member
    done = counts["running"] + counts["succeeded"]
    if gang.failed_reason:
        phase = "Failed"
    elif counts["succeeded"] >= minimum:
        phase = "Finished"
    elif counts["failed"] and counts["failed"] + done >= minimum:
        phase = "Failed"
    elif done >= minimum:
        phase = "Running"
    elif counts["scheduled"] >= minimum:
        phase = "Scheduled"
    elif counts["scheduled"] or gang.schedule_start is not None:
        phase = "Scheduling"
    elif counts["pods"] >= minimum:
        phase = "PreScheduling"
    else:
        phase = "Pending"
    status: dict[str, Any] = {
        "phase": phase,
        "running": counts["running"],
        "succeeded": counts["succeeded"],
        "failed": counts["failed"],
    }
    owners = next((m.owners for m in gang.members.values() if m.owners), ())
    if owners:
        status["occupiedBy"] = ",".join(sorted(f"{gang.namespace}/{owner}" for owner in owners))
    if gang.schedule_start is not None:
        status["scheduleStartTime"] = rfc3339(gang.schedule_start, millis=False)
    return status


class GangStatusWriter:
    def __init__(
        self, client: KubeClient, registry: GangRegistry, logger: JsonLogger, metrics: Metrics
    ) -> None:
        self.client = client
        self.registry = registry
        self.log = logger
        self.metrics = metrics

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()

    async def flush(self) -> None:
        dirty, self.registry.dirty = self.registry.dirty, set()
        for key in dirty:
            gang = self.registry.gangs.get(key)
            if gang is None or gang.podgroup is None:
                continue
            status = podgroup_status(gang)
            current = gang.podgroup.status
            if all(current.get(k) == v for k, v in status.items()):
                continue
            result = await self.client.patch_podgroup_status(gang.namespace, gang.name, {"status": status})
            if result.ok:
                gang.podgroup.status = {**current, **status}
                self.log.info("gang.status", gang=key, **status)
            elif result.status != 404:
                self.metrics.api_errors.labels("podgroup_status", str(result.status)).inc()
                self.log.warning("gang.status_failed", gang=key, code=result.status, error=result.message)
                self.registry.dirty.add(key)
