"""The plugin registry: config names to plugin instances."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ai_scheduler.config import Config
from ai_scheduler.scheduler.framework import FilterPlugin, ScorePlugin
from ai_scheduler.scheduler.plugins.gpu import GpuAvoidance, GpuBinpack, GpuFilter
from ai_scheduler.scheduler.plugins.node_affinity import NodeAffinityFilter, NodeAffinityScore
from ai_scheduler.scheduler.plugins.node_name import NodeName
from ai_scheduler.scheduler.plugins.node_ready import NodeReady
from ai_scheduler.scheduler.plugins.node_unschedulable import NodeUnschedulable
from ai_scheduler.scheduler.plugins.resource_allocation import LeastAllocated, MostAllocated
from ai_scheduler.scheduler.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.plugins.taint_toleration import TaintTolerationFilter, TaintTolerationScore

FILTERS: dict[str, Callable[[Config], FilterPlugin]] = {
    "NodeUnschedulable": lambda _config: NodeUnschedulable(),
    "NodeName": lambda _config: NodeName(),
    "TaintToleration": lambda _config: TaintTolerationFilter(),
    "NodeReady": lambda _config: NodeReady(),
    "NodeAffinity": lambda _config: NodeAffinityFilter(),
    "NodeResourcesFit": lambda _config: NodeResourcesFit(),
    "GPU": lambda config: GpuFilter(config.gpu.staleness_seconds),
}

SCORES: dict[str, Callable[[int, Mapping[str, int]], ScorePlugin]] = {
    "NodeResourcesLeastAllocated": lambda weight, resources: LeastAllocated(weight, resources),
    "NodeResourcesMostAllocated": lambda weight, resources: MostAllocated(weight, resources),
    "NodeAffinity": lambda weight, _resources: NodeAffinityScore(weight),
    "TaintToleration": lambda weight, _resources: TaintTolerationScore(weight),
    "GPUBinpack": lambda weight, _resources: GpuBinpack(weight),
    "GPUAvoidance": lambda weight, _resources: GpuAvoidance(weight),
}
