"""End to end: the real daemon, over HTTP with kubernetes_asyncio, against the simulated API server."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter, defaultdict
from typing import Any

import aiohttp
import pytest
from backends import Cluster, SimCluster
from builders import make_node, make_pod
from conftest import StartScheduler, create_all, fast_config, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient, WatchExpired
from ai_scheduler.config.schema import Profile
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.quantity import to_units
from ai_scheduler.scheduler.preemption import NO_VICTIMS, NOT_HELPFUL


def usage_by_node(cluster: Cluster) -> dict[str, Counter[str]]:
    """Requests of the pods that count on each node, computed from the server's objects alone."""
    usage: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in cluster.store.list("pods"):
        node = pod["spec"].get("nodeName")
        if not node or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        usage[node]["pods"] += 1
        for container in pod["spec"]["containers"]:
            resources = container.get("resources", {})
            merged = {**resources.get("limits", {}), **resources.get("requests", {})}
            for name, value in merged.items():
                usage[node][name] += to_units(name, value)
    return usage


def assert_not_overcommitted(cluster: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster.store.list("nodes")}
    for node, used in usage_by_node(cluster).items():
        allocatable = nodes[node]["status"]["allocatable"]
        for name, amount in used.items():
            assert amount <= to_units(name, allocatable.get(name, "0")), f"{node} over-committed on {name}"


def bound_pods(cluster: Cluster, scheduler_name: str = "ai-scheduler") -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.store.list("pods")
        if p["spec"].get("schedulerName") == scheduler_name and p["spec"].get("nodeName")
    ]


def pod_condition(cluster: Cluster, name: str, namespace: str = "default") -> dict[str, Any]:
    pod = cluster.store.get("pods", namespace, name) or {}
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), {})


def events_for(cluster: Cluster, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.store.list("events")
        if e["involvedObject"].get("name") == name and e["reason"] == reason
    ]


