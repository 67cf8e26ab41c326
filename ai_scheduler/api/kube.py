"""The only code that talks to Kubernetes: kubernetes_asyncio in raw mode, JSON parsed with orjson.

Every call passes `_preload_content=False`, so the generated model classes are
never built (FACTS.md: ~50x cheaper) and a binding's `Status` answer does not
trip the typed decoder. Raw mode does not raise on HTTP errors, so every call
returns an `ApiResult` with the status code; transport errors become status 0.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client, config

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"


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


PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


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
        try:
            return await _result(await coroutine)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return ApiResult(0, {"message": f"{type(exc).__name__}: {exc}"})

    # ------------------------------------------------------------------ list / watch
    def _lister(self, resource: str) -> Any:
        if resource == "nodes":
            return self.core.list_node
        if resource == "pods":
            return self.core.list_pod_for_all_namespaces
        if resource == "podgroups":
            return functools.partial(self.custom.list_cluster_custom_object, *PODGROUPS)
        raise ValueError(f"unknown resource {resource!r}")

    async def list(self, resource: str, **params: Any) -> tuple[list[dict[str, Any]], str]:
        """All objects and the list's resourceVersion (the point to watch from)."""
        result = await self._call(self._lister(resource)(_preload_content=False, **params))
        if result.status == 410:
            raise WatchExpired(result.message)
        if result.status == 404:
            raise ResourceMissing(f"list {resource}: {result.message}")
        if not result.ok:
            raise WatchBroken(f"list {resource}: {result.message}")
        return result.body.get("items") or [], str(
            (result.body.get("metadata") or {}).get("resourceVersion", "")
        )

    async def watch(
        self, resource: str, resource_version: str, *, timeout_seconds: int, **params: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events (`{"type", "object"}` dicts) from a resourceVersion, bookmarks on.

        Ends normally when the server closes the stream after `timeout_seconds`.
        Raises WatchExpired on 410 and WatchBroken on anything else that went
        wrong, including a line that is not JSON: after either, the caller
        relists, because events may have been lost.
        """
        # No total timeout on a stream; a read timeout longer than the server's own close notices a
        # half-open connection (kubernetes_asyncio sets no client-side read timeout by default).
        timeout = aiohttp.ClientTimeout(
            total=None, connect=30, sock_connect=30, sock_read=timeout_seconds + 60
        )
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
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise WatchBroken(f"watch {resource}: {type(exc).__name__}: {exc}") from exc
        try:
            if response.status == 410:
                raise WatchExpired(f"watch {resource}: HTTP 410")
            if response.status != 200:
                body = (await response.read())[:500].decode("utf-8", "replace")
                raise WatchBroken(f"watch {resource}: HTTP {response.status}: {body}")
            async for event in _lines(response, resource):
                yield event
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise WatchBroken(f"watch {resource}: {type(exc).__name__}: {exc}") from exc
        finally:
            response.close()

    # ------------------------------------------------------------------ writes
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> ApiResult:
        """POST pods/binding; the server answers 201 with a Status, or 409 if the pod is already bound."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return await self._call(
            self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
        )

    async def patch_pod_status(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.core.patch_namespaced_pod_status(
                name, namespace, patch, _preload_content=False, _content_type=STRATEGIC_MERGE
            )
        )

    async def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.core.patch_namespaced_pod(
                name, namespace, patch, _preload_content=False, _content_type=MERGE_PATCH
            )
        )

    async def create_event(self, namespace: str, event: dict[str, Any]) -> ApiResult:
        return await self._call(self.core.create_namespaced_event(namespace, event, _preload_content=False))

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

    async def get_pod(self, namespace: str, name: str) -> ApiResult:
        return await self._call(self.core.read_namespaced_pod(name, namespace, _preload_content=False))

    async def patch_podgroup_status(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        """Merge patch: PodGroup is a custom resource, which takes no strategic merge patch."""
        return await self._call(self.custom.patch_namespaced_custom_object_status(
            *PODGROUPS[:2], namespace, PODGROUPS[2], name, patch, _preload_content=False,
            _content_type=MERGE_PATCH))

    async def create_podgroup(self, podgroup: dict[str, Any]) -> ApiResult:
        namespace = (podgroup.get("metadata") or {}).get("namespace") or "default"
        return await self._call(self.custom.create_namespaced_custom_object(
            *PODGROUPS[:2], namespace, PODGROUPS[2], podgroup, _preload_content=False))

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> ApiResult:
        return await self._call(
            self.core.patch_namespaced_event(
                name, namespace, patch, _preload_content=False, _content_type=MERGE_PATCH
            )
        )


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
