"""The plugin registry: config names to plugin instances."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import Config, Profile
from ai_scheduler.scheduler.framework.interface import FilterPlugin, ScorePlugin
from ai_scheduler.scheduler.framework.plugins.dynamic_resources import DynamicResources, DynamicResourcesScore
from ai_scheduler.scheduler.framework.plugins.gpu import GpuAvoidance, GpuBinpack, GpuFilter, GpuSpread
from ai_scheduler.scheduler.framework.plugins.gpu_fragmentation import (
    FgdScore,
    FgdScoreCoupled,
    GpuFragmentation,
    GpuFragmentationCoupled,
)
from ai_scheduler.scheduler.framework.plugins.inter_pod_affinity import (
    InterPodAffinityFilter,
    InterPodAffinityScore,
)
from ai_scheduler.scheduler.framework.plugins.node_affinity import NodeAffinityFilter, NodeAffinityScore
from ai_scheduler.scheduler.framework.plugins.node_name import NodeName
from ai_scheduler.scheduler.framework.plugins.node_ports import NodePorts
from ai_scheduler.scheduler.framework.plugins.node_ready import NodeReady
from ai_scheduler.scheduler.framework.plugins.node_unschedulable import NodeUnschedulable
from ai_scheduler.scheduler.framework.plugins.node_volume_limits import NodeVolumeLimits
from ai_scheduler.scheduler.framework.plugins.pod_topology_spread import (
    PodTopologySpreadFilter,
    PodTopologySpreadScore,
)
from ai_scheduler.scheduler.framework.plugins.resource_allocation import (
    BalancedAllocation,
    GpuAwareAllocation,
    LeastAllocated,
    MostAllocated,
)
from ai_scheduler.scheduler.framework.plugins.resource_fit import NodeResourcesFit
from ai_scheduler.scheduler.framework.plugins.taint_toleration import (
    TaintTolerationFilter,
    TaintTolerationScore,
)
from ai_scheduler.scheduler.framework.plugins.volume_binding import VolumeBinding
from ai_scheduler.scheduler.framework.plugins.volume_restrictions import VolumeRestrictions
from ai_scheduler.scheduler.framework.plugins.volume_zone import VolumeZone

FILTERS: dict[str, Callable[[Config, Profile], FilterPlugin]] = {
    "NodeUnschedulable": lambda _config, _profile: NodeUnschedulable(),
    "NodeName": lambda _config, _profile: NodeName(),
    "TaintToleration": lambda _config, _profile: TaintTolerationFilter(),
    "NodeReady": lambda _config, _profile: NodeReady(),
    "NodeAffinity": lambda _config, _profile: NodeAffinityFilter(),
    "NodePorts": lambda _config, _profile: NodePorts(),
    "NodeResourcesFit": lambda _config, _profile: NodeResourcesFit(),
    "GPU": lambda config, profile: GpuFilter(
        config.gpu.staleness_seconds,
        spread=any(s.name == "GPUSpread" and s.weight > 0 for s in profile.scores),
    ),
    "VolumeRestrictions": lambda _config, _profile: VolumeRestrictions(),
    "NodeVolumeLimits": lambda _config, _profile: NodeVolumeLimits(),
    "VolumeBinding": lambda _config, _profile: VolumeBinding(),
    "VolumeZone": lambda _config, _profile: VolumeZone(),
    "InterPodAffinity": lambda _config, _profile: InterPodAffinityFilter(),
    "PodTopologySpread": lambda _config, _profile: PodTopologySpreadFilter(),
    "DynamicResources": lambda _config, _profile: DynamicResources(),
}

SCORES: dict[str, Callable[[int, Mapping[str, int]], ScorePlugin]] = {
    "NodeResourcesLeastAllocated": lambda weight, resources: LeastAllocated(weight, resources),
    "NodeResourcesMostAllocated": lambda weight, resources: MostAllocated(weight, resources),
    "NodeResourcesBalancedAllocation": lambda weight, resources: BalancedAllocation(weight, resources),
    "NodeResourcesGPUAware": lambda weight, resources: GpuAwareAllocation(weight, resources),
    "NodeAffinity": lambda weight, _resources: NodeAffinityScore(weight),
    "TaintToleration": lambda weight, _resources: TaintTolerationScore(weight),
    "GPUBinpack": lambda weight, _resources: GpuBinpack(weight),
    "GPUSpread": lambda weight, _resources: GpuSpread(weight),
    "GPUAvoidance": lambda weight, _resources: GpuAvoidance(weight),
    "GPUFragmentation": lambda weight, _resources: GpuFragmentation(weight),
    "GPUFragmentationCoupled": lambda weight, _resources: GpuFragmentationCoupled(weight),
    "FGDScore": lambda weight, _resources: FgdScore(weight),
    "FGDScoreCoupled": lambda weight, _resources: FgdScoreCoupled(weight),
    "InterPodAffinity": lambda weight, _resources: InterPodAffinityScore(weight),
    "PodTopologySpread": lambda weight, _resources: PodTopologySpreadScore(weight),
    "DynamicResources": lambda weight, _resources: DynamicResourcesScore(weight),
}


def build_filters(config: Config, profile: Profile) -> list[FilterPlugin]:
    """The profile's filter plugins, in its order."""
    return [FILTERS[name](config, profile) for name in profile.filters]


