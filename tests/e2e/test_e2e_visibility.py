"""The visibility API through the real API server's aggregation layer, for two users of different RBAC.

The daemon runs with `server.visibilityEnabled` under its own ServiceAccount; deploy/visibility/ is applied
as an administrator would (the APIService, its Service, the daemon's auth-delegator and
authentication-reader bindings, the users' roles), and an EndpointSlice sends the Service to the daemon on
this machine (no kube-proxy, no pod: the aggregator dials the endpoint itself). Users then call the API
server with their own tokens from its token file: alice may see namespace team-a's waiting pods, bob
team-b's, carol is an operator with the viewer role. What each gets is decided by the API server's RBAC for
the path and by the daemon's SubjectAccessReviews per namespace.

On the simulated backend the same test runs against the simulated server's aggregation layer
(sim/aggregation.py: token users, RBAC evaluated from the same objects, SubjectAccessReviews, the front
proxy's certificate); there the daemon's endpoint is on loopback, which a real EndpointSlice refuses.
tests/unit/visibility/test_server.py covers the server itself with a stand-in front proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
import yaml
from backends import Cluster, KubeCluster, SimCluster
from builders import make_pod
from conftest import StartScheduler, create_all, wait_for

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.config import AccountingSettings, parse_config
from ai_scheduler.sim.controlplane import REPO
from e2e.test_e2e_gpus import Agents, gpu_cluster, share

__all__ = ["gpu_cluster"]  # the fixture
API = "/apis/visibility.ai-scheduler.io/v1alpha1"
MANIFESTS = REPO / "deploy" / "visibility"
SLICE = "ai-scheduler-visibility-test"
APISERVICE = "v1alpha1.visibility.ai-scheduler.io"


def host_address() -> str:
    """This machine's IPv4 address on a non-loopback interface: an EndpointSlice refuses loopback
    addresses (and a host name needs a resolvable domain), so the daemon listens where the aggregator
    can be sent to."""
    candidates = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        candidates.append(str(probe.getsockname()[0]))
    with contextlib.suppress(OSError):
        candidates += socket.gethostbyname_ex(socket.gethostname())[2]
    for address in candidates:
        ip = ipaddress.ip_address(address)
        if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
            return address
    pytest.skip("no non-loopback IPv4 address on this machine for the APIService's endpoint")


def visibility_config(address: str) -> Any:
    return parse_config({
        "server": {"port": 0, "bindAddress": address, "visibilityEnabled": True, "visibilityPort": 0},
        "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2},
        "groups": {"research": {"level": 1, "min": {"cpu": "8"}, "max": {"cpu": "400"}}},
        "users": {"alice": {"group": "research", "max": {"cpu": "300"}}, "bob": {"group": "research"}},
        "namespaces": {"team-a": {"user": "alice"}, "team-b": {"user": "bob"}},
    })


def endpoint_slice(address: str, port: int) -> dict[str, Any]:
    """The Service's endpoint: the daemon on this machine."""
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": SLICE, "namespace": "kube-system",
                     "labels": {"kubernetes.io/service-name": "ai-scheduler-visibility",
                                "endpointslice.kubernetes.io/managed-by": "tests.ai-scheduler.io"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }


def binding(kind: str, name: str, role: str, user: str, namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


BINDINGS = (
    ("/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings",
     binding("RoleBinding", "alice-visibility", "ai-scheduler-visibility-namespace", "alice", "team-a")),
    ("/apis/rbac.authorization.k8s.io/v1/namespaces/team-b/rolebindings",
     binding("RoleBinding", "bob-visibility", "ai-scheduler-visibility-namespace", "bob", "team-b")),
    ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
     binding("ClusterRoleBinding", "carol-visibility", "ai-scheduler-visibility-viewer", "carol")),
)


