"""StrictFIFO queues (scheduler/strict_fifo.py): no pod of the queue starts while one ahead of it waits.

In the trace simulator's timed mode, on one node of 4 cores: two 1-core pods run from t=0 to t=10, a
4-core pod arrives at t=1 (it cannot start before they leave), two 1-core pods arrive at t=2. The
expected starts are worked out by hand: with BestEffortFIFO the small pods pass the big one (they
start at t=2, and the big one waits for them until t=22); with StrictFIFO they wait behind it (it
starts at t=10 when the first two leave, they at t=20 when it leaves). Then the core directly: the
reason on a parked pod, its attempts, and a deleted head releasing the pods parked behind it.
"""

from __future__ import annotations

from typing import Any

import pytest
from builders import make_node, make_pod

from ai_scheduler.config import Config, parse_config
from ai_scheduler.log import JsonLogger, NullStream
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Outbox
from ai_scheduler.trace import NodeSpec, TraceJob
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.records import Mode
from unit.scheduler.test_gang_shapes import Recorded

Gi = 1 << 30


def _config(strategy: str | None) -> Config:
    queue: dict[str, Any] = {"name": "default"}
    if strategy is not None:
        queue["queueingStrategy"] = strategy
    return parse_config({
        "server": {"port": 0, "bindAddress": "127.0.0.1"},
        "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2,
                       "unschedulableFlushSeconds": 5},
        "queues": [queue],
    })


def _starts(strategy: str | None, hints: bool) -> dict[str, float | None]:
    def trace_job(name: str, submit: float, cores: int, run: float) -> TraceJob:
        return TraceJob(name=name, submit_time=submit, duration=run, cpu=cores * 1000, memory=Gi)

    jobs = [trace_job("a0", 0, 1, 10), trace_job("a1", 0, 1, 10), trace_job("big", 1, 4, 10),
            trace_job("s0", 2, 1, 20),
            trace_job("s1", 2, 1, 20)]
    node = NodeSpec(name="n0", cpu=4000, memory=64 * Gi)
    result = Simulation(_config(strategy), [node], jobs, Mode.TIMED, seed=0, queueing_hints=hints).run()
    return {pod.name: pod.start for pod in result.pods}


@pytest.mark.parametrize("hints", [False, True])
def test_best_effort_fifo_lets_small_pods_pass_a_waiting_big_one(hints: bool) -> None:
    for strategy in (None, "BestEffortFIFO"):  # the default is BestEffortFIFO
        assert _starts(strategy, hints) == {"a0": 0.0, "a1": 0.0, "big": 22.0, "s0": 2.0, "s1": 2.0}


@pytest.mark.parametrize("hints", [False, True])  # with queueing hints, room freed leaves parked pods be
def test_strict_fifo_starts_nothing_behind_a_waiting_head(hints: bool) -> None:
    assert _starts("StrictFIFO", hints) == {"a0": 0.0, "a1": 0.0, "big": 10.0, "s0": 20.0, "s1": 20.0}


def _core(strategy: str) -> tuple[SchedulerCore, Recorded]:
    recorded: list[Recorded] = []

    def outbox(core: SchedulerCore) -> Outbox:
        recorded.append(Recorded(core))
        return Outbox(recorded[0], recorded[0], recorded[0])

    core = SchedulerCore(_config(strategy), JsonLogger(stream=NullStream()), Metrics(), outbox,
                         clock=lambda: 1000.0, seed=0)
    core.handlers.on_node_event("ADDED", _meta(make_node("n0", cpu="4", memory="64Gi"), 0))
    core.ready.set()
    return core, recorded[0]


def _meta(obj: dict[str, Any], number: int) -> dict[str, Any]:
    obj["metadata"].update(uid=f"uid-{obj['metadata']['name']}", resourceVersion="1",
                           creationTimestamp=f"2026-11-26T00:00:{number:02d}Z")
    if obj["kind"] == "Pod":
        obj["status"] = {"phase": "Pending"}
    return obj


def _drain(core: SchedulerCore) -> None:
    guard = core.cycle.guard
    assert guard is not None
    while (qp := core.queue.pop_nowait()) is not None:
        guard.run(qp, core.cycle.schedule_one)


def test_a_parked_pod_says_whom_it_waits_behind_and_a_deleted_head_releases_it() -> None:
    core, recorded = _core("StrictFIFO")
    big = _meta(make_pod("big", cpu="8"), 1)  # more than the node has: it waits for good
    small = _meta(make_pod("small", cpu="1"), 2)
    core.handlers.on_pod_event("ADDED", big)
    core.handlers.on_pod_event("ADDED", small)
    _drain(core)
    assert "small" not in recorded.placed
    reasons = dict(recorded.reasons)
    assert reasons["big"].startswith("0/1 nodes are available: 1 Insufficient cpu")
    assert reasons["small"] == "waiting behind default/big in StrictFIFO queue default"
    parked = core.queue.pending_info("uid-small")
    assert parked is not None and parked.attempts == 0, "a parked pod was not tried"
    core.handlers.on_pod_event("DELETED", big)  # the head leaves: the pod behind it is tried again
    _drain(core)
    assert recorded.placed["small"][0] == "n0"


def test_best_effort_places_the_small_pod_at_once() -> None:
    core, recorded = _core("BestEffortFIFO")
    core.handlers.on_pod_event("ADDED", _meta(make_pod("big", cpu="8"), 1))
    core.handlers.on_pod_event("ADDED", _meta(make_pod("small", cpu="1"), 2))
    _drain(core)
    assert recorded.placed["small"][0] == "n0"


def test_a_pod_invalid_as_written_never_blocks_its_queue() -> None:
    core, recorded = _core("StrictFIFO")
    broken = make_pod("broken", cpu="1", annotations={"ai-scheduler.io/gpu-fraction": "2"})
    core.handlers.on_pod_event("ADDED", _meta(broken, 1))
    core.handlers.on_pod_event("ADDED", _meta(make_pod("small", cpu="1"), 2))
    _drain(core)
    assert "gpu-fraction" in dict(recorded.reasons)["broken"]
    assert recorded.placed["small"][0] == "n0", "the broken pod ahead of it does not hold it back"
