"""The structured-parameters allocator: devices for a pod's claims on one node, as kube allocates them.

This follows kube's `dynamic-resource-allocation/structured` allocator (its "incubating"
variant, the one v1.37 runs with its beta features on): the pools that serve the node are
gathered (node-local slices, and slices for many nodes whose node selector or allNodes takes
this one; a pool whose slices are not all there at its newest generation is incomplete, one
with duplicate device names or dangling counters invalid), then every claim's requests are
met one device at a time by a depth-first search that backtracks: a device is a candidate
when it is not in use (by a claim held, ours included, or earlier in this search), its class
and request selectors match, its taints are tolerated, its shared counters and consumable
capacity have room, and the claim's constraints (matchAttribute, distinctAttribute) still
hold. `ExactCount` takes `count` devices, `All` every matching device of the node (and fails
on an incomplete pool), `firstAvailable` tries its sub-requests in order, `adminAccess` takes
devices whether in use or not without taking them from others. The first full solution
wins; at most 32 devices per claim.

Where kube takes the first fitting devices in pool/slice/device order, we order each
request's candidates by our GPU packing first (`packing_key`): the device with the least
memory that fits (best fit), then the device whose island (its NVLink/PCIe group, or its
parent GPU for MIG slices) has the fewest free devices, so that islands that are whole stay
whole and partly used ones fill up (least fragmentation, as cache/fragmentation.py does for
managed GPUs). Which nodes can satisfy a claim does not change with the order, only which
devices a node gives.

Errors that kube reports as errors (a CEL error, a missing class, `All` on a pool being
updated) raise `AllocationError` with kube's text; "no solution" returns None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from ai_scheduler.cache.dra import (
    ALL,
    AllocatedDevice,
    Capacity,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceRequest,
    DraState,
    Slice,
    qualified,
)
from ai_scheduler.cache.dra_cel import SelectorCache
from ai_scheduler.cache.selectors import requirement_matches

ALLOCATION_RESULTS_MAX = 32  # resourceapi.AllocationResultsMaxSize

DeviceId = tuple[str, str, str]


class AllocationError(Exception):
    """Allocation cannot proceed (kube: an error status), in kube's words."""


# ---------------------------------------------------------------------------------------------- node match
def node_selector_matches(selector: Mapping[str, Any] | None, name: str, labels: Mapping[str, str]) -> bool:
    """A core/v1 NodeSelector: any term, all of its requirements (an empty term matches nothing)."""
    if not selector:
        return False
    for term in selector.get("nodeSelectorTerms") or ():
        if not isinstance(term, dict):
            continue
        expressions = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not expressions and not fields:
            continue
        if all(requirement_matches(r, labels) for r in expressions) and all(
            requirement_matches(r, {"metadata.name": name}) for r in fields
        ):
            return True
    return False


def _node_matches(node_name: str, all_nodes: bool, selector: Mapping[str, Any] | None,
                  name: str, labels: Mapping[str, str]) -> bool:
    if node_name:
        return node_name == name
    if all_nodes:
        return True
    if selector is not None:
        return node_selector_matches(selector, name, labels)
    return False


# ---------------------------------------------------------------------------------------------- pools
@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: str = ""
    slices: list[Slice] = field(default_factory=list)  # device slices serving the node, by name
    other_slices: list[Slice] = field(default_factory=list)  # the pool's device slices not serving it
    counters: dict[str, dict[str, Decimal]] = field(default_factory=dict)

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.name}"


def gather_pools(state: DraState, node: str, labels: Mapping[str, str]) -> list[Pool]:
    """GatherPools: the pools serving `node`, sorted by driver and pool name."""
    by_pool: dict[tuple[str, str], list[Slice]] = {}
    candidates = list(state.node_slices.get(node, {}).values()) if node else []
    candidates += state.node_slices.get("", {}).values()
    for sl in candidates:
        if sl.error:
            continue
        if sl.node_name or sl.all_nodes or sl.node_selector is not None:
            relevant = _node_matches(sl.node_name, sl.all_nodes, sl.node_selector, node, labels)
        elif sl.per_device_node_selection:
            relevant = any(_node_matches(d.node_name, d.all_nodes, d.node_selector, node, labels)
                           for d in sl.devices)
        else:
            relevant = False
        if not relevant:
            continue
        key = (sl.driver, sl.pool)
        held = by_pool.get(key)
        if held is None or sl.pool_generation > held[0].pool_generation:
            by_pool[key] = [sl]
        elif sl.pool_generation == held[0].pool_generation:
            held.append(sl)
    pools = []
    for (driver, pool_name), slices in sorted(by_pool.items()):
        generation, count = slices[0].pool_generation, slices[0].slice_count
        everything = slices
        if len(slices) != count:
            all_of_pool = list(state.pool_slices.get((driver, pool_name), {}).values())
            if any(s.pool_generation > generation for s in all_of_pool):
                continue  # obsolete: a newer generation exists elsewhere
            everything = [s for s in all_of_pool if s.pool_generation == generation]
            if len(everything) != count:
                pools.append(Pool(driver, pool_name, incomplete=True))
                continue
        pools.append(_build_pool(driver, pool_name, slices, everything))
    return pools


