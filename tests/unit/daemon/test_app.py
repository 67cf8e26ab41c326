"""When the daemon's forecast loop starts a forecast (daemon.forecast_now): every interval, put off while
the scheduling loop still has pods to try, for at most one interval more."""

from __future__ import annotations

import math

from ai_scheduler.daemon.app import forecast_now


def test_a_due_forecast_waits_for_the_active_queue_to_drain_at_most_one_interval() -> None:
    interval = 60.0
    assert forecast_now(10.0, -math.inf, None, interval, active=0) == (True, None), "first one, idle loop"
    run, due = forecast_now(10.0, -math.inf, None, interval, active=10_000)
    assert (run, due) == (False, 10.0), "10,000 pods about to be tried: put off, due since now"
    assert forecast_now(40.0, -math.inf, due, interval, active=5_000) == (False, 10.0)
    assert forecast_now(41.0, -math.inf, due, interval, active=0) == (True, None), "drained: at once"
    assert forecast_now(70.0, -math.inf, due, interval, active=1) == (True, None), "one interval late at most"
    assert forecast_now(100.0, 41.0, None, interval, active=0) == (False, None), "not due before the interval"
    assert forecast_now(101.0, 41.0, None, interval, active=0) == (True, None)
