"""Merge patch (RFC 7386), strategic merge patch and JSON patch (RFC 6902).

The simulated API server applies patches to a private, freshly decoded copy of
the stored object, and the patch itself is freshly decoded from the request,
so these functions modify `target` in place and take over values of the patch
without copying them (copies would cost time on the server's hot path).
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# List fields that strategic merge patch merges by a key, as the patchMergeKey
# tags of the core API types do; every other list is replaced as a whole.
MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "taints": "key",
    "ownerReferences": "uid",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "addresses": "type",
    "reservedFor": "uid",  # a ResourceClaim's status (resource.k8s.io/v1)
}
# Lists of scalars whose patchStrategy is merge: the patch adds to the set.
MERGE_SCALAR_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied (the server answers 422 or 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            target[key] = merge_patch(target.get(key), value)
        else:
            target[key] = value
    return target


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch with kubectl's strategic rules for the keyed lists in MERGE_KEYS."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives(patch)
    if directive == "delete":
        return None
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys: hints we do not need; $deleteFrom... below
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(target.get(key), value)
            if merged is None:
                target.pop(key, None)
            else:
                target[key] = merged
        elif isinstance(value, list):
            target[key] = _merge_list(key, target.get(key), value)
        else:
            target[key] = value
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/") and isinstance(value, list):
            field = key.split("/", 1)[1]
            if isinstance(target.get(field), list):
                target[field] = [item for item in target[field] if item not in value]
    return target


def _merge_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    merge_key = MERGE_KEYS.get(field)
    existing: list[Any] = current if isinstance(current, list) else []
    if field in MERGE_SCALAR_LISTS:
        return existing + [item for item in patch if item not in existing]
    if merge_key is None or not all(isinstance(item, dict) for item in patch):
        return [_strip_directives(item) for item in patch]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(item) for item in patch if item.get("$patch") != "replace"]
    result = list(existing)
    index = {item.get(merge_key): pos for pos, item in enumerate(result) if isinstance(item, dict)}
    removed: set[int] = set()
    for item in patch:
        key = item.get(merge_key)
        pos = index.get(key)
        if item.get("$patch") == "delete":
            if pos is not None:
                removed.add(pos)
            continue
        if pos is None:
            index[key] = len(result)
            result.append(_strip_directives(item))
        else:
            result[pos] = strategic_merge_patch(result[pos], item)
    return [item for pos, item in enumerate(result) if pos not in removed]


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 operations applied in order; a failed `test` or a bad path raises PatchError."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations")
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid json patch operation {op!r}")
        kind = op["op"]
        if kind == "add":
            target = _json_add(target, op["path"], op.get("value"))
        elif kind == "remove":
            target, _ = _json_remove(target, op["path"])
        elif kind == "replace":
            target, _ = _json_remove(target, op["path"])
            target = _json_add(target, op["path"], op.get("value"))
        elif kind == "move":
            target, value = _json_remove(target, op["from"])
            target = _json_add(target, op["path"], value)
        elif kind == "copy":
            target = _json_add(target, op["path"], copy.deepcopy(_json_get(target, op["from"])))
        elif kind == "test":
            if _json_get(target, op["path"]) != op.get("value"):
                raise PatchError(f"test operation failed at {op['path']}")
        else:
            raise PatchError(f"unknown json patch operation {kind!r}")
    return target


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid json pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _container(target: Any, parts: list[str]) -> Any:
    node = target
    for part in parts:
        node = _step(node, part)
    return node


def _step(node: Any, part: str) -> Any:
    try:
        if isinstance(node, dict):
            return node[part]
        if isinstance(node, list):
            return node[int(part)]
    except (KeyError, IndexError, ValueError):
        pass
    raise PatchError(f"path element {part!r} not found")


def _json_get(target: Any, path: str) -> Any:
    return _container(target, _pointer(path))


def _json_add(target: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _container(target, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                pos = int(last)
            except ValueError as exc:
                raise PatchError(f"invalid list index {last!r}") from exc
            if not 0 <= pos <= len(parent):
                raise PatchError(f"list index {pos} out of range")
            parent.insert(pos, value)
    else:
        raise PatchError(f"cannot add at {path!r}")
    return target


def _json_remove(target: Any, path: str) -> tuple[Any, Any]:
    parts = _pointer(path)
    if not parts:
        return None, target
    parent = _container(target, parts[:-1])
    value = _step(parent, parts[-1])
    if isinstance(parent, dict):
        del parent[parts[-1]]
    else:
        del parent[int(parts[-1])]
    return target, value
