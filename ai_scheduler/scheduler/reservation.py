"""Reservation against starvation, with backfill.

When the highest-priority waiting pod or gang does not fit, room is held for it
where it will fit soonest: from each node's free room now and the expected end
of every pod running there (its start plus the upper value of its run time from
the run-time hook, `runtimes.RunTimes`: by default the pod's own
`ai-scheduler.io/estimated-runtime`), the scheduler finds the earliest time by
which enough nodes can take all of its (still needed) pods, and holds that room
until it is placed.

What a reservation holds, and when:

- Only what it needs. It takes the slots (room for one of its pods) that free
  up soonest, one per pod still needed, so only the nodes they are on; and on
  each of those nodes only the room for its own pods there: the node's free
  room now plus what the running pods it waits for give back, less its pods.
  A pod that fits in the rest of a reserved node (or on any node it does not
  need) is never refused for it; a gang's needed members are checked together.
- A running pod with no known run time (no estimate, no prediction) is not
  assumed to end at any particular time: when the unit can only fit once such a
  pod ends, the reservation's due time is unknown. Holding room for an unknown
  time keeps GPUs idle for as long, so such a reservation is made only once the
  unit has waited `scheduling.reservationMinWaitSeconds` (from its pods'
  creation; 300 s by default): until then, pods behind it use the room.
  A reservation whose due time is known is made at once.

Pods of lower priority may use the room a reservation needs only if backfill is
on (`scheduling.backfill`) and the upper value of their own run time ends
before the reservation is due, so that they cannot delay it; nothing ends
before an unknown due time. With backfill off, nobody else uses that room.
One reservation is held at a time, for the best waiting unit; a better one
takes it over.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PODS, PodRecord
from ai_scheduler.log import JsonLogger, parse_time
from ai_scheduler.scheduler.runtimes import AnnotatedRunTimes, RunTimes

UNKNOWN = math.inf  # the end of a pod with no known run time, and the due time of a fit that waits for one
DEFAULT_RUNTIMES: RunTimes = AnnotatedRunTimes()


def waiting_since(pods: Iterable[PodRecord]) -> float | None:
    """When a unit started waiting (wall time): the earliest creation of its pods; None if unreadable."""
    times = [t for t in (parse_time(pod.creation) for pod in pods if pod.creation) if t is not None]
    return min(times, default=None)


def expected_end(pod: PodRecord, now: float, runtimes: RunTimes = DEFAULT_RUNTIMES) -> float:
    """When a running pod should finish: its start plus the upper value of its run time (a reservation
    should not be late); UNKNOWN when no run time is known; now when it is overdue."""
    run = runtimes.estimate(pod)
    if run is None:
        return UNKNOWN
    started = parse_time(pod.started) if pod.started else None
    start = started if started is not None else now
    return max(start + run.upper, now)


@dataclass(slots=True)
class Fit:
    """Where and by when `needed` copies of a request fit."""

    due: float  # UNKNOWN: only once pods of unknown end have ended (or never, when rows is empty)
    rows: list[int]  # the rows used, sorted
    copies: dict[int, int]  # row -> copies placed there
    counted: dict[int, tuple[str, ...]]  # row -> uids of the running pods whose end the fit waits for


def earliest_fit(
    cache: SchedulerCache,
    rows: np.ndarray,
    request: dict[str, int],
    needed: int,
    now: float,
    runtimes: RunTimes = DEFAULT_RUNTIMES,
) -> Fit:
    """The earliest time by which `needed` copies of `request` fit on `rows`, and the room used."""
    need = {**request, PODS: 1}
    cols = {r: cache.column(r) for r in need}
    if any(c < 0 for c in cols.values()):
        return Fit(math.inf, [], {}, {})
    # (time, row, n): one more copy fits on row at time, once the row's first n releases are in.
    slots: list[tuple[float, int, int]] = []
    released: dict[int, list[str]] = {}
    for row in rows.tolist():
        node = cache.row_names[row]
        free = {
            r: int(cache.allocatable[row, c] - cache.requested[row, c] - cache.nominated[row, c])
            for r, c in cols.items()
        }
        releases: list[tuple[float, str, dict[str, int]]] = []
        for uid in cache.pods_on(node):
            state = cache.pod_state(uid)
            if state is not None and state.node == node:
                amounts = {r: (1 if r == PODS else state.record.requests.get(r, 0)) for r in need}
                releases.append((expected_end(state.record, now, runtimes), uid, amounts))
        releases.sort(key=lambda item: item[0])
        released[row] = [uid for _, uid, _ in releases]
        fitted = 0
        timeline: list[tuple[float, str, dict[str, int]]] = [(now, "", {}), *releases]
        for index, (moment, _uid, amounts) in enumerate(timeline):
            for r, amount in amounts.items():
                free[r] += amount
            copies = min(free[r] // need[r] for r in need if need[r]) if any(need.values()) else 0
            while fitted < copies and fitted < needed:
                slots.append((moment, row, index))
                fitted += 1
            if fitted >= needed:
                break
    if len(slots) < needed:
        return Fit(math.inf, [], {}, {})
    chosen = heapq.nsmallest(needed, slots)
    copies_on: dict[int, int] = {}
    waits_for: dict[int, int] = {}
    for _moment, row, index in chosen:
        copies_on[row] = copies_on.get(row, 0) + 1
        waits_for[row] = max(waits_for.get(row, 0), index)
    counted = {row: tuple(released[row][:index]) for row, index in waits_for.items()}
    return Fit(chosen[-1][0], sorted(copies_on), copies_on, counted)


@dataclass(slots=True)
class Reservation:
    holder: str  # "ns/pod" or "gang ns/name"
    uids: frozenset[str]  # the pods it is for
    key: tuple[Any, ...]  # their place in the queue (lower is better)
    rows: list[int]
    nodes: list[str]
    due: float  # wall time by which the nodes should have room; UNKNOWN: when pods of unknown end end
    mask: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=bool))
    need: dict[str, int] = field(default_factory=dict)  # one copy's request (with the pod slot)
    copies: dict[int, int] = field(default_factory=dict)  # row -> copies it needs there
    counted: dict[int, tuple[str, ...]] = field(default_factory=dict)  # row -> running pods it waits for


class Reserver:
    def __init__(
        self,
        cache: SchedulerCache,
        logger: JsonLogger,
        *,
        backfill: bool,
        min_wait: float = 300.0,
        runtimes: RunTimes = DEFAULT_RUNTIMES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.log = logger
        self.backfill = backfill
        self.min_wait = min_wait  # how long a unit waits before room is held for it for an unknown time
        self.runtimes = runtimes
        self._clock = clock
        self.current: Reservation | None = None

    def now(self) -> float:
        """The clock reservations are due by (wall time in the daemon, simulated time in the simulator)."""
        return self._clock()

    def consider(
        self,
        holder: str,
        uids: frozenset[str],
        key: tuple[Any, ...],
        pod: PodRecord,
        request: dict[str, int],
        needed: int,
        candidate_rows: np.ndarray,
        since: float | None = None,
    ) -> None:
        """A unit that did not fit (waiting since `since`, wall time; default: `pod`'s creation): reserve
        for it if it is the best waiting one and the reservation is worth its cost."""
        current = self.current
        if current is not None and current.holder != holder and current.key <= key:
            return
        now = self._clock()
        fit = earliest_fit(self.cache, candidate_rows, request, needed, now, self.runtimes)
        if not fit.rows:
            return
        if fit.due == UNKNOWN:
            since = since if since is not None else waiting_since([pod])
            waited = now - since if since is not None else 0.0
            if waited < self.min_wait:
                # Room held for an unknown time keeps it idle as long: only for a unit that waited long.
                if current is not None and current.holder == holder:
                    self._release("its due time is unknown and it has not waited long enough")
                return
        rows = fit.rows
        mask = np.zeros(self.cache.rows, dtype=bool)
        mask[rows] = True
        nodes = [self.cache.row_names[row] for row in rows]
        changed = current is None or current.holder != holder or current.nodes != nodes
        self.current = Reservation(
            holder, uids, key, rows, nodes, fit.due, mask, {**request, PODS: 1}, fit.copies, fit.counted
        )
        if changed:
            self.log.info(
                "reservation",
                holder=holder,
                nodes=nodes,
                pods=needed,
                due_in_s=round(fit.due - now, 1) if math.isfinite(fit.due) else None,
                backfill=self.backfill,
            )

    def blocked_rows(self, pod: PodRecord, key: tuple[Any, ...], copies: int = 1) -> np.ndarray | None:
        """Rows this pod (`copies` of it: a gang's members) must keep off, as a mask; None when the
        reservation keeps it off nowhere."""
        current = self.current
        if current is None or pod.uid in current.uids or key < current.key:
            return None
        if self.backfill and math.isfinite(current.due):
            run = self.runtimes.estimate(pod)
            if run is not None and self._clock() + run.upper <= current.due:
                return None  # backfill: it will be gone before the reservation is due
        mask = np.zeros(self.cache.rows, dtype=bool)
        for row, node in zip(current.rows, current.nodes, strict=True):
            if row < self.cache.rows and self.cache.row_names[row] == node:
                mask[row] = not self._spare_for(current, row, node, pod, copies)
        return mask if mask.any() else None

    def _spare_for(self, current: Reservation, row: int, node: str, pod: PodRecord, copies: int) -> bool:
        """Whether `copies` of `pod` on `row` leave the reservation its room there by the time it is due:
        the free room now, plus what the running pods it waits for give back, less its own copies."""
        cache = self.cache
        back = dict.fromkeys(current.need, 0)
        for uid in current.counted.get(row, ()):
            state = cache.pod_state(uid)
            if state is not None and state.node == node:
                for r in back:
                    back[r] += 1 if r == PODS else state.record.requests.get(r, 0)
        for r, amount in current.need.items():
            want = copies * (1 if r == PODS else pod.requests.get(r, 0))
            if not want:
                continue
            c = cache.column(r)
            free = int(cache.allocatable[row, c] - cache.requested[row, c] - cache.nominated[row, c])
            if free + back[r] - current.copies.get(row, 0) * amount < want:
                return False
        return True

    def placed(self, uid: str) -> None:
        """A pod of the holder was placed, or went away: the reservation has done its job."""
        current = self.current
        if current is not None and uid in current.uids:
            self._release("placed or gone")

    def _release(self, reason: str) -> None:
        current = self.current
        if current is not None:
            self.log.info("reservation.released", holder=current.holder, nodes=current.nodes, reason=reason)
            self.current = None
