"""Dynamic Resource Allocation objects (resource.k8s.io/v1), as kube's DynamicResources plugin reads them.

kube-scheduler's DynamicResources plugin works from listers of four kinds:
ResourceClaims (what a pod asks for, and what was allocated for whom),
ResourceClaimTemplates (from which kube-controller-manager's resource-claim
controller makes a pod's claims), ResourceSlices (the devices drivers publish,
per node or for many nodes) and DeviceClasses (named device selections, some
of them mapped to an extended resource by KEP-5004). `DraState` holds the four
here, parsed once from the objects' JSON into small slotted records, filled by
the daemon's informers through two entry points:

- `apply(kind, event, obj)`: one watch event ("ADDED", "MODIFIED", "DELETED");
- `replace(kind, items)`: a fresh list.

Nothing malformed raises out of them: an object whose fields do not parse is
kept with `error` set (a claim with an error makes its pods Unschedulable with
that reason; a slice with an error offers no devices and says why when asked),
so that a garbled object is reported, never lost and never a crash of the
informer.

Our own writes are held as assumptions, as kube's in-flight allocations are: an
allocation chosen at Reserve is kept in `assumed` (claim key -> the claim with
its allocation and reservation) until PreBind has written it (the answer then
held as the informer's claim, so that older watch events are ignored) or
Unreserve gives it up: `forget` drops it either way. Devices in use are computed from the
informer's claims plus these assumptions (`allocated_devices`), so that the
next pod in the same cycle cannot take a device a previous one was given.

`version` is bumped on every change of any object (memoisation and the queue's
wake-up); `pods_affected(kind, obj)` says which waiting pods an event may help
(see its docstring).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ai_scheduler.cache.records import newer_version
from ai_scheduler.quantity import QuantityError, parse_quantity

RESOURCE_CLAIM = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE = "ResourceClaimTemplate"
RESOURCE_SLICE = "ResourceSlice"
DEVICE_CLASS = "DeviceClass"
KINDS = (RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, RESOURCE_SLICE, DEVICE_CLASS)

EXACT_COUNT = "ExactCount"
ALL = "All"
# resourceapi.ResourceClaimReservedForMaxSize: at most this many consumers in status.reservedFor.
RESERVED_FOR_MAX = 256
# The annotation kube-scheduler puts on the claim it makes for DRA-backed extended resources.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
# A DeviceClass made implicitly for an extended resource "deviceclass.resource.kubernetes.io/<class>".
IMPLICIT_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"

_generations = itertools.count(1)


class DraError(ValueError):
    """A field of a DRA object that does not parse; the message names the field."""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _quantity(value: Any, where: str) -> Decimal:
    try:
        return parse_quantity(value)
    except (QuantityError, TypeError) as exc:
        raise DraError(f"{where}: invalid quantity {value!r}") from exc


def _quantities(value: Any, where: str) -> dict[str, Decimal]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DraError(f"{where}: must be a map")
    return {str(k): _quantity(v, f"{where}[{k}]") for k, v in value.items()}


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DraError(f"{where}: must be a list")
    return value


def _dict(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DraError(f"{where}: must be an object")
    return value


def _selectors(value: Any, where: str) -> tuple[str, ...]:
    """A list of DeviceSelectors: their CEL expressions (the only kind of selector the API has)."""
    expressions = []
    for i, item in enumerate(_list(value, where)):
        cel = _dict(_dict(item, f"{where}[{i}]").get("cel"), f"{where}[{i}].cel")
        expression = cel.get("expression")
        if not isinstance(expression, str) or not expression:
            raise DraError(f"{where}[{i}].cel.expression: required")
        expressions.append(expression)
    return tuple(expressions)


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def qualified(name: str, driver: str) -> tuple[str, str]:
    """A QualifiedName as (domain, id): a name without a domain belongs to the driver's domain."""
    domain, slash, ident = name.rpartition("/")
    return (domain, ident) if slash else (driver, name)


