"""The binder against a scripted API server: a binding without an answer is retried on the same node,
keeping its assumption, and a 409 that shows the earlier try landed is a success."""

from __future__ import annotations

import asyncio
import io
from typing import Any, cast

import orjson

from ai_scheduler.api.kube import ApiResult, KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.daemon.binder import BIND_RETRY_MAX_SECONDS, Binder
from ai_scheduler.daemon.reports import PodReports
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.framework.runtime import Decision
from ai_scheduler.scheduler.metrics import Metrics
from unit.cache.test_cache import cached_node, cached_pod

NO_ANSWER = ApiResult(0, {"message": "no answer within 1 s (apiRequestTimeoutSeconds)"})


def conflict(node_name: str) -> ApiResult:
    # kube-apiserver's words (the simulated server's are the same after the colon)
    message = (
        'Operation cannot be fulfilled on pods/binding "p": '
        f'pod p is already assigned to node "{node_name}"'
    )
    return ApiResult(409, {"message": message})


class ScriptedClient:
    """The calls the binder and feedback make; bindings are answered from `answers` (the last one repeats)."""

    def __init__(self, answers: list[ApiResult], cache: SchedulerCache) -> None:
        self.answers = answers
        self.cache = cache
        self.epoch = 0
        self.binds: list[tuple[str, bool]] = []  # (node, still assumed when the request went out)
        self.pauses: list[float] = []
        self.events: list[dict[str, Any]] = []

    async def bind(self, namespace: str, name: str, uid: str, node_name: str) -> ApiResult:
        self.binds.append((node_name, self.cache.is_assumed(uid)))
        await asyncio.sleep(0)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def retry_pause(self, seconds: float, epoch: int) -> None:
        self.pauses.append(seconds)
        await asyncio.sleep(0)

    async def create_event(self, namespace: str, event: dict[str, Any]) -> ApiResult:
        self.events.append(event)
        return ApiResult(201, {})

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return ApiResult(200, {})

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return ApiResult(200, {})


class Harness:
    def __init__(self, answers: list[ApiResult]) -> None:
        self.cache = SchedulerCache()
        self.cache.set_node(cached_node("n1", cpu="4"))
        self.cache.set_node(cached_node("n2", cpu="4"))
        self.queue = SchedulingQueue()
        self.client = ScriptedClient(answers, self.cache)
        self.log = io.BytesIO()
        logger = JsonLogger(stream=self.log)
        metrics = Metrics()
        self.feedback = PodReports(cast(KubeClient, self.client), logger, metrics, component="ai-scheduler",
                                 repeat_window=300)
        self.binder = Binder(cast(KubeClient, self.client), self.cache, self.queue, self.feedback, metrics,
                             logger, concurrency=4)
        self.succeeded: list[str] = []
        self.failed: list[int] = []
        self.binder.on_success = lambda p, n: self.succeeded.append(n)
        self.binder.on_failure = lambda p, result: self.failed.append(result.status)

    def submit(self, record: PodRecord, node_name: str = "n1") -> None:
        self.queue.add(record)
        qp = self.queue.pop_nowait()
        assert qp is not None
        self.cache.assume(record, node_name)
        self.binder.submit(qp, record, Decision(node_name, 2))

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = [orjson.loads(line) for line in self.log.getvalue().splitlines()]
        return [line for line in lines if line["event"] == name]

    async def finish(self) -> None:
        await self.binder.drain(timeout=5)
        await self.feedback.close()


async def test_a_binding_without_an_answer_is_retried_on_the_same_node_keeping_its_assumption() -> None:
    h = Harness([NO_ANSWER, NO_ANSWER, ApiResult(201, {})])
    p = cached_pod("p")
    h.submit(p)
    await h.finish()
    assert h.client.binds == [("n1", True)] * 3, "same node each time, resources still held meanwhile"
    assert [line["retry"] for line in h.events("bind.retry")] == [1, 2]
    assert 0 < h.client.pauses[0] < h.client.pauses[1] <= BIND_RETRY_MAX_SECONDS * 1.2
    assert h.succeeded == ["n1"] and h.failed == []
    assert h.cache.is_assumed(p.uid), "bound: the watch confirms it, or the assumption expires"
    assert h.cache.node_usage("n1")["cpu"] == 1000
    assert h.events("bind.failed") == []


async def test_a_409_naming_our_node_after_an_unanswered_try_is_the_earlier_try_having_landed() -> None:
    h = Harness([NO_ANSWER, conflict("n1")])
    p = cached_pod("p")
    h.submit(p)
    await h.finish()
    assert h.succeeded == ["n1"] and h.failed == []
    assert h.events("bind.landed_earlier") and h.events("bind.failed") == []
    assert h.cache.node_usage("n1")["cpu"] == 1000
    assert [e["reason"] for e in h.client.events] == ["Scheduled"]


async def test_a_409_naming_another_node_forgets_the_assumption_and_requeues() -> None:
    h = Harness([NO_ANSWER, conflict("n2")])
    p = cached_pod("p")
    h.submit(p)
    await h.finish()
    assert h.succeeded == [] and h.failed == [409]
    assert h.events("bind.failed")[0]["code"] == 409
    assert not h.cache.is_assumed(p.uid) and h.cache.node_usage("n1").get("cpu", 0) == 0
    assert len(h.queue) == 1, "back in the queue, with backoff"


async def test_a_409_on_the_first_try_is_a_conflict_even_when_it_names_our_node() -> None:
    """Without an unanswered try of ours, someone else bound the pod: the existing path, unchanged."""
    h = Harness([conflict("n1")])
    h.submit(cached_pod("p"))
    await h.finish()
    assert h.succeeded == [] and h.failed == [409]


async def test_drain_gives_up_bindings_still_retrying() -> None:
    h = Harness([NO_ANSWER])
    h.submit(cached_pod("p"))
    await asyncio.sleep(0.01)
    await h.binder.drain(timeout=0.05)
    assert h.binder.in_flight == 0
    assert len(h.client.binds) > 1
    await h.feedback.close()
