"""DynamicResources: pods' ResourceClaims allocated from ResourceSlices, as kube-scheduler's plugin of
that name.

The points, as kube runs them:
- PreEnqueue / PreFilter (`prefilter`): every claim the pod names must exist (a claim from a
  template once the resource-claim controller made it and wrote its name in the pod's
  status.resourceClaimStatuses), not be being deleted, be the pod's own when it came from a
  template, and name only DeviceClasses that exist; otherwise the pod waits, Unschedulable, with
  kube's reason (`pod "ns/p": ResourceClaim not created yet`, `could not find ResourceClaim
  "ns/c"`, `request gpu: device class x does not exist`, `resourceclaim in use`), and an event on
  one of its claims, a template or a class wakes it (`DraState.pods_affected`).
- Filter (`run`): a claim already allocated restricts the pod to the nodes its allocation's node
  selector takes ("resourceclaim not available on the node"); the claims still to allocate must
  all be met from the node's devices ("cannot allocate all claims"), by the structured allocator
  (cache/dra_allocator.py). The verdict per node is cached per *signature* of the claims to
  allocate (their requests and constraints, not their names), and recomputed only for nodes
  whose devices changed since (DraState's change log: a slice, or a device taken or freed) or
  whose labels changed: a cycle of pods asking for the same thing allocates on the one node the
  last placement changed, not on every node.
- Reserve (`pick`, at the chosen node): the allocation is made (with our GPU packing among the
  fitting devices) and held in DraState as an assumed claim (allocation plus the pod in
  reservedFor), so that the next cycle, before any write is answered, cannot take the same
  devices; Unreserve (`release`) drops the assumptions.
- PreBind (daemon/dra_prebind.py, the binder's): the claims' status.allocation and
  status.reservedFor written before the binding; a pod with claims is never bound otherwise.
- Score (`DynamicResourcesScore`, kube's weight 2): a claim's firstAvailable request met with an
  earlier alternative scores higher (8 minus its index), from the verdicts the filter computed.
- Preemption (scheduler/preemption.py), beyond kube-scheduler: the what-if that takes victims off a
  node also frees the devices of the claims reserved for them alone (DraState.without_pods), so a
  higher-priority DRA pod can preempt the pod holding the device it needs.

DRA-backed extended resources (KEP-5004): a request for a resource that a DeviceClass maps
(`extendedResourceName`, or `deviceclass.resource.kubernetes.io/<class>`) is met on a node that
does not list it in allocatable by a claim the scheduler makes for the pod, with one request per
container asking for it (`container-<i>-request-<j>`, kube's names), allocated here like the rest
and created in PreBind with the pod's `status.extendedResourceClaimStatus`.

Pods without claims or mapped extended resources cost one attribute test.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.dra import (
    EXACT_COUNT,
    RESERVED_FOR_MAX,
    Allocation,
    Claim,
    ClaimSpec,
    Consumer,
    DeviceRequest,
    DraState,
    RequestGroup,
)
from ai_scheduler.cache.dra_allocator import (
    AllocationError,
    Allocator,
    ClaimResult,
    InvalidPools,
    node_selector_matches,
)
from ai_scheduler.cache.dra_cel import SelectorCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework.interface import (
    ALL_ROWS,
    MAX_NODE_SCORE,
    NO_OPINION,
    FilterPlugin,
    Reasons,
    ScorePlugin,
    StaticResults,
    Window,
    default_normalize,
)

NAME = "DynamicResources"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"
FIRST_AVAILABLE_MAX = 8  # resourceapi.FirstAvailableDeviceRequestMaxSize
CANNOT_SCHEDULE_EXTENDED = "cannot schedule extended resource claim"
MAX_ENTRIES = 256

# Per-node verdicts: fits; no solution; no solution for a reason of its own (invalid pools, kube's
# ErrFailedAllocationOnNode: Unschedulable); the allocator erred (a CEL error, All on a pool being
# updated: kube's Error status, which ends the whole attempt as SchedulerError).
_OK, _FAIL, _ERROR, _FATAL = 0, 1, 2, 3


@dataclass(slots=True)
class PodClaims:
    """A pod's claims as PreFilter resolved them (kube's claimStore)."""

    claims: list[tuple[str, Claim]] = field(default_factory=list)  # (pod claim name, claim)
    to_allocate: list[Claim] = field(default_factory=list)
    allocated: list[Claim] = field(default_factory=list)
    extended: ClaimSpec | None = None  # the claim for DRA-backed extended resources, to make
    extended_found: Claim | None = None  # an extended-resource claim made for the pod already
    version: int = -1

    @property
    def signature(self) -> Hashable:
        specs = tuple((c.spec.requests, c.spec.constraints) for c in self.to_allocate)
        if self.extended is not None:
            specs += ((self.extended.requests, ()),)
        return specs


@dataclass(slots=True)
class ClaimWrite:
    """What PreBind writes for one claim: the claim as we hold it assumed (allocation and reservation)."""

    claim: Claim
    allocate: bool  # status.allocation to write (else only the reservation)
    original: Claim | None  # the informer's claim we assumed over


@dataclass(slots=True)
class DraPlan:
    """Reserve's outcome for a pod on a node, for the binder's PreBind."""

    pod_uid: str
    node: str
    writes: list[ClaimWrite] = field(default_factory=list)
    extended: tuple[ClaimSpec, ClaimResult, list[dict[str, str]]] | None = None
    created: tuple[str, str] | None = None  # the extended-resource claim PreBind made (namespace, name)

    def summary(self) -> dict[str, list[str]]:
        """For the decision log: claim -> the devices it was given (driver/pool/device)."""
        out: dict[str, list[str]] = {}
        for write in self.writes:
            allocation = write.claim.allocation
            if write.allocate and allocation is not None:
                key = f"{write.claim.namespace}/{write.claim.name}"
                out[key] = ["/".join(d.device_id) for d in allocation.devices]
        if self.extended is not None:
            out["<extended-resources>"] = ["/".join(d.device_id) for d in self.extended[1].devices]
        return out


@dataclass(slots=True)
class _Entry:
    codes: np.ndarray
    errors: dict[int, str]
    computed: np.ndarray
    scores: np.ndarray  # kube's Score: the firstAvailable sub-requests the node's allocation took
    static_version: int = -1
    dra_version: int = -1


def needs_dra(pod: PodRecord, dra: DraState) -> bool:
    """Whether DynamicResources has anything to do for the pod: claims, or mapped extended resources."""
    if pod.resource_claims:
        return True
    extended = dra.extended
    return bool(extended) and any(r in extended for r in pod.requests)


def extended_spec(pod: PodRecord, dra: DraState, missing: set[str]) -> tuple[ClaimSpec, list[dict[str, str]]]:
    """createRequestsAndMappings for the resources in `missing`, as kube makes them: per resource, one
    request per long-lived container asking (`container-<index>-request-<index of the resource among the
    container's sorted requests>`); an init container first reuses the requests of the long-lived
    containers after it and asks only for the rest, and only the largest such rest becomes a request
    (init containers run one at a time), which the other init containers' mappings then name."""
    groups: list[RequestGroup] = []
    mappings: list[dict[str, str]] = []
    containers = pod.info.containers
    for resource in sorted(missing):
        cls = dra.extended[resource]

        def request_for(
            index: int, keys: list[str], count: int, resource: str = resource, class_name: str = cls.name
        ) -> DeviceRequest:
            name = f"container-{index}-request-{keys.index(resource)}"
            return DeviceRequest(name, class_name, (), EXACT_COUNT, count)

        long_lived: dict[int, DeviceRequest] = {}
        long_mappings: list[dict[str, str]] = []
        for index, name, lasting, keys, amount_of in containers:
            amount = amount_of.get(resource, 0)
            if lasting and amount:
                long_lived[index] = request_for(index, keys, amount)
                long_mappings.append(
                    {"containerName": name, "resourceName": resource, "requestName": long_lived[index].name}
                )
        short_mappings: list[dict[str, str]] = []
        biggest: DeviceRequest | None = None
        short_names: set[str] = set()
        for index, name, lasting, keys, amount_of in containers:
            amount = amount_of.get(resource, 0)
            if lasting or not amount:
                continue
            total = 0
            for later in sorted(i for i in long_lived if i >= index):
                total += long_lived[later].count
                short_mappings.append(
                    {"containerName": name, "resourceName": resource, "requestName": long_lived[later].name}
                )
                if total >= amount:
                    break
            if total >= amount:
                continue
            request = request_for(index, keys, amount - total)
            short_names.add(request.name)
            short_mappings.append(
                {"containerName": name, "resourceName": resource, "requestName": request.name}
            )
            if biggest is None or biggest.count < request.count:
                biggest = request
        if biggest is not None:
            for mapping in short_mappings:
                if mapping["requestName"] in short_names:
                    mapping["requestName"] = biggest.name
            groups.append(RequestGroup(biggest.name, (biggest,)))
        groups.extend(RequestGroup(r.name, (r,)) for r in long_lived.values())
        mappings += long_mappings + short_mappings
    groups.sort(key=lambda g: g.name)
    return ClaimSpec(tuple(groups)), mappings


