"""Leader election (daemon/leader.py) against the simulated API server's Leases, with short timings.

Two electors contend for one Lease: one wins; the other takes over once the winner stops renewing (after
the Lease's duration, not before), at once when it releases the Lease; a 409 between a read and a write is
an election lost, never an error; a leader that cannot renew gives up within its renew deadline, and one
that finds another holder in the Lease gives up at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from conftest import wait_for

from ai_scheduler.api.kube import ApiResult, KubeClient
from ai_scheduler.config import LeaderElectionSettings, parse_config
from ai_scheduler.daemon.leader import LeaderElector, Outcome, Role, lease_namespace, micro_time
from ai_scheduler.log import JsonLogger
from ai_scheduler.sim import SimApiServer

FAST = LeaderElectionSettings(lease_namespace="kube-system", lease_duration_seconds=1.0,
                              renew_deadline_seconds=0.6, retry_period_seconds=0.1)


@pytest.fixture
async def client(sim: SimApiServer) -> AsyncIterator[KubeClient]:
    api = await KubeClient.connect(host=sim.url)
    yield api
    await api.close()


class Candidate:
    """An elector running its campaign, with its log."""

    def __init__(self, api: Any, name: str, settings: LeaderElectionSettings = FAST) -> None:
        self.stream = io.BytesIO()
        self.elector = LeaderElector(api, settings, JsonLogger(stream=self.stream), identity=name)
        self.task = asyncio.create_task(self.elector.run())

    def events(self, event: str) -> list[dict[str, Any]]:
        lines = [orjson.loads(line) for line in self.stream.getvalue().splitlines()]
        return [line for line in lines if line["event"] == event]

    async def crash(self) -> None:
        """Stop without releasing anything, as a killed process does."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def holder(sim: SimApiServer) -> str:
    lease = sim.store.get("leases", "kube-system", "ai-scheduler")
    assert lease is not None
    return str(lease["spec"].get("holderIdentity") or "")


async def first_leader(*candidates: Candidate) -> Candidate:
    await wait_for(lambda: any(c.elector.leading.is_set() for c in candidates), timeout=5, what="a leader")
    return next(c for c in candidates if c.elector.leading.is_set())


async def test_of_two_candidates_one_leads_and_the_other_waits(sim: SimApiServer, client: KubeClient) -> None:
    a, b = Candidate(client, "a"), Candidate(client, "b")
    leader = await first_leader(a, b)
    other = b if leader is a else a
    await asyncio.sleep(1.5)  # more than a lease duration: the leader renews, the other never takes it
    assert leader.elector.role is Role.LEADER and other.elector.role is Role.STANDBY
    assert holder(sim) == leader.elector.identity == other.elector.holder
    assert len(leader.events("leader.acquired")) == 1 and not other.events("leader.acquired")
    lease = sim.store.get("leases", "kube-system", "ai-scheduler")
    assert lease is not None and lease["spec"]["leaseDurationSeconds"] == 1
    await a.crash()
    await b.crash()


async def test_a_crashed_leader_is_replaced_after_the_lease_duration(
    sim: SimApiServer, client: KubeClient
) -> None:
    a = Candidate(client, "a")
    await first_leader(a)
    b = Candidate(client, "b")
    await asyncio.sleep(0.3)
    await a.crash()
    loop = asyncio.get_running_loop()
    crashed = loop.time()
    await wait_for(b.elector.leading.is_set, timeout=5, interval=0.005, what="b leading")
    took = loop.time() - crashed
    # Not before the Lease ran out from a's last renewal (up to a retry period before the crash), and
    # soon after: b wakes when the Lease it saw runs out.
    assert FAST.lease_duration_seconds - FAST.retry_period_seconds - 0.05 <= took
    assert took <= FAST.lease_duration_seconds + FAST.retry_period_seconds * 1.2 + 0.3
    assert holder(sim) == "b"
    lease = sim.store.get("leases", "kube-system", "ai-scheduler")
    assert lease is not None and lease["spec"]["leaseTransitions"] == 1
    await b.crash()


async def test_a_released_lease_is_taken_at_once(sim: SimApiServer, client: KubeClient) -> None:
    slow = LeaderElectionSettings(lease_namespace="kube-system", lease_duration_seconds=30,
                                  renew_deadline_seconds=20, retry_period_seconds=0.2)
    a = Candidate(client, "a", slow)
    await first_leader(a)
    b = Candidate(client, "b", slow)
    await asyncio.sleep(0.3)
    a.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await a.task
    assert await a.elector.release()
    assert a.elector.role is Role.RELEASED and a.events("leader.released")
    assert holder(sim) == ""
    loop = asyncio.get_running_loop()
    released = loop.time()
    await wait_for(b.elector.leading.is_set, timeout=5, interval=0.005, what="b leading")
    assert loop.time() - released <= 0.2 * 1.2 + 0.2  # its next try, not the 30 s Lease
    assert not await a.elector.release()  # no longer ours: nothing to release
    await b.crash()


