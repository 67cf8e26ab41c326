"""Reports (daemon/reports.py): a reason that did not reach the pod is tried again, and never believed
written if it was not."""

from __future__ import annotations

import asyncio
import io
from typing import Any, cast

import pytest
from builders import Pod, make_pod

from ai_scheduler.api.kube import ApiResult, KubeClient
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.daemon import reports as feedback_module
from ai_scheduler.daemon.reports import PodReports
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.metrics import Metrics

NO_ANSWER = ApiResult(0, {"message": "no answer within 10 s (apiRequestTimeoutSeconds)"})


class StatusClient:
    """Pod status patches and event creations answered from scripts (the last answer repeats)."""

    def __init__(self, answers: list[ApiResult], event_answers: list[ApiResult] | None = None) -> None:
        self.answers = answers
        self.event_answers = event_answers or [ApiResult(201, {})]
        self.patches: list[str] = []
        self.events: list[str] = []

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        self.patches.append(patch["status"]["conditions"][0]["message"])
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def create_event(self, namespace: str, event: dict[str, Any]) -> ApiResult:
        self.events.append(event["reason"])
        return self.event_answers.pop(0) if len(self.event_answers) > 1 else self.event_answers[0]

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return ApiResult(200, {})


def report_pod() -> PodRecord:
    return Pod("p").uid().record()


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feedback_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))


def feedback(client: StatusClient) -> PodReports:
    return PodReports(cast(KubeClient, client), JsonLogger(stream=io.BytesIO()), Metrics(),
                    component="ai-scheduler", repeat_window=300)


async def test_a_condition_without_answer_is_tried_again_until_it_lands() -> None:
    client = StatusClient([NO_ANSWER, ApiResult(503, {}), ApiResult(200, {})])
    fb = feedback(client)
    fb.unschedulable(report_pod(), "0/1 nodes are available: 1 Insufficient cpu.")
    await fb.close()
    assert client.patches == ["0/1 nodes are available: 1 Insufficient cpu."] * 3


async def test_a_condition_that_never_lands_is_written_again_on_the_next_attempt() -> None:
    client = StatusClient([NO_ANSWER])
    fb = feedback(client)
    record = report_pod()
    fb.unschedulable(record, "no room")
    await asyncio.wait_for(fb._calls.join(), 5)  # every try made
    tries = len(client.patches)
    assert tries == 4  # the first try and one per delay
    # The pod's next attempt has the same reason: the condition is not on the pod, so it is written again.
    client.answers = [ApiResult(200, {})]
    fb.unschedulable(record, "no room")
    await fb.close()
    assert len(client.patches) == tries + 1


async def test_a_superseded_condition_is_not_retried() -> None:
    client = StatusClient([NO_ANSWER, ApiResult(200, {})])
    fb = feedback(client)
    record = report_pod()
    fb.unschedulable(record, "first reason")
    await asyncio.sleep(0)  # the first try goes out and gets no answer
    fb.unschedulable(record, "second reason")
    await fb.close()
    assert client.patches[-1] == "second reason"
    assert client.patches.count("first reason") == 1


async def test_an_event_without_answer_is_sent_again() -> None:
    client = StatusClient([ApiResult(200, {})], [NO_ANSWER, ApiResult(201, {})])
    fb = feedback(client)
    involved = {"kind": "Pod", "namespace": "default", "name": "p", "uid": "uid-p"}
    fb.event(involved, "Normal", "Scheduled", "ok")
    await fb.close()
    assert client.events == ["Scheduled", "Scheduled"]


class EventClient(StatusClient):
    """Keeps every event it is sent whole."""

    def __init__(self) -> None:
        super().__init__([ApiResult(200, {})])
        self.sent: list[dict[str, Any]] = []

    async def create_event(self, namespace: str, event: dict[str, Any]) -> ApiResult:
        self.sent.append(event)
        return await super().create_event(namespace, event)


async def test_events_name_the_pods_profile_as_their_reporting_component() -> None:
    """kube-scheduler records each profile's events under the profile's schedulerName."""
    client = EventClient()
    fb = feedback(client)  # the top-level schedulerName: ai-scheduler
    obj = make_pod("batch", scheduler_name="batch-scheduler")
    obj["metadata"]["uid"] = "uid-batch"
    batch = PodRecord.from_api(obj)
    fb.unschedulable(batch, "0/1 nodes are available: 1 Insufficient cpu.")
    fb.scheduled(batch, "n1")
    fb.event({"kind": "Pod", "namespace": "default", "name": "p", "uid": "uid-p"}, "Normal", "Other", "x")
    await fb.close()
    sent = {e["reason"]: (e["source"]["component"], e["reportingComponent"]) for e in client.sent}
    assert sent == {
        "FailedScheduling": ("batch-scheduler", "batch-scheduler"),
        "Scheduled": ("batch-scheduler", "batch-scheduler"),
        "Other": ("ai-scheduler", "ai-scheduler"),  # no profile known: the top-level schedulerName
    }