# ---------------------------------------------------------------------------------------------- classes
@dataclass(slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    extended_resource: str = ""  # spec.extendedResourceName (KEP-5004)
    config: tuple[Mapping[str, Any], ...] = ()  # spec.config, copied into allocations as FromClass
    creation: str = ""
    error: str = ""
    generation: int = 0

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> DeviceClass:
        meta = _meta(obj)
        dc = cls(_str(meta.get("name")), creation=_str(meta.get("creationTimestamp")))
        dc.generation = next(_generations)
        try:
            spec = _dict(obj.get("spec"), "spec")
            dc.selectors = _selectors(spec.get("selectors"), "spec.selectors")
            dc.extended_resource = _str(spec.get("extendedResourceName"))
            dc.config = tuple(c for c in _list(spec.get("config"), "spec.config") if isinstance(c, dict))
        except DraError as exc:
            dc.error = str(exc)
        return dc


# ---------------------------------------------------------------------------------------------- claims
@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == key
        return self.key == key and self.value == value


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """An ExactDeviceRequest, or one of a request's firstAvailable sub-requests (`name` is then
    "<request>/<sub-request>", as allocation results name them)."""

    name: str
    class_name: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity: tuple[tuple[str, Decimal], ...] = ()  # capacity.requests


@dataclass(frozen=True, slots=True)
class RequestGroup:
    """One entry of spec.devices.requests: either exactly one request, or firstAvailable's list."""

    name: str
    alternatives: tuple[DeviceRequest, ...]
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...] = ()  # () = every request
    match_attribute: str = ""
    distinct_attribute: str = ""


def _tolerations(value: Any, where: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_list(value, where)):
        t = _dict(t, f"{where}[{i}]")
        out.append(Toleration(
            _str(t.get("key")), _str(t.get("operator")) or "Equal",
            _str(t.get("value")), _str(t.get("effect")),
        ))
    return tuple(out)