class RacingApi:
    """Forwards to the API server, but lets `rival` take the Lease between our read and our write."""

    def __init__(self, api: KubeClient, rival: Callable[[], Any]) -> None:
        self.api = api
        self.rival = rival

    async def get_lease(self, namespace: str, name: str) -> ApiResult:
        return await self.api.get_lease(namespace, name)

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> ApiResult:
        await self.rival()
        return await self.api.create_lease(namespace, lease)

    async def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> ApiResult:
        await self.rival()
        return await self.api.replace_lease(namespace, name, lease)


async def test_a_conflict_is_an_election_lost_not_an_error(sim: SimApiServer, client: KubeClient) -> None:
    log = JsonLogger(stream=io.BytesIO())
    rival = LeaderElector(client, FAST, log, identity="rival")
    loser = LeaderElector(RacingApi(client, rival._try), FAST, log, identity="loser")
    # No Lease yet: both read 404, the rival creates it first, our create gets 409 AlreadyExists.
    assert await loser._try() is Outcome.CONFLICT
    assert holder(sim) == "rival" and loser.role is Role.STANDBY
    # Released (free), read by both: the rival writes first, our write under the old version gets 409.
    rival.role = Role.LEADER
    assert await rival.release()
    assert await loser._try() is Outcome.CONFLICT
    assert holder(sim) == "rival" and not loser.leading.is_set()
    # And a campaign that meets conflicts goes on as a standby.
    task = asyncio.create_task(loser.run())
    await asyncio.sleep(0.3)
    assert not task.done() and loser.role is Role.STANDBY
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class FlakyApi:
    """The API server, until `fail` is set: then no answer (status 0), as during an outage."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self.fail = False

    async def get_lease(self, namespace: str, name: str) -> ApiResult:
        return ApiResult(0, {"message": "down"}) if self.fail else await self.api.get_lease(namespace, name)

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> ApiResult:
        if self.fail:
            return ApiResult(0, {"message": "down"})
        return await self.api.create_lease(namespace, lease)

    async def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> ApiResult:
        if self.fail:
            return ApiResult(0, {"message": "down"})
        return await self.api.replace_lease(namespace, name, lease)


async def test_a_leader_that_cannot_renew_gives_up_within_its_renew_deadline(client: KubeClient) -> None:
    api = FlakyApi(client)
    a = Candidate(api, "a")
    await first_leader(a)
    loop = asyncio.get_running_loop()
    api.fail = True
    cut = loop.time()
    await asyncio.wait_for(a.task, 5)  # the campaign ends: lost
    assert a.elector.role is Role.LOST and a.elector.lost.is_set() and not a.elector.leading.is_set()
    assert loop.time() - cut <= FAST.renew_deadline_seconds + 0.05
    assert "renewDeadlineSeconds" in a.events("leader.lost")[0]["reason"]
    # Before the Lease runs out for the others: the renew deadline is shorter than the lease.
    assert FAST.renew_deadline_seconds < FAST.lease_duration_seconds


async def test_a_leader_that_finds_another_holder_gives_up_at_once(
    sim: SimApiServer, client: KubeClient
) -> None:
    a = Candidate(client, "a")
    await first_leader(a)
    lease = sim.store.get("leases", "kube-system", "ai-scheduler")
    assert lease is not None
    now = micro_time(0)
    lease["spec"].update(holderIdentity="usurper", renewTime=now, acquireTime=now)
    assert (await client.replace_lease("kube-system", "ai-scheduler", lease)).ok
    await asyncio.wait_for(a.task, 2)
    assert a.elector.role is Role.LOST
    assert a.events("leader.lost")[0]["reason"] == "another holder took the Lease"


def test_the_lease_namespace_is_the_pods_own_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = parse_config({}).leader_election
    assert settings == LeaderElectionSettings(enabled=True, lease_name="ai-scheduler", lease_namespace="",
                                              lease_duration_seconds=12, renew_deadline_seconds=8,
                                              retry_period_seconds=2)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert lease_namespace(settings) == "kube-system"
    monkeypatch.setenv("POD_NAMESPACE", "ai-system")
    assert lease_namespace(settings) == "ai-system"
    configured = parse_config({"leaderElection": {"leaseNamespace": "ops"}}).leader_election
    assert lease_namespace(configured) == "ops"
    monkeypatch.setenv("POD_NAME", "ai-scheduler-7d9f-abcde")
    log = JsonLogger(stream=io.BytesIO())
    one, two = (LeaderElector(None, settings, log).identity for _ in range(2))  # type: ignore[arg-type]
    assert one.startswith("ai-scheduler-7d9f-abcde_") and one != two
