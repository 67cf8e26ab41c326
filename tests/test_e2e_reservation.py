"""Reservation against starvation: a 32-GPU gang behind a stream of 1-GPU jobs, with and without it."""

from __future__ import annotations

import asyncio
import time

import pytest
from backends import Cluster
from conftest import StartScheduler, create_all, wait_for
from test_e2e_gangs import bound_count, member, podgroup
from test_e2e_scheduling import assert_not_overcommitted

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import parse_config
from ai_scheduler.scheduler.priority import ESTIMATE_ANNOTATION as ESTIMATE
from ai_scheduler.sim import make_node, make_pod

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
    await create_all(api, [], [member("big", i, priority=100) for i in range(4)])
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
    expected = "0/2 nodes are available: 2 node(s) reserved for gang default/big."

    def told() -> bool:
        return any(
            d["pod"].startswith("default/small-") and d.get("message", "").endswith(expected)
            for d in running.log_lines("decision")
        )

    await wait_for(told, what="the small gang told that both nodes are reserved")
    await wait_for(lambda: bound_count(cluster, "small") == 2, timeout=20, what="the small gang placed")
    assert not [d for d in running.log_lines("decision") if "0/0 nodes" in d.get("message", "")]
    assert_not_overcommitted(cluster)
