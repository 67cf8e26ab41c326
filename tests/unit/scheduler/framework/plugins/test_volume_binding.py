"""VolumeBinding against kube-scheduler's semantics: the cases of its volume_binding_test.go
(TestVolumeBinding) and binder_test.go (TestFindPodVolumesWithoutProvisioning, ...WithProvisioning),
written with our own builders, through the real framework over a node table.

Nodes are `node1` (labels foo=bar) and `node2` (foo=baz), as kube's tests label theirs; `waitSC` is
a WaitForFirstConsumer class that cannot provision (`kubernetes.io/no-provisioner`), `provisionSC` one
that can, `immediateSC` an Immediate one.
"""

from __future__ import annotations

import io
import random
from typing import Any, cast

import pytest
from builders import Pod, make_node, make_pv, make_pvc, make_storage_class

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
)
from ai_scheduler.daemon.volume_prebind import VolumePreBind, claim_ref_patch, selected_node_patch
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.framework.plugins.volume_binding import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    NodeVolumes,
    VolumeBinding,
    claim_not_found,
    prebind_plan,
)
from ai_scheduler.scheduler.framework.runtime import Decision, Framework

NODES = {"node1": "bar", "node2": "baz"}


def on(value: str) -> dict[str, Any]:
    """A PV's required node affinity: foo=value."""
    requirement = {"key": "foo", "operator": "In", "values": [value]}
    return {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}


def pvc(name: str, *, storage: str = "1Gi", sc: str | None = "waitSC", volume: str | None = None,
        bound: bool = False, **kw: Any) -> dict[str, Any]:
    obj = make_pvc(name, storage=storage, storage_class=sc, volume_name=volume, **kw)
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["metadata"]["resourceVersion"] = "1"
    if bound:
        obj["metadata"].setdefault("annotations", {})[ANN_BIND_COMPLETED] = "yes"
        obj["status"] = {"phase": "Bound"}
    return obj


def pv(name: str, *, storage: str = "1Gi", sc: str = "waitSC", affinity: str | None = None,
       claim: str | None = None, phase: str = "Available", **kw: Any) -> dict[str, Any]:
    claim_ref = {"namespace": "default", "name": claim, "uid": f"uid-{claim}"} if claim else None
    obj = make_pv(name, storage=storage, storage_class=sc, node_affinity=on(affinity) if affinity else None,
                  claim_ref=claim_ref, **kw)
    obj["metadata"]["resourceVersion"] = "1"
    obj["status"] = {"phase": phase}
    return obj


def classes() -> list[dict[str, Any]]:
    return [
        make_storage_class("waitSC", provisioner="kubernetes.io/no-provisioner"),
        make_storage_class("provisionSC", provisioner="test-provisioner"),
        make_storage_class("immediateSC", provisioner="test-provisioner", binding_mode="Immediate"),
        make_storage_class(
            "topologySC",
            provisioner="test-provisioner",
            allowed_topologies=[{"matchLabelExpressions": [{"key": "foo", "values": ["baz"]}]}],
        ),
    ]