class DynamicResources(FilterPlugin):
    name = NAME

    def __init__(self) -> None:
        self.selectors = SelectorCache()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._current: tuple[PodRecord, int, PodClaims | str] | None = None
        # Set by Filter when the allocator erred on a node (kube's Error status): the cycle that began with
        # this plugin's PreFilter fails with it, as kube's does ("running ... filter plugin: ...").
        self.failure = ""

    # ------------------------------------------------------------------ PreEnqueue / PreFilter
    def resolve(self, pod: PodRecord, cache: SchedulerCache) -> PodClaims | str:
        """The pod's claims, or kube's reason it must wait (its claims as of now)."""
        dra = cache.dra
        current = self._current
        if current is not None and current[0] is pod and current[1] == dra.version:
            return current[2]
        result = self._resolve(pod, dra)
        self._current = (pod, dra.version, result)
        return result

    def _resolve(self, pod: PodRecord, dra: DraState) -> PodClaims | str:
        out = PodClaims(version=dra.version)
        ns = pod.namespace
        for ref in pod.resource_claims:
            must_check_owner = False
            if ref.claim_name:
                name = ref.claim_name
            elif ref.template_name:
                if ref.name not in pod.claim_statuses:
                    return f'pod "{ns}/{pod.name}": ResourceClaim not created yet'
                name = pod.claim_statuses[ref.name]
                if not name:
                    continue  # no claim needed (the controller said so)
                must_check_owner = True
            else:
                return (
                    f'pod "{ns}/{pod.name}", spec.resourceClaim "{ref.name}": '
                    "none of the supported fields are set"
                )
            claim = dra.claim(ns, name)
            if claim is None:
                return f'could not find ResourceClaim "{ns}/{name}"'
            if claim.deleting:
                return f'resourceclaim "{name}" is being deleted'
            owned = claim.owner is not None and claim.owner[0] == "Pod" and claim.owner[2] == pod.uid
            if must_check_owner and not owned:
                return f"ResourceClaim {ns}/{name} was not created for Pod {ns}/{pod.name} (Pod is not owner)"
            if claim.error:
                return f"resource claim {ns}/{name}: {claim.error}"
            out.claims.append((ref.name, claim))
            mine = claim.reserved_for_pod(pod.uid)
            if claim.allocation is not None and not mine and dra.in_flight(claim.key):
                # Allocated by our Reserve for another pod, not written yet: wait for the write (kube's
                # inFlightAllocations), whose watch event wakes this pod.
                return f"resource claim {ns}/{name} is in the process of being allocated"
            if claim.allocation is not None:
                if not claim.reserved_for_pod(pod.uid) and len(claim.reserved_for) >= RESERVED_FOR_MAX:
                    return IN_USE
                out.allocated.append(claim)
            else:
                for group in claim.spec.requests:
                    for request in group.alternatives:
                        if request.class_name not in dra.classes:
                            return f"request {request.name}: device class {request.class_name} does not exist"
                out.to_allocate.append(claim)
        if dra.extended and any(r in dra.extended for r in pod.requests):
            # findExtendedResourceClaim: by its annotation and the pod as controlling owner, not by the
            # pod's status (which may still name a claim deleted after a failed binding).
            out.extended_found = dra.extended_claim_of(ns, pod.name, pod.uid)
        return out

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        """NO_OPINION for a pod with nothing for DRA (its gang's identical members share one evaluation);
        a pod with claims or mapped extended resources takes a cycle of its own: devices a member takes
        change what the next can have, beyond the row it took."""
        return NO_OPINION if not needs_dra(pod, cache.dra) else ""

    def prefilter(self, pod: PodRecord, cache: SchedulerCache) -> str:
        self.failure = ""
        if not needs_dra(pod, cache.dra):
            return ""
        result = self.resolve(pod, cache)
        return result if isinstance(result, str) else ""

    # ------------------------------------------------------------------ Filter
    def _missing_extended(self, pod: PodRecord, cache: SchedulerCache, row: int) -> set[str]:
        """The pod's DRA-backed extended resources that the node does not list in allocatable."""
        extended = cache.dra.extended
        missing = set()
        for resource in pod.requests:
            if resource in extended:
                col = cache.column(resource)
                if col < 0 or cache.allocatable[row, col] <= 0:
                    missing.add(resource)
        return missing

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        if not needs_dra(pod, cache.dra):
            return []
        claims = self.resolve(pod, cache)
        if isinstance(claims, str):
            return [(claims, np.ones(candidates.shape[0], dtype=bool))]
        if claims.extended_found is not None:  # kube's filterExtendedResources: a claim exists already
            return [(CANNOT_SCHEDULE_EXTENDED, np.ones(candidates.shape[0], dtype=bool))]
        rows = np.arange(cache.rows)[window]
        reasons: Reasons = []
        alive = candidates.copy()
        if claims.allocated:
            unavailable = self._unavailable(claims, cache, rows, alive)
            if unavailable.any():
                reasons.append((NOT_AVAILABLE, unavailable))
                alive &= ~unavailable
        has_extended = bool(cache.dra.extended) and any(r in cache.dra.extended for r in pod.requests)
        if not claims.to_allocate and not has_extended:
            return reasons
        codes = self._codes(pod, cache, claims, rows, alive, has_extended)
        for code, mask in codes:
            reasons.append((code, mask))
        return reasons

    @staticmethod
    def _unavailable(
        claims: PodClaims, cache: SchedulerCache, rows: np.ndarray, alive: np.ndarray
    ) -> np.ndarray:
        """The rows that an allocated claim's node selector does not take. The selector kube writes for
        node-local devices (`metadata.name In [node]`) is read as a row at once; others node by node."""
        unavailable = np.zeros(rows.shape[0], dtype=bool)
        names = cache.row_names
        for claim in claims.allocated:
            assert claim.allocation is not None
            selector = claim.allocation.node_selector
            if selector is None:
                continue
            only = _single_node(selector)
            if only is not None:
                unavailable |= rows != cache.row_of(only)
                continue
            for i in np.flatnonzero(alive & ~unavailable).tolist():
                row = int(rows[i])
                node = cache.row_records[row]
                if not node_selector_matches(selector, names[row], node.labels if node is not None else {}):
                    unavailable[i] = True
        return unavailable

    def _codes(
        self, pod: PodRecord, cache: SchedulerCache, claims: PodClaims, rows: np.ndarray, alive: np.ndarray,
        has_extended: bool,
    ) -> list[tuple[str, np.ndarray]]:
        """The failing rows of the window by reason: "cannot allocate all claims" in one mask, and the
        allocator's errors (a CEL error, a pool being updated), rare, each with its own."""
        entry = self._entry(pod, cache, claims, has_extended)
        todo = np.flatnonzero(alive & ~entry.computed[rows])
        for i in todo.tolist():
            row = int(rows[i])
            code, error, score = self._verdict(pod, cache, claims, row, has_extended)
            entry.codes[row] = code
            entry.scores[row] = score
            entry.computed[row] = True
            if error:
                entry.errors[row] = error
            else:
                entry.errors.pop(row, None)
        local = entry.codes[rows]
        out: list[tuple[str, np.ndarray]] = []
        cannot = (local == _FAIL) & alive
        if cannot.any():
            out.append((CANNOT_ALLOCATE, cannot))
        fatal = (local == _FATAL) & alive
        if fatal.any() and not self.failure:
            first = int(rows[int(np.flatnonzero(fatal)[0])])
            self.failure = f'running "{NAME}" filter plugin: {entry.errors.get(first, CANNOT_ALLOCATE)}'
        erring = ((local == _ERROR) | (local == _FATAL)) & alive
        if erring.any():
            by_reason: dict[str, np.ndarray] = {}
            for i in np.flatnonzero(erring).tolist():
                reason = entry.errors.get(int(rows[i]), CANNOT_ALLOCATE)
                mask = by_reason.get(reason)
                if mask is None:
                    mask = by_reason[reason] = np.zeros(rows.shape[0], dtype=bool)
                mask[i] = True
            out.extend(by_reason.items())
        return out

    def _entry(self, pod: PodRecord, cache: SchedulerCache, claims: PodClaims, has_extended: bool) -> _Entry:
        key = (claims.signature, pod.namespace, has_extended and tuple(sorted(
            (r, v) for r, v in pod.requests.items() if r in cache.dra.extended)))
        entry = self._entries.get(key)
        rows = cache.rows
        if entry is None:
            entry = _Entry(np.zeros(rows, dtype=np.int8), {}, np.zeros(rows, dtype=bool),
                           np.zeros(rows, dtype=np.int64))
            self._entries[key] = entry
            if len(self._entries) > MAX_ENTRIES:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        if entry.codes.shape[0] < rows:
            grown = np.zeros(rows, dtype=bool)
            grown[: entry.computed.shape[0]] = entry.computed
            entry.computed = grown
            codes = np.zeros(rows, dtype=np.int8)
            codes[: entry.codes.shape[0]] = entry.codes
            entry.codes = codes
            scores = np.zeros(rows, dtype=np.int64)
            scores[: entry.scores.shape[0]] = entry.scores
            entry.scores = scores
        if entry.static_version != cache.static_version:
            entry.computed &= cache.row_static_version[:rows] <= entry.static_version
            entry.static_version = cache.static_version
        if entry.dra_version != cache.dra.version:
            changed = cache.dra.changed_since(entry.dra_version)
            if changed is None:
                entry.computed[:] = False
            else:
                for node in changed:
                    row = cache.row_of(node)
                    if row >= 0:
                        entry.computed[row] = False
            entry.dra_version = cache.dra.version
        return entry

    def _verdict(
        self, pod: PodRecord, cache: SchedulerCache, claims: PodClaims, row: int, has_extended: bool
    ) -> tuple[int, str, int]:
        """The node's verdict for the claims to allocate: (code, the allocator's error, the Score)."""
        dra = cache.dra
        name = cache.row_names[row]
        if name not in dra.node_slices and "" not in dra.node_slices:
            missing = self._missing_extended(pod, cache, row) if has_extended else set()
            if claims.to_allocate or missing:
                return _FAIL, "", 0
            return _OK, "", 0
        try:
            outcome = self._allocate(pod, cache, claims, row, has_extended, pack=False)
        except InvalidPools as exc:
            return _ERROR, str(exc), 0
        except AllocationError as exc:
            return _FATAL, str(exc), 0
        if outcome is None:
            return _FAIL, "", 0
        specs = [c.spec for c in claims.to_allocate]
        return _OK, "", first_available_score(specs, [r.devices for r in outcome[0][: len(specs)]])

    def _allocate(
        self, pod: PodRecord, cache: SchedulerCache, claims: PodClaims, row: int, has_extended: bool,
        *, pack: bool,
    ) -> tuple[list[ClaimResult], tuple[ClaimSpec, list[dict[str, str]]] | None] | None:
        node = cache.row_records[row]
        labels = node.labels if node is not None else {}
        batch = [(f"{c.namespace}/{c.name}", c.spec) for c in claims.to_allocate]
        extended = None
        if has_extended:
            missing = self._missing_extended(pod, cache, row)
            if missing:
                extended = extended_spec(pod, cache.dra, missing)
                batch.append((f"{pod.namespace}/<extended-resources>", extended[0]))
        if not batch:
            return [], None
        allocator = Allocator(cache.dra, self.selectors, pack=pack)
        results = allocator.allocate(cache.row_names[row], labels, batch)
        if results is None:
            return None
        return results, extended

    # ------------------------------------------------------------------ Reserve / Unreserve
    def pick(self, pod: PodRecord, cache: SchedulerCache, row: int) -> DraPlan | str | None:
        """The claims' allocations on `row` (with our packing) and reservations, for Reserve to assume
        (`assume`, the binder's reserve); None when the pod has nothing for DRA; the reason when it cannot
        be done."""
        dra = cache.dra
        if not needs_dra(pod, dra):
            return None
        claims = self.resolve(pod, cache)
        if isinstance(claims, str):
            return claims
        if claims.extended_found is not None:
            return CANNOT_SCHEDULE_EXTENDED
        has_extended = bool(dra.extended) and any(r in dra.extended for r in pod.requests)
        try:
            outcome = self._allocate(pod, cache, claims, row, has_extended, pack=True)
        except AllocationError as exc:
            return str(exc)
        if outcome is None:
            return CANNOT_ALLOCATE
        results, extended = outcome
        plan = DraPlan(pod.uid, cache.row_names[row])
        consumer = Consumer("pods", pod.name, pod.uid)
        for claim, result in zip(claims.to_allocate, results, strict=False):
            allocated = replace(
                claim,
                allocation=_allocation(result),
                reserved_for=(*claim.reserved_for, consumer),
            )
            plan.writes.append(ClaimWrite(allocated, True, dra.claims.get(claim.key)))
        for claim in claims.allocated:
            if claim.reserved_for_pod(pod.uid):
                continue
            reserved = replace(claim, reserved_for=(*claim.reserved_for, consumer))
            plan.writes.append(ClaimWrite(reserved, False, dra.claims.get(claim.key)))
        if extended is not None:
            plan.extended = (extended[0], results[len(claims.to_allocate)], extended[1])
        if not plan.writes and plan.extended is None:
            return None  # every claim reserved for the pod already, or extended resources from allocatable
        return plan

    @staticmethod
    def assume(plan: DraPlan, cache: SchedulerCache) -> None:
        for write in plan.writes:
            cache.dra.assume(write.claim)
        if plan.extended is not None:
            spec, result, _ = plan.extended
            key = (f"<extended-resources>/{plan.pod_uid}", plan.pod_uid)
            cache.dra.assume(Claim(key[0], key[1], spec=spec, allocation=_allocation(result)))

    @staticmethod
    def release(plan: DraPlan | None, cache: SchedulerCache) -> None:
        """Unreserve: the assumptions of a plan whose pod will not be bound there."""
        if plan is None:
            return
        for write in plan.writes:
            cache.dra.forget(write.claim.key, write.claim)
        if plan.extended is not None:
            cache.dra.forget((f"<extended-resources>/{plan.pod_uid}", plan.pod_uid))


