"""The informer against a scripted client: failing lists are reported and retried with a bounded backoff,
and a silent watch is taken for dead (relist, reason `idle`)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any, cast

import orjson
from conftest import wait_for

from ai_scheduler.api.kube import KubeClient, ResourceMissing, WatchBroken, WatchIdle
from ai_scheduler.daemon.informer import RELIST_BACKOFF_MAX_SECONDS, Informer
from ai_scheduler.log import JsonLogger


class ScriptedClient:
    """Lists fail while `list_errors` has entries; a watch raises the next of `watch_errors`, else hangs."""

    def __init__(self, list_errors: list[Exception], watch_errors: list[Exception]) -> None:
        self.list_errors = list_errors
        self.watch_errors = watch_errors
        self.epoch = 0
        self.lists = 0
        self.idle_timeouts: list[float | None] = []
        self.pauses: list[float] = []
        self.informer: Informer[Any] | None = None
        self.failing_at_list: list[bool] = []  # whether the informer said it was failing, at each list

    async def list_as(self, resource: str, convert: Any) -> tuple[list[Any], str]:
        self.lists += 1
        if self.informer is not None:
            self.failing_at_list.append(self.informer.failing_since is not None)
        if self.list_errors:
            raise self.list_errors.pop(0)
        return [convert({"metadata": {"name": "a"}})], str(self.lists)

    async def watch(
        self, resource: str, version: str, *, timeout_seconds: int, idle_timeout: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        self.idle_timeouts.append(idle_timeout)
        if self.watch_errors:
            raise self.watch_errors.pop(0)
        await asyncio.Event().wait()
        yield {}

    async def retry_pause(self, seconds: float, epoch: int) -> None:
        self.pauses.append(seconds)


def informer(client: ScriptedClient, log: io.BytesIO, *, optional: bool = False) -> Informer[dict[str, Any]]:
    return Informer(cast(KubeClient, client), "pods", lambda kind, obj: None, lambda items: None,
                    JsonLogger(stream=log), optional=optional)


def relists(log: io.BytesIO) -> list[str]:
    lines = [orjson.loads(line) for line in log.getvalue().splitlines()]
    return [line["reason"] for line in lines if line["event"] == "informer.relist"]


async def test_failing_lists_are_reported_until_one_succeeds_and_back_off_at_most_2_s() -> None:
    client = ScriptedClient([WatchBroken("list pods: no answer within 1 s")] * 8, [])
    log = io.BytesIO()
    inf = client.informer = informer(client, log)
    task = asyncio.create_task(inf.run())
    try:
        await wait_for(inf.synced.is_set, what="the list that succeeds")
        assert client.failing_at_list == [False] + [True] * 8
        assert "no answer" in inf.last_error and inf.failing_since is None
        assert client.pauses and max(client.pauses) <= RELIST_BACKOFF_MAX_SECONDS * 1.2
        assert client.pauses[0] < 0.25 < RELIST_BACKOFF_MAX_SECONDS * 0.8 < max(client.pauses)
    finally:
        task.cancel()


async def test_a_silent_watch_is_taken_for_dead_and_relisted() -> None:
    client = ScriptedClient([], [WatchIdle("watch pods: no event or bookmark for 90 s")])
    log = io.BytesIO()
    inf = informer(client, log)
    inf.watch_idle = 7.5
    task = asyncio.create_task(inf.run())
    try:
        await wait_for(lambda: client.lists == 2, what="the relist")
        assert relists(log) == ["idle"]
        assert client.idle_timeouts[0] == 7.5
        assert inf.failing_since is None
    finally:
        task.cancel()


async def test_an_optional_resource_that_is_not_served_is_no_failure(monkeypatch: Any) -> None:
    monkeypatch.setattr("ai_scheduler.daemon.informer.ABSENT_RECHECK_SECONDS", 0.01)
    client = ScriptedClient([ResourceMissing("list podgroups: 404")], [])
    inf = informer(client, io.BytesIO(), optional=True)
    task = asyncio.create_task(inf.run())
    try:
        await wait_for(inf.synced.is_set, what="treated as empty")
        assert inf.failing_since is None
    finally:
        task.cancel()
