"""The two clusters every end-to-end test runs against, behind one surface.

- `SimCluster`: the embedded simulated API server (fast, with fault hooks).
- `KubeCluster`: the real control plane from `ai_scheduler.sim.controlplane` (etcd,
  kube-apiserver, kube-controller-manager, kwok). The scheduler talks to it through a
  loopback `FaultProxy`, with a token of its own ServiceAccount after `kubectl apply -f
  deploy/`, so that a verb the shipped ClusterRole lacks fails the test.

A test reads the cluster's objects synchronously through `cluster.store` (`list`, `get`):
the simulated server's own store, or, on the real backend, a mirror that the test process
keeps from its own list and watch as the admin (independent of the scheduler's informers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
import yaml

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.sim import SimApiServer
from ai_scheduler.sim.controlplane import REPO, ControlPlane
from ai_scheduler.sim.faultproxy import FaultProxy

SCHEDULER_USER = "system:serviceaccount:kube-system:ai-scheduler"
AGENT_USER = "system:serviceaccount:kube-system:ai-scheduler-agent"
AGENT_POD_LABEL = "app.kubernetes.io/component"


class Store(Protocol):
    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]: ...


class Cluster(Protocol):
    """What an end-to-end test may do with either backend."""

    backend: str
    store: Store
    proxy: FaultProxy  # between the scheduler and the API server

    async def client(self) -> KubeClient:
        """A client with the admin's rights, to create and change objects as a user would."""
        ...

    async def scheduler_client(self) -> KubeClient:
        """The client the daemon under test uses: the scheduler's own ServiceAccount on the real backend."""
        ...

    async def agent_client(self, node: str) -> KubeClient:
        """The client a node's GPU agent uses: on the real backend, the token of the agent's own
        ServiceAccount that a pod of the agent DaemonSet on that node would mount."""
        ...

    async def synced(self) -> None:
        """Wait until `store` reflects every write made so far."""
        ...

    def cut_watches(self) -> int:
        """Drop the scheduler's connections mid-stream, as a lost TCP connection would."""
        ...

    async def expire_watches(self) -> None:
        """Make the scheduler's watches resume from a compacted resourceVersion, so that they get 410 Gone."""
        ...

    async def outage(self, seconds: float) -> None:
        """Stop the API server for `seconds`, then start it again with everything it stored."""
        ...

    def request_counts(self, user: str = SCHEDULER_USER) -> dict[str, Counter[str]]:
        """Requests by resource ("pods/binding") and verb, made by the scheduler (or `user`)."""
        ...

    def bindings(self) -> Counter[str]:
        """The scheduler's binding requests by outcome: "ok" (201) and "conflict" (409)."""
        ...

    def pods_bound_twice(self) -> list[str]:
        """Pods the scheduler's bindings placed more than once (answered 201 more than once)."""
        ...


class SimCluster:
    backend = "sim"

    def __init__(self, sim: SimApiServer, proxy: FaultProxy) -> None:
        self.sim = sim
        self.proxy = proxy
        self.store: Store = sim.store

    async def client(self) -> KubeClient:
        return await KubeClient.connect(host=self.sim.url)

    async def scheduler_client(self) -> KubeClient:
        return await KubeClient.connect(host=self.proxy.url)

    async def agent_client(self, node: str) -> KubeClient:
        return await KubeClient.connect(host=self.sim.url)

    async def synced(self) -> None:
        return None

    def cut_watches(self) -> int:
        return self.sim.cut_watches()

    async def expire_watches(self) -> None:
        # Compaction, then the watches end cleanly (a server-side timeout): they resume from a version
        # that is now too old.
        self.sim.compact()
        self.sim.end_watches()

    async def outage(self, seconds: float) -> None:
        port = int(self.sim.url.rsplit(":", 1)[1])
        await self.sim.stop()
        await asyncio.sleep(seconds)
        await self.sim.start(port=port)

    def request_counts(self, user: str = SCHEDULER_USER) -> dict[str, Counter[str]]:
        return {resource: Counter(verbs) for resource, verbs in self.sim.stats()["requests"].items()}

    def bindings(self) -> Counter[str]:
        stats = self.sim.stats()["bindings"]
        return Counter({"ok": stats["ok"], "conflict": stats["conflicts"]})

    def pods_bound_twice(self) -> list[str]:
        # The simulated server answers a second binding of a pod with 409, as the real one does, and
        # counts every 201: more successes than bound pods would mean a pod bound twice.
        bound = sum(1 for p in self.store.list("pods") if p["spec"].get("nodeName"))
        return ["(some pod)"] if self.sim.stats()["bindings"]["ok"] > bound else []


