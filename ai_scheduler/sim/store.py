"""Object store of the simulated API server: objects, resourceVersion, history, watchers.

Like etcd behind the watch cache of a real kube-apiserver, there is one global
resourceVersion counter, every write gets the next value, and a bounded
history of writes lets a watch resume from any version still retained; older
versions answer 410 Expired.

Speed matters more than generality here (benchmarks push thousands of writes
per second through one Python process), so:
- every stored object is kept twice, as a dict (for selectors and in-process
  readers) and as its JSON bytes, serialized once per write; GET, LIST, watch
  events and the history all reuse those bytes;
- stored dicts are never modified: a writer decodes a private copy from the
  bytes (`Entry.copy()`, cheaper than copy.deepcopy) and stores a new entry;
- a watch event is encoded once per write and the same bytes object goes to
  every watcher that wants it.
"""

from __future__ import annotations

import asyncio
import builtins
import re
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


# --------------------------------------------------------------------------- resource types


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One kind the server serves; the table of these drives routing and storage."""

    plural: str
    kind: str
    group: str = ""
    version: str = "v1"
    namespaced: bool = True
    has_status: bool = False
    max_objects: int | None = None  # oldest objects are deleted beyond this (events)
    list_kind: str = ""

    @property
    def key(self) -> str:
        """Group-qualified name, as in Kubernetes messages (`podgroups.scheduling.x-k8s.io`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """URL prefix: /api/v1 for the core group, /apis/{group}/{version} otherwise."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def list_kind_name(self) -> str:
        return self.list_kind or f"{self.kind}List"


class Registry:
    """Resource types by (group, version, plural), so that more can be registered later."""

    def __init__(self, types: Iterable[ResourceType] = ()) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        for rt in types:
            self.register(rt)

    def register(self, rt: ResourceType) -> None:
        self._by_gvr[(rt.group, rt.version, rt.plural)] = rt

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def resolve(self, name: str) -> ResourceType:
        """A type by its key (`pods`, `podgroups.scheduling.k8s.io`) or its plural; a plural that several
        groups serve names the first type registered with it (`podgroups`: scheduler-plugins' PodGroup)."""
        matches = [rt for rt in self._by_gvr.values() if name in (rt.key, rt.plural)]
        exact = [rt for rt in matches if rt.key == name]
        if exact:
            return exact[0]
        if matches:
            return matches[0]
        raise KeyError(f"unknown resource {name!r}")

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(self._by_gvr.values())


DEFAULT_TYPES: tuple[ResourceType, ...] = (
    ResourceType("pods", "Pod", has_status=True),
    ResourceType("nodes", "Node", namespaced=False, has_status=True),
    ResourceType("events", "Event", max_objects=50_000),
    ResourceType("priorityclasses", "PriorityClass", "scheduling.k8s.io", "v1", namespaced=False),
    ResourceType("leases", "Lease", "coordination.k8s.io", "v1"),
    ResourceType("podgroups", "PodGroup", "scheduling.x-k8s.io", "v1alpha1", has_status=True),
    # Kubernetes' own (GenericWorkload): PodGroups (native gangs) and the Workloads that template them.
    ResourceType("podgroups", "PodGroup", "scheduling.k8s.io", "v1beta1", has_status=True),
    ResourceType("workloads", "Workload", "scheduling.k8s.io", "v1beta1"),
    # Kept, not acted on (no operator runs): the owners whose specs give inferred gangs their minimum.
    ResourceType("jobsets", "JobSet", "jobset.x-k8s.io", "v1alpha2", has_status=True),
    ResourceType("pytorchjobs", "PyTorchJob", "kubeflow.org", "v1", has_status=True),
    ResourceType("mpijobs", "MPIJob", "kubeflow.org", "v2beta1", has_status=True),
    ResourceType("rayclusters", "RayCluster", "ray.io", "v1", has_status=True),
    ResourceType("leaderworkersets", "LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", has_status=True),
    # Kept, not acted on (no Capacity Scheduling controller fills their status): ai-scheduler reads them.
    ResourceType("elasticquotas", "ElasticQuota", "scheduling.x-k8s.io", "v1alpha1", has_status=True),
    # ai-scheduler's Task (deploy/crds/ai-scheduler.io_tasks.yaml): the scheduler's controller runs it.
    ResourceType("tasks", "Task", "ai-scheduler.io", "v1alpha1", has_status=True),
    # Quotas group administrators delegate (deploy/crds/): read and written back by the scheduler.
    ResourceType("groupquotas", "GroupQuota", "ai-scheduler.io", "v1alpha1", namespaced=False,
                 has_status=True),
    ResourceType("userquotas", "UserQuota", "ai-scheduler.io", "v1alpha1", has_status=True),
    # Logical domains of nodes: read by the scheduler, which writes their status.
    ResourceType("domains", "Domain", "ai-scheduler.io", "v1alpha1", namespaced=False, has_status=True),
    # Kept, not enforced: pods may name a namespace that was never created, and no controller runs Jobs.
    ResourceType("namespaces", "Namespace", namespaced=False, has_status=True),
    ResourceType("jobs", "Job", "batch", "v1", has_status=True),
    # Kept, not acted on (no controller creates their pods): PodTopologySpread's default constraints read
    # their selectors.
    ResourceType("services", "Service", has_status=True),
    ResourceType("replicationcontrollers", "ReplicationController", has_status=True),
    ResourceType("replicasets", "ReplicaSet", "apps", "v1", has_status=True),
    ResourceType("statefulsets", "StatefulSet", "apps", "v1", has_status=True),
    # Kept, not acted on (no disruption controller fills their status): preemption reads them.
    ResourceType("poddisruptionbudgets", "PodDisruptionBudget", "policy", "v1", has_status=True),
    # Kept for VolumeBinding; no PV controller or provisioner runs (a test plays them).
    ResourceType("persistentvolumes", "PersistentVolume", namespaced=False, has_status=True),
    ResourceType("persistentvolumeclaims", "PersistentVolumeClaim", has_status=True),
    ResourceType("storageclasses", "StorageClass", "storage.k8s.io", "v1", namespaced=False),
    ResourceType("csinodes", "CSINode", "storage.k8s.io", "v1", namespaced=False),
    # Dynamic Resource Allocation (resource.k8s.io/v1). The resource-claim controller's stand-in
    # (sim/resourceclaims.py) makes claims from templates; drivers' slices are written by tests.
    ResourceType("resourceclaims", "ResourceClaim", "resource.k8s.io", "v1", has_status=True),
    ResourceType("resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io", "v1"),
    ResourceType("resourceslices", "ResourceSlice", "resource.k8s.io", "v1", namespaced=False),
    ResourceType("deviceclasses", "DeviceClass", "resource.k8s.io", "v1", namespaced=False),
)


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A failure answered with a Kubernetes Status object."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason}
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.key} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.key} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str, subresource: str = "") -> ApiError:
    what = f"{rt.key}/{subresource}" if subresource else rt.key
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}',
                    _details(rt, name))


