"""deploy/: every manifest is valid for Kubernetes 1.37, and the pieces agree with each other and the code."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from paths import ROOT

from ai_scheduler.agent import GPUS_ANNOTATION, UPDATED_ANNOTATION
from ai_scheduler.config import default_config, parse_config

KUBERNETES_VERSION = "1.37.0"
DEPLOY = ROOT / "deploy"
# Prometheus rules and a Grafana dashboard, no Kubernetes objects (`kubectl apply -f deploy/` does not
# recurse into it): tests/manifests/test_monitoring.py checks them.
MONITORING = DEPLOY / "monitoring"
DEFAULT_YAML = ROOT / "ai_scheduler" / "config" / "default.yaml"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection", "*"})


def _documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]):
        if path.is_relative_to(MONITORING):
            continue
        with path.open() as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is not None:  # an empty document between two '---' is no object
                    yield f"{path.relative_to(DEPLOY)}#{i}", doc


DOCUMENTS = list(_documents())


def _find(kind: str, name: str) -> dict[str, Any]:
    matches = [doc for _, doc in DOCUMENTS if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name!r} under deploy/, found {len(matches)}"
    return matches[0]


def _closed(schema: Any) -> Any:
    """The schema with every object that lists its properties closed to others.

    The API server prunes unknown fields of a structural schema without a word; closing the objects
    makes such a field (a typo, `minMembers`) fail here instead. Objects that keep unknown fields
    (`x-kubernetes-preserve-unknown-fields`) or map values (`additionalProperties`) stay as they are.
    """
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: (value if key == "properties" else _closed(value)) for key, value in schema.items()}
    if "properties" in schema:
        closed["properties"] = {name: _closed(sub) for name, sub in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            closed["additionalProperties"] = False
    return closed


def _custom_resource_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema, closed (see `_closed`), from the CRDs shipped under deploy/."""
    schemas = {}
    for _, doc in DOCUMENTS:
        if doc["kind"] == "CustomResourceDefinition":
            spec = doc["spec"]
            for version in spec["versions"]:
                schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = _closed(
                    version["schema"]["openAPIV3Schema"])
    return schemas


def test_deploy_holds_the_expected_objects() -> None:
    kinds = {(doc["kind"], doc["metadata"]["name"]) for _, doc in DOCUMENTS}
    assert {("ServiceAccount", "ai-scheduler"), ("ClusterRole", "ai-scheduler"),
            ("ClusterRoleBinding", "ai-scheduler"), ("ConfigMap", "ai-scheduler-config"),
            ("Deployment", "ai-scheduler"), ("Pod", "cuda-smoke-test"),
            ("CustomResourceDefinition", "podgroups.scheduling.x-k8s.io"), ("PodGroup", "train-job"),
            ("ServiceAccount", "ai-scheduler-agent"), ("ClusterRole", "ai-scheduler-agent"),
            ("ClusterRoleBinding", "ai-scheduler-agent"), ("DaemonSet", "ai-scheduler-agent"),
            ("ValidatingAdmissionPolicy", "ai-scheduler-agent-own-node-gpus"),
            ("ValidatingAdmissionPolicyBinding", "ai-scheduler-agent-own-node-gpus"),
            ("PodDisruptionBudget", "ai-scheduler"), ("Role", "ai-scheduler-leader-election"),
            ("RoleBinding", "ai-scheduler-leader-election")} <= kinds


@pytest.mark.parametrize(("where", "doc"), DOCUMENTS, ids=[where for where, _ in DOCUMENTS])
def test_manifest_is_valid(where: str, doc: dict[str, Any]) -> None:
    """Strict: an unknown field fails here instead of being dropped by the API server."""
    custom = _custom_resource_schemas().get((doc["apiVersion"], doc["kind"]))
    if custom is not None:  # an example of one of our own CRDs: validate against the CRD's schema
        jsonschema.Draft202012Validator(custom).validate(doc)
        return
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("change", [
    pytest.param(lambda spec: spec.update(minMembers=4), id="typo in a field name"),
    pytest.param(lambda spec: spec.update(minMember=0), id="minMember below 1"),
    pytest.param(lambda spec: spec.update(scheduleTimeoutSeconds="120"), id="timeout as a string"),
    pytest.param(lambda spec: spec["minResources"].update({"nvidia.com/gpu": "32 GPUs"}), id="no quantity"),
])
def test_a_faulty_podgroup_fails_validation(change: Callable[[dict[str, Any]], None]) -> None:
    """The CRD's schema, as this file checks it, catches what the API server would reject or drop."""
    podgroup = copy.deepcopy(_find("PodGroup", "train-job"))
    change(podgroup["spec"])
    schema = _custom_resource_schemas()[("scheduling.x-k8s.io/v1alpha1", "PodGroup")]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(podgroup)


