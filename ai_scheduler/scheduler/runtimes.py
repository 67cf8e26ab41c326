"""How long a pod runs: the one hook every part of the core that needs a run time asks.

`RunTimes.estimate(pod)` gives a `RunTime` (a median and an upper value, in seconds, and where it came
from) or None when nothing is known. Reservations use the upper value for the end of running pods (a
reservation should not be late) and for backfill (a backfilled pod must be gone before the reservation
is due). The default, `AnnotatedRunTimes`, reads the pod's own `ai-scheduler.io/estimated-runtime`
annotation (median = upper = the estimate); a learned predictor plugs in behind the same protocol
(`SchedulerCore(runtimes=...)`, or `core.runtimes = ...` on a running core).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from ai_scheduler.cache.records import ESTIMATE_ANNOTATION, PodRecord
from ai_scheduler.quantity import parse_duration

RunTimeSource = Literal["annotation", "prediction"]


@dataclass(frozen=True, slots=True)
class RunTime:
    """A pod's run time in seconds: the median, an upper value it stays under with high probability, and
    its source ("annotation": the user's estimate; "prediction": a model's)."""

    median: float
    upper: float
    source: RunTimeSource


class RunTimes(Protocol):
    """The run-time hook: what is known of how long `pod` runs (from its start), None when nothing is."""

    def estimate(self, pod: PodRecord) -> RunTime | None: ...


class AnnotatedRunTimes:
    """The pod's own estimate, `ai-scheduler.io/estimated-runtime` ("90m", "2h"); nothing without it."""

    def estimate(self, pod: PodRecord) -> RunTime | None:
        seconds = parse_duration(pod.annotations.get(ESTIMATE_ANNOTATION))
        return None if seconds is None else RunTime(seconds, seconds, "annotation")
