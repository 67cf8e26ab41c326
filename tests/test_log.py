"""The JSON-line logger: one object per line, and the daemon's batched writes (log.py)."""

from __future__ import annotations

import asyncio
import io

import orjson

from ai_scheduler.log import JsonLogger


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