class KubeGateway:
    """The real API server: deploy/visibility/ applied with kubectl, users with tokens of its token file."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.plane = cluster.plane
        self.address = host_address()

    def install(self) -> None:
        plane = self.plane
        plane.kubectl("apply", "-f", str(MANIFESTS))
        for namespace in ("team-a", "team-b"):
            plane.request("POST", "/api/v1/namespaces",
                          {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for path, body in BINDINGS:
            status, answer = plane.request("POST", path, body)
            assert status in (201, 409), answer

    def uninstall(self) -> None:
        """An APIService left without a backend would make the API server's discovery incomplete for the
        tests that follow."""
        plane = self.plane
        plane.kubectl("delete", "--ignore-not-found", "-f", str(MANIFESTS))
        plane.request("DELETE", f"/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices/{SLICE}")
        for path, body in BINDINGS:
            plane.request("DELETE", f"{path}/{body['metadata']['name']}")

    async def route(self, port: int) -> None:
        status, body = await asyncio.to_thread(
            self.plane.request, "POST", "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
            endpoint_slice(self.address, port))
        assert status == 201, body.get("message")
        await wait_for(self._available, timeout=90, interval=0.5, what="the APIService Available")

    def _available(self) -> bool:
        status, body = self.plane.request("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
        conditions = (body.get("status") or {}).get("conditions") or []
        return status == 200 and any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

    async def get(self, user: str, path: str) -> tuple[int, dict[str, Any]]:
        """GET through the API server with the user's own token (off the event loop the daemon runs on)."""
        return await asyncio.to_thread(self.plane.request, "GET", path, None, self.plane.user_tokens[user])


