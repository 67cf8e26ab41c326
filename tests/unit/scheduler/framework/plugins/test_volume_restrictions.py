"""VolumeRestrictions against kube-scheduler's semantics: the cases of its volume_restrictions_test.go
(TestAccessModeConflicts, and the disk conflicts of TestGCEDiskConflicts, TestAWSDiskConflicts,
TestRBDDiskConflicts, TestISCSIDiskConflicts), with our own builders, through the real framework, and the
cache's count of a claim's users as pods are placed, assumed, forgotten and finish."""

from __future__ import annotations

import random
from typing import Any

import pytest
from builders import Pod, make_node, make_pod, make_pvc

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import PERSISTENT_VOLUME_CLAIMS
from ai_scheduler.scheduler.framework.plugins.volume_restrictions import (
    DISK_CONFLICT,
    READ_WRITE_ONCE_POD_CONFLICT,
    VolumeRestrictions,
)
from ai_scheduler.scheduler.framework.runtime import Decision, Framework


def cluster() -> SchedulerCache:
    cache = SchedulerCache()
    for name in ("node-1", "node-2"):
        cache.set_node(NodeRecord.from_api(make_node(name)))
    cache.volumes.replace(PERSISTENT_VOLUME_CLAIMS, [
        make_pvc("claim-with-rwop-1", access_modes=("ReadWriteOncePod",)),
        make_pvc("claim-with-rwop-2", access_modes=("ReadWriteOncePod",)),
        make_pvc("claim-with-rwo", access_modes=("ReadWriteOnce",)),
    ])
    return cache


def volume_pod(name: str, *claims: str, node: str | None = None, **kw: Any) -> PodRecord:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return Pod(name, node_name=node, volumes=volumes or None, **kw).uid().record()


def schedule(cache: SchedulerCache, record: PodRecord) -> Decision:
    return Framework("ai-scheduler", [VolumeRestrictions()], [], cache, rng=random.Random(1)).schedule(record)


def test_nothing() -> None:
    cache = cluster()
    cache.set_pod(volume_pod("existing", "claim-with-rwop-1", node="node-1"))
    assert schedule(cache, volume_pod("incoming")).node is not None


def test_failed_to_get_pvc() -> None:
    decision = schedule(cluster(), volume_pod("incoming", "claim-missing"))
    assert decision.message == '0/2 nodes are available: persistentvolumeclaim "claim-missing" not found.'


def test_no_access_mode_conflict() -> None:
    cache = cluster()
    cache.set_pod(volume_pod("existing", "claim-with-rwop-2", "claim-with-rwo", node="node-1"))
    assert schedule(cache, volume_pod("incoming", "claim-with-rwop-1", "claim-with-rwo")).node is not None


def test_access_mode_conflict_fails_every_node() -> None:
    cache = cluster()
    cache.set_pod(volume_pod("existing", "claim-with-rwop-1", node="node-1"))
    decision = schedule(cache, volume_pod("incoming", "claim-with-rwop-1"))
    assert decision.message == f"0/2 nodes are available: 2 {READ_WRITE_ONCE_POD_CONFLICT}."


def test_users_follow_assumptions_and_pods_that_finish_or_go() -> None:
    cache = cluster()
    incoming = volume_pod("incoming", "claim-with-rwop-1")
    cache.assume(volume_pod("first", "claim-with-rwop-1"), "node-2")
    assert schedule(cache, incoming).node is None
    assert cache.forget("uid-first")
    assert schedule(cache, incoming).node is not None
    cache.set_pod(volume_pod("runner", "claim-with-rwop-1", node="node-1"))
    assert schedule(cache, incoming).node is None
    done = volume_pod("runner", "claim-with-rwop-1", node="node-1")
    done.phase = "Succeeded"
    cache.set_pod(done)
    assert schedule(cache, incoming).node is not None
    cache.set_pod(volume_pod("other", "claim-with-rwop-1", node="node-2"))
    cache.remove_pod("uid-other")
    assert schedule(cache, incoming).node is not None
    assert cache.volumes.users == {}
    assert cache.check_consistency() == []