# ---------------------------------------------------------------------------------------------- real

RESOURCES = {
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "events": "/api/v1/events",
    "podgroups": "/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
    "tasks": "/apis/ai-scheduler.io/v1alpha1/tasks",
    "groupquotas": "/apis/ai-scheduler.io/v1alpha1/groupquotas",
    "userquotas": "/apis/ai-scheduler.io/v1alpha1/userquotas",
    "domains": "/apis/ai-scheduler.io/v1alpha1/domains",
    "podgroups.scheduling.k8s.io": "/apis/scheduling.k8s.io/v1beta1/podgroups",
    "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "persistentvolumeclaims": "/api/v1/persistentvolumeclaims",
    "persistentvolumes": "/api/v1/persistentvolumes",
    "resourceclaims": "/apis/resource.k8s.io/v1/resourceclaims",
    "resourceslices": "/apis/resource.k8s.io/v1/resourceslices",
}


class Mirror:
    """The objects of a few kinds, kept current from list and watch as the admin."""

    def __init__(self, url: str, token: str, ssl_context: ssl.SSLContext) -> None:
        self._url = url
        self._headers = {"Authorization": f"Bearer {token}"}
        self._ssl = ssl_context
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
        self._versions: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.read_through: Callable[[str, str | None, str], dict[str, Any] | None] | None = None

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self._objects[resource].get((namespace or "", name))
        if obj is None and self.read_through is not None:
            # Just created and not yet seen on the watch: ask the server, as a read after a write would.
            obj = self.read_through(resource, namespace, name)
        return None if obj is None else json.loads(json.dumps(obj))

    def list(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            json.loads(json.dumps(obj))
            for (ns, _), obj in list(self._objects[resource].items())
            if namespace is None or ns == namespace
        ]

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            headers=self._headers, connector=aiohttp.TCPConnector(ssl=self._ssl)
        )
        for resource in RESOURCES:
            ready = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._run(resource, ready)))
            await asyncio.wait_for(ready.wait(), 30)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session:
            await self._session.close()

    async def synced(self, resource_version: int) -> None:
        """Wait until every kind's watch has passed `resource_version` (a bookmark or an event).

        A kind with no changes (PriorityClasses) hears only bookmarks, about once a minute on a real
        API server: one still behind after a second is listed again instead, which is just as current."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        relist_at = loop.time() + 1
        while any(v < resource_version for v in self._versions.values()):
            if loop.time() > relist_at:
                relist_at = deadline
                for index, resource in enumerate(RESOURCES):
                    if self._versions.get(resource, 0) < resource_version:
                        self._tasks[index].cancel()
                        ready = asyncio.Event()
                        self._tasks[index] = asyncio.create_task(self._run(resource, ready))
            if loop.time() > deadline:
                behind = {kind: v for kind, v in self._versions.items() if v < resource_version}
                raise AssertionError(f"mirror did not reach resourceVersion {resource_version}: {behind}")
            await asyncio.sleep(0.02)

    def _key(self, obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj["metadata"]
        return meta.get("namespace", ""), meta["name"]

    async def _run(self, resource: str, ready: asyncio.Event) -> None:
        assert self._session is not None
        path = RESOURCES[resource]
        while True:
            try:
                async with self._session.get(f"{self._url}{path}") as response:
                    response.raise_for_status()
                    body = await response.json()
                self._objects[resource] = {self._key(o): o for o in body.get("items") or []}
                version = body["metadata"]["resourceVersion"]
                self._versions[resource] = int(version)
                ready.set()
                params = {
                    "watch": "1",
                    "resourceVersion": version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "300",
                }
                timeout = aiohttp.ClientTimeout(total=None, sock_read=400)
                async with self._session.get(
                    f"{self._url}{path}", params=params, timeout=timeout
                ) as response:
                    async for raw in response.content:
                        if not raw.strip():
                            continue
                        event = json.loads(raw)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            break
                        self._versions[resource] = int(obj["metadata"]["resourceVersion"])
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._objects[resource][self._key(obj)] = obj
                        elif event["type"] == "DELETED":
                            self._objects[resource].pop(self._key(obj), None)
            except (aiohttp.ClientError, OSError, ValueError):
                await asyncio.sleep(0.2)


class KubeCluster:
    """One test's view of the session's real control plane."""

    backend = "kube"

    def __init__(self, plane: ControlPlane, proxy: FaultProxy, scheduler_token: str) -> None:
        self.plane = plane
        self.proxy = proxy
        self._scheduler_token = scheduler_token
        self.mirror = Mirror(plane.url, plane.admin_token, plane.ssl_context())
        self.mirror.read_through = self._read
        self.store: Store = self.mirror
        self._audit_offset = plane.audit_log.stat().st_size if plane.audit_log.exists() else 0

    async def client(self) -> KubeClient:
        return await KubeClient.connect(str(self.plane.admin_kubeconfig))

    def _read(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        base, plural = RESOURCES[resource].rsplit("/", 1)
        scope = f"/namespaces/{namespace}" if namespace else ""
        status, body = self.plane.request("GET", f"{base}{scope}/{plural}/{name}")
        return body if status == 200 else None

    async def scheduler_client(self) -> KubeClient:
        path = self.plane.workdir / "scheduler.kubeconfig"
        self.plane.write_kubeconfig(path, self._scheduler_token, server=self.proxy.url)
        return await KubeClient.connect(str(path))

    async def agent_client(self, node: str) -> KubeClient:
        token = await asyncio.to_thread(self._agent_token, node)
        path = self.plane.workdir / f"agent-{node}.kubeconfig"
        self.plane.write_kubeconfig(path, token)
        return await KubeClient.connect(str(path))

    def _agent_token(self, node: str) -> str:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"ai-scheduler-agent-{node}",
                "namespace": "kube-system",
                "labels": {AGENT_POD_LABEL: "agent"},
            },
            "spec": {
                "nodeName": node,
                "serviceAccountName": "ai-scheduler-agent",
                "containers": [{"name": "agent", "image": "ai-scheduler"}],
            },
        }
        status, body = self.plane.request("POST", "/api/v1/namespaces/kube-system/pods", pod)
        assert status == 201, body
        return self.plane.service_account_token("kube-system", "ai-scheduler-agent", pod=body)

    async def synced(self) -> None:
        status, body = await asyncio.to_thread(self.plane.request, "GET", "/api/v1/namespaces/default")
        assert status == 200, body
        # A write's resourceVersion is global: once every watch has passed a fresh one, the mirror is current.
        status, body = await asyncio.to_thread(
            self.plane.request,
            "PATCH",
            "/api/v1/namespaces/default",
            {
                "metadata": {
                    "annotations": {"test.ai-scheduler.io/sync": str(asyncio.get_running_loop().time())}
                }
            },
            None,
            "application/merge-patch+json",
        )
        assert status == 200, body
        await self.mirror.synced(int(body["metadata"]["resourceVersion"]))

    def cut_watches(self) -> int:
        return self.proxy.cut()

    async def expire_watches(self) -> None:
        """The scheduler loses its connections while the API server restarts and etcd moves on and is
        compacted: it comes back with a resourceVersion older than anything the server can serve."""
        self.proxy.refuse()
        self.proxy.cut()
        await asyncio.to_thread(self._restart_with_compaction)
        self.proxy.forward()

    async def outage(self, seconds: float) -> None:
        await asyncio.to_thread(self.plane.stop_apiserver)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(self.plane.start_apiserver)
        await asyncio.to_thread(self.plane.restart_clients)

    def _restart_with_compaction(self) -> None:
        self.plane.stop_apiserver()
        self.plane.advance_etcd(2)
        self.plane.compact_etcd()
        self.plane.start_apiserver()
        self.plane.restart_clients()

    def audit_events(self, user: str = SCHEDULER_USER) -> list[dict[str, Any]]:
        """The audit log's entries for `user` since this test began."""
        entries = []
        with self.plane.audit_log.open("rb") as log:
            log.seek(self._audit_offset)
            for line in log:
                entry = json.loads(line)
                if entry.get("user", {}).get("username") == user:
                    entries.append(entry)
        return entries

    def request_counts(self, user: str = SCHEDULER_USER) -> dict[str, Counter[str]]:
        counts: dict[str, Counter[str]] = defaultdict(Counter)
        for entry in self.audit_events(user):
            ref = entry.get("objectRef") or {}
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            counts[resource][entry["verb"]] += 1
        return counts

    def _binding_codes(self) -> list[tuple[str, int | None]]:
        """(namespace/pod, HTTP status) of each binding the scheduler asked for."""
        codes = []
        for entry in self.audit_events():
            ref = entry.get("objectRef") or {}
            if ref.get("subresource") == "binding" and entry["verb"] == "create":
                pod = f"{ref.get('namespace')}/{ref.get('name')}"
                codes.append((pod, (entry.get("responseStatus") or {}).get("code")))
        return codes

    def bindings(self) -> Counter[str]:
        outcomes: Counter[str] = Counter()
        for _, code in self._binding_codes():
            outcomes["ok" if code == 201 else "conflict" if code == 409 else str(code)] += 1
        return outcomes

    def pods_bound_twice(self) -> list[str]:
        successes = Counter(pod for pod, code in self._binding_codes() if code == 201)
        return [pod for pod, count in successes.items() if count > 1]

    async def close(self) -> None:
        await self.mirror.stop()
        await asyncio.to_thread(reset_cluster, self.plane)


