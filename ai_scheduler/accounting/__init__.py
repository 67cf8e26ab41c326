"""Accounting: what each pod used (GPU-, cpu- and memory-hours by user, group, queue, Task and GPU model)
and fair share's decayed usage, kept in SQLite or PostgreSQL (store.py); the daemon writes it
(daemon/accounting.py), `ai-scheduler usage` reads it."""

from ai_scheduler.accounting.store import (
    BY,
    AccountingError,
    PodUsage,
    Store,
    Use,
    open_store,
    usage,
    usage_series,
)

__all__ = ["BY", "AccountingError", "PodUsage", "Store", "Use", "open_store", "usage", "usage_series"]
