"""The visibility API: what the queue knows, read-only, for users, through the Kubernetes API with their own
credentials, so that RBAC decides who sees what.

Design. The daemon is an extension API server behind kube-apiserver's aggregation layer, as Kueue's
visibility API and metrics-server are: an APIService `v1alpha1.visibility.ai-scheduler.io`
(deploy/visibility/) sends every request under `/apis/visibility.ai-scheduler.io/v1alpha1` to this HTTPS
listener (`server.visibilityPort`). Users never reach the daemon directly: they call the API server
with their own token or certificate, the API server authenticates them and checks RBAC for the path (verb
`list` or `get` on the resource `pendingpods`, `quotas`, `gpus`), then proxies the request here.

Delegated authentication. The proxied request comes over TLS with the API server's front-proxy client
certificate (`--proxy-client-cert-file`), and the user in the headers `X-Remote-User`, `X-Remote-Group`,
`X-Remote-Extra-*` (`--requestheader-*` flags). The headers are trusted only from a client whose certificate
verifies against the requestheader CA and whose common name is one of the allowed names: both come from the
ConfigMap `kube-system/extension-apiserver-authentication` that the API server publishes (the daemon's
ServiceAccount reads it through the standard `extension-apiserver-authentication-reader` Role). Anything else
is 401. The serving certificate is the configured one, or a self-signed one made at start (the APIService
then sets `insecureSkipTLSVerify`).

Delegated authorization. The daemon does not trust that its caller checked anything: each request is
authorized again with a SubjectAccessReview (`system:auth-delegator`), cached for ten seconds per question.
What a user sees of a waiting pod is decided per namespace by `get pendingpods` there:
- `namespaces/{ns}/pendingpods` (PendingPodList) and `namespaces/{ns}/pendingpods/{name}` (PendingPod):
  refused (403) without `get pendingpods` in `ns`;
- `pendingpods` (cluster scope, `list pendingpods` at cluster scope): every waiting pod in queue order;
  those of namespaces where the user may not `get pendingpods` are anonymous (no namespace, name, uid,
  user, gang, reason or reservation; their queue, level, positions and priority stay), so that a user
  with a RoleBinding in namespace A sees A's pods and where they stand among everyone else's;
- `quotas` (QuotaList, `list quotas`), `gpus` (GpuNodeList, `list gpus`) and `gpus/{node}` (GpuNode,
  `get gpus`), the pods holding GPUs anonymous as above;
- `decisions` (DecisionList, `list decisions`): the last scheduling decisions, newest first, anonymous
  as the pending pods are;
- `usage` (UsageList, `list usage`): what was used over a period, from the accounting database
  (`?since=24h&by=user&step=1h`): GPU-, cpu- and memory-hours by user, group, queue, Task, namespace or
  GPU model, and each one's GPU-hours per interval (at most 200); who sees it is RBAC's `list usage`;
- `ui`: the web page (`visibility/webui.py`), under the rule of `pendingpods`.
Discovery (`/apis`, `/apis/visibility.ai-scheduler.io`, `/apis/visibility.ai-scheduler.io/v1alpha1`)
needs only an authenticated proxy: the aggregator reads it to register the resources and to check health.
Why `get` and not `list` decides a namespace: to call the cluster-scope path at all, a user needs `list
pendingpods` at the cluster scope (deploy/visibility/ grants it to every signed-in user), and in RBAC that
grant covers `list` in every namespace too; `get` is what a RoleBinding in one namespace adds.

The requestheader ConfigMap is read once, at start (retried until it can be read): a rotated front-proxy
CA takes a restart of the daemon (servers built on k8s.io/apiserver follow the ConfigMap; this one does
not yet).

The objects come from `visibility.py` (`pending_pod_items`, `quota_items`, `gpu_node_items`,
`decision_items`), computed on the event loop at each request, between two scheduling steps, so that
each answer is one consistent state.
"""

from __future__ import annotations