def _request(name: str, body: Mapping[str, Any], where: str, admin_allowed: bool) -> DeviceRequest:
    class_name = body.get("deviceClassName")
    if not isinstance(class_name, str) or not class_name:
        raise DraError(f"{where}.deviceClassName: required")
    mode = _str(body.get("allocationMode")) or EXACT_COUNT
    if mode not in (EXACT_COUNT, ALL):
        raise DraError(f"{where}.allocationMode: unsupported value {mode!r}")
    count = body.get("count")
    if mode == EXACT_COUNT:
        if count is None:
            count = 1
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise DraError(f"{where}.count: must be greater than zero")
    else:
        count = 0
    capacity = _quantities(_dict(body.get("capacity"), f"{where}.capacity").get("requests"),
                           f"{where}.capacity.requests")
    return DeviceRequest(
        name,
        class_name,
        _selectors(body.get("selectors"), f"{where}.selectors"),
        mode,
        int(count),
        admin_allowed and body.get("adminAccess") is True,
        _tolerations(body.get("tolerations"), f"{where}.tolerations"),
        tuple(sorted(capacity.items())),
    )


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[RequestGroup, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def parse(cls, spec: Any, where: str = "spec") -> ClaimSpec:
        devices = _dict(_dict(spec, where).get("devices"), f"{where}.devices")
        groups = []
        seen: set[str] = set()
        for i, req in enumerate(_list(devices.get("requests"), f"{where}.devices.requests")):
            at = f"{where}.devices.requests[{i}]"
            req = _dict(req, at)
            name = req.get("name")
            if not isinstance(name, str) or not name:
                raise DraError(f"{at}.name: required")
            if name in seen:
                raise DraError(f"{at}.name: duplicate value {name!r}")
            seen.add(name)
            if req.get("exactly") is not None and req.get("firstAvailable") is not None:
                raise DraError(f"{at}: exactly one of exactly or firstAvailable is required")
            if req.get("firstAvailable") is not None:
                subs = []
                for j, sub in enumerate(_list(req.get("firstAvailable"), f"{at}.firstAvailable")):
                    sub = _dict(sub, f"{at}.firstAvailable[{j}]")
                    sub_name = _str(sub.get("name"))
                    if not sub_name:
                        raise DraError(f"{at}.firstAvailable[{j}].name: required")
                    subs.append(_request(f"{name}/{sub_name}", sub, f"{at}.firstAvailable[{j}]", False))
                if not subs:
                    raise DraError(f"{at}.firstAvailable: must not be empty")
                groups.append(RequestGroup(name, tuple(subs), True))
            else:
                exactly = req.get("exactly")
                if exactly is None:
                    raise DraError(f"{at}: exactly one of exactly or firstAvailable is required")
                groups.append(RequestGroup(name, (_request(name, _dict(exactly, f"{at}.exactly"),
                                                            f"{at}.exactly", True),)))
        constraints = []
        for i, c in enumerate(_list(devices.get("constraints"), f"{where}.devices.constraints")):
            at = f"{where}.devices.constraints[{i}]"
            c = _dict(c, at)
            constraints.append(Constraint(
                tuple(_str(r) for r in _list(c.get("requests"), f"{at}.requests")),
                _str(c.get("matchAttribute")),
                _str(c.get("distinctAttribute")),
            ))
        config = tuple(c for c in _list(devices.get("config"), f"{where}.devices.config")
                       if isinstance(c, dict))
        return cls(tuple(groups), tuple(constraints), config)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str = ""
    consumed: tuple[tuple[str, Decimal], ...] = ()  # consumedCapacity

    @property
    def device_id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class Allocation:
    devices: tuple[AllocatedDevice, ...] = ()
    node_selector: Mapping[str, Any] | None = None  # a core/v1 NodeSelector; None: any node
    raw: Mapping[str, Any] = field(default_factory=dict)  # status.allocation as written

    @classmethod
    def parse(cls, value: Any, where: str = "status.allocation") -> Allocation:
        alloc = _dict(value, where)
        devices = []
        for i, r in enumerate(_list(_dict(alloc.get("devices"), f"{where}.devices").get("results"),
                                    f"{where}.devices.results")):
            r = _dict(r, f"{where}.devices.results[{i}]")
            at = f"{where}.devices.results[{i}]"
            consumed = _quantities(r.get("consumedCapacity"), f"{at}.consumedCapacity")
            devices.append(AllocatedDevice(
                _str(r.get("request")), _str(r.get("driver")), _str(r.get("pool")), _str(r.get("device")),
                r.get("adminAccess") is True, _str(r.get("shareID")), tuple(sorted(consumed.items())),
            ))
        selector = alloc.get("nodeSelector")
        return cls(tuple(devices), selector if isinstance(selector, dict) else None, alloc)


@dataclass(frozen=True, slots=True)
class Consumer:
    """An entry of status.reservedFor."""

    resource: str
    name: str
    uid: str
    api_group: str = ""


@dataclass(slots=True)
class Claim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    owner: tuple[str, str, str] | None = None  # the controlling owner: (kind, name, uid)
    deleting: bool = False
    spec: ClaimSpec = field(default_factory=ClaimSpec)
    allocation: Allocation | None = None
    reserved_for: tuple[Consumer, ...] = ()
    error: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)
    generation: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def reserved_for_pod(self, uid: str) -> bool:
        return any(c.uid == uid and c.resource == "pods" and not c.api_group for c in self.reserved_for)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Claim:
        meta = _meta(obj)
        claim = cls(_str(meta.get("namespace")), _str(meta.get("name")), raw=obj)
        claim.generation = next(_generations)
        claim.uid = _str(meta.get("uid"))
        claim.resource_version = _str(meta.get("resourceVersion"))
        claim.deleting = bool(meta.get("deletionTimestamp"))
        try:
            annotations = _dict(meta.get("annotations"), "metadata.annotations")
            claim.annotations = {str(k): _str(v) for k, v in annotations.items()}
            for ref in _list(meta.get("ownerReferences"), "metadata.ownerReferences"):
                if isinstance(ref, dict) and ref.get("controller") is True:
                    claim.owner = (_str(ref.get("kind")), _str(ref.get("name")), _str(ref.get("uid")))
            claim.spec = ClaimSpec.parse(obj.get("spec"))
            status = _dict(obj.get("status"), "status")
            if status.get("allocation") is not None:
                claim.allocation = Allocation.parse(status["allocation"])
            consumers = []
            for i, ref in enumerate(_list(status.get("reservedFor"), "status.reservedFor")):
                ref = _dict(ref, f"status.reservedFor[{i}]")
                consumers.append(Consumer(
                    _str(ref.get("resource")), _str(ref.get("name")),
                    _str(ref.get("uid")), _str(ref.get("apiGroup")),
                ))
            claim.reserved_for = tuple(consumers)
        except DraError as exc:
            claim.error = str(exc)
        return claim


@dataclass(slots=True)
class ClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec = field(default_factory=ClaimSpec)
    error: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> ClaimTemplate:
        meta = _meta(obj)
        template = cls(_str(meta.get("namespace")), _str(meta.get("name")), raw=obj)
        try:
            template.spec = ClaimSpec.parse(_dict(obj.get("spec"), "spec").get("spec"), "spec.spec")
        except DraError as exc:
            template.error = str(exc)
        return template


