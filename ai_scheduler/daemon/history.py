"""The replayable history: what the decision log must carry for `ai-scheduler replay` (format v1).

The decision lines (`decision`, schedule_one.py) say what the scheduler chose; a replay also needs
what it chose from. The informer path (watches.py) hands every Node and Pod it sees to `History`,
which logs, once per object and again only when something a scheduler reads has changed:

- `node.spec`: the Node as the scheduler reads it (name, labels, the ai-scheduler.io/ annotations
  with the agent's GPU report, taints, unschedulable, allocatable, the Ready condition). The GPU
  report's update time changes on every heartbeat; it is left out of the comparison, so a heartbeat
  logs nothing.
- `node.removed`: a Node deleted (or gone from a relist).
- `pod.spec`: the Pod's scheduling-relevant spec at first sight: metadata (name, namespace, uid,
  labels, annotations, owner references, creation time) and the spec's scheduler name, priority,
  preemption policy, node selector, affinity, tolerations, topology spread, scheduling gates,
  overhead, pod-level resources, the volumes a volume plugin reads (claims, ephemeral volumes,
  in-tree disks) and each container's resources and host ports; `nodeName` when it arrived bound
  (a pod placed by another scheduler, or before this one started). Logged again when that changes
  while it waits (a gate removed, a label the policy reads); once placed, no more.
- `pod.finished`: once per pod, when it reaches Succeeded or Failed, or leaves (deleted, or gone
  from a relist) before: its phase, node, start and end, run time in seconds, and the exit reason
  of its first terminated container.
- `config.active`: the config file's content (None: the built-in default) at start and after each
  reload, so that a replay runs under the config the daemon had.
- `dra.object` / `dra.removed`: each Dynamic Resource Allocation object the DynamicResources plugin
  reads (ResourceClaim, ResourceClaimTemplate, ResourceSlice, DeviceClass), pruned (`dra_spec`), at
  first sight and whenever that changes (a claim's allocation and `reservedFor` included), and its
  deletion. With the decision lines' `claims` (the devices allocated at Reserve), the log says which
  devices a decision had to choose from and which it took. A Pod's `spec.resourceClaims` is part of
  `pod.spec`.

Every line carries `"v": 1`; a change of meaning bumps it. The objects are written in the API's own
form (pruned), so that a replay rebuilds them with the same parsers as the informers
(`PodRecord.from_api`, `NodeRecord.from_api`): nothing is re-encoded by hand on either side.
Only what the comparison needs is kept per object (a hash of the pruned form, an int), so memory
grows with the live objects, not with history.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from ai_scheduler.cache.gpus import GPU_IDS_ANNOTATION, GPU_UUIDS_ANNOTATION, UPDATED_ANNOTATION
from ai_scheduler.cache.records import TERMINAL_PHASES
from ai_scheduler.log import SCHEMA_VERSION, JsonLogger, parse_time, rfc3339

VERSION = SCHEMA_VERSION  # the lines' format (log.py), which replay reads back
ANNOTATION_PREFIX = "ai-scheduler.io/"
# Volume sources a volume plugin reads (VolumeBinding, VolumeRestrictions, NodeVolumeLimits, VolumeZone).
VOLUME_SOURCES = frozenset({
    "persistentVolumeClaim", "ephemeral", "gcePersistentDisk", "awsElasticBlockStore", "azureDisk",
    "rbd", "iscsi", "cinder", "csi",
})
POD_SPEC_KEYS = (
    "schedulerName", "priority", "priorityClassName", "preemptionPolicy", "nodeSelector", "affinity",
    "tolerations", "topologySpreadConstraints", "schedulingGates", "overhead", "resources", "nodeName",
    "resourceClaims",
)
# The Dynamic Resource Allocation objects DynamicResources reads, as `dra.object` lines.
DRA_KINDS = {"resourceclaims": "ResourceClaim", "resourceclaimtemplates": "ResourceClaimTemplate",
             "resourceslices": "ResourceSlice", "deviceclasses": "DeviceClass"}
SKIPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
PREBIND_ANNOTATIONS = frozenset({GPU_IDS_ANNOTATION, GPU_UUIDS_ANNOTATION})


def _container(container: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": container.get("name", "")}
    if container.get("resources"):
        out["resources"] = container["resources"]
    ports = [p for p in container.get("ports") or () if isinstance(p, dict) and p.get("hostPort")]
    if ports:
        out["ports"] = ports
    if container.get("restartPolicy"):  # a sidecar (restartable init container)
        out["restartPolicy"] = container["restartPolicy"]
    return out


def pod_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Pod pruned to what a scheduler reads (see the module docstring)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    # On a pod not bound yet, the GPU ids are PreBind's, written just before the binding: a replay
    # chooses them again. On a bound pod (placed before the log began) they are what it holds.
    skipped = SKIPPED_ANNOTATIONS if spec.get("nodeName") else SKIPPED_ANNOTATIONS | PREBIND_ANNOTATIONS
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in skipped}
    metadata = {
        key: value
        for key, value in (
            ("name", meta.get("name")),
            ("namespace", meta.get("namespace")),
            ("uid", meta.get("uid")),
            ("labels", meta.get("labels")),
            ("annotations", annotations),
            ("ownerReferences", meta.get("ownerReferences")),
            ("creationTimestamp", meta.get("creationTimestamp")),
        )
        if value
    }
    out: dict[str, Any] = {key: spec[key] for key in POD_SPEC_KEYS if spec.get(key) not in (None, "", [], {})}
    containers = [_container(c) for c in spec.get("containers") or () if isinstance(c, dict)]
    out["containers"] = containers
    init = [_container(c) for c in spec.get("initContainers") or () if isinstance(c, dict)]
    if init:
        out["initContainers"] = init
    volumes = [v for v in spec.get("volumes") or () if isinstance(v, dict) and VOLUME_SOURCES & v.keys()]
    if volumes:
        out["volumes"] = volumes
    return {"metadata": metadata, "spec": out}


def node_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Node pruned to what a scheduler reads (see the module docstring)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(ANNOTATION_PREFIX)
    }
    ready = [c for c in status.get("conditions") or () if isinstance(c, dict) and c.get("type") == "Ready"]
    metadata: dict[str, Any] = {"name": meta.get("name", "")}
    if meta.get("labels"):
        metadata["labels"] = meta["labels"]
    if annotations:
        metadata["annotations"] = annotations
    node_status: dict[str, Any] = {"allocatable": status.get("allocatable") or {}}
    if ready:
        node_status["conditions"] = [{"type": "Ready", "status": ready[0].get("status")}]
    node: dict[str, Any] = {"metadata": metadata, "status": node_status}
    kept = {k: spec[k] for k in ("taints", "unschedulable") if spec.get(k)}
    if kept:
        node["spec"] = kept
    return node


def dra_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A DRA object pruned to what the DynamicResources plugin reads: name, namespace, uid, annotations,
    owner references, finalizers and deletion mark; the spec; a claim's allocation and reservations."""
    meta = obj.get("metadata") or {}
    metadata = {key: meta[key] for key in ("name", "namespace", "uid", "annotations", "ownerReferences",
                                           "finalizers", "deletionTimestamp") if meta.get(key)}
    out: dict[str, Any] = {"metadata": metadata, "spec": obj.get("spec") or {}}
    status = obj.get("status") or {}
    kept = {key: status[key] for key in ("allocation", "reservedFor") if status.get(key)}
    if kept:
        out["status"] = kept
    return out