def _build_pool(driver: str, name: str, serving: list[Slice], everything: list[Slice]) -> Pool:
    pool = Pool(driver, name)
    serving_names = {s.name for s in serving}
    counter_slices = [s for s in everything if s.shared_counters]
    pool.slices = sorted((s for s in serving if not s.shared_counters), key=lambda s: s.name)
    pool.other_slices = [s for s in everything if s.name not in serving_names and not s.shared_counters]
    seen: set[str] = set()
    for sl in pool.slices:
        for dev in sl.devices:
            if dev.name in seen:
                pool.invalid = f"duplicate device name {dev.name}"
                return pool
            seen.add(dev.name)
    for sl in counter_slices:
        for set_name, shared in sl.shared_counters.items():
            if set_name in pool.counters:
                pool.invalid = f"duplicate counter set name {set_name}"
                return pool
            pool.counters[set_name] = dict(shared)
    for sl in pool.slices + pool.other_slices:
        for dev in sl.devices:
            for set_name, counters in dev.consumes:
                if set_name not in pool.counters:
                    pool.invalid = f"counter set {set_name} not found"
                    return pool
                for counter, _ in counters:
                    if counter not in pool.counters[set_name]:
                        pool.invalid = f"counter {counter} not found in counter set {set_name}"
                        return pool
    return pool


# ---------------------------------------------------------------------------------------------- capacity
def _round_up(requested: Decimal, cap: Capacity) -> Decimal:
    """calculateConsumedCapacity for a request present in the device's capacity."""
    if cap.valid_range is not None and cap.valid_range[0] is not None:
        low, _high, step = cap.valid_range
        if low is None or requested < low:
            return low if low is not None else requested
        if step is None or step <= 0:
            return requested
        steps = ((requested - low) / step).to_integral_value(rounding=ROUND_CEILING)
        return low + steps * step
    if cap.valid_values:
        for value in cap.valid_values:
            if requested <= value:
                return value
    return requested


def _violates(value: Decimal, cap: Capacity) -> bool:
    if cap.default is not None and value == cap.default:
        return False
    if cap.valid_range is not None:
        low, high, step = cap.valid_range
        if high is not None and value > high:
            return True
        return step is not None and step > 0 and low is not None and (value - low) % step != 0
    if cap.valid_values:
        return value not in cap.valid_values
    return False


def consumed_capacity(request: DeviceRequest, device: Device) -> dict[tuple[str, str], Decimal] | None:
    """What the request would consume of each of the device's capacities; None when a requested capacity
    is not the device's or a value breaks the device's request policy."""
    wanted = {qualified(name, device.driver): value for name, value in request.capacity}
    if any(key not in device.capacity for key in wanted):
        return None
    consumed: dict[tuple[str, str], Decimal] = {}
    for key, cap in device.capacity.items():
        if key in wanted:
            value = _round_up(wanted[key], cap) if (cap.valid_range or cap.valid_values) else wanted[key]
        else:
            value = cap.default if cap.default is not None else cap.value
        if value < 0 or _violates(value, cap):
            return None
        consumed[key] = value
    return consumed


def _capacity_name(key: tuple[str, str], driver: str) -> str:
    return key[1] if key[0] == driver else f"{key[0]}/{key[1]}"


# ---------------------------------------------------------------------------------------------- packing
_ISLANDS = (("parentUUID", True), ("pcieRoot", False), ("cliqueId", True))


def island_of(device: Device) -> Any:
    """The group a device's neighbours share: its parent GPU (MIG), its NVLink clique, its PCIe root."""
    for ident, driver_domain in _ISLANDS:
        value = device.attributes.get((device.driver, ident)) if driver_domain else None
        if value is None:
            value = device.attributes.get(("resource.kubernetes.io", ident))
        if value is not None:
            return (ident, value)
    return None


