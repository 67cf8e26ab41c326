"""The decision log: one `decision` line per attempt, with what a replay and a reader need.

Every attempt of a pod (a lone pod's cycle, each member of a gang's, a parked pod of a StrictFIFO queue,
a quota refusal, a repeated failure of an equivalent pod) ends here: the attempt's metrics, then the
line (its pod, queue, priority and factors, the nodes evaluated and why they failed, the chosen node
and devices, timings), built only when someone reads it (`JsonLogger.wants`: written at the log
level, or kept for the visibility API). Its format is the log's (`log.SCHEMA_VERSION`). The line's
tenant is the attempt's own (its CycleState's, when the attempt has one), looked up nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy, Tenant
from ai_scheduler.config import SettingsView
from ai_scheduler.log import SCHEMA_VERSION, JsonLogger
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.framework.cycle_state import CycleState
from ai_scheduler.scheduler.framework.runtime import Decision
from ai_scheduler.scheduler.metrics import ERROR, UNSCHEDULABLE, Metrics
from ai_scheduler.scheduler.priority import Priority, PriorityEngine

# The decision line's result for a pod not tried because it waits behind its StrictFIFO queue's head.
PARKED = "parked"


class DecisionLog:
    """Writes the decision lines and counts the attempts (see the module)."""

    def __init__(
        self,
        settings: SettingsView,
        tenancy: Tenancy,
        priorities: PriorityEngine,
        metrics: Metrics,
        logger: JsonLogger,
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.tenancy = tenancy
        self.priorities = priorities
        self.metrics = metrics
        self.logger = logger
        self.clock = clock

    def log(
        self,
        qp: QueuedPod,
        pod: PodRecord,
        decision: Decision,
        result: str,
        extra: dict[str, Any],
        cycle: CycleState | None = None,
    ) -> None:
        """Metrics and the decision log line: everything needed to understand and replay the attempt
        (`cycle`: the attempt's CycleState, whose tenant the line reads; a gang member's has none)."""
        if result not in ("scheduled", PARKED):  # a placement is counted once its binding succeeds (Binder)
            outcome = ERROR if result == "error" else UNSCHEDULABLE
            self.metrics.attempt(outcome, pod.scheduler_name, decision.duration)
        if not self.logger.wants("decision", "info"):  # nobody reads it: not worth building (the simulator's)
            return
        tenant = cycle.tenant if cycle is not None else self.tenancy.tenant_of(pod)
        explained = self.priorities.explain(pod.uid)  # read once: the factors and the run time share it
        fields: dict[str, Any] = {
            "v": SCHEMA_VERSION,  # the replayable log's format (log.py; history.py writes the rest)
            "pod": pod.key,
            "uid": pod.uid,
            "profile": pod.scheduler_name,
            "queue": tenant.queue,
            **self._priority_fields(pod, tenant, explained),
            "attempt": qp.attempts,
            "result": result,
            "requests": pod.requests,
            "nodes": decision.total_nodes,
            "evaluated": decision.evaluated,
            "feasible": decision.feasible,
            "filtered": decision.reasons,
            "top": decision.top,
            "node": decision.node,
            "cycle_ms": round(decision.duration * 1000, 3),
            "wait_ms": round((self.clock() - qp.initial_attempt) * 1000, 1),
        }
        if decision.gpu_ids:
            fields["gpus"] = {"ids": decision.gpu_ids, "uuids": decision.gpu_uuids}
        if decision.claims is not None:  # DRA devices allocated at Reserve (DynamicResources)
            fields["claims"] = decision.claims.summary()
        run = explained.run_time if explained is not None else None
        if run is not None:  # what the policy (and reservations, backfill) took its run time to be
            fields["runtime"] = {"median_s": round(run.median, 1), "upper_s": round(run.upper, 1),
                                 "source": run.source}
        if decision.node is None:
            fields["message"] = decision.message
        fields.update(extra)
        self.logger.info("decision", **fields)

    def _priority_fields(self, pod: PodRecord, tenant: Tenant, priority: Priority | None) -> dict[str, Any]:
        fields: dict[str, Any] = {"specPriority": pod.priority, "user": tenant.user, "group": tenant.group}
        if priority is not None:
            fields["priority"] = round(priority.score, 6)
            fields["factors"] = {name: round(value, 6) for name, value in priority.factors.items()}
            fields["policy"] = self.settings.current.active_policy
            if priority.promoted:  # waited past its queue's promoteAfterSeconds: ordered at this level
                fields["promoted"] = True
                fields["queueLevel"] = priority.queue_level
        return fields