import asyncio
import ssl
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from ai_scheduler import pki
from ai_scheduler.accounting.store import BY
from ai_scheduler.log import JsonLogger
from ai_scheduler.quantity import parse_duration
from ai_scheduler.visibility.webui import page

GROUP = "visibility.ai-scheduler.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
PREFIX = f"/apis/{GROUP_VERSION}"
AUTH_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
AUTHORIZATION_TTL_SECONDS = 10.0  # as the delegated authorizer of k8s.io/apiserver caches its answers
AUTHORIZATION_CACHE_SIZE = 10_000
CONFIGMAP_RETRY_SECONDS = 10.0
# The front proxy's headers when the ConfigMap names none (kube-apiserver's usual flags).
USERNAME_HEADERS = ("X-Remote-User",)
UID_HEADERS = ("X-Remote-Uid",)
GROUP_HEADERS = ("X-Remote-Group",)
EXTRA_PREFIXES = ("X-Remote-Extra-",)

class Answer(Protocol):
    """An API server's answer, as api/'s client gives it (its `ApiResult`)."""

    body: dict[str, Any]

    @property
    def ok(self) -> bool: ...

    @property
    def message(self) -> str: ...


class AskingClient(Protocol):
    """All the server asks the API server: whether a user may do something (a SubjectAccessReview, which
    changes nothing) and the front proxy's ConfigMap. The daemon hands it its client; this package
    imports nothing of api/ (an import contract), so nothing here can write to the API."""

    async def create_subject_access_review(self, review: dict[str, Any]) -> Answer: ...

    async def get_config_map(self, namespace: str, name: str) -> Answer: ...


# Discovery: the resources, as `kubectl api-resources` shows them. `pendingpods` is namespaced and is also
# listed across namespaces (`kubectl get pendingpods -A` asks for the cluster-scope path).
RESOURCES: tuple[dict[str, Any], ...] = (
    {"name": "pendingpods", "singularName": "pendingpod", "namespaced": True, "kind": "PendingPod",
     "verbs": ["get", "list"]},
    {"name": "quotas", "singularName": "quota", "namespaced": False, "kind": "Quota", "verbs": ["list"]},
    {"name": "gpus", "singularName": "gpu", "namespaced": False, "kind": "GpuNode", "verbs": ["get", "list"]},
    {"name": "decisions", "singularName": "decision", "namespaced": False, "kind": "Decision",
     "verbs": ["list"]},
    {"name": "usage", "singularName": "usage", "namespaced": False, "kind": "Usage", "verbs": ["list"]},
)
USAGE_STEPS = 200  # the most intervals a `usage` series has