def first_available_score(specs: list[ClaimSpec], devices: list[Any]) -> int:
    """kube's computeScore: per firstAvailable request, 8 minus the index of the sub-request allocated
    (FirstAvailableDeviceRequestMaxSize), so that nodes meeting earlier alternatives rank higher."""
    score = 0
    for spec, allocated in zip(specs, devices, strict=False):
        taken = {d.request for d in allocated if "/" in d.request}
        for group in spec.requests:
            if group.first_available:
                for i, alternative in enumerate(group.alternatives):
                    if alternative.name in taken:
                        score += FIRST_AVAILABLE_MAX - i
    return score


class DynamicResourcesScore(ScorePlugin):
    """DynamicResources' Score (kube's weight 2 in its default profile): the firstAvailable preference, from
    the verdicts the filter computed for the same pod in the same cycle."""

    name = NAME

    def __init__(self, weight: int) -> None:
        super().__init__(weight)
        self.filter: DynamicResources | None = None  # linked by the Framework to the profile's filter

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if not pod.resource_claims else ""  # `score` gives None without claims

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        plugin = self.filter
        if plugin is None or not pod.resource_claims:
            return None
        claims = plugin.resolve(pod, cache)
        if isinstance(claims, str):
            return None
        constant = first_available_score(
            [c.spec for c in claims.allocated],
            [c.allocation.devices if c.allocation is not None else () for c in claims.allocated],
        )
        if not any(g.first_available for c in claims.to_allocate for g in c.spec.requests):
            return None if not constant else np.full(rows.shape[0], MAX_NODE_SCORE, dtype=np.int64)
        has_extended = bool(cache.dra.extended) and any(r in cache.dra.extended for r in pod.requests)
        entry = plugin._entry(pod, cache, claims, has_extended)
        return default_normalize(entry.scores[rows] + constant, False)