def stale(rt: ResourceType, name: str) -> ApiError:
    return conflict(rt, name, "the object has been modified; please apply your changes to the latest "
                              "version and try again")


def invalid(rt: ResourceType, name: str, field_path: str, why: str) -> ApiError:
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {field_path}: {why}',
                    {"name": name, "group": rt.group, "kind": rt.kind,
                     "causes": [{"reason": "FieldValueRequired", "message": why, "field": field_path}]})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


# --------------------------------------------------------------------------- selectors


_SET_REQUIREMENT = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s+\((.*)\)\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside the parentheses of `in (a,b)`."""
    parts, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:pos])
            start = pos + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


class LabelSelector:
    """`a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`, comma-ANDed."""

    __slots__ = ("requirements",)

    def __init__(self, text: str) -> None:
        self.requirements: list[tuple[str, str, frozenset[str]]] = []
        for part in _split_top_level(text):
            match = _SET_REQUIREMENT.match(part)
            if match:
                values = frozenset(v.strip() for v in match.group(3).split(",") if v.strip())
                self.requirements.append((match.group(1), match.group(2), values))
            elif "!=" in part:
                key, value = part.split("!=", 1)
                self.requirements.append((key.strip(), "notin", frozenset({value.strip()})))
            elif "=" in part:
                key, value = part.replace("==", "=", 1).split("=", 1)
                self.requirements.append((key.strip(), "in", frozenset({value.strip()})))
            elif part.startswith("!"):
                self.requirements.append((part[1:].strip(), "!", frozenset()))
            else:
                self.requirements.append((part, "exists", frozenset()))
        for key, _, _ in self.requirements:
            if not key or any(c in key for c in " ()=!"):
                raise bad_request(f"unable to parse requirement: invalid label key {key!r}")

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        for key, op, values in self.requirements:
            present = key in labels
            if op == "in":
                if not present or labels[key] not in values:
                    return False
            elif op == "notin":
                if present and labels[key] in values:
                    return False
            elif op == "exists":
                if not present:
                    return False
            elif present:  # "!"
                return False
        return True


class FieldSelector:
    """`path=value`, `path==value`, `path!=value` over dotted paths; a missing field reads as ""."""

    __slots__ = ("requirements",)

    def __init__(self, text: str) -> None:
        self.requirements: list[tuple[tuple[str, ...], bool, str]] = []
        for part in _split_top_level(text):
            if "!=" in part:
                path, value = part.split("!=", 1)
                negate = True
            elif "=" in part:
                path, value = part.replace("==", "=", 1).split("=", 1)
                negate = False
            else:
                raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
            self.requirements.append((tuple(path.strip().split(".")), negate, value.strip()))

    def matches(self, obj: dict[str, Any]) -> bool:
        for path, negate, value in self.requirements:
            node: Any = obj
            for step in path:
                node = node.get(step) if isinstance(node, dict) else None
            actual = "" if node is None else (node if isinstance(node, str) else str(node))
            if (actual == value) == negate:
                return False
        return True


class Selector:
    """Label and field selectors of one list or watch request, either may be absent."""

    __slots__ = ("fields", "labels")

    def __init__(self, labels: str | None = None, fields: str | None = None) -> None:
        self.labels = LabelSelector(labels) if labels else None
        self.fields = FieldSelector(fields) if fields else None

    @classmethod
    def parse(cls, labels: str | None, fields: str | None) -> Selector | None:
        """None when nothing is selected on, so that callers skip matching altogether."""
        return cls(labels, fields) if labels or fields else None

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.labels is not None and not self.labels.matches(obj.get("metadata", {}).get("labels")):
            return False
        return self.fields is None or self.fields.matches(obj)


# --------------------------------------------------------------------------- entries and watchers


class Entry:
    """One stored object state: the dict (never modified) and its JSON bytes."""

    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict[str, Any], raw: bytes) -> None:
        self.obj = obj
        self.raw = raw

    def copy(self) -> dict[str, Any]:
        """A private deep copy to modify; decoding the bytes is faster than copy.deepcopy."""
        obj: dict[str, Any] = orjson.loads(self.raw)
        return obj


def event_bytes(kind: str, raw: bytes) -> bytes:
    """One watch event line around already serialized object bytes."""
    return b'{"type":"' + kind.encode() + b'","object":' + raw + b"}\n"


class Watcher:
    """One open watch: a filter and a buffer of encoded events that its writer drains."""

    __slots__ = ("bookmarks", "buffer", "closed", "limit", "namespace", "rt", "selector", "transport",
                 "waiter")

    def __init__(self, rt: ResourceType, namespace: str | None, selector: Selector | None,
                 bookmarks: bool, limit: int) -> None:
        self.rt = rt
        self.namespace = namespace
        self.selector = selector
        self.bookmarks = bookmarks
        self.limit = limit
        self.buffer: deque[bytes] = deque()
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def push(self, data: bytes) -> None:
        if self.closed:
            return
        self.buffer.append(data)
        if len(self.buffer) > self.limit:
            # A client this far behind is stuck; the real server drops it too, and the
            # client resumes from the last version it saw.
            self.close(drop=True)
            if self.transport is not None:
                self.transport.abort()
        else:
            self._wake()

    def close(self, drop: bool = False) -> None:
        """End the stream after what is buffered (or at once with drop=True)."""
        self.closed = True
        if drop:
            self.buffer.clear()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Sleep until something is pushed or the watcher is closed."""
        if self.buffer or self.closed:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None