@dataclass(frozen=True, slots=True)
class Identity:
    """The user the front proxy vouches for."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestHeaderSettings:
    """What `kube-system/extension-apiserver-authentication` says about the front proxy (requestheader-*)."""

    client_ca: str  # PEM
    allowed_names: tuple[str, ...] = ()  # empty: any certificate the CA signed
    username_headers: tuple[str, ...] = USERNAME_HEADERS
    uid_headers: tuple[str, ...] = UID_HEADERS
    group_headers: tuple[str, ...] = GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = EXTRA_PREFIXES

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> RequestHeaderSettings:
        def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            text = data.get(key)
            if not text:
                return default
            value = orjson.loads(text)
            return tuple(str(v) for v in value) if isinstance(value, list) else default

        ca = data.get("requestheader-client-ca-file", "")
        if not ca:
            raise ValueError("no requestheader-client-ca-file: the API server has no aggregation layer")
        return cls(
            client_ca=ca,
            allowed_names=names("requestheader-allowed-names", ()),
            username_headers=names("requestheader-username-headers", USERNAME_HEADERS),
            uid_headers=names("requestheader-uid-headers", UID_HEADERS),
            group_headers=names("requestheader-group-headers", GROUP_HEADERS),
            extra_prefixes=names("requestheader-extra-headers-prefix", EXTRA_PREFIXES),
        )

    def identity(self, request: web.Request) -> Identity | None:
        """The user of a request from a front proxy whose certificate was verified against `client_ca`
        (the TLS layer did that), with an allowed name; None for anything else."""
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        if not peer:
            return None
        common_names = [value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"]
        if self.allowed_names and not set(common_names) & set(self.allowed_names):
            return None
        user = next((request.headers[h] for h in self.username_headers if request.headers.get(h)), "")
        if not user:
            return None
        uid = next((request.headers[h] for h in self.uid_headers if request.headers.get(h)), "")
        groups = tuple(g for h in self.group_headers for g in request.headers.getall(h, ()))
        extra: dict[str, list[str]] = {}
        for header, value in request.headers.items():
            for prefix in self.extra_prefixes:
                if header.lower().startswith(prefix.lower()):
                    key = urllib.parse.unquote(header[len(prefix):]).lower()
                    extra.setdefault(key, []).append(value)
        return Identity(user, groups, uid, {k: tuple(v) for k, v in extra.items()})


Authorize = Callable[[Identity, str, str, str, str], Awaitable[bool]]  # identity, verb, resource, ns, name


class SubjectAccessReviews:
    """Delegated authorization: ask the API server whether the identity may do `verb` on a resource of the
    visibility group, through a SubjectAccessReview; answers are cached for AUTHORIZATION_TTL_SECONDS. An
    unanswered review denies."""

    def __init__(self, client: AskingClient, logger: JsonLogger, clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.log = logger
        self._clock = clock
        self._cache: dict[tuple[Any, ...], tuple[bool, float]] = {}

    async def __call__(self, who: Identity, verb: str, resource: str, namespace: str, name: str) -> bool:
        key = (who.user, who.groups, who.uid, tuple(sorted(who.extra.items())), verb, resource, namespace,
               name)
        now = self._clock()
        known = self._cache.get(key)
        if known is not None and known[1] > now:
            return known[0]
        attributes = {"group": GROUP, "version": VERSION, "resource": resource, "verb": verb}
        if namespace:
            attributes["namespace"] = namespace
        if name:
            attributes["name"] = name
        spec: dict[str, Any] = {"user": who.user, "groups": list(who.groups),
                                "resourceAttributes": attributes}
        if who.uid:
            spec["uid"] = who.uid
        if who.extra:
            spec["extra"] = {k: list(v) for k, v in who.extra.items()}
        result = await self.client.create_subject_access_review(
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        if not result.ok:
            self.log.warning("visibility.authorization_failed", user=who.user, verb=verb, resource=resource,
                             namespace=namespace, error=result.message)
            return False
        allowed = bool((result.body.get("status") or {}).get("allowed"))
        if len(self._cache) >= AUTHORIZATION_CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = (allowed, now + AUTHORIZATION_TTL_SECONDS)
        return allowed


@dataclass(slots=True)
class VisibilitySource:
    """Where the objects come from (visibility.py over the daemon's core), read at each request."""

    pending: Callable[[], list[dict[str, Any]]]
    quotas: Callable[[], list[dict[str, Any]]]
    gpus: Callable[[], list[dict[str, Any]]]
    decisions: Callable[[], list[dict[str, Any]]] = list  # the last decisions, newest first
    # What was used (accounting): (since, until, by, step) -> the body, or None without a database.
    usage: Callable[[float, float, str, float], Awaitable[dict[str, Any] | None]] | None = None


def status(code: int, reason: str, message: str) -> web.Response:
    """A Kubernetes Status, as the API server answers a failure."""
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


def _json(body: Mapping[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _list(kind: str, items: list[dict[str, Any]]) -> web.Response:
    return _json({"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"resourceVersion": ""},
                  "items": items})


def anonymous(item: dict[str, Any]) -> dict[str, Any]:
    """A PendingPod as someone who may not see its namespace sees it: where it stands, not whose it is."""
    return {
        **item,
        "metadata": {"namespace": None, "name": None, "uid": None},
        "user": None, "gang": None, "gangStatus": None, "reason": None, "reservation": None,
        "anonymous": True,
    }


def anonymous_decision(item: dict[str, Any]) -> dict[str, Any]:
    """A decision about a pod of a namespace the user may not see: when, and its result, not whose."""
    return {**item, "metadata": {"namespace": None, "name": None, "uid": None}, "pod": None, "message": None,
            "anonymous": True}


def self_signed(folder: Path, host: str = "localhost") -> tuple[Path, Path]:
    """A self-signed serving certificate and key (PEM files in `folder`) for localhost, 127.0.0.1 and the
    in-cluster names of the Service `ai-scheduler-visibility`."""
    key = pki.new_key()
    cert = pki.certificate(
        "ai-scheduler-visibility", key, days=365,
        names=(host, "ai-scheduler-visibility.kube-system.svc",
               "ai-scheduler-visibility.kube-system.svc.cluster.local", "127.0.0.1"),
    )
    return pki.write(folder, "tls", cert, key)


class VisibilityServer:
    """The HTTPS listener of the visibility API (see the module's docstring)."""

    def __init__(
        self, source: VisibilitySource, authorize: Authorize, logger: JsonLogger,
        requestheader: RequestHeaderSettings | None = None,
    ) -> None:
        self.source = source
        self.authorize = authorize
        self.log = logger
        self.requestheader = requestheader  # None until the ConfigMap was read: every request is 401
        self.ssl: ssl.SSLContext | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self, host: str, port: int, cert_file: str = "", key_file: str = "") -> int:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        if cert_file:
            context.load_cert_chain(cert_file, key_file or None)
        else:
            with tempfile.TemporaryDirectory(prefix="ai-scheduler-tls-") as folder:
                made = self_signed(Path(folder))
                context.load_cert_chain(*made)
        context.verify_mode = ssl.CERT_OPTIONAL  # a client without a certificate gets 401, not a TLS error
        self.ssl = context
        if self.requestheader is not None:
            self.trust(self.requestheader)
        app = web.Application()
        for path in ("/healthz", "/livez", "/readyz"):
            app.router.add_get(path, self._ok)
        app.router.add_get("/apis", self._groups)
        app.router.add_get(f"/apis/{GROUP}", self._group)
        app.router.add_get(PREFIX, self._resources)
        app.router.add_get(f"{PREFIX}/pendingpods", self._all_pending)
        app.router.add_get(f"{PREFIX}/namespaces/{{namespace}}/pendingpods", self._namespace_pending)
        app.router.add_get(f"{PREFIX}/namespaces/{{namespace}}/pendingpods/{{name}}", self._one_pending)
        app.router.add_get(f"{PREFIX}/quotas", self._quotas)
        app.router.add_get(f"{PREFIX}/gpus", self._gpus)
        app.router.add_get(f"{PREFIX}/gpus/{{node}}", self._gpu_node)
        app.router.add_get(f"{PREFIX}/decisions", self._decisions)
        app.router.add_get(f"{PREFIX}/usage", self._usage)
        app.router.add_get(f"{PREFIX}/ui", self._ui)
        app.router.add_get(f"{PREFIX}/ui/", self._ui)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=context)
        await site.start()
        addresses = self._runner.addresses
        self.port = addresses[0][1] if addresses else port
        return self.port

    def trust(self, settings: RequestHeaderSettings) -> None:
        """Take the front proxy's CA and names (the ConfigMap, read at start or later); ssl.SSLError when
        the CA is not PEM, and then nothing changes."""
        if self.ssl is not None:
            self.ssl.load_verify_locations(cadata=settings.client_ca)
        self.requestheader = settings

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ authentication and authorization
    def _identity(self, request: web.Request) -> Identity | web.Response:
        who = self.requestheader.identity(request) if self.requestheader is not None else None
        if who is None:
            return status(401, "Unauthorized", "only the API server's front proxy, with a user, is served")
        return who

    async def _allowed(
        self, request: web.Request, verb: str, resource: str, namespace: str = "", name: str = ""
    ) -> Identity | web.Response:
        who = self._identity(request)
        if isinstance(who, web.Response):
            return who
        if not await self.authorize(who, verb, resource, namespace, name):
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            return status(403, "Forbidden",
                          f'{resource}.{GROUP}{" " + repr(name) if name else ""} is forbidden: User '
                          f'"{who.user}" cannot {verb} resource "{resource}" in API group "{GROUP}"{where}')
        return who

    # ------------------------------------------------------------------ discovery
    async def _ok(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _groups(self, request: web.Request) -> web.Response:
        who = self._identity(request)
        if isinstance(who, web.Response):
            return who
        return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group_body()]})

    async def _group(self, request: web.Request) -> web.Response:
        who = self._identity(request)
        if isinstance(who, web.Response):
            return who
        return _json({"kind": "APIGroup", "apiVersion": "v1", **_group_body()})

    async def _resources(self, request: web.Request) -> web.Response:
        who = self._identity(request)
        if isinstance(who, web.Response):
            return who
        return _json({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                      "resources": list(RESOURCES)})

    # ------------------------------------------------------------------ resources
    async def _all_pending(self, request: web.Request) -> web.Response:
        who = await self._allowed(request, "list", "pendingpods")
        if isinstance(who, web.Response):
            return who
        return _list("PendingPodList", await self.visible_pending(who))

    async def visible_pending(self, who: Identity) -> list[dict[str, Any]]:
        """Every waiting pod in order; anonymous where the user may not `get pendingpods`."""
        return await self._visible(who, self.source.pending(), anonymous)

    async def _visible(
        self, who: Identity, items: list[dict[str, Any]], hide: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """`items` (with `metadata.namespace`) as the user may see them: `hide` applied to those of the
        namespaces where the user may not `get pendingpods`."""
        if await self.authorize(who, "get", "pendingpods", "", ""):
            return items
        namespaces = list({item["metadata"]["namespace"] for item in items})
        answers = await asyncio.gather(
            *(self.authorize(who, "get", "pendingpods", ns, "") for ns in namespaces))
        seen = {ns for ns, allowed in zip(namespaces, answers, strict=True) if allowed}
        return [item if item["metadata"]["namespace"] in seen else hide(item) for item in items]

    async def _decisions(self, request: web.Request) -> web.Response:
        who = await self._allowed(request, "list", "decisions")
        if isinstance(who, web.Response):
            return who
        return _list("DecisionList", await self._visible(who, self.source.decisions(), anonymous_decision))

    async def _namespace_pending(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        who = await self._allowed(request, "get", "pendingpods", namespace)
        if isinstance(who, web.Response):
            return who
        items = [item for item in self.source.pending() if item["metadata"]["namespace"] == namespace]
        return _list("PendingPodList", items)

    async def _one_pending(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        who = await self._allowed(request, "get", "pendingpods", namespace, name)
        if isinstance(who, web.Response):
            return who
        for item in self.source.pending():
            if item["metadata"]["namespace"] == namespace and item["metadata"]["name"] == name:
                return _json(item)
        return status(404, "NotFound", f'pendingpods.{GROUP} "{name}" not found: the pod is not waiting')

    async def _quotas(self, request: web.Request) -> web.Response:
        who = await self._allowed(request, "list", "quotas")
        if isinstance(who, web.Response):
            return who
        return _list("QuotaList", self.source.quotas())

    async def _gpus(self, request: web.Request) -> web.Response:
        who = await self._allowed(request, "list", "gpus")
        if isinstance(who, web.Response):
            return who
        return _list("GpuNodeList", await self._holders_visible(who, self.source.gpus()))

    async def _holders_visible(self, who: Identity, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """GPU nodes with the holders of namespaces where the user may not `get pendingpods` anonymous
        (namespace and name None: how much they hold stays)."""
        holders = [h for node in nodes for device in node.get("devices") or () for h in device["holders"]]
        if not holders or await self.authorize(who, "get", "pendingpods", "", ""):
            return nodes
        namespaces = list({h["namespace"] for h in holders})
        answers = await asyncio.gather(
            *(self.authorize(who, "get", "pendingpods", ns, "") for ns in namespaces))
        seen = {ns for ns, allowed in zip(namespaces, answers, strict=True) if allowed}
        return [{**node, "devices": [
            {**device, "holders": [h if h["namespace"] in seen else {**h, "namespace": None, "name": None}
                                   for h in device["holders"]]}
            for device in node.get("devices") or ()]} for node in nodes]

    async def _gpu_node(self, request: web.Request) -> web.Response:
        node = request.match_info["node"]
        who = await self._allowed(request, "get", "gpus", "", node)
        if isinstance(who, web.Response):
            return who
        for item in self.source.gpus():
            if item["metadata"]["name"] == node:
                return _json((await self._holders_visible(who, [item]))[0])
        return status(404, "NotFound", f'gpus.{GROUP} "{node}" not found: no managed GPUs on that node')

    async def _usage(self, request: web.Request) -> web.Response:
        """What was used over a period (accounting): `?since=7d&by=user&step=1h`."""
        who = await self._allowed(request, "list", "usage")
        if isinstance(who, web.Response):
            return who
        query = request.query
        until = time.time()
        since_s = parse_duration(query.get("since", "24h"))
        step_s = parse_duration(query.get("step", "1h"))
        by = query.get("by", "user")
        if since_s is None or step_s is None or step_s <= 0 or by not in BY:
            return status(400, "BadRequest", "since and step must be durations (24h, 15m), by one of "
                          + ", ".join(BY))
        step = max(step_s, since_s / USAGE_STEPS)
        body = await self.source.usage(until - since_s, until, by, step) if self.source.usage else None
        if body is None:
            return status(404, "NotFound", "no accounting database: set accounting.database")
        return _json({"apiVersion": GROUP_VERSION, "kind": "UsageList", "metadata": {}, **body})

    async def _ui(self, request: web.Request) -> web.Response:
        who = await self._allowed(request, "list", "pendingpods")
        if isinstance(who, web.Response):
            return who
        return web.Response(text=page(), content_type="text/html")


def _group_body() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [version], "preferredVersion": version}


async def read_requestheader(client: AskingClient) -> RequestHeaderSettings:
    """The front proxy's CA and names from `kube-system/extension-apiserver-authentication`."""
    result = await client.get_config_map(*AUTH_CONFIGMAP)
    if not result.ok:
        raise RuntimeError(f"cannot read ConfigMap {'/'.join(AUTH_CONFIGMAP)}: {result.message}")
    return RequestHeaderSettings.from_configmap(result.body.get("data") or {})


async def trust_front_proxy(server: VisibilityServer, client: AskingClient, logger: JsonLogger) -> None:
    """Read the requestheader settings until they are there (the server answers 401 until then), then
    keep them; the daemon runs this as a task beside the server."""
    while True:
        try:
            settings = await read_requestheader(client)
        except (RuntimeError, ValueError) as error:
            logger.error("visibility.no_front_proxy", error=str(error),
                         detail=f"every request is refused until it can be read; retry in "
                                f"{CONFIGMAP_RETRY_SECONDS:g} s")
            await asyncio.sleep(CONFIGMAP_RETRY_SECONDS)
            continue
        try:
            server.trust(settings)
        except ssl.SSLError as error:
            logger.error("visibility.no_front_proxy", error=f"requestheader-client-ca-file: {error}")
            await asyncio.sleep(CONFIGMAP_RETRY_SECONDS)
            continue
        logger.info("visibility.front_proxy", allowed_names=list(settings.allowed_names))
        return
