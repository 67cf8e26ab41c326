"""Reservation against starvation: a 32-GPU gang behind a stream of 1-GPU jobs, with and without it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from backends import Cluster
from builders import make_node, make_pod
from conftest import RunningScheduler, StartScheduler, create_all, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import parse_config
from ai_scheduler.scheduler.gang_preemption import NO_GROUP_VICTIMS
from ai_scheduler.scheduler.priority import ESTIMATE_ANNOTATION as ESTIMATE
from e2e.test_e2e_gangs import bound_count, member, podgroup
from e2e.test_e2e_scheduling import assert_not_overcommitted

STREAM_SECONDS = 4.0


async def stream(api: KubeClient, until: float) -> int:
    """1-GPU jobs of 0.6 s, honestly estimated at 1 s, one every 50 ms: some GPU is always busy."""
    count = 0
    while time.monotonic() < until:
        job = make_pod(
            f"job-{count}",
            gpus=1,
            cpu="1",
            memory="1Gi",
            duration=0.6,
            annotations={"ai-scheduler.io/estimated-runtime": "1s"},
        )
        assert (await api.create_pod(job)).ok
        count += 1
        await asyncio.sleep(0.05)
    return count


@pytest.mark.parametrize("reservation", [True, False])
async def test_d_a_big_gang_starts_with_reservation_and_starves_without(
    reservation: bool, cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    config = parse_config(
        {
            "server": {"port": 0, "bindAddress": "127.0.0.1"},
            "scheduling": {
                "initialBackoffSeconds": 0.05,
                "maxBackoffSeconds": 0.2,
                "reservation": reservation,
            },
        }
    )
    running = await start_scheduler(config)
    await create_all(api, [make_node(f"dgx-{i}", cpu="64", memory="256Gi", gpus=8) for i in range(4)], [])
    started = time.monotonic()
    jobs = asyncio.create_task(stream(api, started + STREAM_SECONDS))
    await asyncio.sleep(0.5)
    assert (await api.create_podgroup(podgroup("big", 4))).ok
    # Ahead of the stream in the queue, but not allowed to preempt it: what is tested is the reservation
    # alone (a gang that may preempt takes the room from lower-priority pods: test_e2e_gang_preemption).
    big = [member("big", i, priority=100, preemption_policy="Never") for i in range(4)]
    await create_all(api, [], big)
    if reservation:
        await wait_for(
            lambda: bound_count(cluster, "big") == 4,
            timeout=STREAM_SECONDS,
            what="the gang started while the stream was still running",
        )
        waited = time.monotonic() - started - 0.5
        assert not jobs.done(), "placed before the stream ended"
        line = running.log_lines("reservation")[0]
        assert line["holder"] == "gang default/big" and len(line["nodes"]) == 4
        kept_off = [
            d
            for d in running.log_lines("decision")
            if d["filtered"].get("node(s) reserved for gang default/big")
        ]
        assert kept_off, "stream jobs were kept off the reserved nodes"
        assert waited < STREAM_SECONDS
    created = await jobs
    assert created > 50
    if not reservation:
        assert bound_count(cluster, "big") == 0, "without a reservation the stream starves the gang"
        assert running.log_lines("reservation") == []
    assert_not_overcommitted(cluster)


async def test_a_gang_kept_off_reserved_nodes_is_told_so_over_every_node(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A gang behind a reservation that holds every node: its message counts all the nodes, each blamed on
    the reservation only because it could otherwise have used it (it was "0/0 nodes are available")."""
    config = parse_config(
        {
            "server": {"port": 0, "bindAddress": "127.0.0.1"},
            "scheduling": {
                "initialBackoffSeconds": 0.05,
                "maxBackoffSeconds": 0.2,
                "reservation": True,
                "backfill": False,
            },
        }
    )
    running = await start_scheduler(config)
    nodes = [make_node(f"n{i}", cpu="4", memory="16Gi") for i in range(2)]
    busy = [
        make_pod(f"busy-{i}", cpu="3", priority=100, duration=2.0, annotations={ESTIMATE: "2s"})
        for i in range(2)
    ]
    await create_all(api, nodes, busy)
    await wait_for(lambda: bound_count(cluster, "busy") == 2, what="both nodes busy")
    assert (await api.create_podgroup(podgroup("big", 2))).ok
    big = [member("big", i, gpus=0, cpu="4", priority=100, duration=0.5) for i in range(2)]
    await create_all(api, [], big)
    await wait_for(lambda: running.log_lines("reservation"), what="both nodes reserved for the big gang")
    assert running.log_lines("reservation")[0]["holder"] == "gang default/big"
    assert (await api.create_podgroup(podgroup("small", 2))).ok
    await create_all(api, [], [member("small", i, gpus=0, cpu="1", priority=0) for i in range(2)])
    # Nothing below it to preempt: kube's verdict follows the filters' part.
    reserved = "0/2 nodes are available: 2 node(s) reserved for gang default/big."
    expected = f"{reserved} preemption: {NO_GROUP_VICTIMS}"

    def told() -> bool:
        return any(
            d["pod"].startswith("default/small-") and d.get("message", "").endswith(expected)
            for d in running.log_lines("decision")
        )

    await wait_for(told, what="the small gang told that both nodes are reserved")
    await wait_for(lambda: bound_count(cluster, "small") == 2, timeout=20, what="the small gang placed")
    assert not [d for d in running.log_lines("decision") if "0/0 nodes" in d.get("message", "")]
    assert_not_overcommitted(cluster)


