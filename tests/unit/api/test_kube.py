"""KubeClient against the simulated API server behind a fault proxy: nothing waits without a bound on a
dead peer, and what was in flight when the API server came back does not wait out its timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from ai_scheduler.api.kube import KubeClient, WatchBroken, WatchIdle
from ai_scheduler.sim import SimApiServer
from ai_scheduler.sim.faultproxy import FaultProxy


@pytest.fixture
async def proxy(sim: SimApiServer) -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy("127.0.0.1", int(sim.url.rsplit(":", 1)[1]), scheme="http")
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.stop()


@pytest.fixture
async def client(proxy: FaultProxy) -> AsyncIterator[KubeClient]:
    kube = await KubeClient.connect(host=proxy.url)
    kube.request_timeout = 0.3
    yield kube
    await kube.close()


def failing_since(client: KubeClient) -> float | None:
    return client.reachability.failing_since


async def test_a_request_without_an_answer_is_abandoned_after_the_timeout(
    client: KubeClient, proxy: FaultProxy
) -> None:
    assert (await client.probe()).ok and failing_since(client) is None
    proxy.blackhole()
    started = time.monotonic()
    result = await client.get_pod("default", "p")
    assert result.status == 0 and result.message == "no answer within 0.3 s (apiRequestTimeoutSeconds)"
    assert 0.25 < time.monotonic() - started < 2
    assert failing_since(client) is not None and client.reachability.failures == 1
    proxy.forward()
    assert (await client.get_pod("default", "p")).status == 404, "an answer, if not a welcome one"
    assert failing_since(client) is None


async def test_a_silent_watch_is_dead_and_one_that_cannot_open_is_broken(
    client: KubeClient, proxy: FaultProxy
) -> None:
    _, version = await client.list("pods")
    events = 0
    with pytest.raises(WatchIdle, match=r"no event or bookmark for 0\.5 s"):
        async for _ in client.watch("pods", version, timeout_seconds=60, idle_timeout=0.5):
            events += 1  # bookmarks, every 0.2 s
            if events == 2:
                proxy.blackhole()
    started = time.monotonic()
    with pytest.raises(WatchBroken, match=r"no answer within 0\.3 s"):
        async for _ in client.watch("pods", version, timeout_seconds=60, idle_timeout=60):
            pass
    assert time.monotonic() - started < 2


async def test_abandon_requests_ends_what_is_in_flight_and_cuts_pauses_short(
    client: KubeClient, proxy: FaultProxy
) -> None:
    client.request_timeout = 30
    _, version = await client.list("pods")
    seen = asyncio.Event()

    async def watch() -> int:
        count = 0
        async for _ in client.watch("pods", version, timeout_seconds=60, idle_timeout=60):
            count += 1
            seen.set()
        return count

    watching = asyncio.create_task(watch())
    await seen.wait()
    proxy.blackhole(forever=True)  # the open connections will never move again
    request = asyncio.create_task(client.get_pod("default", "p"))
    epoch = client.epoch
    pause = asyncio.create_task(client.retry_pause(30, epoch))
    await asyncio.sleep(0.2)
    failures = client.reachability.failures
    proxy.forward()
    assert client.abandon_requests(grace=0.1) == 2
    result = await asyncio.wait_for(request, 1)
    assert result.status == 0 and result.message.startswith("abandoned")
    assert client.reachability.failures == failures, "an abandoned request says nothing of the server"
    assert await asyncio.wait_for(watching, 2) > 0, "ends as a server's close does: resume, no relist"
    await asyncio.wait_for(pause, 2)
    await asyncio.wait_for(client.retry_pause(30, epoch), 1)  # sent before the abandonment: no pause
    assert (await client.probe()).ok, "a fresh connection works"


async def test_connections_of_a_blackhole_forever_stay_dead_after_forward(
    client: KubeClient, proxy: FaultProxy
) -> None:
    proxy.blackhole(forever=True)
    during = asyncio.create_task(client.get_pod("default", "p"))
    await asyncio.sleep(0.05)
    proxy.forward()
    assert (await during).status == 0, "opened during the outage: dead for good"
    assert (await client.get_pod("default", "p")).status == 404


async def test_what_is_in_flight_on_a_live_connection_is_still_answered_after_an_outage(
    client: KubeClient, proxy: FaultProxy
) -> None:
    client.request_timeout = 30
    proxy.hold_requests()  # the request waits in the proxy, and is delivered when it forwards
    request = asyncio.create_task(client.get_pod("default", "p"))
    await asyncio.sleep(0.1)
    proxy.forward()
    client.abandon_requests(grace=1)
    assert (await asyncio.wait_for(request, 2)).status == 404, "answered within the grace"