def cluster(claims: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> SchedulerCache:
    cache = SchedulerCache()
    for name, value in NODES.items():
        cache.set_node(NodeRecord.from_api(make_node(name, labels={"foo": value})))
    cache.volumes.replace(STORAGE_CLASSES, classes())
    cache.volumes.replace(PERSISTENT_VOLUME_CLAIMS, claims)
    cache.volumes.replace(PERSISTENT_VOLUMES, volumes)
    return cache


def volume_pod(*claims: str, ephemeral: str | None = None, name: str = "pod-a",
               uid: str = "uid-pod") -> PodRecord:
    volumes: list[dict[str, Any]] = [{"name": f"vol-{c}",
                                      "persistentVolumeClaim": {"claimName": c}} for c in claims]
    volumes.append({"name": "scratch", "emptyDir": {}})
    if ephemeral:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    return Pod(name, volumes=volumes).uid(uid).record()


def schedule(cache: SchedulerCache, record: PodRecord) -> Decision:
    return Framework("ai-scheduler", [VolumeBinding()], [], cache, rng=random.Random(1)).schedule(record)


def feasible(cache: SchedulerCache, record: PodRecord) -> list[str]:
    framework = Framework("ai-scheduler", [VolumeBinding()], [], cache, rng=random.Random(1))
    rows, _ = framework.feasible_rows(record)
    return sorted(cache.row_names[int(r)] for r in rows)


def plan(cache: SchedulerCache, record: PodRecord, node: str) -> NodeVolumes:
    result = prebind_plan(record, cache.volumes, cache.node_record(node) or NodeRecord())
    assert isinstance(result, NodeVolumes), result
    return result


# ------------------------------------------------------------------ PreFilter (TestVolumeBinding)
def test_a_pod_without_claims_is_skipped() -> None:
    cache = cluster([], [])
    record = volume_pod()
    assert record.claims == ()
    assert VolumeBinding().prefilter(record, cache) == ""
    assert feasible(cache, record) == ["node1", "node2"]


@pytest.mark.parametrize(
    ("claims", "wanted", "error"),
    [
        pytest.param([], ["pvc-a"], claim_not_found("pvc-a"), id="PVC does not exist"),
        pytest.param([pvc("pvc-a", sc="", volume="pv-a", bound=True)], ["pvc-a", "pvc-b"],
                     claim_not_found("pvc-b"), id="Part of PVCs do not exist"),
        pytest.param([pvc("pvc-a", sc="immediateSC")], ["pvc-a"], UNBOUND_IMMEDIATE,
                     id="immediate claims not bound"),
        pytest.param([pvc("pvc-a", sc="")], ["pvc-a"], UNBOUND_IMMEDIATE, id="no class is immediate"),
        pytest.param([pvc("pvc-a", sc="no-such-class")], ["pvc-a"], UNBOUND_IMMEDIATE,
                     id="a missing class is immediate"),
        pytest.param([pvc("pvc-a", volume="pv-a")], ["pvc-a"], UNBOUND_IMMEDIATE,
                     id="prebound-pvc is left to the PV controller"),
        pytest.param([pvc("pvc-a", sc="", volume="pv-a") | {"status": {"phase": "Lost"}}], ["pvc-a"],
                     'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"',
                     id="pv not found claim lost"),
        pytest.param([pvc("pvc-a") | {"metadata": {"name": "pvc-a", "namespace": "default",
                                                   "deletionTimestamp": "2026-01-01T00:00:00Z"}}],
                     ["pvc-a"], 'persistentvolumeclaim "pvc-a" is being deleted', id="claim being deleted"),
    ],
)
def test_prefilter_refuses_the_pod_with_kubes_reason(
    claims: list[dict[str, Any]], wanted: list[str], error: str
) -> None:
    cache = cluster(claims, [])
    decision = schedule(cache, volume_pod(*wanted))
    assert decision.node is None
    assert decision.error == error
    assert decision.message == f"0/2 nodes are available: {error}."


def test_ephemeral_volumes_claims_must_exist_and_belong_to_the_pod() -> None:
    cache = cluster([], [])
    decision = schedule(cache, volume_pod(ephemeral="myvol"))
    assert decision.error == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "pod-a-myvol"'
    )
    claim = pvc("pod-a-myvol", sc="", volume="pv-a", bound=True)
    cache = cluster([claim], [pv("pv-a", sc="")])
    decision = schedule(cache, volume_pod(ephemeral="myvol"))
    assert decision.error == (
        "PVC default/pod-a-myvol was not created for pod default/pod-a (pod is not owner)"
    )
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "pod-a", "uid": "uid-pod", "controller": True}
    ]
    cache = cluster([claim], [pv("pv-a", sc="")])
    assert feasible(cache, volume_pod(ephemeral="myvol")) == ["node1", "node2"]


def test_an_unset_binding_mode_is_an_error() -> None:
    cache = cluster([pvc("pvc-a", sc="odd")], [])
    odd = make_storage_class("odd")
    del odd["volumeBindingMode"]
    cache.volumes.apply(STORAGE_CLASSES, "ADDED", odd)
    assert schedule(cache, volume_pod("pvc-a")).error == 'VolumeBindingMode not set for StorageClass "odd"'


# ------------------------------------------------------------------ Filter: bound claims
def test_all_bound_passes_everywhere() -> None:
    cache = cluster([pvc("pvc-a", sc="", volume="pv-a", bound=True)], [pv("pv-a", sc="", phase="Bound")])
    assert feasible(cache, volume_pod("pvc-a")) == ["node1", "node2"]


def test_bound_local_volumes_keep_the_pod_on_their_node() -> None:
    claims = [pvc("pvc-a", sc="", volume="pv-a", bound=True), pvc("pvc-b", sc="", volume="pv-b", bound=True)]
    volumes = [pv("pv-a", sc="", affinity="bar"), pv("pv-b", sc="", affinity="bar")]
    cache = cluster(claims, volumes)
    decision = schedule(cache, volume_pod("pvc-a", "pvc-b"))
    assert decision.node == "node1"
    assert decision.reasons == {NODE_CONFLICT: 1}


