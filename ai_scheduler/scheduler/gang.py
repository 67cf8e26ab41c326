"""Gang scheduling: all of a gang's quorum is placed at once, or none of it is.

When one member of a gang is popped, its pending siblings are taken out of the
queue with it. The cycle then places them one after another against the live
cache, assuming each placement at once; if fewer than the gang still needs
(minMember minus members already bound or assumed) fit, every assumption of
this attempt is forgotten before the loop yields, so a gang never holds a
partial reservation and two gangs cannot deadlock each other. When the quorum
fits, all placed members bind concurrently (Permit is passed in the same cycle).

Members beyond minMember that fit are placed with the rest; those added after
the gang reached its quorum (elastic scale-up) are placed as ordinary pods.

Preemption: when the quorum fits nowhere, the gang preempts as one unit
(gang_preemption.py): victims for all of its needed members at once, their
gangs whole, every member nominated; its Unschedulable message ends with the
`preemption:` part, as a single pod's does. It is placed whole on a later
attempt, once the victims are gone.

Timeouts: a gang not placed whole within its timeout backs off (`check_timeouts`: 1 s, 2 s, 4 s, ...
up to 300 s), and its members wait that out in the queue's backoff (`requeue`'s `not_before`), so it
is tried once when the backoff ends, not once per member backoff meanwhile. With queueing hints, a
gang whose attempt failed for room alone waits for room where one of its members may fit (`_hints`).

Placement domains: with topology labels configured, the gang is first tried
inside one domain (narrowest label first, smallest domain that can hold it
first); only if no single domain can hold it is it spread, unless its
PodGroup requires one domain.

Identical members (the usual case) are filtered and scored once per attempt,
not once per member (gang_shapes.py): each member's cycle reads the shape's
verdicts, and a placement refreshes only the row it took. Members that differ,
or whose plugins look beyond one node (pod affinity, topology spread, volumes),
take a full cycle each; the decisions are the same either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ai_scheduler.cache.gangs import NATIVE, Gang
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import SchedulingSettings
from ai_scheduler.queue import QueuedPod, UnitHint
from ai_scheduler.scheduler.framework.runtime import Decision, Framework, resourceless
from ai_scheduler.scheduler.gang_preemption import GangPreemptor
from ai_scheduler.scheduler.gang_shapes import MemberShape
from ai_scheduler.scheduler.reservation import waiting_since
from ai_scheduler.scheduler.session import Session

MAX_BIND_FAILURES = 3  # a member that fails to bind this often makes the gang fail
MAX_DOMAIN_TRIALS = 4  # domains tried per topology level, smallest that could hold the gang first
MAX_TIMEOUT_BACKOFF = 300.0
# kube-scheduler's prefix of a member's message when its PodGroup's cycle fails (errPodGroupUnschedulable);
# the PodGroup's own condition carries the rest.
NATIVE_UNSCHEDULABLE = "pod group is unschedulable, "


class GangScheduler:
    """Tries a gang whole (see the module); takes the core's Session (session.py)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.registry = session.gangs
        self.cache = session.cache
        self.queue = session.queue
        self.binder = session.outbox.bindings
        self.feedback = session.outbox.reports
        self.metrics = session.metrics
        self.log = session.log
        self.log_decision = session.decisions.log
        self.tenancy = session.tenancy
        self.reserver = session.reserver
        self.domains = session.domains
        self.sort_key = session.priorities.sort_key
        self._clock = session.clock
        # The topology labels the placement domains were built for (a reload with others rebuilds them).
        self._labels = self.settings.gang_topology_labels
        # Nodes reserved for someone ahead of the gang being tried, with the reason they are charged: after
        # the filters (Framework.schedule's `blocked`), so that a member's message counts every node.
        self._blocked: tuple[tuple[np.ndarray, str], ...] = ()
        self._domains: tuple[int, dict[str, list[tuple[str, np.ndarray]]]] = (-1, {})
        # Per topology label: the rows of its domains, domain after domain, and where each domain starts
        # (one np.add.reduceat sums a column per domain); kept with `_domains`.
        self._domain_rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # The members the attempt in progress took out of the queue (empty between attempts): if the attempt
        # raises, the scheduling loop's recovery puts them back (scheduler.recovery).
        self.holding: list[QueuedPod] = []
        # The latest try's members placed and members left untried when it gave up (kube-scheduler's
        # "N scheduled, M remaining" for a Kubernetes PodGroup).
        self.last_try = (0, 0)
        # Gang preemption (set by the core when preemption is wired); None: a gang only waits.
        self.preemptor: GangPreemptor | None = None
        self._preempted = False  # the attempt in progress preempted: no starvation reservation for it
        # Identical members filtered and scored once (gang_shapes.py); False: a full cycle per member.
        self.shapes = True
        # Queueing hints (set by the core; None: off): a member's own hint (the core's `hint_of`).
        self.hint_of: Callable[[PodRecord], Any] | None = None
        self._any_placed = False  # a member of the attempt in progress was placed (and maybe released)

    @property
    def settings(self) -> SchedulingSettings:
        """The scheduling settings in force: a reload's timeout, timeout backoff and topology labels apply
        from the next housekeeping tick and the next attempt."""
        return self.session.settings.current.scheduling

    def reserving(self) -> bool:
        return self.settings.reservation

    # ------------------------------------------------------------------ the cycle
    def schedule(self, qp: QueuedPod, gang: Gang, framework: Framework) -> int:
        """Try the gang that `qp` belongs to; returns how many bindings were started."""
        started = time.perf_counter()
        with framework.learning_held():  # the members score alike on either path (gang_shapes.py)
            placed, outcome = self._schedule(qp, gang, framework)
        self.holding = []  # the attempt ended: every member it took is binding or back in the queue
        self.metrics.gang_attempt_duration.labels(outcome).observe(time.perf_counter() - started)
        return placed

    def _schedule(self, qp: QueuedPod, gang: Gang, framework: Framework) -> tuple[int, str]:
        members = self.holding = [qp]  # filled as siblings are taken, so that nothing taken goes unrecorded
        for uid in gang.members:
            if uid != qp.pod.uid and not self.cache.is_assumed(uid):
                sibling = self.queue.take(uid)
                if sibling is not None:
                    members.append(sibling)
        members = [m for m in members if self._pending(m, framework)]
        if not members:
            return 0, "empty"
        placed = self._placed(gang)
        needed = gang.min_member - placed
        problem = gang.problem
        now = self._clock()
        if problem:
            self._wait(gang, members, problem, placed, needed)
            return 0, "waiting"
        if needed <= 0:
            return self._place_elastic(gang, members, framework), "elastic"
        if now < gang.not_before:
            self._wait(
                gang,
                members,
                f"gang {gang.key} is backing off after timing out",
                placed,
                needed,
                backoff=True,
            )
            return 0, "waiting"
        if placed + len(members) < gang.min_member:
            count = f"gang {gang.key} has {placed + len(members)} of {gang.min_member} required pods"
            if gang.kind == NATIVE:  # kube-scheduler's GangScheduling PreEnqueue words first
                count = f"waiting for minCount pods from a gang to appear in scheduling queue ({count})"
            self._wait(gang, members, count, placed, needed)
            return 0, "waiting"
        self.registry.start_attempt(gang, now)
        short = self._min_resources_shortfall(gang)
        if short:
            self._wait(
                gang,
                members,
                f"gang {gang.key}: not enough free resources for minResources ({short})",
                placed,
                needed,
            )
            return 0, "waiting"
        members.sort(key=lambda m: (-m.pod.priority, m.pod.creation, m.pod.name))
        quorum: dict[str, int] = {}
        for member in members[:needed]:
            for resource, amount in self.tenancy.amounts(member.pod).items():
                quorum[resource] = quorum.get(resource, 0) + amount
        refusal = self.tenancy.admission_refusal(members[0].pod, quorum)
        if refusal:
            self.log.info("admission.refused", gang=gang.key, pods=needed, reason=refusal)
            self._wait(gang, members, f"gang {gang.key}: {refusal}", placed, needed)
            return 0, "waiting"
        key = self.sort_key(members[0])
        # Held room is checked for all the needed members at once: they may land on one node.
        blocked = self.reserver.blocked_rows(members[0].pod, key, needed) if self.reserving() else None
        current = self.reserver.current
        self._blocked = () if blocked is None or current is None else (
            (blocked, f"node(s) reserved for {current.holder}"),
        )
        # Logical domains (domains.py): the domain the gang requires, those kept for larger gangs.
        self._blocked += tuple(self.domains.kept_off(members[0].pod, gang.min_member))
        self._preempted = self._any_placed = False
        outcome = self._place_in_domains(gang, members, needed, framework)
        if outcome is None:
            if self.reserving() and not self._preempted:
                rows, _ = framework.feasible_rows(resourceless(members[0].pod))
                self.reserver.consider(
                    f"gang {gang.key}",
                    frozenset(m.pod.uid for m in members),
                    key,
                    members[0].pod,
                    members[0].pod.requests,
                    needed,
                    rows,
                    since=waiting_since(m.pod for m in members),
                )
            return 0, "waiting"
        for member, _decision in outcome[0]:
            self.reserver.placed(member.pod.uid)
        placements, domain = outcome
        placed_uids = {m.pod.uid for m, _ in placements}
        for member, decision in placements:
            self.binder.submit(member, member.pod, decision)
            self.log_decision(member, member.pod, decision, "scheduled", {"gang": gang.key})
        extras = [m for m in members if m.pod.uid not in placed_uids]
        for member in extras:
            reason = f"gang {gang.key} reached its quorum; this extra member does not fit now"
            self.queue.requeue(member, unschedulable=True, reason=reason)
            self.feedback.unschedulable(member.pod, reason)
        self.registry.end_attempt(gang)
        gang.timeouts = 0
        if self.preemptor is not None:
            self.preemptor.forget(gang.key)
        gang.last_reason = ""
        self.registry.dirty.add(gang.key)
        self.log.info(
            "gang.admitted",
            gang=gang.key,
            placed=len(placements),
            already_placed=placed,
            min_member=gang.min_member,
            domain=domain,
            extras_waiting=len(extras),
        )
        self.feedback.event(
            self._involved(gang),
            "Normal",
            "Scheduled",
            f"gang {gang.key}: {len(placements)} pods placed" + (f" in {domain}" if domain else ""),
            component=self._profile(gang),
        )
        return len(placements), "admitted"

    def _pending(self, member: QueuedPod, framework: Framework) -> bool:
        state = self.cache.pod_state(member.pod.uid)
        pod = state.record if state is not None else member.pod
        member.pod = pod
        if (
            pod.pending
            and not pod.gated
            and pod.scheduler_name == framework.scheduler_name
            and not (state is not None and (state.assumed or state.node))
        ):
            return True
        self.queue.delete(pod.uid)
        return False

    def _placed(self, gang: Gang) -> int:
        """Members bound (and not finished) or assumed by us."""
        count = 0
        for uid, member in gang.members.items():
            if member.deleting:
                continue
            if (member.node and member.phase not in ("Succeeded", "Failed")) or self.cache.is_assumed(uid):
                count += 1
            elif member.phase == "Succeeded":
                count += 1  # a finished member still counts towards the gang having run
        return count

    def _try(
        self,
        gang: Gang,
        members: list[QueuedPod],
        needed: int,
        framework: Framework,
        mask: np.ndarray | None,
        shape: MemberShape | None = None,
    ) -> tuple[list[tuple[QueuedPod, Decision]], Decision | None]:
        """Place as many members as fit, assuming each; undo everything if fewer than `needed` fit.

        `shape`: the members' common shape, when they have one (their cycles read its verdicts)."""
        placements: list[tuple[QueuedPod, Decision]] = []
        first_failure: Decision | None = None
        remaining = 0
        for i, member in enumerate(members):
            if len(placements) + (len(members) - i) < needed:
                remaining = len(members) - i
                break  # the rest could not reach the quorum
            decision = framework.schedule(member.pod, mask, self._blocked, shape)
            if decision.node is None:
                first_failure = first_failure or decision
                continue
            self._any_placed = True
            self.binder.reserve(member.pod, decision)
            if shape is not None:
                shape.placed(member.pod, self.cache.row_of(decision.node))
            placements.append((member, decision))
        self.last_try = (len(placements), remaining)
        if len(placements) >= needed:
            return placements, None
        for member, _ in placements:
            self.binder.unreserve(member.pod)
        if shape is not None:
            shape.restore()
        if placements:
            self.log.info(
                "gang.released",
                gang=gang.key,
                released=len(placements),
                needed=needed,
                reason="the quorum did not fit; nothing stays reserved",
            )
        return [], first_failure

    def _place_in_domains(
        self, gang: Gang, members: list[QueuedPod], needed: int, framework: Framework
    ) -> tuple[list[tuple[QueuedPod, Decision]], str] | None:
        required = gang.podgroup is not None and gang.podgroup.same_domain_required
        first_failure: Decision | None = None
        tried_domains = False
        shape = MemberShape.of(framework, [m.pod for m in members]) if self.shapes else None
        for label, domains in self._domain_masks().items():
            for value, mask in self._candidate_domains(label, domains, members, needed):
                tried_domains = True
                placements, failure = self._try(gang, members, needed, framework, mask, shape)
                if placements:
                    return placements, f"{label}={value}"
                first_failure = first_failure or failure
        if required:
            reason = (
                f"gang {gang.key} requires one placement domain and no single "
                f"{' or '.join(self.settings.gang_topology_labels)} domain can hold {needed} pods"
            )
            if not tried_domains:
                reason = f"gang {gang.key} requires one placement domain but no node has a topology label"
            if first_failure is not None:
                reason += f": {first_failure.message}"
            masks = [mask for domains in self._domain_masks().values() for _, mask in domains]
            reason += self._preempt(gang, members, needed, framework, masks)
            hints = self._hints(gang, members)
            self._wait(gang, members, reason, gang.min_member - needed, needed, hints=hints)
            return None
        placements, failure = self._try(gang, members, needed, framework, None, shape)
        if placements:
            return placements, ""
        failure = failure or first_failure
        detail = failure.message if failure is not None else "not enough room"
        reason = f"gang {gang.key} needs {needed} pods placed together and they do not all fit: {detail}"
        preemption = self._preempt(gang, members, needed, framework, [None])
        if gang.kind == NATIVE:  # kube-scheduler's words for a Kubernetes PodGroup, then ours
            placed, remaining = self.last_try
            reason = (
                f"{NATIVE_UNSCHEDULABLE}minCount ({gang.min_member}) cannot be satisfied: "
                f"{placed + gang.min_member - needed} scheduled, {remaining} remaining ({reason})"
            )
        reason += preemption
        hints = self._hints(gang, members)
        self._wait(gang, members, reason, gang.min_member - needed, needed, hints=hints)
        return None

    def _hints(self, gang: Gang, members: list[QueuedPod]) -> list[UnitHint] | None:
        """The members' queueing hints after an attempt that failed for room alone, else None.

        Room alone: no member was placed anywhere (so the attempt scored nothing and taught the scores
        nothing), it preempted nothing, no nodes were held for others, and each member may wait for room on
        one node (the core's `hint_of`). Rows only lose room between two events that free some, so until
        room is freed on a node where a member may fit (`SchedulingQueue.move_freed` asks), an attempt
        would try the same members the same way and fail the same; the members wait as one unit."""
        hint_of = self.hint_of
        if hint_of is None or self._any_placed or self._preempted or self.reserving() or self._blocked:
            return None
        own = [hint_of(m.pod) for m in members]
        if any(h is None for h in own):
            return None
        return [UnitHint(gang.key, h, len(members)) for h in own]

    def _preempt(
        self,
        gang: Gang,
        members: list[QueuedPod],
        needed: int,
        framework: Framework,
        masks: Sequence[np.ndarray | None],
    ) -> str:
        """PostFilter for the gang whose quorum fit nowhere: preempt for it as one unit when that helps;
        the ` preemption: ...` part of its message ('' when preemption is not wired)."""
        if self.preemptor is None or not masks:
            return ""
        pods = [m.pod for m in members]
        verdict = self.preemptor.post_filter(gang, pods, needed, framework, masks)
        if verdict.preempts:
            self.preemptor.execute(gang, pods[0], verdict)
            self._preempted = True
        return f" {verdict.message}"

    def _place_elastic(self, gang: Gang, members: list[QueuedPod], framework: Framework) -> int:
        started = 0
        for member in members:
            decision = framework.schedule(member.pod)
            if decision.node is None:
                self.queue.requeue(member, unschedulable=True, reason=decision.message)
                self.feedback.unschedulable(member.pod, decision.message)
                self.log_decision(member, member.pod, decision, "unschedulable", {"gang": gang.key})
                continue
            self.binder.reserve(member.pod, decision)
            self.binder.submit(member, member.pod, decision)
            self.log_decision(member, member.pod, decision, "scheduled", {"gang": gang.key, "elastic": True})
            started += 1
        return started

    def _wait(
        self,
        gang: Gang,
        members: list[QueuedPod],
        reason: str,
        placed: int,
        needed: int,
        *,
        backoff: bool = False,
        hints: list[UnitHint] | None = None,
    ) -> None:
        """Nothing reserved: every member goes back, unschedulable (with its hint: `_hints`), and says why."""
        nodes = self.cache.node_count
        for i, member in enumerate(members):
            hint = hints[i] if hints is not None else None
            # Backing off after a timeout: not tried again before the gang's backoff ends.
            self.queue.requeue(member, unschedulable=not backoff, reason=reason, hint=hint,
                               not_before=gang.not_before if backoff else 0.0)
            self.feedback.unschedulable(member.pod, reason)
            self.log_decision(
                member,
                member.pod,
                Decision(None, nodes),
                "unschedulable",
                {"gang": gang.key, "message": reason},
            )
        changed = reason != gang.last_reason
        gang.last_reason = reason
        self.registry.dirty.add(gang.key)
        if changed:
            self.log.info(
                "gang.waiting",
                gang=gang.key,
                assumed=placed,
                needed=max(needed, 0),
                min_member=gang.min_member,
                pending=len(members),
                reason=reason,
                attempt=max(m.attempts for m in members),
            )
            self.feedback.event(
                self._involved(gang), "Warning", "Unschedulable", reason, component=self._profile(gang)
            )

    # ------------------------------------------------------------------ checks
    def _min_resources_shortfall(self, gang: Gang) -> str:
        """scheduler-plugins' minResources check: is there that much free capacity in the whole cluster?"""
        if gang.podgroup is None or not gang.podgroup.min_resources:
            return ""
        cache = self.cache
        valid = cache.valid
        short = []
        for resource, amount in gang.podgroup.min_resources.items():
            col = cache.column(resource)
            free = 0
            if col >= 0:
                free = int(
                    np.clip(cache.allocatable[valid, col] - cache.requested[valid, col], 0, None).sum()
                )
            free += self._used_by_members(gang, resource)
            if free < amount:
                short.append(f"{resource} {free} free of {amount} needed")
        return ", ".join(short)

    def _used_by_members(self, gang: Gang, resource: str) -> int:
        total = 0
        for uid in gang.members:
            state = self.cache.pod_state(uid)
            if state is not None and state.node:
                total += state.record.requests.get(resource, 0)
        return total

    # ------------------------------------------------------------------ topology
    def _domain_masks(self) -> dict[str, list[tuple[str, np.ndarray]]]:
        """Per topology label: (value, node mask) for each domain, rebuilt when node labels or the configured
        labels change."""
        cache = self.cache
        version, domains = self._domains
        labels = self.settings.gang_topology_labels
        if version == cache.static_version and labels == self._labels and all(
            mask.shape[0] == cache.rows for masks in domains.values() for _, mask in masks
        ):
            return domains
        self._labels = labels
        domains = {}
        records = cache.row_records
        for label in labels:
            rows_by_value: dict[str, list[int]] = {}
            for row in np.flatnonzero(cache.valid).tolist():
                record = records[row]
                value = record.labels.get(label) if record is not None else None
                if value is not None:
                    rows_by_value.setdefault(value, []).append(row)
            if len(rows_by_value) < 1:
                continue
            masks = []
            order: list[int] = []
            starts: list[int] = []
            for value, rows in sorted(rows_by_value.items()):
                mask = np.zeros(cache.rows, dtype=bool)
                mask[rows] = True
                masks.append((value, mask))
                starts.append(len(order))
                order.extend(rows)
            domains[label] = masks
            self._domain_rows[label] = (np.array(order, dtype=np.intp), np.array(starts, dtype=np.intp))
        self._domains = (cache.static_version, domains)
        return domains

    def _candidate_domains(
        self, label: str, domains: list[tuple[str, np.ndarray]], members: list[QueuedPod], needed: int
    ) -> list[tuple[str, np.ndarray]]:
        """Domains whose free capacity could hold the quorum, smallest first (keep big domains whole)."""
        cache = self.cache
        demand: dict[str, int] = {}
        for member in members[:needed]:
            for resource, amount in member.pod.requests.items():
                demand[resource] = demand.get(resource, 0) + amount
        cols = [cache.column(resource) for resource in demand]
        if any(col < 0 for col in cols):
            return []  # a resource no node has: no domain can hold the quorum
        cpu = cache.resource_index["cpu"]
        # Free room over the domains' rows, summed per domain in one pass (a removed node's row holds zeros,
        # and changes the static version, which rebuilds the domains).
        # Only the columns asked for and cpu, which ranks the domains, are read, each once.
        # One column at a time: a 2-D fancy index (np.ix_) over the rows costs about three times as much.
        order, starts = self._domain_rows[label]
        rows = cache.rows
        sums: dict[int, np.ndarray] = {}
        for col in dict.fromkeys([cpu, *cols]):
            free = cache.allocatable[:rows, col] - cache.requested[:rows, col]
            np.maximum(free, 0, out=free)
            sums[col] = np.add.reduceat(free[order], starts)
        fits = np.ones(len(starts), dtype=bool)
        for col, amount in zip(cols, demand.values(), strict=True):
            fits &= sums[col] >= amount
        room = sums[cpu]
        ranked = sorted((int(room[i]), domains[i][0], i) for i in fits.nonzero()[0].tolist())
        return [(value, domains[i][1]) for _, value, i in ranked[:MAX_DOMAIN_TRIALS]]

    # ------------------------------------------------------------------ timeouts and failures
    def check_timeouts(self) -> None:
        """A gang not placed whole within its timeout: release, tell, back off longer each time."""
        now = self._clock()
        timed_out: list[Gang] = []
        for gang in list(self.registry.attempting.values()):
            if gang.first_attempt is None:
                continue
            timeout = gang.timeout(self.settings.gang_schedule_timeout_seconds)
            if now - gang.first_attempt < timeout:
                continue
            gang.timeouts += 1
            self.metrics.gang_timeouts.inc()
            # The exponent is capped: a gang that can never be placed times out again and again.
            doubled = self.settings.initial_backoff_seconds * 2 ** min(gang.timeouts, 64)
            backoff = min(doubled, MAX_TIMEOUT_BACKOFF)
            gang.not_before = now + backoff
            self.registry.end_attempt(gang)
            placed = self._placed(gang)
            # Attempts reserve a gang whole or not at all, so a gang that times out holds no
            # reservation: members already bound stay bound, and the group reports them.
            message = (
                f"gang {gang.key} was not placed whole within {timeout:g}s ({placed} of "
                f"{gang.min_member} placed, no resources held for the rest); retrying in {backoff:g}s"
            )
            if placed:
                gang.failed_reason = message
            self.registry.dirty.add(gang.key)
            self.log.warning(
                "gang.timed_out",
                gang=gang.key,
                placed=placed,
                min_member=gang.min_member,
                held=0,
                timeouts=gang.timeouts,
                backoff_s=backoff,
                reason=message,
            )
            self.feedback.event(
                self._involved(gang), "Warning", "Timeout", message, component=self._profile(gang)
            )
            timed_out.append(gang)
        if not timed_out:
            return
        # A waiting gang holds nothing, so its timeout frees no room: pods that only room could help are
        # retried virtually (move_unfreed), with the decisions that retrying them gives. Not the gangs' own
        # members: their next attempt backs off (`not_before`), which a virtual retry is not. One move for
        # every gang that timed out now: the same as one move per gang at this instant, since nothing is
        # popped in between (a pod retried virtually by the first would be left pending by the next).
        for gang in timed_out:
            for uid in gang.members:
                self.queue.drop_hint(uid)
        self.queue.move_unfreed("GangTimeout")

    def bind_failed(self, pod: PodRecord, message: str) -> None:
        gang = self.registry.gang_of(pod)
        if gang is None:
            return
        failures = gang.bind_failures[pod.uid] = gang.bind_failures.get(pod.uid, 0) + 1
        self.registry.dirty.add(gang.key)
        if failures >= MAX_BIND_FAILURES and not gang.failed_reason:
            gang.failed_reason = f"member {pod.key} could not be bound after {failures} attempts: {message}"
            self.log.error("gang.failed", gang=gang.key, pod=pod.key, reason=gang.failed_reason)
            self.feedback.event(
                self._involved(gang), "Warning", "Failed", gang.failed_reason, component=pod.scheduler_name
            )

    def bound(self, pod: PodRecord) -> None:
        gang = self.registry.gang_of(pod)
        if gang is not None:
            gang.bind_failures.pop(pod.uid, None)
            self.registry.dirty.add(gang.key)
            if (
                gang.failed_reason
                and self._placed(gang) >= gang.min_member
                and not any(gang.bind_failures.values())
            ):
                gang.failed_reason = ""  # completed after all: the failure is history

    def _profile(self, gang: Gang) -> str:
        """The schedulerName of the gang's pods ('' when none is known): its events speak as that profile."""
        for uid in gang.members:
            state = self.cache.pod_state(uid)
            if state is not None:
                return state.record.scheduler_name
        return ""

    def _involved(self, gang: Gang) -> dict[str, Any]:
        """The object a gang's events are about: its PodGroup (either kind), or else its first member."""
        if gang.native is not None:
            return {
                "apiVersion": "scheduling.k8s.io/v1beta1",
                "kind": "PodGroup",
                "namespace": gang.namespace,
                "name": gang.name,
                "uid": gang.native.uid,
            }
        if gang.podgroup is not None:
            return {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "namespace": gang.namespace,
                "name": gang.name,
                "uid": gang.podgroup.uid,
            }
        uid = min(gang.members) if gang.members else ""
        state = self.cache.pod_state(uid) if uid else None
        name = state.record.name if state is not None else gang.name
        return {"apiVersion": "v1", "kind": "Pod", "namespace": gang.namespace, "name": name, "uid": uid}
