"""Gang preemption: a gang whose quorum fits nowhere preempts as one unit (KEP-5710's semantics).

kube-scheduler v1.37's workload-aware preemption (framework/preemption/podgrouppreemption.go) treats
the whole cluster as one domain and the pod group as one preemptor; we follow its rules:

- Who may be a victim: a placed pod of strictly lower priority than the gang (never equal or higher,
  so two gangs can never evict each other in turn, and a gang that preempted is never preempted back
  by the gang it displaced), under the same tenancy rule as single-pod preemption (preemption.py). A
  victim in a gang is a unit with its whole gang: every placed member, on any node, goes together;
  a gang with a member that may not be preempted, or with a member still being bound, is no
  candidate at all, so that no victim gang is ever left partly running.
- Which victims: kube removes every candidate, checks that the group then fits, and gives victims
  back ("reprieves") one by one, the most important first (higher priority; a gang before a lone
  pod; the bigger; the earlier started), those whose eviction would break a PodDisruptionBudget
  before the others, so that they are taken last. We do the same with arithmetic over the node
  arrays first: starting from the free room of every node the gang could use (the profile's filters
  other than the resource fit, run once on the pod without requests), the least important units are
  taken off (budget-breaking ones last) until the copies of the quorum's request that fit reach the
  quorum, then the taken ones are reprieved, most important first, while the quorum still fits.
  Every step recomputes only the rows the unit touches (numpy over those rows; no loop over nodes).
  The choice is then checked by placing the quorum for real (the profile's cycle, with the victims
  off the nodes: SchedulerCache.without, every member assumed in turn and forgotten after; each
  member tries the nodes the earlier ones landed on first, so that the gang is packed). When even
  every candidate leaves too few copies, the verdict comes from the same arrays. When the
  arithmetic cannot see what keeps the gang out (managed GPUs, host ports, pod anti-affinity, a
  required placement domain), kube's own order is used: every candidate off, the quorum placed
  (packed), the units reprieved while no node the quorum lands on would be overcommitted, and the
  outcome checked.
- Cost: one walk over the placed pods (integer compares; O(pods), as kube lists every possible
  victim), one vectorised pass over the nodes, then numpy over the rows of the few units taken or
  given back, and one placement of the quorum; the cyclic collector is paused while the plan is made
  (benchmarks/gang_preemption.py). Nothing of this runs for pods or gangs that fit.
- What is done: every member of the quorum is nominated to the node the check placed it on (the
  room is held for it as for a single preemptor, and `nominatedNodeName` is written), the victims
  get the DisruptionTarget condition, a Preempted event and are deleted (outbox Evictions, once per
  member with the victims on its node), and the gang waits; once the victims are gone its next
  attempt places it whole on the nominated nodes (cycle.Framework tries a nominated node first).
  While victims of its preemption are still there, the gang does not preempt again.
- What is said: the gang's Unschedulable message ends with kube's `preemption:` part: why it may
  not preempt (`not eligible due to preemptionPolicy=Never.`), that nothing may be preempted for it
  (`No preemption victims found for incoming preemptor`), the filters' verdict with every candidate
  off (`0/8 nodes are available: 8 Insufficient nvidia.com/gpu.`), that victims of its last
  preemption are still leaving (`not eligible due to a terminating pod on the nominated node.`), or,
  when it preempted, `found a placement for podgroup, preempting N victims`.
- The gang's preemption policy (v1.37's PodGroupPreemptionPolicy): `Never` when its PodGroup says
  so (`spec.preemptionPolicy`, or the annotation `ai-scheduler.io/preemption-policy` on a
  PodGroup of any API), when any member pod carries that annotation (gangs declared by labels), or
  when a member's own `spec.preemptionPolicy` is Never (kube, without the gate, takes the members').
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ai_scheduler.cache.gangs import PREEMPTION_POLICY_ANNOTATION, Gang
from ai_scheduler.cache.gpus import gpu_request
from ai_scheduler.cache.records import PODS, PodRecord
from ai_scheduler.messages import echo
from ai_scheduler.scheduler.framework.plugins.resource_fit import TOO_MANY_PODS, insufficient
from ai_scheduler.scheduler.framework.runtime import Decision, Framework, fit_error_message, resourceless
from ai_scheduler.scheduler.preemption import (
    NOT_ELIGIBLE_NEVER,
    NOT_ELIGIBLE_TERMINATING,
    NOT_HELPFUL,
    POST_FILTER_PREFIX,
    Preemptor,
)
from ai_scheduler.scheduler.victims import Plan

# kube-scheduler's words for a pod group (podgrouppreemption.go).
NO_GROUP_VICTIMS = "No preemption victims found for incoming preemptor"
PREEMPTING = "found a placement for podgroup, preempting {} victims"
POLICIES = ("Never", "PreemptLowerPriority")


_NO_ROWS = np.zeros(0, dtype=np.intp)
_NO_DEMAND = np.zeros((0, 0), dtype=np.int64)
_NOT_STARTED = "~"  # after any digit: later than every RFC 3339 time


@dataclass(slots=True)
class Unit:
    """Pods evicted together: a lone pod, or a placed gang whole (with the node each is on)."""

    pods: list[PodRecord]
    nodes: list[str]
    priority: int
    is_gang: bool
    start: str  # the earliest status.startTime among its pods (RFC 3339, UTC: compares as time)
    violations: int = 0  # its pods whose eviction breaks a PodDisruptionBudget
    # Filled only for the units the arithmetic looks at: the row of each pod's node (-1: no row) and,
    # per pod, what it holds in the planning columns.
    rows: np.ndarray = field(default_factory=lambda: _NO_ROWS)
    demand: np.ndarray = field(default_factory=lambda: _NO_DEMAND)

    def importance(self) -> tuple[int, int, int, str]:
        """Sort key, most important first: kube's MoreImportantVictim (a pod not started yet is the
        latest: it sorts after every time)."""
        return (-self.priority, -int(self.is_gang), -len(self.pods), self.start or _NOT_STARTED)


@dataclass(slots=True)
class GangVerdict:
    """What the gang's PostFilter found: victims and a node for each quorum member, or why not."""

    message: str  # the `preemption: ...` part of the gang's Unschedulable message
    victims: list[Unit] = field(default_factory=list)
    nominations: list[tuple[PodRecord, str]] = field(default_factory=list)

    @property
    def preempts(self) -> bool:
        return bool(self.nominations)


