"""Metrics under kube-scheduler's names, labels and buckets (v1.36), after real queue, binding and
cycle activity: what existing kube-scheduler dashboards and alerts read must be there and mean the same."""

from __future__ import annotations

import asyncio
import io
import re
from types import SimpleNamespace
from typing import Any, cast

from builders import make_node, make_pod
from conftest import create_all, fast_config, wait_for

from ai_scheduler.api.kube import ApiResult, KubeClient
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import parse_config
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.daemon.binder import Binder
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import QueuedPod, SchedulingQueue
from ai_scheduler.scheduler.framework.runtime import Decision
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.scheduler.metrics import Metrics, StateCollector, attempts_label
from ai_scheduler.scheduler.recovery import CycleGuard
from ai_scheduler.sim import SimApiServer
from ai_scheduler.tracesim.engine import Simulation
from unit.cache.test_cache import cached_pod
from unit.daemon.test_binder import Harness, conflict
from unit.queue.test_scheduling_queue import FakeClock

ATTEMPTS = "scheduler_schedule_attempts_total"
INCOMING = "scheduler_queue_incoming_pods_total"
# The boundaries kube-scheduler v1.36 declares (pkg/scheduler/metrics/metrics.go), written out.
KUBE_BUCKETS: dict[str, list[float]] = {
    # ExponentialBuckets(0.001, 2, 15)
    "scheduler_scheduling_attempt_duration_seconds": [
        0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192,
        16.384,
    ],
    # ExponentialBuckets(0.01, 2, 20)
    "scheduler_pod_scheduling_sli_duration_seconds": [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84,
        327.68, 655.36, 1310.72, 2621.44, 5242.88,
    ],
    "scheduler_pod_scheduling_attempts": [1, 2, 4, 8, 16],  # ExponentialBuckets(1, 2, 5)
    "scheduler_preemption_victims": [1, 2, 4, 8, 16, 32, 64],  # ExponentialBuckets(1, 2, 7)
}


