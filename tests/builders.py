"""The one builder of the tests' objects, after Kueue's wrappers: a Pod or a Node begun with what
`ai_scheduler.sim.objects` makes (a Pod as a user submits it, a Node as a kubelet registers it), then
changed by chained calls, each of which returns the wrapper; `.obj()` is the API object (a dict), and
`.record()` the cache's record of it, as the informers build one.

    Pod("p", gpus=1).uid().rv("1").on("n1").phase("Running").record()
    Node("n1", gpus=8).labels({"zone": "a"}).record()

Gangs: `PodGroup(name, min_member)` is scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`), whose
members carry its label (`Pod(...).pod_group(name)`); `NativePodGroup(name, min_count)` is Kubernetes'
own (`scheduling.k8s.io/v1beta1`, a `gang` or `basic` schedulingPolicy), whose members name it in
`spec.schedulingGroup` (`Pod(...).scheduling_group(name)`). GPUs: `gpu_nodes(count)` are device-plugin
nodes (`nvidia.com/gpu` in allocatable); `Node(...).managed_gpus(report)` a node whose devices
ai-scheduler assigns itself, from the node agent's report (`gpu_report(...)`, annotations of
`ai_scheduler.cache.gpus`). Tasks: `Task(name)` is ai-scheduler's
(`ai-scheduler.io/v1alpha1`), its roles added by `.role(name, replicas, minimum, **make_pod's fields)`.
Owners: `owner_ref(...)`, and `Pod(...).controlled_by(...)` for the
controller reference a controller puts on the pods it makes.

The objects of the other kinds (PodDisruptionBudgets, volumes, DRA's DeviceClasses, ResourceSlices and
ResourceClaims) come from `ai_scheduler.sim.objects` as they are, re-exported here, so that a test may
import every builder from this module.
"""

from __future__ import annotations

import time
from typing import Any, Self

import orjson

