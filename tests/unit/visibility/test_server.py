"""The visibility API's server (visibility/server.py) over real TLS, with a front proxy played by the
test: a CA of its own that signs the proxy's client certificate, as kube-apiserver's requestheader CA does.

What the API server would decide (SubjectAccessReview) is a table of allowed questions here; the real
one is exercised by tests/e2e/test_e2e_visibility.py. These check the server's own rules: who is
authenticated (only the verified front proxy with an allowed name, and a user header), what is refused,
and what a user sees of pods in namespaces they may not read.
"""

from __future__ import annotations

import datetime as dt
import io
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ai_scheduler.log import JsonLogger
from ai_scheduler.visibility.resources import RecentDecisions, decision_items
from ai_scheduler.visibility.server import (
    Identity,
    RequestHeaderSettings,
    VisibilityServer,
    VisibilitySource,
)
from ai_scheduler.visibility.webui import page

API = "/apis/visibility.ai-scheduler.io/v1alpha1"


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def ca_certificate(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def client_context(folder: Path, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
                   common_name: str = "front-proxy-client") -> ssl.SSLContext:
    """A TLS client that does not check the server (self-signed) and presents a certificate signed by
    `ca` (none when `ca` is None)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if ca is None:
        return context
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_file, key_file = folder / f"{common_name}.crt", folder / f"{common_name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(_pem_key(key))
    context.load_cert_chain(cert_file, key_file)
    return context


def pending(namespace: str, name: str, position: int) -> dict[str, Any]:
    return {
        "apiVersion": "visibility.ai-scheduler.io/v1alpha1", "kind": "PendingPod",
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "queue": "default", "user": namespace, "group": "g", "level": 0, "position": position,
        "positionInQueue": position, "priority": 1.0, "factors": {}, "reason": "0/1 nodes are available",
        "gang": None, "gangStatus": None, "reservation": None,
    }


class Rules:
    """The stand-in for the API server's authorizer: the (user, verb, resource, namespace) allowed."""

    def __init__(self, allowed: set[tuple[str, str, str, str]]) -> None:
        self.allowed = allowed
        self.asked: list[tuple[Identity, str, str, str, str]] = []

    async def __call__(self, who: Identity, verb: str, resource: str, namespace: str, name: str) -> bool:
        self.asked.append((who, verb, resource, namespace, name))
        return (who.user, verb, resource, namespace) in self.allowed


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[VisibilityServer, Rules, Any]]:
    ca = ca_certificate("front-proxy-ca")
    rules = Rules({
        ("alice", "list", "pendingpods", ""), ("alice", "get", "pendingpods", "team-a"),
        ("carol", "list", "pendingpods", ""), ("carol", "get", "pendingpods", ""),
        ("carol", "list", "quotas", ""), ("carol", "list", "gpus", ""), ("carol", "get", "gpus", ""),
    })
    source = VisibilitySource(
        pending=lambda: [pending("team-b", "b-0", 1), pending("team-a", "a-0", 2),
                         pending("team-a", "a-1", 3)],
        quotas=lambda: [{"kind": "group", "name": "g", "min": {}, "max": {"cpu": "8"}, "used": {"cpu": "2"}}],
        gpus=lambda: [{"kind": "GpuNode", "metadata": {"name": "dgx-0"}, "devices": [
            {"index": 0, "holders": [{"namespace": "team-a", "name": "a-9", "memoryMiB": 1024},
                                     {"namespace": "team-b", "name": "b-9", "memoryMiB": 2048}]}]}],
        decisions=lambda: decision_items(recent),
    )
    recent = RecentDecisions(JsonLogger(stream=io.BytesIO()))
    for pod, result in (("team-a/a-0", "unschedulable"), ("team-b/b-0", "scheduled")):
        recent.info("decision", pod=pod, uid=f"uid-{pod}", result=result, node="n1", message="why")
    ca_pem = ca[0].public_bytes(serialization.Encoding.PEM).decode()
    server = VisibilityServer(source, rules, JsonLogger(), RequestHeaderSettings(
        client_ca=ca_pem, allowed_names=("front-proxy-client",)))
    port = await server.start("127.0.0.1", 0)
    yield server, rules, (tmp_path, ca, port)
    await server.stop()


async def call(context: ssl.SSLContext, port: int, path: str, user: str | None = "alice",
               groups: tuple[str, ...] = ("users",)) -> tuple[int, dict[str, Any]]:
    headers: list[tuple[str, str]] = [("X-Remote-Group", g) for g in groups]
    if user is not None:
        headers.append(("X-Remote-User", user))
    headers.append(("X-Remote-Extra-Scopes%2Fone", "a"))
    async with aiohttp.ClientSession() as session, session.get(
        f"https://127.0.0.1:{port}{path}", ssl=context, headers=headers
    ) as response:
        body = await response.json(content_type=None) if response.content_type == "application/json" else {}
        return response.status, body