def _fingerprint(obj: Mapping[str, Any]) -> int:
    return hash(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))


def _encoded(obj: Mapping[str, Any]) -> tuple[int, orjson.Fragment]:
    """The object's fingerprint and its JSON for the log line, encoded once (every pod of the first list
    goes through here before the first decision)."""
    data = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    return hash(data), orjson.Fragment(data)


def _ended(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    """The first terminated container's finish time and reason (e.g. Completed, OOMKilled, Error)."""
    for status in (obj.get("status") or {}).get("containerStatuses") or ():
        terminated = ((status or {}).get("state") or {}).get("terminated") or {}
        if terminated:
            return terminated.get("finishedAt"), str(terminated.get("reason") or "")
    return None, ""


class History:
    """Logs the v1 history lines for the objects the informers see (see the module docstring)."""

    def __init__(self, logger: JsonLogger) -> None:
        self.log = logger
        self._pods: dict[str, int] = {}  # uid -> fingerprint of the spec last logged
        self._nodes: dict[str, int] = {}
        self._finished: set[str] = set()
        self._dra: dict[tuple[str, str, str], int] = {}  # (resource, namespace, name) -> fingerprint

    @property
    def enabled(self) -> bool:
        return self.log.enabled("info")

    # ------------------------------------------------------------------ nodes
    def node_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        name = (obj.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            if self._nodes.pop(name, None) is not None:
                self.log.info("node.removed", v=VERSION, node=name)
            return
        self.node_seen(obj)

    def node_seen(self, obj: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        node = node_spec(obj)
        name = node["metadata"]["name"]
        compared = node
        annotations = node["metadata"].get("annotations")
        if annotations and UPDATED_ANNOTATION in annotations:  # a heartbeat alone is no change
            compared = {**node, "metadata": {**node["metadata"], "annotations": {
                k: v for k, v in annotations.items() if k != UPDATED_ANNOTATION}}}
        encoded: Any = node
        if compared is node:
            fingerprint, encoded = _encoded(node)
        else:
            fingerprint = _fingerprint(compared)
        if self._nodes.get(name) != fingerprint:
            self._nodes[name] = fingerprint
            self.log.info("node.spec", v=VERSION, node=name, object=encoded)

    def nodes_listed(self, names: set[str]) -> None:
        """After a relist: the nodes known before and missing now were removed."""
        if not self.enabled:
            return
        for name in [n for n in self._nodes if n not in names]:
            del self._nodes[name]
            self.log.info("node.removed", v=VERSION, node=name)

    # ------------------------------------------------------------------ pods
    def pod_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        if kind == "DELETED":
            self._finish(obj)
            uid = (obj.get("metadata") or {}).get("uid", "")
            self._pods.pop(uid, None)
            self._finished.discard(uid)
            return
        self.pod_seen(obj)

    def pod_seen(self, obj: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        # Once placed, what changes (its binding, PreBind's annotations, its status) is not replayed.
        placed_since = uid in self._pods and bool((obj.get("spec") or {}).get("nodeName"))
        if not placed_since:
            fingerprint, encoded = _encoded(pod_spec(obj))
            if self._pods.get(uid) != fingerprint:
                self._pods[uid] = fingerprint
                key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
                self.log.info("pod.spec", v=VERSION, pod=key, uid=uid, object=encoded)
        if (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self._finish(obj)

    def pods_listed(self, uids: set[str]) -> None:
        """After a relist: the pods known before and missing now have left."""
        if not self.enabled:
            return
        for uid in [u for u in self._pods if u not in uids]:
            if uid not in self._finished:
                self.log.info("pod.finished", v=VERSION, uid=uid, phase="Deleted", node="", started=None,
                              ended=None, runtime_s=None, reason="gone from a relist")
            del self._pods[uid]
            self._finished.discard(uid)

    def _finish(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        if uid in self._finished or uid not in self._pods:
            return
        self._finished.add(uid)
        status = obj.get("status") or {}
        phase = status.get("phase") or ""
        started = status.get("startTime")
        ended, reason = _ended(obj)
        if phase not in TERMINAL_PHASES:  # left before it finished: ends now
            ended, phase, reason = None, "Deleted", reason or "deleted"
        end_s = parse_time(ended) if ended else None
        if end_s is None:  # no container said when: now, as this line's own time does
            end_s = time.time()
            ended = rfc3339(end_s, millis=False)
        start_s = parse_time(started)
        runtime = round(end_s - start_s, 3) if start_s is not None else None
        self.log.info(
            "pod.finished", v=VERSION, pod=f"{meta.get('namespace', '')}/{meta.get('name', '')}", uid=uid,
            phase=phase, node=(obj.get("spec") or {}).get("nodeName", ""), started=started, ended=ended,
            runtime_s=runtime, reason=reason,
        )

    # ------------------------------------------------------------------ DRA objects
    def dra_event(self, resource: str, kind: str, obj: Mapping[str, Any]) -> None:
        """A ResourceClaim, template, ResourceSlice or DeviceClass (`resource` as the informer names it):
        `dra.object` when it is new or changed what the plugin reads (a claim's allocation and
        reservations included: what a decision used is in the log before the decision's effects),
        `dra.removed` when deleted."""
        if not self.enabled:
            return
        meta = obj.get("metadata") or {}
        key = (resource, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if kind == "DELETED":
            if self._dra.pop(key, None) is not None:
                self.log.info("dra.removed", v=VERSION, kind=DRA_KINDS.get(resource, resource),
                              namespace=key[1] or None, name=key[2])
            return
        pruned = dra_spec(obj)
        fingerprint = _fingerprint(pruned)
        if self._dra.get(key) != fingerprint:
            self._dra[key] = fingerprint
            self.log.info("dra.object", v=VERSION, kind=DRA_KINDS.get(resource, resource),
                          namespace=key[1] or None, name=key[2], object=pruned)

    def dra_listed(self, resource: str, items: list[dict[str, Any]]) -> None:
        """A relist: each object as an event, and those known before and missing now removed."""
        if not self.enabled:
            return
        present = set()
        for obj in items:
            meta = obj.get("metadata") or {}
            present.add((resource, str(meta.get("namespace") or ""), str(meta.get("name") or "")))
            self.dra_event(resource, "ADDED", obj)
        for key in [k for k in self._dra if k[0] == resource and k not in present]:
            self.dra_event(resource, "DELETED", {"metadata": {"namespace": key[1], "name": key[2]}})

    # ------------------------------------------------------------------ config
    def config(self, content: Mapping[str, Any] | None, path: str | None) -> None:
        if self.enabled:
            self.log.info("config.active", v=VERSION, path=path, config=content)