# The workloads tests make whose controllers (or the tests, as they would) make pods: removed first.
WORKLOAD_OWNERS = (
    "ai-scheduler.io/v1alpha1/namespaces/{namespace}/tasks",
    "ray.io/v1/namespaces/{namespace}/rayclusters",
    "jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets",
    "leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets",
    "kubeflow.org/v1/namespaces/{namespace}/pytorchjobs",
    "apps/v1/namespaces/{namespace}/statefulsets",
)


def reset_cluster(plane: ControlPlane) -> None:
    """Remove what a test made: workloads (WORKLOAD_OWNERS), Jobs, pods (at once), nodes, PodGroups (both
    kinds), Workloads, GroupQuotas and UserQuotas, events, claims, volumes, StorageClasses, CSINodes,
    DRA's ResourceClaims, templates, ResourceSlices and DeviceClasses, its PriorityClasses. Namespaces
    stay (empty): one being deleted refuses new pods until its controller is done."""
    _, body = plane.request("GET", "/api/v1/namespaces")
    namespaces = [n["metadata"]["name"] for n in body.get("items", [])]
    for namespace in namespaces:
        if namespace == "kube-system":
            continue
        # Workloads first (a CRD not installed answers 404), then Jobs, so that no controller (the KubeRay
        # operator, the Job controller) makes a new pod once the pods are gone.
        for workloads in WORKLOAD_OWNERS:
            path = workloads.format(namespace=namespace)
            plane.request("DELETE", f"/apis/{path}?propagationPolicy=Background")
        plane.request("DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs?propagationPolicy=Background")
        plane.request("DELETE", f"/api/v1/namespaces/{namespace}/pods?gracePeriodSeconds=0")
        plane.request("DELETE", f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups")
        plane.request("DELETE", f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/workloads")
        plane.request("DELETE", f"/apis/scheduling.k8s.io/v1beta1/namespaces/{namespace}/podgroups")
        plane.request("DELETE", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")
        plane.request("DELETE", f"/api/v1/namespaces/{namespace}/events")
        plane.request("DELETE", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")
        plane.request("DELETE", f"/apis/ai-scheduler.io/v1alpha1/namespaces/{namespace}/userquotas")
        # ResourceClaims keep the scheduler's finalizer while allocated: taken off, so that they go at once.
        claims_path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
        _, claims = plane.request("GET", claims_path)
        for claim in claims.get("items") or []:
            if claim["metadata"].get("finalizers"):
                plane.request("PATCH", f"{claims_path}/{claim['metadata']['name']}",
                              {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
        plane.request("DELETE", claims_path)
        plane.request("DELETE", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates")
    plane.request(
        "DELETE",
        f"/api/v1/namespaces/kube-system/pods?gracePeriodSeconds=0&labelSelector={AGENT_POD_LABEL}%3Dagent",
    )
    plane.request("DELETE", "/api/v1/nodes")
    plane.request("DELETE", "/apis/ai-scheduler.io/v1alpha1/groupquotas")
    plane.request("DELETE", "/apis/ai-scheduler.io/v1alpha1/domains")
    plane.request("DELETE", "/api/v1/persistentvolumes")
    plane.request("DELETE", "/apis/storage.k8s.io/v1/storageclasses")
    plane.request("DELETE", "/apis/storage.k8s.io/v1/csinodes")
    plane.request("DELETE", "/apis/resource.k8s.io/v1/resourceslices")
    plane.request("DELETE", "/apis/resource.k8s.io/v1/deviceclasses")
    _, body = plane.request("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")
    for item in body.get("items", []):
        name = item["metadata"]["name"]
        if not name.startswith("system-"):
            plane.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def install_scheduler(plane: ControlPlane) -> str:
    """`kubectl apply -f deploy/` as an administrator would; returns a token of the scheduler's account."""
    deploy = REPO / "deploy"
    plane.kubectl("apply", "-f", str(deploy / "crds"))
    for crd in sorted(deploy.glob("crds/*.yaml")):
        plane.wait_crd_established(yaml.safe_load(crd.read_text())["metadata"]["name"])
    plane.kubectl("apply", "-f", str(deploy))
    return plane.service_account_token("kube-system", "ai-scheduler")