def test_a_claim_bound_to_a_missing_pv_fails_every_node() -> None:
    cache = cluster([pvc("pvc-a", sc="", volume="pv-a", bound=True)], [])
    decision = schedule(cache, volume_pod("pvc-a"))
    assert decision.message == f"0/2 nodes are available: 2 {PV_NOT_EXIST}."


def test_a_volume_name_without_bind_completed_is_not_bound_yet() -> None:
    """isPVCFullyBound: the PV controller's annotation must be there too."""
    cache = cluster([pvc("pvc-a", sc="", volume="pv-a")], [pv("pv-a", sc="")])
    assert schedule(cache, volume_pod("pvc-a")).error == UNBOUND_IMMEDIATE


def test_a_pv_affinity_on_no_node_and_both_reasons_at_once() -> None:
    """kube's "bound and unbound unsatisfied": one node can fail with two reasons, both counted."""
    claims = [pvc("pvc-a", sc="", volume="pv-a", bound=True), pvc("pvc-b")]
    cache = cluster(claims, [pv("pv-a", sc="", affinity="barbar")])
    decision = schedule(cache, volume_pod("pvc-a", "pvc-b"))
    assert decision.message == f"0/2 nodes are available: 2 {BIND_CONFLICT}, 2 {NODE_CONFLICT}."


def test_match_fields_on_a_pv_never_match() -> None:
    """CheckNodeAffinity matches the PV's terms against a node made of the labels alone."""
    affinity = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node1"]}]}]}
    volume = make_pv("pv-a", node_affinity=affinity)
    cache = cluster([pvc("pvc-a", sc="", volume="pv-a", bound=True)], [volume])
    assert schedule(cache, volume_pod("pvc-a")).reasons == {NODE_CONFLICT: 2}


# ------------------------------------------------------------------ Filter: delayed claims, static PVs
def test_unbound_claims_with_no_matching_pv_and_no_provisioner() -> None:
    cache = cluster([pvc("pvc-a")], [])
    decision = schedule(cache, volume_pod("pvc-a"))
    assert decision.message == f"0/2 nodes are available: 2 {BIND_CONFLICT}."


def test_an_unbound_claim_goes_where_its_pv_is() -> None:
    cache = cluster([pvc("pvc-a")], [pv("pv-a", affinity="baz")])
    decision = schedule(cache, volume_pod("pvc-a"))
    assert decision.node == "node2"
    assert decision.reasons == {BIND_CONFLICT: 1}
    result = plan(cache, volume_pod("pvc-a"), "node2")
    assert [(v.name, c.name) for v, c in result.bindings] == [("pv-a", "pvc-a")]
    assert result.provisions == []


@pytest.mark.parametrize(
    ("volume", "fits"),
    [
        pytest.param(pv("pv-a", storage="500Mi"), False, id="too small"),
        pytest.param(pv("pv-a", storage="2Gi"), True, id="larger is fine"),
        pytest.param(pv("pv-a", sc="otherSC"), False, id="other class"),
        pytest.param(pv("pv-a", phase="Released"), False, id="not available"),
        pytest.param(pv("pv-a", access_modes=("ReadOnlyMany",)), False, id="access modes"),
        pytest.param(pv("pv-a", access_modes=("ReadWriteOnce", "ReadOnlyMany")), True, id="more modes"),
        pytest.param(pv("pv-a", claim="someone-else"), False, id="claimed by another claim"),
        pytest.param(pv("pv-a", phase="Bound", claim="pvc-a"), True, id="prebound to this claim"),
        pytest.param(pv("pv-a", phase="Bound", claim="pvc-a", affinity="baz"), ["node2"],
                     id="prebound to this claim, on one node only"),
        pytest.param(pv("pv-a") | {"spec": {**pv("pv-a")["spec"], "volumeMode": "Block"}}, False,
                     id="volume mode"),
    ],
)
def test_find_matching_volume(volume: dict[str, Any], fits: bool | list[str]) -> None:
    cache = cluster([pvc("pvc-a")], [volume])
    wanted = fits if isinstance(fits, list) else ["node1", "node2"] if fits else []
    assert feasible(cache, volume_pod("pvc-a")) == wanted


