"""The plugin registry: config names to plugin instances."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ai_scheduler.scheduler.framework import FilterPlugin, ScorePlugin
from ai_scheduler.scheduler.plugins.node_affinity import NodeAffinityFilter, NodeAffinityScore
from ai_scheduler.scheduler.plugins.node_name import NodeName
from ai_scheduler.scheduler.plugins.node_ready import NodeReady
from ai_scheduler.scheduler.plugins.node_unschedulable import NodeUnschedulable
from ai_scheduler.scheduler.plugins.resource_allocation import LeastAllocated, MostAllocated
from ai_scheduler.scheduler.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.plugins.taint_toleration import TaintTolerationFilter, TaintTolerationScore

FILTERS: dict[str, Callable[[], FilterPlugin]] = {
    "NodeUnschedulable": NodeUnschedulable,
    "NodeName": NodeName,
    "TaintToleration": TaintTolerationFilter,
    "NodeReady": NodeReady,
    "NodeAffinity": NodeAffinityFilter,
    "NodeResourcesFit": NodeResourcesFit,
}

SCORES: dict[str, Callable[[int, Mapping[str, int]], ScorePlugin]] = {
    "NodeResourcesLeastAllocated": lambda weight, resources: LeastAllocated(weight, resources),
    "NodeResourcesMostAllocated": lambda weight, resources: MostAllocated(weight, resources),
    "NodeAffinity": lambda weight, _resources: NodeAffinityScore(weight),
    "TaintToleration": lambda weight, _resources: TaintTolerationScore(weight),
}
