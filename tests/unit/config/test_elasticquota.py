"""ElasticQuota objects (scheduler-plugins' Capacity Scheduling) as group quotas under the config file's."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from builders import make_pod
from paths import ROOT

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.tenancy import Tenancy, Tenant, quota_amounts
from ai_scheduler.config import parse_config
from ai_scheduler.config.elasticquota import (
    ElasticQuota,
    ElasticQuotaError,
    ElasticQuotas,
    parse_elastic_quota,
    with_elastic_quotas,
)


def elastic_quota(namespace: str, name: str = "quota", *, min: dict[str, Any] | None = None,
                  max: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if min is not None:
        spec["min"] = min
    if max is not None:
        spec["max"] = max
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def record(name: str, namespace: str, gpus: int = 0, cpu: str | None = None) -> PodRecord:
    return PodRecord.from_api(make_pod(name, namespace=namespace, gpus=gpus, cpu=cpu, memory=None) | {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}})


CONFIG = parse_config({
    "groups": {"vision": {"max": {"nvidia.com/gpu": 16}}},
    "users": {"alice": {"group": "vision"}},
    "namespaces": {"team-vision": {"user": "alice"}},
})


def test_an_elastic_quota_is_read_in_the_units_quotas_are_kept_in() -> None:
    quota = parse_elastic_quota(elastic_quota("team-a", min={"nvidia.com/gpu": 2, "cpu": "500m"},
                                              max={"nvidia.com/gpu": "8", "memory": "64Gi"}))
    assert quota == ElasticQuota("team-a", "quota", {"nvidia.com/gpu": 2, "cpu": 500},
                                 {"nvidia.com/gpu": 8, "memory": 64 * 2**30})
    assert quota.key == "team-a/quota"


@pytest.mark.parametrize(("spec", "reason"), [
    ({"max": {"nvidia.com/gpu": "lots"}}, "spec.max['nvidia.com/gpu']: invalid quantity 'lots'"),
    ({"min": {"cpu": "-1"}}, "spec.min['cpu'] must not be negative"),
    ({"min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 2}}, "spec.min['nvidia.com/gpu'] (4) is above"),
    ({"max": ["nvidia.com/gpu"]}, "spec.max must be a map"),
])
def test_a_quota_that_cannot_be_used_is_refused_with_the_reason(spec: dict[str, Any], reason: str) -> None:
    with pytest.raises(ElasticQuotaError, match=re.escape(reason)):
        parse_elastic_quota(elastic_quota("team-a", **spec))


def test_each_quota_becomes_a_group_of_its_namespaces_pods_and_the_config_wins() -> None:
    quotas = [
        parse_elastic_quota(elastic_quota("team-a", min={"nvidia.com/gpu": 2}, max={"nvidia.com/gpu": 8})),
        # The config maps team-vision: its quota is ignored.
        parse_elastic_quota(elastic_quota("team-vision", max={"nvidia.com/gpu": 1})),
        # A second quota of one namespace: the first by name counts.
        parse_elastic_quota(elastic_quota("team-a", "zz-second", max={"nvidia.com/gpu": 1})),
    ]
    config = with_elastic_quotas(CONFIG, quotas)
    assert config.groups["team-a/quota"].max == {"nvidia.com/gpu": 8}
    assert config.groups["team-a/quota"].min == {"nvidia.com/gpu": 2}
    assert "team-a/zz-second" not in config.groups and "team-vision/quota" not in config.groups
    assert config.groups["vision"] == CONFIG.groups["vision"]
    tenancy = Tenancy(config)
    assert tenancy.tenant_of(record("a", "team-a")) == Tenant("team-a/quota", "team-a/quota", "default")
    assert tenancy.tenant_of(record("v", "team-vision")) == Tenant("alice", "vision", "default")
    assert tenancy.tenant_of(record("o", "elsewhere")) == Tenant("", "", "default")
    # No quota: the config itself, unchanged.
    assert with_elastic_quotas(CONFIG, []) is CONFIG


def test_the_scheduler_refuses_past_the_quotas_max_as_for_a_configured_group() -> None:
    quota = parse_elastic_quota(elastic_quota("team-a", max={"nvidia.com/gpu": 8}))
    tenancy = Tenancy(with_elastic_quotas(CONFIG, [quota]))
    placed = record("placed", "team-a", gpus=6)
    tenancy.charge(placed)
    waiting = record("waiting", "team-a", gpus=4)
    reason = tenancy.quota_refusal(tenancy.tenant_of(waiting), quota_amounts(waiting))
    assert reason == "exceeds quota of group team-a/quota: nvidia.com/gpu 6/8"
    assert tenancy.quota_refusal(tenancy.tenant_of(waiting), {"nvidia.com/gpu": 2}) == ""
    # Another namespace, with no quota of its own, is not held back by team-a's.
    other = record("other", "team-b", gpus=16)
    assert tenancy.quota_refusal(tenancy.tenant_of(other), quota_amounts(other)) == ""


def test_the_quotas_follow_watch_events_and_relists() -> None:
    quotas = ElasticQuotas()
    assert quotas.apply("ADDED", elastic_quota("team-a", max={"nvidia.com/gpu": 8}))
    assert not quotas.apply("MODIFIED", elastic_quota("team-a", max={"nvidia.com/gpu": 8}))  # same quota
    assert quotas.apply("MODIFIED", elastic_quota("team-a", max={"nvidia.com/gpu": 4}))
    assert quotas.quotas["team-a/quota"].max == {"nvidia.com/gpu": 4}
    assert quotas.described() == {"team-a/quota": {"min": {}, "max": {"nvidia.com/gpu": "4"}}}
    # An unusable change drops the quota, with the reason kept.
    assert quotas.apply("MODIFIED", elastic_quota("team-a", max={"nvidia.com/gpu": "x"}))
    assert quotas.quotas == {} and "invalid quantity" in quotas.errors["team-a/quota"]
    assert not quotas.apply("DELETED", elastic_quota("team-a"))
    assert quotas.errors == {}
    assert quotas.replace([elastic_quota("team-b", max={"cpu": "4"})])
    assert list(quotas.quotas) == ["team-b/quota"]
    assert not quotas.replace([elastic_quota("team-b", max={"cpu": "4"})])
    assert quotas.apply("DELETED", elastic_quota("team-b"))
    assert quotas.quotas == {}


def test_the_crd_is_the_scheduler_plugins_one_and_the_scheduler_may_read_it() -> None:
    deploy = ROOT / "deploy"
    crd = yaml.safe_load((deploy / "crds" / "scheduling.x-k8s.io_elasticquotas.yaml").read_text())
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "elasticquotas.scheduling.x-k8s.io"
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"]) == (
        "scheduling.x-k8s.io", "Namespaced", "ElasticQuota", "elasticquotas")
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(schema["spec"]["properties"]) == {"min", "max"}
    # *.x-k8s.io groups are refused by the API server without this annotation.
    assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("https://")
    role = next(d for d in yaml.safe_load_all((deploy / "rbac.yaml").read_text())
                if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "ai-scheduler")
    granted = {verb for rule in role["rules"] if "scheduling.x-k8s.io" in rule["apiGroups"]
               and "elasticquotas" in rule["resources"] for verb in rule["verbs"]}
    # Read, never written (status.used is Capacity Scheduling's controller's); test_e2e_rbac checks the use.
    assert granted == {"list", "watch"}