# (event type, resource type, new object state, previous state or None)
Subscriber = Callable[[str, ResourceType, dict[str, Any], "dict[str, Any] | None"], None]

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for generateName


def now_rfc3339(epoch: float | None = None) -> str:
    """Kubernetes timestamps: seconds, UTC, `Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if epoch is None else epoch))


@dataclass(slots=True)
class _HistoryItem:
    rv: int
    key: str
    namespace: str
    kind: str
    raw: bytes
    prev: bytes | None = field(default=None)


class Store:
    """All objects of all kinds, the resourceVersion counter, the write history and the watchers."""

    def __init__(self, registry: Registry | None = None, *, history_limit: int = 200_000,
                 watch_buffer_limit: int = 200_000) -> None:
        self.registry = registry if registry is not None else Registry(DEFAULT_TYPES)
        self.rv = 0
        self.history_limit = history_limit
        self.watch_buffer_limit = watch_buffer_limit
        self._objects: dict[str, dict[tuple[str, str], Entry]] = {}
        self._history: deque[_HistoryItem] = deque()
        # Watches from a version below this get 410: history before it was dropped.
        self._min_rv = 0
        self._watchers: dict[str, set[Watcher]] = {}
        self._subscribers: list[Subscriber] = []

    # ---- reads

    def _table(self, rt: ResourceType) -> dict[tuple[str, str], Entry]:
        table = self._objects.get(rt.key)
        if table is None:
            table = self._objects[rt.key] = {}
        return table

    def entry(self, rt: ResourceType, namespace: str, name: str) -> Entry | None:
        return self._table(rt).get((namespace if rt.namespaced else "", name))

    def entries(self, rt: ResourceType, namespace: str | None = None) -> Iterator[Entry]:
        table = self._table(rt)
        if namespace is None or not rt.namespaced:
            return iter(table.values())
        return (entry for (ns, _), entry in table.items() if ns == namespace)

    def count(self, rt: ResourceType) -> int:
        return len(self._table(rt))

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of one object, for tests and tools in the same process."""
        entry = self.entry(self.registry.resolve(resource), namespace or "", name)
        return None if entry is None else entry.copy()

    # Below this method, `list` in the class body names the method: annotations spell `builtins.list`.
    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of all objects of a kind (optionally one namespace)."""
        return [entry.copy() for entry in self.entries(self.registry.resolve(resource), namespace)]

    # ---- writes

    def _next_rv(self, obj: dict[str, Any], rt: ResourceType) -> None:
        self.rv += 1
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, rt: ResourceType, obj: dict[str, Any]) -> Entry:
        """Store a new object (caller's dict is taken over); assigns name, uid and timestamps."""
        meta = obj.setdefault("metadata", {})
        table = self._table(rt)
        namespace = meta.get("namespace", "") if rt.namespaced else ""
        if rt.namespaced:
            namespace = namespace or "default"
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(rt, "", "metadata.name", "Required value: name or generateName is required")
            for _ in range(16):
                name = prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
                if (namespace, name) not in table:
                    break
            meta["name"] = name
        name = meta["name"]
        if (namespace, name) in table:
            raise already_exists(rt, name)
        if rt.max_objects is not None and len(table) >= rt.max_objects:
            self.delete(rt, next(iter(table.values())))
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        for transient in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(transient, None)
        return self._write(rt, ADDED, obj, None, (namespace, name))

    def update(self, rt: ResourceType, obj: dict[str, Any], old: Entry) -> Entry:
        """Replace a stored object with `obj` (taken over); identity fields come from `old`."""
        meta = obj.setdefault("metadata", {})
        old_meta = old.obj["metadata"]
        for key in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                    "deletionGracePeriodSeconds"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        generation = old_meta.get("generation", 1)
        if obj.get("spec") != old.obj.get("spec"):
            generation += 1
        meta["generation"] = generation
        return self._write(rt, MODIFIED, obj, old, (old_meta.get("namespace", ""), old_meta["name"]))

    def mark_deleting(self, rt: ResourceType, old: Entry, grace: int) -> Entry:
        """Start a graceful deletion: the object stays, Terminating, until someone removes it."""
        obj = old.copy()
        meta = obj["metadata"]
        meta["deletionTimestamp"] = now_rfc3339(time.time() + grace)
        meta["deletionGracePeriodSeconds"] = grace
        return self._write(rt, MODIFIED, obj, old, (meta.get("namespace", ""), meta["name"]))

    def delete(self, rt: ResourceType, old: Entry) -> Entry:
        """Remove an object; its DELETED event carries the last state with a new resourceVersion."""
        obj = old.copy()
        meta = obj["metadata"]
        del self._table(rt)[(meta.get("namespace", ""), meta["name"])]
        return self._write(rt, DELETED, obj, old, None)

    def _write(self, rt: ResourceType, kind: str, obj: dict[str, Any], old: Entry | None,
               key: tuple[str, str] | None) -> Entry:
        """Stamp a new resourceVersion, store the object under `key` (None: it is gone) and tell watchers."""
        self._next_rv(obj, rt)
        entry = Entry(obj, orjson.dumps(obj))
        if key is not None:
            self._table(rt)[key] = entry
        self._emit(rt, kind, entry, old)
        return entry

    def _emit(self, rt: ResourceType, kind: str, entry: Entry, old: Entry | None) -> None:
        namespace = entry.obj["metadata"].get("namespace", "")
        history = self._history
        if len(history) >= self.history_limit:
            self._min_rv = max(self._min_rv, history.popleft().rv)
        history.append(_HistoryItem(self.rv, rt.key, namespace, kind, entry.raw,
                                    old.raw if old is not None else None))
        watchers = self._watchers.get(rt.key)
        if watchers:
            encoded: dict[str, bytes] = {}
            for watcher in watchers:
                if watcher.namespace is not None and watcher.namespace != namespace:
                    continue
                out = kind
                selector = watcher.selector
                if selector is not None:
                    filtered = _filtered_kind(kind, selector.matches(entry.obj),
                                              old is not None and selector.matches(old.obj))
                    if filtered is None:
                        continue
                    out = filtered
                data = encoded.get(out)
                if data is None:
                    data = encoded[out] = event_bytes(out, entry.raw)
                watcher.push(data)
        for subscriber in self._subscribers:
            subscriber(kind, rt, entry.obj, old.obj if old is not None else None)

    # ---- in-process subscribers (simulated kubelets, node controller)

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    # ---- versions, watch and history

    def check_version(self, requested: int) -> None:
        """Raise 410 Expired when the history needed to serve from `requested` is gone."""
        if requested < self._min_rv:
            raise expired(requested, self._min_rv)

    def compact(self) -> None:
        """Forget all history: every version up to now becomes too old (forces clients to relist)."""
        self._history.clear()
        self.rv += 1
        self._min_rv = self.rv

    def watch(self, rt: ResourceType, namespace: str | None, selector: Selector | None,
              since: int | None, bookmarks: bool) -> tuple[Watcher, builtins.list[bytes]]:
        """Register a watcher and return it with the events it must send first.

        since=None means "current state first" (synthetic ADDED events). Registering and
        collecting happen without an await in between, so no event is lost or doubled.
        """
        if since is not None:
            self.check_version(since)
        namespace = namespace if rt.namespaced else None
        initial = (self._snapshot(rt, namespace, selector) if since is None
                   else self._replay(rt, namespace, selector, since))
        watcher = Watcher(rt, namespace, selector, bookmarks, self.watch_buffer_limit)
        self._watchers.setdefault(rt.key, set()).add(watcher)
        return watcher, initial

    def unwatch(self, watcher: Watcher) -> None:
        watchers = self._watchers.get(watcher.rt.key)
        if watchers is not None:
            watchers.discard(watcher)

    def watchers(self) -> builtins.list[Watcher]:
        return [w for watchers in self._watchers.values() for w in watchers]

    def _snapshot(
        self, rt: ResourceType, namespace: str | None, selector: Selector | None
    ) -> builtins.list[bytes]:
        return [event_bytes(ADDED, entry.raw) for entry in self.entries(rt, namespace)
                if selector is None or selector.matches(entry.obj)]

    def _replay(self, rt: ResourceType, namespace: str | None, selector: Selector | None,
                since: int) -> builtins.list[bytes]:
        items: list[_HistoryItem] = []
        for item in reversed(self._history):
            if item.rv <= since:
                break
            if item.key == rt.key and (namespace is None or item.namespace == namespace):
                items.append(item)
        out = []
        for item in reversed(items):
            kind: str | None = item.kind
            if selector is not None:
                kind = _filtered_kind(item.kind, selector.matches(orjson.loads(item.raw)),
                                      item.prev is not None and selector.matches(orjson.loads(item.prev)))
            if kind is not None:
                out.append(event_bytes(kind, item.raw))
        return out


def _filtered_kind(kind: str, now: bool, before: bool) -> str | None:
    """What a filtered watcher sees, as in the real watch cache: entering the
    selection is ADDED, leaving it is DELETED."""
    if kind == MODIFIED:
        if now and before:
            return MODIFIED
        if now:
            return ADDED
        return DELETED if before else None
    return kind if now else None