# The scores that place GPU pods by GPU fragmentation, cpu and memory included for the coupled ones.
FRAGMENTATION_SCORES = frozenset(
    {"GPUFragmentation", "GPUFragmentationCoupled", "FGDScore", "FGDScoreCoupled"}
)


def build_scores(profile: Profile) -> list[ScorePlugin]:
    """The profile's score plugins. NodeResourcesGPUAware leaves GPU pods to a fragmentation score when
    the profile weighs one (as the GPU filter reads GPUSpread from the profile): that score keeps cpu
    and memory beside free GPUs already, and a second opinion on GPU pods only reorders its ties."""
    fragmentation = any(spec.name in FRAGMENTATION_SCORES and spec.weight > 0 for spec in profile.scores)
    plugins: list[ScorePlugin] = []
    for spec in profile.scores:
        if spec.name == "NodeResourcesGPUAware":
            plugins.append(GpuAwareAllocation(spec.weight, spec.resources, gpu_pods=not fragmentation))
        else:
            plugins.append(SCORES[spec.name](spec.weight, spec.resources))
    return plugins


def reads_workloads(profile: Profile) -> bool:
    """Whether the profile scores with PodTopologySpread, whose system default constraints read the
    selectors of Services, ReplicationControllers, ReplicaSets and StatefulSets (the daemon watches them)."""
    return any(spec.name == "PodTopologySpread" and spec.weight > 0 for spec in profile.scores)


VOLUME_FILTERS = ("VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone")


def reads_volumes(profile: Profile) -> bool:
    """Whether the profile filters with a volume plugin, which read PersistentVolumes, their claims,
    StorageClasses and CSINodes (the daemon watches them)."""
    return any(name in profile.filters for name in VOLUME_FILTERS)


def reads_dra(profile: Profile) -> bool:
    """Whether the profile filters with DynamicResources, which reads ResourceClaims, their templates,
    ResourceSlices and DeviceClasses (the daemon watches them only then)."""
    return "DynamicResources" in profile.filters


def waits_for_other_pods(pod: PodRecord) -> bool:
    """Whether a pod that did not fit may fit once another pod is bound (kube's queueing hint for
    AssignedPodAdd): only pods with required pod affinity, or with DoNotSchedule topology spread
    constraints (a pod placed in the least crowded domain raises the minimum the skew is taken from),
    can gain from more pods being placed."""
    return bool(pod.pod_affinity.required_affinity or pod.spread.hard)
