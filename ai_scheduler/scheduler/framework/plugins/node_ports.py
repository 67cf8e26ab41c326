"""NodePorts: a pod's host ports must be free on the node, as kube-scheduler's nodeports plugin checks.

A (hostIP, protocol, hostPort) conflicts with one already used on the node for
the same protocol and port when either side binds 0.0.0.0 (every address) or
both bind the same address (HostPortInfo.CheckConflict). The ports in use are
kept by the cache per node (cache.host_ports), so the filter is a few array
operations per port the pod asks for, and nothing for a pod without host
ports (kube-scheduler's PreFilter Skip).
"""

from __future__ import annotations

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework.interface import (
    ALL_ROWS,
    NO_OPINION,
    PER_NODE,
    FilterPlugin,
    Reasons,
    StaticResults,
    Window,
)

NO_FREE_PORTS = "node(s) didn't have free ports for the requested pod ports"


class NodePorts(FilterPlugin):
    name = "NodePorts"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if not pod.host_ports else PER_NODE  # a node's ports change only by its own pods

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        if not pod.host_ports:
            return []
        taken = cache.host_ports.conflicts(pod.host_ports, window)
        return [] if taken is None else [(NO_FREE_PORTS, taken)]