def packing_key(device: Device, free_in_island: Mapping[Any, int], position: int) -> tuple[Any, ...]:
    memory = device.capacity.get((device.driver, "memory"))
    island = island_of(device)
    return (
        memory.value if memory is not None else Decimal(0),
        free_in_island.get(island, 0) if island is not None else 0,
        position,
    )


# ---------------------------------------------------------------------------------------------- search
@dataclass(slots=True)
class Candidate:
    device: Device
    pool: Pool
    slice: Slice
    key: tuple[int, int]  # (slice generation, device position): the CEL verdict cache's key


@dataclass(slots=True)
class ClaimResult:
    devices: list[AllocatedDevice]
    node_selector: dict[str, Any] | None
    config: list[dict[str, Any]]


@dataclass(slots=True)
class _Request:
    group: str  # the request's name (the parent of sub-requests)
    request: DeviceRequest
    cls: DeviceClass
    count: int
    all_devices: list[Candidate] | None = None


class Allocator:
    """Allocate for one node; built per (pod, node), cheap to build (the state is read, not copied)."""

    def __init__(self, state: DraState, selectors: SelectorCache, *, pack: bool = True) -> None:
        self.state = state
        self.selectors = selectors
        self.pack = pack

    def allocate(
        self,
        node: str,
        labels: Mapping[str, str],
        claims: Sequence[tuple[str, ClaimSpec]],
    ) -> list[ClaimResult] | None:
        """One ClaimResult per claim (`(name for messages, spec)`), or None when they cannot all be met on
        this node. Raises AllocationError where kube returns an error."""
        pools = gather_pools(self.state, node, labels)
        run = _Run(self, node, labels, pools)
        return run.allocate(claims)


