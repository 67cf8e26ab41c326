"""JSON-line logging on stdout, one object per line (docs/reference/decision-log.md: `ts`, `level`, `event`,
and the format's version `v` on every line, `SCHEMA_VERSION`).

Decision lines are written for every scheduling attempt, so the writer is a
thin orjson call rather than the stdlib logging machinery.
"""

from __future__ import annotations

import asyncio
import calendar
import sys
import time
from typing import Any, Protocol

import orjson

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
# The log's format, `v` on every line: what `ai-scheduler replay` and `learn` read back (the decision
# lines, pods' and nodes' specs, completions: daemon/history.py) changes only with a new version.
SCHEMA_VERSION = 1
_DUMP_OPTIONS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


_last_second: tuple[int, str] = (-1, "")  # the last whole second formatted: every log line asks for one


def rfc3339(epoch: float | None = None, *, millis: bool = True) -> str:
    """UTC time, e.g. 2026-11-21T10:29:38.123Z (or whole seconds, as Kubernetes timestamps are)."""
    global _last_second
    epoch = time.time() if epoch is None else epoch
    whole = int(epoch)
    cached = _last_second
    if cached[0] == whole:
        text = cached[1]
    else:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _last_second = (whole, text)
    return f"{text}.{int((epoch - whole) * 1000):03d}Z" if millis else f"{text}Z"


def parse_time(text: str | None) -> float | None:
    """RFC 3339 UTC (with or without a fraction, as `rfc3339` and Kubernetes write it) to epoch seconds;
    None for anything else."""
    if not text:
        return None
    try:
        whole, _, rest = text.rstrip("Z").partition(".")
        epoch = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
        return epoch + (float(f"0.{rest}") if rest.isdigit() else 0.0)
    except ValueError:
        return None


class ByteSink(Protocol):
    """Where log lines go: a binary file or stdout's buffer, or a NullStream."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> None: ...


class JsonLogger:
    """Writes one JSON object per line; `event` names what happened.

    With `batch` (the daemon), info and debug lines logged while an asyncio loop runs are written
    together, in one write, when the loop next runs its ready callbacks: a gang attempt logs a line per
    member, and a write per line cost about a tenth of the attempt. The flush is queued before any task
    the same step starts (a binding's request among them), so no pod is bound before its decision line
    is written; a warning or an error writes everything held at once, and `flush` writes what is left
    when the loop ends.
    """

    def __init__(
        self, stream: ByteSink | None = None, level: str = "info", *, batch: bool = False, **context: Any
    ) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer
        self._threshold = LEVELS[level]
        self._context = context
        self._batch = batch
        self._pending: list[bytes] = []

    def enabled(self, level: str) -> bool:
        return LEVELS[level] >= self._threshold

    def wants(self, event: str, level: str) -> bool:
        """Whether a line of `event` at `level` is read by anyone (written, or kept: visibility's
        RecentDecisions keeps decisions whatever the level), so worth building."""
        return self.enabled(level)

    def log(self, level: str, event: str, **fields: Any) -> None:
        if LEVELS[level] < self._threshold:
            return
        record = {"ts": rfc3339(), "level": level, "event": event, "v": SCHEMA_VERSION, **self._context,
                  **fields}
        try:
            line = orjson.dumps(record, option=_DUMP_OPTIONS, default=str)
        except TypeError:
            line = orjson.dumps({k: str(v) for k, v in record.items()}, option=_DUMP_OPTIONS)
        if self._batch and LEVELS[level] < LEVELS["warning"]:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                if not self._pending:
                    loop.call_soon(self.flush)
                self._pending.append(line)
                return
        if self._pending:
            self._pending.append(line)
            self.flush()
            return
        self._stream.write(line)
        self._stream.flush()

    def flush(self) -> None:
        """Write the lines held by `batch`, in one write."""
        if self._pending:
            lines, self._pending = self._pending, []
            self._stream.write(b"".join(lines))
            self._stream.flush()

    def debug(self, event: str, **fields: Any) -> None:
        self.log("debug", event, **fields)

    def info(self, event: str, **fields: Any) -> None:
        self.log("info", event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.log("warning", event, **fields)

    def error(self, event: str, **fields: Any) -> None:
        self.log("error", event, **fields)


class NullStream:
    """A byte sink, for benchmarks and demos that keep the log out of the way."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        return None
