"""Patch semantics of the simulated API server (RFC 7386, strategic merge, RFC 6902)."""

from __future__ import annotations

import pytest

from ai_scheduler.sim.patch import PatchError, json_patch, merge_patch, strategic_merge_patch


def test_merge_patch_rfc7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    assert merge_patch(target, {"a": "z", "c": {"f": None}, "l": [3]}) == {
        "a": "z",
        "c": {"d": "e"},
        "l": [3],
    }
    assert merge_patch({"a": 1}, {"b": {"c": None}}) == {"a": 1, "b": {}}


def test_strategic_merge_keyed_lists() -> None:
    pod = {
        "metadata": {"ownerReferences": [{"uid": "1", "name": "a"}], "finalizers": ["x"]},
        "spec": {
            "containers": [{"name": "main", "image": "a"}, {"name": "side", "image": "b"}],
            "tolerations": [{"key": "t1"}],
        },
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False"}, {"type": "Ready", "status": "False"}]
        },
    }
    patch = {
        "metadata": {"ownerReferences": [{"uid": "2", "name": "b"}], "finalizers": ["y"]},
        "spec": {
            "containers": [{"name": "main", "image": "new"}, {"name": "side", "$patch": "delete"}],
            "tolerations": [{"key": "t2"}],
        },
        "status": {
            "$setElementOrder/conditions": [{"type": "PodScheduled"}],
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
            ],
        },
    }
    result = strategic_merge_patch(pod, patch)
    assert result["metadata"]["ownerReferences"] == [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]
    assert result["metadata"]["finalizers"] == ["x", "y"]
    assert result["spec"]["containers"] == [{"name": "main", "image": "new"}]
    assert result["spec"]["tolerations"] == [{"key": "t2"}]  # no merge key: replaced
    assert result["status"] == {
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"},
            {"type": "Initialized", "status": "True"},
        ]
    }


def test_strategic_merge_taints_and_replace_directive() -> None:
    node = {
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]},
        "metadata": {"labels": {"x": "1", "y": "2"}},
    }
    patch = {
        "spec": {"taints": [{"key": "a", "$patch": "delete"}]},
        "metadata": {"labels": {"$patch": "replace", "z": "3"}},
    }
    result = strategic_merge_patch(node, patch)
    assert result["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]
    assert result["metadata"]["labels"] == {"z": "3"}


def test_json_patch() -> None:
    doc = {"metadata": {"labels": {"a/b": "1"}}, "spec": {"list": [1, 2]}}
    result = json_patch(
        doc,
        [
            {"op": "add", "path": "/spec/list/-", "value": 3},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
            {"op": "copy", "from": "/spec/list", "path": "/spec/copy"},
            {"op": "move", "from": "/spec/copy", "path": "/spec/moved"},
            {"op": "remove", "path": "/spec/list/0"},
            {"op": "test", "path": "/spec/moved", "value": [1, 2, 3]},
        ],
    )
    assert result == {"metadata": {"labels": {"a/b": "2"}}, "spec": {"list": [2, 3], "moved": [1, 2, 3]}}
    with pytest.raises(PatchError):
        json_patch(result, [{"op": "test", "path": "/spec/list", "value": []}])
    with pytest.raises(PatchError):
        json_patch(result, [{"op": "remove", "path": "/nope"}])
    with pytest.raises(PatchError):
        json_patch(result, {"op": "add"})
