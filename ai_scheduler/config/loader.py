"""Reading the config file from disk, the shipped default, and reloading on change.

Kubernetes updates a ConfigMap volume by swapping a symlink to a new directory,
so neither the file's mtime nor an inotify watch on it is reliable; the watcher
polls the content's hash instead, which is cheap for a file this small. SIGHUP
(`ConfigWatcher.reload`) makes it read the file at once and apply it even if it
did not change.

Whatever the file holds, reading it either gives a Config or raises ConfigError:
PyYAML builds nested collections recursively, so nesting is bounded
(`MAX_NESTING`, far above what the schema uses) before Python's recursion limit
is reached, and the watcher reports anything a poll raises and keeps polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Callable, Hashable
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ai_scheduler.config.schema import Config, ConfigError, parse_config

# Deepest nesting of collections a config file may have; the schema's deepest key
# (profiles[0].scores[0].resources.cpu) is at level 5.
MAX_NESTING = 64


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, which PyYAML would otherwise resolve silently to the last,
    and collections nested deeper than MAX_NESTING, which would exhaust the composer's recursion."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nesting = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._nesting >= MAX_NESTING:
            problem = f"collections nested more than {MAX_NESTING} levels deep"
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # untyped in the stubs
            raise yaml.composer.ComposerError(None, None, problem, mark)
        self._nesting += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._nesting -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        # Typed as PyYAML's stubs have it, but `!!map` on a scalar or a sequence arrives here too:
        # the base class refuses that with a clear error.
        if isinstance(node, yaml.MappingNode):
            seen: set[Hashable] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue  # merge keys may be overridden; complex keys are refused by the base class
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _decode(raw: bytes, source: str) -> Config:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"not UTF-8 text (byte {exc.start})", source) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        raise ConfigError("", _describe_yaml_error(exc, text), source) from None
    except RecursionError:  # not expected past the nesting bound; refused all the same
        raise ConfigError("", "invalid YAML: nested too deeply", source) from None
    try:
        return parse_config(data, source)
    except RecursionError:  # e.g. a structure that contains itself through an alias
        raise ConfigError("", "nested too deeply (a YAML alias that contains itself?)", source) from None


def _describe_yaml_error(exc: yaml.YAMLError, text: str) -> str:
    """One line with the line number, instead of PyYAML's multi-line text about "<unicode string>"."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed"
        if exc.context and exc.problem and exc.problem.startswith("but "):
            problem = f"{exc.context}, {exc.problem}"  # "expected a single document ..., but found another"
        return f"invalid YAML{where}: {problem}"
    if isinstance(exc, yaml.reader.ReaderError):
        character = exc.character if isinstance(exc.character, int) else ord(exc.character)
        line = text.count("\n", 0, exc.position) + 1
        return f"invalid YAML at line {line}: unacceptable character #x{character:04x}: {exc.reason}"
    return f"invalid YAML: {exc}"


def _read(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ConfigError("", "file not found", os.fspath(path)) from None
    except OSError as exc:
        raise ConfigError("", f"cannot read the file: {exc.strerror or exc}", os.fspath(path)) from None


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a config file; an empty file gives the defaults. Raises ConfigError."""
    return _decode(_read(path), os.fspath(path))


@cache
def default_config() -> Config:
    """The config shipped in the package (default.yaml); cached, since Config is immutable."""
    raw = resources.files("ai_scheduler.config").joinpath("default.yaml").read_bytes()
    return _decode(raw, "ai_scheduler/config/default.yaml")


class ConfigWatcher:
    """Polls a config file and reports each change once: valid to ``on_change``, invalid to ``on_error``.

    The baseline is the file as it is when the watcher is created, which the
    caller is taken to have loaded already; create the watcher before calling
    ``load_config`` to leave no window in which a change goes unseen (at worst
    the same config is then delivered twice). After an invalid change the
    caller keeps its last good config; a file that goes back to that config
    is therefore not reported again. `reload` (SIGHUP) checks at once and
    reports the file even if it did not change.

    Nothing stops the watcher but cancellation: an error while reading,
    decoding or applying the file (a callback that raises included) is
    reported to ``on_error`` as a ConfigError, and polling goes on.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_change: Callable[[Config], None],
        on_error: Callable[[ConfigError], None],
        interval: float = 2.0,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        self._path = path
        self._source = os.fspath(path)
        self._on_change = on_change
        self._on_error = on_error
        self._interval = interval
        self._seen = self._digest(self._read_or_none())  # last content looked at (None: unreadable)
        self._applied = self._seen  # content of the config the caller is running
        self._forced = False  # reload() asked for the file to be reported whether it changed or not
        self._wake = asyncio.Event()

    @staticmethod
    def _digest(raw: bytes | None) -> str | None:
        return None if raw is None else hashlib.sha256(raw).hexdigest()

    def _read_or_none(self) -> bytes | None:
        try:
            return _read(self._path)
        except ConfigError:
            return None

    def reload(self) -> None:
        """Check the file now and report it even if unchanged (SIGHUP); safe to call from a signal handler
        on the loop (`loop.add_signal_handler`), as it only wakes `run`."""
        self._forced = True
        self._wake.set()

    async def run(self) -> None:
        """Check now, then every ``interval`` seconds or at once on `reload`, until cancelled."""
        while True:
            force, self._forced = self._forced, False
            try:
                await self.check(force=force)
            except Exception as exc:  # whatever went wrong with this poll, say so and keep watching
                self._report(ConfigError("", f"unexpected {type(exc).__name__}: {exc}", self._source))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)
            self._wake.clear()

    async def check(self, *, force: bool = False) -> None:
        """Look at the file once and report what changed (with `force`, report it whatever it holds)."""
        try:
            raw = await asyncio.to_thread(_read, self._path)
        except ConfigError as exc:
            if self._seen is not None or force:  # report a file that disappeared once, not at every poll
                self._seen = None
                self._on_error(exc)
            return
        digest = self._digest(raw)
        if digest in (self._seen, self._applied) and not force:
            self._seen = digest
            return
        self._seen = digest
        try:
            config = _decode(raw, self._source)
        except ConfigError as exc:
            self._on_error(exc)
            return
        try:
            self._on_change(config)
        except Exception as exc:  # valid, but applying it failed: the caller may run part of it
            reason = f"could not be applied: {type(exc).__name__}: {exc}"
            self._on_error(ConfigError("", reason, self._source))
            return
        self._applied = digest

    def _report(self, error: ConfigError) -> None:
        with contextlib.suppress(Exception):  # the caller's own reporting failed: nothing left to tell
            self._on_error(error)
