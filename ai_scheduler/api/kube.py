"""The only code that talks to Kubernetes: kubernetes_asyncio in raw mode, JSON parsed with orjson.

Every call passes `_preload_content=False`, so the generated model classes are
never built (~50x cheaper, measured) and a binding's `Status` answer does not
trip the typed decoder. Raw mode does not raise on HTTP errors, so every call
returns an `ApiResult` with the status code; transport errors become status 0.

A dead peer (a half-open connection: no FIN, no RST) must never hang the
scheduler, so nothing waits without a bound:
- a request whose connection cannot be made, or whose answer does not move, for
  `request_timeout` seconds (config `scheduling.apiRequestTimeoutSeconds`) is
  abandoned and reported as status 0, and its caller's retry path takes over
  (waiting for a free pooled connection does not count: that is our own
  congestion, not the API server's silence); a watch must open (headers) within
  `request_timeout` in all, else `WatchBroken`;
- an open watch that brings neither an event nor a bookmark for its
  `idle_timeout` (config `scheduling.watchIdleSeconds`, above the real API
  server's one-minute bookmark period) is taken for dead: `WatchIdle`;
- `reachability` records when the API server last answered a request and since
  when requests go unanswered (status 0, 502, 503, 504), for health and for
  `probe()`; watch traffic does not count, as a server that streams events but
  answers no request cannot bind anything;
- `abandon_requests()`, called when the API server answers again after an
  outage, gives what is still in flight (sent over connections that may be dead)
  `ABANDON_GRACE_SECONDS` more to be answered, ends open watches (they resume
  from their resourceVersion), and `retry_pause()` lets callers retry at once.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import gc
import os
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import orjson

from ai_scheduler.api import lazy_client

lazy_client.install()  # before kubernetes_asyncio is imported: its client's names load on first use

from kubernetes_asyncio import client, config  # noqa: E402

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(slots=True)
class ApiResult:
    status: int  # HTTP status; 0 when the request never got an answer
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.body.get("reason") or f"HTTP {self.status}")


class WatchExpired(Exception):
    """410 Gone: the requested resourceVersion is too old; the caller must list again."""


class WatchBroken(Exception):
    """The stream failed (connection, unexpected status, unparsable line); the caller must list again."""


class ResourceMissing(WatchBroken):
    """404 on a list: the resource type is not served (e.g. the PodGroup CRD is not installed)."""


class WatchIdle(WatchBroken):
    """An open watch brought neither an event nor a bookmark for its idle timeout: its connection is taken
    for dead (a half-open connection never ends by itself); the caller must list again."""


# A request is abandoned when it is not answered within this many seconds (config: apiRequestTimeoutSeconds).
DEFAULT_REQUEST_TIMEOUT = 10.0
# When the API server answers again after an outage, what is still in flight has this long left to be
# answered: enough for a request on a live connection; one on a dead connection need not wait out its timeout.
ABANDON_GRACE_SECONDS = 1.0
# Answers that mean "the API server cannot be reached" as much as no answer at all.
UNREACHABLE = frozenset({0, 502, 503, 504})


@dataclass(slots=True)
class Reachability:
    """What the client knows of the API server from its requests (not its watches): when one was last
    answered, and since when they go unanswered (None while the latest one was answered)."""

    last_answer: float = 0.0  # time.monotonic()
    failing_since: float | None = None
    last_error: str = ""
    failures: int = 0  # requests unanswered since the last answer

    def record(self, status: int, message: str, now: float) -> None:
        if status in UNREACHABLE:
            if self.failing_since is None:
                self.failing_since = now
            self.last_error = message
            self.failures += 1
        else:
            self.last_answer = now
            self.failing_since = None
            self.failures = 0


PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
# Kubernetes' own PodGroups (GenericWorkload, beta in v1.37): native gangs.
NATIVE_PODGROUPS = ("scheduling.k8s.io", "v1beta1", "podgroups")
# scheduler-plugins' Capacity Scheduling quotas, read as group quotas (config/elasticquota.py).
ELASTICQUOTAS = ("scheduling.x-k8s.io", "v1alpha1", "elasticquotas")
# ai-scheduler's Task (deploy/crds/ai-scheduler.io_tasks.yaml), run by daemon/tasks.py.
TASKS = ("ai-scheduler.io", "v1alpha1", "tasks")

# Lists come in pages of this many objects, each converted before the next is read, so that a list of
# 50,000 pods never exists as one parsed document (about 10 KiB of Python objects per pod as parsed).
LIST_PAGE_SIZE = 1000

T = TypeVar("T")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection while a large document is parsed: its dicts are all reachable, and with the
    collector on, parsing a page of pods takes about four times as long."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _env_proxy(host: str | None) -> str | None:
    """HTTPS_PROXY / HTTP_PROXY / NO_PROXY as aiohttp's trust_env would apply them to the API server."""
    import urllib.request

    from yarl import URL

    url = URL(host or "")
    if not url.host or urllib.request.proxy_bypass(url.host):
        return None
    return urllib.request.getproxies().get(url.scheme)


