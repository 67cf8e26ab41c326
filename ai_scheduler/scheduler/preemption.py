"""PostFilter: preemption and reclaim, for a pod that fits nowhere.

Who may be a victim:
- by priority: a pod of the preemptor's own group (or of no group) whose
  spec.priority is strictly lower — never equal or higher, so preemptions
  cannot cascade;
- by reclaim: when the preemptor's group is below its `min` for a resource
  the pod needs, pods of other groups that are above their own `min` for it
  (they are borrowing), lowest priority first, whatever their priority: a
  group above its min can never reclaim in return, so this cannot cascade
  either.
A victim in a gang takes its whole gang with it (all placed members, on any
node); a gang with a member that may not be preempted is not touched.

Which victims on a node: kube-scheduler's DefaultPreemption
(selectVictimsOnNode). Every eligible pod is removed; if the pod still does not
fit, the node cannot help. Otherwise they are given back ("reprieved") one by
one while the pod still fits: first those whose eviction would break a
PodDisruptionBudget (cache.disruption: they are taken last), then the others;
within each, our reclaim victims after the priority ones, and the most
important pods (highest priority, then earliest started) first. A gang is
reprieved or taken whole.

Which node: kube's pickOneNodeForPreemption — fewest victims that break a
budget, then the lowest highest-victim priority, then the lowest sum of
priorities, then the fewest victims, then the latest start among the
highest-priority victims; the first node in table order on a full tie.

When preemption cannot help, `post_filter()` says why in kube's words, which
the daemon appends to the Unschedulable message as kube-scheduler's
PostFilter does (` preemption: 0/3 nodes are available: 3 No preemption
victims found for incoming pod.`, ` preemption: not eligible due to
preemptionPolicy=Never.`). Room is made for resources and pod slots by
arithmetic on what the node has free (ResourceRoom); a node that host ports,
pod anti-affinity (the pod's or an existing pod's) or topology spread skew
keep out is tried by running the profile's filters again on it with the
victims taken off in the cache (FilterRoom), as kube does on a copy of the
node; so is a node whose DRA devices are taken (the victims' claims reserved
for them alone count as freed there, which kube-scheduler cannot do); a node
that any other filter refuses, or that fails pod affinity or a spread
constraint's missing label, is one where preemption "is not helpful".
As in kube, only pods on the node itself are victims: a zone's anti-affinity
held by a pod on another node of the zone is not removed. A pod already
nominated waits for the victims of its earlier preemption to leave ("a
terminating pod on the nominated node") rather than preempting again.

The victims get the `DisruptionTarget` condition and a `Preempted` event
naming the preemptor and are deleted gracefully; the preemptor is nominated to
the node, whose freed room is held for it (other pods see it as taken) until it
is placed. Both the condition's message and the event speak as the
preemptor's profile (its schedulerName), as kube-scheduler's do.

What the pass over the placed pods reads is derived once per run: the preemptor's tenant and quota
amounts come from the attempt's CycleState (framework/cycle_state.py), each victim's tenant from its
charge (Tenancy.charged_tenant) and its amounts from its PodInfo, and whether a group uses more than its
min of what the preemptor reclaims is worked out once per group (`Eligibility`), not per victim.

Every `post_filter()` is one PostFilter run, counted in
`scheduler_preemption_attempts_total` whatever it finds; every preemption
carried out observes its number of victims in `scheduler_preemption_victims`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.gpus import gpu_request
from ai_scheduler.cache.records import PODS, PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.framework.cycle_state import CycleState
from ai_scheduler.scheduler.framework.plugins.dynamic_resources import (
    CANNOT_SCHEDULE_EXTENDED,
    NOT_AVAILABLE,
    DynamicResources,
)
from ai_scheduler.scheduler.framework.plugins.inter_pod_affinity import AFFINITY_RULES, InterPodAffinityFilter
from ai_scheduler.scheduler.framework.plugins.node_ports import NodePorts
from ai_scheduler.scheduler.framework.plugins.pod_topology_spread import (
    MISSING_LABEL,
    PodTopologySpreadFilter,
)
from ai_scheduler.scheduler.framework.plugins.resource_fit import (
    TOO_MANY_PODS,
    NodeResourcesFit,
    insufficient,
)
from ai_scheduler.scheduler.framework.runtime import Decision, Framework, fit_error_message
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Clock, Evictions
from ai_scheduler.scheduler.victims import Plan, VictimKind, start_seconds

# The filters that removing pods from a node can satisfy (kube's Unschedulable, as opposed to
# UnschedulableAndUnresolvable): resources and pod slots, host ports, pod anti-affinity (the pod's and
# the existing pods'), topology spread skew; and, beyond kube-scheduler (whose DynamicResources cannot
# take part in preemption), DRA devices held by claims reserved for the victims alone.
REMOVABLE = (NodeResourcesFit, NodePorts, InterPodAffinityFilter, PodTopologySpreadFilter, DynamicResources)
# Their reasons that removing pods cannot change.
UNRESOLVABLE = frozenset({AFFINITY_RULES, MISSING_LABEL, NOT_AVAILABLE, CANNOT_SCHEDULE_EXTENDED})
NOMINATION_SECONDS = 300.0  # a nomination not used by then is dropped, and the room freed for others
RECENT_VICTIM_SECONDS = 300.0  # a preempted workload's pods keep off the node it was preempted from


def workload_of(pod: PodRecord) -> str:
    """What a victim's replacement shares with it: its owner (a Job, a ReplicaSet), else its own name."""
    return f"{pod.namespace}/{','.join(sorted(pod.owners)) or pod.name}"


