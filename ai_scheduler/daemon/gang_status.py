"""PodGroup status: the scheduler-plugins PodGroup's as that project keeps it (phase, occupiedBy, counts,
start time), and a Kubernetes PodGroup's `PodGroupInitiallyScheduled` condition as kube-scheduler writes it.

kube-scheduler (v1.37, schedule_one_podgroup.go) sets that condition after each
pod group cycle: True with reason `Scheduled` once the group is placed, False
with reason `Unschedulable` and the cycle's message while it is not, False with
`SchedulerError` on an internal error; `observedGeneration` is the PodGroup's
generation, and a True condition is never turned back to False. Here the
condition follows the gang: True once minCount members are bound (one, for
the basic policy), False with the gang's latest reason while it waits (for a
basic group, the latest message of one of its pods while none is placed),
`SchedulerError` for a PodGroup whose spec cannot be read.

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
from ai_scheduler.scheduler.gang import NATIVE_UNSCHEDULABLE
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


INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
MAX_CONDITION_MESSAGE = 32768  # metav1.Condition's limit


def native_conditions(gang: Gang, now: float | None = None) -> list[dict[str, Any]] | None:
    """The Kubernetes PodGroup's new `status.conditions`, or None when they stay as they are."""
    native = gang.native
    if native is None:
        return None
    conditions = [c for c in native.status.get("conditions") or () if isinstance(c, dict)]
    existing = next((c for c in conditions if c.get("type") == INITIALLY_SCHEDULED), None)
    if existing is not None and existing.get("status") == "True":
        return None  # terminal, as kube-scheduler keeps it
    if native.error:
        status, reason, message = "False", "SchedulerError", native.error
    elif gang.counts()["scheduled"] >= (1 if gang.basic else gang.min_member):
        status, reason, message = "True", "Scheduled", ""
    elif gang.failed_reason or gang.last_reason:
        # As kube-scheduler: the pods' message without its "pod group is unschedulable, " prefix.
        message = (gang.failed_reason or gang.last_reason).removeprefix(NATIVE_UNSCHEDULABLE)
        status, reason = "False", "Unschedulable"
    else:
        return None
    condition = {
        "type": INITIALLY_SCHEDULED,
        "status": status,
        "observedGeneration": native.generation,
        "lastTransitionTime": rfc3339(now, millis=False),
        "reason": reason,
        "message": message[:MAX_CONDITION_MESSAGE],
    }
    if existing is not None:
        if all(existing.get(k) == condition[k] for k in ("status", "reason", "message", "observedGeneration")
               ):
            return None
        if existing.get("status") == status and existing.get("lastTransitionTime"):
            condition["lastTransitionTime"] = existing["lastTransitionTime"]
    return [c for c in conditions if c.get("type") != INITIALLY_SCHEDULED] + [condition]


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
            if gang is not None and gang.native is not None:
                await self._write_native(gang)
                continue
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

    async def _write_native(self, gang: Gang) -> None:
        assert gang.native is not None
        conditions = native_conditions(gang)
        if conditions is None:
            return
        result = await self.client.patch_native_podgroup_status(
            gang.namespace, gang.name, {"status": {"conditions": conditions}}
        )
        if result.ok:
            gang.native.status = {**gang.native.status, "conditions": conditions}
            condition = conditions[-1]
            self.log.info("gang.status", gang=gang.key, condition=condition["type"],
                          status=condition["status"], reason=condition["reason"])
        elif result.status != 404:
            self.metrics.api_errors.labels("podgroup_status", str(result.status)).inc()
            self.log.warning("gang.status_failed", gang=gang.key, code=result.status, error=result.message)
            self.registry.dirty.add(gang.key)