async def _result(response: aiohttp.ClientResponse) -> ApiResult:
    try:
        raw = await response.read()
    finally:
        response.release()
    try:
        with gc_paused():
            body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        body = {"message": raw[:500].decode("utf-8", "replace")}
    return ApiResult(response.status, body if isinstance(body, dict) else {"value": body})


class KubeClient:
    """Raw JSON access to the few endpoints the scheduler and the agent use."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        # Untyped on purpose: kubernetes_asyncio's stubs describe model mode (models in and out, no
        # `_content_type`); in raw mode we send dicts and get the aiohttp response back.
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.scheduling: Any = client.SchedulingV1Api(api_client)
        self.apps: Any = client.AppsV1Api(api_client)
        self.storage: Any = client.StorageV1Api(api_client)
        self.policy: Any = client.PolicyV1Api(api_client)
        self.resource: Any = client.ResourceV1Api(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.authorization: Any = client.AuthorizationV1Api(api_client)
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        self.reachability = Reachability(last_answer=time.monotonic())
        self.epoch = 0  # abandon_requests() calls so far
        self._deadlines: set[asyncio.Timeout] = set()  # of the requests (and watch openings) in flight
        self._watches: set[aiohttp.ClientResponse] = set()  # open watch streams
        self._back = asyncio.Event()  # set (and replaced) by abandon_requests()
        # Every request without a timeout of its own (all but watches) gets `request_timeout` for connecting
        # and for each read: the API server's silence counts, not a wait for a free pooled connection.
        rest: Any = api_client.rest_client
        send = rest.request

        async def request(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
            if _request_timeout is None:
                _request_timeout = aiohttp.ClientTimeout(
                    sock_connect=self.request_timeout, sock_read=self.request_timeout
                )
            return await send(*args, _request_timeout=_request_timeout, **kwargs)

        rest.request = request

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, *, host: str | None = None, pool_size: int = 128
    ) -> KubeClient:
        """From a kubeconfig file, a plain URL (the simulated cluster), or the in-cluster service account."""
        configuration = client.Configuration()
        if host:
            configuration.host = host
        elif kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(client_configuration=configuration)
        configuration.connection_pool_maxsize = pool_size
        if configuration.proxy is None:
            configuration.proxy = _env_proxy(configuration.host)
        api_client = client.ApiClient(configuration)
        # kubernetes_asyncio's session has trust_env=True, which costs two thread-pool hops per request
        # (netrc and proxy lookups). The proxy is resolved once above; no other env setting applies to us.
        session = api_client.rest_client.pool_manager
        if hasattr(session, "_trust_env"):
            session._trust_env = False
        return cls(api_client)

    async def close(self) -> None:
        await self.api_client.close()

    async def _call(self, coroutine: Awaitable[aiohttp.ClientResponse]) -> ApiResult:
        """The answer, or status 0 when the transport failed, the API server was silent for `request_timeout`
        (connecting, or between two reads), or abandon_requests() gave up on it."""
        epoch = self.epoch
        deadline = asyncio.timeout(None)  # none of its own: abandon_requests() may set one
        try:
            async with deadline:
                self._deadlines.add(deadline)
                try:
                    result = await _result(await coroutine)
                finally:
                    self._deadlines.discard(deadline)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            result = ApiResult(0, {"message": self._no_answer(exc, epoch)})
            if epoch != self.epoch:
                return result  # abandoned by us: it says nothing of the API server
        self.reachability.record(result.status, result.message, time.monotonic())
        return result

    def _no_answer(self, exc: BaseException, epoch: int) -> str:
        if not isinstance(exc, TimeoutError):
            return f"{type(exc).__name__}: {exc}"
        if epoch != self.epoch and not isinstance(exc, aiohttp.ClientError):
            return (
                "abandoned: sent during an outage, and not answered within "
                f"{ABANDON_GRACE_SECONDS:g} s of the API server answering again"
            )
        return f"no answer within {self.request_timeout:g} s (apiRequestTimeoutSeconds)"

    # ------------------------------------------------------------------ liveness
    async def probe(self) -> ApiResult:
        """The cheapest request the scheduler's role allows (one node): does the API server answer?"""
        return await self._call(self.core.list_node(_preload_content=False, limit=1))

    def end_watches(self) -> int:
        """End every open watch as a server's close does, so that each watcher resumes from its
        resourceVersion on a new watch (no relist) that takes the settings in force now, such as a
        reloaded idle timeout; returns how many there were."""
        watches = list(self._watches)
        self._watches.clear()
        for response in watches:
            response.close()
        return len(watches)

    def abandon_requests(self, grace: float = ABANDON_GRACE_SECONDS) -> int:
        """Give every request in flight `grace` seconds more at most, end every open watch; returns how
        many requests and watches there were.

        For the moment the API server answers again after an outage: what was sent
        during it may sit on a half-open connection (a dead peer sends neither FIN
        nor RST) until its timeout, and a watch opened before it may never move
        again. A request on a live connection is answered within the grace; the
        others end with status 0 and, as `retry_pause` returns at once for them,
        their callers try again on a fresh connection. Idle pooled connections from
        before are closed.
        """
        self.epoch += 1
        deadlines, watches = list(self._deadlines), list(self._watches)
        latest = asyncio.get_running_loop().time() + grace
        for deadline in deadlines:
            when = deadline.when()
            if not deadline.expired() and (when is None or when > latest):  # an expired one is on its way out
                deadline.reschedule(latest)
        self._watches.clear()
        for response in watches:
            response.close()
        self._close_idle_connections()
        back, self._back = self._back, asyncio.Event()
        back.set()
        return len(deadlines) + len(watches)

    def _close_idle_connections(self) -> None:
        """Close the keep-alive connections waiting in aiohttp's pool (it drops closed ones when it next
        looks); best effort, as the pool is aiohttp's own."""
        connector = getattr(getattr(self.api_client.rest_client, "pool_manager", None), "connector", None)
        idle = getattr(connector, "_conns", None)
        if not isinstance(idle, dict):
            return
        for pooled in list(idle.values()):
            for entry in list(pooled):
                with contextlib.suppress(Exception):
                    entry[0].close()

    async def retry_pause(self, seconds: float, epoch: int) -> None:
        """Wait `seconds` before retrying what failed after being sent at `epoch` (`self.epoch` then);
        no wait at all if the API server has answered again after an outage since, and cut short if it does
        while waiting."""
        if epoch != self.epoch:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._back.wait(), seconds)

    # ------------------------------------------------------------------ list / watch
    def _lister(self, resource: str) -> Any:
        if resource == "nodes":
            return self.core.list_node
        if resource == "pods":
            return self.core.list_pod_for_all_namespaces
        if resource == "namespaces":
            return self.core.list_namespace
        if resource == "podgroups":
            return functools.partial(self.custom.list_cluster_custom_object, *PODGROUPS)
        if resource == "elasticquotas":
            return functools.partial(self.custom.list_cluster_custom_object, *ELASTICQUOTAS)
        if resource == "poddisruptionbudgets":  # preemption respects them
            return self.policy.list_pod_disruption_budget_for_all_namespaces
        # The workloads whose selectors PodTopologySpread's system default constraints read.
        if resource == "services":
            return self.core.list_service_for_all_namespaces
        if resource == "replicationcontrollers":
            return self.core.list_replication_controller_for_all_namespaces
        if resource == "replicasets":
            return self.apps.list_replica_set_for_all_namespaces
        if resource == "statefulsets":
            return self.apps.list_stateful_set_for_all_namespaces
        # What VolumeBinding reads.
        if resource == "persistentvolumes":
            return self.core.list_persistent_volume
        if resource == "persistentvolumeclaims":
            return self.core.list_persistent_volume_claim_for_all_namespaces
        if resource == "storageclasses":
            return self.storage.list_storage_class
        if resource == "csinodes":
            return self.storage.list_csi_node
        # Dynamic Resource Allocation (resource.k8s.io/v1), for the DynamicResources plugin.
        if resource == "resourceclaims":
            return self.resource.list_resource_claim_for_all_namespaces
        if resource == "resourceclaimtemplates":
            return self.resource.list_resource_claim_template_for_all_namespaces
        if resource == "resourceslices":
            return self.resource.list_resource_slice
        if resource == "deviceclasses":
            return self.resource.list_device_class
        if resource.count("/") == 2:  # GROUP/VERSION/PLURAL: Kubernetes PodGroups, workload owners (CRDs too)
            return functools.partial(self.custom.list_cluster_custom_object, *resource.split("/"))
        raise ValueError(f"unknown resource {resource!r}")

    async def list(
        self, resource: str, *, limit: int | None = None, **params: Any
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """All objects (or the first `limit`) and the list's resourceVersion (the point to watch from)."""
        return await self.list_as(resource, _identity, page_size=limit or LIST_PAGE_SIZE,
                                  first_page_only=limit is not None, **params)

    async def list_as(
        self, resource: str, convert: Callable[[dict[str, Any]], T], *, page_size: int = LIST_PAGE_SIZE,
        first_page_only: bool = False, **params: Any,
    ) -> tuple[builtins.list[T], str]:
        """All objects, each passed through `convert` page by page, and the list's resourceVersion.

        The pages are one consistent snapshot (the server's continue token pins its resourceVersion);
        a token that expired with a compaction answers 410, raised as WatchExpired like any other.
        """
        converted: builtins.list[T] = []
        token = ""
        while True:
            if token:
                params["_continue"] = token
            lister = self._lister(resource)
            result = await self._call(lister(_preload_content=False, limit=page_size, **params))
            if result.status == 410:
                raise WatchExpired(result.message)
            if result.status == 404:
                raise ResourceMissing(f"list {resource}: {result.message}")
            if not result.ok:
                raise WatchBroken(f"list {resource}: {result.message}")
            with gc_paused():
                converted.extend(convert(item) for item in result.body.get("items") or ())
            meta = result.body.get("metadata") or {}
            token = "" if first_page_only else str(meta.get("continue") or "")
            if not token:
                return converted, str(meta.get("resourceVersion", ""))

    async def watch(
        self,
        resource: str,
        resource_version: str,
        *,
        timeout_seconds: int,
        idle_timeout: float | None = None,
        **params: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (`{"type", "object"}` dicts) from a resourceVersion, bookmarks on.

        Ends normally when the server closes the stream after `timeout_seconds`.
        Raises WatchExpired on 410 and WatchBroken on anything else that went
        wrong, including a line that is not JSON: after either, the caller
        relists, because events may have been lost. Opening the watch is a
        request like any other (answered within `request_timeout`); once open, a
        stream silent for `idle_timeout` seconds (default: the server's own
        timeout plus a minute) raises WatchIdle, a kind of WatchBroken.
        """
        idle = float(timeout_seconds + 60) if idle_timeout is None else idle_timeout
        # No total timeout on a stream: the read timeout is the longest silence between two chunks.
        timeout = aiohttp.ClientTimeout(sock_connect=self.request_timeout, sock_read=idle)
        epoch = self.epoch
        deadline = asyncio.timeout(self.request_timeout)
        try:
            async with deadline:
                self._deadlines.add(deadline)
                try:
                    response = await self._lister(resource)(
                        watch=True,
                        resource_version=resource_version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=timeout_seconds,
                        _preload_content=False,
                        _request_timeout=timeout,
                        **params,
                    )
                finally:
                    self._deadlines.discard(deadline)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            message = self._no_answer(exc, epoch)
            if epoch == self.epoch:
                self.reachability.record(0, message, time.monotonic())
            raise WatchBroken(f"watch {resource}: {message}") from exc
        now = time.monotonic()
        self.reachability.record(response.status, f"watch {resource}: HTTP {response.status}", now)
        self._watches.add(response)
        try:
            if response.status == 410:
                raise WatchExpired(f"watch {resource}: HTTP 410")
            if response.status != 200:
                body = (await response.read())[:500].decode("utf-8", "replace")
                raise WatchBroken(f"watch {resource}: HTTP {response.status}: {body}")
            async for event in _lines(response, resource):
                yield event
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if response not in self._watches:
                # Abandoned by abandon_requests(): end as a server's close does; the caller resumes from
                # its resourceVersion on a fresh connection (no relist needed, nothing was lost).
                return
            if isinstance(exc, aiohttp.ServerTimeoutError):
                raise WatchIdle(
                    f"watch {resource}: no event or bookmark for {idle:g} s (watchIdleSeconds): "
                    "the connection is taken for dead"
                ) from exc
            raise WatchBroken(f"watch {resource}: {type(exc).__name__}: {exc}") from exc
        finally:
            self._watches.discard(response)
            response.close()

    # ------------------------------------------------------------------ writes
    async def _send(
        self, method: str, path: str, body: Any, content_type: str = "application/json"
    ) -> aiohttp.ClientResponse:
        """The per-pod writes (binding, event, condition) without kubernetes_asyncio's generated layer,
        which walks the body (`sanitize_for_serialization`), encodes it with the standard library's json
        and builds the URL and headers anew each time: the body is encoded once with orjson, and the
        headers and credentials are those the generated methods send (`update_params_for_auth`, so that a
        token its refresh hook renews is picked up), over the same session, proxy and TLS settings, with
        `request_timeout` for connecting and each read. `path` is quoted by the caller."""
        api: Any = self.api_client
        headers = {**api.default_headers, "Accept": "application/json", "Content-Type": content_type}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        rest: Any = api.rest_client
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.proxy_headers:
            extra["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        timeout = aiohttp.ClientTimeout(sock_connect=self.request_timeout, sock_read=self.request_timeout)
        response: aiohttp.ClientResponse = await rest.pool_manager.request(
            method, api.configuration.host + path, data=orjson.dumps(body), headers=headers, timeout=timeout,
            **extra,
        )
        return response

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> ApiResult:
        """POST pods/binding; the server answers 201 with a Status, or 409 if the pod is already bound."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/binding"
        return await self._call(self._send("POST", path, body))

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(self._send(
            "PATCH", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/status", patch, STRATEGIC_MERGE
        ))

    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.core.patch_namespaced_pod(
                name, namespace, patch, _preload_content=False, _content_type=MERGE_PATCH
            )
        )

    async def request(
        self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
        content_type: str = "application/json",
    ) -> ApiResult:
        """Any path of the API with this client's credentials, for what has no generated method: an
        aggregated API (`/apis/visibility.ai-scheduler.io/...`), a JSON patch (`content_type` JSON_PATCH,
        `body` a list of operations). The users' command line (ai_scheduler/status) uses it."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        return await self._call(self.api_client.call_api(
            path, method.upper(), query_params=list((query or {}).items()), header_params=headers, body=body,
            auth_settings=["BearerToken"], _preload_content=False,
        ))

    async def patch_persistent_volume_claim(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> ApiResult:
        """Merge patch (VolumeBinding's PreBind: the selected-node annotation; tests: the binding)."""
        return await self._call(
            self.core.patch_namespaced_persistent_volume_claim(
                name, namespace, patch, _preload_content=False, _content_type=MERGE_PATCH
            )
        )

    async def patch_persistent_volume(self, name: str, patch: dict[str, Any]) -> ApiResult:
        """Merge patch (VolumeBinding's PreBind: a static match's claimRef)."""
        return await self._call(
            self.core.patch_persistent_volume(name, patch, _preload_content=False, _content_type=MERGE_PATCH)
        )

    # ---- Dynamic Resource Allocation (resource.k8s.io/v1): what the DynamicResources plugin writes
    async def replace_resource_claim(self, namespace: str, name: str, claim: dict[str, Any]) -> ApiResult:
        """PUT a claim (PreBind adds the scheduler's finalizer this way; the resourceVersion in `claim`
        makes a concurrent change answer 409)."""
        return await self._call(self.resource.replace_namespaced_resource_claim(
            name, namespace, claim, _preload_content=False))

    async def replace_resource_claim_status(
        self, namespace: str, name: str, claim: dict[str, Any]
    ) -> ApiResult:
        """PUT a claim's status subresource: `status.allocation` and `status.reservedFor` (PreBind)."""
        return await self._call(self.resource.replace_namespaced_resource_claim_status(
            name, namespace, claim, _preload_content=False))

    async def patch_resource_claim_status(
        self, namespace: str, name: str, patch: Any, content_type: str = JSON_PATCH
    ) -> ApiResult:
        """Patch a claim's status subresource (a JSON patch by default, as kube-scheduler adds itself to
        `reservedFor` of a claim allocated already, with a `test` of the resourceVersion)."""
        return await self._call(self.resource.patch_namespaced_resource_claim_status(
            name, namespace, patch, _preload_content=False, _content_type=content_type))

    async def create_resource_claim(self, claim: dict[str, Any]) -> ApiResult:
        """A claim for a pod's extended resources mapped onto DRA devices (KEP-5004); tests' claims."""
        namespace = (claim.get("metadata") or {}).get("namespace") or "default"
        return await self._call(self.resource.create_namespaced_resource_claim(
            namespace, claim, _preload_content=False))

    async def delete_resource_claim(self, namespace: str, name: str, uid: str | None = None) -> ApiResult:
        """Delete a claim (an extended-resource claim whose pod was not bound); with `uid`, only that one."""
        body = {"preconditions": {"uid": uid}} if uid else None
        return await self._call(self.resource.delete_namespaced_resource_claim(
            name, namespace, body=body, _preload_content=False))

    async def get_resource_claim(self, namespace: str, name: str) -> ApiResult:
        return await self._call(self.resource.read_namespaced_resource_claim(
            name, namespace, _preload_content=False))

    async def create_resource_claim_template(self, template: dict[str, Any]) -> ApiResult:
        namespace = (template.get("metadata") or {}).get("namespace") or "default"
        return await self._call(self.resource.create_namespaced_resource_claim_template(
            namespace, template, _preload_content=False))

    async def create_resource_slice(self, resource_slice: dict[str, Any]) -> ApiResult:
        return await self._call(self.resource.create_resource_slice(resource_slice, _preload_content=False))

    async def delete_resource_slice(self, name: str) -> ApiResult:
        return await self._call(self.resource.delete_resource_slice(name, _preload_content=False))

    async def create_device_class(self, device_class: dict[str, Any]) -> ApiResult:
        return await self._call(self.resource.create_device_class(device_class, _preload_content=False))

    async def create_event(self, namespace: str, event: dict[str, Any]) -> ApiResult:
        return await self._call(self._send("POST", f"/api/v1/namespaces/{_q(namespace)}/events", event))

    # The leader election's Lease (daemon/leader.py): read, create, and replace under the read one's
    # resourceVersion, so that of two replicas writing it at once one gets 409 Conflict.
    async def get_lease(self, namespace: str, name: str) -> ApiResult:
        return await self._call(
            self.coordination.read_namespaced_lease(name, namespace, _preload_content=False)
        )

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.coordination.create_namespaced_lease(namespace, lease, _preload_content=False)
        )

    async def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.coordination.replace_namespaced_lease(name, namespace, lease, _preload_content=False)
        )

    # Object management, for the demo, the benchmarks and tests that drive a cluster.
    async def create_node(self, node: dict[str, Any]) -> ApiResult:
        return await self._call(self.core.create_node(node, _preload_content=False))

    async def delete_node(self, name: str) -> ApiResult:
        return await self._call(self.core.delete_node(name, _preload_content=False))

    async def patch_node(self, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.core.patch_node(name, patch, _preload_content=False, _content_type=STRATEGIC_MERGE)
        )

    async def create_namespace(self, name: str) -> ApiResult:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        return await self._call(self.core.create_namespace(body, _preload_content=False))

    async def create_priority_class(self, priority_class: dict[str, Any]) -> ApiResult:
        return await self._call(self.scheduling.create_priority_class(priority_class, _preload_content=False))

    async def create_persistent_volume(self, volume: dict[str, Any]) -> ApiResult:
        return await self._call(self.core.create_persistent_volume(volume, _preload_content=False))

    async def create_persistent_volume_claim(self, claim: dict[str, Any]) -> ApiResult:
        namespace = (claim.get("metadata") or {}).get("namespace") or "default"
        return await self._call(
            self.core.create_namespaced_persistent_volume_claim(namespace, claim, _preload_content=False)
        )

    async def patch_persistent_volume_status(self, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.core.patch_persistent_volume_status(
                name, patch, _preload_content=False, _content_type=MERGE_PATCH
            )
        )

    async def create_storage_class(self, storage_class: dict[str, Any]) -> ApiResult:
        return await self._call(self.storage.create_storage_class(storage_class, _preload_content=False))

    async def create_csi_node(self, csi_node: dict[str, Any]) -> ApiResult:
        return await self._call(self.storage.create_csi_node(csi_node, _preload_content=False))

    async def create_pod(self, pod: dict[str, Any]) -> ApiResult:
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        return await self._call(self.core.create_namespaced_pod(namespace, pod, _preload_content=False))

    async def delete_pod(
        self, namespace: str, name: str, grace_period_seconds: int | None = None
    ) -> ApiResult:
        extra = {} if grace_period_seconds is None else {"grace_period_seconds": grace_period_seconds}
        return await self._call(
            self.core.delete_namespaced_pod(name, namespace, _preload_content=False, **extra)
        )

    async def delete_lease(self, namespace: str, name: str) -> ApiResult:
        return await self._call(
            self.coordination.delete_namespaced_lease(name, namespace, _preload_content=False)
        )

    async def get_pod(self, namespace: str, name: str) -> ApiResult:
        return await self._call(self.core.read_namespaced_pod(name, namespace, _preload_content=False))

    async def patch_podgroup_status(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        """Merge patch: PodGroup is a custom resource, which takes no strategic merge patch."""
        return await self._call(self.custom.patch_namespaced_custom_object_status(
            *PODGROUPS[:2], namespace, PODGROUPS[2], name, patch, _preload_content=False,
            _content_type=MERGE_PATCH))

    async def patch_native_podgroup_status(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> ApiResult:
        """Merge patch of a Kubernetes PodGroup's status (`scheduling.k8s.io/v1beta1`), whole lists."""
        return await self._call(self.custom.patch_namespaced_custom_object_status(
            *NATIVE_PODGROUPS[:2], namespace, NATIVE_PODGROUPS[2], name, patch, _preload_content=False,
            _content_type=MERGE_PATCH))

    async def patch_task_status(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        """Merge patch of a Task's status (`ai-scheduler.io/v1alpha1`; daemon/tasks.py)."""
        return await self._call(self.custom.patch_namespaced_custom_object_status(
            *TASKS[:2], namespace, TASKS[2], name, patch, _preload_content=False, _content_type=MERGE_PATCH))

    async def create_task(self, task: dict[str, Any]) -> ApiResult:
        namespace = (task.get("metadata") or {}).get("namespace") or "default"
        return await self._call(self.custom.create_namespaced_custom_object(
            *TASKS[:2], namespace, TASKS[2], task, _preload_content=False))

    async def get_task(self, namespace: str, name: str) -> ApiResult:
        return await self._call(self.custom.get_namespaced_custom_object(
            *TASKS[:2], namespace, TASKS[2], name, _preload_content=False))

    async def create_pod_disruption_budget(self, budget: dict[str, Any]) -> ApiResult:
        namespace = (budget.get("metadata") or {}).get("namespace") or "default"
        return await self._call(
            self.policy.create_namespaced_pod_disruption_budget(namespace, budget, _preload_content=False)
        )

    async def create_podgroup(self, podgroup: dict[str, Any]) -> ApiResult:
        namespace = (podgroup.get("metadata") or {}).get("namespace") or "default"
        return await self._call(self.custom.create_namespaced_custom_object(
            *PODGROUPS[:2], namespace, PODGROUPS[2], podgroup, _preload_content=False))

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(
            self._send("PATCH", f"/api/v1/namespaces/{_q(namespace)}/events/{_q(name)}", patch, MERGE_PATCH)
        )

    # ------------------------------------------------------------------ delegated authn and authz
    # What the visibility API (visibility/server.py) asks as an aggregated API server does: the
    # requestheader CA and names of the front proxy, and whether a user may do something.
    async def get_config_map(self, namespace: str, name: str) -> ApiResult:
        return await self._call(self.core.read_namespaced_config_map(name, namespace, _preload_content=False))

    async def create_subject_access_review(self, review: dict[str, Any]) -> ApiResult:
        """POST authorization.k8s.io/v1 SubjectAccessReview; the answer's `status.allowed` says it."""
        return await self._call(
            self.authorization.create_subject_access_review(review, _preload_content=False)
        )


def _q(segment: str) -> str:
    """A path segment quoted as the generated methods quote path parameters."""
    return urllib.parse.quote(segment, safe="")


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


async def _lines(response: aiohttp.ClientResponse, resource: str) -> AsyncIterator[dict[str, Any]]:
    """Split the chunked stream into JSON events ourselves: aiohttp's readline caps line length,
    and a Node with many images easily exceeds it."""
    buffer = bytearray()
    async for chunk in response.content.iter_any():
        buffer += chunk
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            start = end + 1
            if not line.strip():
                continue
            yield _decode(line, resource)
        del buffer[:start]
    if buffer.strip():
        yield _decode(bytes(buffer), resource)


def _decode(line: bytes, resource: str) -> dict[str, Any]:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise WatchBroken(f"watch {resource}: unparsable line {line[:120]!r}") from exc
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise WatchBroken(f"watch {resource}: malformed event {line[:120]!r}")
    if event.get("type") == "ERROR":
        status = event["object"]
        if status.get("code") == 410:
            raise WatchExpired(f"watch {resource}: {status.get('message', 'resource version too old')}")
        raise WatchBroken(f"watch {resource}: error event {status.get('message', status)}")
    return event