# kube-scheduler's words for a PostFilter that found nothing (pkg/scheduler/framework/preemption and
# plugins/defaultpreemption); the daemon puts "preemption: " before them.
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
POST_FILTER_PREFIX = "preemption: "
@dataclass(slots=True)
class VictimGroup:
    """Pods evicted together: a pod on the node, with the rest of its gang wherever they run."""

    pods: list[PodRecord]  # pods[0] is the one on the node that made it a candidate
    kind: VictimKind
    frees: dict[str, int]  # what its pods on the node give back there


@dataclass(slots=True)
class Eligibility:
    """Who may be a victim of one preemptor in one PostFilter run (`Preemptor._eligible`): the
    preemptor's group and spec.priority, the resources it may reclaim, and, per group asked about, the
    ones of those that the group uses above its min (worked out once per group)."""

    group: str
    priority: int
    reclaiming: set[str]
    above_min: dict[str, set[str]] = field(default_factory=dict)


@dataclass(slots=True)
class Selection:
    """selectVictimsOnNode's answer: the victims (most important first) and how many of them break a
    PodDisruptionBudget; or, when the node cannot help, why (`reasons`, in the filters' words)."""

    victims: list[VictimGroup] = field(default_factory=list)
    violations: int = 0
    reasons: tuple[str, ...] = ()


def importance(pod: PodRecord) -> tuple[int, float]:
    """Sort key, most important first: kube's MoreImportantPod (higher priority, then started earlier)."""
    return (-pod.priority, start_seconds(pod))


class Room(Protocol):
    """What selectVictimsOnNode asks of a node while it removes and gives back victims."""

    def remove(self, group: VictimGroup) -> None: ...

    def restore(self, group: VictimGroup) -> None: ...

    def blocked(self) -> tuple[str, ...]:
        """Why the pod still does not fit with the groups removed so far (() when it fits)."""
        ...