class _Run:
    def __init__(self, owner: Allocator, node: str, labels: Mapping[str, str], pools: list[Pool]) -> None:
        self.state = owner.state
        self.selectors = owner.selectors
        self.pack = owner.pack
        self.node = node
        self.labels = labels
        self.pools = pools
        self.allocating: dict[DeviceId, set[int]] = {}
        self.allocating_capacity: dict[DeviceId, dict[tuple[str, str], Decimal]] = {}
        self.consumed_counters: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
        self.available_counters: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
        self.match_cache: dict[tuple[DeviceId, int, int, int], bool] = {}
        self.candidates: list[Candidate] = [
            Candidate(dev, pool, sl, (sl.generation, i))
            for pool in pools
            if not pool.incomplete and not pool.invalid
            for sl in pool.slices
            for i, dev in enumerate(sl.devices)
        ]
        self.results: list[list[AllocatedDevice]] = []
        self.chosen: list[list[Candidate]] = []

    # -------------------------------------------------------------- set-up
    def _class(self, claim_name: str, request: DeviceRequest) -> DeviceClass:
        cls = self.state.classes.get(request.class_name)
        if cls is None:
            raise AllocationError(
                f"claim {claim_name}, request {request.name}: could not retrieve device class "
                f"{request.class_name}: deviceclass.resource.k8s.io \"{request.class_name}\" not found"
            )
        if cls.error:
            raise AllocationError(f"class {cls.name}: {cls.error}")
        return cls

    def allocate(self, claims: Sequence[tuple[str, ClaimSpec]]) -> list[ClaimResult] | None:
        self.claims = claims
        self.requests: list[list[list[_Request]]] = []  # claim -> group -> alternatives
        self.constraints: list[list[_Constraint]] = []
        for ci, (claim_name, spec) in enumerate(claims):
            groups: list[list[_Request]] = []
            minimum = 0
            for group in spec.requests:
                alternatives = []
                for request in group.alternatives:
                    cls = self._class(claim_name, request)
                    req = _Request(group.name, request, cls, request.count)
                    if request.mode == ALL:
                        req.all_devices = self._all_devices(ci, claim_name, req)
                        req.count = len(req.all_devices)
                    alternatives.append(req)
                fewest = min(r.count for r in alternatives)
                if fewest > ALLOCATION_RESULTS_MAX - minimum:
                    raise AllocationError(
                        f"claim {claim_name}, request {group.name}: adding {fewest} devices exceeds the "
                        f"claim limit of {ALLOCATION_RESULTS_MAX}, with {minimum} already accounted for"
                    )
                minimum += fewest
                groups.append(alternatives)
            self.requests.append(groups)
            constraints = []
            for i, c in enumerate(spec.constraints):
                if c.match_attribute:
                    constraints.append(_Constraint(set(c.requests), c.match_attribute, distinct=False))
                elif c.distinct_attribute:
                    constraints.append(_Constraint(set(c.requests), c.distinct_attribute, distinct=True))
                else:
                    raise AllocationError(
                        f"claim {claim_name}, constraint #{i}: "
                        "empty constraint (unsupported constraint type?)"
                    )
            self.constraints.append(constraints)
            self.results.append([])
            self.chosen.append([])
        if not self._claim(0):
            if any(p.invalid for p in self.pools):
                raise InvalidPools()
            return None
        out = []
        for ci, (_name, spec) in enumerate(claims):
            out.append(ClaimResult(self.results[ci], self._node_selector(self.chosen[ci]),
                                   self._config(ci, spec)))
        return out

    def _all_devices(self, ci: int, claim_name: str, req: _Request) -> list[Candidate]:
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"claim {claim_name}, request {req.request.name}: asks for all devices, but resource "
                    f"pool {pool.pool_id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {claim_name}, request {req.request.name}: asks for all devices, but resource "
                    f"pool {pool.pool_id} is currently invalid"
                )
        devices = []
        for cand in self.candidates:
            if not self._selectable(ci, req, cand):
                continue
            sized = req.request.capacity or cand.device.capacity
            if sized and consumed_capacity(req.request, cand.device) is None:
                continue
            devices.append(cand)
        return devices

    # -------------------------------------------------------------- matching
    def _selectable(self, ci: int, req: _Request, cand: Candidate) -> bool:
        dev = cand.device
        cache_key = (dev.device_id, ci, id(req), 0)
        hit = self.match_cache.get(cache_key)
        if hit is not None:
            return hit
        ok = self._selectors_match(ci, req.cls.selectors, dev, cand, req.cls.name) and self._selectors_match(
            ci, req.request.selectors, dev, cand, ""
        )
        if ok and cand.slice.per_device_node_selection:
            ok = _node_matches(dev.node_name, dev.all_nodes, dev.node_selector, self.node, self.labels)
        self.match_cache[cache_key] = ok
        return ok

    def _selectors_match(self, ci: int, expressions: tuple[str, ...], dev: Device, cand: Candidate,
                         class_name: str) -> bool:
        for i, expression in enumerate(expressions):
            verdict = self.selectors.matches(expression, dev, cand.key)
            if verdict is True:
                continue
            if verdict is False:
                return False
            where = f"class {class_name}" if class_name else f"claim {self.claims[ci][0]}"
            device_id = "/".join(dev.device_id)
            if "compile error" in str(verdict):
                raise AllocationError(f"{where}: selector #{i}: {verdict}")
            raise AllocationError(f"{where}: selector #{i} on device {device_id}: {verdict}")
        return True

    def _in_use(self, device_id: DeviceId) -> bool:
        return device_id in self.state.allocated or bool(self.allocating.get(device_id))

    def _capacity_in_use(self, device_id: DeviceId) -> bool:
        return device_id in self.state.shared or device_id in self.allocating_capacity

    def _capacity_fits(self, req: _Request, dev: Device) -> dict[tuple[str, str], Decimal] | None:
        consumed = consumed_capacity(req.request, dev)
        if consumed is None:
            return None
        held = self.state.shared.get(dev.device_id, {})
        taking = self.allocating_capacity.get(dev.device_id, {})
        for key, cap in dev.capacity.items():
            name = _capacity_name(key, dev.driver)
            total = consumed[key] + held.get(name, held.get(f"{key[0]}/{key[1]}", Decimal(0)))
            total += taking.get(key, Decimal(0))
            if total > cap.value:
                return None
        return consumed

    def _counters(self, pool: Pool) -> dict[str, dict[str, Decimal]]:
        key = (pool.driver, pool.name)
        available = self.available_counters.get(key)
        if available is None:
            available = {name: dict(counters) for name, counters in pool.counters.items()}
            for sl in pool.slices + pool.other_slices:
                for dev in sl.devices:
                    device_id = dev.device_id
                    if device_id not in self.state.allocated and device_id not in self.state.shared:
                        continue
                    for set_name, counters in dev.consumes:
                        for counter, value in counters:
                            if counter in available.get(set_name, {}):
                                available[set_name][counter] -= value
            self.available_counters[key] = available
        return available

    def _take_counters(self, cand: Candidate, sign: int) -> bool:
        pool = cand.pool
        consumed = self.consumed_counters.setdefault((pool.driver, pool.name), {})
        for set_name, counters in cand.device.consumes:
            target = consumed.setdefault(set_name, {})
            for counter, value in counters:
                target[counter] = target.get(counter, Decimal(0)) + sign * value
        if sign < 0:
            return True
        available = self._counters(pool)
        for set_name, limits in available.items():
            used = consumed.get(set_name, {})
            for counter, value in limits.items():
                if value < used.get(counter, Decimal(0)):
                    self._take_counters(cand, -1)
                    return False
        return True

    # -------------------------------------------------------------- the search
    def _claim(self, ci: int) -> bool:
        if ci >= len(self.claims):
            return True
        return self._group(ci, 0)

    def _group(self, ci: int, gi: int) -> bool:
        groups = self.requests[ci]
        if gi >= len(groups):
            return self._claim(ci + 1)
        for req in groups[gi]:
            if req.request.mode == ALL and not req.all_devices:
                continue
            if req.count > ALLOCATION_RESULTS_MAX - len(self.results[ci]):
                continue
            if self._device(ci, gi, req, 0, 0, self._ordered(ci, req) if req.all_devices is None else []):
                return True
        return False

    def _ordered(self, ci: int, req: _Request) -> list[Candidate]:
        cands = [c for c in self.candidates if self._selectable(ci, req, c)]
        if not self.pack or len(cands) < 2 or req.request.admin_access:
            return cands
        free: dict[Any, int] = {}
        for c in cands:
            island = island_of(c.device)
            if island is not None and not self._in_use(c.device.device_id):
                free[island] = free.get(island, 0) + 1
        order = {id(c): i for i, c in enumerate(cands)}
        return sorted(cands, key=lambda c: packing_key(c.device, free, order[id(c)]))

    def _device(
        self, ci: int, gi: int, req: _Request, index: int, start: int, ordered: list[Candidate]
    ) -> bool:
        """The `index`th device of `req`, from `ordered[start:]` (combinations, not permutations)."""
        if index >= req.count:
            return self._group(ci, gi + 1)
        if req.all_devices is not None:
            cand = req.all_devices[index]
            undo = self._take(ci, req, cand)
            if undo is None:
                return False
            if self._device(ci, gi, req, index + 1, 0, ordered):
                return True
            undo()
            return False
        for position in range(start, len(ordered)):
            cand = ordered[position]
            undo = self._take(ci, req, cand)
            if undo is None:
                continue
            if self._device(ci, gi, req, index + 1, position + 1, ordered):
                return True
            undo()
        return False

    def _take(self, ci: int, req: _Request, cand: Candidate) -> Any:
        """allocateDevice: the candidate taken for `req` (an undo function), or None when it cannot be."""
        dev = cand.device
        device_id = dev.device_id
        request = req.request
        multi = dev.allow_multiple
        if request.admin_access:
            if not multi and ci in self.allocating.get(device_id, ()):
                return None
        elif self._in_use(device_id):
            return None
        if not self._selectable(ci, req, cand):
            return None
        skip_counters = multi and self._capacity_in_use(device_id)
        counters_taken = False
        if dev.consumes and not skip_counters:
            if not self._take_counters(cand, 1):
                return None
            counters_taken = True
        for taint in dev.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not any(
                t.tolerates(taint.key, taint.value, taint.effect) for t in request.tolerations
            ):
                if counters_taken:
                    self._take_counters(cand, -1)
                return None
        base, _, sub = request.name.partition("/")
        added: list[_Constraint] = []
        for constraint in self.constraints[ci]:
            if not constraint.add(base, sub, dev):
                for c in reversed(added):
                    c.remove(base, sub)
                if counters_taken:
                    self._take_counters(cand, -1)
                return None
            added.append(constraint)
        consumed: dict[tuple[str, str], Decimal] | None = None
        if dev.capacity or request.capacity:
            consumed = self._capacity_fits(req, dev)
            if consumed is None:
                for c in reversed(added):
                    c.remove(base, sub)
                if counters_taken:
                    self._take_counters(cand, -1)
                return None
        marked = False
        if not multi:
            self.allocating.setdefault(device_id, set()).add(ci)
            marked = True
        share_id = ""
        consumed_items: tuple[tuple[str, Decimal], ...] = ()
        if multi and consumed is not None:
            share_id = "pending"
            holder = self.allocating_capacity.setdefault(device_id, {})
            for key, value in consumed.items():
                holder[key] = holder.get(key, Decimal(0)) + value
            consumed_items = tuple(sorted((_capacity_name(k, dev.driver), v) for k, v in consumed.items()))
        self.results[ci].append(AllocatedDevice(
            request.name, dev.driver, dev.pool, dev.name, request.admin_access, share_id, consumed_items
        ))
        self.chosen[ci].append(cand)

        def undo() -> None:
            self.results[ci].pop()
            self.chosen[ci].pop()
            if multi and consumed is not None:
                holder = self.allocating_capacity[device_id]
                for key, value in consumed.items():
                    holder[key] -= value
                if not any(holder.values()):
                    del self.allocating_capacity[device_id]
            if marked:
                self.allocating[device_id].discard(ci)
            for c in reversed(added):
                c.remove(base, sub)
            if counters_taken:
                self._take_counters(cand, -1)

        return undo

    # -------------------------------------------------------------- results
    def _node_selector(self, chosen: list[Candidate]) -> dict[str, Any] | None:
        """createNodeSelector: the allocation's node restriction."""
        expressions: list[Any] = []
        fields: list[Any] = []
        for cand in chosen:
            if cand.slice.per_device_node_selection:
                node_name, selector = cand.device.node_name, cand.device.node_selector
            else:
                node_name, selector = cand.slice.node_name, cand.slice.node_selector
            if node_name or cand.device.binds_to_node:
                return {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.node]}
                ]}]}
            if selector is not None:
                terms = selector.get("nodeSelectorTerms") or []
                if len(terms) > 1:
                    raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
                if terms:
                    for req in terms[0].get("matchFields") or ():
                        if req not in fields:
                            fields.append(req)
                    for req in terms[0].get("matchExpressions") or ():
                        if req not in expressions:
                            expressions.append(req)
        if not expressions and not fields:
            return None
        term: dict[str, Any] = {}
        if expressions:
            term["matchExpressions"] = expressions
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}

    def _config(self, ci: int, spec: ClaimSpec) -> list[dict[str, Any]]:
        """The class configs (FromClass, once per class) then the claim's (FromClaim) for what was chosen."""
        out: list[dict[str, Any]] = []
        chosen_requests = [r.request for r in self.results[ci]]
        names_by_class: dict[str, list[str]] = {}
        for name in dict.fromkeys(chosen_requests):
            req = self._request_named(ci, name)
            if req is not None:
                names_by_class.setdefault(req.cls.name, []).append(name)
        for class_name, names in names_by_class.items():
            for config in self.state.classes[class_name].config:
                out.append({"source": "FromClass", "requests": list(names), **dict(config)})
        for config in spec.config:
            requests = config.get("requests") or []
            if not requests or any(r in requests or r.partition("/")[0] in requests for r in chosen_requests):
                out.append({"source": "FromClaim", **dict(config)})
        return out

    def _request_named(self, ci: int, name: str) -> _Request | None:
        for group in self.requests[ci]:
            for req in group:
                if req.request.name == name:
                    return req
        return None