async def _gang_behind_pods_without_estimates(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler, scheduling: dict[str, Any]
) -> RunningScheduler:
    """Issue 10's example: on two 8-GPU nodes, an 8-GPU and a 4-GPU pod with no estimated-runtime run;
    the gang default/gd (2 x 8 GPUs, same priority) waits for them, and 4 GPUs are free."""
    config = parse_config(
        {
            "server": {"port": 0, "bindAddress": "127.0.0.1"},
            "scheduling": {
                "initialBackoffSeconds": 0.05,
                "maxBackoffSeconds": 0.2,
                "unschedulableFlushSeconds": 0.5,
                **scheduling,
            },
        }
    )
    running = await start_scheduler(config)
    nodes = [make_node(f"n{i}", cpu="64", memory="256Gi", gpus=8) for i in range(2)]
    await create_all(api, nodes, [make_pod("r-0", gpus=8, cpu="1", memory="1Gi")])
    await wait_for(lambda: bound_count(cluster, "r") == 1, what="the 8-GPU pod running")
    await create_all(api, [], [make_pod("s-0", gpus=4, cpu="1", memory="1Gi")])
    await wait_for(lambda: bound_count(cluster, "s") == 1, what="the 4-GPU pod running")
    assert (await api.create_podgroup(podgroup("gd", 2))).ok
    await create_all(api, [], [member("gd", i) for i in range(2)])

    def gang_waits() -> bool:
        return any(
            d["pod"].startswith("default/gd-") and d["result"] == "unschedulable"
            for d in running.log_lines("decision")
        )

    await wait_for(gang_waits, what="the gang found not to fit")
    return running


def _refusals(running: RunningScheduler, name: str) -> list[str]:
    return [
        d.get("message", "")
        for d in running.log_lines("decision")
        if d["pod"] == f"default/{name}" and d["result"] == "unschedulable"
    ]


async def test_a_pod_without_an_estimate_does_not_keep_free_gpus_idle_for_a_gang(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The running pods have no estimate, so the gang's reservation would be due at an unknown time: with
    the default reservationMinWaitSeconds (300 s) a gang that has just arrived holds nothing, and a
    same-priority 4-GPU pod with no estimate takes the 4 free GPUs (it was refused with `2 node(s)
    reserved for gang default/gd` when such pods counted as running seven days)."""
    running = await _gang_behind_pods_without_estimates(cluster, api, start_scheduler, {})
    await create_all(api, [], [make_pod("newcomer-0", gpus=4, cpu="1", memory="1Gi")])
    await wait_for(lambda: bound_count(cluster, "newcomer") == 1, what="the newcomer on the 4 free GPUs")
    assert running.log_lines("reservation") == []
    assert not [m for m in _refusals(running, "newcomer-0") if "reserved for" in m]
    assert bound_count(cluster, "gd") == 0
    assert_not_overcommitted(cluster)


async def test_a_gang_that_waited_long_holds_the_room_it_needs_for_an_unknown_time(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The other side of the bound: once the gang has waited reservationMinWaitSeconds, it holds both nodes
    (it needs them whole) although nobody knows when they free up, and the newcomer is told so."""
    running = await _gang_behind_pods_without_estimates(
        cluster, api, start_scheduler, {"reservationMinWaitSeconds": 1}
    )
    line = await wait_for(
        lambda: running.log_lines("reservation"), timeout=10, what="the reservation after a one-second wait"
    )
    assert line[0]["holder"] == "gang default/gd" and line[0]["due_in_s"] is None
    assert sorted(line[0]["nodes"]) == ["n0", "n1"]
    await create_all(api, [], [make_pod("newcomer-0", gpus=4, cpu="1", memory="1Gi")])
    await wait_for(
        lambda: [m for m in _refusals(running, "newcomer-0") if "node(s) reserved for gang default/gd" in m],
        what="the newcomer kept off the gang's room",
    )
    await asyncio.sleep(0.5)
    assert bound_count(cluster, "newcomer") == 0
    assert_not_overcommitted(cluster)
