"""The trace simulator (`ai-scheduler simulate`): the scheduling core over a trace, on a simulated clock.

The daemon's twin: where the daemon feeds the core (ai_scheduler.scheduler.core) list/watch events and
turns its outbox into API calls, the simulator feeds it a trace's arrivals and departures and applies its
outbox to its own state at once, so that it makes the decisions the daemon would, thousands of times
faster than real time. `engine.py` runs a trace, `records.py` holds what a run produced, `metrics.py`
summarises it and `report.py` writes tables, event files and plots.
"""
