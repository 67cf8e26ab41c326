"""StrictFIFO queues (Kueue's `queueingStrategy`): no pod of the queue starts while one ahead of it waits.

With BestEffortFIFO (the default, kube-scheduler's way) each pod is tried in the queue's order and any
pod that fits starts, so a small pod may pass a large one that waits for room. With StrictFIFO the
queue's *head* blocks it: the earliest pod of the queue, in its order (the policy's sort key, then
arrival), that was tried, did not start and still waits. While the head waits, a pod of the queue
behind it is not tried: it is parked (`SchedulingQueue.park`: back in the unschedulable set, the
attempt not counted) with the reason `waiting behind <head> in StrictFIFO queue <queue>`, on the pod
and in its decision line. When the head leaves the queue (bound, deleted, held, taken by another
profile), the pods parked behind it are moved back (`SchedulingQueue.delete` releases them) and the
earliest of them is tried next. A pod ahead of the head (a higher priority arriving) is tried, and
if it does not fit either it becomes the head.

A pod that failed on its own error (invalid as written, an unknown queue, a broken gang) never becomes
the head: nothing the cluster does would mend it, and it must not block its queue for good.

A gang is one unit: a member is never parked behind a sibling (the head's gang attempt takes its
siblings along). Quota refusals block as well: in Kueue, StrictFIFO is about admission, and a pod
refused by its quota waits like one that fits no node. Papers' FIFO baselines (Tiresias, Helios' QSSF)
are strict FIFO; benchmarks/runtime_policies.py's arm fifo-strict is this strategy.

The check before an attempt reads the attempt's CycleState (framework/cycle_state.py): the pod's queue
from its tenant, its place from its key, evaluated once for the attempt. The check after it (`tried`)
evaluates the pod's key again: the attempt's own effects (a gang's members, a preemption's victims
back in the queue) may have moved what the key reads.
"""

from __future__ import annotations

from typing import Any

from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.framework.cycle_state import CycleState
from ai_scheduler.scheduler.session import Session

STRICT_FIFO = "StrictFIFO"


class StrictFifo:
    """The heads of the StrictFIFO queues, and the check each attempt passes first (see the module)."""

    def __init__(self, session: Session) -> None:
        self.settings = session.settings
        self.cache = session.cache
        self.queue = session.queue
        self.gangs = session.gangs
        self.tenancy = session.tenancy
        self.sort_key = session.priorities.sort_key
        self.heads: dict[str, QueuedPod] = {}  # per StrictFIFO queue: its head, while it waits

    def queue_of(self, cycle: CycleState) -> str | None:
        """The pod's queue when that queue is StrictFIFO, else None (nothing to check)."""
        if not self.settings.current.queues:  # no queues configured: none is strict, no tenant to read
            return None
        name = cycle.tenant.queue
        return name if self.is_strict(name) else None

    def is_strict(self, queue: str) -> bool:
        """Whether the queue named so is StrictFIFO."""
        config = self.settings.current
        if not config.queues:
            return False
        spec = config.queue(queue)
        return spec is not None and spec.queueing_strategy == STRICT_FIFO

    def head_before(self, cycle: CycleState, queue: str) -> QueuedPod | None:
        """The head the attempt's pod must wait behind: its queue's head when it still waits, is not the
        pod nor of its gang, and comes before it; else None (the pod is tried)."""
        qp = cycle.qp
        head = self.heads.get(queue)
        if head is None:
            return None
        uid = head.pod.uid
        if not self._waiting(uid):
            del self.heads[queue]  # it left (its leaving released the pods parked behind it)
            return None
        if qp is None or head is qp or uid == qp.pod.uid:
            return None
        if self.tenancy.tenant_of(head.pod).queue != queue:  # it moved to another queue: it blocks no more
            del self.heads[queue]
            self.queue.release(uid)
            return None
        gang = self.gangs.gang_of(qp.pod)
        if gang is not None and uid in gang.members:
            return None
        return head if self._order(head) < self._order(qp, cycle.key()) else None

    def tried(self, qp: QueuedPod, queue: str, *, blocks: bool = True) -> None:
        """After an attempt: a pod that still waits becomes its queue's head if it comes first, unless it
        failed on its own error (`blocks` False: invalid as written, an unknown queue, a broken gang),
        which no change of the cluster mends: it must not block its queue."""
        uid = qp.pod.uid
        if not blocks or not self._waiting(uid):
            if (head := self.heads.get(queue)) is not None and head.pod.uid == uid:
                del self.heads[queue]
                self.queue.release(uid)  # placed (its binding may still run), or it blocks no more
            return
        head = self.heads.get(queue)
        if (
            head is None
            or not self._waiting(head.pod.uid)
            or self._order(qp) < self._order(head)
        ):
            self.heads[queue] = qp

    def forget(self) -> None:
        """A reload may change which queues are strict: heads are found again by the next attempts."""
        self.heads.clear()

    def _waiting(self, uid: str) -> bool:
        """Whether the pod still waits: in the queue (waiting or being tried), not placed."""
        return uid in self.queue and not self.cache.is_assumed(uid)

    def _order(self, qp: QueuedPod, key: tuple[Any, ...] | None = None) -> tuple[Any, ...]:
        """The queue's order: the policy's key (`key`, when the attempt's CycleState holds it), then
        arrival (as activeQ breaks ties)."""
        return (*(key if key is not None else self.sort_key(qp)), qp.initial_attempt, qp.seq, qp.pod.uid)