# ---------------------------------------------------------------------------------------------- slices
@dataclass(frozen=True, slots=True)
class Version:
    """A semantic version (a `version` attribute), ordered as semver orders them."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        core, _, _build = text.partition("+")
        core, dash, pre = core.partition("-")
        parts = core.split(".")
        if len(parts) != 3 or not all(p.isdigit() and (p == "0" or not p.startswith("0")) for p in parts):
            raise DraError(f"invalid semantic version {text!r}")
        pre_parts: tuple[int | str, ...] = ()
        if dash:
            pre_parts = tuple(int(p) if p.isdigit() else p for p in pre.split("."))
        return cls(int(parts[0]), int(parts[1]), int(parts[2]), pre_parts, text)

    def key(self) -> tuple[Any, ...]:
        # A version without a pre-release sorts after every pre-release of it; numbers before names.
        pre = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, not self.pre, pre)


AttributeValue = bool | int | str | Version | tuple[Any, ...]


_ATTRIBUTE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")


def _attribute(value: Any, where: str) -> AttributeValue:
    attr = _dict(value, where)
    present = [k for k in _ATTRIBUTE_KINDS if k in attr]
    if len(present) != 1:
        raise DraError(f"{where}: exactly one value is required")
    kind = present[0]
    raw = attr[kind]
    if kind == "int":
        if not isinstance(raw, int) or isinstance(raw, bool):
            raise DraError(f"{where}.int: must be an integer")
        return raw
    if kind == "bool":
        if not isinstance(raw, bool):
            raise DraError(f"{where}.bool: must be a boolean")
        return raw
    if kind == "string":
        return _str(raw)
    if kind == "version":
        return Version.parse(_str(raw))
    items = _list(raw, f"{where}.{kind}")
    if kind == "versions":
        return tuple(Version.parse(_str(v)) for v in items)
    return tuple(items)


@dataclass(frozen=True, slots=True)
class Capacity:
    value: Decimal
    default: Decimal | None = None  # requestPolicy.default
    valid_values: tuple[Decimal, ...] = ()
    valid_range: tuple[Decimal | None, Decimal | None, Decimal | None] | None = None  # (min, max, step)


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str


@dataclass(slots=True)
class Device:
    """One device of a slice. `attributes` and `capacity` are keyed by (domain, id)."""

    driver: str
    pool: str
    name: str
    slice_name: str = ""
    attributes: dict[tuple[str, str], AttributeValue] = field(default_factory=dict)
    capacity: dict[tuple[str, str], Capacity] = field(default_factory=dict)
    consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = ()  # (counterSet, counters)
    allow_multiple: bool = False  # allowMultipleAllocations: consumable capacity
    node_name: str = ""  # per-device node selection (perDeviceNodeSelection)
    node_selector: Mapping[str, Any] | None = None
    all_nodes: bool = False
    taints: tuple[DeviceTaint, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False

    @property
    def device_id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


def _device(item: Any, driver: str, pool: str, slice_name: str, where: str) -> Device:
    body = _dict(item, where)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise DraError(f"{where}.name: required")
    dev = Device(driver, pool, name, slice_name)
    for key, value in _dict(body.get("attributes"), f"{where}.attributes").items():
        dev.attributes[qualified(str(key), driver)] = _attribute(value, f"{where}.attributes[{key}]")
    for key, value in _dict(body.get("capacity"), f"{where}.capacity").items():
        at = f"{where}.capacity[{key}]"
        cap = _dict(value, at)
        policy = _dict(cap.get("requestPolicy"), f"{at}.requestPolicy")
        default = None
        if policy.get("default") is not None:
            default = _quantity(policy["default"], f"{at}.requestPolicy.default")
        valid_values = tuple(_quantity(v, f"{at}.requestPolicy.validValues")
                             for v in _list(policy.get("validValues"), f"{at}.requestPolicy.validValues"))
        valid_range = None
        if policy.get("validRange") is not None:
            rng = _dict(policy["validRange"], f"{at}.requestPolicy.validRange")
            valid_range = tuple(
                _quantity(rng[k], f"{at}.requestPolicy.validRange.{k}") if rng.get(k) is not None else None
                for k in ("min", "max", "step")
            )
        dev.capacity[qualified(str(key), driver)] = Capacity(
            _quantity(cap.get("value"), f"{at}.value"), default, valid_values,
            valid_range,  # type: ignore[arg-type]
        )
    consumes = []
    for i, c in enumerate(_list(body.get("consumesCounters"), f"{where}.consumesCounters")):
        c = _dict(c, f"{where}.consumesCounters[{i}]")
        counters = {
            str(k): _quantity(_dict(v, f"{where}.consumesCounters[{i}].counters[{k}]").get("value"),
                              f"{where}.consumesCounters[{i}].counters[{k}].value")
            for k, v in _dict(c.get("counters"), f"{where}.consumesCounters[{i}].counters").items()
        }
        consumes.append((_str(c.get("counterSet")), tuple(sorted(counters.items()))))
    dev.consumes = tuple(consumes)
    dev.allow_multiple = body.get("allowMultipleAllocations") is True
    dev.node_name = _str(body.get("nodeName"))
    selector = body.get("nodeSelector")
    dev.node_selector = selector if isinstance(selector, dict) else None
    dev.all_nodes = body.get("allNodes") is True
    dev.taints = tuple(
        DeviceTaint(_str(t.get("key")), _str(t.get("value")), _str(t.get("effect")))
        for t in _list(body.get("taints"), f"{where}.taints") if isinstance(t, dict)
    )
    dev.binding_conditions = tuple(
        _str(x) for x in _list(body.get("bindingConditions"), f"{where}.bindingConditions")
    )
    dev.binding_failure_conditions = tuple(
        _str(x) for x in _list(body.get("bindingFailureConditions"), f"{where}.bindingFailureConditions")
    )
    dev.binds_to_node = body.get("bindsToNode") is True
    return dev


@dataclass(slots=True)
class Slice:
    name: str
    driver: str = ""
    pool: str = ""
    pool_generation: int = 0
    slice_count: int = 1
    node_name: str = ""
    node_selector: Mapping[str, Any] | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    # sharedCounters: counterSet -> counter -> value
    shared_counters: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    resource_version: str = ""
    error: str = ""
    generation: int = 0

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> Slice:
        meta = _meta(obj)
        sl = cls(_str(meta.get("name")))
        sl.generation = next(_generations)
        sl.resource_version = _str(meta.get("resourceVersion"))
        try:
            spec = _dict(obj.get("spec"), "spec")
            sl.driver = _str(spec.get("driver"))
            pool = _dict(spec.get("pool"), "spec.pool")
            sl.pool = _str(pool.get("name"))
            generation, count = pool.get("generation", 0), pool.get("resourceSliceCount", 1)
            if not isinstance(generation, int) or not isinstance(count, int):
                raise DraError("spec.pool: generation and resourceSliceCount must be integers")
            sl.pool_generation, sl.slice_count = generation, count
            sl.node_name = _str(spec.get("nodeName"))
            selector = spec.get("nodeSelector")
            sl.node_selector = selector if isinstance(selector, dict) else None
            sl.all_nodes = spec.get("allNodes") is True
            sl.per_device_node_selection = spec.get("perDeviceNodeSelection") is True
            for i, cs in enumerate(_list(spec.get("sharedCounters"), "spec.sharedCounters")):
                cs = _dict(cs, f"spec.sharedCounters[{i}]")
                sl.shared_counters[_str(cs.get("name"))] = {
                    str(k): _quantity(_dict(v, f"spec.sharedCounters[{i}].counters[{k}]").get("value"),
                                      f"spec.sharedCounters[{i}].counters[{k}].value")
                    for k, v in _dict(cs.get("counters"), f"spec.sharedCounters[{i}].counters").items()
                }
            sl.devices = tuple(
                _device(d, sl.driver, sl.pool, sl.name, f"spec.devices[{i}]")
                for i, d in enumerate(_list(spec.get("devices"), "spec.devices"))
            )
        except DraError as exc:
            sl.error = str(exc)
            sl.devices = ()
        return sl


# ---------------------------------------------------------------------------------------------- the state
def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = _meta(obj)
    return (_str(meta.get("namespace")), _str(meta.get("name")))


class _Desc(str):
    """A string that sorts in reverse (so that, among equals, the smallest comes last and wins)."""

    def __lt__(self, other: str) -> bool:
        return str.__gt__(self, other)


class DraState:
    """The four DRA kinds by name, plus our assumed allocations."""

    def __init__(self) -> None:
        self.version = 0
        self.claims: dict[tuple[str, str], Claim] = {}
        self.templates: dict[tuple[str, str], ClaimTemplate] = {}
        self.slices: dict[str, Slice] = {}
        self.classes: dict[str, DeviceClass] = {}
        # Slices by the node they are local to ("" for those with a node selector or allNodes).
        self.node_slices: dict[str, dict[str, Slice]] = {}
        # Extended resource name -> the DeviceClasses that map it (KEP-5004).
        self.extended: dict[str, DeviceClass] = {}
        # Claims generated for pods by the resource-claim controller: (namespace, owner pod uid) -> keys.
        self.owned: dict[tuple[str, str], set[tuple[str, str]]] = {}
        # Our assumed claims: key -> (the informer's claim when we assumed, the assumed one).
        self.assumed: dict[tuple[str, str], tuple[Claim | None, Claim]] = {}
        self.slices_version = 0  # changes only with slices and classes (the allocator's device view)
        # Slices by pool (driver, pool): completeness and counters are per pool.
        self.pool_slices: dict[tuple[str, str], dict[str, Slice]] = {}
        # Devices in use, from the claims held (informer's or assumed): kube's AllocatedDevices (exclusive,
        # not admin access) and, for devices that allow multiple allocations, the capacity their shares
        # consume (AggregatedCapacity; a device present here with {} is shared without capacity).
        self.allocated: dict[tuple[str, str, str], int] = {}
        self.shared: dict[tuple[str, str, str], dict[str, Decimal]] = {}
        self._shared_count: dict[tuple[str, str, str], int] = {}
        # Change log for per-node caches: (version, node) whenever devices on `node` were taken, freed,
        # added or removed; node "" means every node (a slice for many nodes, or a class, changed).
        self.changes: list[tuple[int, str]] = []
        self.freed = False  # the last ResourceClaim event took an allocation away (pods_affected reads it)
        self.consumers: dict[str, set[tuple[str, str]]] = {}  # pod uid -> the informer's claims reserving it

    # ------------------------------------------------------------------ informer input
    def apply(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """A watch event ("ADDED", "MODIFIED", "DELETED") for one object of `kind` (one of KINDS)."""
        deleted = event == "DELETED"
        self.freed = False
        if kind == RESOURCE_CLAIM:
            claim = Claim.from_api(obj)
            before = self.claims.get(claim.key)
            self.freed = before is not None and before.allocation is not None and (
                deleted or claim.allocation is None
            )
            if deleted:
                self._drop_claim(claim.key)
                self.forget(claim.key)
            else:
                self.set_claim(claim)
        elif kind == RESOURCE_CLAIM_TEMPLATE:
            if deleted:
                self.templates.pop(_key(obj), None)
            else:
                template = ClaimTemplate.from_api(obj)
                self.templates[template.key] = template
        elif kind == RESOURCE_SLICE:
            name = _key(obj)[1]
            self._drop_slice(name)
            if not deleted:
                self._put_slice(Slice.from_api(obj))
            self.slices_version += 1
        elif kind == DEVICE_CLASS:
            name = _key(obj)[1]
            self.classes.pop(name, None)
            if not deleted:
                self.classes[name] = DeviceClass.from_api(obj)
            self._index_extended()
            self.slices_version += 1
            self._log("")
        else:
            return
        self.version += 1

    def replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        """A fresh list of `kind`: what is held is replaced (assumptions of claims are kept while the
        list does not show our write yet; see `set_claim`)."""
        objs = [o for o in items if isinstance(o, dict)]
        if kind == RESOURCE_CLAIM:
            self.claims = {}
            self.owned = {}
            self.consumers = {}
            self.allocated, self.shared, self._shared_count = {}, {}, {}
            for pair in self.assumed.values():
                self._count(pair[1], 1)
            self._log("")
            for claim in map(Claim.from_api, objs):
                self._put_claim(claim)
            for key in list(self.assumed):
                self._settle(key)
        elif kind == RESOURCE_CLAIM_TEMPLATE:
            self.templates = {t.key: t for t in map(ClaimTemplate.from_api, objs)}
        elif kind == RESOURCE_SLICE:
            self.slices = {}
            self.node_slices = {}
            self.pool_slices = {}
            self._log("")
            for sl in map(Slice.from_api, objs):
                self._put_slice(sl)
            self.slices_version += 1
        elif kind == DEVICE_CLASS:
            self.classes = {c.name: c for c in map(DeviceClass.from_api, objs)}
            self._index_extended()
            self.slices_version += 1
            self._log("")
        else:
            return
        self.version += 1

    def pods_affected(self, kind: str, obj: Mapping[str, Any]) -> Callable[[Any], bool]:
        """A predicate over pending PodRecords for the queue's `move_matching`, after an event of `kind`
        on `obj`: which waiting pods it may help.

        - a ResourceClaim: pods of its namespace that name it directly, or (a claim the resource-claim
          controller made) the pod that owns it; but every pod below when the event took an
          allocation away (deallocated, or deleted allocated: its devices are free for others, as
          kube's isSchedulableAfterClaimChange says), which `apply` of that very event noted in
          `freed`;
        - a ResourceClaimTemplate: pods of its namespace that use claims (their generated claim may
          now be made);
        - a ResourceSlice or DeviceClass: every pod with claims or with a request for an extended
          resource some DeviceClass maps (devices may have appeared or freed).
        Pods without DRA claims or mapped extended resources are never matched, so events of these
        kinds cost nothing to the rest of the queue."""
        namespace, name = _key(obj) if isinstance(obj, dict) else ("", "")
        extended = set(self.extended)
        if kind == RESOURCE_CLAIM and not self.freed:
            claim = Claim.from_api(obj) if isinstance(obj, dict) else None
            owner = claim.owner if claim is not None else None
            owner_uid = owner[2] if owner is not None and owner[0] == "Pod" else ""

            def claim_match(pod: Any) -> bool:
                if pod.namespace != namespace:
                    return False
                if owner_uid and pod.uid == owner_uid:
                    return True
                return any(ref.claim_name == name for ref in pod.resource_claims)

            return claim_match
        if kind == RESOURCE_CLAIM_TEMPLATE:
            return lambda pod: pod.namespace == namespace and bool(pod.resource_claims)
        return lambda pod: bool(pod.resource_claims) or any(r in extended for r in pod.requests)

    # ------------------------------------------------------------------ claims
    def set_claim(self, claim: Claim) -> None:
        held = self.claims.get(claim.key)
        stale = held is not None and not newer_version(held.resource_version, claim.resource_version)
        if held is not None and held.uid == claim.uid and stale:
            return
        self._drop_claim(claim.key)
        self._put_claim(claim)
        self._settle(claim.key)

    def _count(self, claim: Claim | None, sign: int) -> None:
        """Add (1) or remove (-1) a held claim's devices to the in-use indexes, and log the nodes."""
        if claim is None or claim.allocation is None:
            return
        for dev in claim.allocation.devices:
            device_id = dev.device_id
            if dev.share_id:
                count = self._shared_count.get(device_id, 0) + sign
                consumed = self.shared.setdefault(device_id, {})
                for name, value in dev.consumed:
                    consumed[name] = consumed.get(name, Decimal(0)) + sign * value
                if count <= 0:
                    self._shared_count.pop(device_id, None)
                    self.shared.pop(device_id, None)
                else:
                    self._shared_count[device_id] = count
            elif not dev.admin_access:
                count = self.allocated.get(device_id, 0) + sign
                if count <= 0:
                    self.allocated.pop(device_id, None)
                else:
                    self.allocated[device_id] = count
            self._log_pool((dev.driver, dev.pool))

    def _log_pool(self, pool: tuple[str, str]) -> None:
        slices = self.pool_slices.get(pool)
        nodes = {sl.node_name for sl in slices.values()} if slices else {""}
        for node in nodes:
            self._log(node)

    def _log(self, node: str) -> None:
        self.version += 1
        self.changes.append((self.version, node))
        if len(self.changes) > 4096:
            del self.changes[:2048]

    def changed_since(self, version: int) -> set[str] | None:
        """The nodes whose devices changed after `version`; None when every node may have (a change
        for many nodes, or a log too short to tell)."""
        changes = self.changes
        if not changes or changes[-1][0] <= version:
            return set()
        if changes[0][0] > version + 1:
            return None
        nodes: set[str] = set()
        for at, node in reversed(changes):
            if at <= version:
                break
            if not node:
                return None
            nodes.add(node)
        return nodes

    @contextlib.contextmanager
    def without_pods(self, uids: Collection[str]) -> Iterator[None]:
        """For preemption's what-if: the devices of the claims reserved for none but these pods (which
        the resource-claim controller frees once they are gone) counted free while the block runs;
        their nodes go through the change log, so that cached verdicts are recomputed there, and again
        when they are counted back."""
        if not uids:
            yield
            return
        keys = {key for uid in uids for key in self.consumers.get(uid, ())}
        keys.update(k for k, (_, a) in self.assumed.items() if any(c.uid in uids for c in a.reserved_for))
        freed = [
            claim for key in sorted(keys)
            if (claim := self.held(key)) is not None and claim.allocation is not None and claim.reserved_for
            and all(c.uid in uids for c in claim.reserved_for)
        ]
        for claim in freed:
            self._count(claim, -1)
        try:
            yield
        finally:
            for claim in freed:
                self._count(claim, 1)

    def held(self, key: tuple[str, str]) -> Claim | None:
        pair = self.assumed.get(key)
        return pair[1] if pair is not None else self.claims.get(key)

    def assume(self, claim: Claim) -> None:
        """Hold `claim` (with the allocation and reservation we chose) until the watch catches up."""
        before = self.held(claim.key)
        self._count(before, -1)
        original = self.assumed[claim.key][0] if claim.key in self.assumed else self.claims.get(claim.key)
        self.assumed[claim.key] = (original, claim)
        self._count(claim, 1)
        self.version += 1

    def forget(self, key: tuple[str, str], assumed: Claim | None = None) -> None:
        """Drop our assumption of a claim (a binding that will not happen): the informer's claim counts
        again. With `assumed`, only if that very assumption is still held."""
        pair = self.assumed.get(key)
        if pair is None or (assumed is not None and pair[1] is not assumed):
            return
        self._count(pair[1], -1)
        del self.assumed[key]
        self._count(self.claims.get(key), 1)
        self.version += 1

    def _put_claim(self, claim: Claim) -> None:
        if claim.key not in self.assumed:
            self._count(claim, 1)
        self.claims[claim.key] = claim
        for consumer in claim.reserved_for:
            self.consumers.setdefault(consumer.uid, set()).add(claim.key)
        if claim.owner is not None and claim.owner[0] == "Pod":
            self.owned.setdefault((claim.namespace, claim.owner[2]), set()).add(claim.key)

    def _drop_claim(self, key: tuple[str, str]) -> None:
        claim = self.claims.pop(key, None)
        if key not in self.assumed:
            self._count(claim, -1)
        for consumer in claim.reserved_for if claim is not None else ():
            keys = self.consumers.get(consumer.uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.consumers[consumer.uid]
        if claim is not None and claim.owner is not None and claim.owner[0] == "Pod":
            owned = self.owned.get((claim.namespace, claim.owner[2]))
            if owned is not None:
                owned.discard(key)
                if not owned:
                    del self.owned[(claim.namespace, claim.owner[2])]

    def _settle(self, key: tuple[str, str]) -> None:
        """An assumption ends early only when the informer holds another claim of that name (deleted and
        made again); otherwise it lasts until `forget` (PreBind done, or Unreserve), as kube's in-flight
        allocations do: PreBind writes in two steps (the finalizer, then the status), and the first
        step's watch event, newer than the claim assumed over but without the allocation, must not end
        it."""
        pair = self.assumed.get(key)
        if pair is None:
            return
        held = self.claims.get(key)
        assumed = pair[1]
        if held is None:
            return
        if assumed.uid and held.uid != assumed.uid:
            self._count(assumed, -1)
            del self.assumed[key]
            self._count(held, 1)

    def extended_claim_of(self, namespace: str, pod_name: str, pod_uid: str) -> Claim | None:
        """The claim kube-scheduler made for a pod's DRA-backed extended resources, if one exists: annotated
        `resource.kubernetes.io/extended-resource-claim: "true"` and controlled by the pod."""
        for key in sorted(self.owned.get((namespace, pod_uid), ())):
            claim = self.held(key)
            if (claim is not None and claim.annotations.get(EXTENDED_CLAIM_ANNOTATION) == "true"
                    and claim.owner is not None and claim.owner[1] == pod_name):
                return claim
        return None

    def in_flight(self, key: tuple[str, str]) -> bool:
        """Whether the claim's allocation is ours, assumed, and not yet seen in the informer's claim."""
        pair = self.assumed.get(key)
        if pair is None or pair[1].allocation is None:
            return False
        held = self.claims.get(key)
        return held is None or held.allocation is None

    def claim(self, namespace: str, name: str) -> Claim | None:
        """The claim as the scheduler must see it: our assumption first, else the informer's."""
        pair = self.assumed.get((namespace, name))
        if pair is not None:
            return pair[1]
        return self.claims.get((namespace, name))

    # ------------------------------------------------------------------ slices and classes
    def _put_slice(self, sl: Slice) -> None:
        self.slices[sl.name] = sl
        self.node_slices.setdefault(sl.node_name, {})[sl.name] = sl
        self.pool_slices.setdefault((sl.driver, sl.pool), {})[sl.name] = sl
        self._log(sl.node_name)

    def _drop_slice(self, name: str) -> None:
        sl = self.slices.pop(name, None)
        if sl is not None:
            group = self.node_slices.get(sl.node_name)
            if group is not None:
                group.pop(name, None)
                if not group:
                    del self.node_slices[sl.node_name]
            pool = self.pool_slices.get((sl.driver, sl.pool))
            if pool is not None:
                pool.pop(name, None)
                if not pool:
                    del self.pool_slices[(sl.driver, sl.pool)]
            self._log(sl.node_name)

    def _index_extended(self) -> None:
        """kube's ExtendedResourceCache: an extendedResourceName maps to the newest class naming it (the
        smaller name on a tie); every class also maps "deviceclass.resource.kubernetes.io/<name>"."""
        extended: dict[str, DeviceClass] = {}
        for dc in sorted(self.classes.values(), key=lambda c: (c.creation, _Desc(c.name))):
            if dc.error:
                continue
            if dc.extended_resource:
                extended[dc.extended_resource] = dc
            extended[IMPLICIT_CLASS_PREFIX + dc.name] = dc
        self.extended = extended

    def templates_of(self, namespaces: Iterable[str]) -> list[ClaimTemplate]:
        wanted = set(namespaces)
        return [t for t in self.templates.values() if t.namespace in wanted]
