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

Which node: the one where the pod fits after removing the fewest, lowest
priority victims — kube-scheduler's order: lowest highest-victim priority,
then fewest victims, then lowest sum of priorities. The victims get the
`DisruptionTarget` condition and a `Preempted` event naming the preemptor and
are deleted gracefully; the preemptor is nominated to the node, whose freed
room is held for it (other pods see it as taken) until it is placed. Both the
condition's message and the event speak as the preemptor's profile (its
schedulerName), as kube-scheduler's do.

Every `plan()` is one PostFilter run, counted in
`scheduler_preemption_attempts_total` whatever it finds; every preemption
carried out observes its number of victims in `scheduler_preemption_victims`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.records import PODS, PodRecord
from ai_scheduler.cache.tenancy import Tenancy, quota_amounts
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.scheduler.cycle import Framework, resourceless
from ai_scheduler.scheduler.feedback import Feedback, pod_reference
from ai_scheduler.scheduler.metrics import Metrics

NOMINATION_SECONDS = 300.0  # a nomination not used by then is dropped, and the room freed for others
RECENT_VICTIM_SECONDS = 300.0  # a preempted workload's pods keep off the node it was preempted from


def workload_of(pod: PodRecord) -> str:
    """What a victim's replacement shares with it: its owner (a Job, a ReplicaSet), else its own name."""
    return f"{pod.namespace}/{','.join(sorted(pod.owners)) or pod.name}"


@dataclass(slots=True)
class Plan:
    node: str
    victims: list[PodRecord] = field(default_factory=list)
    reason: str = "priority"

    def cost(self) -> tuple[int, int, int]:
        priorities = [v.priority for v in self.victims]
        return (max(priorities, default=-(2**31)), len(priorities), sum(priorities))


