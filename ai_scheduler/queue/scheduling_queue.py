"""kube-scheduler's scheduling queue (pkg/scheduler/backend/queue) on asyncio.

A pending pod is in exactly one of four states:

- active: ready to be tried, ordered by priority and then, as kube-scheduler's
  Timestamp, by when it was added or last failed (then by arrival), so equal
  priorities are served first come first served and a pod moved back by an
  event goes back to its place, whatever the order the moves came in;
- backoff: failed recently and waits out an exponential backoff so that a pod
  that keeps failing cannot starve the others;
- unschedulable: its last attempt found no node; retrying it before the
  cluster changes would fail the same way, so it waits for `move_all(event)`
  (or, as a safety net, for `unschedulable_flush` seconds);
- in flight: popped and being tried, until `done()` or `requeue()`.

Queueing hints (kube-scheduler's, for the commonest event): a pod requeued
unschedulable with a `hint` (the scheduling cycle gives one only when its failure
had no side effect and nothing but room on some node could change it) is not
retried on a placed pod leaving a node unless `move_freed`'s `fits` says it
may fit on that node. Such a pod is not simply left alone: it keeps the state
the retry that failed would have given it (one more attempt, failed now; a
"virtual" retry, undone if an event at the same instant makes it fit, since
it would then still be in activeQ, i.e. neither its place nor the end of the
drain was popped since), so that its backoff, its timestamp, and every decision
after, are those of a queue that retries every pod on every such event.

A gang's members are tried together (popping one takes the others), so they move together: a member
waits with a `UnitHint` naming its gang, and `move_freed` moves all of the gang's members or none: all
when one of them may fit where room was freed (or any of them still backs off), else each is retried
virtually, its retry pending (`_pending`) while activeQ has not yet popped the place of the member that
the queue without hints would pop first (that pop would take the rest along).

The cycle's equivalence of identical pods (schedule_one.py) reaches into activeQ too: when a pod with a
hint fails where nothing was freed since (a repeat, or the failure it records), the pods with that hint
that an event put back in activeQ would each fail the same when popped. `take_alike` retries them
virtually at once instead, each pending until activeQ pops past the place it had there, so that a room
freed before that (a preemption's victims leaving) undoes the retry as it would for any virtual one.

A StrictFIFO queue's pods behind its head (scheduler/strict_fifo.py) are `park`ed: back in the
unschedulable set without the attempt counted, until the head leaves (`delete`, which `done` calls,
or `release`) moves them back, or `move_all` or the flush does, as for any unschedulable pod; room
freed on a node (`move_freed`) does not, since only the head may take it.

Pods of ours that still carry schedulingGates are not queued at all (nothing
may try them); the queue only counts them (`gate()`), because kube-scheduler
reports them as its `gated` pending pods.

Every entry into activeQ, backoffQ or the unschedulable set is reported to
`on_incoming(queue, event)` with kube-scheduler's event label (what put it
there: `UnschedulablePodAdd`, `ScheduleAttemptFailure`, `BackoffComplete`, the
cluster event of `move_all`, ...), for `scheduler_queue_incoming_pods_total`.

Every method but `pop` is synchronous and O(log n) or better, because watch
handlers call them thousands of times per second. Time passes only through
two timers on the running loop (backoff expiry, unschedulable flush), each
armed for its earliest deadline, so an idle queue costs no CPU.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sortedcontainers import SortedList

from ai_scheduler.cache.records import PodRecord

ACTIVE = "active"
BACKOFF = "backoff"
UNSCHEDULABLE = "unschedulable"
IN_FLIGHT = "in_flight"
GATED = "gated"

# Why a pod entered a sub-queue: kube-scheduler's event labels (pkg/scheduler/framework/events.go).
POD_ADD = "UnschedulablePodAdd"
POD_UPDATE = "UnschedulablePodUpdate"
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
FORCE_ACTIVATE = "ForceActivate"  # a user asked for a retry now (`retry_now`)
STRICT_HEAD_LEFT = "StrictFIFOHeadLeft"  # a StrictFIFO head left: the pods parked behind it (`park`)
PARKED = "parked behind a StrictFIFO head"  # the hint of a parked pod: `move_freed` leaves it be

# PodRecord fields that come from the pod's status (or bookkeeping): an update
# that changes only these cannot make an unschedulable pod fit, and the
# scheduler's own PodScheduled=False patch must not retry the pod at once
# (kube-scheduler's isPodUpdated strips status and resourceVersion the same way).
_STATUS_FIELDS = frozenset({"resource_version", "phase", "scheduled_condition", "started"})
_SPEC_FIELDS = tuple(name for name in PodRecord.__slots__ if name not in _STATUS_FIELDS)


class QueueClosed(Exception):
    """Raised by pop() once the queue is closed, so that scheduling loops end cleanly."""


@dataclass(slots=True)
class QueuedPod:
    pod: PodRecord
    attempts: int = 0  # incremented by pop()
    initial_attempt: float = 0.0  # clock() when first added: start of e2e scheduling latency
    enqueued: float = 0.0  # clock() when last put into activeQ
    seq: int = 0  # arrival order: breaks ties between equal keys and timestamps
    # kube-scheduler's QueuedPodInfo.Timestamp: clock() when added, and again each time an attempt fails;
    # activeQ orders equal keys by it, so that a pod moved back by an event goes back to its place.
    timestamp: float = 0.0
    last_failure: float = 0.0  # clock() at the last requeue
    reason: str = ""  # last unschedulable reason (for logs / status)
    popped_move_cycle: int = 0
    backoff_base: int = 0  # attempts when a user last asked for a retry now: backoff counts from here
    not_before: float = 0.0  # clock() before which its backoff does not end (its gang backs off: `requeue`)
    # Unschedulable with a queueing hint: what makes pods alike for `move_freed` (None: moved by every event).
    hint: Any = None
    # The last virtual retry: (its instant, the pops of that instant before it, attempts and last_failure
    # before it, and for a unit's member the activeQ key of the member that would be popped first, else
    # None: the pod's own); pending while the pod would still wait in activeQ for that retry (`_pending`).
    virtual: tuple[float, int, int, float, tuple[Any, ...] | None] | None = None


@dataclass(frozen=True, slots=True)
class UnitHint:
    """The hint of a pod tried only together with others (a gang's member): `unit` names them (the gang),
    `hint` is the member's own (what `move_freed`'s `fits` is asked about), and `size` how many members
    were put back with it. `move_freed` moves a unit whole or not at all, and only a unit whose `size`
    members all wait unschedulable with it is retried virtually (see the module's docstring)."""

    unit: str
    hint: Any
    size: int


def _spec_changed(old: PodRecord, new: PodRecord) -> bool:
    """Whether an update may change where the pod fits (anything but status fields)."""
    for name in _SPEC_FIELDS:
        if name == "tolerations":
            if [t.identity() for t in old.tolerations] != [t.identity() for t in new.tolerations]:
                return True
        elif getattr(old, name) != getattr(new, name):
            return True
    return False


def _fits_nowhere(pod: PodRecord) -> bool:
    """`move_freed`'s verdict where no room was freed."""
    return False


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Timer:
    """One loop timer armed for the earliest of a set of deadlines (on the queue's clock).

    Re-armed only when a new deadline is earlier than the armed one; a timer
    that fires early (its pod left meanwhile) just re-arms for the next deadline.
    """

    __slots__ = ("_callback", "_clock", "_deadline", "_handle")

    def __init__(self, clock: Callable[[], float], callback: Callable[[], None]) -> None:
        self._clock = clock
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def arm(self, deadline: float) -> None:
        if self._handle is not None and not self._handle.cancelled() and self._deadline <= deadline:
            return
        loop = _running_loop()
        if loop is None:  # built or fed outside a loop: pop() arms it once inside one
            return
        self.cancel()
        self._deadline = deadline
        delay = max(0.0, deadline - self._clock())
        self._handle = loop.call_at(loop.time() + delay, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._callback()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class SchedulingQueue:
    """activeQ + backoffQ + unschedulable set, with kube-scheduler's move-request-cycle rule."""

    def __init__(
        self,
        *,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        unschedulable_flush: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        queue_name_of: Callable[[PodRecord], str] = lambda pod: "default",
        sort_key: Callable[[QueuedPod], tuple[Any, ...]] = lambda qp: (-qp.pod.priority,),
        on_incoming: Callable[[str, str], None] | None = None,
    ) -> None:
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._unschedulable_flush = unschedulable_flush
        self._clock = clock
        self._queue_name_of = queue_name_of
        # Order of activeQ before arrival: by default spec.priority; a priority policy supplies its own.
        self._sort_key = sort_key
        self._on_incoming = on_incoming

        self._entries: dict[str, QueuedPod] = {}
        self._state: dict[str, str] = {}
        self._queue_name: dict[str, str] = {}
        self._by_queue: dict[tuple[str, str], int] = {}
        # activeQ and backoffQ hold sort keys; the dicts give each uid's key for O(log n) removal.
        self._active: SortedList[tuple[Any, ...]] = SortedList()  # (*sort_key, timestamp, seq, uid)
        self._active_key: dict[str, tuple[Any, ...]] = {}
        self._backoff: SortedList[tuple[float, int, str]] = SortedList()  # (deadline, seq, uid)
        self._backoff_key: dict[str, tuple[float, int, str]] = {}
        # Insertion order is entry order (entry time = last_failure), so the
        # oldest unschedulable pod is always first: the flush scans only what is due.
        self._unschedulable: dict[str, QueuedPod] = {}
        self._in_flight = 0
        self._gated: set[str] = set()  # uids of our pods waiting for their schedulingGates to go
        self._parked: dict[str, set[str]] = {}  # per StrictFIFO head: the uids parked behind it (`park`)
        # Active pods that an event put back after a failure with a single pod's hint, by that hint, in the
        # order they came (`take_alike`).
        self._active_hinted: dict[Any, dict[str, None]] = {}

        self._seq = 0
        # The active keys popped at the current instant of the clock, in order (None: activeQ was found
        # empty): whether a pod retried virtually then would have been popped already (`_pending`).
        self._instant = -1.0
        self._instant_pops: list[tuple[Any, ...] | None] = []
        self._instant_end = -1  # where in `_instant_pops` activeQ was last found empty (-1: not yet)
        self._move_cycle = 0
        self._closed = False
        self._nonempty = asyncio.Event()
        self._backoff_timer = _Timer(clock, self._on_backoff_timer)
        self._flush_timer = _Timer(clock, self._on_flush_timer)

    # ---- public API ---------------------------------------------------------------------------

    def add(self, pod: PodRecord) -> None:
        """A new pending pod goes to activeQ; a known uid is an update (watch replays, relists)."""
        if pod.uid in self._entries:
            self.update(pod)
            return
        ungated = pod.uid in self._gated
        if ungated:
            self._gated.discard(pod.uid)
        now = self._clock()
        self._seq += 1
        qp = QueuedPod(pod=pod, initial_attempt=now, seq=self._seq, timestamp=now)
        self._entries[pod.uid] = qp
        self._queue_name[pod.uid] = self._queue_name_of(pod)
        self._push_active(qp, now, POD_UPDATE if ungated else POD_ADD)

    def gate(self, uid: str) -> None:
        """The pod has schedulingGates: out of every queue, counted as gated until `add()` or `delete()`."""
        self.delete(uid)
        if uid not in self._gated:
            self._gated.add(uid)
            self._incoming(UNSCHEDULABLE, POD_ADD)  # where kube-scheduler keeps gated pods

    def is_gated(self, uid: str) -> bool:
        return uid in self._gated

    def retry_now(self, uid: str) -> bool:
        """A user asked to retry the pod now (`ai-scheduler status requeue`): its backoff starts over (the
        attempts so far stay counted, for the metrics, but no longer lengthen it) and, waiting in backoff
        or unschedulable, it moves to activeQ. False when nothing moved: the queue does not hold it, it is
        active already, or its attempt is underway (a failure of it then backs off from scratch)."""
        qp = self._entries.get(uid)
        if qp is None:
            return False
        qp.backoff_base = qp.attempts
        state = self._state[uid]
        if state in (IN_FLIGHT, ACTIVE):
            return False
        self._leave(qp)
        self._push_active(qp, self._clock(), FORCE_ACTIVATE)
        return True

    def update(self, pod: PodRecord) -> None:
        """Replace the record wherever it is; an unschedulable pod whose spec changed may now fit."""
        uid = pod.uid
        qp = self._entries.get(uid)
        if qp is None:
            self.add(pod)
            return
        old = qp.pod
        qp.pod = pod
        state = self._state[uid]
        new_name = self._queue_name_of(pod)
        if new_name != self._queue_name[uid]:
            self._count(uid, state, -1)
            self._queue_name[uid] = new_name
            self._count(uid, state, +1)
        if state == ACTIVE:
            self._resort(qp)
        elif state == UNSCHEDULABLE and _spec_changed(old, pod):
            self._leave(qp)
            self._move_out(qp, POD_UPDATE)

    def delete(self, uid: str) -> None:
        """Forget the pod in any state; a later done/requeue of its in-flight attempt is ignored."""
        qp = self._entries.get(uid)
        if qp is None:
            self._gated.discard(uid)
            return
        self._leave(qp)
        del self._entries[uid]
        del self._queue_name[uid]
        self.release(uid)  # a StrictFIFO head that leaves blocks no one

    def release(self, head: str) -> int:
        """The pods parked behind the StrictFIFO head `head` (`park`) are tried again: it left, or no longer
        blocks its queue. Returns how many moved."""
        parked = self._parked.pop(head, None)
        if not parked:
            return 0
        return self.move_matching(STRICT_HEAD_LEFT, lambda pod: pod.uid in parked)

    async def pop(self) -> QueuedPod:
        """Wait for the highest-priority active pod (FIFO among equals) and mark it in flight."""
        # Timers cannot be armed outside a loop; this is the first place we are surely inside one.
        self._arm_timers()
        while True:
            if self._closed:
                raise QueueClosed
            qp = self.pop_nowait()
            if qp is not None:
                return qp
            self._nonempty.clear()
            await self._nonempty.wait()

    def pop_nowait(self) -> QueuedPod | None:
        """The best active pod, or None if there is none (or the queue is closed)."""
        if self._closed or not self._active:
            popped = self._popped(self._clock())
            self._instant_end = len(popped)
            popped.append(None)
            return None
        key = self._active.pop(0)
        uid = key[-1]
        del self._active_key[uid]
        qp = self._entries[uid]
        if qp.hint is not None:
            self._unindex(qp)
        self._set_state(uid, ACTIVE, IN_FLIGHT)
        self._popped(self._clock()).append(key)
        self._in_flight += 1
        qp.attempts += 1
        qp.popped_move_cycle = self._move_cycle
        return qp

    def take(self, uid: str) -> QueuedPod | None:
        """Pull a waiting pod out of any queue into flight, as pop() would (gangs are tried as one unit:
        popping one member takes its siblings along). None if the pod is unknown or already in flight."""
        qp = self._entries.get(uid)
        if qp is None or self._state[uid] == IN_FLIGHT:
            return None
        self._leave(qp)
        self._state[uid] = IN_FLIGHT
        self._count(uid, IN_FLIGHT, +1)
        self._in_flight += 1
        qp.attempts += 1
        qp.popped_move_cycle = self._move_cycle
        return qp

    def done(self, uid: str) -> None:
        """The attempt succeeded (pod assumed): the queue's part is over."""
        if self._state.get(uid) == IN_FLIGHT:
            self.delete(uid)

    def requeue(
        self,
        qp: QueuedPod,
        *,
        unschedulable: bool,
        reason: str = "",
        hint: Any = None,
        not_before: float = 0.0,
    ) -> bool:
        """Put back a pod whose attempt failed; False when it is no longer in flight, so nothing was done.

        An unschedulable pod waits for a cluster event, unless one already came
        while it was in flight (move-request cycle): that event may have made it
        fit, so it only backs off. Errors (e.g. a failed binding) always back off.
        `hint`: see `move_freed` (None: the pod is moved by every event). `not_before`: its backoff lasts
        at least until then (a gang that timed out backs off as a whole: retrying a member sooner would
        only find the gang still backing off).
        """
        uid = qp.pod.uid
        if self._entries.get(uid) is not qp or self._state[uid] != IN_FLIGHT:
            return False  # deleted (and maybe re-added) while in flight, or already put back
        self._in_flight -= 1
        self._count(uid, IN_FLIGHT, -1)
        qp.last_failure = qp.timestamp = self._clock()
        qp.reason = reason
        qp.virtual = None
        qp.hint = hint if unschedulable else None
        qp.not_before = not_before
        if unschedulable and qp.popped_move_cycle == self._move_cycle:
            self._unschedulable[uid] = qp
            self._state[uid] = UNSCHEDULABLE
            self._count(uid, UNSCHEDULABLE, +1)
            self._incoming(UNSCHEDULABLE, SCHEDULE_ATTEMPT_FAILURE)
            if not self._closed:  # a no-op unless no earlier flush is armed
                self._flush_timer.arm(qp.last_failure + self._unschedulable_flush)
        else:
            self._push_active_or_backoff(qp, SCHEDULE_ATTEMPT_FAILURE)
        return True

    def park(self, qp: QueuedPod, head: str, reason: str) -> bool:
        """Put back a popped pod that was not tried because its StrictFIFO queue's head `head` (a uid)
        waits: unschedulable with `reason`, the pop not counted as an attempt, moved back when the head
        leaves (`delete`); False when it is no longer in flight, as `requeue`."""
        if not self.requeue(qp, unschedulable=True, reason=reason):
            return False
        qp.attempts -= 1
        if self._state[qp.pod.uid] == UNSCHEDULABLE:
            qp.hint = PARKED  # room freed anywhere does not move it: only the head's leaving (or move_all)
        self._parked.setdefault(head, set()).add(qp.pod.uid)
        return True

    def move_all(self, event: str) -> int:
        """A cluster event (`event` names it) may let unschedulable pods fit: retry them all.

        Bumps the move cycle even if nothing moved, because pods in flight may
        have been judged against the state before the event.
        """
        self._move_cycle += 1
        moved = list(self._unschedulable.values())
        for qp in moved:
            self._leave(qp)
            self._move_out(qp, event)
        return len(moved)

    def move_freed(self, event: str, fits: Callable[[PodRecord], bool]) -> int:
        """Room was freed on one node (a placed pod left): as move_all for the pods without a hint and for
        those `fits` says may fit there now (asked once per distinct hint); a pod with a hint that may not
        fit is retried virtually (see the module's docstring), unless its backoff still runs, in which case
        it is moved as move_all would (into backoffQ, to be tried when its backoff ends)."""
        return self._move_hinted(event, fits, parked=False)

    def move_unfreed(self, event: str) -> int:
        """An event that frees no room and changes no node, pod or claim that a filter reads (a gang timing
        out: a waiting gang holds nothing): as move_all, except that a pod with a hint, which only room
        could make fit, is retried virtually, as `move_freed` retries one that may not fit where room was
        freed. The same decisions as move_all, without popping the pods that would fail again."""
        return self._move_hinted(event, _fits_nowhere, parked=True)

    def _move_hinted(self, event: str, fits: Callable[[PodRecord], bool], *, parked: bool) -> int:
        """move_freed's walk; `parked`: pods parked behind a StrictFIFO head are moved (as move_all does)."""
        self._move_cycle += 1
        now = self._clock()
        verdicts: dict[Any, bool] = {}
        moved: list[QueuedPod] = []
        kept: list[QueuedPod] = []
        units: dict[str, list[QueuedPod]] = {}
        for qp in self._unschedulable.values():
            hint = qp.hint
            if hint is None:
                moved.append(qp)
                continue
            if hint is PARKED:  # behind a StrictFIFO head, which room freed may let start: it waits on
                if parked:
                    moved.append(qp)
                continue
            if type(hint) is UnitHint:
                units.setdefault(hint.unit, []).append(qp)
                continue
            fit = verdicts.get(hint)
            if fit is None:
                fit = verdicts[hint] = fits(qp.pod)
            if fit:
                moved.append(qp)
                continue
            virtual = qp.virtual
            if virtual is not None and virtual[0] == now and self._pending(qp, now):
                continue  # still in activeQ as a queue without hints sees it: nothing moves it
            if self._backing_off(qp, now):
                moved.append(qp)
            else:
                kept.append(qp)
        kept_units = [m for m in units.values() if self._unit_moves(m, verdicts, fits, now, moved)]
        for qp in moved:
            self._leave(qp)
            self._move_out(qp, event)
        popped = len(self._popped(now))
        for qp in kept:  # the retry it would get now, failed: one more attempt; last in the set, as after one
            self._retry_virtually(qp, now, popped, None)
            self._unschedulable[qp.pod.uid] = self._unschedulable.pop(qp.pod.uid)
        for members in kept_units:  # the unit's attempt (its first member's pop) would take them all
            first = min((*self._sort_key(m), m.last_failure, m.seq, m.pod.uid) for m in members)
            for qp in members:
                self._retry_virtually(qp, now, popped, first)
                self._unschedulable[qp.pod.uid] = self._unschedulable.pop(qp.pod.uid)
        return len(moved)

    def _unit_moves(
        self,
        members: list[QueuedPod],
        verdicts: dict[Any, bool],
        fits: Callable[[PodRecord], bool],
        now: float,
        moved: list[QueuedPod],
    ) -> bool:
        """A unit's part of `_move_hinted`: its members go to `moved` (all of them) when one may fit, when
        one still backs off, or when the queue does not hold all of them unschedulable with the hint;
        True when they are to be retried virtually instead; False too when their virtual retry is still
        pending (as a queue without hints would hold them: in activeQ, where nothing moves them). Moving
        is always what a queue without hints does, so whatever is unsure moves."""
        hint = members[0].hint
        whole = len(members) == hint.size and all(m.hint.size == hint.size for m in members)
        fit = not whole
        for qp in members:
            if fit:
                break
            verdict = verdicts.get(qp.hint)
            if verdict is None:
                verdict = verdicts[qp.hint] = fits(qp.pod)
            fit = verdict
        pendings = {m.virtual is not None and self._pending(m, now) for m in members}
        pending = True in pendings
        backing_off = not pending and any(self._backing_off(m, now) for m in members)
        if fit or len(pendings) > 1 or backing_off:
            moved.extend(members)
            return False
        return not pending

    @staticmethod
    def _retry_virtually(qp: QueuedPod, now: float, popped: int, key: tuple[Any, ...] | None) -> None:
        """The retry the pod would get now, failed: one more attempt, failed now (`key`: the activeQ key
        its retry waits behind, see `QueuedPod.virtual`). The caller puts it last in the unschedulable set,
        as after a real one."""
        qp.virtual = (now, popped, qp.attempts, qp.last_failure, key)
        qp.attempts += 1
        qp.last_failure = qp.timestamp = now

    def drop_hint(self, uid: str) -> None:
        """The pod is moved by every event again (its gang timed out: its next attempt backs off)."""
        qp = self._entries.get(uid)
        if qp is not None:
            if self._state[uid] == ACTIVE and qp.hint is not None:
                self._unindex(qp)
            qp.hint = None

    def take_alike(self, hint: Any, reason: str, alike: Callable[[QueuedPod], bool]) -> int:
        """A pod with `hint` just failed (for `reason`) where an attempt of any pod with it would fail the
        same until room is freed: the active pods an event put back with it, that `alike` says the cycle
        would try as that pod (not dropped, not parked, no quota that could refuse them first), fail so now.

        Each is retried virtually (see the module's docstring): one more attempt, failed now, unschedulable
        with its hint and the reason, pending until activeQ pops past the key it had there. Returns how
        many were taken."""
        uids = self._active_hinted.pop(hint, None)
        if not uids:
            return 0
        now = self._clock()
        popped = len(self._popped(now))
        left: dict[str, None] = {}
        taken = 0
        for uid in uids:
            qp = self._entries.get(uid)
            if qp is None or self._state[uid] != ACTIVE:  # never so: leaving activeQ unindexes a pod
                continue
            if not alike(qp):
                left[uid] = None
                continue
            key = self._active_key.pop(uid)
            self._active.remove(key)
            self._count(uid, ACTIVE, -1)
            self._retry_virtually(qp, now, popped, key)
            qp.reason = reason
            self._unschedulable[uid] = qp
            self._state[uid] = UNSCHEDULABLE
            self._count(uid, UNSCHEDULABLE, +1)
            self._incoming(UNSCHEDULABLE, SCHEDULE_ATTEMPT_FAILURE)
            taken += 1
        if left:
            self._active_hinted[hint] = left
        if taken and not self._closed:
            self._flush_timer.arm(now + self._unschedulable_flush)
        return taken

    def _unindex(self, qp: QueuedPod) -> None:
        """The pod leaves activeQ: out of `_active_hinted`."""
        alike = self._active_hinted.get(qp.hint)
        if alike is not None:
            alike.pop(qp.pod.uid, None)
            if not alike:
                del self._active_hinted[qp.hint]

    def unhint(self) -> None:
        """Every unschedulable pod is moved by every event again (what made hints safe no longer holds)."""
        for qp in self._unschedulable.values():
            qp.hint = None

    def _move_out(self, qp: QueuedPod, event: str) -> None:
        """Into backoffQ or activeQ, for a pod out of the unschedulable set; a pod whose virtual retry is
        pending would still be in activeQ: its retry is undone and it goes there."""
        now = self._clock()
        if qp.virtual is not None and self._pending(qp, now):
            qp.attempts, qp.last_failure = qp.virtual[2], qp.virtual[3]
            qp.timestamp = qp.last_failure
            qp.virtual = None
            self._push_active(qp, now, event)
            return
        qp.virtual = None
        self._push_active_or_backoff(qp, event)

    def _popped(self, now: float) -> list[tuple[Any, ...] | None]:
        """The active keys popped at instant `now` so far (a new instant starts an empty list)."""
        if now != self._instant:
            self._instant = now
            self._instant_pops = []
            self._instant_end = -1
        return self._instant_pops

    def _pending(self, qp: QueuedPod, now: float) -> bool:
        """Whether the pod's virtual retry is still to come: made at this instant, and activeQ has popped
        neither the pod's place (its key then, with the timestamp before the retry) nor its last pod since
        (a drain pops every active pod before the clock moves on)."""
        virtual = qp.virtual
        if virtual is None or virtual[0] != now:
            return False
        popped = self._popped(now)
        if self._instant_end >= virtual[1]:  # activeQ was found empty since: the drain passed it
            return False
        since = popped[virtual[1]:]
        if not since:
            return True
        key = virtual[4] if virtual[4] is not None else (*self._sort_key(qp), virtual[3], qp.seq, qp.pod.uid)
        return all(popped is not None and popped < key for popped in since)

    def move_matching(self, event: str, wants: Callable[[PodRecord], bool]) -> int:
        """Like move_all, for the unschedulable pods that `wants` says the event may help (kube's
        queueing hints): a pod bound somewhere helps only pods waiting for other pods."""
        self._move_cycle += 1
        moved = [qp for qp in self._unschedulable.values() if wants(qp.pod)]
        for qp in moved:
            self._leave(qp)
            self._move_out(qp, event)
        return len(moved)

    def flush_due(self) -> int:
        """Move pods whose backoff expired to activeQ and pods unschedulable for longer than
        `unschedulable_flush` out of the set; the timers call this, tests may too. Returns moves."""
        moved = self._flush_unschedulable() + self._flush_backoff()
        self._arm_timers()
        return moved

    def backoff_duration(self, attempts: int) -> float:
        """initial * 2^(attempts-1), capped at max: 1, 2, 4, 8, 10, 10... with the defaults."""
        if attempts <= 0:
            return 0.0
        return min(self._max_backoff, self._initial_backoff * 2.0 ** min(attempts - 1, 64))

    @property
    def unschedulable_flush(self) -> float:
        """Seconds after which an unschedulable pod is retried even without a cluster event."""
        return self._unschedulable_flush

    def reconfigure(self, *, initial_backoff: float, max_backoff: float, unschedulable_flush: float) -> None:
        """New backoff and flush periods (a config reload), in force at once: pods backing off now wait
        out the new backoff from their last failure, and unschedulable pods older than the new flush
        period are retried now."""
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._unschedulable_flush = unschedulable_flush
        if self._closed:
            return
        backing_off = list(self._backoff)
        self._backoff.clear()
        for _, seq, uid in backing_off:
            key = (self._backoff_deadline(self._entries[uid]), seq, uid)
            self._backoff_key[uid] = key
            self._backoff.add(key)
        # A timer armed for an old deadline would fire late, or early and re-arm: arm both afresh.
        self._backoff_timer.cancel()
        self._flush_timer.cancel()
        self.flush_due()

    def close(self) -> None:
        """Wake every pop() waiter with QueueClosed and stop the timers."""
        self._closed = True
        self._backoff_timer.cancel()
        self._flush_timer.cancel()
        self._nonempty.set()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: str) -> bool:
        return uid in self._entries

    def counts(self) -> dict[str, int]:
        return {
            ACTIVE: len(self._active),
            BACKOFF: len(self._backoff),
            UNSCHEDULABLE: len(self._unschedulable),
            IN_FLIGHT: self._in_flight,
        }

    def pending_counts(self) -> dict[str, int]:
        """kube-scheduler's pending pods by sub-queue (active, backoff, unschedulable, gated); pods in
        flight are being tried, not pending, and are not counted (as in kube-scheduler)."""
        return {
            ACTIVE: len(self._active),
            BACKOFF: len(self._backoff),
            UNSCHEDULABLE: len(self._unschedulable),
            GATED: len(self._gated),
        }

    def counts_by_queue(self) -> dict[tuple[str, str], int]:
        """(queue name, state) -> pods, kept up to date on every transition for the pending-pods metric."""
        return {key: n for key, n in self._by_queue.items() if n}

    def reprioritize(self) -> int:
        """Recompute every active pod's sort key (priorities move with time and usage); only the pods
        whose key changed are moved. Returns how many moved.

        This is what makes a time-dependent order (waitingTime, a queue's promoteAfterSeconds) hold for
        pods that sit in activeQ: called every priorityRefreshSeconds, a pod whose key crossed a bound
        moves within one period. Pods in backoff or unschedulable need nothing: their key is computed
        afresh when they re-enter activeQ."""
        moved = 0
        for uid in list(self._active_key):
            if self._resort(self._entries[uid]):
                moved += 1
        return moved

    def _resort(self, qp: QueuedPod) -> bool:
        uid = qp.pod.uid
        old = self._active_key[uid]
        key = (*self._sort_key(qp), qp.timestamp, qp.seq, uid)
        if key == old:
            return False
        self._active.remove(old)
        self._active_key[uid] = key
        self._active.add(key)
        return True

    def pending(self) -> list[QueuedPod]:
        """Every pod the queue holds, in any state (for priority refreshes and inspection)."""
        return list(self._entries.values())

    def pending_info(self, uid: str) -> QueuedPod | None:
        return self._entries.get(uid)

    # ---- transitions --------------------------------------------------------------------------

    def _count(self, uid: str, state: str, delta: int) -> None:
        key = (self._queue_name[uid], state)
        self._by_queue[key] = self._by_queue.get(key, 0) + delta

    def _set_state(self, uid: str, old: str, new: str) -> None:
        self._count(uid, old, -1)
        self._state[uid] = new
        self._count(uid, new, +1)

    def _incoming(self, queue: str, event: str) -> None:
        if self._on_incoming is not None:
            self._on_incoming(queue, event)

    def _push_active(self, qp: QueuedPod, now: float, event: str) -> None:
        uid = qp.pod.uid
        qp.enqueued = now
        key = (*self._sort_key(qp), qp.timestamp, qp.seq, uid)
        self._active_key[uid] = key
        self._active.add(key)
        hint = qp.hint
        if hint is not None and hint is not PARKED and type(hint) is not UnitHint:
            self._active_hinted.setdefault(hint, {})[uid] = None
        self._state[uid] = ACTIVE
        self._count(uid, ACTIVE, +1)
        self._incoming(ACTIVE, event)
        self._nonempty.set()

    def _backing_off(self, qp: QueuedPod, now: float) -> bool:
        """Whether the pod's backoff still runs at `now`. A pod whose last failure is a whole maximum
        backoff ago, with no later not-before, is not backing off: its deadline is not worked out (most
        of a standing queue, once events are more than that apart)."""
        if qp.last_failure + self._max_backoff <= now and qp.not_before <= now:
            return False
        return self._backoff_deadline(qp) > now

    def _backoff_deadline(self, qp: QueuedPod) -> float:
        return max(qp.last_failure + self.backoff_duration(qp.attempts - qp.backoff_base), qp.not_before)

    def _push_active_or_backoff(self, qp: QueuedPod, event: str) -> None:
        """Into backoffQ while the backoff since the last failure runs, else straight to activeQ."""
        now = self._clock()
        deadline = self._backoff_deadline(qp)
        if deadline <= now:
            self._push_active(qp, now, event)
            return
        uid = qp.pod.uid
        self._seq += 1
        key = (deadline, self._seq, uid)
        self._backoff_key[uid] = key
        self._backoff.add(key)
        self._state[uid] = BACKOFF
        self._count(uid, BACKOFF, +1)
        self._incoming(BACKOFF, event)
        if not self._closed:
            self._backoff_timer.arm(deadline)

    def _leave(self, qp: QueuedPod) -> None:
        """Take the pod out of whatever holds it (its state entry goes too)."""
        uid = qp.pod.uid
        state = self._state.pop(uid)
        self._count(uid, state, -1)
        if state == ACTIVE:
            self._active.remove(self._active_key.pop(uid))
            if qp.hint is not None:
                self._unindex(qp)
        elif state == BACKOFF:
            self._backoff.remove(self._backoff_key.pop(uid))
        elif state == UNSCHEDULABLE:
            del self._unschedulable[uid]
        else:
            self._in_flight -= 1

    # ---- timers -------------------------------------------------------------------------------

    def _flush_backoff(self) -> int:
        now = self._clock()
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            _, _, uid = self._backoff.pop(0)
            del self._backoff_key[uid]
            self._count(uid, BACKOFF, -1)
            self._push_active(self._entries[uid], now, BACKOFF_COMPLETE)
            moved += 1
        return moved

    def _flush_unschedulable(self) -> int:
        cutoff = self._clock() - self._unschedulable_flush
        due: list[QueuedPod] = []
        for qp in self._unschedulable.values():
            if qp.last_failure > cutoff:
                break
            due.append(qp)
        for qp in due:
            self._leave(qp)
            self._move_out(qp, UNSCHEDULABLE_TIMEOUT)
        return len(due)

    def deadlines(self) -> tuple[float | None, float | None]:
        """When the timers are due (on the queue's clock; None: nothing waits): the first backoff to
        expire, and the oldest unschedulable pod's flush. A driver without a running loop (the trace
        simulator) advances its clock to them and calls `flush_due`."""
        backoff = self._backoff[0][0] if self._backoff else None
        flush = None
        if self._unschedulable:
            flush = next(iter(self._unschedulable.values())).last_failure + self._unschedulable_flush
        return backoff, flush

    def _arm_timers(self) -> None:
        if self._closed:
            return
        backoff, flush = self.deadlines()
        if backoff is not None:
            self._backoff_timer.arm(backoff)
        if flush is not None:
            self._flush_timer.arm(flush)

    def _on_backoff_timer(self) -> None:
        self._flush_backoff()
        self._arm_timers()

    def _on_flush_timer(self) -> None:
        self._flush_unschedulable()
        self._arm_timers()
