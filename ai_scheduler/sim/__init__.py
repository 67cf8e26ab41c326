"""The embedded simulated Kubernetes cluster: an API server over HTTP on loopback,
simulated kubelets, a node lifecycle controller and a resource-claim controller (DRA claims
made from templates, reservations cleaned up), for demos, tests and benchmarks.

Nothing here imports the scheduler, so the scheduler is tested against this
exactly as it would run against a real cluster: over HTTP with kubernetes_asyncio.
"""

from typing import TYPE_CHECKING, Any

from ai_scheduler.sim.kubelet import (
    DURATION_ANNOTATION,
    KUBELET_LABEL,
    NodeLifecycleController,
    SimKubelets,
    parse_duration,
)
from ai_scheduler.sim.objects import (
    kubeconfig,
    make_node,
    make_pdb,
    make_pod,
    make_pv,
    make_pvc,
    make_storage_class,
    priority_class,
    priority_classes_for,
    write_kubeconfig,
)
from ai_scheduler.sim.store import ApiError, Registry, ResourceType, Selector, Store

if TYPE_CHECKING:
    from ai_scheduler.sim.apiserver import SimApiServer


def __getattr__(name: str) -> Any:
    """The API server on first use: it brings in aiohttp, which the objects' builders (used by the
    trace simulator's cluster reader) do without."""
    if name == "SimApiServer":
        from ai_scheduler.sim.apiserver import SimApiServer

        return SimApiServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DURATION_ANNOTATION",
    "KUBELET_LABEL",
    "ApiError",
    "NodeLifecycleController",
    "Registry",
    "ResourceType",
    "Selector",
    "SimApiServer",
    "SimKubelets",
    "Store",
    "kubeconfig",
    "make_node",
    "make_pdb",
    "make_pod",
    "make_pv",
    "make_pvc",
    "make_storage_class",
    "parse_duration",
    "priority_class",
    "priority_classes_for",
    "write_kubeconfig",
]