class Preemptor:
    def __init__(
        self,
        cache: SchedulerCache,
        tenancy: Tenancy,
        gangs: GangRegistry,
        client: KubeClient,
        feedback: Feedback,
        logger: JsonLogger,
        metrics: Metrics,
    ) -> None:
        self.cache = cache
        self.tenancy = tenancy
        self.gangs = gangs
        self.client = client
        self.feedback = feedback
        self.log = logger
        self.metrics = metrics
        self._nominated_at: dict[str, float] = {}
        self._recent_victims: dict[str, tuple[str, float]] = {}  # workload -> (node, when)
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ choosing
    def plan(self, pod: PodRecord, framework: Framework) -> Plan | None:
        """The best node and victims for `pod`, or None when preemption cannot help."""
        self.metrics.preemption_attempts.inc()
        if not pod.preempts or pod.uid in self.cache.nominations:
            return None  # preemptionPolicy Never, or victims of an earlier preemption are still leaving
        reclaiming = self._below_min(pod)
        by_node: dict[str, list[tuple[PodRecord, str]]] = {}
        for state in self.cache.pods.values():
            if state.node and not state.assumed:
                kind = self._eligible(pod, state.record, reclaiming)
                if kind:
                    by_node.setdefault(state.node, []).append((state.record, kind))
        if not by_node:
            return None
        rows, _ = framework.feasible_rows(resourceless(pod))  # nodes that fail for resources alone
        best: Plan | None = None
        for row in rows.tolist():
            candidates = by_node.get(self.cache.row_names[row])
            if not candidates:
                continue
            plan = self._plan_on(pod, int(row), candidates, reclaiming)
            if plan is not None and (best is None or plan.cost() < best.cost()):
                best = plan
        return best

    def _below_min(self, pod: PodRecord) -> set[str]:
        """Resources for which the pod's group is under its guaranteed min (it may reclaim them)."""
        tenant = self.tenancy.tenant_of(pod)
        group = self.tenancy.config.groups.get(tenant.group)
        if group is None:
            return set()
        used = self.tenancy.used("group", tenant.group)
        wanted = quota_amounts(pod)
        return {r for r, floor in group.min.items() if wanted.get(r) and used.get(r, 0) < floor}

    def _eligible(self, preemptor: PodRecord, victim: PodRecord, reclaiming: set[str]) -> str:
        """'priority', 'reclaim' or '' (may not be preempted by this pod)."""
        if victim.deleting or victim.terminal:
            return ""
        mine = self.tenancy.tenant_of(preemptor).group
        theirs = self.tenancy.tenant_of(victim).group
        if theirs == mine and victim.priority < preemptor.priority:
            return "priority"
        if reclaiming and theirs != mine and theirs in self.tenancy.config.groups:
            floor = self.tenancy.config.groups[theirs].min
            used = self.tenancy.used("group", theirs)
            amounts = quota_amounts(victim)
            if any(amounts.get(r) and used.get(r, 0) > floor.get(r, 0) for r in reclaiming):
                return "reclaim"
        if not theirs and not mine and victim.priority < preemptor.priority:
            return "priority"
        return ""

    def _plan_on(
        self, pod: PodRecord, row: int, candidates: list[tuple[PodRecord, str]], reclaiming: set[str]
    ) -> Plan | None:
        cache = self.cache
        node = cache.row_names[row]
        need = {**pod.requests, PODS: 1}
        cols = {r: cache.column(r) for r in need}
        if any(c < 0 for c in cols.values()):
            return None
        used = cache.requested[row] + cache.nominated[row]
        free = {r: int(cache.allocatable[row, c] - used[c]) for r, c in cols.items()}
        plan = Plan(node)
        taken: set[str] = set()
        # Reclaimed pods first, then by ascending priority, newest first among equals.
        candidates = sorted(
            candidates, key=lambda item: (item[1] != "reclaim", item[0].priority, item[0].creation)
        )
        for victim, kind in candidates:
            if all(free[r] >= need[r] for r in need):
                break
            if victim.uid in taken:
                continue
            group = self._whole_gang(victim, pod, reclaiming)
            if group is None:
                continue
            for member in group:
                taken.add(member.uid)
                plan.victims.append(member)
                if kind == "reclaim":
                    plan.reason = "reclaim"
                member_state = cache.pod_state(member.uid)
                if member_state is not None and member_state.node == node:
                    for r in need:
                        free[r] += member.requests.get(r, 0) if r != PODS else 1
        if not all(free[r] >= need[r] for r in need):
            return None
        return plan

    def _whole_gang(
        self, victim: PodRecord, preemptor: PodRecord, reclaiming: set[str]
    ) -> list[PodRecord] | None:
        """The victim with its whole gang, or None if some member may not be preempted."""
        gang = self.gangs.gang_of(victim)
        if gang is None:
            return [victim]
        members = []
        for uid in gang.members:
            state = self.cache.pod_state(uid)
            if state is None or not state.node or state.assumed:
                continue
            if not self._eligible(preemptor, state.record, reclaiming):
                return None
            members.append(state.record)
        return members

    # ------------------------------------------------------------------ acting
    def execute(self, pod: PodRecord, plan: Plan) -> None:
        self.metrics.preemption_victims.observe(len(plan.victims))
        self.cache.nominate(pod, plan.node)
        now = time.monotonic()
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
            reason=plan.reason,
            victims=victims,
        )
        task = asyncio.create_task(self._evict(pod, plan))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _evict(self, pod: PodRecord, plan: Plan) -> None:
        message = f"{pod.scheduler_name}: preempting to accommodate a higher priority pod {pod.key}"
        if plan.reason == "reclaim":
            message = f"{pod.scheduler_name}: reclaiming the guaranteed quota of {pod.key}'s group"
        await self.client.patch_pod_status(
            pod.namespace, pod.name, {"status": {"nominatedNodeName": plan.node}}
        )
        for victim in plan.victims:
            condition = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": message,
                "lastTransitionTime": rfc3339(millis=False),
            }
            await self.client.patch_pod_status(
                victim.namespace, victim.name, {"status": {"conditions": [condition]}}
            )
            self.feedback.event(
                pod_reference(victim),
                "Normal",
                "Preempted",
                f"Preempted by {pod.key} on node {plan.node}",
                component=pod.scheduler_name,
            )
            result = await self.client.delete_pod(victim.namespace, victim.name)
            if not result.ok and result.status != 404:
                self.log.warning(
                    "preemption.delete_failed", victim=victim.key, code=result.status, error=result.message
                )

    def avoid(self, pod: PodRecord) -> str:
        """The node this pod's workload was preempted from in the last minutes ('' if none): placing it
        there again would only invite the same preemption."""
        recent = self._recent_victims.get(workload_of(pod))
        if recent is None or time.monotonic() - recent[1] > RECENT_VICTIM_SECONDS:
            return ""
        return recent[0]

    def expire(self) -> None:
        """Drop nominations that were never used, so their room goes back to everyone."""
        now = time.monotonic()
        for workload, (_node, since) in list(self._recent_victims.items()):
            if now - since > RECENT_VICTIM_SECONDS:
                del self._recent_victims[workload]
        for uid, since in list(self._nominated_at.items()):
            if uid not in self.cache.nominations:
                del self._nominated_at[uid]
            elif now - since > NOMINATION_SECONDS:
                self.cache.clear_nomination(uid)
                del self._nominated_at[uid]

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
