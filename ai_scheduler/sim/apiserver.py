"""A simulated kube-apiserver over HTTP (aiohttp), with kubelets and the controllers a scheduler meets.

It copies the real server wherever a scheduler depends on it: resourceVersion
ordering, watch from a version with replay, 410 Expired, bookmarks, the
status subresource, bindings answered with a Status, 409 on a second binding,
graceful pod deletion, finalizers (an object that has some is only marked
deleted until they are removed), admission defaults (priority, default tolerations, the
not-ready taint) and Status error bodies. Anything a scheduler does not
observe (authentication, validation of most fields, server-side apply) is left
out.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import math
from collections import defaultdict
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web
from multidict import MultiMapping

from ai_scheduler.log import JsonLogger
from ai_scheduler.quantity import QuantityError, parse_quantity
from ai_scheduler.sim import patch as patches
from ai_scheduler.sim.aggregation import Aggregation
from ai_scheduler.sim.kubelet import TAINT_NOT_READY, TAINT_UNREACHABLE, NodeLifecycleController, SimKubelets
from ai_scheduler.sim.resourceclaims import ResourceClaimController
from ai_scheduler.sim.store import (
    ApiError,
    Entry,
    ResourceType,
    Selector,
    Store,
    Watcher,
    bad_request,
    conflict,
    not_found,
    now_rfc3339,
    stale,
)

JSON = "application/json"
GARBLED_LINE = b'{"type":"MODIFIED","object":{garbled\n'
BUILTIN_PRIORITY_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
# Kinds served by the real server itself: strategic merge patch works only for these, not for CRDs.
BUILTIN_GROUPS = frozenset({"", "scheduling.k8s.io", "coordination.k8s.io", "events.k8s.io", "apps", "batch",
                            "policy", "storage.k8s.io", "resource.k8s.io"})
VERSION_INFO = {"major": "1", "minor": "37", "gitVersion": "v1.37.0-sim", "gitCommit": "sim",
                "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
                "compiler": "gc", "platform": "linux/amd64"}
_WATCH_WRITE_BATCH = 1 << 20
_MAX_BODY = 64 << 20


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def _status_response(err: ApiError) -> web.Response:
    return _json_response(orjson.dumps(err.status()), err.code)


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise bad_request(f"invalid resource version {text!r}") from exc
    if value < 0:
        raise bad_request(f"invalid resource version {text!r}")
    return value


class _Route:
    """What a request path names: a resource type, namespace, object and subresource."""

    __slots__ = ("name", "namespace", "rt", "subresource", "watch")

    def __init__(self, rt: ResourceType, namespace: str | None, name: str | None, subresource: str | None,
                 watch: bool) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.watch = watch


_BIND_SUCCESS = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}'
_NO_ROUTE = ApiError(404, "NotFound", "the server could not find the requested resource", {})


class SimApiServer:
    """The simulated cluster: API server, store, simulated kubelets and node lifecycle controller."""

    def __init__(self, *, kubelets: bool = True, node_controller: bool = True, claim_controller: bool = True,
                 bookmark_interval: float = 1.0,
                 history_limit: int = 200_000, logger: JsonLogger | None = None) -> None:
        self.store = Store(history_limit=history_limit)
        self.registry = self.store.registry
        self.bookmark_interval = bookmark_interval
        self.logger = logger
        self.url = ""
        self.kubelets = SimKubelets(self.store) if kubelets else None
        self.node_controller = NodeLifecycleController(self.store) if node_controller else None
        # kube-controller-manager's resource-claim controller: claims from templates, reservations cleaned up.
        self.claim_controller = ResourceClaimController(self.store) if claim_controller else None
        self._pods = self.registry.resolve("pods")
        self._nodes = self.registry.resolve("nodes")
        self._priority_classes = self.registry.resolve("priorityclasses")
        self._bind_conflicts: dict[tuple[str, str], str] = {}
        self._failures: dict[tuple[str, str, str, str], int] = {}  # (resource, verb, ns, name) -> count
        self._requests: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._bindings_ok = 0
        self._bindings_conflict = 0
        self._runner: web.AppRunner | None = None
        self._bookmark_task: asyncio.Task[None] | None = None
        self.aggregation: Aggregation | None = None  # users, RBAC and APIServices: enable_aggregation()
        for name, value in BUILTIN_PRIORITY_CLASSES.items():
            self.store.create(self._priority_classes, {
                "metadata": {"name": name}, "value": value, "globalDefault": False,
                "preemptionPolicy": "PreemptLowerPriority",
                "description": "Used for system critical pods that must run in the cluster."})

    # ------------------------------------------------------------------ lifecycle

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on host:port (0 picks a free port) and return the base URL."""
        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_get("/version", self._version)
        app.router.add_get("/version/", self._version)  # what kubernetes_asyncio's VersionApi asks for
        for probe in ("/healthz", "/readyz", "/livez"):
            app.router.add_get(probe, self._ok)
        app.router.add_post("/sim/v1/compact", self._http_compact)
        app.router.add_post("/sim/v1/cut-watches", self._http_cut)
        app.router.add_post("/sim/v1/garble-watches", self._http_garble)
        app.router.add_post("/sim/v1/end-watches", self._http_end)
        app.router.add_post("/sim/v1/bind-conflicts", self._http_bind_conflict)
        app.router.add_get("/sim/v1/stats", self._http_stats)
        app.router.add_route("*", "/{tail:.*}", self._handle_api)
        # handler_cancellation: a watch whose client went away must end at once, not at its next write.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.url = f"http://{bound_host}:{bound_port}"
        if self.node_controller is not None:
            self.node_controller.start()
        if self.claim_controller is not None:
            self.claim_controller.start()
        if self.kubelets is not None:
            self.kubelets.start()
        self._bookmark_task = asyncio.create_task(self._send_bookmarks())
        if self.logger is not None:
            self.logger.info("sim_apiserver_started", url=self.url)
        return self.url

    def enable_aggregation(self) -> Aggregation:
        """Serve the aggregation layer from now on (sim/aggregation.py): users with tokens, RBAC,
        SubjectAccessReviews and APIServices proxied to extension API servers."""
        if self.aggregation is None:
            self.aggregation = Aggregation(self.store)
        return self.aggregation

    async def stop(self) -> None:
        """End every watch, cancel every timer, stop listening."""
        if self.aggregation is not None:
            await self.aggregation.close()
        if self._bookmark_task is not None:
            self._bookmark_task.cancel()
            self._bookmark_task = None
        if self.kubelets is not None:
            self.kubelets.stop()
        if self.node_controller is not None:
            self.node_controller.stop()
        if self.claim_controller is not None:
            self.claim_controller.stop()
        for watcher in self.store.watchers():
            watcher.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.logger is not None:
            self.logger.info("sim_apiserver_stopped", url=self.url)

    async def __aenter__(self) -> SimApiServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def _send_bookmarks(self) -> None:
        while True:
            await asyncio.sleep(self.bookmark_interval)
            encoded: dict[str, bytes] = {}
            for watcher in self.store.watchers():
                if watcher.bookmarks and not watcher.closed:
                    data = encoded.get(watcher.rt.key)
                    if data is None:
                        data = encoded[watcher.rt.key] = self._bookmark(watcher.rt, self.store.rv)
                    watcher.push(data)

    @staticmethod
    def _bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return b'{"type":"BOOKMARK","object":' + orjson.dumps(
            {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}) + b"}\n"

    # ------------------------------------------------------------------ test hooks

    def compact(self) -> int:
        """Make every version up to now too old: watches and Exact lists from them get 410."""
        self.store.compact()
        return self.store.rv

    def cut_watches(self) -> int:
        """Drop every watch connection abruptly, as a lost TCP connection would."""
        watchers = self.store.watchers()
        for watcher in watchers:
            watcher.close(drop=True)
            if watcher.transport is not None:
                watcher.transport.abort()
        return len(watchers)

    def end_watches(self) -> int:
        """Close every watch stream cleanly, as the server does when a watch's timeout runs out."""
        watchers = self.store.watchers()
        for watcher in watchers:
            watcher.close()
        return len(watchers)

    def garble_watches(self) -> int:
        """Write one unparsable line into every open watch stream."""
        watchers = self.store.watchers()
        for watcher in watchers:
            watcher.push(GARBLED_LINE)
        return len(watchers)

    def inject_failures(self, resource: str, verb: str, namespace: str, name: str, count: int) -> None:
        """The next `count` requests `verb` on `resource` (e.g. "pods/binding" create, "pods" patch) for
        this object fail with 500, as an overloaded server's would."""
        self._failures[(resource, verb, namespace, name)] = count

    def _maybe_fail(self, resource: str, verb: str, namespace: str | None, name: str | None) -> None:
        key = (resource, verb, namespace or "", name or "")
        left = self._failures.get(key, 0)
        if left:
            self._failures[key] = left - 1
            raise ApiError(500, "InternalError", f"Internal error occurred: injected {verb} failure")

    def inject_bind_conflict(self, namespace: str, name: str, node: str) -> None:
        """The next binding request for the pod loses a race: another scheduler binds it to `node` first."""
        self._bind_conflicts[(namespace, name)] = node

    def stats(self) -> dict[str, Any]:
        return {
            "requests": {resource: dict(verbs) for resource, verbs in self._requests.items()},
            "bindings": {"ok": self._bindings_ok, "conflicts": self._bindings_conflict},
            "watches": len(self.store.watchers()),
            "resourceVersion": str(self.store.rv),
            "objects": {rt.key: self.store.count(rt) for rt in self.registry},
        }

    # ------------------------------------------------------------------ in-process writes

    def create(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object as a POST would (admission included), without HTTP; returns a copy."""
        rt = self.registry.resolve(resource)
        obj = orjson.loads(orjson.dumps(obj))
        self._admit(rt, obj)
        return self.store.create(rt, obj).copy()

    def bind(self, namespace: str, name: str, node: str, uid: str | None = None) -> None:
        """Bind a pod as POST .../binding would; raises ApiError (404, 409) as that would answer."""
        self._bind(namespace, name, node, uid, None)

    # ------------------------------------------------------------------ admission

    def _admit(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt is self._pods:
            self._admit_pod(obj)
        elif rt is self._nodes:
            taints = obj.setdefault("spec", {}).setdefault("taints", [])
            if not any(t.get("key") == TAINT_NOT_READY and t.get("effect") == "NoSchedule" for t in taints):
                taints.append({"key": TAINT_NOT_READY, "effect": "NoSchedule"})
        elif rt.has_status:
            obj.pop("status", None)  # custom resources with a status subresource ignore it on create

    def _admit_pod(self, pod: dict[str, Any]) -> None:
        spec = pod.setdefault("spec", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("enableServiceLinks", True)
        for field in ("containers", "initContainers"):
            for container in spec.get(field) or []:
                resources = container.setdefault("resources", {})
                limits = resources.get("limits") or {}
                if limits:  # API defaulting: a limit without a request requests the limit
                    requests = resources.setdefault("requests", {})
                    for resource, amount in limits.items():
                        requests.setdefault(resource, amount)
        self._admit_priority(pod, spec)
        tolerations = spec.get("tolerations") or []
        for key in (TAINT_NOT_READY, TAINT_UNREACHABLE):
            if not any(t.get("key") in (key, "", None) and t.get("effect") in ("NoExecute", "", None)
                       for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": 300})
        spec["tolerations"] = tolerations
        pod["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}

    def _admit_priority(self, pod: dict[str, Any], spec: dict[str, Any]) -> None:
        """The Priority admission plugin: the pod's priority comes from its PriorityClass (or the global
        default, or 0); an integer the pod brings itself must match it, or the pod is refused."""
        meta = pod.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or ""
        class_name = spec.get("priorityClassName")
        if class_name:
            entry = self.store.entry(self._priority_classes, "", class_name)
            if entry is None:
                message = f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found'
                raise ApiError(403, "Forbidden", message, {"name": name, "kind": "pods"})
        else:
            entry = next((e for e in self.store.entries(self._priority_classes)
                          if e.obj.get("globalDefault")), None)
        value = 0 if entry is None else int(entry.obj.get("value", 0))
        given = spec.get("priority")
        if given is not None and given != value:
            message = (f'pods "{name}" is forbidden: the integer value of priority ({given}) must not be '
                       f"provided in pod spec; priority admission controller computed {value} from the given "
                       "PriorityClass name")
            raise ApiError(403, "Forbidden", message, {"name": name, "kind": "pods"})
        policy = (entry.obj if entry else {}).get("preemptionPolicy", "PreemptLowerPriority")
        if spec.get("preemptionPolicy") not in (None, policy):
            message = (f'pods "{name}" is forbidden: the string value of PreemptionPolicy '
                       f"({spec['preemptionPolicy']}) must not be provided in pod spec; priority admission "
                       f"controller computed {policy} from the given PriorityClass name")
            raise ApiError(403, "Forbidden", message, {"name": name, "kind": "pods"})
        spec["priority"] = value
        spec["preemptionPolicy"] = policy
        if entry is not None:
            spec["priorityClassName"] = entry.obj["metadata"]["name"]

    # ------------------------------------------------------------------ HTTP: plain endpoints

    async def _version(self, request: web.Request) -> web.Response:
        return _json_response(orjson.dumps(VERSION_INFO))

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _http_compact(self, request: web.Request) -> web.Response:
        return _json_response(orjson.dumps({"resourceVersion": str(self.compact())}))

    async def _http_cut(self, request: web.Request) -> web.Response:
        return _json_response(orjson.dumps({"cut": self.cut_watches()}))

    async def _http_garble(self, request: web.Request) -> web.Response:
        return _json_response(orjson.dumps({"garbled": self.garble_watches()}))

    async def _http_end(self, request: web.Request) -> web.Response:
        return _json_response(orjson.dumps({"ended": self.end_watches()}))

    async def _http_bind_conflict(self, request: web.Request) -> web.Response:
        try:
            body = await self._json_object(request)
            self.inject_bind_conflict(str(body.get("namespace") or "default"), str(body["name"]),
                                      str(body["node"]))
        except KeyError as exc:
            return _status_response(bad_request(f"missing field {exc}"))
        except ApiError as err:
            return _status_response(err)
        return _json_response(b'{"ok":true}', 201)

    async def _http_stats(self, request: web.Request) -> web.Response:
        return _json_response(orjson.dumps(self.stats()))

    # ------------------------------------------------------------------ HTTP: the Kubernetes API

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        try:
            parts = [p for p in request.path.split("/") if p]
            if not parts or parts[0] not in ("api", "apis"):
                raise _NO_ROUTE
            if self.aggregation is not None:
                aggregated = await self.aggregation.handle(request, parts)
                if aggregated is not None:
                    return aggregated
            discovery = self._discovery(parts)
            if discovery is not None:
                if request.method != "GET":
                    raise _method_not_allowed(request.method)
                return _json_response(orjson.dumps(discovery))
            route = self._route(parts)
            if route is None:  # the legacy POST .../namespaces/{ns}/bindings
                return await self._legacy_binding(request, parts)
            return await self._dispatch(request, route)
        except ApiError as err:
            return _status_response(err)

    def _route(self, parts: list[str]) -> _Route | None:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) < 4:
                raise _NO_ROUTE
            group, version, rest = parts[1], parts[2], parts[3:]
        watch = False
        if rest and rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise _NO_ROUTE
        if group == "" and version == "v1" and rest == ["bindings"] and namespace is not None and not watch:
            return None
        rt = self.registry.lookup(group, version, rest[0])
        if rt is None or (namespace is not None and not rt.namespaced):
            raise _NO_ROUTE
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        return _Route(rt, namespace, name, subresource, watch)

    def _count(self, resource: str, verb: str) -> None:
        self._requests[resource][verb] += 1

    async def _dispatch(self, request: web.Request, route: _Route) -> web.StreamResponse:
        method = request.method
        query = request.query
        rt = route.rt
        if route.name is None:
            if method == "GET":
                if route.watch or _truthy(query.get("watch")):
                    self._count(rt.key, "watch")
                    return await self._watch(request, route, query)
                self._count(rt.key, "list")
                return self._list(route, query)
            if method == "POST":
                self._count(rt.key, "create")
                return await self._create(request, route)
            if method == "DELETE":
                self._count(rt.key, "deletecollection")
                return await self._delete_collection(request, route, query)
            raise _method_not_allowed(method)
        if route.subresource is None:
            if method == "GET":
                if route.watch or _truthy(query.get("watch")):
                    self._count(rt.key, "watch")
                    return await self._watch(request, route, query)
                self._count(rt.key, "get")
                return _json_response(self._existing(route).raw)
            if method == "PUT":
                self._count(rt.key, "update")
                return await self._replace(request, route)
            if method == "PATCH":
                self._count(rt.key, "patch")
                self._maybe_fail(rt.key, "patch", route.namespace, route.name)
                return await self._patch(request, route)
            if method == "DELETE":
                self._count(rt.key, "delete")
                return await self._delete(request, route, query)
            raise _method_not_allowed(method)
        resource = f"{rt.key}/{route.subresource}"
        if route.subresource == "status" and rt.has_status:
            if method == "GET":
                self._count(resource, "get")
                return _json_response(self._existing(route).raw)
            if method == "PUT":
                self._count(resource, "update")
                return await self._replace(request, route)
            if method == "PATCH":
                self._count(resource, "patch")
                return await self._patch(request, route)
            raise _method_not_allowed(method)
        if route.subresource == "binding" and rt is self._pods:
            if method != "POST":
                raise _method_not_allowed(method)
            self._count(resource, "create")
            body = await self._json_object(request)
            return self._binding(route.namespace or "default", route.name, body)
        raise _NO_ROUTE

    def _existing(self, route: _Route) -> Entry:
        entry = self.store.entry(route.rt, route.namespace or "", route.name or "")
        if entry is None:
            raise not_found(route.rt, route.name or "")
        return entry

    @staticmethod
    async def _json_body(request: web.Request) -> Any:
        raw = await request.read()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"the body of the request could not be decoded as JSON: {exc}") from exc

    async def _json_object(self, request: web.Request) -> dict[str, Any]:
        body = await self._json_body(request)
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        return body

    # ---- list

    def _selector(self, route: _Route, query: MultiMapping[str]) -> Selector | None:
        fields = query.get("fieldSelector") or ""
        if route.name is not None:  # a watch on one object is a watch with a name selector
            fields = f"metadata.name={route.name}" + (f",{fields}" if fields else "")
        return Selector.parse(query.get("labelSelector"), fields)

    def _list(self, route: _Route, query: MultiMapping[str]) -> web.Response:
        rt = route.rt
        rv = self.store.rv
        rv_text = query.get("resourceVersion")
        if rv_text and query.get("resourceVersionMatch") == "Exact":
            try:
                self.store.check_version(_parse_rv(rv_text))
            except ApiError as err:
                if err.code != 410:
                    raise
                message = "The resourceVersion for the provided list is too old."
                raise ApiError(410, "Expired", message) from err
        selector = self._selector(route, query)
        entries = self.store.entries(rt, route.namespace)
        matching = entries if selector is None else (e for e in entries if selector.matches(e.obj))
        limit = _parse_int(query.get("limit"), "limit")
        token = query.get("continue")
        meta: dict[str, Any] = {}
        if limit or token:
            keyed = sorted(((e.obj["metadata"].get("namespace", ""), e.obj["metadata"]["name"]), e.raw)
                           for e in matching)
            if token:
                rv, start = _decode_continue(token)
                keyed = keyed[bisect.bisect_right([key for key, _ in keyed], start):]
            if limit and len(keyed) > limit:
                meta["continue"] = _encode_continue(rv, keyed[limit - 1][0])
                meta["remainingItemCount"] = len(keyed) - limit
                keyed = keyed[:limit]
            items = [raw for _, raw in keyed]
        else:
            items = [e.raw for e in matching]
        meta = {"resourceVersion": str(rv), **meta}
        head = orjson.dumps({"kind": rt.list_kind_name, "apiVersion": rt.api_version, "metadata": meta})
        return _json_response(head[:-1] + b',"items":[' + b",".join(items) + b"]}")

    # ---- watch

    async def _watch(self, request: web.Request, route: _Route,
                     query: MultiMapping[str]) -> web.StreamResponse:
        rt = route.rt
        selector = self._selector(route, query)
        rv_text = query.get("resourceVersion") or ""
        send_initial = _truthy(query.get("sendInitialEvents"))
        since = None if send_initial or rv_text in ("", "0") else _parse_rv(rv_text)
        timeout = query.get("timeoutSeconds")
        timeout_s = float(_parse_int(timeout, "timeoutSeconds")) if timeout else None
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON,
                                                           "Cache-Control": "no-cache, private"})
        response.enable_chunked_encoding()
        try:
            watcher, initial = self.store.watch(rt, route.namespace, selector, since,
                                                _truthy(query.get("allowWatchBookmarks")))
        except ApiError as err:  # 410 Expired: the real server answers 200 and one ERROR event
            await response.prepare(request)
            await response.write(b'{"type":"ERROR","object":' + orjson.dumps(err.status()) + b"}\n")
            await response.write_eof()
            return response
        if send_initial:
            initial.append(self._bookmark(rt, self.store.rv, initial_end=True))
        watcher.transport = request.transport
        timer = asyncio.get_running_loop().call_later(timeout_s, watcher.close) if timeout_s else None
        try:
            await response.prepare(request)
            await self._write_batched(response, initial)
            del initial
            await self._pump(watcher, response)
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away; nothing to tell it
        finally:
            watcher.close(drop=True)
            self.store.unwatch(watcher)
            if timer is not None:
                timer.cancel()
        return response

    @staticmethod
    async def _write_batched(response: web.StreamResponse, events: list[bytes]) -> None:
        batch: list[bytes] = []
        size = 0
        for data in events:
            batch.append(data)
            size += len(data)
            if size >= _WATCH_WRITE_BATCH:
                await response.write(b"".join(batch))
                batch, size = [], 0
        if batch:
            await response.write(b"".join(batch))

    @staticmethod
    async def _pump(watcher: Watcher, response: web.StreamResponse) -> None:
        """Send buffered events, many per write, until the watcher is closed and drained."""
        buffer = watcher.buffer
        while True:
            await watcher.wait()
            if buffer:
                chunk = b"".join(buffer)
                buffer.clear()
                await response.write(chunk)
            elif watcher.closed:
                return

    # ---- create, replace, patch

    async def _create(self, request: web.Request, route: _Route) -> web.Response:
        rt = route.rt
        body = await self._json_object(request)
        meta = body.get("metadata")
        if meta is None:
            meta = body["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced and route.namespace is not None:
            if meta.get("namespace") and meta["namespace"] != route.namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent "
                                  "on the request")
            meta["namespace"] = route.namespace
        self._admit(rt, body)
        return _json_response(self.store.create(rt, body).raw, 201)

    async def _replace(self, request: web.Request, route: _Route) -> web.Response:
        body = await self._json_object(request)
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        name = meta.setdefault("name", route.name)
        if name != route.name:
            raise bad_request(f"the name of the object ({name}) does not match the name on the URL "
                              f"({route.name})")
        old = self._existing(route)
        rv = meta.get("resourceVersion")
        if rv and rv != old.obj["metadata"]["resourceVersion"]:
            raise stale(route.rt, route.name or "")
        return _json_response(self._commit(route, old, body).raw)

    async def _patch(self, request: web.Request, route: _Route) -> web.Response:
        rt = route.rt
        content_type = request.content_type
        if content_type not in (patches.MERGE_PATCH, patches.STRATEGIC_MERGE_PATCH, patches.JSON_PATCH) or (
                content_type == patches.STRATEGIC_MERGE_PATCH and rt.group not in BUILTIN_GROUPS):
            accepted = [patches.JSON_PATCH, patches.MERGE_PATCH]
            if rt.group in BUILTIN_GROUPS:
                accepted.append(patches.STRATEGIC_MERGE_PATCH)
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           f"accepted media types include: {', '.join(accepted)}")
        body = await self._json_body(request)
        old = self._existing(route)
        try:
            if content_type == patches.JSON_PATCH:
                result = patches.json_patch(old.copy(), body)
            elif not isinstance(body, dict):
                raise bad_request("a merge patch must be a JSON object")
            elif content_type == patches.MERGE_PATCH:
                result = patches.merge_patch(old.copy(), body)
            else:
                result = patches.strategic_merge_patch(old.copy(), body)
        except patches.PatchError as exc:
            raise ApiError(422, "Invalid", str(exc)) from exc
        if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
            raise bad_request("the patched object must be a JSON object with metadata")
        rv = result["metadata"].get("resourceVersion")
        if rv and rv != old.obj["metadata"]["resourceVersion"]:
            raise stale(rt, route.name or "")
        return _json_response(self._commit(route, old, result).raw)

    def _commit(self, route: _Route, old: Entry, new: dict[str, Any]) -> Entry:
        """Store an update; the status subresource and the main resource each change only their part."""
        rt = route.rt
        if route.subresource == "status":
            final = {k: v for k, v in old.obj.items() if k not in ("metadata", "status")}
            meta = dict(old.obj["metadata"])
            new_meta = new.get("metadata") or {}
            for key in ("labels", "annotations"):
                if key in new_meta:
                    meta[key] = new_meta[key]
                else:
                    meta.pop(key, None)
            final["metadata"] = meta
            if "status" in new:
                final["status"] = new["status"]
        else:
            final = new
            if rt.has_status:
                if "status" in old.obj:
                    final["status"] = old.obj["status"]
                else:
                    final.pop("status", None)
        entry = self.store.update(rt, final, old)
        meta = entry.obj["metadata"]
        if rt is not self._pods and meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.store.delete(rt, entry)  # the last finalizer of an object being deleted is gone
        return entry

    # ---- delete

    async def _delete_options(self, request: web.Request, query: MultiMapping[str]) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                try:
                    options = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise bad_request(f"invalid DeleteOptions: {exc}") from exc
                if not isinstance(options, dict):
                    raise bad_request("invalid DeleteOptions")
        if query.get("gracePeriodSeconds") is not None:
            options["gracePeriodSeconds"] = _parse_int(query.get("gracePeriodSeconds"), "gracePeriodSeconds")
        return options

    async def _delete(self, request: web.Request, route: _Route, query: MultiMapping[str]) -> web.Response:
        options = await self._delete_options(request, query)
        old = self._existing(route)
        preconditions = options.get("preconditions") or {}
        meta = old.obj["metadata"]
        for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = preconditions.get(field)
            if wanted and wanted != meta.get(field):
                raise conflict(route.rt, route.name or "", f"Precondition failed: {label} in precondition: "
                               f"{wanted}, {label} in object meta: {meta.get(field)}")
        return _json_response(self._remove(route.rt, old, options.get("gracePeriodSeconds")).raw)

    async def _delete_collection(self, request: web.Request, route: _Route,
                                 query: MultiMapping[str]) -> web.Response:
        options = await self._delete_options(request, query)
        selector = self._selector(route, query)
        rt = route.rt
        targets = [e for e in self.store.entries(rt, route.namespace)
                   if selector is None or selector.matches(e.obj)]
        items = [self._remove(rt, entry, options.get("gracePeriodSeconds")).raw for entry in targets]
        head = orjson.dumps({"kind": rt.list_kind_name, "apiVersion": rt.api_version,
                             "metadata": {"resourceVersion": str(self.store.rv)}})
        return _json_response(head[:-1] + b',"items":[' + b",".join(items) + b"]}")

    def _remove(self, rt: ResourceType, old: Entry, grace: int | None) -> Entry:
        """Delete at once, or for a bound running pod start a graceful deletion (Terminating); an object
        with finalizers is only marked (deletionTimestamp) and goes when its last finalizer is removed."""
        if rt is not self._pods:
            if old.obj["metadata"].get("finalizers"):
                if old.obj["metadata"].get("deletionTimestamp"):
                    return old
                return self.store.mark_deleting(rt, old, 0)
            return self.store.delete(rt, old)
        pod = old.obj
        spec = pod.get("spec") or {}
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds")
            grace = 30 if grace is None else grace
        phase = (pod.get("status") or {}).get("phase")
        if grace <= 0 or not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return self.store.delete(rt, old)
        current = pod["metadata"].get("deletionGracePeriodSeconds")
        if current is not None and current <= grace:
            return old  # already terminating with a grace period at least this short
        return self.store.mark_deleting(rt, old, grace)

    # ---- bindings

    async def _legacy_binding(self, request: web.Request, parts: list[str]) -> web.Response:
        if request.method != "POST":
            raise _method_not_allowed(request.method)
        self._count("bindings", "create")
        body = await self._json_object(request)
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise bad_request("binding metadata.name is required")
        return self._binding(parts[3], name, body)

    def _binding(self, namespace: str, name: str | None, body: dict[str, Any]) -> web.Response:
        target = body.get("target") or {}
        node = target.get("name") if isinstance(target, dict) else None
        meta = body.get("metadata") or {}
        if not node:
            raise ApiError(422, "Invalid", f'Binding.core "{name}" is invalid: target.name: Required value')
        self._maybe_fail("pods/binding", "create", namespace, name)
        injected = self._bind_conflicts.pop((namespace, name or ""), None)
        if injected is not None:
            with contextlib.suppress(ApiError):  # the competing binding may fail too (pod gone, bound)
                self._bind(namespace, name or "", injected, None, None)
        try:
            self._bind(namespace, name or "", node, meta.get("uid"), meta.get("annotations"))
        except ApiError as err:
            if err.code == 409:
                self._bindings_conflict += 1
            raise
        self._bindings_ok += 1
        return _json_response(_BIND_SUCCESS, 201)

    def _bind(self, namespace: str, name: str, node: str, uid: str | None,
              annotations: dict[str, str] | None) -> None:
        old = self.store.entry(self._pods, namespace, name)
        if old is None:
            raise not_found(self._pods, name)
        meta = old.obj["metadata"]
        if uid and uid != meta.get("uid"):
            raise conflict(self._pods, name, f"Precondition failed: UID in precondition: {uid}, "
                                             f"UID in object meta: {meta.get('uid')}", "binding")
        if meta.get("deletionTimestamp"):
            raise conflict(self._pods, name, f"pod {name} is being deleted, cannot be assigned to a host",
                           "binding")
        bound = (old.obj.get("spec") or {}).get("nodeName")
        if bound:
            raise conflict(self._pods, name, f'pod {name} is already assigned to node "{bound}"', "binding")
        pod = old.copy()
        pod["spec"]["nodeName"] = node
        if annotations:
            pod["metadata"].setdefault("annotations", {}).update(annotations)
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conditions
        self.store.update(self._pods, pod, old)

    # ---- discovery (enough for kubectl)

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        types = list(self.registry)
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                    "serverAddress": self.url.removeprefix("http://")}]}
        if parts == ["apis"]:
            groups = sorted({rt.group for rt in types} - {""})
            return {"kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [_api_group(g, types) for g in groups]}
        if len(parts) == 2 and parts[0] == "apis":
            if not any(rt.group == parts[1] for rt in types):
                raise _NO_ROUTE
            return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(parts[1], types)}
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            return None
        members = [rt for rt in types if rt.group == group and rt.version == version]
        if not members:
            raise _NO_ROUTE
        resources: list[dict[str, Any]] = []
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        for rt in members:
            resources.append({"name": rt.plural, "singularName": rt.kind.lower(), "namespaced": rt.namespaced,
                              "kind": rt.kind, "verbs": verbs})
            if rt.has_status:
                resources.append({"name": f"{rt.plural}/status", "singularName": "",
                                  "namespaced": rt.namespaced, "kind": rt.kind,
                                  "verbs": ["get", "patch", "update"]})
            if rt is self._pods:
                resources.append({"name": "pods/binding", "singularName": "", "namespaced": True,
                                  "kind": "Binding", "verbs": ["create"]})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": members[0].api_version,
                "resources": resources}


def _api_group(group: str, types: list[ResourceType]) -> dict[str, Any]:
    versions = sorted({rt.version for rt in types if rt.group == group})
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": entries, "preferredVersion": entries[0]}


def _method_not_allowed(method: str) -> ApiError:
    message = f"the server does not allow this method on the requested resource ({method})"
    return ApiError(405, "MethodNotAllowed", message, {})


def _parse_int(text: str | None, what: str) -> int:
    if not text:
        return 0
    try:
        value = float(text)
    except ValueError as exc:
        raise bad_request(f"invalid {what} {text!r}") from exc
    if not math.isfinite(value) or value < 0:
        raise bad_request(f"invalid {what} {text!r}")
    return int(value)


def _encode_continue(rv: int, last: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"rv": rv, "start": list(last)})).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise bad_request("continue key is not valid") from exc


def _qos_class(spec: dict[str, Any]) -> str:
    """BestEffort, Guaranteed or Burstable, from cpu and memory requests and limits, as the kubelet says."""
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for resource in ("cpu", "memory"):
            if resource in requests or resource in limits:
                any_set = True
            if resource not in limits or not _same_quantity(requests.get(resource, limits[resource]),
                                                            limits[resource]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except (QuantityError, TypeError):
        return bool(a == b)