class ResourceRoom:
    """A node where only resources (pod slots included) keep the pod out: arithmetic on what is free."""

    def __init__(self, need: dict[str, int], free: dict[str, int]) -> None:
        self.need = need
        self.room = dict(free)

    def remove(self, group: VictimGroup) -> None:
        for r, amount in group.frees.items():
            self.room[r] += amount

    def restore(self, group: VictimGroup) -> None:
        for r, amount in group.frees.items():
            self.room[r] -= amount

    def blocked(self) -> tuple[str, ...]:
        short = [r for r, amount in self.need.items() if self.room[r] < amount]
        return tuple(TOO_MANY_PODS if r == PODS else insufficient(r) for r in short)


class FilterRoom:
    """A node that a filter other than NodeResourcesFit refuses (host ports, pod anti-affinity, topology
    spread): the profile's filters are run again on the node with the removed groups' pods taken off it
    in the cache (SchedulerCache.without), as kube-scheduler's selectVictimsOnNode runs its filters on a
    copy of the node without them."""

    def __init__(self, cache: SchedulerCache, framework: Framework, pod: PodRecord, row: int) -> None:
        self.cache = cache
        self.framework = framework
        self.pod = pod
        self.node = cache.row_names[row]
        self.mask = np.zeros(cache.rows, dtype=bool)
        self.mask[row] = True
        self.removed: dict[int, VictimGroup] = {}

    def remove(self, group: VictimGroup) -> None:
        self.removed[id(group)] = group

    def restore(self, group: VictimGroup) -> None:
        self.removed.pop(id(group), None)

    def blocked(self) -> tuple[str, ...]:
        cache = self.cache
        off = []
        for group in self.removed.values():
            for victim in group.pods:
                state = cache.pod_state(victim.uid)
                if state is not None and state.node == self.node:
                    off.append(victim)
        with cache.without(off):
            rows, reasons = self.framework.feasible_rows(self.pod, self.mask)
        if rows.shape[0]:
            return ()
        # Reasons that no eviction can change (kube's UnschedulableAndUnresolvable) say "not helpful".
        return tuple(sorted({NOT_HELPFUL if r in UNRESOLVABLE else r for r in reasons}))


def select_victims(groups: Sequence[VictimGroup], budgets: DisruptionBudgets, room: Room) -> Selection:
    """The fewest, least important victims on one node that make `room` for the pod.

    kube-scheduler's selectVictimsOnNode: remove every candidate; if the pod still does not fit, the
    node cannot help. Then reprieve them while the pod fits: those that would break a budget first, so
    that they are taken last, then the others; reclaim victims after priority ones; the most important
    first.
    """
    if not groups:
        return Selection(reasons=(NO_VICTIMS,))
    for group in groups:
        room.remove(group)
    blocked = room.blocked()
    if blocked:
        return Selection(reasons=blocked)
    ordered = sorted(groups, key=lambda g: importance(g.pods[0]))
    violating = budgets.violating([pod for group in ordered for pod in group.pods])
    breaks = [sum(pod.uid in violating for pod in group.pods) for group in ordered]
    order = sorted(
        range(len(ordered)),
        key=lambda i: (not breaks[i], ordered[i].kind is VictimKind.RECLAIM, importance(ordered[i].pods[0])),
    )
    selection = Selection()
    for i in order:
        group = ordered[i]
        room.restore(group)
        if not room.blocked():
            continue  # reprieved
        room.remove(group)
        selection.victims.append(group)
        selection.violations += breaks[i]
    selection.victims.sort(key=lambda g: importance(g.pods[0]))
    return selection


def pick_one_node(plans: Sequence[Plan]) -> Plan | None:
    """kube-scheduler's pickOneNodeForPreemption: the plan of least `cost()`, the first one on a tie."""
    return min(plans, key=Plan.cost, default=None)


@dataclass(slots=True)
class Verdict:
    """What PostFilter found: a plan, or kube-scheduler's words for why preemption cannot help."""

    plan: Plan | None = None
    message: str = ""  # "" when a plan was found; otherwise starts with "preemption: "


