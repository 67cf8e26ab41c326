"""The aggregation layer of kube-apiserver, and the authentication and RBAC it rests on, for the simulated
API server: enough for an extension API server (ai-scheduler's visibility API) to be reached by users as
on a real cluster.

Off unless `SimApiServer.enable_aggregation()` is called; the simulated server otherwise authenticates no
one. Once on:
- Users: bearer tokens made by `add_user` name a user and groups (plus `system:authenticated`); a request
  without a token is the administrator (`system:masters`), as the sim's own clients (the scheduler, the
  tests) carry none.
- RBAC: Roles, ClusterRoles, RoleBindings and ClusterRoleBindings are stored like any object and
  evaluated as the RBAC authorizer does (apiGroups, resources, verbs, resourceNames, `*`; a RoleBinding
  grants in its namespace only; `system:masters` may do anything). `POST
  /apis/authorization.k8s.io/v1/subjectaccessreviews` answers from it.
- The front proxy: a CA and a client certificate of its own, published in the ConfigMap
  `kube-system/extension-apiserver-authentication` (`requestheader-*` keys) as kube-apiserver does.
- APIServices (`apiregistration.k8s.io/v1`): a request under `/apis/{group}/...` of a registered group is
  authorized for its user (verb and resource read from the path, as kube-apiserver's RequestInfo does),
  then proxied over HTTPS to the Service's endpoint (an EndpointSlice labelled
  `kubernetes.io/service-name`, as `--enable-aggregator-routing`) with the front proxy's certificate and
  the user in `X-Remote-User` / `X-Remote-Group`. Only `insecureSkipTLSVerify` APIServices are supported.
"""

from __future__ import annotations

import secrets
import ssl
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from ai_scheduler import pki
from ai_scheduler.sim.store import ResourceType, Store

FRONT_PROXY_NAME = "front-proxy-client"
ADMIN = ("admin", ("system:masters", "system:authenticated"))
RBAC = "rbac.authorization.k8s.io"
REVIEWS = ("apis", "authorization.k8s.io", "v1", "subjectaccessreviews")
TYPES = (
    ResourceType("configmaps", "ConfigMap"),
    ResourceType("endpointslices", "EndpointSlice", "discovery.k8s.io", "v1"),
    ResourceType("apiservices", "APIService", "apiregistration.k8s.io", "v1", namespaced=False,
                 has_status=True),
    ResourceType("roles", "Role", RBAC, "v1"),
    ResourceType("rolebindings", "RoleBinding", RBAC, "v1"),
    ResourceType("clusterroles", "ClusterRole", RBAC, "v1", namespaced=False),
    ResourceType("clusterrolebindings", "ClusterRoleBinding", RBAC, "v1", namespaced=False),
)


def _front_proxy(folder: Path) -> tuple[str, Path, Path]:
    """The front proxy's CA (PEM text) and its client certificate and key (files)."""
    ca_key = pki.new_key()
    ca = pki.certificate("sim-front-proxy-ca", ca_key, ca=True)
    key = pki.new_key()
    client = pki.certificate(FRONT_PROXY_NAME, key, issuer=ca, issuer_key=ca_key, client=True)
    cert_file, key_file = pki.write(folder, "front-proxy-client", client, key)
    return pki.pem(ca).decode(), cert_file, key_file


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


def _matches(values: Iterable[str], value: str) -> bool:
    return any(v in ("*", value) for v in values)


