"""VolumeZone against kube-scheduler's semantics: the cases of its volume_zone_test.go (TestSingleZone,
TestMultiZone, TestWithBinding), with our own builders, through the real framework.

Volumes as kube's tests name them: Vol_1 in beta zone us-west1-a, Vol_2 in beta region us-west1-b,
Vol_3 in beta region us-west1-c, Vol_4 in GA zone us-west1-a; Vol_Stable_1 / _2 with GA zone / region;
Vol_Multi in beta zones us-west1-b__us-west1-c. Claim PVC_N is bound to the volume of the same suffix.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from builders import Pod, make_node, make_pv, make_pvc, make_storage_class

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, STORAGE_CLASSES
from ai_scheduler.scheduler.framework.plugins.volume_zone import (
    BETA_REGION,
    BETA_ZONE,
    NO_VOLUME_ZONE,
    REGION,
    ZONE,
    VolumeZone,
)
from ai_scheduler.scheduler.framework.runtime import Decision, Framework

VOLUMES = {
    "Vol_1": {BETA_ZONE: "us-west1-a"},
    "Vol_2": {BETA_REGION: "us-west1-b", "uselessLabel": "none"},
    "Vol_3": {BETA_REGION: "us-west1-c"},
    "Vol_4": {ZONE: "us-west1-a"},
    "Vol_Stable_1": {ZONE: "us-west1-a"},
    "Vol_Stable_2": {REGION: "us-west1", "uselessLabel": "none"},
    "Vol_Multi": {BETA_ZONE: "us-west1-b__us-west1-c"},
    "Vol_Bad": {BETA_ZONE: "us-west1-a__"},
}


def claims() -> list[dict[str, Any]]:
    result = [make_pvc(f"PVC_{name[4:]}", volume_name=name, storage_class="") for name in VOLUMES]
    result.append(make_pvc("PVC_NoSC", storage_class=""))
    result.append(make_pvc("PVC_WaitSC", storage_class="Class_Wait"))
    result.append(make_pvc("PVC_ImmediateSC", storage_class="Class_Immediate"))
    result.append(make_pvc("PVC_NoClass", storage_class="Class_Missing"))
    result.append(make_pvc("PVC_NoPV", volume_name="Vol_Not_Exist", storage_class=""))
    return result


def cluster(node_labels: dict[str, str]) -> SchedulerCache:
    cache = SchedulerCache()
    cache.set_node(NodeRecord.from_api(make_node("host1", labels=node_labels)))
    cache.volumes.replace(PERSISTENT_VOLUMES, [make_pv(n, labels=labels) for n, labels in VOLUMES.items()])
    cache.volumes.replace(PERSISTENT_VOLUME_CLAIMS, claims())
    cache.volumes.replace(STORAGE_CLASSES, [
        make_storage_class("Class_Wait"),
        make_storage_class("Class_Immediate", binding_mode="Immediate"),
    ])
    return cache


def volume_pod(*claim_names: str) -> PodRecord:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i,
               c in enumerate(claim_names)]
    return Pod("pod", volumes=volumes or None).uid("uid-pod").record()


def schedule(node_labels: dict[str, str], *claim_names: str) -> Decision:
    cache = cluster(node_labels)
    framework = Framework("ai-scheduler", [VolumeZone()], [], cache, rng=random.Random(1))
    return framework.schedule(volume_pod(*claim_names))


@pytest.mark.parametrize(
    ("claim", "node_labels", "fits"),
    [
        pytest.param(None, {BETA_ZONE: "us-west1-a"}, True, id="pod without volume"),
        pytest.param("PVC_1", {}, True, id="node without labels"),
        pytest.param("PVC_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, True,
                     id="beta zone label matched"),
        pytest.param("PVC_2", {BETA_REGION: "us-west1-b", "uselessLabel": "none"}, True,
                     id="beta region label matched"),
        pytest.param("PVC_1", {BETA_ZONE: "no_us-west1-a", "uselessLabel": "none"}, False,
                     id="beta zone label mismatched"),
        pytest.param("PVC_2", {BETA_REGION: "no_us-west1-b", "uselessLabel": "none"}, False,
                     id="beta region label mismatched"),
        pytest.param("PVC_Stable_1", {ZONE: "us-west1-a", "uselessLabel": "none"}, True,
                     id="zone label matched"),
        pytest.param("PVC_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}, True,
                     id="region label matched"),
        pytest.param("PVC_Stable_1", {ZONE: "no_us-west1-a"}, False, id="zone label mismatched"),
        pytest.param("PVC_Stable_2", {REGION: "no_us-west1"}, False, id="region label mismatched"),
        pytest.param("PVC_1", {ZONE: "us-west1-a"}, True, id="beta pv label against a GA node label"),
        pytest.param("PVC_4", {BETA_ZONE: "us-west1-a"}, False, id="GA pv label against a beta node label"),
        pytest.param("PVC_Multi", {BETA_ZONE: "us-west1-b"}, True, id="multi zone, one of them"),
        pytest.param("PVC_Multi", {BETA_ZONE: "us-west1-a"}, False, id="multi zone, none of them"),
        pytest.param("PVC_Bad", {BETA_ZONE: "elsewhere"}, True, id="unparsable label is ignored"),
        pytest.param("PVC_WaitSC", {BETA_ZONE: "us-west1-a"}, True, id="unbound volume wait binding mode"),
    ],
)
def test_volume_zone_filter(claim: str | None, node_labels: dict[str, str], fits: bool) -> None:
    decision = schedule(node_labels, *([claim] if claim else []))
    if fits:
        assert decision.node == "host1", decision.message
    else:
        assert decision.message == f"0/1 nodes are available: 1 {NO_VOLUME_ZONE}."


def test_every_volume_must_fit() -> None:
    """TestMultiZone: one of two volumes in another zone fails the node."""
    assert schedule({BETA_ZONE: "us-west1-a", BETA_REGION: "us-west1-b"}, "PVC_1", "PVC_2").node == "host1"
    assert schedule({BETA_ZONE: "us-west1-a", BETA_REGION: "us-west1-b"}, "PVC_1", "PVC_3").node is None


@pytest.mark.parametrize(
    ("claim", "error"),
    [
        pytest.param("PVC_NoSC", "PersistentVolumeClaim had no pv name and storageClass name",
                     id="unbound volume empty storage class"),
        pytest.param("PVC_ImmediateSC", "PersistentVolume had no name",
                     id="unbound volume immediate binding mode"),
        pytest.param("PVC_NotExist", 'persistentvolumeclaim "PVC_NotExist" not found',
                     id="PVC does not exist"),
        pytest.param("PVC_NoPV", 'persistentvolume "Vol_Not_Exist" not found', id="PV does not exist"),
        pytest.param("PVC_NoClass", 'storageclass.storage.k8s.io "Class_Missing" not found',
                     id="SC does not exist"),
    ],
)
def test_volume_zone_prefilter_with_binding(claim: str, error: str) -> None:
    decision = schedule({BETA_ZONE: "us-west1-a"}, claim)
    assert decision.node is None
    assert decision.message == f"0/1 nodes are available: {error}."
