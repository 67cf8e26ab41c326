"""Config reload: the config in force, a new one put in force whole, and a truthful log line.

A reload (the file changed, or SIGHUP) is applied between two cycles, whole:
the daemon's `apply` hands every component the new values, and components that
read settings at use read them from the config in force (`ConfigReload.current`),
so none keeps what it was given at start. The few keys that cannot change in a
running process are declared with their settings in the schema (`RESTART_REQUIRED`
is read from it); the reload's log line
(`config.reloaded`) names every changed key, as `applied` or under
`restart_required_for` (config.keys derives the keys from the schema, so a new
key falls on one side or the other, never in between). A file that does not
parse or validate is refused (`config.refused`) and the last good config stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ai_scheduler.config import Config, ConfigError, ConfigWatcher
from ai_scheduler.config.keys import changed_keys, restart_required, within
from ai_scheduler.daemon.history import History
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.metrics import Metrics

# The config keys a reload cannot apply: they take effect at the next start, and a reload that finds them
# different from what runs names them in `restart_required_for`. Every other key is applied at once. Each is
# declared with its setting, and why (`restart=` in config/schema.py): server.port and bindAddress, the
# visibility API's keys, scheduling.bindConcurrency and the leaderElection section.
RESTART_REQUIRED: frozenset[str] = restart_required()


def needs_restart(key: str) -> bool:
    """Whether a change at this config key (a leaf, or an entry that holds leaves) waits for a restart."""
    return any(within(leaf, key) for leaf in RESTART_REQUIRED)


class ConfigReload:
    def __init__(
        self,
        config: Config,
        apply: Callable[[Config], list[str]],
        logger: JsonLogger,
        metrics: Metrics,
        *,
        path: str | None = None,
        poll_seconds: float = 2.0,
    ) -> None:
        self.current = config
        self._start = config  # what the restart-only keys still run with, whatever reloads came since
        self._apply = apply  # puts a config in force in every component; returns the profiles now served
        self.log = logger
        self.metrics = metrics
        self.path = path
        self.poll_seconds = poll_seconds
        self.watcher: ConfigWatcher | None = None
        self.reconfigured = asyncio.Event()  # set by a reload: loops waiting on a period take the new one

    def watch(self) -> ConfigWatcher | None:
        """The file watcher (None without a file); the caller runs it once, at start. Logs the config in
        force first, for a replay (history.py's `config.active`)."""
        self._log_active()
        if self.path:
            self.watcher = ConfigWatcher(self.path, self.apply, self.refused, interval=self.poll_seconds)
        return self.watcher

    def apply(self, config: Config) -> None:
        """Put a new config in force at once, all of it but the keys of RESTART_REQUIRED. The log line
        names the keys changed since the last config that took effect (`applied`), and those whose value
        in the file differs from the one still running until a restart (`restart_required_for`), as
        dotted paths."""
        applied = sorted(c.path for c in changed_keys(self.current, config) if not needs_restart(c.key))
        waiting = sorted(c.path for c in changed_keys(self._start, config) if needs_restart(c.key))
        self.current = config
        profiles = self._apply(config)
        self.reconfigured.set()
        self.metrics.config_reloads.labels("applied").inc()
        self.log.info(
            "config.reloaded",
            path=self.path,
            profiles=profiles,
            applied=applied,
            restart_required_for=waiting,
        )
        self._log_active()

    def _log_active(self) -> None:
        """The config file's content as now in force (None: the built-in default), read again from the
        file: a write landing between the reload and this read is logged as the next reload's."""
        content: Any = None
        if self.path:
            try:
                content = yaml.safe_load(Path(self.path).read_text())
            except (OSError, yaml.YAMLError) as exc:
                content = {"unreadable": str(exc)}
        History(self.log).config(content, self.path)

    def refused(self, error: ConfigError) -> None:
        self.metrics.config_reloads.labels("refused").inc()
        detail = "keeping the last good config"
        self.log.error("config.refused", path=self.path, error=str(error), detail=detail)

    def reload(self) -> None:
        """SIGHUP: read the config file now and apply it, changed or not; the outcome is logged as for a
        change the watcher finds (config.reloaded or config.refused)."""
        self.log.info("config.reload_requested", path=self.path, signal="SIGHUP")
        if self.watcher is None:
            reason = "no config file given" if not self.path else "not watching the file yet"
            self.log.warning("config.reload_skipped", path=self.path, reason=reason)
            return
        self.watcher.reload()
