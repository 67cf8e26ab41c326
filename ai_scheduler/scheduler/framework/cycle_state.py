"""One attempt's derived data: its CycleState (kube-scheduler's framework.CycleState).

kube-scheduler makes a CycleState per scheduling attempt: PreFilter writes there what Filter and Score
then read, so that nothing of the attempt is worked out twice. Ours is made by the scheduling cycle
(schedule_one.py) when it pops a pod and handed to everything of the attempt that reads the pod's
derived data: the StrictFIFO check, quota admission, PostFilter (preemption) and the decision log.
It holds:

- the pod (the cache's record) and its queue entry;
- its tenant and quota amounts, read from the pod's PodInfo (cache/pod_info.py), where they are
  derived once per version of the pod: the attempt looks them up once, when first asked, whoever
  reads them after;
- its key in the queue's order (the priority policy's evaluation), evaluated when first asked and
  then read by every part of the attempt (a starvation reservation's comparisons, a StrictFIFO
  queue's head check);
- the pod without its requests (`resourceless`), which PostFilter and the reservation both filter
  with: made once.

The filter and score plugins keep their own per-pod PreFilter results, as before: they do not read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy, Tenant
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.framework.runtime import resourceless

SortKey = Callable[[QueuedPod], tuple[Any, ...]]


class CycleState:
    """What one attempt of one pod derives, derived once (see the module)."""

    __slots__ = ("_amounts", "_key", "_resourceless", "_sort_key", "_tenancy", "_tenant", "pod", "qp")

    def __init__(
        self, pod: PodRecord, tenancy: Tenancy, qp: QueuedPod | None = None, sort_key: SortKey | None = None
    ) -> None:
        self.pod = pod
        self.qp = qp  # None: a PostFilter run on its own (a test's), with no place in the queue
        self._tenancy = tenancy
        self._sort_key = sort_key
        self._tenant: Tenant | None = None
        self._amounts: Mapping[str, int] | None = None
        self._key: tuple[Any, ...] | None = None
        self._resourceless: PodRecord | None = None

    @property
    def tenant(self) -> Tenant:
        """The pod's tenant (user, group, queue), looked up once for the attempt (a gang's attempt, which
        reads its members' own, never asks)."""
        tenant = self._tenant
        if tenant is None:
            tenant = self._tenant = self._tenancy.tenant_of(self.pod)
        return tenant

    @property
    def amounts(self) -> Mapping[str, int]:
        """What the pod counts against quotas (shared and read-only), looked up once for the attempt."""
        amounts = self._amounts
        if amounts is None:
            amounts = self._amounts = self._tenancy.amounts(self.pod)
        return amounts

    def key(self) -> tuple[Any, ...]:
        """The pod's key in the queue's order, its priority evaluated once for the attempt; () without a
        queue entry."""
        key = self._key
        if key is None:
            qp, sort_key = self.qp, self._sort_key
            key = self._key = sort_key(qp) if qp is not None and sort_key is not None else ()
        return key

    def resourceless(self) -> PodRecord:
        """The pod without its resource requests (runtime.resourceless), made once for the attempt."""
        shadow = self._resourceless
        if shadow is None:
            shadow = self._resourceless = resourceless(self.pod)
        return shadow