def test_podgroup_crd_is_the_scheduler_plugins_one_and_the_scheduler_may_use_it() -> None:
    crd = _find("CustomResourceDefinition", "podgroups.scheduling.x-k8s.io")
    spec = crd["spec"]
    assert spec["group"] == "scheduling.x-k8s.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "PodGroup" and spec["names"]["plural"] == "podgroups"
    assert set(spec["names"]["shortNames"]) == {"pg", "pgs"}
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}  # the scheduler writes status through it
    # *.k8s.io and *.x-k8s.io groups are refused by the API server without this annotation.
    assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("https://")
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(schema["spec"]["properties"]) == {"minMember", "minResources", "scheduleTimeoutSeconds"}
    assert set(schema["status"]["properties"]) == {"phase", "occupiedBy", "running", "succeeded", "failed",
                                                   "scheduleStartTime"}

    def granted(resource: str) -> set[str]:
        return {verb for rule in _find("ClusterRole", "ai-scheduler")["rules"]
                if spec["group"] in rule["apiGroups"] and resource in rule["resources"]
                for verb in rule["verbs"]}

    # Exactly what the scheduler calls: test_e2e_rbac checks that against a real API server's audit log.
    assert granted("podgroups") == {"list", "watch"}
    assert granted("podgroups/status") == {"patch"}


def _gpus(pod: dict[str, Any]) -> int:
    return sum(int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
               for container in pod["spec"]["containers"])


def test_example_podgroup_gang_is_complete() -> None:
    podgroup = _find("PodGroup", "train-job")
    namespace = podgroup["metadata"]["namespace"]
    members = [doc for _, doc in DOCUMENTS if doc["kind"] == "Pod"
               and doc["metadata"].get("labels", {}).get("scheduling.x-k8s.io/pod-group") == "train-job"]
    assert len(members) == podgroup["spec"]["minMember"] == 4
    assert all(pod["metadata"]["namespace"] == namespace for pod in members)  # a PodGroup is namespaced
    assert all(pod["spec"]["schedulerName"] == default_config().scheduler_name for pod in members)
    assert sum(_gpus(pod) for pod in members) == int(podgroup["spec"]["minResources"]["nvidia.com/gpu"]) == 32


def test_example_label_gang_is_complete() -> None:
    name = "pod-group.scheduling.sigs.k8s.io/name"
    min_available = "pod-group.scheduling.sigs.k8s.io/min-available"
    members = [doc for _, doc in DOCUMENTS
               if doc["kind"] == "Pod" and doc["metadata"].get("labels", {}).get(name) == "mpi-job"]
    assert len(members) == 3
    assert {pod["metadata"]["labels"][min_available] for pod in members} == {"3"}
    assert len({pod["metadata"]["namespace"] for pod in members}) == 1
    assert all(pod["spec"]["schedulerName"] == default_config().scheduler_name for pod in members)


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
    assert spec["replicas"] == 2  # one leader, one warm standby (test_high_availability below)
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
    """`kubectl apply -f deploy/` does not recurse: everything in deploy/ itself is part of the install.

    The CRDs live in deploy/crds/, applied first on their own (`kubectl apply -f deploy/crds/`): a
    custom resource sent in the same apply as its CRD is refused until the CRD is established.
    """
    top_level = {doc["kind"] for where, doc in DOCUMENTS if "/" not in where.split("#")[0]}
    assert not {"Pod", "PodGroup", "CustomResourceDefinition"} & top_level
    for where, doc in DOCUMENTS:
        if doc["kind"] == "CustomResourceDefinition":
            assert where.startswith("crds/"), f"{where}: CRDs belong in deploy/crds/"


def test_high_availability_two_replicas_apart_a_budget_and_the_lease() -> None:
    """Two replicas on different nodes where possible, one kept through drains, each knowing its own
    name and namespace (the leader election's identity and the Lease's namespace), and a Role for that
    Lease and no other."""
    deployment = _find("Deployment", "ai-scheduler")
    spec = deployment["spec"]
    labels = spec["template"]["metadata"]["labels"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0  # the standby stays through a rollout
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    (container,) = pod["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}

    budget = _find("PodDisruptionBudget", "ai-scheduler")
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]

    election = default_config().leader_election
    assert election.enabled and election.lease_namespace == ""  # the pod's own: kube-system
    role = _find("Role", "ai-scheduler-leader-election")
    assert role["metadata"]["namespace"] == "kube-system"
    granted = {(verb, name) for rule in role["rules"] for verb in rule["verbs"]
               for name in rule.get("resourceNames", ["*"])}
    assert all(rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
               for rule in role["rules"])
    # get and update of our Lease only; create cannot name the object (its name is not in the URL).
    assert granted == {("create", "*"), ("get", election.lease_name), ("update", election.lease_name)}
    binding = _find("RoleBinding", "ai-scheduler-leader-election")
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": "kube-system"}]
    # Nothing about Leases in the ClusterRole: no other Lease of the cluster is the scheduler's to touch.
    assert not any("coordination.k8s.io" in rule["apiGroups"]
                   for rule in _find("ClusterRole", "ai-scheduler")["rules"])


# ---------------------------------------------------------------------------- the node agent

AGENT_USER = "system:serviceaccount:kube-system:ai-scheduler-agent"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def test_agent_may_get_and_patch_nodes_and_nothing_else() -> None:
    account = _find("ServiceAccount", "ai-scheduler-agent")
    assert account["metadata"]["namespace"] == "kube-system"
    assert _find("ClusterRole", "ai-scheduler-agent")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = _find("ClusterRoleBinding", "ai-scheduler-agent")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "ai-scheduler-agent"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ai-scheduler-agent",
                                    "namespace": "kube-system"}]
    # No other role or binding hands the agent's account anything more.
    others = [doc for _, doc in DOCUMENTS if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
              and doc["metadata"]["name"] != "ai-scheduler-agent"]
    assert all(subject.get("name") != "ai-scheduler-agent"
               for doc in others for subject in doc.get("subjects", []))


