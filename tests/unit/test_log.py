"""The JSON-line logger: one object per line, and the daemon's batched writes (log.py)."""

from __future__ import annotations

import asyncio
import io

import orjson
from builders import make_node, make_pod

from ai_scheduler.config import default_config
from ai_scheduler.log import SCHEMA_VERSION, JsonLogger
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Outbox
from ai_scheduler.visibility.resources import RecentDecisions, decision_items
from unit.scheduler.test_gang_shapes import Recorded


class CountingSink(io.BytesIO):
    """A byte sink that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes, /) -> int:  # type: ignore[override]
        self.writes += 1
        return super().write(data)


def events(sink: io.BytesIO) -> list[str]:
    return [orjson.loads(line)["event"] for line in sink.getvalue().splitlines()]


def test_unbatched_lines_are_written_at_once() -> None:
    sink = CountingSink()
    logger = JsonLogger(stream=sink)
    logger.info("a", pod="default/p")
    logger.debug("hidden")
    assert events(sink) == ["a"]
    assert orjson.loads(sink.getvalue())["pod"] == "default/p"


def test_batched_lines_go_out_in_one_write_at_the_next_loop_step() -> None:
    async def main() -> None:
        sink = CountingSink()
        logger = JsonLogger(stream=sink, batch=True)
        for i in range(8):
            logger.info("decision", pod=f"default/p{i}")
        assert sink.getvalue() == b""  # held until the loop runs its callbacks
        await asyncio.sleep(0)
        assert events(sink) == ["decision"] * 8
        assert sink.writes == 1

    asyncio.run(main())


def test_a_task_started_after_a_line_finds_it_written() -> None:
    """A binding is a task the attempt starts after logging its decision: the line is out first."""

    async def main() -> None:
        sink = CountingSink()
        logger = JsonLogger(stream=sink, batch=True)
        seen: list[list[str]] = []

        async def bind() -> None:
            seen.append(events(sink))

        logger.info("decision")
        await asyncio.create_task(bind())
        assert seen == [["decision"]]

    asyncio.run(main())


def test_a_warning_writes_what_is_held_first_and_in_order() -> None:
    async def main() -> None:
        sink = CountingSink()
        logger = JsonLogger(stream=sink, batch=True)
        logger.info("first")
        logger.warning("second")
        assert events(sink) == ["first", "second"]
        await asyncio.sleep(0)  # the queued flush finds nothing left
        assert events(sink) == ["first", "second"]

    asyncio.run(main())


def test_flush_writes_the_last_step_when_the_loop_is_gone() -> None:
    sink = CountingSink()
    logger = JsonLogger(stream=sink, batch=True)

    async def last_step() -> None:
        logger.info("last")

    asyncio.run(last_step())  # asyncio.run runs the queued flush as it shuts down; a closed loop may not
    logger.info("outside a loop")  # written at once
    logger.flush()
    assert events(sink) == ["last", "outside a loop"]


def test_every_line_carries_the_schema_version() -> None:
    sink = io.BytesIO()
    log = JsonLogger(stream=sink, component="x")
    log.info("a")
    log.warning("b", detail=1)
    lines = [orjson.loads(line) for line in sink.getvalue().splitlines()]
    assert [(line["event"], line["v"]) for line in lines] == [("a", SCHEMA_VERSION), ("b", SCHEMA_VERSION)]


def test_recent_decisions_are_kept_whatever_the_log_level() -> None:
    """The visibility API and the web page read the last decisions from RecentDecisions: a daemon run at
    --log-level warning still builds them (and writes none of them)."""
    sink = io.BytesIO()
    recent = RecentDecisions(JsonLogger(stream=sink, level="warning"))
    core = SchedulerCore(default_config(), recent, Metrics(), lambda core: Outbox(*[Recorded(core)] * 3),
                         seed=0)
    node = make_node("n0", cpu="4", memory="16Gi")
    node["metadata"].update(uid="n0", resourceVersion="1")
    core.handlers.on_node_event("ADDED", node)
    for name, cpu in (("fits", "1"), ("too-big", "8")):
        pod = make_pod(name, cpu=cpu)
        pod["metadata"].update(uid=name, resourceVersion="1", creationTimestamp="2026-11-26T00:00:00Z")
        pod["status"] = {"phase": "Pending"}
        core.handlers.on_pod_event("ADDED", pod)
    guard = core.cycle.guard
    assert guard is not None
    while (qp := core.queue.pop_nowait()) is not None:
        guard.run(qp, core.cycle.schedule_one)
    items = {item["pod"]: item for item in decision_items(recent)}
    assert items["default/fits"]["result"] == "scheduled" and items["default/fits"]["node"] == "n0"
    assert items["default/too-big"]["result"] == "unschedulable"
    assert "Insufficient cpu" in items["default/too-big"]["message"]
    assert b"decision" not in sink.getvalue(), "below the log level: kept, not written"
