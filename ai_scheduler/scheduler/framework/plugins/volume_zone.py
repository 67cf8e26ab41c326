"""VolumeZone: a pod's bound volumes' zone and region labels against the node's, as kube-scheduler checks.

PreFilter (kube's getPVbyPod) reads each claim of the pod: a claim that does
not exist, or a volume it names that does not exist, stops the pod with the
API's NotFound message; an unbound claim of a WaitForFirstConsumer class is
skipped (VolumeBinding places it); any other unbound claim stops the pod
(`PersistentVolume had no name`, or `PersistentVolumeClaim had no pv name and
storageClass name` without a class). Each volume named contributes its
topology labels (`topology.kubernetes.io/zone` and `region`, and their
`failure-domain.beta.kubernetes.io/` forms; a value may list several zones
joined by `__`).

Filter: a node without any of those four labels passes (a single-zone cluster
whose nodes carry none); otherwise every volume label must be on the node
(a beta key is also read from the node's GA key) with one of its values, or
the node fails with `node(s) had no available volume zone`.

Cost: nothing for a pod without claims; for one with claims, the per-node
result reads only the node's labels and the volumes' topology, so it is cached
by StaticResults under that topology as its signature.
"""

from __future__ import annotations

from collections.abc import Hashable

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import BindingMode, VolumeIndex
from ai_scheduler.scheduler.framework.interface import StaticClaimFilterPlugin

NO_VOLUME_ZONE = "node(s) had no available volume zone"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}
ZONES_DELIMITER = "__"

# (label key, allowed values) per volume label, in the order found: the filter's signature.
Topology = tuple[tuple[str, frozenset[str]], ...]


def _zones(value: str) -> frozenset[str] | None:
    """volumehelpers.LabelZonesToSet: `a__b` is {a, b}; an empty part makes the label unusable."""
    parts = value.split(ZONES_DELIMITER)
    if any(not part.strip() for part in parts):
        return None
    return frozenset(part.strip() for part in parts)


def volume_topology(pod: PodRecord, index: VolumeIndex) -> Topology | str:
    """PreFilter: the topology labels of the pod's volumes, or why the pod cannot be placed."""
    topology: list[tuple[str, frozenset[str]]] = []
    for name, _ephemeral in pod.claims:
        if not name:
            return "PersistentVolumeClaim had no name"
        claim = index.claims.get((pod.namespace, name))
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if not claim.volume_name:
            if not claim.storage_class:
                return "PersistentVolumeClaim had no pv name and storageClass name"
            storage_class = index.classes.get(claim.storage_class)
            if storage_class is None:
                return f'storageclass.storage.k8s.io "{claim.storage_class}" not found'
            if storage_class.binding_mode is BindingMode.UNSET:
                return f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"'
            if storage_class.binding_mode is BindingMode.WAIT_FOR_FIRST_CONSUMER:
                continue
            return "PersistentVolume had no name"
        volume = index.volumes.get(claim.volume_name)
        if volume is None:
            return f'persistentvolume "{claim.volume_name}" not found'
        for key in TOPOLOGY_LABELS:
            value = volume.labels.get(key)
            if value is None:
                continue
            zones = _zones(value)
            if zones is not None:
                topology.append((key, zones))
    return tuple(topology)


class VolumeZone(StaticClaimFilterPlugin):
    name = "VolumeZone"

    def __init__(self) -> None:
        # PreFilter's answer for the last pod (uid) at VolumeIndex.version: asked again for every window.
        self._memo: tuple[str, int, Topology | str] | None = None

    def topology(self, pod: PodRecord, index: VolumeIndex) -> Topology | str:
        memo = self._memo
        if memo is not None and memo[0] == pod.uid and memo[1] == index.version:
            return memo[2]
        found = volume_topology(pod, index)
        self._memo = (pod.uid, index.version, found)
        return found

    def prefilter(self, pod: PodRecord, cache: SchedulerCache) -> str:
        if not pod.claims:
            return ""
        found = self.topology(pod, cache.volumes)
        return found if isinstance(found, str) else ""

    def signature(self, pod: PodRecord) -> Hashable | None:
        memo = self._memo
        if memo is None or memo[0] != pod.uid or isinstance(memo[2], str) or not memo[2]:
            return None
        return memo[2]

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        memo = self._memo
        assert memo is not None and memo[0] == pod.uid and not isinstance(memo[2], str)  # set by run()
        labels = node.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return None  # a node without zones: a single-zone cluster
        for key, values in memo[2]:
            value = labels.get(key)
            if value is None and key in _GA:
                value = labels.get(_GA[key])
            if value is None or value not in values:
                return NO_VOLUME_ZONE
        return None
