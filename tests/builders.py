"""The one builder of the tests' objects, after Kueue's wrappers: a Pod or a Node begun with what
`ai_scheduler.sim.objects` makes (a Pod as a user submits it, a Node as a kubelet registers it), then
changed by chained calls, each of which returns the wrapper; `.obj()` is the API object (a dict), and
`.record()` the cache's record of it, as the informers build one.

    Pod("p", gpus=1).uid().rv("1").on("n1").phase("Running").record()
    Node("n1", gpus=8).labels({"zone": "a"}).record()

The objects of the other kinds (PodDisruptionBudgets, volumes, DRA's DeviceClasses, ResourceSlices and
ResourceClaims) come from `ai_scheduler.sim.objects` as they are, re-exported here, so that a test may
import every builder from this module.
"""

from __future__ import annotations

from typing import Any, Self

from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.sim.objects import (
    GPU_RESOURCE,
    claim_spec,
    device_request,
    make_claim_template,
    make_device_class,
    make_gpu_slice,
    make_node,
    make_pdb,
    make_pod,
    make_pv,
    make_pvc,
    make_resource_claim,
    make_storage_class,
    nvidia_gpu_device,
    pod_claim,
)

__all__ = [
    "GPU_RESOURCE",
    "Node",
    "Pod",
    "claim_spec",
    "device_request",
    "make_claim_template",
    "make_device_class",
    "make_gpu_slice",
    "make_node",
    "make_pdb",
    "make_pod",
    "make_pv",
    "make_pvc",
    "make_resource_claim",
    "make_storage_class",
    "nvidia_gpu_device",
    "owner_ref",
    "pod_claim",
]

TERMINATING_SINCE = "2026-01-01T00:00:00Z"


def owner_ref(api_version: str, kind: str, name: str, uid: str, **fields: Any) -> dict[str, Any]:
    """One entry of `metadata.ownerReferences` (`controller=True`, `blockOwnerDeletion=True` as fields)."""
    renamed = {"block_owner_deletion": "blockOwnerDeletion"}
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
            **{renamed.get(k, k): v for k, v in fields.items()}}


class _Wrapper:
    def __init__(self, obj: dict[str, Any]) -> None:
        self._obj = obj

    @property
    def name(self) -> str:
        return str(self._obj["metadata"]["name"])

    def obj(self) -> dict[str, Any]:
        """The API object as built."""
        return self._obj

    def meta(self, **fields: Any) -> Self:
        """Set these fields of `metadata` (e.g. `creationTimestamp=...`)."""
        self._obj["metadata"].update(fields)
        return self

    def uid(self, uid: str | None = None) -> Self:
        """`metadata.uid`, by default `uid-<name>`."""
        return self.meta(uid=f"uid-{self.name}" if uid is None else uid)

    def rv(self, resource_version: str) -> Self:
        """`metadata.resourceVersion`."""
        return self.meta(resourceVersion=resource_version)

    def labels(self, labels: dict[str, str]) -> Self:
        """`metadata.labels`, exactly these (make_node's well-known ones replaced)."""
        return self.meta(labels=dict(labels))

    def annotations(self, annotations: dict[str, str]) -> Self:
        """`metadata.annotations`, exactly these."""
        return self.meta(annotations=dict(annotations))

    def spec(self, **fields: Any) -> Self:
        """Set these fields of `spec` (none: an empty spec where there was none)."""
        self._obj.setdefault("spec", {}).update(fields)
        return self

    def status(self, **fields: Any) -> Self:
        """Set these fields of `status`."""
        self._obj.setdefault("status", {}).update(fields)
        return self


class Pod(_Wrapper):
    """A Pod: `make_pod(name, **fields)` (one container "main", 100m cpu and 128Mi asked by default; see
    its arguments), then what the chained calls change."""

    def __init__(self, name: str, **fields: Any) -> None:
        super().__init__(make_pod(name, **fields))

    @classmethod
    def bare(cls, name: str, namespace: str = "ns") -> Pod:
        """Only a name and a namespace, and an empty spec: no container, no scheduler name (the shape of
        kube's own test pods), for `.container()` and `.spec()` to fill."""
        pod = cls.__new__(cls)
        _Wrapper.__init__(pod, {"metadata": {"name": name, "namespace": namespace}, "spec": {}})
        return pod

    def container(self, name: str = "c", image: str | None = None, *, requests: dict[str, str] | None = None,
                  limits: dict[str, str] | None = None, **fields: Any) -> Self:
        """One more container; `requests` and `limits` (as given, {} too) make its `resources`."""
        container: dict[str, Any] = {"name": name}
        if image is not None:
            container["image"] = image
        resources = {k: dict(v) for k, v in (("requests", requests), ("limits", limits)) if v is not None}
        if resources:
            container["resources"] = resources
        container.update(fields)
        self._obj["spec"].setdefault("containers", []).append(container)
        return self

    def on(self, node: str | None) -> Self:
        """Bound to `node` (`spec.nodeName`); None or "": left as it is."""
        if node:
            self._obj["spec"]["nodeName"] = node
        return self

    def phase(self, phase: str) -> Self:
        """`status.phase`."""
        return self.status(phase=phase)

    def terminating(self, terminating: bool = True, since: str = TERMINATING_SINCE) -> Self:
        """Being deleted: a `metadata.deletionTimestamp`."""
        return self.meta(deletionTimestamp=since) if terminating else self

    def owners(self, *refs: dict[str, Any]) -> Self:
        """`metadata.ownerReferences` (see `owner_ref`)."""
        return self.meta(ownerReferences=list(refs))

    def record(self) -> PodRecord:
        return PodRecord.from_api(self._obj)


class Node(_Wrapper):
    """A Node: `make_node(name, **fields)` (Ready, capacity == allocatable; see its arguments), then what
    the chained calls change."""

    def __init__(self, name: str, **fields: Any) -> None:
        super().__init__(make_node(name, **fields))

    @classmethod
    def bare(cls, name: str) -> Node:
        """Only a name (no labels, spec, conditions): for `.status()` and `.meta()` to fill."""
        node = cls.__new__(cls)
        _Wrapper.__init__(node, {"metadata": {"name": name}})
        return node

    def allocatable(self, allocatable: dict[str, str], *, ready: bool | None = None) -> Self:
        """`status.allocatable` exactly so; `ready`: a Ready condition True (or False) too."""
        self.status(allocatable=dict(allocatable))
        if ready is not None:
            self.status(conditions=[{"type": "Ready", "status": "True" if ready else "False"}])
        return self

    def record(self) -> NodeRecord:
        return NodeRecord.from_api(self._obj)
