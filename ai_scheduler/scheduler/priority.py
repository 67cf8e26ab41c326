"""Priority policies: a weighted sum of named factors, each normalised to [0, 1].

The active policy (config `policies`, `activePolicy`) gives each factor a
weight; a negative weight prefers the small end of that factor. Factors:

- userLevel, groupLevel: the owner's level / the highest level configured;
- taskPriority: spec.priority, placed between the lowest and highest
  priority of the pods now waiting;
- waitingTime: time since the pod first entered the queue / maxWaitSeconds,
  capped at 1;
- jobSize: the whole job's GPUs (a gang counts all minMember pods), or its cpu
  cores for jobs without GPUs, over the largest waiting job of the same kind;
- estimatedRuntime: the pod's run time from the core's run-time hook
  (runtimes.py: the annotation `ai-scheduler.io/estimated-runtime`, `90m`,
  `2h`, `1h30m`, else a learned prediction's median when the config's
  `prediction` section asks for one) over the longest waiting estimate; a pod
  with neither counts as the longest;
- fairShare: Slurm's 2^(-U/S) for the owner's group, U its share of the
  decayed GPU usage (cpu for clusters without GPUs), S its share of the
  configured shares; usage decays with fairShareHalfLifeSeconds;
- queueLevel: 1 for the lowest (first served) level, down to 0 for the highest
  (of the pod's effective level: a promoted pod counts at the top level).

Queues order first: a lower queue level is always served first; queues of one
level are ordered by their own fair share (usage over weight); the policy's
score orders pods within that. Scores move with time and usage, so they are
recomputed every `priorityRefreshSeconds` and only the pods whose place
changed are moved in the queue.

Levels alone would starve: a pod of a higher level waits for as long as lower
levels have work, and waitingTime ages it only among its own level. A queue's
`promoteAfterSeconds` bounds that wait: once a pod of the queue has waited
that long (since it entered the queue, `QueuedPod.initial_attempt`, on the
same clock as waitingTime), it is ordered as if its queue had the top (lowest
configured) level: its effective level is the top one, and its queue's fair
share is taken among the top level's queues, as a peer of them. Inside the top
level the usual keys then decide; a queue that has little recent usage (as
starved queues do) comes first by fair share. Promotion is a pure function of
the clock, so it needs no timer of its own: a pod that crosses the bound takes
its new place at the next refresh (at most `priorityRefreshSeconds` later), or
earlier whenever the queue computes its key again (a retry, a cluster event).
`Priority.promoted` says so, and the decision log line carries it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import ESTIMATE_ANNOTATION as ESTIMATE_ANNOTATION
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import GPU_COUNT, GPU_FRACTION, GPU_MEMORY, Tenancy
from ai_scheduler.config import Config
from ai_scheduler.quantity import MAX_DURATION_SECONDS as MAX_DURATION_SECONDS
from ai_scheduler.quantity import parse_duration as parse_duration  # with the key: records refuse bad ones
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.runtimes import AnnotatedRunTimes, RunTime, RunTimes


def job_gpus(amounts: Mapping[str, int]) -> float:
    """GPUs a pod asks for: device-plugin and managed whole GPUs, memory shares as fractions of 80 GiB,
    and fractions (in thousandths) as they are."""
    return (
        amounts.get("nvidia.com/gpu", 0)
        + amounts.get(GPU_COUNT, 0)
        + amounts.get(GPU_MEMORY, 0) / (80 * 2**30)
        + amounts.get(GPU_FRACTION, 0) / 1000
    )


@dataclass(slots=True)
class Priority:
    score: float
    factors: dict[str, float]
    queue_level: int = 0  # the level the pod is ordered at: its queue's, or the top one once promoted
    queue_fairness: float = 1.0
    promoted: bool = False  # waited past its queue's promoteAfterSeconds: ordered at the top level
    run_time: RunTime | None = None  # what the run-time hook said when it was computed


@dataclass(slots=True)
class _Stats:
    """Normalisers taken over the pods waiting at the last refresh."""

    priority_low: int = 0
    priority_high: int = 0
    largest_gpu_job: float = 1.0
    largest_cpu_job: float = 1.0
    longest_estimate: float = 1.0


# The normalisers each factor reads; a factor absent here reads none.
_NORMALISERS = {
    "taskPriority": ("priority_low", "priority_high"),
    "jobSize": ("largest_gpu_job", "largest_cpu_job"),
    "estimatedRuntime": ("longest_estimate",),
}
# Factors whose value for a waiting pod changes only with the normalisers (or a reload): not with the clock
# (waitingTime, a queue's promotion), usage (fairShare, queues' fair share) or other pods (jobSize counts a
# gang's members as they come). A pod's run time is asked once and kept (runtimes.py).
_STEADY_FACTORS = frozenset({"userLevel", "groupLevel", "taskPriority", "estimatedRuntime"})
# PriorityEngine._view: the policy, its weights as pairs, whether it reads job sizes or run times, and the
# normalisers it reads.
_PolicyView = tuple[object, tuple[tuple[str, float], ...], bool, tuple[str, ...]]


@dataclass(slots=True)
class _Usage:
    """Usage decayed with a half-life, per group and per queue."""

    groups: dict[str, float] = field(default_factory=dict)
    queues: dict[str, float] = field(default_factory=dict)
    updated: float = 0.0


class PriorityEngine:
    def __init__(
        self,
        config: Config,
        tenancy: Tenancy,
        cache: SchedulerCache,
        job_members: Callable[[PodRecord], int],
        clock: Callable[[], float] = time.monotonic,
        runtimes: Callable[[], RunTimes] = AnnotatedRunTimes,
    ) -> None:
        self.config = config
        self.runtimes = runtimes  # the core's run-time hook, as it is now (a reload may replace it)
        self.tenancy = tenancy
        self.cache = cache
        self.job_members = job_members
        self._clock = clock
        self._stats = _Stats()
        self._usage = _Usage(updated=clock())
        self._last: dict[str, Priority] = {}
        # Whether some key in the queue may differ from what it would be now (see `keys_may_move`): set by
        # a reload and by normalisers that moved. The queue starts empty: no key to be stale.
        self._keys_stale = False
        # What every evaluation reads of the active policy, taken once per policy object (a reload makes a
        # new one): its weights as pairs, whether it reads job sizes or run times (the normalisers of
        # jobSize and estimatedRuntime: else a pod need not widen them), and the normalisers it reads.
        self._view: _PolicyView = (None, (), False, ())
        self._keyed: tuple[float, ...] = self._normalisers()  # what the queue's keys were computed with

    # ------------------------------------------------------------------ the queue's sort key
    def sort_key(self, qp: QueuedPod) -> tuple[Any, ...]:
        priority = self.evaluate(qp)
        return (
            priority.queue_level,
            -round(priority.queue_fairness, 3),
            -round(priority.score, 6),
            -qp.pod.priority,
        )

    def explain(self, uid: str) -> Priority | None:
        """The last computed priority of a pod, with its factor breakdown (for logs and tools)."""
        return self._last.get(uid)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, qp: QueuedPod) -> Priority:
        _, weights, sizes, _ = self._policy_view()
        pod = qp.pod
        run = self.run_time(pod)  # asked once per evaluation: the normalisers and the factor share it
        self._observe(pod, self._stats, run, sizes)
        if not self._keys_stale and self._normalisers() != self._keyed:
            self._keys_stale = True  # this pod widened them: the keys computed before are not current
        tenant = self.tenancy.tenant_of(pod)
        factors = {name: self._factor(name, qp, tenant, run) for name, _ in weights}
        score = sum(weight * factors[name] for name, weight in weights)
        level, promoted = self._effective_level(qp, tenant.queue)
        priority = Priority(score, factors, level, self._queue_fairness(tenant.queue, level), promoted, run)
        self._last[pod.uid] = priority
        return priority

    def _factor(self, name: str, qp: QueuedPod, tenant: Any, run: RunTime | None) -> float:
        config, stats, pod = self.config, self._stats, qp.pod
        if name == "userLevel":
            top = max((u.level for u in config.users.values()), default=0)
            user = config.users.get(tenant.user)
            return user.level / top if user is not None and top else 0.0
        if name == "groupLevel":
            top = max((g.level for g in config.groups.values()), default=0)
            group = config.groups.get(tenant.group)
            return group.level / top if group is not None and top else 0.0
        if name == "taskPriority":
            span = stats.priority_high - stats.priority_low
            return min(max((pod.priority - stats.priority_low) / span, 0.0), 1.0) if span else 0.0
        if name == "waitingTime":
            waited = self._clock() - qp.initial_attempt
            return min(max(waited / config.policy.max_wait_seconds, 0.0), 1.0)
        if name == "jobSize":
            gpus, cpus = self._job_size(pod)
            if gpus:
                return min(gpus / stats.largest_gpu_job, 1.0)
            return min(cpus / stats.largest_cpu_job, 1.0)
        if name == "estimatedRuntime":
            return 1.0 if run is None else min(run.median / stats.longest_estimate, 1.0)
        if name == "fairShare":
            return self._group_fairness(tenant.group)
        if name == "queueLevel":
            top = max((q.level for q in config.queues), default=0)
            level, _ = self._effective_level(qp, tenant.queue)
            return 1.0 - (level / top if top else 0.0)
        raise ValueError(f"unknown factor {name!r}")

    def run_time(self, pod: PodRecord) -> RunTime | None:
        """The pod's run time as the core's run-time hook knows it (its estimate, or a prediction)."""
        return self.runtimes().estimate(pod)

    def _policy_view(self) -> _PolicyView:
        """`_view` for the active policy, taken anew when it is another object."""
        policy = self.config.policy
        view = self._view
        if view[0] is not policy:
            weights = policy.weights
            reads = tuple(field_name for name in weights for field_name in _NORMALISERS.get(name, ()))
            sizes = "jobSize" in weights or "estimatedRuntime" in weights
            view = self._view = (policy, tuple(weights.items()), sizes, reads)
        return view

    def _observe(self, pod: PodRecord, stats: _Stats, run: RunTime | None, sizes: bool = True) -> None:
        """Widen the normalisers to include this pod (a pod arriving between refreshes is not clipped);
        those of job sizes and run times only when `sizes` (the policy reads them)."""
        stats.priority_low = min(stats.priority_low, pod.priority)
        stats.priority_high = max(stats.priority_high, pod.priority)
        if not sizes:
            return
        gpus, cpus = self._job_size(pod)
        if gpus:
            stats.largest_gpu_job = max(stats.largest_gpu_job, gpus)
        else:
            stats.largest_cpu_job = max(stats.largest_cpu_job, cpus)
        if run is not None:
            stats.longest_estimate = max(stats.longest_estimate, run.median)

    def _job_size(self, pod: PodRecord) -> tuple[float, float]:
        members = max(self.job_members(pod), 1)
        amounts = self.tenancy.amounts(pod)
        return job_gpus(amounts) * members, amounts.get("cpu", 0) / 1000 * members

    # ------------------------------------------------------------------ levels
    def _effective_level(self, qp: QueuedPod, queue_name: str) -> tuple[int, bool]:
        """The level the pod is ordered at, and whether it was promoted to it: its queue's level, or the
        top (lowest) configured level once it has waited its queue's `promoteAfterSeconds`."""
        spec = self.config.queue(queue_name) if self.config.queues else None
        if spec is None:
            return 0, False
        bound = spec.promote_after_seconds
        if bound is None:
            return spec.level, False
        top = min(q.level for q in self.config.queues)
        if spec.level > top and self._clock() - qp.initial_attempt >= bound:
            return top, True
        return spec.level, False

    # ------------------------------------------------------------------ fair share
    def usage_snapshot(self) -> dict[tuple[str, str], float]:
        """The decayed usage fair share orders by, by ("group" | "queue", name), as of the last refresh:
        what the daemon keeps in its accounting database so that a restart keeps the order."""
        usage = self._usage
        return {**{("group", n): u for n, u in usage.groups.items()},
                **{("queue", n): u for n, u in usage.queues.items()}}

    def restore_usage(self, usage: Mapping[tuple[str, str], float]) -> None:
        """Start from this decayed usage (a snapshot already decayed to now) instead of none; the keys of
        the waiting pods are retaken by the next refresh."""
        self._usage = _Usage(groups={n: u for (k, n), u in usage.items() if k == "group"},
                             queues={n: u for (k, n), u in usage.items() if k == "queue"},
                             updated=self._clock())
        self._keys_stale = True

    def _group_fairness(self, group: str) -> float:
        groups = self.config.groups
        if group not in groups:
            return 1.0
        total_share = sum(g.share for g in groups.values())
        total_usage = sum(self._usage.groups.values())
        share = groups[group].share / total_share if total_share else 1.0
        usage = self._usage.groups.get(group, 0.0) / total_usage if total_usage else 0.0
        return 2.0 ** (-usage / share) if share else 0.0

    def _queue_fairness(self, queue: str, level: int) -> float:
        """The queue's fair share among the queues of `level` (its own, or the top one for a promoted pod,
        where it counts as one more peer)."""
        spec = self.config.queue(queue) if self.config.queues else None
        if spec is None:
            return 1.0
        peers = [q for q in self.config.queues if q.level == level or q.name == spec.name]
        total_weight = sum(q.weight for q in peers)
        total_usage = sum(self._usage.queues.get(q.name, 0.0) for q in peers)
        share = spec.weight / total_weight if total_weight else 1.0
        usage = self._usage.queues.get(queue, 0.0) / total_usage if total_usage else 0.0
        fairness: float = 2.0 ** (-usage / share)  # typeshed: float ** float may be complex
        return fairness

    # ------------------------------------------------------------------ refresh
    def refresh(self, pending: list[QueuedPod]) -> None:
        """Integrate usage since the last refresh and retake the normalisers over the waiting pods."""
        now = self._clock()
        elapsed = max(now - self._usage.updated, 0.0)
        decay = 0.5 ** (elapsed / self.config.policy.fair_share_half_life_seconds)
        measure = self._usage_measure()
        for kind, bucket in (("group", self._usage.groups), ("queue", self._usage.queues)):
            for name in list(bucket):
                bucket[name] *= decay
            for (used_kind, name), amounts in self.tenancy.usage.items():
                if used_kind == kind and name:
                    bucket[name] = bucket.get(name, 0.0) + measure(amounts) * elapsed
        self._usage.updated = now
        stats = _Stats()
        weights = self.config.policy.weights
        if pending:
            priorities = [qp.pod.priority for qp in pending]
            stats.priority_low, stats.priority_high = min(priorities), max(priorities)
        if "jobSize" in weights or "estimatedRuntime" in weights:  # the others read none of what follows
            for qp in pending:
                self._observe(qp.pod, stats, self.run_time(qp.pod))
        self._stats = stats
        if self._normalisers() != self._keyed:
            self._keys_stale = True
        # Forget the pods no longer waiting: only those are touched (set arithmetic over the keys).
        last = self._last
        for uid in last.keys() - {qp.pod.uid for qp in pending}:
            del last[uid]

    def _normalisers(self) -> tuple[float, ...]:
        """The normalisers the active policy's factors read, as they are now."""
        stats = self._stats
        return tuple([getattr(stats, field_name) for field_name in self._policy_view()[3]])

    def keys_may_move(self) -> bool:
        """Whether a refresh may give some waiting pod another sort key than the one it has: always for a
        policy that reads the clock, usage or other pods, or with queues (their levels and fair shares
        move); otherwise only when the normalisers moved since the keys were computed (a pod widened them,
        or the refresh took them anew) or a reload came. When not, the refresh leaves the queue as it is:
        re-keying 10,000 waiting pods every `priorityRefreshSeconds` would change nothing."""
        config = self.config
        steady = not config.queues and all(
            name in _STEADY_FACTORS or not weight for name, weight in config.policy.weights.items()
        )
        return self._keys_stale or not steady

    def rekeyed(self) -> None:
        """The queue's keys were all computed again just now, with the normalisers as they are."""
        self._keyed = self._normalisers()
        self._keys_stale = False

    def _usage_measure(self) -> Callable[[dict[str, int]], float]:
        """GPUs where the cluster has any, else cpu cores: the scarce resource is what fair share counts."""
        has_gpus = any(job_gpus(amounts) for amounts in self.tenancy.usage.values())
        if has_gpus:
            return job_gpus
        return lambda amounts: amounts.get("cpu", 0) / 1000

    def reconfigure(self, config: Config) -> None:
        self.config = config
        self._keys_stale = True
