"""The scheduling queue: which pending pod the scheduling path tries next."""

from ai_scheduler.queue.scheduling_queue import QueueClosed, QueuedPod, SchedulingQueue, UnitHint

__all__ = ["QueueClosed", "QueuedPod", "SchedulingQueue", "UnitHint"]
