"""Builders for the objects that demos, tests and benchmarks put into the simulated cluster."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
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
             volumes: list[dict[str, Any]] | None = None,
             resource_claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A one-container Pod ("main", busybox); `duration` makes the simulated kubelet finish it.

    `ports` are the container's ContainerPorts, e.g. `[{"containerPort": 8080, "hostPort": 8080}]`;
    `topology_spread` its `topologySpreadConstraints`; `volumes` its `volumes`, e.g.
    `[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]`; `resource_claims` its
    `spec.resourceClaims` (DRA), e.g. `[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]`
    (see `pod_claim`), each used by the container.
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
    if resource_claims:
        resources["claims"] = [{"name": c["name"]} for c in resource_claims]
        container["resources"] = resources
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
    if resource_claims:
        spec["resourceClaims"] = [dict(c) for c in resource_claims]
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


# ----------------------------------------------------------- Dynamic Resource Allocation (resource.k8s.io/v1)

NVIDIA_DRIVER = "gpu.nvidia.com"  # the driver name of NVIDIA's DRA driver for GPUs


def pod_claim(name: str, *, claim: str | None = None, template: str | None = None) -> dict[str, str]:
    """One entry of a pod's `spec.resourceClaims`: a claim by name, or one made from a template."""
    if (claim is None) == (template is None):
        raise ValueError("a pod claim names either a claim or a template")
    return {"name": name, "resourceClaimName": claim} if claim is not None else \
        {"name": name, "resourceClaimTemplateName": str(template)}


def nvidia_gpu_device(index: int, *, node: str, product: str = "NVIDIA H100 80GB HBM3", memory: str = "80Gi",
                      driver_version: str = "580.65.6", cuda_driver_version: str = "13.0.0",
                      architecture: str = "Hopper", compute_capability: str = "9.0.0",
                      attributes: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One full GPU as NVIDIA's DRA kubelet plugin publishes it (`gpu-<index>`): its attributes (type,
    uuid, minor, index, productName, brand, architecture, cudaComputeCapability, driverVersion,
    cudaDriverVersion, resource.kubernetes.io/pcieRoot) and its memory capacity."""
    digest = zlib.crc32(f"{node}/{index}".encode())
    uuid = f"GPU-{digest:08x}-{index:04x}-4{digest & 0xFFF:03x}-8000-{digest:08x}{index:04x}"
    attrs: dict[str, dict[str, Any]] = {
        "type": {"string": "gpu"},
        "uuid": {"string": uuid},
        "minor": {"int": index},
        "index": {"int": index},
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": architecture},
        "cudaComputeCapability": {"version": compute_capability},
        "driverVersion": {"version": driver_version},
        "cudaDriverVersion": {"version": cuda_driver_version},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index // 4:02x}"},
    }
    attrs.update(attributes or {})
    return {"name": f"gpu-{index}", "attributes": attrs, "capacity": {"memory": {"value": memory}}}


def make_gpu_slice(node: str, *, gpus: int = 8, driver: str = NVIDIA_DRIVER, name: str | None = None,
                   product: str = "NVIDIA H100 80GB HBM3", memory: str = "80Gi",
                   devices: list[dict[str, Any]] | None = None, generation: int = 1) -> dict[str, Any]:
    """A ResourceSlice local to `node`, shaped like the one NVIDIA's DRA driver publishes: pool named after
    the node, one slice in it, devices `gpu-0..gpus-1` (or `devices` as given, e.g. from
    `nvidia_gpu_device`)."""
    listed = devices if devices is not None else [
        nvidia_gpu_device(i, node=node, product=product, memory=memory) for i in range(gpus)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver.replace('.', '-')}"},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                 "devices": listed},
    }


def make_device_class(name: str, *, driver: str | None = NVIDIA_DRIVER, selectors: Sequence[str] = (),
                      extended_resource: str | None = None) -> dict[str, Any]:
    """A DeviceClass selecting the devices of `driver` (and every CEL expression in `selectors`);
    `extended_resource` maps a plain resource request such as `nvidia.com/gpu` onto it (KEP-5004)."""
    expressions = ([f'device.driver == "{driver}"'] if driver else []) + list(selectors)
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": spec}


def device_request(name: str = "gpu", *, device_class: str = NVIDIA_DRIVER, count: int | None = None,
                   all_devices: bool = False, selectors: Sequence[str] = (),
                   first_available: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One DeviceRequest of a claim: `exactly` so many devices of a class (or All of them) that meet
    every CEL expression in `selectors`; or `first_available` sub-requests (the same fields)."""
    if first_available is not None:
        return {"name": name, "firstAvailable": list(first_available)}
    exactly: dict[str, Any] = {"deviceClassName": device_class,
                               "allocationMode": "All" if all_devices else "ExactCount"}
    if not all_devices:
        exactly["count"] = 1 if count is None else count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


def claim_spec(requests: list[dict[str, Any]] | None = None, *, count: int = 1,
               device_class: str = NVIDIA_DRIVER, selectors: Sequence[str] = (),
               constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ResourceClaimSpec: the given requests, or one request `gpu` of `count` devices of the class."""
    listed = requests if requests is not None else [
        device_request("gpu", device_class=device_class, count=count, selectors=selectors)]
    devices: dict[str, Any] = {"requests": listed}
    if constraints:
        devices["constraints"] = list(constraints)
    return {"devices": devices}


def make_resource_claim(name: str, *, namespace: str = "default", spec: dict[str, Any] | None = None,
                        count: int = 1, device_class: str = NVIDIA_DRIVER,
                        selectors: Sequence[str] = ()) -> dict[str, Any]:
    """A ResourceClaim (by default: `count` GPUs of the class `gpu.nvidia.com`)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec if spec is not None else claim_spec(count=count, device_class=device_class,
                                                             selectors=selectors)}


def make_claim_template(name: str, *, namespace: str = "default", spec: dict[str, Any] | None = None,
                        count: int = 1, device_class: str = NVIDIA_DRIVER,
                        selectors: Sequence[str] = (),
                        labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A ResourceClaimTemplate whose claims ask what `make_resource_claim` asks."""
    body: dict[str, Any] = {"spec": spec if spec is not None else claim_spec(
        count=count, device_class=device_class, selectors=selectors)}
    if labels:
        body["metadata"] = {"labels": dict(labels)}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


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
