"""The path to the API server fails under a running daemon (issue 12, point 1), on both backends.

The proxy between the scheduler and its API server makes three kinds of outage while pods that fit
are created:
- a dead peer: every open connection, and every one opened during the outage, stops moving bytes in
  both directions for good (no FIN, no RST); after the outage only new connections work;
- a refused path: open connections are reset and new ones refused;
- held requests: nothing the scheduler sends gets through, while the server's watch events still
  reach it (bindings wait in the proxy, and land late).
Each time `/readyz` must report the outage while it lasts (and `/healthz` too once it has lasted
`apiUnreachableRestartSeconds`, so that a stuck scheduler would be restarted), scheduling must resume
within 5 s of the proxy forwarding again, and nothing may be lost, bound twice or over-committed. The
timeouts are configured short so that the test is quick; the defaults are in config/default.yaml.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
from backends import Cluster, SimCluster
from builders import make_node, make_pod
from conftest import RunningScheduler, StartScheduler, create_all, fast_config, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import Config
from e2e.test_e2e_scheduling import assert_not_overcommitted, bound_pods

NODES = 4
CPU_PER_NODE = 4
RESUME_SECONDS = 5.0  # the bound: from the proxy forwarding again to every pod bound
RESTART_AFTER = 3.0  # apiUnreachableRestartSeconds


def reliability_config(cluster: Cluster) -> Config:
    # The simulated server sends a bookmark every 0.2 s, so a 2 s silence means a dead watch; the real one
    # sends one a minute, so there the default stands and the end of the outage is what ends dead watches.
    idle = 2 if cluster.backend == "sim" else 90
    return fast_config(
        apiRequestTimeoutSeconds=1, watchIdleSeconds=idle, apiUnreachableRestartSeconds=RESTART_AFTER
    )


async def http_get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as response:
        return response.status, await response.text()


async def wait_for_status(
    session: aiohttp.ClientSession, url: str, status: int, timeout: float, what: str
) -> str:
    """Poll `url` until it answers `status`; the text it answered with."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, text = await http_get(session, url)
        if code == status:
            return text
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}: still {code} {text!r}")
        await asyncio.sleep(0.05)


async def outage_then_resume(
    cluster: Cluster,
    api: KubeClient,
    start_scheduler: StartScheduler,
    start_fault: Callable[[], None],
    *,
    minimum_seconds: float = 4.0,
) -> RunningScheduler:
    running = await start_scheduler(reliability_config(cluster))
    nodes = [make_node(f"n{i}", cpu=str(CPU_PER_NODE), memory="64Gi") for i in range(NODES)]
    half = NODES * CPU_PER_NODE // 2
    await create_all(api, nodes, [make_pod(f"before-{i}", cpu="1") for i in range(half)])
    await wait_for(lambda: len(bound_pods(cluster)) == half, what="the first pods bound")
    assert running.scheduler.http is not None
    base = f"http://127.0.0.1:{running.scheduler.http.port}"
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session:
        assert await http_get(session, f"{base}/readyz") == (200, "ok")
        start_fault()
        began = loop.time()
        try:
            # Exactly as many 1-cpu pods as there is room left: a binding counted twice, or one that landed
            # late on a node whose room was meanwhile given away, would leave a pod pending or over-commit.
            await create_all(api, [], [make_pod(f"during-{i}", cpu="1") for i in range(half)])
            why = await wait_for_status(session, f"{base}/readyz", 503, 10, "/readyz to report the outage")
            print(f"/readyz after {loop.time() - began:.1f} s: 503 {why}")
            assert "API server unreachable" in why or "cannot list" in why, why
            assert (await http_get(session, f"{base}/healthz"))[0] == 200, "too early to ask for a restart"
            why = await wait_for_status(
                session, f"{base}/healthz", 503, RESTART_AFTER + 10, "/healthz to ask for a restart"
            )
            print(f"/healthz after {loop.time() - began:.1f} s: 503 {why}")
            await wait_for(lambda: running.log_lines("api.unreachable_too_long"), timeout=2, what="logged")
            await asyncio.sleep(max(0.0, began + minimum_seconds - loop.time()))
            assert await http_get(session, f"{base}/readyz") != (200, "ok"), "the outage is not over"
        finally:
            cluster.proxy.forward()
        back = loop.time()
        # A deadline, not a measurement: the issue asks that scheduling resume within 5 s.
        await wait_for(
            lambda: len(bound_pods(cluster)) == 2 * half,
            timeout=RESUME_SECONDS,
            what=f"every pod bound within {RESUME_SECONDS:g} s of the proxy forwarding again",
        )
        print(f"all pods bound {loop.time() - back:.1f} s after the proxy forwarded again")
        await wait_for_status(session, f"{base}/readyz", 200, RESUME_SECONDS, "/readyz 200 again")
        await wait_for_status(session, f"{base}/healthz", 200, RESUME_SECONDS, "/healthz 200 again")
    assert cluster.pods_bound_twice() == []
    assert_not_overcommitted(cluster)
    await wait_for(lambda: running.scheduler.cache.assumed_count == 0, what="every assumption confirmed")
    assert running.scheduler.cache.check_consistency() == []
    assert running.log_lines("api.unreachable")
    await wait_for(lambda: running.log_lines("api.reachable"), timeout=2, what="the outage's end logged")
    return running


async def test_half_open_connections_resume_within_5_s(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """A dead peer: the connections open when the fault starts never move a byte again."""
    running = await outage_then_resume(
        cluster, api, start_scheduler, lambda: cluster.proxy.blackhole(forever=True)
    )
    if isinstance(cluster, SimCluster):
        # Bookmarks stopped: the informers took their silent watches for dead.
        assert any(line["reason"] == "idle" for line in running.log_lines("informer.relist"))


async def test_refused_connections_resume_within_5_s(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """The server is gone: open connections reset, new ones refused."""

    def refuse() -> None:
        cluster.proxy.refuse()
        cluster.proxy.cut()

    await outage_then_resume(cluster, api, start_scheduler, refuse)


async def test_held_requests_resume_within_5_s(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    """Watch events still arrive, so pods are placed; their bindings wait in the proxy, are abandoned and
    retried on the same node, and the late ones land when it forwards again: each pod is bound once."""
    running = await outage_then_resume(cluster, api, start_scheduler, cluster.proxy.hold_requests)
    assert running.log_lines("bind.retry"), "the held bindings were retried"
    failed = [line for line in running.log_lines("bind.failed") if line["code"] == 409]
    assert failed == [], "a retry of a binding that landed is a success, not a conflict"
