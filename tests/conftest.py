"""Shared fixtures: the simulated cluster over HTTP and the real scheduler daemon against it."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import Config, parse_config
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.daemon import Scheduler
from ai_scheduler.sim import SimApiServer

T = TypeVar("T")


def replace_atomically(path: Path, text: str) -> None:
    """Swap a file's content in one step, as a ConfigMap volume does (a plain write can be seen half done)."""
    staging = path.with_name(path.name + ".new")
    staging.write_text(text)
    os.replace(staging, path)


def stored_pod(sim: SimApiServer, name: str, namespace: str = "default") -> dict[str, Any]:
    """A copy of a pod the test knows to exist in the simulated cluster."""
    pod = sim.store.get("pods", namespace, name)
    assert pod is not None, f"pod {namespace}/{name} not found"
    return pod


async def wait_for(
    predicate: Callable[[], T | None], timeout: float = 20.0, interval: float = 0.02, what: str = "condition"
) -> T:
    """Poll until predicate() is truthy (a deadline, not a timing assertion); its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


class RunningScheduler:
    """A daemon running in this event loop, with its JSON log captured for assertions."""

    def __init__(
        self, scheduler: Scheduler, client: KubeClient, log: io.BytesIO, task: asyncio.Task[None]
    ) -> None:
        self.scheduler = scheduler
        self.client = client
        self._log = log
        self.task = task

    def log_lines(self, event: str | None = None) -> list[dict[str, Any]]:
        lines = [orjson.loads(line) for line in self._log.getvalue().splitlines() if line.strip()]
        return [line for line in lines if event is None or line["event"] == event]

    async def stop(self) -> None:
        self.scheduler.stop()
        await asyncio.wait_for(self.task, 15)
        await self.client.close()


@pytest.fixture
async def sim() -> AsyncIterator[SimApiServer]:
    server = SimApiServer(bookmark_interval=0.2)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def api(sim: SimApiServer) -> AsyncIterator[KubeClient]:
    """A client of the test's own, to create and change objects as a user would."""
    client = await KubeClient.connect(host=sim.url)
    yield client
    await client.close()


def fast_config(**scheduling: Any) -> Config:
    """Defaults with fast retries, so that tests converge quickly."""
    settings = {
        "initialBackoffSeconds": 0.05,
        "maxBackoffSeconds": 0.2,
        "unschedulableFlushSeconds": 5,
        **scheduling,
    }
    return parse_config({"server": {"port": 0, "bindAddress": "127.0.0.1"}, "scheduling": settings})


StartScheduler = Callable[..., Awaitable[RunningScheduler]]


@pytest.fixture
async def start_scheduler(sim: SimApiServer) -> AsyncIterator[StartScheduler]:
    running: list[RunningScheduler] = []

    async def start(
        config: Config | None = None, *, wait_ready: bool = True, **kwargs: Any
    ) -> RunningScheduler:
        client = await KubeClient.connect(host=sim.url)
        log = io.BytesIO()
        scheduler = Scheduler(config or fast_config(), client, JsonLogger(stream=log), seed=1, **kwargs)
        task = asyncio.create_task(scheduler.run())
        handle = RunningScheduler(scheduler, client, log, task)
        running.append(handle)
        if wait_ready:
            await wait_for(scheduler.ready.is_set, what="scheduler ready")
        return handle

    yield start
    for handle in running:
        if not handle.task.done():
            await handle.stop()

