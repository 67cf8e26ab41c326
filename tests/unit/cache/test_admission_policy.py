"""`ai-scheduler admission-policy`: the ValidatingAdmissionPolicy generated from the config.

What the policy's CEL computes is checked on a real API server (tests/e2e/test_e2e_admission.py); here, what
the generator writes: which pods the policy sees, the config's tenancy as CEL literals, one check per max,
the thresholds and how maxima are shown, the command, and that the shipped example is current.
"""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from paths import ROOT

from ai_scheduler.cache.admission_policy import (
    ELASTIC_QUOTA_POLICY_NAME,
    POLICY_NAME,
    Limit,
    admission_policy,
    elastic_quota_policy,
    limits,
    render,
)
from ai_scheduler.cli import main
from ai_scheduler.config import default_config, parse_config

EXAMPLE = ROOT / "deploy" / "examples" / "admission-policy.yaml"
CONFIG: dict[str, Any] = {
    "schedulerName": "ai-scheduler",
    "profiles": [{}, {"schedulerName": "ai-scheduler-batch"}],
    "queues": [{"name": "batch", "quota": {"nvidia.com/gpu": 32}}],
    "groups": {"vision": {"min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 24, "memory": "80Gi"}},
               "nlp": {}},
    "users": {"alice": {"group": "vision", "max": {"cpu": "1500m"}}, "bob": {"group": "nlp"}},
    "namespaces": {"team-vision": {"user": "alice", "defaultQueue": "batch", "trustUserLabel": True},
                   "team-nlp": {"user": "bob"}},
}


def _variables(policy: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def test_a_config_without_any_max_needs_only_the_elastic_quota_policy() -> None:
    assert admission_policy(default_config(), elastic_quotas=False) == []
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["admission-policy", "--no-elastic-quotas"]) == 0
    assert "nothing to refuse" in out.getvalue()
    assert not [d for d in yaml.safe_load_all(out.getvalue()) if d]
    documents = admission_policy(default_config())
    assert [d["metadata"]["name"] for d in documents] == [ELASTIC_QUOTA_POLICY_NAME] * 2


def test_the_policy_sees_the_creation_of_the_schedulers_pods_and_denies() -> None:
    policy, binding = admission_policy(parse_config(CONFIG), elastic_quotas=False)
    for doc in (policy, binding):
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    spec = policy["spec"]
    assert policy["metadata"]["name"] == POLICY_NAME
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    condition = spec["matchConditions"][0]["expression"]
    assert condition == 'object.spec.schedulerName in ["ai-scheduler", "ai-scheduler-batch"]'
    # An error while evaluating admits the pod: the scheduler still holds it back, as before.
    assert spec["failurePolicy"] == "Ignore"
    assert binding["spec"] == {"policyName": POLICY_NAME, "validationActions": ["Deny"]}
    validation = spec["validations"][0]
    assert validation["expression"] == "size(variables.violations) == 0"
    assert validation["reason"] == "Forbidden"
    assert "can never be scheduled" in validation["messageExpression"]


def test_the_tenancy_is_written_as_the_scheduler_resolves_it() -> None:
    variables = _variables(admission_policy(parse_config(CONFIG))[0])
    user = variables["user"]
    assert '{"team-nlp": "bob", "team-vision": "alice"}[?request.namespace]' in user
    # The user label counts where the namespace is trusted and it names a configured user.
    assert '["alice", "bob"]' in user and 'request.namespace in ["team-vision"]' in user
    assert '"ai-scheduler.io/user"' in user
    assert variables["group"] == '{"alice": "vision", "bob": "nlp"}[?variables.user].orValue(\'\')'
    assert '"ai-scheduler.io/queue"' in variables["queue"]
    assert '{"team-vision": "batch"}[?request.namespace].orValue("default")' in variables["queue"]
    for key in ("pod-group.scheduling.sigs.k8s.io/min-available", "scheduling.x-k8s.io/pod-group",
                "gang.scheduling.koordinator.sh/min-available"):
        assert f'"{key}"' in variables["gangSize"]


def test_one_check_per_max_in_the_schedulers_order() -> None:
    config = parse_config(CONFIG)
    assert limits(config) == [
        Limit("user", "alice", "cpu", 1500),
        Limit("group", "vision", "nvidia.com/gpu", 24),
        Limit("group", "vision", "memory", 80 * 2**30),
        Limit("queue", "batch", "nvidia.com/gpu", 32),
    ]
    variables = _variables(admission_policy(config)[0])
    checks = re.findall(r'variables\.(user|group|queue) == "([a-z]+)" && variables\.total(\d) > ([0-9.e+]+)',
                        variables["violations"])
    assert [(kind, name) for kind, name, _, _ in checks] == [
        ("user", "alice"), ("group", "vision"), ("group", "vision"), ("queue", "batch")]
    # Amounts are computed once per resource (cpu, nvidia.com/gpu, memory), whatever the number of maxima.
    amounts = sorted(name for name in variables if name.startswith("amount"))
    assert amounts == ["amount0", "amount1", "amount2"]
    assert "quota of group vision: nvidia.com/gpu " in variables["violations"]
    assert '"/80Gi"' in variables["violations"] and '"/1500m"' in variables["violations"]
    assert "double(variables.gangSize)" in variables["total0"]


def test_the_elastic_quota_policy_takes_the_namespaces_quotas_as_params_where_the_config_maps_none() -> None:
    policy, binding = elastic_quota_policy(parse_config(CONFIG))
    for doc in (policy, binding):
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    assert policy["spec"]["paramKind"] == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "ElasticQuota"}
    # No namespace in the reference: the quotas of the pod's own namespace; none there, nothing to check.
    assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert conditions["namespace-not-in-the-config"] == '!(request.namespace in ["team-nlp", "team-vision"])'
    variables = _variables(policy)
    assert variables["totals"].startswith("params.spec.?max.orValue({}).transformMap(r, q, ")
    assert "'exceeds quota of group ' + params.metadata.namespace + '/' + params.metadata.name" in (
        variables["violations"])


