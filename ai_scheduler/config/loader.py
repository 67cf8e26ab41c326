"""Reading the config file from disk, the shipped default, and reloading on change.

Kubernetes updates a ConfigMap volume by swapping a symlink to a new directory,
so neither the file's mtime nor an inotify watch on it is reliable; the watcher
polls the content's hash instead, which is cheap for a file this small.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Hashable
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ai_scheduler.config.schema import Config, ConfigError, parse_config


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, which PyYAML would otherwise resolve silently to the last."""

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
    return parse_config(data, source)


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
    is therefore not reported again.
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

    @staticmethod
    def _digest(raw: bytes | None) -> str | None:
        return None if raw is None else hashlib.sha256(raw).hexdigest()

    def _read_or_none(self) -> bytes | None:
        try:
            return _read(self._path)
        except ConfigError:
            return None

    async def run(self) -> None:
        """Check now and then every ``interval`` seconds until cancelled; callback errors propagate."""
        while True:
            await self.check()
            await asyncio.sleep(self._interval)

    async def check(self) -> None:
        """Look at the file once and report what changed; also for an explicit reload (SIGHUP)."""
        try:
            raw = await asyncio.to_thread(_read, self._path)
        except ConfigError as exc:
            if self._seen is not None:  # report a file that disappeared once, not at every poll
                self._seen = None
                self._on_error(exc)
            return
        digest = self._digest(raw)
        if digest in (self._seen, self._applied):
            self._seen = digest
            return
        self._seen = digest
        try:
            config = _decode(raw, self._source)
        except ConfigError as exc:
            self._on_error(exc)
            return
        self._applied = digest
        self._on_change(config)