class InvalidPools(AllocationError):
    """No solution, and some pool serving the node was invalid (kube's ErrFailedAllocationOnNode: not an
    error of the pod's, the node is only Unschedulable)."""

    def __init__(self) -> None:
        super().__init__("invalid resource pools were encountered")


class _Constraint:
    """matchAttribute (every device the same value) or distinctAttribute (all different)."""

    def __init__(self, requests: set[str], attribute: str, *, distinct: bool) -> None:
        self.requests = requests
        self.domain, _, self.ident = attribute.rpartition("/")
        self.distinct = distinct
        self.values: list[Any] = []

    def _applies(self, base: str, sub: str) -> bool:
        if not self.requests:
            return True
        return base in self.requests or (bool(sub) and f"{base}/{sub}" in self.requests)

    def _lookup(self, dev: Device) -> Any:
        value = dev.attributes.get((self.domain, self.ident))
        if isinstance(value, tuple):
            return None  # list attributes match nothing here (kube's stable/incubating constraints)
        return value

    def add(self, base: str, sub: str, dev: Device) -> bool:
        if not self._applies(base, sub):
            return True
        value = self._lookup(dev)
        if value is None:
            return False
        if self.distinct:
            if any(type(v) is type(value) and v == value for v in self.values):
                return False
        elif self.values and not (type(self.values[0]) is type(value) and self.values[0] == value):
            return False
        self.values.append(value)
        return True

    def remove(self, base: str, sub: str) -> None:
        if self._applies(base, sub):
            self.values.pop()
