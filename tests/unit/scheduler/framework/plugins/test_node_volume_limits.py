"""NodeVolumeLimits against kube-scheduler's semantics: cases of its csi_test.go (TestCSILimits), with our own
builders, through the real framework: CSI volumes of bound claims (their PV's driver and handle), of unbound
claims (their class's provisioner), shared volumes counted once, drivers without a limit, nodes without a
CSINode, generic ephemeral volumes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from builders import Pod, make_node, make_pv, make_pvc, make_storage_class

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
)
from ai_scheduler.scheduler.framework.plugins.node_volume_limits import MAX_VOLUME_COUNT, NodeVolumeLimits
from ai_scheduler.scheduler.framework.runtime import Decision, Framework

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"


def csi_pv(name: str, driver: str) -> dict[str, Any]:
    volume = make_pv(name)
    del volume["spec"]["hostPath"]
    volume["spec"]["csi"] = {"driver": driver, "volumeHandle": f"handle-{name}"}
    return volume


def csi_node(name: str, limits: dict[str, int]) -> dict[str, Any]:
    drivers = [{"name": d, "nodeID": name, "allocatable": {"count": c}} for d, c in limits.items()]
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": name},
            "spec": {"drivers": drivers}}


def cluster(limits: dict[str, int] | None) -> SchedulerCache:
    cache = SchedulerCache()
    cache.set_node(NodeRecord.from_api(make_node("node-1")))
    names = ["ebs-1", "ebs-2", "ebs-3", "ebs-4", "gce-1"]
    volumes = [csi_pv(n, GCE if n.startswith("gce") else EBS) for n in names] + [make_pv("host-1")]
    claims = [make_pvc(f"claim-{n}", storage_class="", volume_name=n) for n in [*names, "host-1"]]
    claims.append(make_pvc("claim-pending", storage_class="ebs-sc"))
    claims.append(make_pvc("claim-missing-pv", storage_class="ebs-sc", volume_name="not-there"))
    claims.append(make_pvc("pod-scratch", storage_class="ebs-sc"))  # pod "pod"'s ephemeral volume "scratch"
    cache.volumes.replace(STORAGE_CLASSES, [make_storage_class("ebs-sc", provisioner=EBS)])
    cache.volumes.replace(PERSISTENT_VOLUMES, volumes)
    cache.volumes.replace(PERSISTENT_VOLUME_CLAIMS, claims)
    cache.volumes.replace(CSI_NODES, [csi_node("node-1", limits)] if limits is not None else [])
    return cache


def volume_pod(name: str, *claims: str, node: str | None = None, ephemeral: bool = False) -> PodRecord:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"claim-{c}"}} for i,
               c in enumerate(claims)]
    volumes += [{"name": "scratch", "ephemeral": {}}] if ephemeral else []
    return Pod(name, node_name=node, volumes=volumes or None).uid().record()


def schedule(cache: SchedulerCache, record: PodRecord) -> Decision:
    return Framework("ai-scheduler", [NodeVolumeLimits()], [], cache, rng=random.Random(1)).schedule(record)


@pytest.mark.parametrize(
    ("existing", "new", "limits", "fits"),
    [
        pytest.param(["ebs-1", "ebs-2"], ["ebs-3", "ebs-4"], {EBS: 4}, True, id="fits within the limit"),
        pytest.param(["ebs-1", "ebs-2"], ["ebs-3", "ebs-4"], {EBS: 3}, False, id="exceeds the limit"),
        pytest.param(["ebs-1", "ebs-2"], ["ebs-1", "ebs-3"], {EBS: 3}, True,
                     id="a shared volume counts once"),
        pytest.param(["ebs-1", "ebs-2"], ["gce-1"], {EBS: 2}, True, id="another driver has no limit"),
        pytest.param(["ebs-1", "ebs-2"], ["gce-1"], {EBS: 2, GCE: 0}, False, id="a limit of zero"),
        pytest.param(["ebs-1", "ebs-2"], ["ebs-3"], None, True, id="node without a CSINode"),
        pytest.param(["ebs-1", "ebs-2"], ["pending"], {EBS: 2}, False,
                     id="unbound claim counts by its class"),
        pytest.param(["ebs-1", "ebs-2"], ["missing-pv"], {EBS: 2}, False,
                     id="claim whose PV is not seen counts by its class"),
        pytest.param(["ebs-1", "ebs-2"], ["host-1"], {EBS: 2}, True, id="non-CSI volume is not counted"),
        pytest.param(["pending"], ["pending"], {EBS: 1}, True, id="the same pending claim counts once"),
    ],
)
def test_csi_limits(existing: list[str], new: list[str], limits: dict[str, int] | None, fits: bool) -> None:
    cache = cluster(limits)
    cache.set_pod(volume_pod("existing", *existing, node="node-1"))
    decision = schedule(cache, volume_pod("incoming", *new))
    if fits:
        assert decision.node == "node-1", decision.message
    else:
        assert decision.message == f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT}."


def test_generic_ephemeral_volumes_count() -> None:
    cache = cluster({EBS: 2})
    cache.set_pod(volume_pod("existing", "ebs-1", node="node-1"))
    assert schedule(cache, volume_pod("pod", ephemeral=True)).node == "node-1"
    cache.set_pod(volume_pod("other", "ebs-2", node="node-1"))
    assert schedule(cache, volume_pod("pod", ephemeral=True)).node is None


def test_volumes_of_pods_that_leave_stop_counting() -> None:
    cache = cluster({EBS: 2})
    cache.set_pod(volume_pod("existing", "ebs-1", "ebs-2", node="node-1"))
    assert schedule(cache, volume_pod("incoming", "ebs-3")).node is None
    cache.remove_pod("uid-existing")
    assert schedule(cache, volume_pod("incoming", "ebs-3")).node == "node-1"
    assert cache.volumes.node_claims == {}