def test_without_gangs_each_pod_is_judged_alone() -> None:
    for policy in admission_policy(parse_config(CONFIG), gangs=False)[::2]:
        assert _variables(policy)["gangSize"] == "1"


@pytest.mark.parametrize(("limit", "shown", "threshold"), [
    (Limit("group", "g", "nvidia.com/gpu", 8), "8", 8.0),
    (Limit("group", "g", "cpu", 1500), "1500m", 1.5),
    (Limit("group", "g", "memory", 80 * 2**30), "80Gi", 80.0 * 2**30),
    (Limit("group", "g", "ai-scheduler.io/gpu-memory", 10 * 2**30), "10Gi", 10.0 * 2**30),
    # In GPUs; the scheduler may count a fraction a thousandth below what it says.
    (Limit("group", "g", "ai-scheduler.io/gpu-fraction", 1500), "1.5", 1.501),
    (Limit("group", "g", "nvidia.com/gpu", 0), "0", 0.0),
])
def test_a_max_is_shown_as_written_and_passed_only_beyond_it(
    limit: Limit, shown: str, threshold: float
) -> None:
    assert limit.shown == shown
    assert threshold <= limit.threshold <= threshold * (1 + 2e-9)


def test_the_command_prints_the_policy_for_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["admission-policy", "--config", str(config), "--name", "quota", "--no-gangs"]) == 0
    text = out.getvalue()
    assert text.startswith("# Generated by `ai-scheduler admission-policy` from ")
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ValidatingAdmissionPolicy", "quota"), ("ValidatingAdmissionPolicyBinding", "quota"),
        ("ValidatingAdmissionPolicy", "quota-elasticquota"),
        ("ValidatingAdmissionPolicyBinding", "quota-elasticquota")]
    written = parse_config(yaml.safe_load(config.read_text()))
    assert docs == admission_policy(written, name="quota", gangs=False)
    assert all(_variables(d)["gangSize"] == "1" for d in docs[::2])
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["admission-policy", "--config", str(config), "--name=quota", "--no-elastic-quotas"]) == 0
    docs = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert [d["metadata"]["name"] for d in docs] == ["quota", "quota"]


def test_the_command_refuses_an_invalid_config(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("groups: {vision: {max: {nvidia.com/gpu: lots}}}\n")
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert main(["admission-policy", "--config", str(config)]) == 2
    assert "groups.vision.max['nvidia.com/gpu']" in err.getvalue()


def test_the_shipped_example_is_what_the_command_prints_for_its_config() -> None:
    text = EXAMPLE.read_text()
    header, _, generated = text.partition("#\n# Generated by")
    config_lines = [line[4:] for line in header.splitlines() if line.startswith("#   ")]
    config = parse_config(yaml.safe_load("\n".join(config_lines)))
    assert "# Generated by" + generated == render(admission_policy(config), "the config above")
