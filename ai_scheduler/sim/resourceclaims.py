"""A stand-in for kube-controller-manager's resource-claim controller (and the garbage collector's part).

What the scheduler must coexist with when pods use Dynamic Resource Allocation
(resource.k8s.io/v1), as `pkg/controller/resourceclaim/controller.go` does it:

- A pod whose `spec.resourceClaims[]` entry names a `resourceClaimTemplateName`
  gets a ResourceClaim made from the template: generated name
  `<pod>-<claim>-<5 random>` (both parts cut in proportion when longer than 57
  characters), the pod as controlling owner, the template's labels and
  annotations plus `resource.kubernetes.io/pod-claim-name`, the template's spec.
  The pod's `status.resourceClaimStatuses` then names it (one entry per pod
  claim, sorted by name). An orphan it made before (found by owner and
  annotation) is adopted rather than made twice; a template that does not exist
  yet is waited for (its creation wakes the pods of its namespace).
- A bound pod whose claim is allocated but not reserved for it is added to
  `status.reservedFor` (at most 256 consumers, as the API allows).
- A claim's `reservedFor` entries for pods that are gone, replaced (another uid)
  or done (Succeeded/Failed) are removed; when none remains and the claim has the
  scheduler's finalizer `resource.kubernetes.io/delete-protection`, the
  allocation is cleared and the finalizer removed (the devices are free again).
- A claim generated for a pod is deleted once unreserved and its pod is gone or
  done (the garbage collector's owner-reference deletion and the controller's own
  cleanup, in one step). Deletion honours finalizers as the API server does: a
  claim with finalizers is marked (deletionTimestamp) and goes when the last one
  is removed.

Like the node lifecycle controller (kubelet.py) it is an in-process subscriber
of the store whose writes are deferred to the next loop turn, so that every
subscriber sees an event before the writes it causes; every change is an
ordinary write that watchers see.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from typing import Any

from ai_scheduler.sim.store import _NAME_ALPHABET, DELETED, Entry, ResourceType, Store

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
RESERVED_FOR_MAX = 256
_MAX_BASE_LEN = 57  # 63 minus a hyphen and five random characters
_DELETED_MEMORY = 10_000  # uids of deleted pods remembered (kube's controller keeps an LRU cache too)


def generate_name(pod_name: str, claim_name: str) -> str:
    """The generateName prefix of a claim made for a pod's claim, cut as kube's controller cuts it."""
    base = f"{pod_name}-{claim_name}-"
    if len(base) > _MAX_BASE_LEN:
        base = (pod_name[: len(pod_name) * _MAX_BASE_LEN // len(base)] + "-"
                + claim_name[: len(claim_name) * _MAX_BASE_LEN // len(base)])
    return base


def pod_claim_names(pod: dict[str, Any]) -> list[str] | None:
    """The names of the ResourceClaims a pod uses (direct ones, generated ones named in its status, its
    extended-resource claim); None while a generated claim is not named in the status yet."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    statuses = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or ()
                if isinstance(s, dict)}
    names: list[str] = []
    for item in spec.get("resourceClaims") or ():
        if not isinstance(item, dict):
            continue
        if item.get("resourceClaimName"):
            names.append(str(item["resourceClaimName"]))
        elif item.get("resourceClaimTemplateName"):
            if item.get("name") not in statuses:
                return None
            generated = statuses[item.get("name")]
            if generated:  # null: the status says no claim is needed
                names.append(str(generated))
    extended = status.get("extendedResourceClaimStatus")
    if isinstance(extended, dict) and extended.get("resourceClaimName"):
        names.append(str(extended["resourceClaimName"]))
    return names


def uses_claims(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims")) or bool(
        (pod.get("status") or {}).get("extendedResourceClaimStatus"))


