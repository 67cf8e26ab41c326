"""Builders for the objects that demos, tests and benchmarks put into the simulated cluster."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import orjson

from ai_scheduler.sim.kubelet import DURATION_ANNOTATION
from ai_scheduler.sim.store import now_rfc3339

GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"


def make_node(name: str, *, cpu: str = "32", memory: str = "128Gi", pods: int = 110, gpus: int = 0,
              ephemeral_storage: str = "100Gi", labels: dict[str, str] | None = None,
              annotations: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
              ready: bool = True, unschedulable: bool = False,
              extra_allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node as a kubelet would register it (capacity == allocatable, a Ready condition)."""
    allocatable: dict[str, str] = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods),
                                   "ephemeral-storage": str(ephemeral_storage)}
    if gpus:
        allocatable[GPU_RESOURCE] = str(gpus)
    allocatable.update(extra_allocatable or {})
    now = now_rfc3339()
    digest = zlib.crc32(name.encode())
    address = f"10.0.{(digest >> 8) & 0xFF}.{(digest & 0xFF) or 1}"
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                   **(labels or {})},
    }
    # kwok manages the nodes that carry its annotation (lease, Ready condition) on the real backend.
    metadata["annotations"] = {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE, **(annotations or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "kubelet is posting ready status" if ready else "kubelet is not ready",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }],
            "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
            # Every field, because kubernetes_asyncio's V1NodeSystemInfo refuses a missing one.
            "nodeInfo": {
                "machineID": f"{digest:08x}", "systemUUID": f"{digest:08x}", "bootID": f"{digest:08x}",
                "kernelVersion": "6.8.0-sim", "osImage": "sim", "containerRuntimeVersion": "sim://1.0",
                "kubeletVersion": "v1.37.0-sim", "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def priority_class_name(priority: int, preemption_policy: str | None = None) -> str:
    """The PriorityClass that `make_pod(priority=N, preemption_policy=...)` names."""
    return f"priority-{priority}" + ("-never" if preemption_policy == "Never" else "")


def priority_class(priority: int, preemption_policy: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                            "metadata": {"name": priority_class_name(priority, preemption_policy)},
                            "value": priority}
    if preemption_policy:
        body["preemptionPolicy"] = preemption_policy
    return body


def priority_classes_for(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The PriorityClasses that pods built with `make_pod(priority=N)` name, to create before them."""
    wanted: dict[str, dict[str, Any]] = {}
    for pod in pods:
        spec = pod["spec"]
        if "priority" not in spec:
            continue
        made = priority_class(spec["priority"], spec.get("preemptionPolicy"))
        if spec.get("priorityClassName") == made["metadata"]["name"]:
            wanted[made["metadata"]["name"]] = made
    return [wanted[name] for name in sorted(wanted)]


def make_pod(name: str, *, namespace: str = "default", cpu: str | None = "100m", memory: str | None = "128Mi",
             gpus: int = 0, scheduler_name: str = "ai-scheduler", priority: int | None = None,
             priority_class: str | None = None, preemption_policy: str | None = None,
             labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, duration: float | str | None = None,
             node_selector: dict[str, str] | None = None, tolerations: list[dict[str, Any]] | None = None,
             affinity: dict[str, Any] | None = None, node_name: str | None = None,
             init_containers: list[dict[str, Any]] | None = None,
             overhead: dict[str, str] | None = None,
             ports: list[dict[str, Any]] | None = None,
             topology_spread: list[dict[str, Any]] | None = None,
             volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A one-container Pod ("main", busybox); `duration` makes the simulated kubelet finish it.

    `ports` are the container's ContainerPorts, e.g. `[{"containerPort": 8080, "hostPort": 8080}]`;
    `topology_spread` its `topologySpreadConstraints`; `volumes` its `volumes`, e.g.
    `[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]`.
    """
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = str(cpu)
    if memory is not None:
        requests["memory"] = str(memory)
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if gpus:
        resources["limits"] = {GPU_RESOURCE: str(gpus)}
    container: dict[str, Any] = {"name": "main", "image": "busybox", "resources": resources}
    if ports:
        container["ports"] = [dict(p) for p in ports]
    spec: dict[str, Any] = {"schedulerName": scheduler_name, "containers": [container]}
    if priority is not None:
        # As on a real API server, a priority comes with its PriorityClass (see `priority_class_name`).
        spec["priority"] = priority
        spec["priorityClassName"] = priority_class or priority_class_name(priority, preemption_policy)
    elif priority_class is not None:
        spec["priorityClassName"] = priority_class
    if preemption_policy is not None:
        spec["preemptionPolicy"] = preemption_policy
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if affinity:
        spec["affinity"] = affinity
    if node_name:
        spec["nodeName"] = node_name
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if overhead:
        spec["overhead"] = dict(overhead)
    if topology_spread:
        spec["topologySpreadConstraints"] = [dict(c) for c in topology_spread]
    if volumes:
        spec["volumes"] = [dict(v) for v in volumes]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    all_annotations = dict(annotations or {})
    if duration is not None:
        # A Go duration, the form both the simulated kubelets and kwok's stages read.
        as_go = f"{duration}s" if isinstance(duration, int | float) else duration
        all_annotations[DURATION_ANNOTATION] = as_go
    if all_annotations:
        metadata["annotations"] = all_annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def make_pdb(name: str, match_labels: dict[str, str], *, namespace: str = "default",
             max_unavailable: int | str | None = None, min_available: int | str | None = None,
             disruptions_allowed: int | None = None,
             disrupted_pods: list[str] | None = None) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget selecting `match_labels`. `disruptions_allowed` and
    `disrupted_pods` fill its status as the disruption controller would (none runs in the test
    clusters); a new budget's status reads as no disruption allowed."""
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(match_labels)}}
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if min_available is not None:
        spec["minAvailable"] = min_available
    pdb: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    status: dict[str, Any] = {}
    if disruptions_allowed is not None:
        status["disruptionsAllowed"] = disruptions_allowed
    if disrupted_pods:
        status["disruptedPods"] = dict.fromkeys(disrupted_pods, "2026-01-01T00:00:00Z")
    if status:
        pdb["status"] = status
    return pdb


