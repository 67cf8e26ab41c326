"""Shared state: node and pod records, resource columns, assumptions."""

from ai_scheduler.cache.cache import BASE_RESOURCES, NodeChange, PodChange, PodState, SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord, Taint, Toleration, pod_requests

__all__ = [
    "BASE_RESOURCES", "NodeChange", "NodeRecord", "PodChange", "PodRecord", "PodState", "SchedulerCache",
    "Taint", "Toleration", "pod_requests",
]