def test_agent_daemonset_runs_on_managed_gpu_nodes_with_nvml_and_little_else() -> None:
    daemonset = _find("DaemonSet", "ai-scheduler-agent")
    assert daemonset["metadata"]["namespace"] == "kube-system"
    spec = daemonset["spec"]
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "ai-scheduler-agent"
    assert pod["nodeSelector"] == {"ai-scheduler.io/gpu-managed": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["runtimeClassName"] == "nvidia"
    assert not {"hostNetwork", "hostPID", "hostIPC", "volumes"} & pod.keys()
    (container,) = pod["containers"]
    assert container["image"] == "ai-scheduler:0.1.0"
    assert container["command"] == ["ai-scheduler", "agent"]
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})  # it must see every GPU
    assert container["resources"]["limits"]["memory"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}


def test_agent_policy_limits_the_agent_to_its_own_nodes_gpu_annotations() -> None:
    policy = _find("ValidatingAdmissionPolicy", "ai-scheduler-agent-own-node-gpus")
    spec = policy["spec"]
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [""] and rule["resources"] == ["nodes"] and rule["operations"] == ["UPDATE"]
    (condition,) = spec["matchConditions"]
    assert AGENT_USER in condition["expression"]  # nobody else's node writes are evaluated, let alone denied
    cel = "\n".join([*(v["expression"] for v in spec["variables"]),
                     *(v["expression"] for v in spec["validations"])])
    for needed in (NODE_NAME_EXTRA, GPUS_ANNOTATION, UPDATED_ANNOTATION, "object.metadata.name",
                   "object.metadata.labels", "object.spec == oldObject.spec",
                   "object.status == oldObject.status", "oldObject.metadata.annotations"):
        assert needed in cel, f"the policy's CEL does not mention {needed}"
    binding = _find("ValidatingAdmissionPolicyBinding", "ai-scheduler-agent-own-node-gpus")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


def test_visibility_api_is_registered_for_the_daemon() -> None:
    """deploy/visibility/: the APIService reaches the daemon's visibility port through its Service, the
    daemon may delegate authentication and authorization, and the users' roles name the API's resources."""
    from ai_scheduler.visibility.server import GROUP, RESOURCES, VERSION

    apiservice = _find("APIService", f"{VERSION}.{GROUP}")
    spec = apiservice["spec"]
    assert (spec["group"], spec["version"]) == (GROUP, VERSION)
    service = _find("Service", spec["service"]["name"])
    assert service["metadata"]["namespace"] == spec["service"]["namespace"] == "kube-system"
    (port,) = service["spec"]["ports"]
    assert port["port"] == spec["service"]["port"] == 443 and port["name"] == "https"
    assert port["targetPort"] == default_config().server.visibility_port
    deployment = _find("Deployment", "ai-scheduler")
    # The Deployment's pods, and of them the leader alone: the role label is the daemon's own to write.
    from ai_scheduler.daemon.leader import ROLE_LABEL

    selector = dict(service["spec"]["selector"])
    assert selector.pop(ROLE_LABEL) == "leader"
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    account = {"kind": "ServiceAccount", "name": "ai-scheduler", "namespace": "kube-system"}
    delegator = _find("ClusterRoleBinding", "ai-scheduler-visibility:auth-delegator")
    assert delegator["roleRef"]["name"] == "system:auth-delegator" and delegator["subjects"] == [account]
    reader = _find("RoleBinding", "ai-scheduler-visibility:auth-reader")
    assert reader["metadata"]["namespace"] == "kube-system" and reader["subjects"] == [account]
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    served = {r["name"] for r in RESOURCES} | {"ui"}
    for name in ("ai-scheduler-visibility-viewer", "ai-scheduler-visibility-namespace",
                 "ai-scheduler-visibility-queue"):
        for rule in _find("ClusterRole", name)["rules"]:
            assert rule["apiGroups"] == [GROUP] and set(rule["resources"]) <= served
            assert set(rule["verbs"]) <= {"get", "list"}, "the visibility API is read-only"
    queue = _find("ClusterRoleBinding", "ai-scheduler-visibility-queue")
    assert queue["subjects"][0]["name"] == "system:authenticated"
