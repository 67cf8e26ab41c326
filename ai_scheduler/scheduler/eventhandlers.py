"""The informer path: list/watch events into the cache, and the queue moved by what changed.

kube-scheduler's `eventhandlers.go`. Each kind the scheduler reads has two handlers
here: one per watch event and one for a fresh list (`replace_*`, which
reconciles the cache with the list). The daemon's informers (watches.py) feed
them from the API server; the trace simulator feeds them its own objects. The
handlers are synchronous and run between two cycles, so a cycle always sees a
consistent cache.

What an event moves in the queue (kube's queueing hints, coarser): a node added
or changed, or a placed pod leaving, moves every unschedulable pod back to be
tried (`move_all`); a placed pod arriving moves only pods whose constraints
look at other pods (affinity, spread); a namespace's labels only pods with
required pod affinity terms; a volume object only pods with claims; a DRA
object (ResourceClaim, template, ResourceSlice, DeviceClass) only the pods it
may help (`DraState.pods_affected`), and the resource-claim controller naming a
pod's generated claims in its status that pod.

A placed pod leaving is finer with queueing hints (`hint`, set by the core):
when the room freed since the last such event is all on the pod's node
(`SchedulerCache.freed_version`), only the pods without a hint and those that
may fit on that node are retried (`SchedulingQueue.move_freed`). A pod of a
lower spec.priority than any seen before drops every hint (a pod behind it
could become a victim of preemption once placed).

"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container
from typing import Any

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.dra import DEVICE_CLASS, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, RESOURCE_SLICE
from ai_scheduler.cache.gangs import NATIVE, GangRegistry, NativePodGroupSpec, gang_key, owner_key
from ai_scheduler.cache.records import HOLD_ANNOTATION, REQUEUE_ANNOTATION, NodeRecord, PodRecord
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.framework.plugins import waits_for_other_pods
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.outbox import Reports
from ai_scheduler.scheduler.reservation import Reserver

# The informers' resource names (watches.py) -> DraState's kinds.
DRA_KINDS = {"resourceclaims": RESOURCE_CLAIM, "resourceclaimtemplates": RESOURCE_CLAIM_TEMPLATE,
             "resourceslices": RESOURCE_SLICE, "deviceclasses": DEVICE_CLASS}


class EventHandlers:
    def __init__(
        self,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        gangs: GangRegistry,
        budgets: DisruptionBudgets,
        reserver: Reserver,
        feedback: Reports,
        metrics: Metrics,
        logger: JsonLogger,
        profiles: Callable[[], Container[str]],
        ready: asyncio.Event,
        finished: Callable[[PodRecord, bool], None] | None = None,
    ) -> None:
        self.cache = cache
        self.queue = queue
        self.gangs = gangs
        self.budgets = budgets
        self.reserver = reserver
        self.feedback = feedback
        self.metrics = metrics
        self.log = logger
        self.profiles = profiles  # the schedulerNames we place pods for
        self.ready = ready  # after the first sync, relists are logged
        # A placed pod ended: ran to its end, succeeded or failed (True), or left otherwise (deleted,
        # evicted); the core learns run times from the first.
        self.finished = finished
        self._gpu_problems: dict[str, str] = {}  # node -> the GPU report problem last logged
        # Queueing hints (set by the core; None: off): whether a pod may fit on a row now.
        self.hint: Callable[[PodRecord, int], bool] | None = None
        self._freed_seen = 0  # the cache's freed_version when the last freed room was handled
        self.lowest_priority: int | None = None  # the lowest spec.priority of any pod seen

    def on_relist(self, resource: str, reason: str) -> None:
        self.metrics.relists.labels(resource, reason).inc()

    # ------------------------------------------------------------------ nodes
    def on_node_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            name = (obj.get("metadata") or {}).get("name", "")
            self.cache.remove_node(name)
            self._gpu_problems.pop(name, None)
            return
        self.node_set(NodeRecord.from_api(obj))

    def node_set(self, node: NodeRecord) -> None:
        """A node added or changed, as a record (the trace simulator's forecast gives the cache's own)."""
        if node.spec_error:
            self.log.error("node.invalid", node=node.name, error=node.spec_error)
        change = self.cache.set_node(node)
        problem = self.cache.gpu_problem(node.name)
        if problem != self._gpu_problems.get(node.name, ""):  # once per change, not per agent heartbeat
            self._gpu_problems[node.name] = problem
            if problem:
                self.log.error("node.gpu_report_invalid", node=node.name, error=problem)
        if change.any:
            self.queue.move_all("NodeAdd" if change.added else "NodeUpdate")

    def replace_nodes(self, nodes: list[NodeRecord]) -> None:
        changed, removed = self.cache.replace_nodes(nodes)
        if changed or removed:
            self.queue.move_all("NodeRelist")
        if self.ready.is_set():
            self.log.info("informer.reconciled", resource="nodes", changed=len(changed), removed=len(removed))

    # ------------------------------------------------------------------ pods
    def on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.pod_event(kind, PodRecord.from_api(obj))

    def pod_event(self, kind: str, pod: PodRecord) -> None:
        """A pod added, changed (MODIFIED, also for ADDED) or DELETED, as its record."""
        if self.lowest_priority is None or pod.priority < self.lowest_priority:
            if self.lowest_priority is not None:
                self.queue.unhint()
            self.lowest_priority = pod.priority
        before = self.cache.pods.get(pod.uid)
        old_node = before.node if before is not None else ""
        if kind == "DELETED":
            change = self.cache.remove_pod(pod.uid)
            self.queue.delete(pod.uid)
            self.feedback.forget(pod.uid)
            self.gangs.forget_pod(pod.uid)
            self.reserver.placed(pod.uid)
        else:
            held = self.cache.pods.get(pod.uid)
            claims_named = held is not None and held.record.claim_statuses != pod.claim_statuses
            change = self.cache.set_pod(pod)
            self.gangs.observe_pod(pod)
            self.sync_queue(pod)
            if claims_named and pod.pending:
                # The resource-claim controller named the pod's claims made from templates: the pod may
                # now pass PreEnqueue (kube's hint for the pod's own status update).
                self.queue.move_matching("PodClaimStatusChange", lambda queued: queued.uid == pod.uid)
        if change.freed:
            if self.finished is not None:
                self.finished(pod, kind != "DELETED" and pod.phase in ("Succeeded", "Failed"))
            self._freed(old_node)
        elif change.placed:
            self.queue.move_matching("AssignedPodAdd", waits_for_other_pods)

    def _freed(self, node: str) -> None:
        """A placed pod left `node`: retry the pods it may help."""
        version, expected = self.cache.freed_version, self._freed_seen + 1
        self._freed_seen = version
        row = self.cache.row_of(node) if node else -1
        hint = self.hint
        if hint is None or version != expected or row < 0:
            self.queue.move_all("AssignedPodDelete")
            return
        self.queue.move_freed("AssignedPodDelete", lambda pod: hint(pod, row))

    def replace_pods(self, pods: list[PodRecord]) -> None:
        changed, removed = self.cache.replace_pods(pods)
        for pod in removed:
            self.queue.delete(pod.uid)
            self.gangs.forget_pod(pod.uid)
            self.feedback.forget(pod.uid)
        for pod in changed:
            self.gangs.observe_pod(pod)
            self.sync_queue(pod)
        if self.ready.is_set():
            self.queue.move_all("PodRelist")
            self.log.info("informer.reconciled", resource="pods", changed=len(changed), removed=len(removed))

    def sync_queue(self, pod: PodRecord) -> None:
        """Keep the queue equal to the set of our pending pods that are not already placed.

        A user's hold (annotation HOLD_ANNOTATION, which `PodRecord.gated` counts as a gate) takes the pod
        out of the queue like a scheduling gate; a new value of REQUEUE_ANNOTATION retries it now with its
        backoff reset. Both are logged when they take effect (`pod.held`, `pod.ungated`, `pod.requeued`).
        """
        ours = pod.scheduler_name in self.profiles()
        if ours and pod.pending and pod.gated:
            if not self.queue.is_gated(pod.uid):
                held = pod.annotations.get(HOLD_ANNOTATION) == "true"
                self.log.info("pod.held", pod=pod.key, by="annotation" if held else "schedulingGates")
            self.queue.gate(pod.uid)  # never tried until its gates go; counted as gated
        elif ours and pod.pending:
            if self.queue.is_gated(pod.uid):
                self.log.info("pod.ungated", pod=pod.key)
            if not self.cache.is_assumed(pod.uid):
                asked = pod.annotations.get(REQUEUE_ANNOTATION)  # rarely set: look further only then
                queued = self.queue.pending_info(pod.uid) if asked else None  # add() replaces its record
                before = queued.pod.annotations.get(REQUEUE_ANNOTATION) if queued is not None else None
                self.queue.add(pod)
                if asked and queued is not None and before != asked:
                    moved = self.queue.retry_now(pod.uid)
                    self.log.info("pod.requeued", pod=pod.key, at=asked, moved=moved)
        else:
            self.queue.delete(pod.uid)
            if not pod.pending:
                self.feedback.forget(pod.uid)

    def sync_pending(self) -> None:
        """Every pending pod joins or leaves the queue as the profiles now say (after a reload)."""
        for state in list(self.cache.pods.values()):
            if state.record.pending:
                self.sync_queue(state.record)

    # ------------------------------------------------------------------ namespaces, volumes, podgroups
    def on_namespace_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        before = self.cache.namespace_version
        self.cache.set_namespace(meta.get("name") or "", None if kind == "DELETED" else dict(labels))
        if self.cache.namespace_version != before:
            self.queue.move_matching("NamespaceChange", lambda pod: pod.pod_affinity.has_required)

    def replace_namespaces(self, items: list[dict[str, Any]]) -> None:
        known = set(self.cache.namespace_labels)
        for obj in items:
            known.discard((obj.get("metadata") or {}).get("name") or "")
            self.on_namespace_event("ADDED", obj)
        for name in known:
            self.on_namespace_event("DELETED", {"metadata": {"name": name}})

    def on_volume_event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        self.cache.volumes.apply(resource, kind, obj)
        self.queue.move_matching("VolumeChange", lambda pod: bool(pod.claims))

    def replace_volumes(self, resource: str, items: list[dict[str, Any]]) -> None:
        self.cache.volumes.replace(resource, items)
        self.queue.move_matching("VolumeRelist", lambda pod: bool(pod.claims))

    # ------------------------------------------------------------------ Dynamic Resource Allocation
    def on_dra_event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """A ResourceClaim, template, ResourceSlice or DeviceClass changed: into the cache's DraState, and
        the pods it may help move (kube's queueing hints: a claim wakes the pods that use it and the pod
        it was made for; a template the pods of its namespace with claims; a slice or class every pod
        with claims or a mapped extended resource)."""
        dra_kind = DRA_KINDS[resource]
        self.cache.dra.apply(dra_kind, kind, obj)
        self.queue.move_matching(f"{dra_kind}Change", self.cache.dra.pods_affected(dra_kind, obj))

    def replace_dra(self, resource: str, items: list[dict[str, Any]]) -> None:
        dra_kind = DRA_KINDS[resource]
        self.cache.dra.replace(dra_kind, items)
        self.queue.move_matching(f"{dra_kind}Relist", self.cache.dra.pods_affected(DEVICE_CLASS, {}))

    def on_podgroup_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.gangs.remove_podgroup(obj)
        else:
            self.gangs.set_podgroup(obj)
        self.queue.move_all("PodGroupChange")

    def replace_podgroups(self, items: list[dict[str, Any]]) -> None:
        self.gangs.replace_podgroups(items)
        self.queue.move_all("PodGroupRelist")

    def on_native_podgroup_event(self, kind: str, obj: dict[str, Any]) -> None:
        """A Kubernetes PodGroup (`scheduling.k8s.io`): its policy and minCount decide for its pods."""
        if kind == "DELETED":
            self.gangs.remove_native_podgroup(obj)
        else:
            meta = obj.get("metadata") or {}
            key = gang_key(meta.get("namespace") or "", meta.get("name") or "", NATIVE)
            known = self.gangs.gangs.get(key)
            before = _policy(known.native) if known is not None and known.native is not None else None
            gang = self.gangs.set_native_podgroup(obj)
            if gang.native is not None and _policy(gang.native) == before:
                return  # its status only (often our own write): nothing to try again
            self._regroup(self.gangs.native_members(gang))
        self.queue.move_all("PodGroupChange")

    def replace_native_podgroups(self, items: list[dict[str, Any]]) -> None:
        self.gangs.replace_native_podgroups(items)
        gangs = list(self.gangs.gangs.values())
        self._regroup([uid for gang in gangs for uid in self.gangs.native_members(gang)])
        self.queue.move_all("PodGroupRelist")

    def on_owner_event(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        """An owner of inferred gangs (pod_grouper.OWNER_RESOURCES): its pods' groups are read again when
        what it says for them changed."""
        key = owner_key(kind, obj)
        self._regroup(self.gangs.set_owner(kind, None if event == "DELETED" else obj, key))

    def replace_owners(self, kind: str, items: list[dict[str, Any]]) -> None:
        self._regroup(self.gangs.replace_owners(kind, items))

    def _regroup(self, uids: list[str]) -> None:
        if not uids:
            return
        for uid in uids:
            state = self.cache.pod_state(uid)
            if state is not None:
                self.gangs.observe_pod(state.record)
        self.queue.move_all("PodGroupChange")


def _policy(spec: NativePodGroupSpec) -> tuple[bool, int, str]:
    """What of a Kubernetes PodGroup decides for its pods."""
    return spec.gang, spec.min_count, spec.error