async def test_200_pods_on_20_nodes_all_bound_without_overcommit(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    nodes = [make_node(f"node-{i}", cpu="8", memory="32Gi", pods=30) for i in range(20)]
    # 200 pods of 700m cpu: 11 fit per node by cpu, 220 in all: a bookkeeping error would over-commit.
    pods = [make_pod(f"pod-{i}", cpu="700m", memory="1Gi") for i in range(200)]
    await create_all(api, nodes, pods)
    await wait_for(lambda: len(bound_pods(cluster)) == 200, what="all 200 pods bound")
    assert_not_overcommitted(cluster)
    placed = Counter(p["spec"]["nodeName"] for p in bound_pods(cluster))
    assert len(placed) == 20, "least-allocated spreads the pods over every node"
    await wait_for(
        lambda: len([e for e in cluster.store.list("events") if e["reason"] == "Scheduled"]) == 200,
        what="one Scheduled event per pod",
    )
    event = events_for(cluster, "pod-7", "Scheduled")[0]
    node = stored_pod(cluster, "pod-7")["spec"]["nodeName"]
    assert event["message"] == f"Successfully assigned default/pod-7 to {node}"
    decisions = running.log_lines("decision")
    assert len({d["uid"] for d in decisions if d["result"] == "scheduled"}) == 200
    sample = decisions[0]
    for key in (
        "ts",
        "level",
        "pod",
        "queue",
        "priority",
        "nodes",
        "evaluated",
        "feasible",
        "filtered",
        "top",
        "node",
        "cycle_ms",
    ):
        assert key in sample
    assert running.scheduler.cache.check_consistency() == []


async def test_unschedulable_pod_gets_condition_and_event_then_lands_on_new_node(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    nodes = [
        make_node("small-1", cpu="2", memory="4Gi"),
        make_node("small-2", cpu="2", memory="4Gi"),
        make_node(
            "tainted",
            cpu="64",
            memory="256Gi",
            taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
        ),
    ]
    await create_all(api, nodes, [make_pod("big", cpu="16", memory="8Gi")])
    expected = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, "
        "2 Insufficient cpu, 2 Insufficient memory. "
        f"preemption: 0/3 nodes are available: 1 {NOT_HELPFUL}, 2 {NO_VICTIMS}."
    )
    await wait_for(
        lambda: pod_condition(cluster, "big").get("message") == expected,
        what="Unschedulable condition with kube-scheduler's message",
    )
    condition = pod_condition(cluster, "big")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    await wait_for(lambda: events_for(cluster, "big", "FailedScheduling"), what="FailedScheduling event")
    assert events_for(cluster, "big", "FailedScheduling")[0]["message"] == expected
    assert events_for(cluster, "big", "FailedScheduling")[0]["type"] == "Warning"

    assert (await api.create_node(make_node("large", cpu="32", memory="64Gi"))).ok
    await wait_for(
        lambda: stored_pod(cluster, "big")["spec"].get("nodeName") == "large",
        what="pod placed on the node that fits",
    )
    await wait_for(lambda: events_for(cluster, "big", "Scheduled"), what="Scheduled event")


async def test_failed_scheduling_events_are_not_repeated_on_every_retry(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(api, [make_node("n1", cpu="1", memory="1Gi")], [make_pod("huge", cpu="8", memory="1Gi")])
    await wait_for(lambda: events_for(cluster, "huge", "FailedScheduling"), what="first FailedScheduling")
    # Node changes move the pod back to the active queue; each retry fails with the same reason.
    for i in range(5):
        assert (await api.patch_node("n1", {"metadata": {"labels": {"round": str(i)}}})).ok
        attempts = i + 2

        def attempted(a: int = attempts) -> bool:
            return len([d for d in running.log_lines("decision") if d["pod"] == "default/huge"]) >= a

        await wait_for(attempted, what=f"attempt {attempts}")
    assert len(events_for(cluster, "huge", "FailedScheduling")) == 1
    status_patches = cluster.request_counts().get("pods/status", Counter())["patch"]
    assert status_patches == 1, "the unchanged condition is written once, not on every retry"


async def test_pods_of_other_schedulers_are_never_bound_but_their_usage_counts(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    nodes = [make_node("a", cpu="4", memory="16Gi"), make_node("b", cpu="4", memory="16Gi")]
    foreign_bound = make_pod("foreign-bound", cpu="3", memory="1Gi", scheduler_name="default-scheduler")
    foreign_pending = make_pod("foreign-pending", cpu="100m", memory="1Gi", scheduler_name="other-scheduler")
    await create_all(api, nodes, [foreign_bound, foreign_pending])
    uid = stored_pod(cluster, "foreign-bound")["metadata"]["uid"]
    assert (await api.bind("default", "foreign-bound", uid, "a")).ok
    ours = [make_pod(f"ours-{i}", cpu="2", memory="1Gi") for i in range(3)]
    await create_all(api, [], ours)
    await wait_for(lambda: len(bound_pods(cluster)) == 2, what="two of our pods bound")
    await wait_for(
        lambda: (
            pod_condition(
                cluster,
                next(
                    p["metadata"]["name"]
                    for p in cluster.store.list("pods")
                    if p["metadata"]["name"].startswith("ours") and not p["spec"].get("nodeName")
                ),
            ).get("reason")
            == "Unschedulable"
        ),
        what="third pod reported unschedulable",
    )
    assert {p["spec"]["nodeName"] for p in bound_pods(cluster)} == {"b"}, "node a has only 1 cpu left"
    assert not stored_pod(cluster, "foreign-pending")["spec"].get("nodeName")
    assert_not_overcommitted(cluster)


async def test_watch_cut_garbled_and_expired_loses_nothing_and_binds_once(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(api, [make_node(f"n{i}", cpu="32", memory="64Gi", pods=50) for i in range(10)], [])
    for batch in range(6):
        await create_all(api, [], [make_pod(f"p{batch}-{i}", cpu="500m", memory="512Mi") for i in range(50)])
        if batch == 1:
            assert cluster.cut_watches() >= 2
        elif batch == 2:
            # The informers resume from their last resourceVersion, which is now too old: 410 Gone, relist.
            await cluster.expire_watches()
        elif batch == 3 and isinstance(cluster, SimCluster):
            # A real API server behind TLS cannot be made to send an unparsable line.
            cluster.sim.garble_watches()
        elif batch == 4:
            # A node arrives while the informers are relisting; it must not be missed.
            cluster.cut_watches()
            assert (await api.create_node(make_node("late", cpu="32", memory="64Gi", pods=50))).ok
        await asyncio.sleep(0.05)
    await wait_for(lambda: len(bound_pods(cluster)) == 300, what="all 300 pods bound")
    assert cluster.pods_bound_twice() == []
    # A binding whose answer a cut connection lost is tried again and answered 409 (already bound): the
    # scheduler forgets its assumption and counts the pod where the watch shows it. The simulated
    # server's faults lose no answer, so there no binding may be refused at all.
    if isinstance(cluster, SimCluster):
        assert cluster.bindings() == Counter({"ok": 300, "conflict": 0})
    relists = running.log_lines("informer.relist")
    # On the real backend the scheduler's connections break while the API server restarts, so its
    # informers relist for that reason; the 410 itself is checked by the next test.
    wanted = {"broken", "expired"} if isinstance(cluster, SimCluster) else {"broken"}
    assert {line["reason"] for line in relists} >= wanted
    assert_not_overcommitted(cluster)
    await wait_for(lambda: "late" in running.scheduler.cache.nodes, what="late node seen")
    assert running.scheduler.cache.check_consistency() == []
    await wait_for(lambda: running.scheduler.cache.assumed_count == 0, what="every assumption confirmed")


async def test_a_minute_long_api_server_outage_loses_nothing_and_binds_nothing_twice(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(api, [make_node(f"n{i}", cpu="16", memory="64Gi", pods=60) for i in range(4)], [])
    await create_all(api, [], [make_pod(f"before-{i}", cpu="500m") for i in range(40)])
    await wait_for(lambda: len(bound_pods(cluster)) == 40, what="the first pods bound")
    await cluster.outage(60)
    back = asyncio.get_running_loop().time()
    # (No new node: after such an outage the real node controller takes a while to clear a new node's taint.)
    await create_all(api, [], [make_pod(f"after-{i}", cpu="500m") for i in range(40)])
    # A deadline, not a measurement: the issue asks that scheduling resume within 5 s of the server's return.
    await wait_for(lambda: len(bound_pods(cluster)) == 80, timeout=30, what="the later pods bound")
    print(f"all pods bound {asyncio.get_running_loop().time() - back:.1f} s after the API server returned")
    assert cluster.pods_bound_twice() == []
    assert_not_overcommitted(cluster)
    assert running.scheduler.cache.check_consistency() == []
    await wait_for(lambda: running.scheduler.cache.assumed_count == 0, what="every assumption confirmed")


async def test_a_watch_from_a_compacted_version_is_answered_410(cluster: Cluster, api: KubeClient) -> None:
    """The API server answers 410 Gone to a watch from a version it no longer has, and the client says so."""
    await create_all(api, [make_node("n1")], [make_pod("before")])
    _, version = await api.list("pods")
    await create_all(api, [], [make_pod("after")])
    await cluster.expire_watches()
    with pytest.raises(WatchExpired):
        async for _ in api.watch("pods", version, timeout_seconds=5):
            pass


async def test_bind_conflict_forgets_assumption_and_keeps_going(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The test binds the pod itself while the scheduler's own binding is on its way (held by the proxy)."""
    running = await start_scheduler()
    await create_all(
        api, [make_node("n1", cpu="4", memory="8Gi"), make_node("n2", cpu="4", memory="8Gi")], []
    )
    cluster.proxy.hold_requests()  # the scheduler still sees events; its requests wait in the proxy
    try:
        await create_all(api, [], [make_pod("contested", cpu="3", memory="1Gi")])
        await wait_for(
            lambda: any(d["pod"] == "default/contested" for d in running.log_lines("decision")),
            what="the scheduler's decision",
        )
        chosen = next(d["node"] for d in running.log_lines("decision") if d["pod"] == "default/contested")
        other = "n2" if chosen == "n1" else "n1"
        uid = stored_pod(cluster, "contested")["metadata"]["uid"]
        assert (await api.bind("default", "contested", uid, other)).status == 201
    finally:
        cluster.proxy.forward()
    await wait_for(lambda: running.log_lines("bind.failed"), what="the 409 reported")
    failure = running.log_lines("bind.failed")[0]
    assert failure["code"] == 409 and failure["pod"] == "default/contested"
    # The test's binding won: the pod is on the other node, and our cache counts it there, not where we
    # assumed it.
    await wait_for(
        lambda: running.scheduler.cache.node_usage(other).get("cpu") == 3000, what="usage moved"
    )
    assert running.scheduler.cache.node_usage(chosen).get("cpu", 0) == 0
    assert stored_pod(cluster, "contested")["spec"]["nodeName"] == other
    assert cluster.pods_bound_twice() == []
    # Scheduling goes on, and the room the contested pod took on n2 is respected: of two more 3-cpu pods
    # only one fits (on n1), the other is reported unschedulable.
    await create_all(api, [], [make_pod(f"after-{i}", cpu="3", memory="1Gi") for i in range(2)])
    await wait_for(lambda: len(bound_pods(cluster)) == 2, what="one later pod placed")
    await wait_for(
        lambda: (
            {pod_condition(cluster, "after-0").get("reason"), pod_condition(cluster, "after-1").get("reason")}
            >= {"Unschedulable"}
        ),
        what="the other reported unschedulable",
    )
    assert {
        p["spec"]["nodeName"] for p in bound_pods(cluster) if p["metadata"]["name"].startswith("after")
    } == {chosen}
    assert_not_overcommitted(cluster)
    assert running.scheduler.cache.check_consistency() == []
    metrics = running.scheduler.metrics.render().decode()
    assert 'ai_scheduler_bind_errors_total{code="409"} 1.0' in metrics


async def test_not_ready_node_is_avoided_until_it_reports_ready(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A new node carries the not-ready taint until it reports Ready and the node controller clears it."""
    await start_scheduler()
    await create_all(api, [make_node("fresh", cpu="8", memory="8Gi", ready=False)], [make_pod("p", cpu="1")])
    expected = (
        "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. "
        f"preemption: 0/1 nodes are available: 1 {NOT_HELPFUL}."
    )
    await wait_for(lambda: pod_condition(cluster, "p").get("message") == expected, what="not-ready taint")
    # The node's kubelet reports Ready through the status subresource; the node controller removes the taint.
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    response = await api.core.patch_node_status(
        "fresh", ready, _preload_content=False, _content_type="application/strategic-merge-patch+json"
    )
    assert response.status == 200
    response.release()
    await wait_for(
        lambda: stored_pod(cluster, "p")["spec"].get("nodeName") == "fresh",
        what="placed once the node is ready",
    )


def metric_value(text: str, series: str) -> float | None:
    """The value of one series (`name{labels}` as Prometheus prints it, labels sorted) in /metrics text."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_health_ready_and_metrics_over_http(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    await create_all(
        api,
        [make_node("n1", cpu="4", memory="8Gi")],
        [*(make_pod(f"fits-{i}", cpu="1") for i in range(3)), make_pod("never", cpu="100")],
    )
    await wait_for(lambda: len(bound_pods(cluster)) == 3, what="three pods bound")
    await wait_for(
        lambda: pod_condition(cluster, "never").get("reason") == "Unschedulable", what="other reported"
    )
    assert running.scheduler.http is not None
    port = running.scheduler.http.port
    scheduled = 'scheduler_schedule_attempts_total{profile="ai-scheduler",result="scheduled"}'
    waiting = 'scheduler_pending_pods{queue="unschedulable"}'
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/readyz"):
            async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                assert response.status == 200, path
        # A binding is counted when its answer arrives, which may be after the watch showed the pod bound;
        # the unschedulable pod may be between two tries: read until both have settled.
        for _ in range(200):
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                text = await response.text()
            if metric_value(text, scheduled) == 3 and metric_value(text, waiting) == 1:
                break
            await asyncio.sleep(0.05)
    # kube-scheduler's names and labels
    exactly = {
        scheduled: 3,
        waiting: 1,
        'scheduler_pending_pods{queue="gated"}': 0,
        'scheduler_scheduling_attempt_duration_seconds_count{profile="ai-scheduler",result="scheduled"}': 3,
        'scheduler_pod_scheduling_sli_duration_seconds_count{attempts="1"}': 3,
        "scheduler_pod_scheduling_attempts_count": 3,
        'scheduler_queue_incoming_pods_total{event="UnschedulablePodAdd",queue="active"}': 4,
        'scheduler_cache_size{type="nodes"}': 1,
    }
    for series, value in exactly.items():
        assert metric_value(text, series) == value, (series, text)
    at_least_once = [
        'scheduler_schedule_attempts_total{profile="ai-scheduler",result="unschedulable"}',
        'scheduler_queue_incoming_pods_total{event="ScheduleAttemptFailure",queue="unschedulable"}',
        "scheduler_preemption_attempts_total",
    ]
    for series in at_least_once:
        assert (metric_value(text, series) or 0) >= 1, (series, text)
    # ours, for what kube-scheduler has no name for
    assert 'ai_scheduler_pending_pods{queue="default",state="unschedulable"}' in text
    assert "ai_scheduler_bind_errors_total" in text


async def test_events_speak_as_the_profile_that_handled_the_pod(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """kube-scheduler records each profile's events under the profile's schedulerName: `source.component`
    and `reportingComponent` of a FailedScheduling (and a Scheduled) event name the pod's profile."""
    base = fast_config()
    config = dataclasses.replace(base, profiles=(*base.profiles, Profile("batch-scheduler")))
    running = await start_scheduler(config)
    pods = [
        make_pod("default-never", cpu="100"),
        make_pod("batch-never", cpu="100", scheduler_name="batch-scheduler"),
        make_pod("batch-fits", cpu="1", scheduler_name="batch-scheduler"),
    ]
    await create_all(api, [make_node("n1", cpu="4", memory="8Gi")], pods)
    for name, reason, profile in [
        ("default-never", "FailedScheduling", "ai-scheduler"),
        ("batch-never", "FailedScheduling", "batch-scheduler"),
        ("batch-fits", "Scheduled", "batch-scheduler"),
    ]:

        def written(n: str = name, r: str = reason) -> list[dict[str, Any]]:
            return events_for(cluster, n, r)

        event = (await wait_for(written, what=f"{reason} event of {name}"))[0]
        assert event["source"]["component"] == profile, (name, event)
        assert event["reportingComponent"] == profile, (name, event)
    metrics = running.scheduler.metrics.render().decode()
    assert metric_value(
        metrics, 'scheduler_schedule_attempts_total{profile="batch-scheduler",result="scheduled"}'
    ) == 1


async def test_ready_only_after_first_sync(cluster: Cluster, api: KubeClient) -> None:
    """Started while its API server is unreachable, the daemon is live but not ready, and binds nothing."""
    cluster.proxy.refuse()
    client = await cluster.scheduler_client()
    scheduler = Scheduler(fast_config(), client, JsonLogger(stream=NullStream()))
    task = asyncio.create_task(scheduler.run())
    try:
        await wait_for(lambda: scheduler.http is not None and scheduler.http.port, what="http listening")
        assert scheduler.http is not None
        url = f"http://127.0.0.1:{scheduler.http.port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/healthz") as response:
                assert response.status == 200
            async with session.get(f"{url}/readyz") as response:
                assert response.status == 503
            await create_all(api, [make_node("n1")], [make_pod("p1")])
            await asyncio.sleep(0.5)
            assert not scheduler.ready.is_set()
            cluster.proxy.forward()
            await wait_for(scheduler.ready.is_set, what="ready once the API server answers")
            async with session.get(f"{url}/readyz") as response:
                assert response.status == 200
        await wait_for(
            lambda: stored_pod(cluster, "p1")["spec"].get("nodeName") == "n1",
            what="pod bound after the sync",
        )
    finally:
        scheduler.stop()
        await task
        await client.close()


async def test_restart_keeps_bound_pods_counted(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    first = await start_scheduler()
    await create_all(
        api,
        [make_node("n1", cpu="4", memory="8Gi"), make_node("n2", cpu="4", memory="8Gi")],
        [make_pod(f"a-{i}", cpu="1500m", memory="1Gi") for i in range(4)],
    )
    await wait_for(lambda: len(bound_pods(cluster)) == 4, what="first wave bound")
    await first.stop()
    second = await start_scheduler()
    await create_all(api, [], [make_pod(f"b-{i}", cpu="1500m", memory="1Gi") for i in range(2)])
    await wait_for(
        lambda: (
            pod_condition(cluster, "b-0").get("reason") == "Unschedulable"
            and pod_condition(cluster, "b-1").get("reason") == "Unschedulable"
        ),
        what="second wave reported unschedulable: the restarted cache counts the first wave",
    )
    assert_not_overcommitted(cluster)
    assert second.scheduler.cache.check_consistency() == []


@pytest.mark.backend("sim", reason="a real API server refuses the malformed quantity when the pod is created")
async def test_malformed_pod_is_reported_on_the_object_and_others_go_on(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    bad = make_pod("bad-quantity")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    await create_all(api, [make_node("n1", cpu="4", memory="8Gi")], [bad, make_pod("good")])
    await wait_for(
        lambda: stored_pod(cluster, "good")["spec"].get("nodeName"),
        what="the good pod placed",
    )
    await wait_for(
        lambda: pod_condition(cluster, "bad-quantity").get("reason") == "Unschedulable", what="reported"
    )
    message = pod_condition(cluster, "bad-quantity")["message"]
    assert "invalid resource quantity" in message and "'lots'" in message
    assert events_for(cluster, "bad-quantity", "FailedScheduling")
    decision = next(d for d in running.log_lines("decision") if d["pod"] == "default/bad-quantity")
    assert decision["result"] == "unschedulable" and "'lots'" in decision["message"]
