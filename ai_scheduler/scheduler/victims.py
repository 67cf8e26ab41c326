"""What preemption hands the outbox: a plan (the node, the victims, why), and a victim's start time.

The preemptor (preemption.py) makes plans; the outbox's Evictions (outbox.py) carries them out. Both
import them from here, so that neither imports the other.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from datetime import datetime

from ai_scheduler.cache.records import PodRecord

_PRIORITY_OFFSET = 2**31  # kube adds MaxInt32+1 to each victim's priority in the sum: never negative


class VictimKind(enum.Enum):
    PRIORITY = "priority"  # lower priority, same group (or none)
    RECLAIM = "reclaim"  # another group's borrowed quota, taken back for a group below its min


def start_seconds(pod: PodRecord) -> float:
    """kube's GetPodStartTime: status.startTime; a pod not started yet counts as started now (latest)."""
    if not pod.started:
        return math.inf
    try:
        return datetime.fromisoformat(pod.started).timestamp()
    except ValueError:
        return math.inf


@dataclass(slots=True)
class Plan:
    node: str
    victims: list[PodRecord] = field(default_factory=list)
    reason: VictimKind = VictimKind.PRIORITY
    violations: int = 0  # victims whose eviction breaks a PodDisruptionBudget

    def cost(self) -> tuple[int, int, int, int, float]:
        """pickOneNodeForPreemption's criteria, in its order; the lowest cost wins."""
        priorities = [v.priority for v in self.victims]
        highest = max(priorities, default=-(2**31))
        starts = [start_seconds(v) for v in self.victims if v.priority == highest]
        return (
            self.violations,
            highest,
            sum(p + _PRIORITY_OFFSET for p in priorities),
            len(priorities),
            -min(starts, default=-math.inf),  # the latest earliest start among the highest-priority victims
        )