def series(name: str, **labels: str) -> str:
    """A series as the Prometheus client prints it: `name{a="x",b="y"}`, labels sorted."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def value(text: str, one: str) -> float | None:
    """One series' value in Prometheus text (see `series`); None when it is not there."""
    for line in text.splitlines():
        if line.startswith(one + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def rendered(metrics: Metrics) -> str:
    return metrics.render().decode()


def queue_with_metrics(clock: FakeClock) -> tuple[SchedulingQueue, Metrics]:
    metrics = Metrics()
    queue = SchedulingQueue(clock=clock, on_incoming=metrics.incoming)
    metrics.watch_state(
        StateCollector(queue.counts_by_queue, lambda: {}, lambda: 0, lambda: {}, queue.pending_counts)
    )
    return queue, metrics


def popped(queue: SchedulingQueue, name: str) -> QueuedPod:
    qp = queue.pop_nowait()
    assert qp is not None and qp.pod.name == name
    return qp


def test_histograms_have_kube_schedulers_buckets_and_labels() -> None:
    metrics = Metrics()
    metrics.scheduled("ai-scheduler", 0.003, 0.5, 1)
    metrics.preemption_victims.observe(3)
    text = rendered(metrics)
    for name, bounds in KUBE_BUCKETS.items():
        les = re.findall(rf'^{name}_bucket{{.*?le="([^"]+)".*}} ', text, re.MULTILINE)
        assert les == [*(str(float(b)) for b in bounds), "+Inf"], name
    assert '# TYPE scheduler_schedule_attempts_total counter' in text
    assert '# TYPE scheduler_scheduling_attempt_duration_seconds histogram' in text
    duration = "scheduler_scheduling_attempt_duration_seconds_bucket"
    assert value(text, series(duration, le="0.004", profile="ai-scheduler", result="scheduled")) == 1
    assert value(text, 'scheduler_pod_scheduling_sli_duration_seconds_bucket{attempts="1",le="0.64"}') == 1
    assert value(text, 'scheduler_preemption_victims_bucket{le="4.0"}') == 1
    assert value(text, 'scheduler_preemption_victims_bucket{le="2.0"}') == 0
    assert [attempts_label(n) for n in (1, 14, 15, 99)] == ["1", "14", "15+", "15+"]


def test_pending_and_incoming_pods_follow_the_queues_transitions() -> None:
    clock = FakeClock()
    queue, metrics = queue_with_metrics(clock)
    for name in ("a", "b", "c"):
        queue.add(cached_pod(name))
    gated = cached_pod("g")
    queue.gate(gated.uid)
    queue.requeue(popped(queue, "a"), unschedulable=True, reason="no room")
    queue.requeue(popped(queue, "b"), unschedulable=False, reason="binding failed")
    popped(queue, "c")  # in flight: being tried, not pending
    text = rendered(metrics)
    pending = {q: value(text, f'scheduler_pending_pods{{queue="{q}"}}') for q in
               ("active", "backoff", "unschedulable", "gated")}
    assert pending == {"active": 0, "backoff": 1, "unschedulable": 1, "gated": 1}
    # Our own per-tenant-queue view is still there, in flight included.
    assert value(text, 'ai_scheduler_pending_pods{queue="default",state="in_flight"}') == 1

    queue.move_all("NodeAdd")  # a: unschedulable -> backoff (its backoff since the failure is still running)
    clock.now += 2
    queue.flush_due()  # a and b: backoff -> active
    queue.add(cached_pod("g"))  # its gates removed
    text = rendered(metrics)
    incoming = {
        ("active", "UnschedulablePodAdd"): 3,
        ("unschedulable", "UnschedulablePodAdd"): 1,  # the gated pod, where kube-scheduler keeps it
        ("unschedulable", "ScheduleAttemptFailure"): 1,
        ("backoff", "ScheduleAttemptFailure"): 1,
        ("backoff", "NodeAdd"): 1,
        ("active", "BackoffComplete"): 2,
        ("active", "UnschedulablePodUpdate"): 1,  # the gated pod, once its gates went
    }
    for (q, event), count in incoming.items():
        one = series(INCOMING, event=event, queue=q)
        assert value(text, one) == count, one
    pending = {q: value(text, f'scheduler_pending_pods{{queue="{q}"}}') for q in
               ("active", "backoff", "unschedulable", "gated")}
    assert pending == {"active": 3, "backoff": 0, "unschedulable": 0, "gated": 0}
    queue.gate("uid-x")
    queue.delete("uid-x")  # a gated pod deleted is no longer counted
    assert value(rendered(metrics), 'scheduler_pending_pods{queue="gated"}') == 0


async def test_a_bound_pod_counts_as_scheduled_with_its_latency_and_attempts() -> None:
    h = Harness([ApiResult(201, {})])
    record = cached_pod("p")
    h.queue.add(record)
    h.queue.requeue(popped(h.queue, "p"), unschedulable=True, reason="no room")
    qp = h.queue.take(record.uid)  # tried again (as a gang sibling would be)
    assert qp is not None and qp.attempts == 2
    h.cache.assume(record, "n1")
    h.binder.submit(qp, record, Decision("n1", 2, duration=0.002))
    await h.finish()
    text = rendered(h.binder.metrics)
    labels = {"profile": "default-scheduler", "result": "scheduled"}  # the pod's spec.schedulerName
    assert value(text, series("scheduler_schedule_attempts_total", **labels)) == 1
    assert value(text, series("scheduler_scheduling_attempt_duration_seconds_count", **labels)) == 1
    took = value(text, series("scheduler_scheduling_attempt_duration_seconds_sum", **labels))
    assert (took or 0) >= 0.002, "from the start of the cycle, not of the binding"
    assert value(text, 'scheduler_pod_scheduling_sli_duration_seconds_count{attempts="2"}') == 1
    assert value(text, 'scheduler_pod_scheduling_attempts_bucket{le="1.0"}') == 0
    assert value(text, 'scheduler_pod_scheduling_attempts_bucket{le="2.0"}') == 1


async def test_a_binding_the_api_server_refuses_counts_as_an_error() -> None:
    h = Harness([conflict("n2")])
    h.submit(cached_pod("p"))
    await h.finish()
    text = rendered(h.binder.metrics)
    assert value(text, 'scheduler_schedule_attempts_total{profile="default-scheduler",result="error"}') == 1
    assert 'result="scheduled"' not in text
    assert value(text, "scheduler_pod_scheduling_attempts_count") == 0


async def test_a_cycle_that_raises_counts_as_an_error() -> None:
    h = Harness([ApiResult(201, {})])
    binder = Binder(cast(KubeClient, h.client), h.cache, h.queue, h.feedback, h.binder.metrics,
                    JsonLogger(stream=io.BytesIO()), concurrency=1)
    gangs = cast(GangScheduler, SimpleNamespace(holding=[]))
    guard = CycleGuard(h.cache, h.queue, binder, gangs, h.feedback, h.binder.metrics,
                       JsonLogger(stream=io.BytesIO()))
    h.queue.add(cached_pod("p"))

    def cycle(qp: QueuedPod) -> None:
        raise ValueError("a bug")

    guard.run(popped(h.queue, "p"), cycle)
    await h.finish()
    text = rendered(h.binder.metrics)
    labels = {"profile": "default-scheduler", "result": "error"}
    assert value(text, series("scheduler_schedule_attempts_total", **labels)) == 1
    assert value(text, series("scheduler_scheduling_attempt_duration_seconds_count", **labels)) == 1


async def test_the_daemon_reports_attempts_preemptions_and_gated_pods(sim: SimApiServer) -> None:
    client = await KubeClient.connect(host=sim.url)
    scheduler = Scheduler(fast_config(), client, JsonLogger(stream=io.BytesIO()), serve_http=False)
    task = asyncio.create_task(scheduler.run())
    try:
        gated = make_pod("gated", cpu="100m")
        gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
        pods = [make_pod("low", cpu="1", priority=0), make_pod("huge", cpu="100"), gated]
        await create_all(client, [make_node("n1", cpu="1", memory="4Gi")], pods)

        def bound(name: str) -> bool:
            return bool((sim.store.get("pods", "default", name) or {}).get("spec", {}).get("nodeName"))

        await wait_for(lambda: bound("low"), what="low placed")
        await create_all(client, [], [make_pod("vip", cpu="1", priority=1000)])
        await wait_for(lambda: bound("vip"), what="vip placed after preempting low")

        def settled() -> dict[str, Any] | None:
            text = rendered(scheduler.metrics)
            found = {
                "scheduled": value(text, series(ATTEMPTS, profile="ai-scheduler", result="scheduled")),
                "unschedulable": value(text, 'scheduler_pending_pods{queue="unschedulable"}'),
                "gated": value(text, 'scheduler_pending_pods{queue="gated"}'),
            }
            wanted = {"scheduled": 2, "unschedulable": 1, "gated": 1}
            return {"text": text, **found} if found == wanted else None

        text = (await wait_for(settled, what="metrics settled"))["text"]
        failed = value(text, series(ATTEMPTS, profile="ai-scheduler", result="unschedulable"))
        assert (failed or 0) >= 2, "huge, and vip before its victim left"
        assert (value(text, "scheduler_preemption_attempts_total") or 0) >= 2, "every PostFilter run counts"
        assert value(text, "scheduler_preemption_victims_count") == 1
        assert value(text, "scheduler_preemption_victims_sum") == 1
        assert value(text, 'scheduler_cache_size{type="nodes"}') == 1
        gated_in = series(INCOMING, event="UnschedulablePodAdd", queue="unschedulable")
        assert value(text, gated_in) == 1, "the gated pod"
    finally:
        scheduler.stop()
        await asyncio.wait_for(task, 15)
        await client.close()


def test_quota_use_and_bounds_are_exposed_per_group_user_and_queue() -> None:
    config = parse_config({
        "groups": {"vision": {"min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 8, "cpu": "32"}}},
        "users": {"ana": {"group": "vision", "max": {"cpu": "16"}}},
        "namespaces": {"team-a": {"user": "ana"}},
    })
    simulation = Simulation(config, [], [])
    core = simulation.core
    core.handlers.on_node_event("ADDED", make_node("n0", cpu="64", memory="256Gi", gpus=8))
    core.handlers.pod_event("ADDED", PodRecord.from_api(
        make_pod("train", namespace="team-a", cpu="2500m", memory="1Gi", gpus=2, node_name="n0")
    ))
    metrics = Metrics()
    metrics.watch_state(StateCollector(lambda: {}, lambda: {}, lambda: 0, lambda: {}, lambda: {},
                                       core.tenancy.quotas))
    text = rendered(metrics)

    def quota(metric: str, kind: str, who: str, resource: str, bound: str = "") -> float | None:
        labels = {"kind": kind, "name": who, "resource": resource, **({"bound": bound} if bound else {})}
        return value(text, f"ai_scheduler_quota_{metric}{{" + ",".join(
            f'{k}="{v}"' for k, v in sorted(labels.items())) + "}")

    gpu = "nvidia.com/gpu"
    assert quota("used", "group", "vision", gpu) == 2
    assert quota("used", "group", "vision", "cpu") == 2.5  # cores
    assert quota("used", "user", "ana", "cpu") == 2.5
    assert quota("limit", "group", "vision", gpu, bound="max") == 8
    assert quota("limit", "group", "vision", gpu, bound="min") == 4
    assert quota("limit", "user", "ana", "cpu", bound="max") == 16
    assert quota("limit", "user", "ana", "cpu", bound="min") is None


def test_a_gang_that_times_out_is_counted() -> None:
    config = parse_config({"scheduling": {"gangScheduleTimeoutSeconds": 5}})
    simulation = Simulation(config, [], [])
    core = simulation.core
    core.handlers.on_node_event("ADDED", make_node("n0", cpu="64", memory="256Gi", gpus=8))
    core.start()
    labels = {"pod-group.scheduling.sigs.k8s.io/name": "big",
              "pod-group.scheduling.sigs.k8s.io/min-available": "2"}
    for name in ("big-0", "big-1"):  # two members of 8 GPUs each: never both on the one node
        core.handlers.pod_event("ADDED", PodRecord.from_api(make_pod(name, gpus=8, labels=labels)))
    counter = "ai_scheduler_gang_timeouts_total"
    assert value(rendered(core.metrics), counter) == 0
    simulation._drain()
    simulation.clock.now += 6
    core.housekeeping()
    assert value(rendered(core.metrics), counter) == 1