def test_the_claims_selector_picks_among_the_pvs() -> None:
    claim = pvc("pvc-a")
    claim["spec"]["selector"] = {"matchLabels": {"tier": "fast"}}
    volumes = [pv("pv-slow", affinity="bar", labels={"tier": "slow"}),
               pv("pv-fast", affinity="baz", labels={"tier": "fast"})]
    cache = cluster([claim], volumes)
    assert feasible(cache, volume_pod("pvc-a")) == ["node2"]


def test_two_unbound_claims_take_two_pvs_smallest_claims_first_smallest_pvs_first() -> None:
    claims = [pvc("pvc-big", storage="5Gi"), pvc("pvc-small", storage="1Gi")]
    volumes = [pv("pv-10g", storage="10Gi", affinity="bar"), pv("pv-5g", storage="5Gi", affinity="bar"),
               pv("pv-1g", storage="1Gi", affinity="bar")]
    cache = cluster(claims, volumes)
    result = plan(cache, volume_pod("pvc-big", "pvc-small"), "node1")
    chosen = sorted((c.name, v.name) for v, c in result.bindings)
    assert chosen == [("pvc-big", "pv-5g"), ("pvc-small", "pv-1g")]
    assert feasible(cache, volume_pod("pvc-big", "pvc-small")) == ["node1"]


def test_two_unbound_claims_with_a_partial_match_fail() -> None:
    claims = [pvc("pvc-a"), pvc("pvc-b")]
    cache = cluster(claims, [pv("pv-a", affinity="bar")])
    assert schedule(cache, volume_pod("pvc-a", "pvc-b")).reasons == {BIND_CONFLICT: 2}


def test_one_bound_and_one_unbound_claim() -> None:
    claims = [pvc("pvc-a", sc="", volume="pv-a", bound=True), pvc("pvc-b")]
    volumes = [pv("pv-a", sc="", affinity="bar"), pv("pv-b", affinity="bar")]
    cache = cluster(claims, volumes)
    assert feasible(cache, volume_pod("pvc-a", "pvc-b")) == ["node1"]


# ------------------------------------------------------------------ Filter: dynamic provisioning
def test_one_provisioned_claim_fits_every_node_and_prebind_selects_the_node() -> None:
    cache = cluster([pvc("pvc-a", sc="provisionSC")], [])
    record = volume_pod("pvc-a")
    assert feasible(cache, record) == ["node1", "node2"]
    result = plan(cache, record, "node2")
    assert [c.name for c in result.provisions] == ["pvc-a"]
    assert result.bindings == []


def test_one_matched_one_provisioned() -> None:
    claims = [pvc("pvc-a", sc="provisionSC"), pvc("pvc-b", sc="provisionSC")]
    cache = cluster(claims, [pv("pv-a", sc="provisionSC", affinity="bar")])
    result = plan(cache, volume_pod("pvc-a", "pvc-b"), "node1")
    assert [(v.name, c.name) for v, c in result.bindings] == [("pv-a", "pvc-a")]
    assert [c.name for c in result.provisions] == ["pvc-b"]
    result = plan(cache, volume_pod("pvc-a", "pvc-b"), "node2")
    assert [c.name for c in result.provisions] == ["pvc-a", "pvc-b"]


def test_a_claim_already_selected_for_a_node_goes_there_only() -> None:
    claim = pvc("pvc-a", sc="provisionSC", annotations={ANN_SELECTED_NODE: "node2"})
    cache = cluster([claim], [])
    decision = schedule(cache, volume_pod("pvc-a"))
    assert decision.node == "node2"
    assert decision.reasons == {BIND_CONFLICT: 1}


def test_the_class_allowed_topologies_limit_provisioning() -> None:
    cache = cluster([pvc("pvc-a", sc="topologySC")], [])
    assert feasible(cache, volume_pod("pvc-a")) == ["node2"]


def test_immediate_bound_and_one_provisioned() -> None:
    claims = [pvc("pvc-a", sc="immediateSC", volume="pv-a", bound=True), pvc("pvc-b", sc="provisionSC")]
    cache = cluster(claims, [pv("pv-a", sc="immediateSC", affinity="baz", phase="Bound")])
    assert feasible(cache, volume_pod("pvc-a", "pvc-b")) == ["node2"]


