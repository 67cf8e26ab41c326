"""Budgets: a user's or a group's GPU-hours per period, and what a spent one does (config
`accounting.budgets`).

A budget's use is read from the accounting database (each pod's lifetime cut to the period, as
`ai-scheduler usage` counts it), so it survives restarts and failovers like the rest. Periods are UTC
calendar days, weeks (from Monday) and months. Once a period's use reaches the budget:

- `lowerLevel`: the user (or group) is served at level 0 until the period ends: the queue's order and
  the `userLevel`/`groupLevel` factors put its pods behind others';
- `limitGpus`: its `max` of `nvidia.com/gpu` is cut to `limitGpus` (never raised: a lower max stays).

The next period restores it, as the spent state is computed anew from that period's use. `with_budgets`
is applied over the merged tenancy (config file, ElasticQuotas, GroupQuotas and UserQuotas) by the
daemon; a budget of a user or group that does not exist there does nothing, and says so.
"""

from __future__ import annotations

import calendar
import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ai_scheduler.accounting.store import PodUsage
from ai_scheduler.config import Config, FrozenMap
from ai_scheduler.config.schema import BudgetSpec, GroupSpec, UserSpec

_Tenant = TypeVar("_Tenant", UserSpec, GroupSpec)

GPU = "nvidia.com/gpu"


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """The UTC calendar period ("day", "week" from Monday, "month") that holds `now`: (start, end)."""
    day = calendar.timegm((*time.gmtime(now)[:3], 0, 0, 0))
    if period == "day":
        return float(day), float(day + 86_400)
    if period == "week":
        start = day - time.gmtime(now).tm_wday * 86_400
        return float(start), float(start + 7 * 86_400)
    moment = time.gmtime(now)
    start = calendar.timegm((moment.tm_year, moment.tm_mon, 1, 0, 0, 0))
    year, month = (moment.tm_year + 1, 1) if moment.tm_mon == 12 else (moment.tm_year, moment.tm_mon + 1)
    return float(start), float(calendar.timegm((year, month, 1, 0, 0, 0)))


@dataclass(frozen=True, slots=True)
class BudgetState:
    spec: BudgetSpec
    start: float
    end: float
    used_hours: float

    @property
    def subject(self) -> str:
        return f"{self.spec.scope} {self.spec.subject}"

    @property
    def spent(self) -> bool:
        return self.used_hours >= self.spec.gpu_hours

    @property
    def left_hours(self) -> float:
        return max(self.spec.gpu_hours - self.used_hours, 0.0)


def budget_states(budgets: Iterable[BudgetSpec], rows: Sequence[PodUsage], now: float) -> list[BudgetState]:
    """Each budget's use in its current period (`rows`: the pods that ran since the earliest start)."""
    states = []
    for spec in budgets:
        start, end = period_bounds(spec.period, now)
        used = 0.0
        for row in rows:
            if (row.user_name if spec.scope == "user" else row.group_name) != spec.subject:
                continue
            end_of_row = min(row.ended if row.ended is not None else now, now)
            used += row.gpus * max(end_of_row - max(row.started, start), 0.0)
        states.append(BudgetState(spec, start, end, used / 3600))
    return states


def with_budgets(config: Config, states: Iterable[BudgetState]) -> tuple[Config, list[str]]:
    """`config` with the spent budgets' actions applied; the budgets that found no such user or group."""
    users, groups = dict(config.users), dict(config.groups)
    unknown = []
    for state in states:
        if not state.spent:
            continue
        spec = state.spec
        if spec.scope == "user" and spec.subject in users:
            users[spec.subject] = _spent(users[spec.subject], spec)
        elif spec.scope == "group" and spec.subject in groups:
            groups[spec.subject] = _spent(groups[spec.subject], spec)
        else:
            unknown.append(f"budget {spec.name}: {state.subject} is not configured")
    if users == dict(config.users) and groups == dict(config.groups):
        return config, unknown
    return dataclasses.replace(config, users=FrozenMap(users), groups=FrozenMap(groups)), unknown


def _spent(entry: _Tenant, spec: BudgetSpec) -> _Tenant:
    if spec.action == "lowerLevel":
        return dataclasses.replace(entry, level=0)
    limits = dict(entry.max)
    limits[GPU] = min(limits.get(GPU, spec.limit_gpus), spec.limit_gpus)
    return dataclasses.replace(entry, max=FrozenMap(limits))
