"""deploy/: every manifest is valid for Kubernetes 1.36, and the pieces agree with each other and the code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from ai_scheduler.config import default_config, parse_config

KUBERNETES_VERSION = "1.36.0"
DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
DEFAULT_YAML = Path(__file__).resolve().parent.parent / "ai_scheduler" / "config" / "default.yaml"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection", "*"})


def _documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]):
        with path.open() as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is not None:  # an empty document between two '---' is no object
                    yield f"{path.relative_to(DEPLOY)}#{i}", doc


DOCUMENTS = list(_documents())


def _find(kind: str, name: str) -> dict[str, Any]:
    matches = [doc for _, doc in DOCUMENTS if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name!r} under deploy/, found {len(matches)}"
    return matches[0]


def _custom_resource_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, from the CRDs shipped under deploy/."""
    schemas = {}
    for _, doc in DOCUMENTS:
        if doc["kind"] == "CustomResourceDefinition":
            spec = doc["spec"]
            for version in spec["versions"]:
                schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = (
                    version["schema"]["openAPIV3Schema"])
    return schemas


def test_deploy_holds_the_expected_objects() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in DOCUMENTS}
    assert {("ServiceAccount", "ai-scheduler"), ("ClusterRole", "ai-scheduler"),
            ("ClusterRoleBinding", "ai-scheduler"), ("ConfigMap", "ai-scheduler-config"),
            ("Deployment", "ai-scheduler"), ("Pod", "cuda-smoke-test")} <= kinds


@pytest.mark.parametrize(("where", "doc"), DOCUMENTS, ids=[where for where, _ in DOCUMENTS])
def test_manifest_is_valid(where: str, doc: dict[str, Any]) -> None:
    """Strict: an unknown field fails here instead of being dropped by the API server."""
    custom = _custom_resource_schemas().get((doc["apiVersion"], doc["kind"]))
    if custom is not None:  # an example of one of our own CRDs: validate against the CRD's schema
        jsonschema.Draft202012Validator(custom).validate(doc)
        return
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_configmap_holds_the_default_config() -> None:
    text = _find("ConfigMap", "ai-scheduler-config")["data"]["config.yaml"]
    assert parse_config(yaml.safe_load(text), source="deploy/configmap.yaml") == default_config()
    assert text == DEFAULT_YAML.read_text(), "deploy/configmap.yaml and default.yaml have drifted apart"


def test_cluster_role_grants_binding_and_nothing_broad() -> None:
    rules = _find("ClusterRole", "ai-scheduler")["rules"]
    assert any("" in r["apiGroups"] and "pods/binding" in r["resources"] and "create" in r["verbs"]
               for r in rules)
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), f"wildcard in {field}: {rule}"
        if "secrets" in rule.get("resources", []):
            assert not WRITE_VERBS & set(rule["verbs"]), f"write access to secrets: {rule}"


def test_the_pieces_refer_to_each_other() -> None:
    account = _find("ServiceAccount", "ai-scheduler")
    binding = _find("ClusterRoleBinding", "ai-scheduler")
    deployment = _find("Deployment", "ai-scheduler")
    configmap = _find("ConfigMap", "ai-scheduler-config")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "ai-scheduler"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]

    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert deployment["metadata"]["namespace"] == account["metadata"]["namespace"] == "kube-system"
    assert configmap["metadata"]["namespace"] == "kube-system"
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert spec["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "ai-scheduler"
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["priorityClassName"] == "system-cluster-critical"

    (container,) = pod["containers"]
    assert container["command"] == ["ai-scheduler", "run", "--config", "/etc/ai-scheduler/config.yaml"]
    assert {"name": "TZ", "value": "UTC"} in container["env"]
    config_volume = next(v for v in pod["volumes"]
                         if v.get("configMap", {}).get("name") == configmap["metadata"]["name"])
    mount = next(m for m in container["volumeMounts"] if m["name"] == config_volume["name"])
    assert mount["mountPath"] == "/etc/ai-scheduler" and "subPath" not in mount  # subPath never sees updates
    assert "config.yaml" in configmap["data"]

    (port,) = container["ports"]
    assert port == {"name": "http", "containerPort": default_config().server.port, "protocol": "TCP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}

    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


def test_example_pod_asks_for_a_gpu_from_ai_scheduler() -> None:
    pod = _find("Pod", "cuda-smoke-test")
    assert pod["spec"]["schedulerName"] == default_config().scheduler_name
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_examples_are_not_applied_with_the_scheduler() -> None:
    """`kubectl apply -f deploy/` does not recurse: everything in deploy/ itself is part of the install."""
    top_level = {doc["kind"] for where, doc in DOCUMENTS if "/" not in where.split("#")[0]}
    assert "Pod" not in top_level
