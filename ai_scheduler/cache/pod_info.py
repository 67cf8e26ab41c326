"""What the scheduler derives from one version of a pod, kept with it: its PodInfo.

kube-scheduler's framework.PodInfo is the pod with what is parsed from it once (its affinity terms, its
requests), read by every plugin of every attempt. Here the PodRecord (records.py) is the parsed part:
built from the API's JSON when the pod enters the cache, it holds the requests and the scoring
requests (shared maps: the pods of one template share them), the parsed pod affinity and spread
constraints, tolerations, host ports and claims. Its PodInfo holds what is derived from the record
afterwards, by whichever part of the scheduler asks first, so that nothing derives it twice:

- `gpu`: the managed-GPU request read from the annotations (gpus.gpu_request);
- `tenant`: the user, group and queue (Tenancy.tenant_of). It depends on the config as well, so it is
  kept with the tenancy's `epoch` it was resolved under; a reload starts a new epoch
  (Tenancy.reconfigure), and the next look-up resolves the tenant again;
- `amounts`: what the pod counts against quotas (tenancy.quota_amounts), one shared read-only map for
  the pods of one template. A pod with ResourceClaims counts the GPUs its claims hold or ask for,
  which move with the DRA objects: its amounts are kept with the DRA state's version they were
  built at (`amounts_at`) and built again once that moved; a pod without claims has -1 there;
- `containers`: the per-container extended-resource requests that DRA maps to a claim, read from the
  spec by PodRecord.from_api (records.extended_containers), for pods that ask for any;
- `gang_shape`: the part of a gang member's shape key read from the pod alone, for one framework
  (gang_shapes.py);
- `hint`: the pod's queueing hint, what makes pods alike for the filters (SchedulerCore.hint_of, which
  decides each time whether the pod takes one at all).

A PodInfo is made on first use (PodRecord.info) and belongs to one record: a changed pod is a new
record, with a new PodInfo, so nothing in it goes stale but the two stamped fields above. A copy of a
record that changes what these were derived from drops its PodInfo (PodRecord.forget_derived). The
attempt's own derived values (the priority, the tenant and amounts read once) are held by its
CycleState (scheduler/framework/cycle_state.py).

Memory: one slotted object per pod that needs one (every pending pod, every placed pod charged to a
tenant: 96 bytes); it replaced the tenancy's memo of tenants by uid, which took about as much.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ai_scheduler.cache.gpus import GpuRequest
    from ai_scheduler.cache.tenancy import Tenant

PURE = -1  # `amounts_at` of amounts that read the pod alone (no ResourceClaims)

# A DRA container entry (records.extended_containers): index, name, long-lived, request names, amounts.
ExtendedContainer = tuple[int, str, bool, list[str], dict[str, int]]


class PodInfo:
    """One pod version's derived data (see the module); each field is None until first derived."""

    __slots__ = ("amounts", "amounts_at", "containers", "epoch", "gang_shape", "gpu", "hint", "tenant")

    def __init__(self) -> None:
        self.gpu: tuple[GpuRequest | None, str] | None = None
        self.tenant: Tenant | None = None
        self.epoch: object = None  # the tenancy's epoch `tenant` was resolved under
        self.amounts: Mapping[str, int] | None = None
        self.amounts_at = PURE  # the DRA state's version `amounts` were built at (PURE: no claims)
        self.containers: tuple[ExtendedContainer, ...] = ()
        self.gang_shape: tuple[Any, Hashable] | None = None  # (framework, key)
        self.hint: int | None = None

    def __repr__(self) -> str:
        return f"PodInfo(tenant={self.tenant}, amounts={self.amounts})"
