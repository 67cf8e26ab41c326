"""Pod data derived once: a pod's PodInfo (cache/pod_info.py) and an attempt's CycleState
(scheduler/framework/cycle_state.py).

One attempt of an unschedulable pod with preemption on, in a cluster of N placed pods: counting
wrappers around the real functions (each calls through; nothing is replaced) show that the pod's tenant
is resolved, its quota amounts built and its priority evaluated at most once in the attempt, whatever N,
and that preemption's pass over the placed pods (its eligibility check, by priority and by reclaim)
reads the tenants their charges hold and the amounts their PodInfo holds instead of deriving them
again. The PodInfo's own rules follow: one per version of the pod (a new record, a new PodInfo), its
tenant resolved again after a reload, its amounts shared by the pods of one template and, for a pod
with ResourceClaims, built again when the DRA state moved.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

from budgets import counting  # the guard's counting wrapper: the real function runs
from builders import (
    NVIDIA_DRIVER,
    Node,
    Pod,
    make_device_class,
    make_resource_claim,
    pod_claim,
)

from ai_scheduler.cache import tenancy as tenancy_module
from ai_scheduler.cache.dra import DEVICE_CLASS, RESOURCE_CLAIM, DraState
from ai_scheduler.cache.gpus import GPU_COUNT_ANNOTATION, gpu_request
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy, Tenant
from ai_scheduler.config import parse_config
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.queue import QueuedPod
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.framework.cycle_state import CycleState
from ai_scheduler.scheduler.preemption import Preemptor
from ai_scheduler.scheduler.priority import PriorityEngine
from ai_scheduler.tracesim.engine import Simulation

NODES = 10
NODE_CPU = 64
# Two groups: `owed` is below its guaranteed cpu (its pods may reclaim), `lender` borrows (its pods are
# reclaim victims); the owed group's own placed pods have a lower spec.priority (priority victims).
CONFIG = {
    "groups": {"owed": {"min": {"cpu": "1000"}}, "lender": {}},
    "users": {"olga": {"group": "owed"}, "lena": {"group": "lender"}},
    "namespaces": {"team-owed": {"user": "olga"}, "team-lender": {"user": "lena"}},
}


def _pod(name: str, namespace: str, cpu: str, priority: int, node: str | None = None) -> dict[str, Any]:
    pod = Pod(name, namespace=namespace, cpu=cpu, memory=None, priority=priority, node_name=node)
    pod.uid().rv("1")
    return (pod.status(phase="Running", startTime="2026-01-01T00:00:00Z") if node else pod).obj()


def _cluster(placed: int) -> SchedulerCore:
    """A core (the simulator's: preemption on, decision lines built) with `placed` pods bound, half of
    each group, and nothing waiting yet."""
    logger = JsonLogger(stream=NullStream(), level="info")  # decision lines are built, as a daemon's
    core = Simulation(parse_config(CONFIG), [], [], logger=logger).core
    for index in range(NODES):
        core.handlers.on_node_event("ADDED", Node(f"node-{index}", cpu=str(NODE_CPU), memory="512Gi").obj())
    for index in range(placed):
        namespace = "team-owed" if index % 2 else "team-lender"
        node = f"node-{index % NODES}"
        core.handlers.on_pod_event("ADDED", _pod(f"placed-{index}", namespace, "1", 0, node))
    core.start()
    return core


@contextlib.contextmanager
def counted(counts: Counter[str]) -> Iterator[None]:
    """Tenant resolutions and look-ups, quota amounts built, priority evaluations."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(counting(Tenancy, "_resolve", counts, "tenant_resolve"))
        stack.enter_context(counting(Tenancy, "tenant_of", counts, "tenant_of"))
        stack.enter_context(counting(tenancy_module, "quota_amounts", counts, "quota_amounts"))
        stack.enter_context(counting(PriorityEngine, "evaluate", counts, "priority_evaluate"))
        stack.enter_context(counting(Preemptor, "post_filter", counts, "post_filter"))
        stack.enter_context(counting(Preemptor, "_eligible", counts, "eligibility_checks"))
        yield


def _attempt(core: SchedulerCore) -> tuple[Counter[str], QueuedPod]:
    """The counts of one attempt of the pod at the head of the queue."""
    qp = core.queue.pop_nowait()
    assert qp is not None
    counts: Counter[str] = Counter()
    with counted(counts):
        core.cycle.schedule_one(qp)
    return counts, qp


@pytest.mark.parametrize("placed", [10, 200])
def test_one_attempt_derives_the_pods_data_once_whatever_the_placed_pods(placed: int) -> None:
    """A pod of 100 cpus (nodes have 64) of the group below its min, at a higher spec.priority than the
    placed pods: PostFilter checks every placed pod (half of them by priority, half by reclaim) and
    finds no node. Its tenant is resolved once, when it arrives, and its quota amounts built once, when
    first needed (its PodInfo); the attempt resolves no tenant, evaluates its priority once (the
    starvation reservation's key) and looks its tenant up twice (its CycleState, the priority
    evaluation), whatever the number of placed pods; the next attempt derives no more. Before PodInfo
    and CycleState, the attempt looked tenants up 4 + 2N times and built quota amounts 3 + N/2 times
    (24 and 8 at N = 10, 404 and 103 at N = 200)."""
    core = _cluster(placed)
    arrival: Counter[str] = Counter()
    with counted(arrival):
        core.handlers.on_pod_event("ADDED", _pod("big", "team-owed", "100", 10))
    assert (arrival["tenant_resolve"], arrival["priority_evaluate"]) == (1, 1)

    attempt, qp = _attempt(core)
    assert qp.pod.name == "big"
    assert attempt["post_filter"] == 1 and attempt["eligibility_checks"] == placed  # every placed pod
    assert "preemption: 0/10 nodes are available" in qp.reason
    assert core.queue.counts()["unschedulable"] == 1
    assert attempt["tenant_resolve"] == 0
    # Built once, where first needed: at arrival for a policy that reads job sizes, else (this one,
    # taskPriority) by the attempt's admission check.
    assert arrival["quota_amounts"] + attempt["quota_amounts"] == 1
    assert attempt["priority_evaluate"] == 1
    assert attempt["tenant_of"] == 2

    assert core.queue.retry_now(qp.pod.uid)  # the next attempt derives no more
    again, _ = _attempt(core)
    assert again == attempt - Counter({"quota_amounts": attempt["quota_amounts"]})


def test_the_victims_tenants_are_their_charges_and_their_amounts_their_podinfos() -> None:
    """What the eligibility check reads of a placed pod was derived when it was charged, once."""
    core = _cluster(20)
    tenancy = core.tenancy
    counts: Counter[str] = Counter()
    with counted(counts):
        for state in core.cache.pods.values():
            assert tenancy.charged_tenant(state.record) == tenancy.tenant_of(state.record)
            assert tenancy.amounts(state.record) == {"cpu": 1000}
    assert counts["tenant_resolve"] == counts["quota_amounts"] == 0


def _record(name: str, namespace: str = "team-owed", **extra: Any) -> PodRecord:
    return Pod(name, namespace=namespace, cpu="1", memory=None, **extra).uid().rv("1").record()


def test_a_pods_tenant_is_resolved_once_per_version_and_again_after_a_reload() -> None:
    config = parse_config(CONFIG)
    tenancy = Tenancy(config)
    pod = _record("p")
    counts: Counter[str] = Counter()
    with counted(counts):
        assert {tenancy.tenant_of(pod) for _ in range(5)} == {Tenant("olga", "owed", "default")}
        assert counts["tenant_resolve"] == 1
        newer = _record("p")  # the same pod, as an update delivers it: a new record, a new PodInfo
        assert newer.info is not pod.info
        tenancy.tenant_of(newer)
        assert counts["tenant_resolve"] == 2
        moved = parse_config({**CONFIG, "namespaces": {"team-owed": {"user": "lena"}}})
        tenancy.reconfigure(moved, [])
        assert tenancy.tenant_of(pod) == Tenant("lena", "lender", "default")  # not the old config's
        tenancy.tenant_of(pod)
        assert counts["tenant_resolve"] == 3


def test_quota_amounts_are_built_once_and_shared_by_the_pods_of_one_template() -> None:
    tenancy = Tenancy(parse_config(CONFIG))
    first, second = _record("a"), _record("b")
    counts: Counter[str] = Counter()
    with counted(counts):
        amounts = tenancy.amounts(first)
        assert tenancy.amounts(first) is amounts
        assert tenancy.amounts(second) is amounts  # one read-only map for both
        assert counts["quota_amounts"] == 2
    with pytest.raises(TypeError):
        amounts["cpu"] = 0  # type: ignore[index]


def test_a_pod_with_resource_claims_counts_its_claims_gpus_as_the_dra_state_moves() -> None:
    """Its amounts are built once per version of the DRA state: its claims' GPUs follow the claims."""
    tenancy = Tenancy(parse_config(CONFIG))
    tenancy.dra = dra = DraState()
    pod = _record("c", resource_claims=[pod_claim("gpu", claim="two")])
    counts: Counter[str] = Counter()
    with counted(counts):
        assert tenancy.amounts(pod) == {"cpu": 1000}  # no such claim yet
        tenancy.amounts(pod)
        assert counts["quota_amounts"] == 1
        dra.apply(DEVICE_CLASS, "ADDED", make_device_class(NVIDIA_DRIVER))
        dra.apply(RESOURCE_CLAIM, "ADDED", make_resource_claim("two", namespace="team-owed", count=2))
        assert tenancy.amounts(pod) == {"cpu": 1000, "nvidia.com/gpu": 2}
        tenancy.amounts(pod)
        assert counts["quota_amounts"] == 2


def test_a_copy_without_requests_derives_its_own() -> None:
    """The pod without its requests (preemption's and the reservation's what-if) has its own PodInfo;
    the attempt's CycleState makes it once."""
    tenancy = Tenancy(parse_config(CONFIG))
    pod = _record("g", annotations={GPU_COUNT_ANNOTATION: "2"})
    assert gpu_request(pod)[0] is not None
    cycle = CycleState(pod, tenancy)
    shadow = cycle.resourceless()
    assert cycle.resourceless() is shadow
    assert shadow.info is not pod.info and gpu_request(shadow)[0] is None
    assert (shadow.requests, tenancy.amounts(pod)["cpu"]) == ({}, 1000)
