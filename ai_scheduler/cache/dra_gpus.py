"""Which DRA devices are GPUs, and how many GPUs a pod holds or asks for through its ResourceClaims.

The views of ai-scheduler (quotas and fair share, the visibility API's `gpus`, `kubectl ai-scheduler
gpus`, the web page's GPU map) count GPUs; a pod may get them through Dynamic Resource Allocation
instead of `nvidia.com/gpu`. This module reads `DraState` (cache/dra.py) and nothing else:

- a device is a GPU when its driver publishes GPUs (`GPU_DRIVERS`: NVIDIA's `gpu.nvidia.com`) and
  its `type` attribute, when it has one, is `gpu` (NVIDIA's driver publishes MIG slices as `mig`:
  they are not whole GPUs and are not counted);
- a claim's GPUs are the GPU devices of its allocation (admin access excluded: it observes a device
  another claim holds); a claim not allocated yet counts what its requests ask of a class that
  selects a GPU driver (an `ExactCount` request's count; `All` is unknown before allocation and
  counts one; of `firstAvailable`, the first alternative);
- a pod's GPUs are its claims' (a claim named directly, or the one the resource-claim controller
  made from a template, read from the pod's status; before it exists the template's spec). A claim
  shared by several pods counts for each of them, as each of them uses its devices. The claim made
  for an extended resource (KEP-5004) is not counted here: the pod's `nvidia.com/gpu` request counts
  already.

Per-node device lists (`node_gpus`) read only the node's own slices (`DraState.node_slices`), each
device once, in its index order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ai_scheduler.cache.dra import ALL, Claim, ClaimSpec, Device, DraState, Version
from ai_scheduler.cache.records import PodRecord

GPU_RESOURCE = "nvidia.com/gpu"  # what DRA GPUs count as in quotas
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
GPU_DRIVERS = frozenset({NVIDIA_GPU_DRIVER})
GPU_TYPE = "gpu"


def is_gpu(device: Device) -> bool:
    if device.driver not in GPU_DRIVERS:
        return False
    kind = device.attributes.get((device.driver, "type"))
    return kind is None or kind == GPU_TYPE


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """A GPU as a view shows it: from the attributes NVIDIA's driver publishes."""

    device: Device
    index: int
    uuid: str
    model: str
    memory: int  # bytes (capacity `memory`), 0 when not published

    @classmethod
    def of(cls, device: Device, position: int) -> GpuDevice:
        attrs = device.attributes
        index = attrs.get((device.driver, "index"))
        memory = device.capacity.get((device.driver, "memory"))
        return cls(
            device,
            index if isinstance(index, int) and not isinstance(index, bool) else position,
            _text(attrs.get((device.driver, "uuid"))),
            _text(attrs.get((device.driver, "productName"))),
            int(memory.value) if memory is not None else 0,
        )


def _text(value: object) -> str:
    if value is None:
        return ""
    return value.text if isinstance(value, Version) else str(value)


def node_gpus(dra: DraState, node: str) -> list[GpuDevice]:
    """The GPUs a node's own ResourceSlices publish, by index."""
    found: dict[tuple[str, str, str], Device] = {}
    for sl in (dra.node_slices.get(node) or {}).values():
        for device in sl.devices:
            if is_gpu(device):
                found.setdefault(device.device_id, device)
    gpus = [GpuDevice.of(device, position) for position, device in enumerate(found.values())]
    return sorted(gpus, key=lambda g: (g.index, g.device.name))


def nodes_with_gpus(dra: DraState) -> Iterator[str]:
    for node, slices in dra.node_slices.items():
        if node and any(is_gpu(d) for sl in slices.values() for d in sl.devices):
            yield node


def _gpu_class(dra: DraState, class_name: str) -> bool:
    """Whether a DeviceClass selects a GPU driver's devices (its CEL selectors name the driver)."""
    device_class = dra.classes.get(class_name)
    if device_class is None:
        return False
    return any(f'"{driver}"' in expression for expression in device_class.selectors for driver in GPU_DRIVERS)


def spec_gpus(dra: DraState, spec: ClaimSpec) -> int:
    """GPUs a claim's spec asks for, before allocation."""
    total = 0
    for group in spec.requests:
        if not group.alternatives:
            continue
        request = group.alternatives[0]
        if request.admin_access or not _gpu_class(dra, request.class_name):
            continue
        total += 1 if request.mode == ALL else request.count
    return total


def claim_gpus(dra: DraState, claim: Claim) -> int:
    if claim.allocation is None:
        return spec_gpus(dra, claim.spec)
    count = 0
    for result in claim.allocation.devices:
        if result.admin_access or result.driver not in GPU_DRIVERS:
            continue
        device = _device(dra, result.driver, result.pool, result.device)
        if device is None or is_gpu(device):
            count += 1  # a device no slice shows any more was a GPU when allocated from this driver
    return count


def _device(dra: DraState, driver: str, pool: str, name: str) -> Device | None:
    for sl in (dra.pool_slices.get((driver, pool)) or {}).values():
        for device in sl.devices:
            if device.name == name:
                return device
    return None


def pod_claims(dra: DraState, pod: PodRecord) -> Iterator[tuple[str, Claim | None, ClaimSpec | None]]:
    """(claim name, the claim if held, else the template's spec) for each of the pod's claims."""
    for ref in pod.resource_claims:
        if ref.claim_name:
            yield ref.claim_name, dra.claim(pod.namespace, ref.claim_name), None
        elif ref.template_name:
            name = pod.claim_statuses.get(ref.name, "")
            claim = dra.claim(pod.namespace, name) if name else None
            template = dra.templates.get((pod.namespace, ref.template_name))
            yield name, claim, None if claim is not None or template is None else template.spec


def pod_gpus(dra: DraState | None, pod: PodRecord) -> int:
    """GPUs the pod holds (or asks for) through its ResourceClaims."""
    if dra is None or not pod.resource_claims:
        return 0
    total = 0
    for _, claim, spec in pod_claims(dra, pod):
        if claim is not None:
            total += claim_gpus(dra, claim)
        elif spec is not None:
            total += spec_gpus(dra, spec)
    return total


Holders = dict[tuple[str, str, str], list[tuple[Claim, str, str]]]


def holders(claims: Iterable[Claim]) -> Holders:
    """Device id -> (claim, namespace, pod name) for each pod a claim holding it is reserved for (a claim
    reserved for nobody: one entry with an empty pod name)."""
    held: Holders = {}
    for claim in claims:
        if claim.allocation is None:
            continue
        pods = [c.name for c in claim.reserved_for if c.resource == "pods" and not c.api_group] or [""]
        for result in claim.allocation.devices:
            if result.admin_access:
                continue
            for pod in pods:
                held.setdefault(result.device_id, []).append((claim, claim.namespace, pod))
    return held


def held_claims(dra: DraState) -> Iterator[Claim]:
    """Every claim as the scheduler sees it: our assumed allocations over the informer's claims."""
    for key in set(dra.claims) | set(dra.assumed):
        claim = dra.held(key)
        if claim is not None:
            yield claim


