"""VolumeRestrictions: disk conflicts and ReadWriteOncePod claims, as kube-scheduler's volumerestrictions
plugin checks them.

Disk conflicts (isVolumeConflict): a node fails with `node(s) had no
available disk` when a pod there names, inline, the same GCE persistent disk
(pdName) or iSCSI volume (iqn) as the incoming pod unless both mount it
read-only, the same AWS EBS volume (volumeID) in any mode, or the same RBD
image (overlapping monitors, same pool and image) unless both are read-only.
The cache keeps the inline disks of the pods on each node
(VolumeIndex.node_disks), so the check walks the few nodes that have any,
and nothing for a pod that names none.

A claim with the ReadWriteOncePod access mode may be used by one pod at a
time in the whole cluster. PreFilter reads the pod's `persistentVolumeClaim`
volumes (not generic ephemeral ones, as kube): a claim that does not exist
stops the pod with `persistentvolumeclaim "x" not found`; a ReadWriteOncePod
claim that a pod counting on some node (bound or assumed, not finished)
already uses makes every node that reaches this filter fail with `node(s)
unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode
already in-use by another pod` (Unschedulable, in Filter, as kube v1.36
reports it; older versions refused in PreFilter with `node has pod using
PersistentVolumeClaim with the same name and ReadWriteOncePod access
mode`). The users of each claim are counted by the cache as pods start and
stop counting (VolumeIndex.users), so the check costs a dictionary look-up
per claim and nothing per node; a pod without claims returns at once.
"""

from __future__ import annotations

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import DiskKind, InlineDisk, PodRecord
from ai_scheduler.cache.volumes import READ_WRITE_ONCE_POD, VolumeIndex
from ai_scheduler.scheduler.framework.interface import (
    ALL_ROWS,
    NO_OPINION,
    FilterPlugin,
    Reasons,
    StaticResults,
    Window,
    position_in_window,
)

READ_WRITE_ONCE_POD_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode"
    " already in-use by another pod"
)
DISK_CONFLICT = "node(s) had no available disk"


def disks_conflict(disk: InlineDisk, other: InlineDisk) -> bool:
    """isVolumeConflict for one pair of inline disks."""
    if disk.kind is not other.kind or disk.name != other.name:
        return False
    if disk.kind is DiskKind.AWS_ELASTIC_BLOCK_STORE:
        return True
    if disk.kind is DiskKind.RBD and (disk.pool != other.pool or not disk.monitors & other.monitors):
        return False
    return not (disk.read_only and other.read_only)


def read_write_once_pod_conflict(pod: PodRecord, index: VolumeIndex) -> tuple[str, bool]:
    """PreFilter: (the reason the pod cannot be placed at all, whether a ReadWriteOncePod claim is taken)."""
    taken = False
    for name, ephemeral in pod.claims:
        if ephemeral:
            continue
        claim = index.claims.get((pod.namespace, name))
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found', False
        if READ_WRITE_ONCE_POD in claim.access_modes and index.users.get(claim.key, 0) > 0:
            taken = True
    return "", taken


class VolumeRestrictions(FilterPlugin):
    name = "VolumeRestrictions"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if not pod.claims and not pod.disks else ""

    def prefilter(self, pod: PodRecord, cache: SchedulerCache) -> str:
        if not pod.claims:
            return ""
        return read_write_once_pod_conflict(pod, cache.volumes)[0]

    def _disk_conflicts(
        self, pod: PodRecord, cache: SchedulerCache, size: int, window: Window
    ) -> np.ndarray | None:
        """The window's nodes where a pod holds one of the pod's disks in a conflicting way."""
        failing: np.ndarray | None = None
        for node, disks in cache.volumes.node_disks.items():
            if not any(disks_conflict(mine, theirs) for mine in pod.disks for theirs in disks):
                continue
            position = position_in_window(window, cache.row_of(node))
            if position >= 0:
                if failing is None:
                    failing = np.zeros(size, dtype=bool)
                failing[position] = True
        return failing

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        reasons: Reasons = []
        if pod.disks:
            failing = self._disk_conflicts(pod, cache, candidates.shape[0], window)
            if failing is not None:
                reasons.append((DISK_CONFLICT, failing))
        if pod.claims:
            error, taken = read_write_once_pod_conflict(pod, cache.volumes)
            if error or taken:  # the same on every node
                everywhere = np.ones(candidates.shape[0], dtype=bool)
                if reasons:  # a node is charged the first reason it fails with, as kube's Filter returns
                    everywhere &= ~reasons[0][1]
                reasons.append((error or READ_WRITE_ONCE_POD_CONFLICT, everywhere))
        return reasons
