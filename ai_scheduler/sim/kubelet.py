"""Simulated kubelets and the node lifecycle controller.

Both are in-process subscribers of the store rather than HTTP watchers: they
stand for components the scheduler must coexist with (pods that start, run
and finish; nodes whose not-ready taint is cleared), and running them in the
server process keeps benchmark load on the scheduler's side of the wire.
Every change they make is an ordinary write, so watchers see it as a real
cluster would show it.
"""

from __future__ import annotations

import asyncio
import calendar
import re
import time
import zlib
from typing import Any

from ai_scheduler.sim.resourceclaims import pod_claim_names
from ai_scheduler.sim.store import ADDED, DELETED, Entry, ResourceType, Store, now_rfc3339

KUBELET_LABEL = "sim.ai-scheduler.io/kubelet"
DURATION_ANNOTATION = "sim.ai-scheduler.io/duration"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"

CLAIM_RETRY_SECONDS = 0.1  # how soon a pod waiting on its ResourceClaims is looked at again
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float | None:
    """Seconds from a number or a Go duration (`30s`, `1.5m`, `1h30m`); None if unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _GO_DURATION.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


def _condition(kind: str, status: str, now: str, reason: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    return cond


def _set_conditions(status: dict[str, Any], updates: list[dict[str, Any]]) -> None:
    """Replace conditions by type; keep the transition time when the status did not change."""
    conditions = status.setdefault("conditions", [])
    by_type = {c.get("type"): pos for pos, c in enumerate(conditions)}
    for cond in updates:
        pos = by_type.get(cond["type"])
        if pos is None:
            conditions.append(cond)
            continue
        if conditions[pos].get("status") == cond["status"]:
            cond["lastTransitionTime"] = conditions[pos].get("lastTransitionTime", cond["lastTransitionTime"])
        conditions[pos] = cond


def _ip_for(name: str, first: int) -> str:
    """A stable filler address from a name (hostIP, podIP); not meant to be routable."""
    digest = zlib.crc32(name.encode())
    return f"10.{first}.{(digest >> 8) & 0xFF}.{(digest & 0xFF) or 1}"


class SimKubelets:
    """Kubelets for every node not labelled `sim.ai-scheduler.io/kubelet: "false"`.

    A bound pod starts Running after `start_delay` (once its ResourceClaims are allocated on
    its node and reserved for it, as the real kubelet requires), finishes (Succeeded) after
    its duration annotation, and a Terminating pod is removed after its grace
    period, capped at `finish_delay`.
    """

    def __init__(self, store: Store, *, start_delay: float = 0.05, finish_delay: float = 0.05) -> None:
        self._store = store
        self._pods = store.registry.resolve("pods")
        self._nodes = store.registry.resolve("nodes")
        self.start_delay = start_delay
        self.finish_delay = finish_delay
        # One pending timer per pod and step; the step names what the timer will do.
        self._timers: dict[tuple[str, str], tuple[str, asyncio.TimerHandle]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._claims = store.registry.resolve("resourceclaims")
        self._slices = store.registry.resolve("resourceslices")
        # Pods not started because of their ResourceClaims: (namespace, name) -> why (see claims_problem).
        self.waiting_on_claims: dict[tuple[str, str], str] = {}

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._store.subscribe(self._on_event)
        for entry in list(self._store.entries(self._pods)):
            self._on_pod(entry.obj)

    def stop(self) -> None:
        self._store.unsubscribe(self._on_event)
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    def simulates(self, node_name: str) -> bool:
        node = self._store.entry(self._nodes, "", node_name)
        if node is None:
            return False
        return (node.obj["metadata"].get("labels") or {}).get(KUBELET_LABEL) != "false"

    def claims_problem(self, pod: dict[str, Any]) -> str:
        """Why the kubelet of the pod's node cannot prepare its ResourceClaims ("" when it can): a claim
        not made yet, missing, not allocated, not reserved for the pod, or allocated a device that a
        ResourceSlice publishes for another node."""
        names = pod_claim_names(pod)
        if names is None:
            return "a claim from a template is not made yet"
        meta = pod["metadata"]
        node = pod["spec"]["nodeName"]
        for name in names:
            claim = self._store.entry(self._claims, meta["namespace"], name)
            if claim is None:
                return f'resourceclaim "{name}" not found'
            status = claim.obj.get("status") or {}
            allocation = status.get("allocation")
            if not allocation:
                return f'resourceclaim "{name}" is not allocated'
            if not any(ref.get("uid") == meta.get("uid") for ref in status.get("reservedFor") or ()):
                return f'pod {meta["name"]} is not allowed to use resource claim {name}: not reserved for it'
            for result in (allocation.get("devices") or {}).get("results") or ():
                elsewhere = self._device_node(result.get("driver"), result.get("pool"), node)
                if elsewhere:
                    return (f'resourceclaim "{name}": device {result.get("driver")}/{result.get("pool")}/'
                            f'{result.get("device")} is on node {elsewhere}, not {node}')
        return ""

    def _device_node(self, driver: Any, pool: Any, node: str) -> str:
        """The node a pool's slices publish it for, when that is another node than `node` ("" if not)."""
        other = ""
        for entry in self._store.entries(self._slices):
            spec = entry.obj.get("spec") or {}
            if spec.get("driver") != driver or (spec.get("pool") or {}).get("name") != pool:
                continue
            owner = spec.get("nodeName")
            if not owner or owner == node:
                return ""
            other = str(owner)
        return other

    def _on_event(self, kind: str, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if rt is not self._pods:
            return
        if kind == DELETED:
            meta = obj["metadata"]
            self.waiting_on_claims.pop((meta["namespace"], meta["name"]), None)
            timer = self._timers.pop((meta["namespace"], meta["name"]), None)
            if timer is not None:
                timer[1].cancel()
            return
        self._on_pod(obj)

    def _on_pod(self, obj: dict[str, Any]) -> None:
        node = obj.get("spec", {}).get("nodeName")
        if not node or not self.simulates(node):
            return
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        current = self._timers.get(key)
        if meta.get("deletionTimestamp"):
            if current is None or current[0] != "remove":
                grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                self._schedule(key, "remove", min(grace, self.finish_delay), meta["uid"])
            return
        if current is not None:
            return
        status = obj.get("status") or {}
        phase = status.get("phase", "Pending")
        if phase == "Pending":
            self._schedule(key, "run", self.start_delay, meta["uid"])
        elif phase == "Running":  # found running (at start): finish what is left of its duration
            duration = parse_duration((meta.get("annotations") or {}).get(DURATION_ANNOTATION))
            if duration is not None:
                self._schedule(key, "succeed", max(0.0, duration - self._elapsed(status)), meta["uid"])

    @staticmethod
    def _elapsed(status: dict[str, Any]) -> float:
        started = status.get("startTime")
        if not started:
            return 0.0
        try:
            return time.time() - calendar.timegm(time.strptime(started, "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            return 0.0

    def _schedule(self, key: tuple[str, str], step: str, delay: float, uid: str) -> None:
        assert self._loop is not None
        previous = self._timers.get(key)
        if previous is not None:
            previous[1].cancel()
        handle = self._loop.call_later(delay, self._fire, key, step, uid)
        self._timers[key] = (step, handle)

    def _fire(self, key: tuple[str, str], step: str, uid: str) -> None:
        if self._timers.get(key, ("",))[0] == step:
            del self._timers[key]
        entry = self._store.entry(self._pods, *key)
        if entry is None or entry.obj["metadata"].get("uid") != uid:
            return
        if step == "remove":
            self._store.delete(self._pods, entry)
        elif entry.obj["metadata"].get("deletionTimestamp"):
            return
        elif step == "run":
            self._run(entry)
        elif step == "succeed":
            self._succeed(entry)

    def _run(self, entry: Entry) -> None:
        if (entry.obj.get("status") or {}).get("phase", "Pending") != "Pending":
            return
        key = (entry.obj["metadata"]["namespace"], entry.obj["metadata"]["name"])
        problem = self.claims_problem(entry.obj)
        if problem:
            # As the real kubelet: the pod's containers do not start until its claims are prepared, which
            # needs them allocated on this node and reserved for the pod. Checked again shortly.
            self.waiting_on_claims[key] = problem
            self._schedule(key, "run", CLAIM_RETRY_SECONDS, entry.obj["metadata"]["uid"])
            return
        self.waiting_on_claims.pop(key, None)
        pod = entry.copy()
        now = now_rfc3339()
        spec = pod["spec"]
        status = pod.setdefault("status", {})
        node = spec["nodeName"]
        pod_ip = _ip_for(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", 244)
        host_ip = _ip_for(node, 0)
        status.update({"phase": "Running", "startTime": now, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
                       "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]})
        _set_conditions(status, [_condition(kind, "True", now) for kind in
                                 ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                  "PodScheduled")])
        status["containerStatuses"] = [
            {"name": c.get("name", ""), "image": c.get("image", ""), "imageID": "", "ready": True,
             "started": True, "restartCount": 0, "containerID": f"sim://{pod['metadata']['uid']}/{pos}",
             "state": {"running": {"startedAt": now}}}
            for pos, c in enumerate(spec.get("containers") or [])]
        duration = parse_duration((pod["metadata"].get("annotations") or {}).get(DURATION_ANNOTATION))
        if duration is not None:  # timed from now: startTime has only whole seconds
            self._schedule((pod["metadata"]["namespace"], pod["metadata"]["name"]), "succeed", duration,
                           pod["metadata"]["uid"])
        self._store.update(self._pods, pod, entry)

    def _succeed(self, entry: Entry) -> None:
        if (entry.obj.get("status") or {}).get("phase") != "Running":
            return
        pod = entry.copy()
        now = now_rfc3339()
        status = pod["status"]
        status["phase"] = "Succeeded"
        _set_conditions(status, [_condition("Ready", "False", now, "PodCompleted"),
                                 _condition("ContainersReady", "False", now, "PodCompleted"),
                                 _condition("PodReadyToStartContainers", "False", now)])
        for cs in status.get("containerStatuses") or []:
            started = (cs.get("state") or {}).get("running", {}).get("startedAt", now)
            cs.update({"ready": False, "started": False,
                       "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started,
                                                "finishedAt": now}}})
        self._store.update(self._pods, pod, entry)


class NodeLifecycleController:
    """Keeps the NoSchedule condition taints in step with each node's Ready condition.

    Ready=True clears `not-ready`/`unreachable`; False sets `not-ready`;
    Unknown sets `unreachable`. A node without a Ready condition is left alone.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._nodes = store.registry.resolve("nodes")
        self._pending: set[str] = set()
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self._store.subscribe(self._on_event)
        for entry in list(self._store.entries(self._nodes)):
            self._on_event(ADDED, self._nodes, entry.obj, None)

    def stop(self) -> None:
        self._store.unsubscribe(self._on_event)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._pending.clear()

    def _on_event(self, kind: str, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if rt is not self._nodes or kind == DELETED or _desired_taints(obj) is None:
            return
        # Writes are deferred: an update from inside another write's notification would
        # reach the other subscribers before the event that caused it.
        self._pending.add(obj["metadata"]["name"])
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._handle = None
        pending, self._pending = self._pending, set()
        for name in pending:
            entry = self._store.entry(self._nodes, "", name)
            if entry is None:
                continue
            taints = _desired_taints(entry.obj)
            if taints is None:
                continue
            node = entry.copy()
            node.setdefault("spec", {})["taints"] = taints
            if not taints:
                del node["spec"]["taints"]
            self._store.update(self._nodes, node, entry)


def _desired_taints(node: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The node's taints as the controller wants them, or None when nothing is to change."""
    ready = None
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status")
    if ready not in ("True", "False", "Unknown"):
        return None
    want = {"True": set(), "False": {TAINT_NOT_READY}, "Unknown": {TAINT_UNREACHABLE}}[ready]
    taints = (node.get("spec") or {}).get("taints") or []
    have = {t.get("key") for t in taints
            if t.get("key") in (TAINT_NOT_READY, TAINT_UNREACHABLE) and t.get("effect") == "NoSchedule"}
    if have == want:
        return None
    kept = [t for t in taints
            if not (t.get("key") in (TAINT_NOT_READY, TAINT_UNREACHABLE) and t.get("effect") == "NoSchedule")]
    return kept + [{"key": key, "effect": "NoSchedule"} for key in sorted(want)]
