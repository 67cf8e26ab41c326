"""The Session: what the core's parts share, handed to each of them whole (KAI Scheduler's way).

The scheduling cycle, the gang scheduler and the StrictFIFO check read the same state (the cache, the
queue, the gang registry, tenancy and its quotas, the priority engine, the reservations), speak through
the same outbox and decision log, and read the config in force through one view (config/view.py): the
core swaps the config there on a reload, and every part reads the new one at its next attempt. So a part takes
the Session (and what is its alone) at construction, instead of a dozen collaborators, callbacks into
each other, and settings copied in and patched on reload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.config import SettingsView
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.decision_log import DecisionLog
from ai_scheduler.scheduler.domains import KeptDomains
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Outbox
from ai_scheduler.scheduler.priority import PriorityEngine
from ai_scheduler.scheduler.reservation import Reserver


@dataclass(frozen=True, slots=True)
class Session:
    settings: SettingsView  # the config in force (`.current`; the core swaps it on a reload)
    cache: SchedulerCache
    queue: SchedulingQueue
    gangs: GangRegistry
    tenancy: Tenancy
    priorities: PriorityEngine
    reserver: Reserver
    outbox: Outbox  # the intents that leave the core: bindings, reports, evictions
    decisions: DecisionLog
    metrics: Metrics
    log: JsonLogger
    clock: Callable[[], float]
    domains: KeptDomains  # logical domains: the nodes a pod must keep off (required, kept for others)
