"""The settings in force: one object that every component reads them through (kopf's settings object).

A component is handed the `SettingsView` at construction and reads `view.current` (a `Config`, whose
fields carry their own docs: schema.py) when it needs a setting, rather than receiving a callable, a
copy of one setting, or another component to ask. A reload swaps the `Config` here, in one place
(`swap`, by the scheduling core's `reconfigure`), and every reader sees the new one at its next read.

What a reload hands on besides the swap is state built from the settings, not settings: the cache's
assume timeout and the queue's backoffs (structures that also run without a config, in tests and the
simulator), the profiles' Frameworks, the tenancy's quota tree, the priority engine's policies; the
core's `reconfigure` rebuilds them from the new `Config` right after swapping it.
"""

from __future__ import annotations

from ai_scheduler.config.schema import Config


class SettingsView:
    """The `Config` in force (see the module)."""

    __slots__ = ("_current", "swaps")

    def __init__(self, config: Config) -> None:
        self._current = config
        self.swaps = 0  # how many reloads swapped it

    @property
    def current(self) -> Config:
        return self._current

    def swap(self, config: Config) -> Config:
        """Put `config` in force; the one it replaces."""
        previous, self._current = self._current, config
        self.swaps += 1
        return previous