def make_storage_class(name: str, *, provisioner: str = "example.com/csi",
                       binding_mode: str = "WaitForFirstConsumer",
                       allowed_topologies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A StorageClass (`binding_mode` Immediate or WaitForFirstConsumer)."""
    obj: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                           "metadata": {"name": name}, "provisioner": provisioner,
                           "volumeBindingMode": binding_mode, "reclaimPolicy": "Delete"}
    if allowed_topologies:
        obj["allowedTopologies"] = list(allowed_topologies)
    return obj


def make_pvc(name: str, *, namespace: str = "default", storage: str = "1Gi", storage_class: str | None = None,
             access_modes: tuple[str, ...] = ("ReadWriteOnce",), volume_name: str | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A PersistentVolumeClaim."""
    spec: dict[str, Any] = {"accessModes": list(access_modes),
                            "resources": {"requests": {"storage": storage}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume_name is not None:
        spec["volumeName"] = volume_name
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def make_pv(name: str, *, storage: str = "1Gi", storage_class: str = "",
            access_modes: tuple[str, ...] = ("ReadWriteOnce",), node_affinity: dict[str, Any] | None = None,
            claim_ref: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A PersistentVolume (a hostPath one: the API server needs a source); `node_affinity` is its
    `spec.nodeAffinity.required`, e.g. `{"nodeSelectorTerms": [{"matchExpressions": [...]}]}`."""
    spec: dict[str, Any] = {"capacity": {"storage": storage}, "accessModes": list(access_modes),
                            "hostPath": {"path": f"/mnt/{name}"}, "persistentVolumeReclaimPolicy": "Retain",
                            "storageClassName": storage_class}
    if node_affinity is not None:
        spec["nodeAffinity"] = {"required": node_affinity}
    if claim_ref is not None:
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", **claim_ref}
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata, "spec": spec}


def kubeconfig(url: str) -> dict[str, Any]:
    """A kubeconfig for the plain-HTTP, unauthenticated simulated server."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {"server": url}}],
        "users": [{"name": "sim", "user": {}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim", "namespace": "default"}}],
        "current-context": "sim",
        "preferences": {},
    }


def write_kubeconfig(url: str, path: str | Path) -> Path:
    """Write `kubeconfig(url)` as JSON (valid YAML, so kubectl and clients read it)."""
    target = Path(path)
    target.write_bytes(orjson.dumps(kubeconfig(url), option=orjson.OPT_INDENT_2))
    return target