class Preemptor:
    def __init__(
        self,
        cache: SchedulerCache,
        tenancy: Tenancy,
        gangs: GangRegistry,
        evictions: Evictions,
        logger: JsonLogger,
        metrics: Metrics,
        budgets: DisruptionBudgets,
        clock: Clock = time.monotonic,
    ) -> None:
        self.cache = cache
        self.budgets = budgets
        self.tenancy = tenancy
        self.gangs = gangs
        self.evictions = evictions  # how a decided preemption is carried out (outbox.py)
        self.clock = clock
        self.log = logger
        self.metrics = metrics
        self._nominated_at: dict[str, float] = {}
        self._recent_victims: dict[str, tuple[str, float]] = {}  # workload -> (node, when)
        self._shadow: tuple[Framework, Framework, Framework] | None = None  # a profile, and its _shadows

    # ------------------------------------------------------------------ choosing
    def post_filter(
        self, pod: PodRecord, framework: Framework, decision: Decision, cycle: CycleState | None = None
    ) -> Verdict:
        """PostFilter after the cycle `decision` found no node: the best node and victims for `pod`, or
        why preemption cannot help (kube-scheduler's DefaultPreemption message). `cycle`: the attempt's
        CycleState (one is made when none is given)."""
        self.metrics.preemption_attempts.inc()
        if not pod.preempts:
            return Verdict(message=POST_FILTER_PREFIX + NOT_ELIGIBLE_NEVER)
        if pod.uid in self.cache.nominations:  # the victims of its earlier preemption are still leaving
            return Verdict(message=POST_FILTER_PREFIX + NOT_ELIGIBLE_TERMINATING)
        total = self.cache.node_count
        if decision.error:  # PreFilter refused the pod: no node can help
            return Verdict(message=POST_FILTER_PREFIX + fit_error_message(total, {NOT_HELPFUL: total}))
        if cycle is None:
            cycle = CycleState(pod, self.tenancy)
        group = cycle.tenant.group
        who = Eligibility(group, pod.priority, self._below_min(group, cycle.amounts))
        by_node: dict[str, list[tuple[PodRecord, VictimKind]]] = {}
        if who.reclaiming or self.may_find_victims(group, pod.priority):
            for state in self.cache.pods.values():
                if state.node and not state.assumed:
                    kind = self._eligible(who, state.record)
                    if kind is not None:
                        by_node.setdefault(state.node, []).append((state.record, kind))
        unresolvable, removable = self._shadows(framework)
        shadow = cycle.resourceless()
        rows, _ = unresolvable.feasible_rows(shadow)
        reasons: dict[str, int] = {}
        if rows.shape[0] < total:
            reasons[NOT_HELPFUL] = total - int(rows.shape[0])
        # Of those, the nodes that only resources keep out, where the arithmetic of ResourceRoom will do.
        helpful = np.zeros(self.cache.rows, dtype=bool)
        helpful[rows] = True
        passing, _ = removable.feasible_rows(shadow, helpful) if rows.shape[0] else (rows, {})
        resource_only = np.zeros(self.cache.rows, dtype=bool)
        resource_only[passing] = True
        plans: list[Plan] = []
        if not by_node:  # no victim anywhere: every node preemption could help lacks one (no pass over them)
            if rows.shape[0]:
                reasons[NO_VICTIMS] = int(rows.shape[0])
            return Verdict(message=POST_FILTER_PREFIX + fit_error_message(total, reasons))
        wants_gpus = gpu_request(pod)[0] is not None
        for row in rows.tolist():
            candidates = by_node.get(self.cache.row_names[row])
            if not candidates:
                reasons[NO_VICTIMS] = reasons.get(NO_VICTIMS, 0) + 1
                continue
            # Managed GPUs are devices, not a column: room for them is checked by the filters themselves.
            arithmetic = resource_only[row] and not wants_gpus
            room = None if arithmetic else FilterRoom(self.cache, framework, pod, int(row))
            plan, why = self._plan_on(pod, int(row), candidates, who, room)
            if plan is None:
                for reason in why:
                    reasons[reason] = reasons.get(reason, 0) + 1
            else:
                plans.append(plan)
        best = pick_one_node(plans)
        if best is not None:
            return Verdict(best)
        return Verdict(message=POST_FILTER_PREFIX + fit_error_message(total, reasons))

    def _shadows(self, framework: Framework) -> tuple[Framework, Framework]:
        """The profile without the filters that removing pods can satisfy (REMOVABLE): a node it refuses
        is one where preemption is not helpful; and the profile without NodeResourcesFit alone: a node it
        takes is one where only resources keep the pod out. Both share the profile's static results."""
        held = self._shadow
        if held is None or held[0] is not framework:
            made = []
            for kinds in (REMOVABLE, (NodeResourcesFit,)):
                filters = [f for f in framework.filters if not isinstance(f, kinds)]
                shadow = Framework(framework.scheduler_name, filters, [], self.cache)
                shadow.static = framework.static
                made.append(shadow)
            held = self._shadow = (framework, made[0], made[1])
        return held[1], held[2]

    def may_find_victims(self, group: str, priority: int) -> bool:
        """Whether some placed pod may be a victim by priority (reclaim aside) of a pod of `group` with
        spec.priority `priority`: one of its own group (or, for a pod of no group, of no group) with a
        lower one. Read from the tenancy's count per group and priority, so that a pod with no victims
        costs no pass over the pods."""
        lowest = self.tenancy.lowest_priority(group)
        return lowest is not None and lowest < priority

    def _below_min(self, group_name: str, wanted: Mapping[str, int]) -> set[str]:
        """Resources of `wanted` for which the group is under its guaranteed min (it may reclaim them)."""
        group = self.tenancy.config.groups.get(group_name)
        if group is None:
            return set()
        used = self.tenancy.usage.get(("group", group_name), {})
        return {r for r, floor in group.min.items() if wanted.get(r) and used.get(r, 0) < floor}

    def eligibility(self, pod: PodRecord, reclaiming: set[str]) -> Eligibility:
        """Who may be a victim of `pod` (reclaiming `reclaiming`), for one pass over the placed pods."""
        return Eligibility(self.tenancy.tenant_of(pod).group, pod.priority, reclaiming)

    def _eligible(self, who: Eligibility, victim: PodRecord) -> VictimKind | None:
        """Why `victim`, a placed pod, may be preempted by the preemptor `who` describes; None if not."""
        if victim.deleting or victim.terminal:
            return None
        mine = who.group
        theirs = self.tenancy.charged_tenant(victim).group
        if theirs == mine and victim.priority < who.priority:
            return VictimKind.PRIORITY
        if who.reclaiming and theirs != mine and theirs in self.tenancy.config.groups:
            above = who.above_min.get(theirs)
            if above is None:
                floor = self.tenancy.config.groups[theirs].min
                used = self.tenancy.usage.get(("group", theirs), {})
                above = {r for r in who.reclaiming if used.get(r, 0) > floor.get(r, 0)}
                who.above_min[theirs] = above
            if above:
                amounts = self.tenancy.amounts(victim)
                if any(amounts.get(r) for r in above):
                    return VictimKind.RECLAIM
        if not theirs and not mine and victim.priority < who.priority:
            return VictimKind.PRIORITY
        return None

    def _plan_on(
        self,
        pod: PodRecord,
        row: int,
        candidates: list[tuple[PodRecord, VictimKind]],
        who: Eligibility,
        room: Room | None,
    ) -> tuple[Plan | None, tuple[str, ...]]:
        """The plan for one node, or None and why it cannot help; `room` None: only resources matter."""
        cache = self.cache
        node = cache.row_names[row]
        need = {**pod.requests, PODS: 1}
        cols = {r: cache.column(r) for r in need}
        if any(c < 0 for c in cols.values()):  # a resource no node has
            return None, tuple(insufficient(r) for r, c in cols.items() if c < 0)
        used = cache.requested[row] + cache.nominated[row]
        free = {r: int(cache.allocatable[row, c] - used[c]) for r, c in cols.items()}
        groups: list[VictimGroup] = []
        taken: set[str] = set()
        for victim, kind in candidates:
            if victim.uid in taken:
                continue
            members = self._whole_gang(victim, who)
            if members is None:
                continue
            frees = dict.fromkeys(need, 0)
            for member in members:
                taken.add(member.uid)
                member_state = cache.pod_state(member.uid)
                if member_state is not None and member_state.node == node:
                    for r in need:
                        frees[r] += member.requests.get(r, 0) if r != PODS else 1
            groups.append(VictimGroup([victim, *(m for m in members if m.uid != victim.uid)], kind, frees))
        selection = select_victims(groups, self.budgets, room or ResourceRoom(need, free))
        if selection.reasons:
            return None, selection.reasons
        plan = Plan(node, violations=selection.violations)
        for group in selection.victims:
            plan.victims.extend(group.pods)
            if group.kind is VictimKind.RECLAIM:
                plan.reason = VictimKind.RECLAIM
        return plan, ()


    def _whole_gang(self, victim: PodRecord, who: Eligibility) -> list[PodRecord] | None:
        """The victim with its whole gang, or None if some member may not be preempted."""
        gang = self.gangs.gang_of(victim)
        if gang is None:
            return [victim]
        members = []
        for uid in gang.members:
            state = self.cache.pod_state(uid)
            if state is None or not state.node or state.assumed:
                continue
            if self._eligible(who, state.record) is None:
                return None
            members.append(state.record)
        return members

    # ------------------------------------------------------------------ acting
    def execute(self, pod: PodRecord, plan: Plan) -> None:
        self.metrics.preemption_victims.observe(len(plan.victims))
        self.cache.nominate(pod, plan.node)
        now = self.clock()
        self._nominated_at[pod.uid] = now
        victims: list[dict[str, Any]] = []
        for victim in plan.victims:
            state = self.cache.pod_state(victim.uid)
            self._recent_victims[workload_of(victim)] = (state.node if state else plan.node, now)
            victims.append(
                {"pod": victim.key, "priority": victim.priority, "node": state.node if state else ""}
            )
        self.log.info(
            "preemption",
            preemptor=pod.key,
            priority=pod.priority,
            node=plan.node,
            reason=plan.reason.value,
            pdb_violations=plan.violations,
            victims=victims,
        )
        self.evictions.evict(pod, plan)

    def hold(self, pod: PodRecord, node: str) -> None:
        """Nominate `pod` to `node` (a gang member, gang_preemption.py): its room there is held for it
        until it is placed, or until the nomination expires unused."""
        self.cache.nominate(pod, node)
        self._nominated_at[pod.uid] = self.clock()

    def release(self, uid: str) -> None:
        """Drop the pod's nomination, its held room back to everyone."""
        self.cache.clear_nomination(uid)
        self._nominated_at.pop(uid, None)

    def avoid(self, pod: PodRecord) -> str:
        """The node this pod's workload was preempted from in the last minutes ('' if none): placing it
        there again would only invite the same preemption."""
        recent = self._recent_victims.get(workload_of(pod))
        if recent is None or self.clock() - recent[1] > RECENT_VICTIM_SECONDS:
            return ""
        return recent[0]

    def expire(self) -> None:
        """Drop nominations that were never used, so their room goes back to everyone."""
        now = self.clock()
        for workload, (_node, since) in list(self._recent_victims.items()):
            if now - since > RECENT_VICTIM_SECONDS:
                del self._recent_victims[workload]
        for uid, since in list(self._nominated_at.items()):
            if uid not in self.cache.nominations:
                del self._nominated_at[uid]
            elif now - since > NOMINATION_SECONDS:
                self.cache.clear_nomination(uid)
                del self._nominated_at[uid]
