"""The scheduling path: one cycle for the pod (or the gang) at the head of the queue.

kube-scheduler's `schedule_one.go`, for our queue and policies. The loop pops
a pod, waits while `bindConcurrency` bindings are outstanding, and runs one
cycle under the CycleGuard (recovery.py), so that a bug for one pod neither
stops scheduling nor leaves the pod without a reason. A cycle:

1. drops a pod that is no longer ours to place (bound, assumed, gated,
   finished, of a profile that went away);
2. parks a pod of a StrictFIFO queue behind the queue's head while the head waits
   (strict_fifo.py: not tried, the reason on it);
3. hands a gang member to the GangScheduler (the whole gang is tried at once);
4. checks quota admission with the tenant and quota amounts of the attempt's
   CycleState (framework/cycle_state.py: made when the pod is popped, read from
   its PodInfo once; its priority is evaluated there at most once, when first
   needed); a refusal waits until usage drops;
5. runs the profile's Framework (filters and scores) with the nodes the pod
   must keep off: reserved for a pod or gang ahead of it, or the node its
   workload was just preempted from;
6. on a node: Reserve (the cache assumes the pod, with its volumes) and hand
   the binding to the outbox's Bindings (outbox.py; the daemon's Binder binds
   asynchronously);
7. on none: PostFilter (preemption, whose verdict ends the Unschedulable
   message), the reason on the pod, and, when preemption cannot help, a
   starvation reservation (`Reserver`: nodes held for the pod ahead) if on.
   With queueing hints on (`hint_of`, set by the core), a pod whose failure
   had no side effect (no preemption, no reservation, no node kept off for
   others) is requeued with a hint, so that a pod leaving a node retries it
   only if it may fit there (scheduling_queue.py).

Equivalence of identical pods (with the hints): a pod with a hint fails wherever an earlier pod with the
same hint failed, as long as the cache's `room_version` has not moved since, because for such pods only
room, nodes, namespaces or DRA objects could turn a failure into a fit, and placing pods only takes room.
So that failure is repeated without running the filters and PostFilter again: the same requeue with the
same hint, the same reason on the pod and the same decision line, which names the pod whose attempt it
repeats (`equivalentTo`; its node counts are that attempt's). Under a standing queue of like pods most
attempts are such repeats (benchmarks/standing_queue.py measures what that saves). The pods with the
same hint that an event put back in activeQ are not even popped for it: each would repeat the failure
when its turn came, so they are retried virtually at once (`SchedulingQueue.take_alike`, with
`_fails_alike` saying which would take this path), with no decision line of their own.

Every attempt writes one `decision` log line with what a replay needs. The CycleState goes with the
attempt to each of its parts that reads the pod's derived data (the StrictFIFO check, PostFilter, the
decision log), so that none of them derives it again.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.queue import QueueClosed, QueuedPod
from ai_scheduler.scheduler.decision_log import PARKED
from ai_scheduler.scheduler.framework.cycle_state import CycleState
from ai_scheduler.scheduler.framework.runtime import Decision, Framework
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.scheduler.outbox import Bindings, Reports
from ai_scheduler.scheduler.preemption import Preemptor
from ai_scheduler.scheduler.recovery import CycleGuard
from ai_scheduler.scheduler.session import Session
from ai_scheduler.scheduler.strict_fifo import StrictFifo

# Hints whose last failure is held for equivalent pods; past this many (all unlike), it starts again.
MAX_EQUIVALENCE_CLASSES = 4096


class SchedulingCycle:
    """The scheduling loop and one cycle; wired by the daemon (scheduler.py's role in kube)."""

    def __init__(
        self,
        session: Session,
        frameworks: Callable[[], Mapping[str, Framework]],
        gang_scheduler: GangScheduler,
        preemptor: Preemptor | None,
    ) -> None:
        self.session = session
        self.settings = session.settings
        self.frameworks = frameworks
        self.cache = session.cache
        self.queue = session.queue
        self.gangs = session.gangs
        self.tenancy = session.tenancy
        self.priorities = session.priorities
        self.reserver = session.reserver
        self.domains = session.domains
        self.metrics = session.metrics
        self.log = session.log
        self.clock = session.clock
        self.log_decision = session.decisions.log
        self.binder: Bindings = session.outbox.bindings
        self.feedback: Reports = session.outbox.reports
        self.gang_scheduler = gang_scheduler
        # PostFilter (None: no preemption, and no starvation reservation either, as in the simulator's
        # runs that ask for none).
        self.preemptor = preemptor
        # A bug for one pod must not stop scheduling for all, nor leave its pods without a reason.
        self.guard = CycleGuard(self.cache, self.queue, self.binder, gang_scheduler, self.feedback,
                                self.metrics, self.log)
        # StrictFIFO queues' heads: a pod behind its queue's waiting head is not tried.
        self.strict = StrictFifo(session)
        # Queueing hints (set by the core; None: off): what makes a pod that did not fit alike to others.
        self.hint_of: Callable[[PodRecord], Any] | None = None
        # The last attempt failed on the pod's own error (invalid as written, no such queue, a broken gang):
        # such a pod never becomes a StrictFIFO head, which would block its queue for good.
        self._own_error = False
        # Equivalence (with the hints): per hint, the last failure's room version, decision and pod uid.
        self._failures: dict[Any, tuple[tuple[int, ...], Decision, str]] = {}

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        try:
            await self._schedule_forever()
        except Exception as exc:  # a bug in the loop itself: say so; /healthz turns red and the pod restarts
            self.log.error("scheduler.loop_crashed", error=f"{type(exc).__name__}: {exc}")
            raise

    async def _schedule_forever(self) -> None:
        while True:
            await self.binder.wait_for_room()
            try:
                qp = await self.queue.pop()
            except QueueClosed:
                return
            # A bug for one pod must not stop scheduling for all, nor leave its pods without a reason.
            self.guard.run(qp, self.schedule_one)
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ one cycle
    def schedule_one(self, qp: QueuedPod) -> None:
        """One cycle: a lone pod, or the whole gang the popped pod belongs to."""
        tried = self._to_try(qp)
        if tried is None:
            self.queue.delete(qp.pod.uid)
            return
        pod, framework = tried
        cycle = CycleState(pod, self.tenancy, qp, self.priorities.sort_key)
        strict = self.strict.queue_of(cycle)
        if strict is None:
            self._attempt(qp, cycle, framework)
            return
        head = self.strict.head_before(cycle, strict)
        if head is not None:
            self._park(qp, pod, head, strict, cycle)
            return
        self._own_error = False
        self._attempt(qp, cycle, framework)
        self.strict.tried(qp, strict, blocks=not self._own_error)

    def _to_try(self, qp: QueuedPod) -> tuple[PodRecord, Framework] | None:
        """The pod as the cache holds it, and its profile's Framework; None when it is no longer ours to
        place (bound, assumed, gated, finished, of a profile that went away)."""
        state = self.cache.pod_state(qp.pod.uid)
        pod = state.record if state is not None else qp.pod
        framework = self.frameworks().get(pod.scheduler_name)
        if (
            framework is None
            or not pod.pending
            or pod.gated
            or (state is not None and (state.assumed or state.node))
        ):
            return None
        return pod, framework

    def _fails_alike(self, qp: QueuedPod, hint: Any) -> bool:
        """Whether the waiting pod `qp`, popped now, would repeat the failure held for `hint` (while the room
        version stays): tried (`_to_try`), not parked behind a StrictFIFO head, no gang, no quota that could
        refuse it first, no node kept off for it, and the same hint."""
        tried = self._to_try(qp)
        if tried is None:
            return False
        pod = tried[0]
        tenant = self.tenancy.tenant_of(pod)
        return (
            not tenant.error
            and self.tenancy.unlimited(tenant)
            and not self.strict.is_strict(tenant.queue)
            and self.gangs.gang_of(pod) is None
            and not (self.preemptor is not None and self.preemptor.avoid(pod))
            and self.hint_of is not None
            and self.hint_of(pod) == hint
        )

    def _take_alike(self, hint: Any, message: str) -> None:
        """The failure with `hint` just held or repeated: the alike pods waiting in activeQ fail so now
        (`SchedulingQueue.take_alike`), unless a reservation is held (an attempt would evaluate its key)."""
        if self.reserver.current is None and not self.settings.current.scheduling.reservation:
            self.queue.take_alike(hint, message, lambda waiting: self._fails_alike(waiting, hint))

    def _attempt(self, qp: QueuedPod, cycle: CycleState, framework: Framework) -> None:
        pod = cycle.pod
        gang = self.gangs.gang_of(pod)
        if gang is not None:
            self._own_error = bool(gang.problem)
            self.gang_scheduler.schedule(qp, gang, framework)
            return
        tenant = cycle.tenant
        refusal = tenant.error or self.tenancy.quota_refusal(tenant, cycle.amounts)
        if refusal:
            self._own_error = bool(tenant.error)
            self._refuse(qp, cycle, refusal)
            return
        # The queue key only matters against a reservation: computing it costs a policy evaluation.
        key = cycle.key() if self.reserver.current is not None else ()
        kept = self.reserved_for_others(pod, key)
        hint = room = None
        if self.hint_of is not None and not kept and not self.settings.current.scheduling.reservation:
            hint = self.hint_of(pod)
            if hint is not None:
                room = self.cache.room_version()
                earlier = self._failures.get(hint)
                if earlier is not None and earlier[0] == room:  # fails as that pod did (see the docstring)
                    self._repeat_failure(qp, pod, earlier[1], earlier[2], hint, cycle)
                    return
        decision = framework.schedule(pod, blocked=kept)
        if decision.failure:  # the attempt failed (kube's SchedulerError): retried with backoff
            self.queue.requeue(qp, unschedulable=False, reason=decision.failure)
            self.feedback.error(pod, decision.failure)
            self.log_decision(qp, pod, decision, "error", {}, cycle)
            return
        if decision.node is not None:
            self.reserver.placed(pod.uid)
            self.binder.reserve(pod, decision)
            self.binder.submit(qp, pod, decision)
            self.log_decision(qp, pod, decision, "scheduled", {}, cycle)
            return
        # PostFilter first, as kube-scheduler runs it: when preemption cannot help, its verdict ends the
        # Unschedulable message.
        plan = None
        if self.preemptor is not None:
            verdict = self.preemptor.post_filter(pod, framework, decision, cycle)
            plan, decision.post_filter = verdict.plan, verdict.message
        held = False
        if plan is not None or decision.error:
            hint = None
        elif hint is not None and room == self.cache.room_version():
            if len(self._failures) > MAX_EQUIVALENCE_CLASSES:
                self._failures.clear()
            self._failures[hint] = (room, decision, pod.uid)
            held = True
        self._own_error = bool(decision.error)
        self._unschedulable(qp, pod, decision, hint, {}, cycle)
        if held:
            self._take_alike(hint, decision.message)
        if decision.error or self.preemptor is None:
            return
        if plan is not None:
            self.preemptor.execute(pod, plan)
        elif self.settings.current.scheduling.reservation:
            rows, _ = framework.feasible_rows(cycle.resourceless())
            key = cycle.key()
            self.reserver.consider(pod.key, frozenset({pod.uid}), key, pod, pod.requests, 1, rows)

    def _park(self, qp: QueuedPod, pod: PodRecord, head: QueuedPod, queue: str, cycle: CycleState) -> None:
        """Not tried: the pod waits behind its StrictFIFO queue's head (strict_fifo.py); the reason on it and
        its decision line (`parked`, not counted as an attempt)."""
        reason = f"waiting behind {head.pod.key} in StrictFIFO queue {queue}"
        self.queue.park(qp, head.pod.uid, reason)
        self.feedback.unschedulable(pod, reason)
        extra = {"message": reason, "strictFifo": {"queue": queue, "head": head.pod.key}}
        self.log_decision(qp, pod, Decision(None, self.cache.node_count), PARKED, extra, cycle)

    def forget_failures(self) -> None:
        """Hold no failure for equivalent pods any more (the profiles or their filters may have changed)."""
        self._failures.clear()

    def _unschedulable(
        self,
        qp: QueuedPod,
        pod: PodRecord,
        decision: Decision,
        hint: Any,
        extra: dict[str, Any],
        cycle: CycleState,
    ) -> None:
        """The pod fits nowhere: requeued (with its hint), the reason on it and its basic PodGroup, logged."""
        message = decision.message
        self.queue.requeue(qp, unschedulable=True, reason=message, hint=hint)
        self.feedback.unschedulable(pod, message)
        group = self.gangs.group_of(pod)
        if group is not None and group.basic:  # its PodGroup's condition says why (gang_status.py)
            group.last_reason = message
            self.gangs.dirty.add(group.key)
        self.log_decision(qp, pod, decision, "unschedulable", extra, cycle)

    def _repeat_failure(
        self, qp: QueuedPod, pod: PodRecord, earlier: Decision, uid: str, hint: Any, cycle: CycleState
    ) -> None:
        """The failure of an equivalent pod at the same room version, repeated for this one (no filters)."""
        if self.preemptor is not None:  # PostFilter ran for it and would run again, to the same verdict
            self.metrics.preemption_attempts.inc()
        decision = copy.copy(earlier)
        decision.duration = 0.0
        self._unschedulable(qp, pod, decision, hint, {"equivalentTo": uid}, cycle)
        self._take_alike(hint, decision.message)

    def bound(self, pod: PodRecord, _node: str) -> None:
        """The binder's report of a binding that succeeded."""
        self.gang_scheduler.bound(pod)
        self.reserver.placed(pod.uid)

    def reserved_for_others(self, pod: PodRecord, key: tuple[Any, ...]) -> list[tuple[Any, str]]:
        """Nodes this pod keeps off, each with its reason: the node its workload was just preempted from,
        and nodes reserved for a pod or gang ahead of it (unless it may backfill)."""
        kept: list[tuple[Any, str]] = []
        avoided = self.preemptor.avoid(pod) if self.preemptor is not None else ""
        row = self.cache.row_of(avoided) if avoided else -1
        if row >= 0:
            mask = np.zeros(self.cache.rows, dtype=bool)
            mask[row] = True
            kept.append((mask, "node(s) its workload was just preempted from"))
        if self.settings.current.scheduling.reservation and self.reserver.current is not None:
            blocked = self.reserver.blocked_rows(pod, key)
            if blocked is not None:
                kept.append((blocked, f"node(s) reserved for {self.reserver.current.holder}"))
        kept.extend(self.domains.kept_off(pod))  # logical domains (domains.py): required, kept for others
        return kept

    def _refuse(self, qp: QueuedPod, cycle: CycleState, reason: str) -> None:
        """Admission refused: nothing tried, the pod waits until usage drops (a pod leaving moves it)."""
        pod, tenant = cycle.pod, cycle.tenant
        self.queue.requeue(qp, unschedulable=True, reason=reason)
        self.feedback.unschedulable(pod, reason)
        self.log.info(
            "admission.refused",
            pod=pod.key,
            user=tenant.user,
            group=tenant.group,
            queue=tenant.queue,
            reason=reason,
        )
        refused = Decision(None, self.cache.node_count)
        self.log_decision(qp, pod, refused, "refused", {"message": reason}, cycle)