async def test_only_the_verified_front_proxy_with_a_user_is_served(
    served: tuple[VisibilityServer, Rules, Any],
) -> None:
    _, rules, (folder, ca, port) = served
    proxy = client_context(folder, ca)
    for context, user in ((client_context(folder, None), "alice"),  # no certificate: the headers are ignored
                          (client_context(folder, ca, "someone-else"), "alice"),  # not an allowed name
                          (proxy, None)):  # the proxy, but no user
        for path in (f"{API}/pendingpods", API, "/apis"):
            status, body = await call(context, port, path, user)
            assert status == 401 and body["kind"] == "Status" and body["reason"] == "Unauthorized"
    assert rules.asked == []
    with pytest.raises(aiohttp.ClientError):  # a certificate of another CA fails the handshake
        await call(client_context(folder, ca_certificate("another-ca")), port, f"{API}/pendingpods")
    status, body = await call(proxy, port, API)
    assert status == 200 and body["kind"] == "APIResourceList"
    assert {r["name"]: r["namespaced"] for r in body["resources"]} == {
        "pendingpods": True, "quotas": False, "gpus": False, "decisions": False,
        "usage": False}
    status, body = await call(proxy, port, "/apis")
    assert status == 200 and body["groups"][0]["name"] == "visibility.ai-scheduler.io"


async def test_a_user_sees_their_namespace_and_where_others_stand(
    served: tuple[VisibilityServer, Rules, Any],
) -> None:
    _, rules, (folder, ca, port) = served
    proxy = client_context(folder, ca)
    status, body = await call(proxy, port, f"{API}/namespaces/team-a/pendingpods", groups=("users", "devs"))
    assert status == 200 and body["kind"] == "PendingPodList"
    assert [item["metadata"]["name"] for item in body["items"]] == ["a-0", "a-1"]
    who = rules.asked[-1][0]
    assert who.user == "alice" and who.groups == ("users", "devs") and who.extra == {"scopes/one": ("a",)}
    status, body = await call(proxy, port, f"{API}/namespaces/team-b/pendingpods")
    assert status == 403 and body["reason"] == "Forbidden" and '"alice" cannot get' in body["message"]
    status, body = await call(proxy, port, f"{API}/namespaces/team-a/pendingpods/a-1")
    assert status == 200 and body["kind"] == "PendingPod" and body["position"] == 3
    status, body = await call(proxy, port, f"{API}/namespaces/team-a/pendingpods/gone")
    assert status == 404 and body["reason"] == "NotFound"

    status, body = await call(proxy, port, f"{API}/pendingpods")
    assert status == 200
    first, *mine = body["items"]
    assert first["anonymous"] and first["metadata"] == {"namespace": None, "name": None, "uid": None}
    assert first["user"] is None and first["reason"] is None and first["position"] == 1
    assert first["queue"] == "default" and first["priority"] == 1.0
    assert [item["metadata"]["name"] for item in mine] == ["a-0", "a-1"]
    assert not any(item.get("anonymous") for item in mine)

    for path in ("quotas", "gpus", "gpus/dgx-0", "decisions"):
        status, _ = await call(proxy, port, f"{API}/{path}")
        assert status == 403
    rules.allowed |= {("alice", "list", "gpus", "")}
    status, body = await call(proxy, port, f"{API}/gpus")
    (holders,) = [device["holders"] for node in body["items"] for device in node["devices"]]
    assert holders == [{"namespace": "team-a", "name": "a-9", "memoryMiB": 1024},
                       {"namespace": None, "name": None, "memoryMiB": 2048}]


async def test_decisions_are_the_last_ones_newest_first_and_anonymous_elsewhere(
    served: tuple[VisibilityServer, Rules, Any],
) -> None:
    _, rules, (folder, ca, port) = served
    rules.allowed |= {("alice", "list", "decisions", "")}
    status, body = await call(client_context(folder, ca), port, f"{API}/decisions")
    assert status == 200 and body["kind"] == "DecisionList"
    newest, oldest = body["items"]
    assert newest["anonymous"] and newest["pod"] is None and newest["message"] is None
    assert newest["result"] == "scheduled" and newest["node"] == "n1"
    assert oldest["pod"] == "team-a/a-0" and oldest["metadata"]["name"] == "a-0"
    assert oldest["result"] == "unschedulable" and oldest["message"] == "why"


async def test_a_viewer_sees_everything(served: tuple[VisibilityServer, Rules, Any]) -> None:
    _, _, (folder, ca, port) = served
    proxy = client_context(folder, ca)
    status, body = await call(proxy, port, f"{API}/pendingpods", user="carol")
    assert status == 200 and [item["metadata"]["name"] for item in body["items"]] == ["b-0", "a-0", "a-1"]
    status, body = await call(proxy, port, f"{API}/quotas", user="carol")
    assert status == 200 and body["kind"] == "QuotaList" and body["items"][0]["used"] == {"cpu": "2"}
    status, body = await call(proxy, port, f"{API}/gpus/dgx-0", user="carol")
    assert status == 200 and body["metadata"]["name"] == "dgx-0"
    assert [h["name"] for h in body["devices"][0]["holders"]] == ["a-9", "b-9"]
    status, _ = await call(proxy, port, f"{API}/gpus/dgx-9", user="carol")
    assert status == 404