class Aggregation:
    """Users, RBAC, SubjectAccessReviews and the APIService proxy of one simulated API server."""

    def __init__(self, store: Store) -> None:
        self.store = store
        for rt in TYPES:
            if store.registry.lookup(rt.group, rt.version, rt.plural) is None:
                store.registry.register(rt)
        self.tokens: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._folder = tempfile.TemporaryDirectory(prefix="sim-front-proxy-")
        ca, cert_file, key_file = _front_proxy(Path(self._folder.name))
        self.proxy_ssl = ssl.create_default_context()
        self.proxy_ssl.check_hostname = False
        self.proxy_ssl.verify_mode = ssl.CERT_NONE  # insecureSkipTLSVerify
        self.proxy_ssl.load_cert_chain(cert_file, key_file)
        data = {
            "requestheader-client-ca-file": ca,
            "requestheader-allowed-names": orjson.dumps([FRONT_PROXY_NAME]).decode(),
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        }
        store.create(store.registry.resolve("configmaps"), {"metadata": {
            "name": "extension-apiserver-authentication", "namespace": "kube-system"}, "data": data})
        self._session: aiohttp.ClientSession | None = None

    def add_user(self, user: str, groups: Iterable[str] = ()) -> str:
        """A bearer token for the user (a member of `groups` and system:authenticated)."""
        token = f"{user}-{secrets.token_hex(8)}"
        self.tokens[token] = (user, (*groups, "system:authenticated"))
        return token

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._folder.cleanup()

    # ------------------------------------------------------------------ authentication and RBAC
    def identity(self, request: web.Request) -> tuple[str, tuple[str, ...]] | None:
        """The request's user: its bearer token's, the administrator without one, None for an unknown one."""
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return ADMIN
        return self.tokens.get(header.removeprefix("Bearer ").strip())

    def allowed(self, user: str, groups: Iterable[str], verb: str, group: str, resource: str,
                namespace: str = "", name: str = "") -> bool:
        """As the RBAC authorizer decides."""
        groups = set(groups)
        if "system:masters" in groups:
            return True

        def bound(binding: dict[str, Any]) -> bool:
            for subject in binding.get("subjects") or ():
                kind, subject_name = subject.get("kind"), subject.get("name")
                if (kind == "User" and subject_name == user) or (kind == "Group" and subject_name in groups):
                    return True
                if kind == "ServiceAccount" and user == (
                        f"system:serviceaccount:{subject.get('namespace')}:{subject_name}"):
                    return True
            return False

        def grants(role: dict[str, Any] | None) -> bool:
            for rule in (role or {}).get("rules") or ():
                if (_matches(rule.get("apiGroups") or (), group)
                        and _matches(rule.get("resources") or (), resource)
                        and _matches(rule.get("verbs") or (), verb)
                        and (not rule.get("resourceNames") or name in rule["resourceNames"])):
                    return True
            return False

        for binding in self.store.list("clusterrolebindings"):
            if bound(binding) and grants(self.store.get("clusterroles", None, binding["roleRef"]["name"])):
                return True
        if not namespace:
            return False
        for binding in self.store.list("rolebindings", namespace):
            ref = binding["roleRef"]
            role = (self.store.get("roles", namespace, ref["name"]) if ref.get("kind") == "Role"
                    else self.store.get("clusterroles", None, ref["name"]))
            if bound(binding) and grants(role):
                return True
        return False

    # ------------------------------------------------------------------ HTTP
    async def handle(self, request: web.Request, parts: list[str]) -> web.StreamResponse | None:
        """The answer to a request that is the aggregation layer's (a SubjectAccessReview, a path of an
        APIService's group); None for any other, which the simulated server serves itself."""
        if parts == [*REVIEWS] and request.method == "POST":
            return await self._review(request)
        if len(parts) < 2 or parts[0] != "apis":
            return None
        service = next((s for s in self.store.list("apiservices")
                        if (s.get("spec") or {}).get("group") == parts[1]), None)
        if service is None:
            return None
        who = self.identity(request)
        if who is None:
            return _status(401, "Unauthorized", "Unauthorized")
        if len(parts) >= 4:  # discovery (/apis/{group}[/{version}]) is for every authenticated user
            rest = parts[3:]
            namespace = ""
            if len(rest) >= 3 and rest[0] == "namespaces":
                namespace, rest = rest[1], rest[2:]
            resource, name = rest[0], (rest[1] if len(rest) > 1 else "")
            verb = ("get" if name else "list") if request.method == "GET" else request.method.lower()
            if not self.allowed(*who, verb, parts[1], resource, namespace, name):
                where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
                return _status(403, "Forbidden",
                               f'{resource}.{parts[1]} is forbidden: User "{who[0]}" cannot {verb} resource '
                               f'"{resource}" in API group "{parts[1]}"{where}')
        return await self._proxy(request, service, who)

    async def _review(self, request: web.Request) -> web.Response:
        review = orjson.loads(await request.read())
        spec = review.get("spec") or {}
        attributes = spec.get("resourceAttributes") or {}
        allowed = self.allowed(
            str(spec.get("user", "")), spec.get("groups") or (), str(attributes.get("verb", "")),
            str(attributes.get("group", "")), str(attributes.get("resource", "")),
            str(attributes.get("namespace", "")), str(attributes.get("name", "")))
        review["status"] = {"allowed": allowed}
        return web.Response(status=201, body=orjson.dumps(review), content_type="application/json")

    def _endpoint(self, service: dict[str, Any]) -> str | None:
        ref = service["spec"].get("service") or {}
        svc = self.store.get("services", ref.get("namespace"), str(ref.get("name")))
        if svc is None:
            return None
        wanted = ref.get("port", 443)
        port = next((p for p in svc["spec"].get("ports") or () if p.get("port") == wanted), None)
        if port is None:
            return None
        for slice_ in self.store.list("endpointslices", ref.get("namespace")):
            if (slice_["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != ref.get("name"):
                continue
            target = next((p for p in slice_.get("ports") or () if p.get("name") == port.get("name")), None)
            ready = [e for e in slice_.get("endpoints") or ()
                     if (e.get("conditions") or {}).get("ready", True)]
            if target is not None and ready:
                return f"https://{ready[0]['addresses'][0]}:{target['port']}"
        return None

    async def _proxy(self, request: web.Request, service: dict[str, Any],
                     who: tuple[str, tuple[str, ...]]) -> web.Response:
        if not service["spec"].get("insecureSkipTLSVerify"):
            return _status(503, "ServiceUnavailable", "the simulated aggregator needs insecureSkipTLSVerify")
        base = self._endpoint(service)
        if base is None:
            name = service["metadata"]["name"]
            return _status(503, "ServiceUnavailable", f"no endpoints for APIService {name}")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = [("X-Remote-User", who[0]), *(("X-Remote-Group", g) for g in who[1]),
                   ("Accept", request.headers.get("Accept", "application/json"))]
        try:
            async with self._session.request(request.method, base + request.path_qs, headers=headers,
                                             data=await request.read() or None, ssl=self.proxy_ssl) as answer:
                body = await answer.read()
                return web.Response(status=answer.status, body=body,
                                    content_type=answer.content_type or "application/json")
        except (aiohttp.ClientError, OSError) as error:
            return _status(503, "ServiceUnavailable", f"error trying to reach service: {error}")