class SimGateway:
    """The simulated API server with its aggregation layer on (sim/aggregation.py): the same objects,
    stored directly, and tokens of its own."""

    KINDS = {"APIService": "apiservices", "Service": "services", "ClusterRole": "clusterroles",
             "ClusterRoleBinding": "clusterrolebindings", "RoleBinding": "rolebindings"}

    def __init__(self, cluster: SimCluster) -> None:
        self.sim = cluster.sim
        self.aggregation = cluster.sim.enable_aggregation()
        self.tokens = {user: self.aggregation.add_user(user, ["users"]) for user in ("alice", "bob", "carol")}
        self.address = "127.0.0.1"

    def _create(self, doc: dict[str, Any]) -> None:
        store = self.sim.store
        store.create(store.registry.resolve(self.KINDS[doc["kind"]]), copy.deepcopy(doc))

    def install(self) -> None:
        for path in sorted(MANIFESTS.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    self._create(doc)
        for _, body in BINDINGS:
            self._create(body)

    def uninstall(self) -> None:
        pass  # the simulated server goes with the test

    async def route(self, port: int) -> None:
        store = self.sim.store
        store.create(store.registry.resolve("endpointslices"), endpoint_slice(self.address, port))

    async def get(self, user: str, path: str) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"}
        async with aiohttp.ClientSession() as session, session.get(
            self.sim.url + path, headers=headers
        ) as reply:
            return reply.status, await reply.json(content_type=None)


Gateway = KubeGateway | SimGateway


@pytest.fixture
def gateway(cluster: Cluster) -> Iterator[Gateway]:
    """deploy/visibility/ and the users' bindings, on either backend; removed afterwards."""
    made: Gateway = KubeGateway(cluster) if isinstance(cluster, KubeCluster) else SimGateway(
        cast(SimCluster, cluster))
    made.install()
    try:
        yield made
    finally:
        made.uninstall()


def direct(address: str, port: int) -> int:
    """A request straight to the daemon, without the front proxy's certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://{address}:{port}{API}/pendingpods")
    request.add_header("X-Remote-User", "system:admin")
    request.add_header("X-Remote-Group", "system:masters")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
async def waiting(api: KubeClient, gpu_cluster: Agents) -> AsyncIterator[None]:
    """Pods too large for any node (64 CPUs each), in both namespaces, and one GPU share that is placed."""
    pods = [make_pod(f"a-{i}", namespace="team-a", cpu="100") for i in range(2)]
    pods.append(make_pod("b-0", namespace="team-b", cpu="100"))
    await create_all(api, [], [*pods, share("slice", "10Gi")])
    yield


async def test_users_see_the_queue_through_the_api_server_as_rbac_allows(
    gateway: Gateway, waiting: None, start_scheduler: StartScheduler, tmp_path: Path, api: KubeClient,
) -> None:
    address = gateway.address
    accounting = AccountingSettings(f"sqlite:///{tmp_path / 'accounting.db'}", checkpoint_seconds=0.3)
    running = await start_scheduler(visibility_config(address), accounting=accounting)
    server = running.scheduler.visibility
    assert server is not None and server.port
    await gateway.route(server.port)

    def reasons_known() -> bool:
        items = running.scheduler.visibility.source.pending() if running.scheduler.visibility else []
        return len(items) == 3 and all(item["reason"] for item in items)

    await wait_for(reasons_known, timeout=30, what="the three pods waiting with a reason")

    # alice: team-a's waiting pods in full, with positions and the Unschedulable reason.
    status, body = await gateway.get("alice", f"{API}/namespaces/team-a/pendingpods")
    assert status == 200, body
    assert body["kind"] == "PendingPodList" and body["apiVersion"] == "visibility.ai-scheduler.io/v1alpha1"
    assert sorted(item["metadata"]["name"] for item in body["items"]) == ["a-0", "a-1"]
    for item in body["items"]:
        assert item["metadata"]["namespace"] == "team-a" and item["metadata"]["uid"]
        assert item["user"] == "alice" and item["group"] == "research" and item["queue"] == "default"
        assert 1 <= item["position"] <= 3 and item["positionInQueue"] in (1, 2, 3)
        assert "Insufficient cpu" in item["reason"], item["reason"]
        assert isinstance(item["factors"], dict)
    status, one = await gateway.get("alice", f"{API}/namespaces/team-a/pendingpods/a-0")
    assert status == 200 and one["kind"] == "PendingPod" and one["metadata"]["name"] == "a-0"
    status, _ = await gateway.get("alice", f"{API}/namespaces/team-a/pendingpods/not-waiting")
    assert status == 404

    # ...but not team-b's: refused by the daemon's SubjectAccessReview (the API server let the path through,
    # as every signed-in user may list the queue).
    status, body = await gateway.get("alice", f"{API}/namespaces/team-b/pendingpods")
    assert status == 403, body
    assert 'cannot get resource "pendingpods"' in body["message"]
    status, _ = await gateway.get("alice", f"{API}/namespaces/team-b/pendingpods/b-0")
    assert status == 403

    # The whole queue: her pods by name, bob's where they stand, anonymous.
    status, body = await gateway.get("alice", f"{API}/pendingpods")
    assert status == 200, body
    items = body["items"]
    assert [item["position"] for item in items] == [1, 2, 3]
    named = [item for item in items if not item.get("anonymous")]
    hidden = [item for item in items if item.get("anonymous")]
    assert sorted(item["metadata"]["name"] for item in named) == ["a-0", "a-1"]
    assert len(hidden) == 1
    assert hidden[0]["metadata"] == {"namespace": None, "name": None, "uid": None}
    assert hidden[0]["user"] is None and hidden[0]["reason"] is None and hidden[0]["queue"] == "default"

    # bob: the other way round.
    status, body = await gateway.get("bob", f"{API}/namespaces/team-b/pendingpods")
    assert status == 200 and [item["metadata"]["name"] for item in body["items"]] == ["b-0"]
    status, body = await gateway.get("bob", f"{API}/pendingpods")
    assert sorted(str(item["metadata"]["name"]) for item in body["items"]) == ["None", "None", "b-0"]

    # A logical domain of one GPU node: the GPU view says which nodes belong to it.
    made = await api.request("POST", "/apis/ai-scheduler.io/v1alpha1/domains", body={
        "apiVersion": "ai-scheduler.io/v1alpha1", "kind": "Domain", "metadata": {"name": "nvlink-pool"},
        "spec": {"nodes": ["dgx-1"]}})
    assert made.ok, made.message
    await wait_for(lambda: running.log_lines("domains.applied"), what="the domain in force")

    # Quotas and GPUs: for the viewer (carol), refused by the API server's RBAC to alice and bob.
    for user in ("alice", "bob"):
        for resource in ("quotas", "gpus", "gpus/dgx-0"):
            status, _ = await gateway.get(user, f"{API}/{resource}")
            assert status == 403, (user, resource)
    status, body = await gateway.get("carol", f"{API}/quotas")
    assert status == 200 and body["kind"] == "QuotaList", body
    quotas = {(item["kind"], item["name"]): item for item in body["items"]}
    assert quotas[("group", "research")]["min"] == {"cpu": "8"}
    assert quotas[("group", "research")]["max"] == {"cpu": "400"}
    assert quotas[("user", "alice")]["max"] == {"cpu": "300"}
    assert quotas[("user", "alice")]["used"] == {}  # nothing of hers is placed
    status, body = await gateway.get("carol", f"{API}/gpus")
    assert status == 200 and body["kind"] == "GpuNodeList", body
    assert sorted(node["metadata"]["name"] for node in body["items"]) == [f"dgx-{i}" for i in range(4)]
    assert {node["metadata"]["name"]: node["domains"] for node in body["items"]} == {
        "dgx-0": [], "dgx-1": ["nvlink-pool"], "dgx-2": [], "dgx-3": []}
    held = [(node["metadata"]["name"], device["index"], holder)
            for node in body["items"] for device in node["devices"] for holder in device["holders"]]
    assert len(held) == 1 and held[0][2]["name"] == "slice" and held[0][2]["memoryMiB"] == 10240
    node, index, _ = held[0]
    status, body = await gateway.get("carol", f"{API}/gpus/{node}")
    assert status == 200 and body["kind"] == "GpuNode"
    device = next(d for d in body["devices"] if d["index"] == index)
    assert device["freeMemoryMiB"] <= device["memoryMiB"] - 10240 and device["island"] in (0, 4)
    status, body = await gateway.get("carol", f"{API}/pendingpods")
    assert status == 200 and not any(item.get("anonymous") for item in body["items"])

    # The last decisions: alice sees hers by name, the others' anonymous; the viewer sees all.
    status, body = await gateway.get("alice", f"{API}/decisions")
    assert status == 200 and body["kind"] == "DecisionList", body
    mine = {item["pod"] for item in body["items"] if not item.get("anonymous")}
    assert mine == {"team-a/a-0", "team-a/a-1"}
    assert any(item.get("anonymous") and item["result"] for item in body["items"])
    status, body = await gateway.get("carol", f"{API}/decisions")
    pods = {item["pod"] for item in body["items"]}
    assert {"team-a/a-0", "team-b/b-0", "default/slice"} <= pods
    slice_decision = next(item for item in body["items"] if item["pod"] == "default/slice")
    assert slice_decision["result"] == "scheduled" and slice_decision["node"] == node

    # Discovery, for kubectl and the aggregator.
    status, body = await gateway.get("alice", API)
    assert status == 200
    assert {r["name"] for r in body["resources"]} == {"pendingpods", "quotas", "gpus", "decisions", "usage"}

    # What was used (the accounting database): for the viewer, refused to alice by the API server's RBAC.
    status, _ = await gateway.get("alice", f"{API}/usage")
    assert status == 403
    for _ in range(100):  # the GPU share's row written by a checkpoint
        status, body = await gateway.get("carol", f"{API}/usage?since=1h&by=namespace&step=10m")
        if status != 200 or body.get("items"):
            break
        await asyncio.sleep(0.1)
    assert status == 200 and body["kind"] == "UsageList", body
    [used] = body["items"]
    assert (used["key"], used["pods"], len(used["series"])) == ("default", 1, 6)
    assert used["gpuHours"] > 0 and used["series"][-1] > 0  # a 10 GiB share, running now
    status, body = await gateway.get("carol", f"{API}/usage?since=soon")
    assert status == 400 and "must be durations" in body["message"]

    # The headers count only from the front proxy: straight to the daemon, with no certificate, is 401.
    assert await asyncio.to_thread(direct, address, server.port) == 401
    assert running.log_lines("visibility.front_proxy"), "the requestheader CA was read"