# ------------------------------------------------------------------ cached results follow the objects
def test_results_follow_changes_of_the_objects_and_of_node_labels() -> None:
    cache = cluster([pvc("pvc-a")], [pv("pv-a", affinity="bar")])
    framework = Framework("ai-scheduler", [VolumeBinding()], [], cache, rng=random.Random(1))
    record = volume_pod("pvc-a")
    assert framework.schedule(record).node == "node1"
    cache.volumes.apply(PERSISTENT_VOLUMES, "MODIFIED", pv("pv-a", affinity="baz") | {
        "metadata": {"name": "pv-a", "resourceVersion": "2"}})
    assert framework.schedule(record).node == "node2"
    cache.set_node(NodeRecord.from_api(make_node("node1", labels={"foo": "baz"})))
    assert framework.feasible_rows(record)[0].size == 2
    # An event older than what is held (our own write's answer came first) changes nothing.
    cache.volumes.apply(PERSISTENT_VOLUMES, "MODIFIED", pv("pv-a", affinity="nowhere"))
    assert framework.feasible_rows(record)[0].size == 2


# ------------------------------------------------------------------ PreBind's writes
def test_prebind_patches_are_kubes_writes() -> None:
    cache = cluster([pvc("pvc-a"), pvc("pvc-b", sc="provisionSC")], [pv("pv-a", affinity="bar")])
    result = plan(cache, volume_pod("pvc-a", "pvc-b"), "node1")
    [(volume, claim)] = result.bindings
    assert claim_ref_patch(volume, claim) == {
        "metadata": {"resourceVersion": "1", "annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}},
        "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "default",
                              "name": "pvc-a", "uid": "uid-pvc-a", "resourceVersion": "1"}},
    }
    [provisioned] = result.provisions
    assert selected_node_patch(provisioned, "node1") == {
        "metadata": {"resourceVersion": "1", "annotations": {ANN_SELECTED_NODE: "node1"}}
    }


def test_prebind_says_why_when_the_node_no_longer_fits() -> None:
    cache = cluster([pvc("pvc-a")], [pv("pv-a", affinity="bar")])
    result = prebind_plan(volume_pod("pvc-a"), cache.volumes, cache.node_record("node2") or NodeRecord())
    assert result == BIND_CONFLICT


# ------------------------------------------------------------------ Reserve (AssumePodVolumes) and Unreserve
def test_reserved_volumes_are_held_for_the_next_cycle_and_put_back_on_revert() -> None:
    claims = [pvc("pvc-a"), pvc("pvc-b"), pvc("pvc-c", sc="provisionSC")]
    cache = cluster(claims, [pv("pv-a", affinity="bar")])
    prebind = VolumePreBind(cast(KubeClient, None), cache, JsonLogger(stream=io.BytesIO()))
    first = volume_pod("pvc-a", name="pod-a", uid="uid-a")
    second = volume_pod("pvc-b", name="pod-b", uid="uid-b")
    assert feasible(cache, second) == ["node1"]

    planned = prebind.assume(first, "node1")
    assert isinstance(planned, NodeVolumes)
    # pv-a is held as bound to pvc-a before any write: the next cycle does not give it to pvc-b ...
    assert feasible(cache, second) == []
    assert schedule(cache, second).message == f"0/2 nodes are available: 2 {BIND_CONFLICT}."
    # ... and the write still says what kube's says for a volume that was not pre-bound.
    [(volume, claim)] = planned.bindings
    assert claim_ref_patch(volume, claim)["metadata"]["annotations"] == {ANN_BOUND_BY_CONTROLLER: "yes"}

    provisioned = prebind.assume(volume_pod("pvc-c", name="pod-c", uid="uid-c"), "node2")
    assert cache.volumes.claims["default", "pvc-c"].selected_node == "node2"
    assert feasible(cache, volume_pod("pvc-c", name="pod-d", uid="uid-d")) == ["node2"]

    prebind.revert(planned)
    prebind.revert(provisioned)
    assert feasible(cache, second) == ["node1"]
    assert cache.volumes.claims["default", "pvc-c"].selected_node == ""


def test_a_newer_object_from_the_watch_is_not_reverted() -> None:
    cache = cluster([pvc("pvc-a")], [pv("pv-a", affinity="bar")])
    prebind = VolumePreBind(cast(KubeClient, None), cache, JsonLogger(stream=io.BytesIO()))
    planned = prebind.assume(volume_pod("pvc-a"), "node1")
    newer = pv("pv-a", affinity="bar", claim="pvc-a", phase="Bound")
    newer["metadata"]["resourceVersion"] = "2"
    cache.volumes.apply(PERSISTENT_VOLUMES, "MODIFIED", newer)
    prebind.revert(planned)
    assert cache.volumes.volumes["pv-a"].resource_version == "2"
    assert cache.volumes.volumes["pv-a"].claim_ref == ("default", "pvc-a", "uid-pvc-a")