def _single_node(selector: Any) -> str | None:
    """The node of a selector of one term that is only `metadata.name In [node]`, else None."""
    terms = selector.get("nodeSelectorTerms") or []
    if len(terms) != 1 or not isinstance(terms[0], dict) or terms[0].get("matchExpressions"):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1 or not isinstance(fields[0], dict):
        return None
    req = fields[0]
    values = req.get("values") or []
    if req.get("key") == "metadata.name" and req.get("operator") == "In" and len(values) == 1:
        return str(values[0])
    return None


def _allocation(result: ClaimResult) -> Allocation:
    devices = tuple(
        replace(d, share_id=str(uuid.uuid4())) if d.share_id else d for d in result.devices
    )
    raw: dict[str, Any] = {"devices": {"results": [_result_json(d) for d in devices]}}
    if result.config:
        raw["devices"]["config"] = result.config
    if result.node_selector is not None:
        raw["nodeSelector"] = result.node_selector
    return Allocation(devices, result.node_selector, raw)


def _result_json(device: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request": device.request, "driver": device.driver, "pool": device.pool, "device": device.device,
    }
    if device.admin_access:
        out["adminAccess"] = True
    if device.share_id:
        out["shareID"] = device.share_id
    if device.consumed:
        out["consumedCapacity"] = {name: _quantity_text(value) for name, value in device.consumed}
    return out


def _quantity_text(value: Any) -> str:
    text = format(value.normalize(), "f") if hasattr(value, "normalize") else str(value)
    return text