Placements = list[tuple[PodRecord, Decision]]


class GangPreemptor:
    """PostFilter for a gang; shares the single-pod Preemptor's cache, budgets, outbox and metrics."""

    def __init__(self, preemptor: Preemptor) -> None:
        self.preemptor = preemptor
        self.cache = preemptor.cache
        self.log = preemptor.log
        # gang key -> the uids of the victims of its last preemption, while any of them is still there
        self._ongoing: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------ eligibility
    def policy_refusal(self, gang: Gang, members: Sequence[PodRecord]) -> str:
        """Why the gang may not preempt at all ('' if it may), in kube's words."""
        spec = gang.podgroup if gang.podgroup is not None else gang.native
        declared = spec.preemption_policy if spec is not None else ""
        for pod in members:
            value = pod.annotations.get(PREEMPTION_POLICY_ANNOTATION)
            if value is not None and value not in POLICIES:
                return (
                    f"annotation {PREEMPTION_POLICY_ANNOTATION} of {pod.key} must be one of "
                    f"{', '.join(POLICIES)}, got {echo(value)}"
                )
            declared = declared or ("Never" if value == "Never" else "")
        if declared == "Never" or any(not pod.preempts for pod in members):
            return NOT_ELIGIBLE_NEVER
        return ""

    def _ongoing_preemption(self, gang: Gang, members: Sequence[PodRecord]) -> bool:
        """Whether victims of this gang's last preemption are still on their nodes (still leaving)."""
        victims = self._ongoing.get(gang.key)
        if victims is None:
            return False
        for uid in victims:
            state = self.cache.pod_state(uid)
            if state is not None and state.node:
                return True
        del self._ongoing[gang.key]
        return False

    def _candidates(self, gang: Gang, first: PodRecord) -> list[Unit]:
        """Every unit that may be preempted for the gang, each whole.

        One pass over the placed pods, a dict walk with integer compares (the cache keeps a finished
        pod on no node, so a placed pod is never terminal); what costs more (rows, demands) is
        computed later, only for the units the planner looks at. No pass at all when no placed pod of
        the gang's group has a lower priority (the tenancy's count per group and priority, as the
        single-pod PostFilter asks): under a standing queue of waiting gangs that pass, over every pod
        the cache knows (the waiting ones too), was the largest part of a failed gang attempt."""
        cache, preemptor = self.cache, self.preemptor
        who = preemptor.eligibility(first, set())  # no resources reclaimed: by priority (and group)
        if not preemptor.may_find_victims(who.group, first.priority):
            return []
        pods = cache.pods
        gangs = preemptor.gangs.gangs
        gang_keys = preemptor.gangs._gang_of
        # Without users in the config every pod is in no group: priority alone decides (_eligible).
        tenancy_matters = bool(preemptor.tenancy.config.users)
        eligible = preemptor._eligible
        seen: set[str] = set(gang.members)  # its own placed members are never victims
        below = first.priority
        units: list[Unit] = []
        for uid, state in pods.items():
            node = state.node
            if not node or state.assumed or uid in seen:
                continue
            victim = state.record
            if victim.priority >= below or victim.deleting:
                continue
            if tenancy_matters and eligible(who, victim) is None:
                continue
            key = gang_keys.get(uid)
            victim_gang = gangs.get(key) if key else None
            if victim_gang is None:
                units.append(Unit([victim], [node], victim.priority, False, victim.started))
                continue
            members = victim_gang.members
            seen.update(members)
            # The gang whole, or not at all: a member that may not be preempted, or one still being
            # bound, keeps every member (taking the rest would leave part of the gang running).
            taken: list[PodRecord] = []
            nodes: list[str] = []
            priority, start, whole = victim.priority, victim.started, True
            for member_uid in members:
                member_state = pods.get(member_uid)
                if member_state is None or not member_state.node:
                    continue
                pod = member_state.record
                if (
                    member_state.assumed
                    or pod.priority >= below
                    or pod.deleting
                    or (tenancy_matters and eligible(who, pod) is None)
                ):
                    whole = False
                    break
                taken.append(pod)
                nodes.append(member_state.node)
                priority = max(priority, pod.priority)
                if pod.started and (not start or pod.started < start):  # "": not started, the latest
                    start = pod.started
            if whole:
                units.append(Unit(taken, nodes, priority, True, start))
        return units

    def _node(self, pod: PodRecord) -> str:
        state = self.cache.pod_state(pod.uid)
        return state.node if state is not None else ""

    def _fill(self, unit: Unit, names: list[str]) -> None:
        """The unit's rows and its demand in the planning columns (`names`), once."""
        if unit.demand.shape[0]:
            return
        row_of = self.cache.row_of
        unit.rows = np.array([row_of(node) for node in unit.nodes], dtype=np.intp)
        unit.demand = np.array(
            [[1 if r == PODS else pod.requests.get(r, 0) for r in names] for pod in unit.pods], dtype=np.int64
        )

    # ------------------------------------------------------------------ choosing
    def post_filter(
        self,
        gang: Gang,
        members: Sequence[PodRecord],
        needed: int,
        framework: Framework,
        masks: Sequence[np.ndarray | None] = (None,),
    ) -> GangVerdict:
        """The gang's PostFilter after its quorum (`needed` of `members`, most important first) fit
        nowhere: victims and a node for each quorum member, or why preemption cannot help. `masks`:
        the placement domains the gang may use (None: the whole cluster)."""
        self.preemptor.metrics.preemption_attempts.inc()
        refusal = self.policy_refusal(gang, members)
        if refusal:
            return GangVerdict(POST_FILTER_PREFIX + refusal)
        if self._ongoing_preemption(gang, members):
            return GangVerdict(POST_FILTER_PREFIX + NOT_ELIGIBLE_TERMINATING)
        for pod in members:  # a fresh plan: earlier nominations did not get the gang placed
            self.preemptor.release(pod.uid)
        # Thousands of small objects, all reachable until the verdict: with the cyclic collector on, a
        # full collection over the cache's records would often run in the middle of them (it tripled
        # the decision's time at 5,000 nodes in benchmarks/gang_preemption.py).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._plan(gang, members, needed, framework, masks)
        finally:
            if enabled:
                gc.enable()

    def _plan(
        self,
        gang: Gang,
        members: Sequence[PodRecord],
        needed: int,
        framework: Framework,
        masks: Sequence[np.ndarray | None],
    ) -> GangVerdict:
        units = self._candidates(gang, members[0])
        if not units:
            return GangVerdict(POST_FILTER_PREFIX + NO_GROUP_VICTIMS)
        units.sort(key=Unit.importance)
        budgets = self.preemptor.budgets
        violating = budgets.violating([p for u in units for p in u.pods]) if not budgets.empty else set()
        if violating:
            for unit in units:
                unit.violations = sum(pod.uid in violating for pod in unit.pods)
        quorum = list(members[:needed])
        whole_cluster = all(mask is None for mask in masks)
        chosen = self._by_arithmetic(quorum, units, framework) if whole_cluster else None
        if isinstance(chosen, str):  # not even every candidate would make room: the filters' verdict
            return GangVerdict(POST_FILTER_PREFIX + chosen)
        if chosen is not None:
            placements = self._check(quorum, chosen, framework, masks)
            if placements is not None:
                return self._verdict(chosen, placements)
        return self._by_placement(quorum, units, framework, masks)

    def _verdict(self, victims: list[Unit], placements: Placements) -> GangVerdict:
        if not victims:  # it fits without evicting anyone: what keeps it out is no pod (a reservation)
            total = self.cache.node_count
            return GangVerdict(POST_FILTER_PREFIX + fit_error_message(total, {NOT_HELPFUL: total}))
        count = sum(len(unit.pods) for unit in victims)
        return GangVerdict(
            POST_FILTER_PREFIX + PREEMPTING.format(count),
            victims,
            [(pod, decision.node or "") for pod, decision in placements],
        )

    def _planning_columns(self, quorum: Sequence[PodRecord]) -> tuple[list[int], np.ndarray] | None:
        """The columns the quorum needs and one member's need in each (the most any member asks)."""
        need: dict[str, int] = {PODS: 1}
        for pod in quorum:
            for resource, amount in pod.requests.items():
                if amount > 0:
                    need[resource] = max(need.get(resource, 0), amount)
        cols = [self.cache.column(r) for r in need]
        if any(c < 0 for c in cols):
            return None  # a resource no node has: the placement check says so in the filters' words
        return cols, np.array(list(need.values()), dtype=np.int64)

    def _by_arithmetic(
        self, quorum: Sequence[PodRecord], units: list[Unit], framework: Framework
    ) -> list[Unit] | str | None:
        """Victims from the node arrays alone, when only resources keep the quorum out; None when the
        arithmetic cannot decide (the placement check then follows kube's own order); when not even
        every candidate makes room, the filters' verdict with them all off (kube's FitError of the
        member that finds no node: every node the gang could use is full by then)."""
        cache = self.cache
        if any(gpu_request(pod)[0] is not None for pod in quorum):
            return None  # managed GPUs are devices, not a column
        planning = self._planning_columns(quorum)
        if planning is None:
            return None
        cols, need = planning
        _unresolvable, removable = self.preemptor._shadows(framework)
        usable = np.zeros(cache.rows, dtype=bool)
        rows, refused = removable.feasible_rows(resourceless(quorum[0]))
        usable[rows] = True
        free = cache.allocatable[:, cols] - cache.requested[:, cols] - cache.nominated[:, cols]
        names = self._names(cols)

        def copies(at: np.ndarray) -> np.ndarray:
            fits = np.min(free[at] // need, axis=1) if at.shape[0] else np.zeros(0, dtype=np.int64)
            return np.where(usable[at], np.clip(fits, 0, None), 0)

        held = copies(np.arange(cache.rows))
        capacity = int(held.sum())
        wanted = len(quorum)
        if capacity >= wanted:
            return None  # resources are not what keeps it out

        def apply(unit: Unit, sign: int) -> int:
            """Take the unit off (sign 1) or give it back (-1); the capacity it changes."""
            nonlocal capacity
            ok = unit.rows >= 0
            np.add.at(free, unit.rows[ok], sign * unit.demand[ok])
            at = np.unique(unit.rows[ok])
            fresh = copies(at)
            change = int(fresh.sum() - held[at].sum())
            held[at] = fresh
            capacity += change
            return change

        # Least important first (`units` come most important first); those that break a budget last.
        backwards = units[::-1]
        order = [u for u in backwards if not u.violations] + [u for u in backwards if u.violations]
        taken: list[Unit] = []
        for unit in order:
            self._fill(unit, names)
            if not usable[unit.rows[unit.rows >= 0]].any():
                continue  # frees nothing the gang can use
            apply(unit, 1)
            taken.append(unit)
            if capacity >= wanted:
                break
        if capacity < wanted:  # every unit that frees room the gang can use is off
            # Every usable node holds all the copies it can: what it lacks for one more.
            left = free[rows] - held[rows][:, None] * need
            reasons = dict(refused)
            for i, name in enumerate(names):
                short = int(np.count_nonzero(left[:, i] < need[i]))
                if short:
                    reason = TOO_MANY_PODS if name == PODS else insufficient(name)
                    reasons[reason] = reasons.get(reason, 0) + short
            return fit_error_message(cache.node_count, reasons)
        # Reprieve: those that break a budget first, then the others, the most important first.
        kept: list[Unit] = []
        for unit in sorted(taken, key=lambda u: (u.violations == 0, u.importance())):
            apply(unit, -1)
            if capacity >= wanted:
                continue
            apply(unit, 1)
            kept.append(unit)
        return sorted(kept, key=Unit.importance)

    def _names(self, cols: list[int]) -> list[str]:
        by_col = {c: r for r, c in self.cache.resource_index.items()}
        return [by_col[c] for c in cols]

    def _by_placement(
        self,
        quorum: Sequence[PodRecord],
        units: list[Unit],
        framework: Framework,
        masks: Sequence[np.ndarray | None],
    ) -> GangVerdict:
        """kube's order: every candidate off, the quorum placed, units reprieved while the nodes the
        quorum lands on stay within their allocatable, and the outcome checked."""
        cache = self.cache
        everyone = [pod for unit in units for pod in unit.pods]
        for unit in units:
            if not unit.rows.shape[0]:
                unit.rows = np.array([cache.row_of(node) for node in unit.nodes], dtype=np.intp)
        with cache.without(everyone):
            placements, failure = self._place(quorum, framework, masks, keep=True)
            if placements is None:
                detail = failure.message if failure is not None else "not enough room"
                return GangVerdict(POST_FILTER_PREFIX + detail)
            try:
                landed = sorted({cache.row_of(decision.node or "") for _, decision in placements})
                index = {row: i for i, row in enumerate(landed)}
                allocatable = cache.allocatable[landed]
                load = (cache.requested + cache.nominated)[landed]
                over_before = load > allocatable
                kept: list[Unit] = []
                for unit in sorted(units, key=lambda u: (u.violations == 0, u.importance())):
                    hits = [(pod, index[r]) for pod, r in zip(unit.pods, unit.rows.tolist(), strict=True)
                            if r in index]
                    if not hits:
                        continue  # on nodes the quorum does not use: given back as it was
                    after = load.copy()
                    for pod, i in hits:
                        after[i] += self._usage(pod)
                    if bool(((after > allocatable) & ~over_before).any()):
                        kept.append(unit)
                    else:
                        load = after
            finally:
                for pod, _ in placements:
                    cache.forget(pod.uid)
        touching = [u for u in units if any(r in index for r in u.rows.tolist())]
        for victims in (kept, touching, units):
            checked = self._check(quorum, victims, framework, masks)
            if checked is not None:
                return self._verdict(sorted(victims, key=Unit.importance), checked)
        return GangVerdict(POST_FILTER_PREFIX + NO_GROUP_VICTIMS)

    def _usage(self, pod: PodRecord) -> np.ndarray:
        """What a pod holds in every column of the cache."""
        cache = self.cache
        row = np.zeros(cache.requested.shape[1], dtype=np.int64)
        for resource, amount in {**pod.requests, PODS: 1}.items():
            col = cache.column(resource)
            if col >= 0:
                row[col] += amount
        return row

    def _check(
        self,
        quorum: Sequence[PodRecord],
        victims: list[Unit],
        framework: Framework,
        masks: Sequence[np.ndarray | None],
    ) -> Placements | None:
        """The quorum placed for real with `victims` off their nodes (nothing stays assumed), or None."""
        with self.cache.without([pod for unit in victims for pod in unit.pods]):
            placements, _ = self._place(quorum, framework, masks, keep=False)
        return placements

    def _place(
        self,
        quorum: Sequence[PodRecord],
        framework: Framework,
        masks: Sequence[np.ndarray | None],
        *,
        keep: bool,
    ) -> tuple[Placements | None, Decision | None]:
        """Place the quorum in the first domain that takes it whole (each member assumed in turn); the
        assumptions are forgotten unless `keep` (the caller forgets them).

        Each member tries the nodes the members before it landed on first: packed, the gang touches
        fewer nodes, so that fewer victims stand in its way (with every candidate off, the profile's
        scores alone would spread it over nodes that all have room)."""
        cache = self.cache
        failure: Decision | None = None
        for mask in masks:
            placements: Placements = []
            landed = np.zeros(cache.rows, dtype=bool)
            for pod in quorum:
                decision = None
                if placements:
                    near = framework.schedule(pod, landed if mask is None else landed & mask)
                    decision = near if near.node is not None else None
                if decision is None:
                    decision = framework.schedule(pod, mask)
                if decision.node is None:
                    failure = failure or decision
                    break
                cache.assume(pod, decision.node, decision.gpu_ids)
                placements.append((pod, decision))
                landed[cache.row_of(decision.node)] = True
            whole = len(placements) == len(quorum)
            if not (whole and keep):
                for pod, _ in placements:
                    cache.forget(pod.uid)
            if whole:
                return placements, None
        return None, failure

    # ------------------------------------------------------------------ acting
    def execute(self, gang: Gang, leader: PodRecord, verdict: GangVerdict) -> None:
        """Nominate every quorum member to its node, hold the room, and evict the victims: each member's
        eviction intent carries the victims on its own node (the rest go with the first)."""
        preemptor = self.preemptor
        victims = [pod for unit in verdict.victims for pod in unit.pods]
        preemptor.metrics.preemption_victims.observe(len(victims))
        by_node: dict[str, list[PodRecord]] = {}
        for pod in victims:
            by_node.setdefault(self._node(pod), []).append(pod)
        plans: list[tuple[PodRecord, Plan]] = []
        for pod, node in verdict.nominations:
            preemptor.hold(pod, node)
            plans.append((pod, Plan(node, victims=by_node.pop(node, []))))
        if by_node and plans:
            plans[0][1].victims.extend(p for rest in by_node.values() for p in rest)
        self._ongoing[gang.key] = frozenset(pod.uid for pod in victims)
        self.log.info(
            "gang.preemption",
            gang=gang.key,
            preemptor=leader.key,
            priority=leader.priority,
            nominated={pod.key: node for pod, node in verdict.nominations},
            pdb_violations=sum(unit.violations for unit in verdict.victims),
            victim_units=len(verdict.victims),
            victims=[
                {"pod": pod.key, "priority": pod.priority, "node": self._node(pod)} for pod in victims
            ],
        )
        for pod, plan in plans:
            preemptor.evictions.evict(pod, plan)

    def forget(self, gang_key: str) -> None:
        """The gang was placed (or went away): its preemption is over."""
        self._ongoing.pop(gang_key, None)
