"""Logical domains in the daemon: the Domain informer, and each Domain's status, the resource view of it.

Every replica reads the Domains into the core's table (cache/domains.py; scheduler/domains.py decides
what they keep off). A change of a Domain moves the waiting pods to be tried again (its nodes, or what
it keeps, changed). The leader writes each Domain's status every `FLUSH_SECONDS` where it changed:

- `nodes`: the names of the nodes it holds now (nodes join and leave as their labels change);
- `capacity` and `used`: GPUs (`nvidia.com/gpu`), cpu and memory of those nodes, allocatable and requested;
- `waiting`: the pods waiting for it and the GPUs they ask: those that require it (label
  `ai-scheduler.io/domain`), and, for a kept domain, those it is kept for;
- `error`: why a Domain cannot be read (it then holds no node and keeps nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np

from ai_scheduler.api.kube import MERGE_PATCH, KubeClient
from ai_scheduler.cache.domains import DOMAIN_LABEL
from ai_scheduler.daemon.informer import Informer
from ai_scheduler.log import JsonLogger
from ai_scheduler.quantity import format_units
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.domains import pod_gpus
from ai_scheduler.scheduler.metrics import Metrics

DOMAINS = "ai-scheduler.io/v1alpha1/domains"
FLUSH_SECONDS = 2.0  # each flush reads the waiting pods once
RESOURCES = ("nvidia.com/gpu", "cpu", "memory")


class DomainObjects:
    def __init__(self, client: KubeClient, core: SchedulerCore, logger: JsonLogger, metrics: Metrics) -> None:
        self.client = client
        self.core = core
        self.log = logger
        self.metrics = metrics
        self._written: dict[str, dict[str, Any]] = {}

    def informers(self, build: Callable[..., Informer[Any]]) -> dict[str, Informer[Any]]:
        return {DOMAINS: build(DOMAINS, self.on_event, self.replace, optional=True)}

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if self.core.domains.table.apply(kind, obj):
            self._changed()

    def replace(self, objects: list[Any]) -> None:
        if self.core.domains.table.replace(objects):
            self._changed()

    def _changed(self) -> None:
        table = self.core.domains.table
        described = {name: {"kept_for": d.kept_for() or None, "error": d.error or None}
                     for name, d in table.domains.items()}
        self.log.info("domains.applied", domains=described)
        self.core.queue.move_all("DomainChange")

    def waiting(self) -> list[tuple[str, int, int, int]]:
        """Each waiting pod once, as the Domains read it: (required domain, its GPUs, its unit's GPUs in
        all, its priority)."""
        waiting = []
        for qp in self.core.queue.pending():
            pod = qp.pod
            gang = self.core.gangs.gang_of(pod)
            gpus = pod_gpus(pod)
            unit = gpus * (gang.min_member if gang is not None else 1)
            waiting.append((pod.labels.get(DOMAIN_LABEL, ""), gpus, unit, pod.priority))
        return waiting

    def status(self, name: str, waiting: list[tuple[str, int, int, int]]) -> dict[str, Any]:
        """A Domain's status as the cache and the queue (`waiting`) have it now."""
        table, cache = self.core.domains.table, self.core.cache
        domain = table.domains[name]
        mask = table.mask(name)
        rows = np.flatnonzero(mask) if mask is not None else np.zeros(0, dtype=np.int64)
        capacity, used = {}, {}
        for resource in RESOURCES:
            column = cache.column(resource)  # -1: no node has it
            total = int(cache.allocatable[rows, column].sum()) if column >= 0 else 0
            taken = int(cache.requested[rows, column].sum()) if column >= 0 else 0
            capacity[resource], used[resource] = format_units(resource, total), format_units(resource, taken)
        wanted = [gpus for required, gpus, unit, priority in waiting
                  if required == name or (domain.kept and domain.eligible(unit, priority))]
        pods, gpus = len(wanted), sum(wanted)
        return {
            "nodes": sorted(cache.row_names[row] for row in rows),
            "capacity": capacity, "used": used,
            "waiting": {"pods": pods, "nvidia.com/gpu": gpus},
            "keptFor": domain.kept_for() or None,
            "error": domain.error or None,
        }

    async def run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            await self.flush()

    async def flush(self) -> None:
        names = list(self.core.domains.table.domains)
        waiting = self.waiting() if names else []  # the waiting pods read once for every Domain
        for name in names:
            status = self.status(name, waiting)
            if self._written.get(name) == status:
                continue
            path = f"/apis/ai-scheduler.io/v1alpha1/domains/{name}/status"
            result = await self.client.request("PATCH", path, body={"status": status},
                                               content_type=MERGE_PATCH)
            if result.ok:
                self._written[name] = status
            elif result.status != 404:
                self.metrics.api_errors.labels("domain_status", str(result.status)).inc()
                self.log.warning("domain.status_failed", domain=name, code=result.status,
                                 error=result.message)
