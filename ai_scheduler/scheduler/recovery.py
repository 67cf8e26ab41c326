"""A scheduling cycle that raises ends as a reason and a retry for every pod it held, never as silence.

A cycle is synchronous code over the cache, so an exception (a bug, a value
nobody foresaw) can stop it anywhere: after a gang's siblings were taken out of
the queue along with the popped pod, after some of them were assumed on nodes,
after some bindings were handed to the binder. Left like that, the pods it held
would stay "in flight" for good: no condition, no event, no retry, and their
assumptions would hold room that nothing uses.

kube-scheduler answers a failed cycle by un-reserving what the cycle reserved
and telling the pod before backing it off (handleSchedulingFailure:
PodScheduled=False with reason SchedulerError, a FailedScheduling event).
`CycleGuard.run` does the same for every pod the cycle held: the popped pod and
the gang members it took (`GangScheduler.holding`):

- a pod whose binding was already handed to the binder is left to it: the
  binding reports its own outcome (the binder notes the hand-overs: `Bindings.handed`);
- an assumption the cycle made and did not hand over is forgotten;
- every other pod goes back to the queue with backoff, and is told why;

and the error is logged with its traceback and counted as an attempt with
result `error` (`scheduler_schedule_attempts_total`, with the time since the
cycle began). The loop then goes on with the next pod.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.log import JsonLogger
from ai_scheduler.messages import MAX_ECHO, truncate
from ai_scheduler.queue import QueuedPod, SchedulingQueue
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.scheduler.metrics import ERROR, Metrics
from ai_scheduler.scheduler.outbox import Bindings, Reports

TRACEBACK_FRAMES = 12  # innermost frames of a cycle's exception kept in the log


def failure_message(exc: BaseException) -> str:
    """What the pod is told: the error, cut short (it may quote anything), as kube-scheduler tells it."""
    return f"scheduling failed: {type(exc).__name__}: {truncate(str(exc), MAX_ECHO)}; retrying with backoff"


class CycleGuard:
    def __init__(
        self,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        binder: Bindings,
        gangs: GangScheduler,
        feedback: Reports,
        metrics: Metrics,
        logger: JsonLogger,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.binder = binder
        self.gangs = gangs
        self.feedback = feedback
        self.metrics = metrics
        self.log = logger

    def run(self, qp: QueuedPod, cycle: Callable[[QueuedPod], None]) -> None:
        """Run one cycle for the popped pod; whatever it raises is recovered from here."""
        self.binder.handed.clear()
        started = time.perf_counter()
        try:
            cycle(qp)
        except Exception as exc:
            self.recover(qp, exc, started)

    def recover(self, qp: QueuedPod, exc: Exception, started: float) -> None:
        held = [qp, *(member for member in self.gangs.holding if member is not qp)]
        self.gangs.holding = []
        message = failure_message(exc)
        retried: list[str] = []
        released: list[str] = []
        for member in held:
            pod = member.pod
            if pod.uid in self.binder.handed:
                continue  # its binding is on the way and reports its own outcome
            # Each step on its own: whatever one of them raises, the next ones and the other pods still run.
            try:
                if self.cache.is_assumed(pod.uid):  # an assumption of this cycle that no binding will use
                    self.binder.unreserve(pod)
                    released.append(pod.key)
            except Exception as nested:
                self._recovery_failed(pod, "release", nested)
            try:
                if self.queue.requeue(member, unschedulable=False, reason=message):
                    retried.append(pod.key)
                    self.metrics.attempt(ERROR, pod.scheduler_name, time.perf_counter() - started)
                    self.feedback.error(pod, message)
            except Exception as nested:
                self._recovery_failed(pod, "retry", nested)
        # No pod was judged against what this cycle held, as it never left the cycle: nothing to move.
        self.log.error(
            "schedule.error",
            pod=qp.pod.key,
            error=f"{type(exc).__name__}: {exc}",
            retried=retried,
            released=released,
            traceback="".join(traceback.format_exception(exc, limit=-TRACEBACK_FRAMES)),
        )

    def _recovery_failed(self, pod: PodRecord, step: str, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self.log.error("schedule.recovery_failed", pod=pod.key, step=step, error=error)
