"""The scheduling core's outbox: the intents it hands a driver instead of calling the API itself.

The core (core.py: the queue, the cache, the policies, one cycle, gangs, preemption and starvation
reservations) decides; it never talks to Kubernetes. What it wants done leaves through three
protocols, which the two drivers implement each in its own way:

    intent                          daemon (API calls)                 trace simulator (its own state)
    ------------------------------  ---------------------------------  -------------------------------
    Bindings.reserve / unreserve    cache assume (+ volumes) / forget  cache assume / forget
    Bindings.submit                 PreBind + POST binding, async      the pod is bound at once
    Reports.unschedulable / error   PodScheduled=False + event         the reason kept on the pod
    Reports.event / scheduled       Events (aggregated)                counted
    Evictions.evict                 nominate, DisruptionTarget, DELETE victims leave, their jobs requeued

Each contract:

- `Bindings.reserve(pod, decision)` runs in the cycle that chose the node (kube's Reserve): the cache
  counts the pod there before the next cycle looks. `unreserve` undoes it when the cycle gives up
  (a gang that did not fit whole). `submit(qp, pod, decision)` hands the reserved placement over; the
  implementation reports success or failure through `on_success(pod, node)` / `on_failure(pod, result)`
  and removes the pod from the queue (`queue.done`) or requeues it. `handed` names the pods submitted
  since the current cycle began (CycleGuard: their outcome is the binding's to report). `in_flight` and
  `wait_for_room()` let the loop hold while too many bindings are outstanding.
- `Reports` tells users why (conditions and events); the core never reads back what it reported.
- `Evictions.evict(pod, plan)` carries out a preemption the core has decided and logged (the victims
  and the nominated node are already in the cache's books); `drain` waits for evictions under way.

The clock is the other input the core does not own: every component that reads time takes a
`clock` (monotonic seconds in the daemon, simulated seconds in the simulator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.queue import QueuedPod

if TYPE_CHECKING:
    from ai_scheduler.scheduler.framework.runtime import Decision
    from ai_scheduler.scheduler.victims import Plan

Clock = Callable[[], float]


class Bindings(Protocol):
    handed: set[str]
    on_success: Callable[[PodRecord, str], None] | None
    on_failure: Callable[[PodRecord, Any], None] | None  # the driver's failure, with a `message`

    @property
    def in_flight(self) -> int: ...

    async def wait_for_room(self) -> None: ...

    def reserve(self, pod: PodRecord, decision: Decision) -> None: ...

    def unreserve(self, pod: PodRecord) -> None: ...

    def submit(self, qp: QueuedPod, pod: PodRecord, decision: Decision) -> None: ...


class Reports(Protocol):
    def scheduled(self, pod: PodRecord, node: str) -> None: ...

    def unschedulable(self, pod: PodRecord, message: str) -> None: ...

    def error(self, pod: PodRecord, message: str) -> None: ...

    def event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, *, component: str = ""
    ) -> None: ...

    def forget(self, uid: str) -> None: ...


class Evictions(Protocol):
    def evict(self, pod: PodRecord, plan: Plan) -> None: ...

    async def drain(self, timeout: float) -> None: ...


@dataclass(slots=True)
class Outbox:
    """What a driver gives the core: where its bindings, reports and evictions go."""

    bindings: Bindings
    reports: Reports
    evictions: Evictions
