"""Who a pod belongs to (user, group, queue), what each of them uses, and their quotas.

A pod's owner comes from its namespace, which RBAC protects: the config maps
namespaces to users and users to groups. The pod label `ai-scheduler.io/user`
counts only in namespaces the config trusts to set it. Usage is what placed
pods (bound or assumed, not finished) request, kept per user, group and queue
as the cache attaches and detaches pods, so a quota check is a dictionary
lookup. The spec.priority of the placed pods is counted per group too, so that
preemption knows without a pass over the pods when a group holds no pod it
could preempt (`lowest_priority`). Quotas are two-level: a group's `max` (and `min`, the guarantee that
reclaim restores) over the users' own `max`; a queue may have a quota too.

Managed GPUs count under the annotation that asks for them: `gpu-count` in
devices, `gpu-memory` in bytes, and `gpu-fraction` in thousandths of a GPU
(rounded down, at least 1m: the device, and so its memory, is not known
before placement), so `ai-scheduler.io/gpu-fraction: "2"` in a quota allows
fractions adding up to two GPUs. GPUs a pod gets through DRA ResourceClaims count
as `nvidia.com/gpu` (cache/dra_gpus.py: the claims' allocated GPU devices, or what
they ask for before allocation).

A pod's tenant and quota amounts are derived once per version of the pod and kept in its PodInfo
(cache/pod_info.py): the tenant under the tenancy's `epoch` (a new one per config, so a reload
resolves every tenant again), the amounts under the DRA state's version for a pod with ResourceClaims
(their GPUs move with the claims) and for good otherwise. A placed pod's charge keeps the tenant and
amounts it was charged with, which preemption reads for its victims (`charged_tenant`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ai_scheduler.cache.dra import DraState
from ai_scheduler.cache.dra_gpus import GPU_RESOURCE, pod_gpus
from ai_scheduler.cache.gpus import (
    FRACTION_UNITS,
    GPU_COUNT_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    gpu_request,
)
from ai_scheduler.cache.pod_info import PURE
from ai_scheduler.cache.records import PodRecord, shared_map
from ai_scheduler.config import Config
from ai_scheduler.config.schema import GroupSpec, QueueSpec, UserSpec
from ai_scheduler.messages import echo
from ai_scheduler.quantity import format_units

USER_LABEL = "ai-scheduler.io/user"
QUEUE_LABEL = "ai-scheduler.io/queue"
DEFAULT_QUEUE = "default"
# Quota names for managed GPUs are the pod annotations that request them.
GPU_COUNT = GPU_COUNT_ANNOTATION
GPU_MEMORY = GPU_MEMORY_ANNOTATION
GPU_FRACTION = GPU_FRACTION_ANNOTATION  # in thousandths (quantity.MILLI_RESOURCES)
# Distinct tenants shared between pods (one object each); past this many, sharing starts again.
MAX_SHARED_TENANTS = 10_000


@dataclass(frozen=True, slots=True)
class Tenant:
    user: str
    group: str
    queue: str
    error: str = ""  # e.g. a queue label naming no configured queue


@dataclass(frozen=True, slots=True)
class QuotaState:
    """A group's, user's or queue's quota (resource -> units, as the config states them; empty: none)
    and what its placed pods use now."""

    kind: str  # "group", "user" or "queue"
    name: str
    used: dict[str, int]
    min: dict[str, int]
    max: dict[str, int]
    spec: GroupSpec | UserSpec | QueueSpec  # as the config states it


def quota_amounts(pod: PodRecord, dra: DraState | None = None) -> dict[str, int]:
    """What a pod counts against quotas: its resource requests plus its managed GPUs, and with `dra` the
    GPUs its ResourceClaims hold or ask for (as `nvidia.com/gpu`)."""
    amounts = dict(pod.requests)
    claimed = pod_gpus(dra, pod)
    if claimed:
        amounts[GPU_RESOURCE] = amounts.get(GPU_RESOURCE, 0) + claimed
    request, _ = gpu_request(pod)
    if request is not None:
        if request.count:
            amounts[GPU_COUNT] = request.count
        elif request.fraction:
            amounts[GPU_FRACTION] = max(request.fraction * 1000 // FRACTION_UNITS, 1)
        else:
            amounts[GPU_MEMORY] = request.memory
    return amounts


def show_amount(resource: str, amount: int) -> str:
    """An amount as quotas are written: 8, 500m, 40Gi (GPU memory as memory)."""
    return format_units("memory" if resource == GPU_MEMORY else resource, amount)


class Tenancy:
    """Identity, usage and quota checks; the cache reports every pod it starts or stops counting."""

    def __init__(self, config: Config) -> None:
        self.config = config
        # The cache's DRA state (set by the core): GPUs held through ResourceClaims count as nvidia.com/gpu.
        self.dra: DraState | None = None
        self.usage: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)  # (kind, name) -> amounts
        # uid -> (tenant, amounts: shared and read-only, spec.priority) of each placed pod.
        self._charged: dict[str, tuple[Tenant, Mapping[str, int], int]] = {}
        # The tenants in the pods' PodInfo were resolved under this config if stamped with this epoch (a
        # reload starts a new one): only a change of the pod (a new record) or of the config changes one.
        self.epoch = object()
        self._shared_tenants: dict[Tenant, Tenant] = {}  # one object per distinct tenant
        self._unlimited: dict[Tenant, bool] = {}  # `unlimited`, per tenant under this config
        # group -> spec.priority -> placed pods of the group with it (what preemption may take by priority).
        self._priorities: dict[str, dict[int, int]] = defaultdict(dict)

    def reconfigure(self, config: Config, placed: Iterable[PodRecord]) -> None:
        """A new config may move namespaces between users: count everything again."""
        self.config = config
        self.usage.clear()
        self._charged.clear()
        self._priorities.clear()
        self.epoch = object()
        self._shared_tenants.clear()
        self._unlimited.clear()
        for pod in placed:
            self.charge(pod)

    # ------------------------------------------------------------------ identity
    def tenant_of(self, pod: PodRecord) -> Tenant:
        """The pod's tenant: resolved once per version of the pod and config, kept in its PodInfo."""
        info = pod.info
        tenant = info.tenant
        if tenant is not None and info.epoch is self.epoch:
            return tenant
        tenant = self._resolve(pod)
        if len(self._shared_tenants) > MAX_SHARED_TENANTS:  # queue labels are the users' to write
            self._shared_tenants.clear()
        tenant = self._shared_tenants.setdefault(tenant, tenant)  # the pods of one tenant share it
        info.tenant, info.epoch = tenant, self.epoch
        return tenant

    def charged_tenant(self, pod: PodRecord) -> Tenant:
        """The tenant a placed pod is charged to, as its charge holds it (nothing to look up in the pod);
        `tenant_of` for a pod not charged."""
        charged = self._charged.get(pod.uid)
        return charged[0] if charged is not None else self.tenant_of(pod)

    def _resolve(self, pod: PodRecord) -> Tenant:
        config = self.config
        namespace = config.namespaces.get(pod.namespace)
        user = namespace.user if namespace else ""
        labelled = pod.labels.get(USER_LABEL)
        if labelled and namespace and namespace.trust_user_label and labelled in config.users:
            user = labelled
        group = config.users[user].group if user in config.users else ""
        queue = (
            pod.labels.get(QUEUE_LABEL) or (namespace.default_queue if namespace else None) or DEFAULT_QUEUE
        )
        error = ""
        if config.queues and queue != DEFAULT_QUEUE and config.queue(queue) is None:
            error = f"queue {echo(queue)} named by label {QUEUE_LABEL} is not configured"
        return Tenant(user, group, queue, error)

    # ------------------------------------------------------------------ usage
    def charge(self, pod: PodRecord) -> None:
        if pod.uid in self._charged:
            return
        tenant = self.tenant_of(pod)
        amounts = self.amounts(pod)  # shared: pods of one template charge one map
        self._charged[pod.uid] = (tenant, amounts, pod.priority)
        self._add(tenant, amounts, 1)
        counts = self._priorities[tenant.group]
        counts[pod.priority] = counts.get(pod.priority, 0) + 1

    def amounts(self, pod: PodRecord) -> Mapping[str, int]:
        """What the pod counts against quotas (`quota_amounts`, its DRA GPUs included): built once per
        version of the pod and kept in its PodInfo, shared by the pods of one template (read-only); for
        a pod with ResourceClaims, once per version of the DRA state as well."""
        info = pod.info
        amounts = info.amounts
        at = PURE if not pod.resource_claims or self.dra is None else self.dra.version
        if amounts is not None and info.amounts_at == at:
            return amounts
        amounts = info.amounts = shared_map(quota_amounts(pod, self.dra))
        info.amounts_at = at
        return amounts

    def release(self, uid: str) -> None:
        charged = self._charged.pop(uid, None)
        if charged is not None:
            self._add(charged[0], charged[1], -1)
            priority = charged[2]
            counts = self._priorities[charged[0].group]
            left = counts[priority] - 1
            if left:
                counts[priority] = left
            else:
                del counts[priority]

    def lowest_priority(self, group: str) -> int | None:
        """The lowest spec.priority among the placed pods of `group` ('' : of no group); None if none."""
        counts = self._priorities.get(group)
        return min(counts) if counts else None  # distinct priorities: a handful

    def _add(self, tenant: Tenant, amounts: Mapping[str, int], sign: int) -> None:
        for key in (("user", tenant.user), ("group", tenant.group), ("queue", tenant.queue)):
            if not key[1]:
                continue
            used = self.usage[key]
            for resource, amount in amounts.items():
                used[resource] = used.get(resource, 0) + sign * amount

    # ------------------------------------------------------------------ quotas
    def admission_refusal(self, pod: PodRecord, amounts: Mapping[str, int]) -> str:
        """Why the pod (or a gang, with its quorum's total `amounts`) may not be placed for its owner now:
        its tenant's error (an unknown queue, ...), or the max that `amounts` more would break; ''."""
        tenant = self.tenant_of(pod)
        return tenant.error or self.quota_refusal(tenant, amounts)

    def quota_refusal(self, tenant: Tenant, amounts: Mapping[str, int]) -> str:
        """Why placing `amounts` more for this tenant would break a max, or ''.

        Message as `exceeds quota of group vision: nvidia.com/gpu 16/16` (in use / limit).
        """
        for kind, name, limit in self._limits(tenant):
            used = self.usage.get((kind, name), {})
            over = [
                f"{resource} {show_amount(resource, used.get(resource, 0))}/{show_amount(resource, cap)}"
                for resource, cap in limit.items()
                if amounts.get(resource, 0) and used.get(resource, 0) + amounts[resource] > cap
            ]
            if over:
                return f"exceeds quota of {kind} {name}: {', '.join(over)}"
        return ""

    def unlimited(self, tenant: Tenant) -> bool:
        """Whether no max applies to the tenant (its user, group and queue): no quota ever refuses it."""
        unlimited = self._unlimited.get(tenant)
        if unlimited is None:
            unlimited = self._unlimited[tenant] = not any(limit for _, _, limit in self._limits(tenant))
        return unlimited

    def _limits(self, tenant: Tenant) -> list[tuple[str, str, Mapping[str, int]]]:
        """The maxima that apply to the tenant: (kind, name, max) of its user, group and queue."""
        config = self.config
        limits: list[tuple[str, str, Mapping[str, int]]] = []
        if tenant.user in config.users:
            limits.append(("user", tenant.user, config.users[tenant.user].max))
        if tenant.group in config.groups:
            limits.append(("group", tenant.group, config.groups[tenant.group].max))
        queue = config.queue(tenant.queue) if config.queues else None
        if queue is not None:
            limits.append(("queue", tenant.queue, queue.quota))
        return limits

    def used(self, kind: str, name: str) -> dict[str, int]:
        return dict(self.usage.get((kind, name), {}))

    def quotas(self, every_queue: bool = False) -> list[QuotaState]:
        """Every configured group and user, and every queue with a quota (`every_queue`: all of them):
        its bounds and what its placed pods use (for metrics and the visibility API)."""
        config = self.config
        states = [
            QuotaState("group", name, self.used("group", name), dict(group.min), dict(group.max), group)
            for name, group in sorted(config.groups.items())
        ]
        states += [
            QuotaState("user", name, self.used("user", name), {}, dict(user.max), user)
            for name, user in sorted(config.users.items())
        ]
        states += [
            QuotaState("queue", queue.name, self.used("queue", queue.name), {}, dict(queue.quota), queue)
            for queue in config.queues if queue.quota or every_queue
        ]
        return states