def test_ephemeral_claims_are_not_counted() -> None:
    """kube counts only persistentVolumeClaim volumes (NodeInfo.PVCRefCounts)."""
    cache = cluster()
    obj = make_pod("eph", node_name="node-1", volumes=[{"name": "rwop-1", "ephemeral": {}}])
    record = PodRecord.from_api(obj)
    assert record.claims == (("eph-rwop-1", True),)
    cache.set_pod(record)
    assert cache.volumes.users == {}


# ------------------------------------------------------------------ disk conflicts
def disk_pod(name: str, kind: str, source: dict[str, Any], node: str | None = None) -> PodRecord:
    return Pod(name, node_name=node, volumes=[{"name": "disk", kind: source}]).uid().record()


@pytest.mark.parametrize(
    ("kind", "existing", "incoming", "conflict"),
    [
        pytest.param("gcePersistentDisk", {"pdName": "foo"}, {"pdName": "foo"}, True, id="gce same disk"),
        pytest.param("gcePersistentDisk", {"pdName": "foo"}, {"pdName": "bar"}, False, id="gce other disk"),
        pytest.param("gcePersistentDisk", {"pdName": "foo", "readOnly": True},
                     {"pdName": "foo", "readOnly": True}, False, id="gce both read-only"),
        pytest.param("gcePersistentDisk", {"pdName": "foo", "readOnly": True}, {"pdName": "foo"}, True,
                     id="gce one read-write"),
        pytest.param("awsElasticBlockStore", {"volumeID": "foo", "readOnly": True},
                     {"volumeID": "foo", "readOnly": True}, True, id="ebs always"),
        pytest.param("awsElasticBlockStore", {"volumeID": "foo"}, {"volumeID": "bar"}, False, id="ebs other"),
        pytest.param("iscsi", {"iqn": "iqn.2016-12.server:storage.target01"},
                     {"iqn": "iqn.2016-12.server:storage.target01"}, True, id="iscsi same iqn"),
        pytest.param("iscsi", {"iqn": "iqn.a", "readOnly": True}, {"iqn": "iqn.a", "readOnly": True}, False,
                     id="iscsi both read-only"),
        pytest.param("rbd", {"monitors": ["a", "b"], "pool": "foo", "image": "bar"},
                     {"monitors": ["c", "a"], "pool": "foo", "image": "bar"}, True,
                     id="rbd overlapping monitors"),
        pytest.param("rbd", {"monitors": ["a", "b"], "pool": "foo", "image": "bar"},
                     {"monitors": ["c", "d"], "pool": "foo", "image": "bar"}, False, id="rbd other monitors"),
        pytest.param("rbd", {"monitors": ["a"], "image": "bar"},
                     {"monitors": ["a"], "pool": "rbd", "image": "bar"}, True, id="rbd default pool"),
        pytest.param("rbd", {"monitors": ["a"], "pool": "x", "image": "bar"},
                     {"monitors": ["a"], "pool": "y", "image": "bar"}, False, id="rbd other pool"),
    ],
)
def test_disk_conflicts(
    kind: str, existing: dict[str, Any], incoming: dict[str, Any], conflict: bool
) -> None:
    cache = cluster()
    cache.set_pod(disk_pod("existing", kind, existing, node="node-1"))
    decision = schedule(cache, disk_pod("incoming", kind, incoming))
    assert decision.feasible == (1 if conflict else 2)
    if conflict:
        assert decision.node == "node-2"
        assert decision.reasons == {DISK_CONFLICT: 1}
    cache.remove_pod("uid-existing")
    assert cache.volumes.node_disks == {}
    assert schedule(cache, disk_pod("incoming", kind, incoming)).feasible == 2
