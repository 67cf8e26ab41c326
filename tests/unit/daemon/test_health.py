"""ApiMonitor on a fake clock: an outage is confirmed by a probe, reported by /readyz at once and by
/healthz after apiUnreachableRestartSeconds, and its end abandons what was in flight."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from typing import Any, cast

import aiohttp

from ai_scheduler.api.kube import ApiResult, KubeClient, Reachability
from ai_scheduler.config import Config, SettingsView, default_config
from ai_scheduler.daemon.health import PROBE_QUIET_SECONDS, ApiMonitor, HealthServer
from ai_scheduler.daemon.informer import Informer
from ai_scheduler.log import JsonLogger

ANSWER = ApiResult(200, {})
NO_ANSWER = ApiResult(0, {"message": "no answer within 10 s (apiRequestTimeoutSeconds)"})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeClient:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.request_timeout = 10.0
        self.reachability = Reachability(last_answer=clock.now)
        self.epoch = 0
        self.probe_answer = NO_ANSWER
        self.probes = 0
        self.abandoned = 0

    def request(self, result: ApiResult) -> None:
        """A request of the scheduler's came back (or did not)."""
        self.reachability.record(result.status, result.message, self.clock.now)

    async def probe(self) -> ApiResult:
        self.probes += 1
        self.request(self.probe_answer)
        return self.probe_answer

    def abandon_requests(self) -> int:
        self.epoch += 1
        self.abandoned += 1
        return 3


class FakeInformer:
    def __init__(self, resource: str, *, optional: bool = False) -> None:
        self.resource = resource
        self.optional = optional
        self.failing_since: float | None = None
        self.last_error = ""


def _restart_after(seconds: float) -> Config:
    """The default config with `scheduling.apiUnreachableRestartSeconds` at `seconds`."""
    config = default_config()
    return dataclasses.replace(
        config, scheduling=dataclasses.replace(config.scheduling, api_unreachable_restart_seconds=seconds)
    )


def monitor(
    clock: Clock, informers: list[FakeInformer] | None = None
) -> tuple[ApiMonitor, FakeClient, io.BytesIO]:
    client = FakeClient(clock)
    log = io.BytesIO()
    found = cast(list[Informer[object]], informers or [])
    mon = ApiMonitor(cast(KubeClient, client), JsonLogger(stream=log), lambda: found,
                     settings=SettingsView(_restart_after(120.0)), clock=clock)
    return mon, client, log


def outage(mon: ApiMonitor) -> float | None:
    return mon.outage_since


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_an_outage_is_confirmed_by_a_probe_reported_and_ended_by_the_first_answer() -> None:
    clock = Clock()
    mon, client, log = monitor(clock)
    client.request(NO_ANSWER)  # a binding got no answer
    mon.check()
    await settle()
    assert client.probes == 1
    assert mon.outage_since == clock.now
    assert mon.ready_problem().startswith("API server unreachable for 0.0 s: no answer within 10 s")
    assert mon.live_problem() == ""
    clock.now += 119
    assert mon.live_problem() == ""
    clock.now += 1
    assert "API server unreachable for 120 s" in mon.live_problem()
    mon.check()
    assert b"api.unreachable_too_long" in log.getvalue()
    client.request(ANSWER)  # the API server answers again
    mon.check()
    assert outage(mon) is None and client.abandoned == 1
    assert mon.ready_problem() == "" and mon.live_problem() == ""
    assert b'"api.reachable"' in log.getvalue() and b'"outage_seconds":120' in log.getvalue()


async def test_a_failure_the_probe_answers_is_no_outage() -> None:
    clock = Clock()
    mon, client, _ = monitor(clock)
    client.probe_answer = ANSWER
    client.request(NO_ANSWER)
    mon.check()
    await settle()
    assert client.probes == 1 and mon.outage_since is None and mon.ready_problem() == ""
    assert client.abandoned == 0


async def test_a_quiet_api_server_is_probed_and_during_an_outage_probes_overlap() -> None:
    clock = Clock()
    mon, client, _ = monitor(clock)
    mon.check()
    assert client.probes == 0, "answered a moment ago"
    clock.now += PROBE_QUIET_SECONDS
    client.probe_answer = ANSWER
    mon.check()
    await settle()
    assert client.probes == 1
    client.probe_answer = NO_ANSWER
    client.request(NO_ANSWER)
    mon.check()
    await settle()
    assert mon.outage_since is not None
    # During the outage a probe goes out every second, whether or not the earlier ones came back.
    for _ in range(3):
        clock.now += 1
        mon.check()
    await settle()
    assert client.probes == 5


async def test_informers_that_cannot_list_make_it_unready_and_only_required_ones_ask_for_a_restart() -> None:
    clock = Clock()
    pods, podgroups = FakeInformer("pods"), FakeInformer("podgroups", optional=True)
    mon, _, _ = monitor(clock, [pods, podgroups])
    podgroups.failing_since, podgroups.last_error = clock.now, "list podgroups: HTTP 500"
    clock.now += 300
    assert mon.ready_problem() == "podgroups informer cannot list for 300.0 s: list podgroups: HTTP 500"
    assert mon.live_problem() == ""
    pods.failing_since, pods.last_error = clock.now, "list pods: HTTP 403"
    clock.now += 121
    assert mon.live_problem().startswith("pods informer cannot list for 121 s")


async def test_the_endpoints_answer_503_with_the_reason() -> None:
    problems: dict[str, Any] = {"live": "", "ready": "API server unreachable for 3.0 s: refused"}
    server = HealthServer(live=lambda: problems["live"], ready=lambda: problems["ready"], metrics=lambda: b"")
    port = await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert (response.status, await response.text()) == (503, problems["ready"])
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert (response.status, await response.text()) == (200, "ok")
    finally:
        await server.stop()
