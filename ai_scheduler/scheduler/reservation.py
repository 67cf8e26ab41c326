"""Reservation against starvation, with backfill.

When the highest-priority waiting pod or gang does not fit, it is given the
nodes where it will fit soonest: from each node's free room now and the
estimated end of every pod running there (`ai-scheduler.io/estimated-runtime`
from its start; a pod without an estimate counts as running long), the
scheduler finds the earliest time by which enough nodes can take all of its
(still needed) pods, and reserves those nodes until it is placed.

Pods of lower priority may use a reserved node only if backfill is on and
their own estimate ends before the reservation is due, so that they cannot
delay it; with backfill off, nobody else uses reserved nodes. One reservation
is held at a time, for the best waiting unit; a better one takes it over.
"""

from __future__ import annotations

import calendar
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PODS, PodRecord
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.priority import ESTIMATE_ANNOTATION, parse_duration

LONG_RUNNING = 7 * 24 * 3600.0  # what "no estimate" means when computing when room frees up


def _epoch(text: str) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(text.rstrip("Z").split(".")[0], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def expected_end(pod: PodRecord, now: float) -> float:
    """When a running pod should finish: its start plus its estimate; long when it has none."""
    estimate = parse_duration(pod.annotations.get(ESTIMATE_ANNOTATION))
    started = _epoch(pod.started) if pod.started else None
    start = started if started is not None else now
    return max(start + (estimate if estimate is not None else LONG_RUNNING), now)


@dataclass(slots=True)
class Reservation:
    holder: str  # "ns/pod" or "gang ns/name"
    uids: frozenset[str]  # the pods it is for
    key: tuple[Any, ...]  # their place in the queue (lower is better)
    rows: list[int]
    nodes: list[str]
    due: float  # wall time by which the nodes should have room
    mask: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=bool))


def earliest_fit(
    cache: SchedulerCache, rows: np.ndarray, request: dict[str, int], needed: int, now: float
) -> tuple[float, list[int]]:
    """The earliest time by which `needed` copies of `request` fit on `rows`, and the rows used."""
    need = {**request, PODS: 1}
    cols = {r: cache.column(r) for r in need}
    if any(c < 0 for c in cols.values()):
        return math.inf, []
    slots: list[tuple[float, int]] = []  # (time, row): one more copy fits on row at time
    for row in rows.tolist():
        node = cache.row_names[row]
        free = {
            r: int(cache.allocatable[row, c] - cache.requested[row, c] - cache.nominated[row, c])
            for r, c in cols.items()
        }
        releases = []
        for uid in cache.pods_on(node):
            state = cache.pod_state(uid)
            if state is not None and state.node == node:
                amounts = {r: (1 if r == PODS else state.record.requests.get(r, 0)) for r in need}
                releases.append((expected_end(state.record, now), amounts))
        releases.sort(key=lambda item: item[0])
        fitted = 0
        timeline = [(now, {}), *releases]
        for moment, amounts in timeline:
            for r, amount in amounts.items():
                free[r] += amount
            copies = min(free[r] // need[r] for r in need if need[r]) if any(need.values()) else 0
            while fitted < copies and fitted < needed:
                slots.append((moment, row))
                fitted += 1
            if fitted >= needed:
                break
    if len(slots) < needed:
        return math.inf, []
    chosen = heapq.nsmallest(needed, slots)
    return chosen[-1][0], sorted({row for _, row in chosen})


class Reserver:
    def __init__(
        self,
        cache: SchedulerCache,
        logger: JsonLogger,
        *,
        backfill: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.log = logger
        self.backfill = backfill
        self._clock = clock
        self.current: Reservation | None = None

    def consider(
        self,
        holder: str,
        uids: frozenset[str],
        key: tuple[Any, ...],
        pod: PodRecord,
        request: dict[str, int],
        needed: int,
        candidate_rows: np.ndarray,
    ) -> None:
        """A unit that did not fit: reserve for it if it is the best waiting one."""
        current = self.current
        if current is not None and current.holder != holder and current.key <= key:
            return
        now = self._clock()
        due, rows = earliest_fit(self.cache, candidate_rows, request, needed, now)
        if not rows:
            return
        mask = np.zeros(self.cache.rows, dtype=bool)
        mask[rows] = True
        nodes = [self.cache.row_names[row] for row in rows]
        changed = current is None or current.holder != holder or current.nodes != nodes
        self.current = Reservation(holder, uids, key, rows, nodes, due, mask)
        if changed:
            self.log.info(
                "reservation",
                holder=holder,
                nodes=nodes,
                pods=needed,
                due_in_s=round(due - now, 1) if math.isfinite(due) else None,
                backfill=self.backfill,
            )

    def blocked_rows(self, pod: PodRecord, key: tuple[Any, ...]) -> np.ndarray | None:
        """Rows this pod must keep off (None: no reservation applies to it)."""
        current = self.current
        if current is None or pod.uid in current.uids or key < current.key:
            return None
        if self.backfill:
            estimate = parse_duration(pod.annotations.get(ESTIMATE_ANNOTATION))
            if estimate is not None and self._clock() + estimate <= current.due:
                return None  # backfill: it will be gone before the reservation is due
        mask = current.mask
        if mask.shape[0] < self.cache.rows:
            mask = np.concatenate([mask, np.zeros(self.cache.rows - mask.shape[0], dtype=bool)])
        return mask

    def placed(self, uid: str) -> None:
        """A pod of the holder was placed, or went away: the reservation has done its job."""
        current = self.current
        if current is not None and uid in current.uids:
            self.log.info("reservation.released", holder=current.holder, nodes=current.nodes)
            self.current = None
