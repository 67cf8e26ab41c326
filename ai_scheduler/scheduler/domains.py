"""Logical domains in the cycle: the nodes a pod or gang must keep off, beside reservations.

Each attempt (a lone pod's in schedule_one.py, a gang's in gang.py) asks `kept_off` which node rows it
may not use, each mask with the reason its message counts them under (as the starvation reservation's
are counted, after the filters):

- a pod (or gang) that requires a domain (label `ai-scheduler.io/domain`) keeps off every node outside
  it: `node(s) outside domain <name>`; a domain that does not exist keeps it off every node;
- a domain kept for large or important work (`spec.keptFor`: at least `minGpus` GPUs in all, for a
  gang its members' sum; or priority at least `minPriority`) keeps everything else off:
  `node(s) kept for gangs of at least 16 GPUs (domain <name>)`. Others may only backfill there: when
  a unit the domain is kept for waits with a reservation on the domain's nodes (reservation.py), a pod
  whose upper run time ends before that reservation is due may use the domain's room (the reservation
  keeps its own room as always). With no such unit waiting, the domain stays free for the next one, so
  that it starts at once and without preemption.

Nothing here loops over nodes per attempt: the masks are the DomainTable's (cache/domains.py), taken
again only when nodes or Domains change.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.domains import DOMAIN_LABEL, DomainTable
from ai_scheduler.cache.gpus import gpu_request
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework.plugins.gpu import DEVICE_PLUGIN_GPU
from ai_scheduler.scheduler.reservation import Reserver
from ai_scheduler.scheduler.runtimes import RunTimes

Kept = list[tuple[np.ndarray, str]]


def pod_gpus(pod: PodRecord) -> int:
    """Whole GPUs a pod asks: the device plugin's, or the managed devices of its annotations."""
    request, _ = gpu_request(pod)
    managed = request.count if request is not None else 0
    return max(pod.requests.get(DEVICE_PLUGIN_GPU, 0), 0) + managed


class KeptDomains:
    def __init__(self, cache: SchedulerCache, reserver: Reserver, runtimes: Callable[[], RunTimes]) -> None:
        self.table = DomainTable(cache)
        self.cache = cache
        self.reserver = reserver
        self.runtimes = runtimes

    def kept_off(self, pod: PodRecord, members: int = 1) -> Kept:
        """The rows `pod` (a gang's member, of `members` alike) keeps off, with their reasons."""
        domains = self.table.domains
        required = pod.labels.get(DOMAIN_LABEL)
        if not domains and not required:
            return []
        kept: Kept = []
        if required:
            mask = self.table.mask(required)
            if mask is None:
                kept.append((np.ones(self.cache.rows, dtype=bool),
                             f"domain {required} (label {DOMAIN_LABEL}) does not exist"))
            else:
                kept.append((~mask, f"node(s) outside domain {required}"))
        gpus = pod_gpus(pod) * members
        for name, domain in domains.items():
            if not domain.kept or domain.eligible(gpus, pod.priority):
                continue
            mask = self.table.mask(name)
            if mask is None or not mask.any() or self._backfills(pod, mask):
                continue
            kept.append((mask, f"node(s) kept for {domain.kept_for()} (domain {name})"))
        return kept

    def _backfills(self, pod: PodRecord, mask: np.ndarray) -> bool:
        """Whether the pod may use a kept domain's room: work the domain is kept for waits there with a
        reservation due at a known time, and the pod's upper run time ends before it."""
        current = self.reserver.current
        if current is None or not math.isfinite(current.due):
            return False
        rows = [row for row in current.rows if row < len(mask)]
        if not rows or not mask[rows].any():
            return False
        run = self.runtimes().estimate(pod)
        return run is not None and self.reserver.now() + run.upper <= current.due  # the reservation's clock
