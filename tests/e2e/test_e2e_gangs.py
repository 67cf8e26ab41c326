"""Gang scheduling end to end: the real daemon over HTTP against the simulated cluster."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import pytest
from backends import Cluster, SimCluster
from builders import Pod, PodGroup, gpu_nodes, make_node, make_pod
from conftest import StartScheduler, create_all, fast_config, owner_job, stored_pod, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.gangs import GROUP_MIN_LABEL, GROUP_NAME_LABEL, POD_GROUP_LABEL
from e2e.test_e2e_scheduling import assert_not_overcommitted, pod_condition

GPU = "nvidia.com/gpu"


def podgroup(
    name: str,
    min_member: int,
    *,
    timeout: int | None = None,
    annotations: dict[str, str] | None = None,
    min_resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    group = PodGroup(name, min_member).timeout(timeout).min_resources(min_resources)
    return group.annotations(annotations or {}).obj()


def member(group: str, i: int, *, gpus: int = 8, cpu: str = "1", **kwargs: Any) -> dict[str, Any]:
    return Pod(f"{group}-{i}", gpus=gpus, cpu=cpu, memory="1Gi", **kwargs).pod_group(group).obj()


def bound_count(cluster: Cluster, prefix: str) -> int:
    return sum(
        1
        for p in cluster.store.list("pods")
        if p["metadata"]["name"].startswith(prefix + "-") and p["spec"].get("nodeName")
    )


def podgroup_status(cluster: Cluster, name: str) -> dict[str, Any]:
    return (cluster.store.get("podgroups", "default", name) or {}).get("status") or {}


def events(cluster: Cluster, name: str, reason: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.store.list("events")
        if e["involvedObject"].get("name") == name and (reason is None or e["reason"] == reason)
    ]


async def test_a_gang_binds_nothing_until_it_fits_whole_then_all_at_once(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    assert (await api.create_podgroup(podgroup("train", 4))).ok
    await create_all(api, gpu_nodes(3), [member("train", i) for i in range(4)])
    # Members arrive one by one: a member may first be told that the gang is incomplete ("has 2 of 4
    # required pods"); once all four are there, each is told why they do not fit together.
    whole = "gang default/train needs 4 pods placed together and they do not all fit: "
    await wait_for(
        lambda: all(
            pod_condition(cluster, f"train-{i}").get("reason") == "Unschedulable"
            and pod_condition(cluster, f"train-{i}").get("message", "").startswith(whole)
            for i in range(4)
        ),
        what="every member told it is unschedulable, with the whole gang counted",
    )
    message = pod_condition(cluster, "train-0")["message"]
    assert message.startswith(whole)
    assert "Insufficient nvidia.com/gpu" in message
    await asyncio.sleep(0.3)
    assert bound_count(cluster, "train") == 0, "no member of an incomplete gang is bound"
    assert running.log_lines("gang.waiting")[0]["needed"] == 4
    await wait_for(
        lambda: events(cluster, "train", "Unschedulable"), what="the PodGroup's event says why it waits"
    )

    assert (await api.create_node(gpu_nodes(1, "late-")[0])).ok
    await wait_for(
        lambda: bound_count(cluster, "train") == 4, what="all four bound once a fourth node appears"
    )
    assert_not_overcommitted(cluster)
    admitted = running.log_lines("gang.admitted")
    assert len(admitted) == 1 and admitted[0]["placed"] == 4
    await wait_for(
        lambda: podgroup_status(cluster, "train").get("phase") == "Running", what="PodGroup Running"
    )
    status = podgroup_status(cluster, "train")
    assert status["running"] == 4 and status["failed"] == 0 and "scheduleStartTime" in status


async def test_b_two_gangs_needing_three_quarters_never_both_partial(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await create_all(api, gpu_nodes(4), [])
    for name in ("alpha", "beta"):
        assert (await api.create_podgroup(podgroup(name, 3))).ok
    interleaved = [member(name, i) for i in range(3) for name in ("alpha", "beta")]
    await create_all(api, [], interleaved)
    await start_scheduler()
    observed = []
    for _ in range(60):
        observed.append((bound_count(cluster, "alpha"), bound_count(cluster, "beta")))
        await asyncio.sleep(0.02)
    await wait_for(
        lambda: sorted((bound_count(cluster, "alpha"), bound_count(cluster, "beta"))) == [0, 3],
        what="one gang whole, the other not at all",
    )
    await asyncio.sleep(0.3)
    final = (bound_count(cluster, "alpha"), bound_count(cluster, "beta"))
    assert sorted(final) == [0, 3]
    assert not any(0 < a < 3 and 0 < b < 3 for a, b in observed), observed
    loser = "alpha" if final[0] == 0 else "beta"
    assert all(pod_condition(cluster, f"{loser}-{i}").get("reason") == "Unschedulable" for i in range(3))


async def test_c_many_gangs_and_singles_complete_gangs_only_singles_flow(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    rng = random.Random(3)
    nodes = gpu_nodes(100, "n", gpus=4)
    sizes = {f"g{i}": rng.randint(2, 16) for i in range(50)}
    await create_all(api, nodes, [])
    for name, size in sizes.items():
        assert (await api.create_podgroup(podgroup(name, size))).ok
    gang_pods = [member(name, i, gpus=1, cpu="500m") for name, size in sizes.items() for i in range(size)]
    singles = [make_pod(f"single-{i}", cpu="1", memory="1Gi") for i in range(500)]
    pods = gang_pods + singles
    rng.shuffle(pods)
    await start_scheduler()
    await create_all(api, [], pods)
    total_gpu_demand = sum(sizes.values())
    assert total_gpu_demand > 400, "the gangs ask for more GPUs than the cluster has, so some must wait"

    def singles_bound() -> int:
        return sum(
            1
            for p in cluster.store.list("pods")
            if p["metadata"]["name"].startswith("single-") and p["spec"].get("nodeName")
        )

    await wait_for(lambda: singles_bound() == 500, timeout=60, what="all single pods placed")
    waiting_gangs = [name for name in sizes if bound_count(cluster, name) == 0]
    assert waiting_gangs, "some gangs still wait for GPUs while the singles have all been placed"
    await asyncio.sleep(0.5)
    for name, size in sizes.items():
        assert bound_count(cluster, name) in (0, size), f"gang {name} is partial"
    assert_not_overcommitted(cluster)
    used = sum(size for name, size in sizes.items() if bound_count(cluster, name) == size)
    assert used <= 400


async def test_d_gang_that_never_completes_times_out_and_smaller_pod_takes_the_room(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    assert (await api.create_podgroup(podgroup("stuck", 4, timeout=1))).ok
    await create_all(api, gpu_nodes(3), [member("stuck", i) for i in range(4)])
    await wait_for(lambda: running.log_lines("gang.timed_out"), what="the gang timed out")
    timed_out = running.log_lines("gang.timed_out")[0]
    assert timed_out["gang"] == "default/stuck" and timed_out["placed"] == 0 and timed_out["held"] == 0
    await wait_for(lambda: events(cluster, "stuck", "Timeout"), what="a Timeout event on the PodGroup")
    assert bound_count(cluster, "stuck") == 0
    await create_all(api, [], [make_pod("small", gpus=8, cpu="1", memory="1Gi")])
    await wait_for(
        lambda: stored_pod(cluster, "small")["spec"].get("nodeName"),
        what="the smaller pod takes the room the gang could not use",
    )
    assert bound_count(cluster, "stuck") == 0
    await wait_for(lambda: len(running.log_lines("gang.timed_out")) >= 2, what="a second timeout")
    second = running.log_lines("gang.timed_out")[1]
    assert second["backoff_s"] > timed_out["backoff_s"], "the backoff grows with repeated timeouts"


async def test_e_restart_mid_gang_completes_or_explains_the_partial_gang(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    # A previous scheduler bound two of four members and died: two nodes are taken by them.
    assert (await api.create_podgroup(podgroup("resumed", 4, timeout=1))).ok
    await create_all(api, gpu_nodes(3), [member("resumed", i) for i in range(4)])
    for i in range(2):
        uid = stored_pod(cluster, f"resumed-{i}")["metadata"]["uid"]
        assert (await api.bind("default", f"resumed-{i}", uid, f"gpu-{i}")).ok
    running = await start_scheduler()
    # Room for one more member only: the gang cannot complete, and its status says so.
    await wait_for(
        lambda: podgroup_status(cluster, "resumed").get("phase") == "Failed", what="partial gang reported"
    )
    assert bound_count(cluster, "resumed") == 2
    # The event is a write of its own beside the PodGroup's status: it may land a moment after it.
    timeouts = await wait_for(lambda: events(cluster, "resumed", "Timeout"), what="the Timeout event")
    assert "2 of 4 placed" in timeouts[0]["message"]
    assert podgroup_status(cluster, "resumed")["running"] == 2
    # Room appears: the restarted scheduler completes the gang and the failure becomes history.
    assert (await api.create_node(gpu_nodes(1, "late-")[0])).ok
    await wait_for(lambda: bound_count(cluster, "resumed") == 4, what="gang completed")
    await wait_for(
        lambda: podgroup_status(cluster, "resumed").get("phase") == "Running", what="PodGroup Running"
    )
    assert_not_overcommitted(cluster)
    assert any(
        line["gang"] == "default/resumed" and line["already_placed"] == 2
        for line in running.log_lines("gang.admitted")
    )


async def test_label_and_koordinator_gangs_without_a_crd(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    labels = [
        make_pod(
            f"mpi-{i}", gpus=8, cpu="1", memory="1Gi", labels={GROUP_NAME_LABEL: "mpi", GROUP_MIN_LABEL: "3"}
        )
        for i in range(3)
    ]
    koord = [
        make_pod(
            f"koord-{i}",
            gpus=8,
            cpu="1",
            memory="1Gi",
            annotations={
                "gang.scheduling.koordinator.sh/name": "koord",
                "gang.scheduling.koordinator.sh/min-available": "2",
            },
        )
        for i in range(2)
    ]
    legacy = [
        make_pod(f"legacy-{i}", cpu="1", memory="1Gi", labels={"pod-group.scheduling.sigs.k8s.io": "old"})
        for i in range(2)
    ]
    bad = [
        make_pod("bad-0", cpu="1", memory="1Gi", labels={GROUP_NAME_LABEL: "bad", GROUP_MIN_LABEL: "many"})
    ]
    await create_all(api, gpu_nodes(4), labels + koord + legacy + bad)
    # 4 nodes of 8 GPUs: the 3-pod label gang and the 2-pod Koordinator gang cannot both fit.
    await wait_for(
        lambda: bound_count(cluster, "mpi") + bound_count(cluster, "koord") >= 2, what="one gang placed"
    )
    await asyncio.sleep(0.3)
    assert (bound_count(cluster, "mpi"), bound_count(cluster, "koord")) in ((3, 0), (0, 2))
    # The old scheduler-plugins label names a PodGroup that does not exist: the pods wait and say why.
    await wait_for(
        lambda: pod_condition(cluster, "legacy-0").get("message")
        == "label pod-group.scheduling.sigs.k8s.io: pod group default/old not found",
        what="missing PodGroup reported",
    )
    await wait_for(
        lambda: (
            "must be a positive integer, got 'many'" in pod_condition(cluster, "bad-0").get("message", "")
        ),
        what="malformed min-available reported",
    )
    assert bound_count(cluster, "legacy") == 0 and bound_count(cluster, "bad") == 0
    assert (await api.create_podgroup(podgroup("old", 2))).ok
    await wait_for(lambda: bound_count(cluster, "legacy") == 2, what="placed once the PodGroup exists")


async def test_gang_prefers_one_zone_and_can_require_it(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    zone = "topology.kubernetes.io/zone"
    nodes = [
        make_node(f"{z}-{i}", cpu="32", memory="128Gi", gpus=8, labels={zone: z})
        for z in ("east", "west")
        for i in range(3)
    ]
    assert (await api.create_podgroup(podgroup("local", 3))).ok
    await create_all(api, nodes, [member("local", i) for i in range(3)])
    await wait_for(lambda: bound_count(cluster, "local") == 3, what="gang placed")
    zones = {stored_pod(cluster, f"local-{i}")["spec"]["nodeName"].split("-")[0] for i in range(3)}
    assert len(zones) == 1, "least-allocated alone would spread; the gang stays in one zone"

    # Two GPUs left free per zone-node after this: a 4-member gang fits only across zones.
    fillers = [make_pod(f"filler-{i}", gpus=6, cpu="1", memory="1Gi") for i in range(3)]
    await create_all(api, [], fillers)
    await wait_for(lambda: bound_count(cluster, "filler") == 3, what="fillers placed")
    assert (
        await api.create_podgroup(
            podgroup("strict", 4, annotations={"ai-scheduler.io/same-domain": "required"})
        )
    ).ok
    await create_all(api, [], [member("strict", i, gpus=2) for i in range(4)])
    await wait_for(
        lambda: "requires one placement domain" in pod_condition(cluster, "strict-0").get("message", ""),
        what="required domain reported",
    )
    assert bound_count(cluster, "strict") == 0


async def test_elastic_members_after_quorum_are_placed_as_ordinary_pods(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    assert (await api.create_podgroup(podgroup("elastic", 2))).ok
    await create_all(api, gpu_nodes(3), [member("elastic", i) for i in range(2)])
    await wait_for(lambda: bound_count(cluster, "elastic") == 2, what="quorum placed")
    await create_all(api, [], [member("elastic", 2)])
    await wait_for(lambda: bound_count(cluster, "elastic") == 3, what="scale-up member placed")
    assert any(d.get("elastic") for d in running.log_lines("decision") if d["pod"] == "default/elastic-2")


async def test_bind_failures_after_quorum_are_retried_and_a_lost_member_fails_the_group(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler(fast_config())
    assert (await api.create_podgroup(podgroup("flaky", 2))).ok
    await create_all(api, gpu_nodes(3), [])
    # Another binder wins the race for one member: the test binds it to the node the gang left free while
    # the scheduler's bindings wait in the proxy, so the scheduler's own binding of it answers 409.
    cluster.proxy.hold_requests()
    try:
        await create_all(api, [], [member("flaky", i) for i in range(2)])

        def chosen() -> set[str]:
            decisions = running.log_lines("decision")
            return {d["node"] for d in decisions if d["pod"].startswith("default/flaky-") and d["node"]}

        await wait_for(lambda: len(chosen()) == 2, what="both members placed")
        (free,) = {"gpu-0", "gpu-1", "gpu-2"} - chosen()
        uid = stored_pod(cluster, "flaky-1")["metadata"]["uid"]
        assert (await api.bind("default", "flaky-1", uid, free)).status == 201
    finally:
        cluster.proxy.forward()
    await wait_for(lambda: bound_count(cluster, "flaky") == 2, what="both members bound")
    assert stored_pod(cluster, "flaky-1")["spec"]["nodeName"] == free
    # The test's own binding is seen before the scheduler's answer (409) comes back through the proxy.
    await wait_for(lambda: running.log_lines("bind.failed"), what="the scheduler's binding refused")
    assert [line["code"] for line in running.log_lines("bind.failed")] == [409]
    await wait_for(lambda: podgroup_status(cluster, "flaky").get("phase") == "Running", what="gang running")
    assert_not_overcommitted(cluster)
    assert running.scheduler.cache.check_consistency() == []


async def test_pod_group_status_counts_finished_members(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    await start_scheduler()
    assert (await api.create_podgroup(podgroup("short", 2))).ok
    owner = await owner_job(api, "short-job")
    pods = [member("short", i, duration=0.3) for i in range(2)]
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [owner]
    await create_all(api, gpu_nodes(2), pods)
    await wait_for(
        lambda: podgroup_status(cluster, "short").get("phase") == "Finished", what="PodGroup Finished"
    )
    status = podgroup_status(cluster, "short")
    assert status["succeeded"] == 2 and status["occupiedBy"] == "default/short-job"
    assert Counter(e["reason"] for e in events(cluster, "short"))["Scheduled"] == 1


@pytest.mark.backend(
    "sim",
    reason="chosen requests must fail with 500: only the simulated server injects that (TLS hides them)",
)
async def test_member_that_keeps_failing_to_bind_fails_the_group_until_it_binds(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    running = await start_scheduler()
    assert (await api.create_podgroup(podgroup("shaky", 2))).ok
    await create_all(api, gpu_nodes(2), [])
    assert isinstance(cluster, SimCluster)
    cluster.sim.inject_failures("pods/binding", "create", "default", "shaky-1", 3)
    await create_all(api, [], [member("shaky", i) for i in range(2)])
    await wait_for(lambda: running.log_lines("gang.failed"), what="the group reported failed")
    failed = running.log_lines("gang.failed")[0]
    assert failed["pod"] == "default/shaky-1" and "after 3 attempts" in failed["reason"]
    await wait_for(lambda: events(cluster, "shaky", "Failed"), what="a Failed event on the PodGroup")
    # The member is retried all the same; once it binds, the gang is whole and the failure is history.
    await wait_for(lambda: bound_count(cluster, "shaky") == 2, what="the member bound at last")
    await wait_for(
        lambda: podgroup_status(cluster, "shaky").get("phase") == "Running", what="PodGroup Running"
    )
    assert [line["code"] for line in running.log_lines("bind.failed")] == [500, 500, 500]
    assert_not_overcommitted(cluster)


async def test_gangs_with_affinity_to_themselves_land_each_in_one_zone(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Members with required podAffinity to their own gang's label on the zone key: each member sees the
    ones assumed before it, so a gang lands in one zone, and a gang that fits in no zone binds nothing."""
    running = await start_scheduler()
    zone = "topology.kubernetes.io/zone"
    nodes = [
        make_node(f"node-{z}{i}", cpu="4", memory="16Gi", labels={zone: z}) for z in "ab" for i in range(3)
    ]

    def zone_member(group: str, i: int) -> dict[str, Any]:
        together = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {POD_GROUP_LABEL: group}}, "topologyKey": zone}]}}
        return member(group, i, gpus=0, cpu="3", affinity=together)

    def zones_of(group: str, size: int) -> set[str]:
        return {stored_pod(cluster, f"{group}-{i}")["spec"]["nodeName"][5] for i in range(size)}

    for name, size in (("pair", 2), ("trio", 3), ("quad", 4)):
        assert (await api.create_podgroup(podgroup(name, size))).ok
    await create_all(api, nodes, [zone_member("pair", i) for i in range(2)])
    await wait_for(lambda: bound_count(cluster, "pair") == 2, what="the pair bound")
    assert len(zones_of("pair", 2)) == 1, "both members in one zone"

    # The pair's zone has one node left (3 cpu members take a node each): the trio must use the other zone.
    await create_all(api, [], [zone_member("trio", i) for i in range(3)])
    await wait_for(lambda: bound_count(cluster, "trio") == 3, what="the trio bound")
    assert len(zones_of("trio", 3)) == 1 and zones_of("trio", 3) != zones_of("pair", 2)

    await create_all(api, [], [zone_member("quad", i) for i in range(4)])
    await wait_for(
        lambda: all(pod_condition(cluster, f"quad-{i}").get("reason") == "Unschedulable" for i in range(4)),
        what="every quad member told it is unschedulable",
    )
    await asyncio.sleep(0.3)
    assert bound_count(cluster, "quad") == 0, "no member of a gang that fits in no zone is bound"
    assert running.scheduler.cache.check_consistency() == []
