"""NodeVolumeLimits: CSI volumes per node within the driver's limit, as kube-scheduler's CSILimits checks.

A node's CSINode lists its CSI drivers, each with an allocatable volume count.
A pod's claims (its `persistentVolumeClaim` and generic ephemeral volumes)
are CSI volumes named `driver/handle`: a bound claim's PV gives its
`spec.csi` driver and volumeHandle, an unbound one (or one whose PV is not
seen yet) its class's provisioner and `namespace-claim`; a PV of another
source counts for nothing (kube would translate in-tree sources to CSI; we do
not). On a node, the volumes of the pods already there (each counted once,
however many pods share it) plus the pod's new ones must stay within each
driver's count, or the node fails with `node(s) exceed max volume count`.

Cost: a pod without claims returns at once, and so does one whose drivers no
CSINode limits. Otherwise the check walks the candidate nodes of the window
that have a CSINode, and on each only the claims of the pods placed there
(VolumeIndex.node_claims), never the node's other pods.
"""

from __future__ import annotations

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.volumes import Claim, VolumeIndex
from ai_scheduler.scheduler.framework.interface import (
    ALL_ROWS,
    NO_OPINION,
    FilterPlugin,
    Reasons,
    StaticResults,
    Window,
)

MAX_VOLUME_COUNT = "node(s) exceed max volume count"


def unique_volume(claim: Claim, index: VolumeIndex) -> tuple[str, str] | None:
    """(`driver/handle`, driver) of a claim's volume, as getCSIDriverInfo / getCSIDriverInfoFromSC find it."""
    if claim.volume_name:
        volume = index.volumes.get(claim.volume_name)
        if volume is not None:
            if not volume.csi_driver or not volume.csi_handle:
                return None
            return f"{volume.csi_driver}/{volume.csi_handle}", volume.csi_driver
    if not claim.storage_class:
        return None
    storage_class = index.classes.get(claim.storage_class)
    if storage_class is None or not storage_class.provisioner:
        return None
    handle = f"{claim.namespace}-{claim.name}"
    return f"{storage_class.provisioner}/{handle}", storage_class.provisioner


class NodeVolumeLimits(FilterPlugin):
    name = "NodeVolumeLimits"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if not pod.claims else ""

    def _new_volumes(self, pod: PodRecord, index: VolumeIndex) -> dict[str, str]:
        volumes: dict[str, str] = {}
        for name, _ephemeral in pod.claims:
            claim = index.claims.get((pod.namespace, name))
            found = unique_volume(claim, index) if claim is not None else None
            if found is not None:
                volumes[found[0]] = found[1]
        return volumes

    def _exceeds(self, node: str, new: dict[str, str], index: VolumeIndex) -> bool:
        limits = index.csi_limits.get(node)
        if not limits:
            return False
        attached: dict[str, str] = {}
        for key in index.node_claims.get(node, ()):
            claim = index.claims.get(key)
            found = unique_volume(claim, index) if claim is not None else None
            if found is not None:
                attached[found[0]] = found[1]
        attached_count: dict[str, int] = {}
        for driver in attached.values():
            attached_count[driver] = attached_count.get(driver, 0) + 1
        new_count: dict[str, int] = {}
        for unique, driver in new.items():
            if unique not in attached:  # a volume already on the node is not attached twice
                new_count[driver] = new_count.get(driver, 0) + 1
        return any(
            driver in limits and attached_count.get(driver, 0) + count > limits[driver]
            for driver, count in new_count.items()
        )

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        if not pod.claims:
            return []
        index = cache.volumes
        if not index.csi_limits:
            return []
        new = self._new_volumes(pod, index)
        if not new:
            return []
        drivers = set(new.values())
        if not any(drivers & limits.keys() for limits in index.csi_limits.values()):
            return []
        # The window's row numbers, one per entry of `candidates`.
        rows = np.arange(candidates.shape[0]) + (window.start or 0) if isinstance(window, slice) else window
        failing = np.zeros(candidates.shape[0], dtype=bool)
        names = cache.row_names
        for position in np.flatnonzero(candidates).tolist():
            if self._exceeds(names[int(rows[position])], new, index):
                failing[position] = True
        return [(MAX_VOLUME_COUNT, failing)] if failing.any() else []