def _done(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _owner_pod(claim: dict[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the pod that controls a claim, if one does."""
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" \
                and ref.get("controller"):
            return str(ref.get("name") or ""), str(ref.get("uid") or "")
    return None


class ResourceClaimController:
    """Claims from templates, reservations of bound pods, cleanup of unused reservations and claims."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._pods = store.registry.resolve("pods")
        self._claims = store.registry.resolve("resourceclaims")
        self._templates = store.registry.resolve("resourceclaimtemplates")
        self._pending_pods: set[tuple[str, str]] = set()
        self._pending_claims: set[tuple[str, str]] = set()
        self._deleted: OrderedDict[str, None] = OrderedDict()
        # Which pods use a claim, by (namespace, claim name): its changes may need work for them.
        self._users: dict[tuple[str, str], set[str]] = {}
        self._uses: dict[tuple[str, str], tuple[str, ...]] = {}  # pod key -> the claim names indexed
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self._store.subscribe(self._on_event)
        for entry in list(self._store.entries(self._pods)):
            if uses_claims(entry.obj):
                self._index(entry.obj, deleted=False)
                self._pending_pods.add(_key(entry.obj))
        for entry in list(self._store.entries(self._claims)):
            self._pending_claims.add(_key(entry.obj))
        self._arm()

    def stop(self) -> None:
        self._store.unsubscribe(self._on_event)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._pending_pods.clear()
        self._pending_claims.clear()
        self._users.clear()
        self._uses.clear()

    # ------------------------------------------------------------------ events
    def _on_event(self, kind: str, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if rt is self._pods:
            if not uses_claims(obj):
                return
            self._index(obj, kind == DELETED)
            if kind == DELETED:
                self._deleted[str(obj["metadata"].get("uid") or "")] = None
                if len(self._deleted) > _DELETED_MEMORY:
                    self._deleted.popitem(last=False)
            namespace = obj["metadata"].get("namespace", "")
            if kind == DELETED or _done(obj) or (obj["metadata"].get("deletionTimestamp")
                                                 and not (obj.get("spec") or {}).get("nodeName")):
                for name in pod_claim_names(obj) or ():
                    self._pending_claims.add((namespace, name))
                for entry in self._store.entries(self._claims, namespace):
                    owner = _owner_pod(entry.obj)
                    if owner is not None and owner[1] == obj["metadata"].get("uid"):
                        self._pending_claims.add(_key(entry.obj))
            if kind != DELETED:
                self._pending_pods.add(_key(obj))
        elif rt is self._claims:
            if kind != DELETED:
                self._pending_claims.add(_key(obj))
            namespace, name = _key(obj)
            owner = _owner_pod(obj)
            if owner is not None:  # a claim of ours changed: the pod may need its status or reservation
                self._pending_pods.add((namespace, owner[0]))
            for user in self._users.get((namespace, name), ()):  # pods that use it may need a reservation
                self._pending_pods.add((namespace, user))
        elif rt is self._templates:
            if kind == DELETED:
                return
            namespace = obj["metadata"].get("namespace", "")
            for entry in self._store.entries(self._pods, namespace):
                if uses_claims(entry.obj):
                    self._pending_pods.add(_key(entry.obj))
        else:
            return
        self._arm()

    def _index(self, pod: dict[str, Any], deleted: bool) -> None:
        key = _key(pod)
        namespace = key[0]
        for name in self._uses.pop(key, ()):
            users = self._users.get((namespace, name))
            if users is not None:
                users.discard(key[1])
                if not users:
                    del self._users[(namespace, name)]
        if deleted:
            return
        names = tuple(pod_claim_names(pod) or ())
        if names:
            self._uses[key] = names
            for name in names:
                self._users.setdefault((namespace, name), set()).add(key[1])

    def _arm(self) -> None:
        if self._handle is None and (self._pending_pods or self._pending_claims):
            self._handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._handle = None
        pods, self._pending_pods = self._pending_pods, set()
        claims, self._pending_claims = self._pending_claims, set()
        for key in sorted(pods):
            self._sync_pod(*key)
        for key in sorted(claims):
            self._sync_claim(*key)

    # ------------------------------------------------------------------ pods
    def _sync_pod(self, namespace: str, name: str) -> None:
        entry = self._store.entry(self._pods, namespace, name)
        if entry is None or entry.obj["metadata"].get("deletionTimestamp"):
            return
        pod = entry.obj
        uid = pod["metadata"].get("uid", "")
        status = pod.get("status") or {}
        statuses: dict[str, str] = {
            str(s.get("name") or ""): str(s.get("resourceClaimName") or "")
            for s in status.get("resourceClaimStatuses") or () if isinstance(s, dict)}
        made: dict[str, str] = {}
        for item in (pod.get("spec") or {}).get("resourceClaims") or ():
            if not isinstance(item, dict) or not item.get("resourceClaimTemplateName") \
                    or item.get("resourceClaimName"):
                continue
            claim_name = str(item.get("name") or "")
            named = statuses.get(claim_name)
            if named:
                existing = self._store.entry(self._claims, namespace, str(named))
                if existing is not None and (_owner_pod(existing.obj) or ("", ""))[1] == uid:
                    continue
            claim = self._find_owned(namespace, uid, claim_name) or self._create(pod, claim_name,
                                                                                  str(item["resourceClaimTemplateName"]))
            if claim is not None:
                made[claim_name] = claim["metadata"]["name"]
        if made:
            merged = {k: v for k, v in statuses.items() if v}
            merged.update(made)
            updated = entry.copy()
            updated.setdefault("status", {})["resourceClaimStatuses"] = [
                {"name": k, "resourceClaimName": merged[k]} for k in sorted(merged)]
            entry = self._store.update(self._pods, updated, entry)
            pod = entry.obj
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or _done(pod):
            return
        for claim_name in pod_claim_names(pod) or ():
            claim_entry = self._store.entry(self._claims, namespace, claim_name)
            if claim_entry is None:
                continue
            claim_status = claim_entry.obj.get("status") or {}
            reserved = claim_status.get("reservedFor") or []
            if not claim_status.get("allocation") or any(r.get("uid") == uid for r in reserved) \
                    or len(reserved) >= RESERVED_FOR_MAX:
                continue
            owner = _owner_pod(claim_entry.obj)
            if owner is not None and owner[1] != uid:
                continue  # another pod's generated claim
            updated = claim_entry.copy()
            updated.setdefault("status", {}).setdefault("reservedFor", []).append(
                {"resource": "pods", "name": name, "uid": uid})
            self._store.update(self._claims, updated, claim_entry)

    def _find_owned(self, namespace: str, uid: str, claim_name: str) -> dict[str, Any] | None:
        for entry in self._store.entries(self._claims, namespace):
            meta = entry.obj["metadata"]
            if (meta.get("annotations") or {}).get(POD_CLAIM_ANNOTATION) == claim_name \
                    and (_owner_pod(entry.obj) or ("", ""))[1] == uid:
                return entry.obj
        return None

    def _create(self, pod: dict[str, Any], claim_name: str, template_name: str) -> dict[str, Any] | None:
        meta = pod["metadata"]
        namespace = meta.get("namespace", "")
        template = self._store.entry(self._templates, namespace, template_name)
        if template is None:
            return None  # waited for: the template's creation wakes this pod
        spec = template.copy().get("spec") or {}
        claim_meta = spec.get("metadata") or {}
        annotations = dict(claim_meta.get("annotations") or {})
        annotations[POD_CLAIM_ANNOTATION] = claim_name
        prefix = generate_name(meta["name"], claim_name)
        while True:
            name = prefix + "".join(secrets.choice(_NAME_ALPHABET) for _ in range(5))
            if self._store.entry(self._claims, namespace, name) is None:
                break
        metadata: dict[str, Any] = {
            "name": name, "generateName": prefix, "namespace": namespace, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                 "uid": meta.get("uid"), "controller": True}],
        }
        if claim_meta.get("labels"):
            metadata["labels"] = dict(claim_meta["labels"])
        return self._store.create(self._claims, {"metadata": metadata, "spec": spec.get("spec") or {}}).obj

    # ------------------------------------------------------------------ claims
    def _pod_keeps(self, namespace: str, ref: dict[str, Any]) -> bool:
        """Whether a reservedFor entry still names a pod that may run."""
        if ref.get("apiGroup") or ref.get("resource") != "pods":
            return True  # a consumer of another kind: kept, as kube keeps what it cannot check
        uid = str(ref.get("uid") or "")
        if uid in self._deleted:
            return False
        pod = self._store.entry(self._pods, namespace, str(ref.get("name") or ""))
        return pod is not None and pod.obj["metadata"].get("uid") == uid and not _done(pod.obj)

    def _sync_claim(self, namespace: str, name: str) -> None:
        entry = self._store.entry(self._claims, namespace, name)
        if entry is None:
            return
        claim = entry.obj
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        remaining = [ref for ref in reserved if not isinstance(ref, dict) or self._pod_keeps(namespace, ref)]
        protected = DELETE_PROTECTION_FINALIZER in (claim["metadata"].get("finalizers") or ())
        if len(remaining) < len(reserved):
            updated = entry.copy()
            status = updated.setdefault("status", {})
            if remaining:
                status["reservedFor"] = remaining
            else:
                status.pop("reservedFor", None)
                if protected:  # deallocate: the devices are free for the next claim
                    status.pop("allocation", None)
                    status.pop("devices", None)
            entry = self._store.update(self._claims, updated, entry)
            entry = self._release(entry)
        elif protected and claim["metadata"].get("deletionTimestamp") and not remaining:
            updated = entry.copy()
            updated.setdefault("status", {}).pop("allocation", None)
            entry = self._release(self._store.update(self._claims, updated, entry))
        if entry is None or remaining:
            return
        owner = _owner_pod(entry.obj)
        if owner is None:
            return
        pod = self._store.entry(self._pods, namespace, owner[0])
        if pod is None or pod.obj["metadata"].get("uid") != owner[1] or _done(pod.obj) \
                or owner[1] in self._deleted:
            self.delete(entry)

    def _release(self, entry: Entry) -> Entry | None:
        """Remove the delete-protection finalizer of an unallocated claim; a claim being deleted then goes."""
        meta = entry.obj["metadata"]
        finalizers = list(meta.get("finalizers") or ())
        if DELETE_PROTECTION_FINALIZER not in finalizers or (entry.obj.get("status") or {}).get("allocation"):
            return entry
        updated = entry.copy()
        finalizers.remove(DELETE_PROTECTION_FINALIZER)
        if finalizers:
            updated["metadata"]["finalizers"] = finalizers
        else:
            updated["metadata"].pop("finalizers", None)
        entry = self._store.update(self._claims, updated, entry)
        if meta.get("deletionTimestamp") and not finalizers:
            self._store.delete(self._claims, entry)
            return None
        return entry

    def delete(self, entry: Entry) -> None:
        """Delete as the API server does: a claim with finalizers is only marked."""
        if entry.obj["metadata"].get("finalizers"):
            if not entry.obj["metadata"].get("deletionTimestamp"):
                self._store.mark_deleting(self._claims, entry, 0)
        else:
            self._store.delete(self._claims, entry)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