from ai_scheduler.cache.gangs import POD_GROUP_LABEL
from ai_scheduler.cache.gpus import GPUS_ANNOTATION, MANAGED_LABEL, UPDATED_ANNOTATION
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.log import rfc3339
from ai_scheduler.sim.objects import (
    GPU_RESOURCE,
    NVIDIA_DRIVER,
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
    "NVIDIA_DRIVER",
    "NativePodGroup",
    "Node",
    "Pod",
    "PodGroup",
    "Task",
    "claim_spec",
    "device_request",
    "gpu_nodes",
    "gpu_report",
    "gpu_report_text",
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

    def controlled_by(self, api_version: str, kind: str, name: str, uid: str | None = None) -> Self:
        """Made by this controller: its one ownerReference, `controller` and `blockOwnerDeletion` true (as
        metav1.NewControllerRef), the owner's uid by default `uid-<name>`."""
        return self.owners(owner_ref(api_version, kind, name, f"uid-{name}" if uid is None else uid,
                                     controller=True, block_owner_deletion=True))

    def pod_group(self, group: str) -> Self:
        """A member of scheduler-plugins' PodGroup `group` (see `PodGroup`): its label, added to the pod's."""
        return self.meta(labels={**(self._obj["metadata"].get("labels") or {}), POD_GROUP_LABEL: group})

    def scheduling_group(self, group: str) -> Self:
        """A member of Kubernetes' PodGroup `group` (see `NativePodGroup`): `spec.schedulingGroup`."""
        return self.spec(schedulingGroup={"podGroupName": group})

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

    def managed_gpus(self, report: str | None, *, updated: float | None = None) -> Self:
        """GPUs that ai-scheduler assigns itself: the managed label, added to the node's; `report` (the node
        agent's JSON, see `gpu_report`) and its date (`updated`, epoch seconds, by default now), added to
        its annotations. None: the label alone (an annotations map made where there was none)."""
        meta = self._obj["metadata"]
        meta["labels"] = {**(meta.get("labels") or {}), MANAGED_LABEL: "true"}
        annotations = meta.setdefault("annotations", {})
        if report is not None:
            annotations[GPUS_ANNOTATION] = report
            when = time.time() if updated is None else updated
            annotations[UPDATED_ANNOTATION] = rfc3339(when, millis=False)
        return self

    def record(self) -> NodeRecord:
        return NodeRecord.from_api(self._obj)


def gpu_nodes(count: int, prefix: str = "gpu-", *, gpus: int = 8, **fields: Any) -> list[dict[str, Any]]:
    """`count` Nodes `<prefix>0`, `<prefix>1`, ... of `gpus` device-plugin GPUs each (`make_node`'s other
    arguments as `fields`: 32 cpu and 128Gi by default)."""
    return [Node(f"{prefix}{i}", gpus=gpus, **fields).obj() for i in range(count)]


def gpu_report(count: int = 8, *, memory_gib: int = 80, islands: list[list[int]] | None = None,
               used_gib: dict[int, int] | None = None,
               errors: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The node agent's report of `count` H100s (`orjson.dumps(...)` it for `Node.managed_gpus`): NVLink
    and PXB inside each island (one of all the devices by default), SYS across islands; `used_gib`
    per device; `errors`: those devices reported as an error alone."""
    islands = islands or [list(range(count))]
    island_of = {i: n for n, island in enumerate(islands) for i in island}
    devices: list[dict[str, Any]] = []
    for i in range(count):
        if errors and i in errors:
            devices.append({"index": i, "error": errors[i]})
            continue
        devices.append({
            "index": i,
            "uuid": f"GPU-{i:04d}",
            "model": "NVIDIA H100 80GB HBM3",
            "memoryTotalMiB": memory_gib * 1024,
            "memoryUsedMiB": (used_gib or {}).get(i, 0) * 1024,
            "utilizationPct": 0,
            "nvlinkPeers": [j for j in islands[island_of[i]] if j != i],
            "pcie": {str(j): ("PXB" if island_of[j] == island_of[i] else "SYS")
                     for j in range(count) if j != i},
        })
    return devices


def gpu_report_text(count: int = 8, **fields: Any) -> str:
    """`gpu_report(count, **fields)` as the node agent writes it (compact JSON)."""
    return orjson.dumps(gpu_report(count, **fields)).decode()


class PodGroup(_Wrapper):
    """scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`): `spec.minMember` (None: no spec field),
    then `.timeout()`, `.min_resources()`, `.spec()`, `.annotations()`, ...; `.member(i)` a member pod."""

    def __init__(self, name: str, min_member: int | None = 1, *, namespace: str = "default") -> None:
        super().__init__({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {} if min_member is None else {"minMember": min_member},
        })

    @classmethod
    def bare(cls, name: str, namespace: str = "default") -> PodGroup:
        """Only a name and a namespace, and an empty spec (no apiVersion, kind or minMember), as a unit test
        hands one to the registry: for `.spec()` and `.meta()` to fill."""
        group = cls.__new__(cls)
        _Wrapper.__init__(group, {"metadata": {"name": name, "namespace": namespace}, "spec": {}})
        return group

    def timeout(self, seconds: int | None) -> Self:
        """`spec.scheduleTimeoutSeconds`; None: left as it is."""
        return self if seconds is None else self.spec(scheduleTimeoutSeconds=seconds)

    def min_resources(self, resources: dict[str, Any] | None) -> Self:
        """`spec.minResources`; None or {}: left as it is."""
        return self.spec(minResources=dict(resources)) if resources else self

    def member(self, i: int, **fields: Any) -> Pod:
        """Member `<name>-<i>` (in the group's namespace): `Pod(..., **fields).pod_group(name)`."""
        namespace = self._obj["metadata"]["namespace"]
        return Pod(f"{self.name}-{i}", namespace=namespace, **fields).pod_group(self.name)


class NativePodGroup(_Wrapper):
    """Kubernetes' PodGroup (`scheduling.k8s.io/v1beta1`, GenericWorkload): `spec.schedulingPolicy` the
    `gang` policy of `min_count`, or the `basic` one (None); `.policy()` any other; `.member(i)` a member."""

    def __init__(self, name: str, min_count: int | None, *, namespace: str = "default") -> None:
        super().__init__({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        })
        self.policy({"basic": {}} if min_count is None else {"gang": {"minCount": min_count}})

    @classmethod
    def bare(cls, name: str, namespace: str = "default") -> NativePodGroup:
        """Only a name and a namespace, and an empty spec (no apiVersion, kind or policy), as a unit test
        hands one to the registry: for `.policy()` and `.meta()` to fill."""
        group = cls.__new__(cls)
        _Wrapper.__init__(group, {"metadata": {"name": name, "namespace": namespace}, "spec": {}})
        return group

    def policy(self, policy: dict[str, Any]) -> Self:
        """`spec.schedulingPolicy`, exactly this (e.g. `{"gang": {"minCount": 0}}`)."""
        return self.spec(schedulingPolicy=policy)

    def member(self, i: int, **fields: Any) -> Pod:
        """Member `<name>-<i>` (in the group's namespace): `Pod(..., **fields).scheduling_group(name)`."""
        namespace = self._obj["metadata"]["namespace"]
        return Pod(f"{self.name}-{i}", namespace=namespace, **fields).scheduling_group(self.name)


class Task(_Wrapper):
    """A Task (`ai-scheduler.io/v1alpha1`, deploy/crds/ai-scheduler.io_tasks.yaml) with no role yet: add
    them with `.role(...)`, the other spec fields with `.spec(...)`."""

    def __init__(self, name: str, namespace: str = "default") -> None:
        super().__init__({"apiVersion": "ai-scheduler.io/v1alpha1", "kind": "Task",
                          "metadata": {"name": name, "namespace": namespace}, "spec": {"roles": []}})

    def role(self, name: str, replicas: int = 1, minimum: int | None = None, **pod: Any) -> Self:
        """One more role: its pod template is `make_pod(name, **pod)`'s labels, annotations and spec."""
        made = make_pod(name, **pod)
        meta = made["metadata"]
        template = {"metadata": {k: meta[k] for k in ("labels", "annotations") if meta.get(k)},
                    "spec": made["spec"]}
        role: dict[str, Any] = {"name": name, "replicas": replicas, "template": template}
        if minimum is not None:
            role["minimum"] = minimum
        self._obj["spec"]["roles"].append(role)
        return self

    def attributes(self, **fields: Any) -> Self:
        """`spec.attributes` (kind, domain, framework, modelParameters, datasetSize, estimatedRunTime)."""
        return self.spec(attributes=dict(fields))
