"""Budgets (accounting/budgets.py): periods, use in a period, and what a spent budget does."""

from __future__ import annotations

import pytest

from ai_scheduler.accounting import PodUsage
from ai_scheduler.accounting.budgets import budget_states, period_bounds, with_budgets
from ai_scheduler.config import parse_config
from ai_scheduler.log import parse_time, rfc3339

GPU = "nvidia.com/gpu"


def at(text: str) -> float:
    moment = parse_time(text)
    assert moment is not None
    return moment


@pytest.mark.parametrize(("period", "now", "start", "end"), [
    ("day", "2026-12-07T21:30:00Z", "2026-12-07T00:00:00Z", "2026-12-08T00:00:00Z"),
    ("week", "2026-12-07T21:30:00Z", "2026-12-07T00:00:00Z", "2026-12-14T00:00:00Z"),  # a Monday
    ("week", "2026-12-13T23:59:59Z", "2026-12-07T00:00:00Z", "2026-12-14T00:00:00Z"),  # its Sunday
    ("month", "2026-12-31T23:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"),
    ("month", "2027-02-10T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"),
])
def test_periods_are_utc_calendar_periods(period: str, now: str, start: str, end: str) -> None:
    begin, finish = period_bounds(period, at(now))
    assert (rfc3339(begin, millis=False), rfc3339(finish, millis=False)) == (start, end)


def pod(uid: str, user: str, group: str, started: str, ended: str | None, gpus: float) -> PodUsage:
    return PodUsage(uid, "ns", uid, user, group, "default", "", "n1", "H100", gpus, 1.0, 1.0, at(started),
                    at(ended) if ended else None)


CONFIG = parse_config({
    "groups": {"vision": {"level": 2, "max": {GPU: 16}}, "nlp": {"level": 1}},
    "users": {"alice": {"group": "vision", "level": 3, "max": {GPU: 8}}, "bob": {"group": "nlp", "level": 2}},
    "accounting": {"budgets": [
        {"name": "alice-daily", "subject": "alice", "gpuHours": 10, "period": "day", "action": "lowerLevel"},
        {"name": "nlp-daily", "subject": "nlp", "scope": "group", "gpuHours": 4, "period": "day",
         "action": "limitGpus", "limitGpus": 2},
        {"name": "ghost", "subject": "ghost", "gpuHours": 1, "period": "day"}]},
})
NOW = "2026-12-07T12:00:00Z"


def test_a_budget_counts_the_periods_use_and_a_spent_one_acts_until_the_period_ends() -> None:
    # 2 h of it today, 4 h so far of the one running, and 2 h of bob's.
    rows = [pod("a-yesterday", "alice", "vision", "2026-12-06T20:00:00Z", "2026-12-07T02:00:00Z", 2),
            pod("a-now", "alice", "vision", "2026-12-07T08:00:00Z", None, 2),
            pod("b-0", "bob", "nlp", "2026-12-07T09:00:00Z", "2026-12-07T11:00:00Z", 2)]
    states = {s.spec.name: s for s in budget_states(CONFIG.accounting.budgets, rows, at(NOW))}
    assert states["alice-daily"].used_hours == pytest.approx(2 * 2 + 2 * 4)
    assert states["alice-daily"].spent and states["alice-daily"].left_hours == 0
    assert states["nlp-daily"].used_hours == pytest.approx(4) and states["nlp-daily"].spent
    config, unknown = with_budgets(CONFIG, states.values())
    assert config.users["alice"].level == 0 and dict(config.users["alice"].max) == {GPU: 8}
    assert dict(config.groups["nlp"].max) == {GPU: 2} and config.groups["nlp"].level == 1
    assert config.groups["vision"] == CONFIG.groups["vision"]
    assert unknown == []  # ghost's budget is not spent: nothing to say yet
    # The next day: nothing used yet, everything as configured.
    later = budget_states(CONFIG.accounting.budgets, rows[2:], at("2026-12-08T01:00:00Z"))
    assert not any(s.spent for s in later)
    assert with_budgets(CONFIG, later)[0] is CONFIG


def test_a_spent_budget_of_no_configured_user_is_said() -> None:
    rows = [pod("g", "ghost", "", "2026-12-07T10:00:00Z", "2026-12-07T11:00:00Z", 2)]
    states = budget_states(CONFIG.accounting.budgets, rows, at(NOW))
    assert with_budgets(CONFIG, states)[1] == ["budget ghost: user ghost is not configured"]
