"""The scheduler's side of `ai-scheduler status hold / release / requeue`: the hold annotation is a
scheduling gate, and a new requeue-at value retries a waiting pod now with its backoff reset."""

from __future__ import annotations

import io
from typing import Any

import orjson
from builders import Pod, make_node

from ai_scheduler.cache.records import HOLD_ANNOTATION, REQUEUE_ANNOTATION, PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.tracesim.engine import Simulation


def core_and_log(simulation: Simulation | None = None) -> tuple[SchedulerCore, io.BytesIO]:
    core = (simulation or Simulation(default_config(), [], [])).core
    log = io.BytesIO()
    core.handlers.log = JsonLogger(stream=log)
    core.handlers.on_node_event("ADDED", make_node("n0", cpu="64", memory="256Gi", gpus=8))
    return core, log


def events(log: io.BytesIO, name: str) -> list[dict[str, Any]]:
    lines = [orjson.loads(line) for line in log.getvalue().splitlines() if line.strip()]
    return [line for line in lines if line["event"] == name]


def held_pod(annotations: dict[str, str] | None = None, version: str = "1") -> PodRecord:
    return Pod("job", namespace="team-a", gpus=1, annotations=annotations).uid().rv(version).record()


def test_the_hold_annotation_keeps_a_pod_out_of_the_queue_and_counted_as_gated() -> None:
    core, log = core_and_log()
    core.handlers.pod_event("ADDED", held_pod({HOLD_ANNOTATION: "true"}))
    assert "uid-job" not in core.queue
    assert core.queue.pending_counts()["gated"] == 1
    assert [(e["pod"], e["by"]) for e in events(log, "pod.held")] == [("team-a/job", "annotation")]
    # The same pod seen again (a relist, a status change) is logged once, not per event.
    core.handlers.pod_event("MODIFIED", held_pod({HOLD_ANNOTATION: "true"}, version="2"))
    assert len(events(log, "pod.held")) == 1
    # Released: the annotation goes, the pod joins activeQ.
    core.handlers.pod_event("MODIFIED", held_pod(version="3"))
    assert "uid-job" in core.queue and core.queue.counts()["active"] == 1
    assert core.queue.pending_counts()["gated"] == 0
    assert [e["pod"] for e in events(log, "pod.ungated")] == ["team-a/job"]


def test_a_hold_value_other_than_true_does_not_hold() -> None:
    core, _ = core_and_log()
    core.handlers.pod_event("ADDED", held_pod({HOLD_ANNOTATION: "false"}))
    assert "uid-job" in core.queue


def test_a_new_requeue_value_moves_a_backing_off_pod_to_active_and_resets_its_backoff() -> None:
    simulation = Simulation(default_config(), [], [])
    core, log = core_and_log(simulation)
    queue, clock = core.queue, simulation.clock
    initial = queue.backoff_duration(1)
    core.handlers.pod_event("ADDED", held_pod())
    for attempt in range(1, 4):  # three failures, each waited out on the simulated clock
        qp = queue.pop_nowait()
        assert qp is not None and qp.attempts == attempt
        assert queue.requeue(qp, unschedulable=False, reason="bind failed")
        assert queue.counts()["backoff"] == 1
        backoff, _ = queue.deadlines()
        assert backoff is not None and backoff - clock() == initial * 2 ** (attempt - 1)
        if attempt < 3:
            clock.now = backoff - clock.epoch
            queue.flush_due()
    assert queue.counts() == {"active": 0, "backoff": 1, "unschedulable": 0, "in_flight": 0}

    core.handlers.pod_event("MODIFIED", held_pod({REQUEUE_ANNOTATION: "2026-01-01T00:00:00.000Z"}, "2"))
    assert queue.counts()["active"] == 1 and queue.counts()["backoff"] == 0
    assert [(e["pod"], e["moved"]) for e in events(log, "pod.requeued")] == [("team-a/job", True)]
    # The attempts stay counted; the backoff starts over: the next failure waits one initial period.
    qp = queue.pop_nowait()
    assert qp is not None and qp.attempts == 4
    assert queue.requeue(qp, unschedulable=False)
    backoff, _ = queue.deadlines()
    assert backoff is not None and backoff - clock() == initial
    # The same value seen again (a relist) asks for nothing.
    core.handlers.pod_event("MODIFIED", held_pod({REQUEUE_ANNOTATION: "2026-01-01T00:00:00.000Z"}, "3"))
    assert len(events(log, "pod.requeued")) == 1
    assert queue.counts()["backoff"] == 1


def test_requeue_moves_an_unschedulable_pod_at_once() -> None:
    queue = SchedulingQueue(initial_backoff=10, max_backoff=100)
    queue.add(held_pod())
    qp = queue.pop_nowait()
    assert qp is not None
    assert queue.requeue(qp, unschedulable=True, reason="0/1 nodes are available")
    assert queue.counts()["unschedulable"] == 1
    assert queue.retry_now("uid-job")
    assert queue.counts()["active"] == 1
    assert not queue.retry_now("uid-job"), "already active: nothing moves"
    qp = queue.pop_nowait()
    assert qp is not None
    assert not queue.retry_now("uid-job"), "in flight: nothing moves"
    assert queue.requeue(qp, unschedulable=False)
    assert queue.counts()["active"] == 1, "the backoff started over when it was asked"