async def test_the_web_page_is_served_under_the_rule_of_pendingpods(
    served: tuple[VisibilityServer, Rules, Any],
) -> None:
    _, _, (folder, ca, port) = served
    async with aiohttp.ClientSession() as session, session.get(
        f"https://127.0.0.1:{port}{API}/ui/", ssl=client_context(folder, ca),
        headers={"X-Remote-User": "alice"},
    ) as reply:
        assert reply.status == 200 and reply.content_type == "text/html"
        assert await reply.text() == page()
    status, _ = await call(client_context(folder, ca), port, f"{API}/ui", user="bob")
    assert status == 403  # bob may not list the queue: no page either


def test_requestheader_settings_come_from_the_configmap() -> None:
    data = {
        "requestheader-client-ca-file": "PEM",
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    }
    settings = RequestHeaderSettings.from_configmap(data)
    assert settings.allowed_names == ("front-proxy-client",) and settings.uid_headers == ("X-Remote-Uid",)
    with pytest.raises(ValueError, match="aggregation layer"):
        RequestHeaderSettings.from_configmap({})


async def test_the_simulated_aggregation_layer_decides_as_rbac_does() -> None:
    """sim/aggregation.py, which the simulated backend of tests/e2e/test_e2e_visibility.py relies on: RBAC as
    the real authorizer evaluates it, and its SubjectAccessReview answers."""
    from ai_scheduler.sim import SimApiServer

    sim = SimApiServer(kubelets=False, node_controller=False)
    url = await sim.start()
    try:
        layer = sim.enable_aggregation()
        store = sim.store

        def create(plural: str, doc: dict[str, Any]) -> None:
            store.create(store.registry.resolve(plural), doc)

        rule = {"apiGroups": ["visibility.ai-scheduler.io"], "resources": ["pendingpods"], "verbs": ["get"]}
        create("clusterroles", {"metadata": {"name": "reader"}, "rules": [rule]})
        create("roles", {"metadata": {"name": "one", "namespace": "team-b"},
                         "rules": [{**rule, "resourceNames": ["b-0"]}]})
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"}
        create("rolebindings", {"metadata": {"name": "alice", "namespace": "team-a"}, "roleRef": ref,
                                "subjects": [{"kind": "User", "name": "alice"}]})
        create("rolebindings", {"metadata": {"name": "bob", "namespace": "team-b"},
                                "roleRef": {**ref, "kind": "Role", "name": "one"},
                                "subjects": [{"kind": "Group", "name": "devs"}]})
        create("clusterrolebindings", {"metadata": {"name": "robot"}, "roleRef": ref, "subjects": [
            {"kind": "ServiceAccount", "name": "robot", "namespace": "ci"}]})
        group = "visibility.ai-scheduler.io"
        assert layer.allowed("alice", (), "get", group, "pendingpods", "team-a")
        assert not layer.allowed("alice", (), "get", group, "pendingpods", "team-b")
        # A RoleBinding grants in its namespace only.
        assert not layer.allowed("alice", (), "get", group, "pendingpods")
        assert not layer.allowed("alice", (), "list", group, "pendingpods", "team-a")
        assert layer.allowed("bob", ("devs",), "get", group, "pendingpods", "team-b", "b-0")
        assert not layer.allowed("bob", ("devs",), "get", group, "pendingpods", "team-b", "b-1")
        assert layer.allowed("system:serviceaccount:ci:robot", (), "get", group, "pendingpods", "any")
        assert layer.allowed("root", ("system:masters",), "delete", "", "nodes")
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": "alice", "groups": ["users"], "resourceAttributes": {
                "group": group, "resource": "pendingpods", "verb": "get", "namespace": "team-a"}}}
        token = layer.add_user("mallory")
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{url}/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                    json=review) as reply:
                assert reply.status == 201 and (await reply.json())["status"] == {"allowed": True}
            create("apiservices", {"metadata": {"name": f"v1alpha1.{group}"}, "spec": {
                "group": group, "version": "v1alpha1", "insecureSkipTLSVerify": True,
                "service": {"namespace": "kube-system", "name": "nowhere", "port": 443}}})
            async with session.get(f"{url}/apis/{group}/v1alpha1/pendingpods",
                                   headers={"Authorization": "Bearer unknown"}) as reply:
                assert reply.status == 401
            async with session.get(f"{url}/apis/{group}/v1alpha1/pendingpods",
                                   headers={"Authorization": f"Bearer {token}"}) as reply:
                assert reply.status == 403 and 'User "mallory" cannot list' in (await reply.json())["message"]
            async with session.get(f"{url}/apis/{group}/v1alpha1/pendingpods") as reply:  # the admin
                assert reply.status == 503  # authorized, but the Service has no endpoint
        configmap = store.get("configmaps", "kube-system", "extension-apiserver-authentication")
        assert configmap is not None
        settings = RequestHeaderSettings.from_configmap(configmap["data"])
        assert settings.allowed_names == ("front-proxy-client",)
    finally:
        await sim.stop()
