"""The informer path: list/watch events into the cache, and the queue moved by what changed.

kube-scheduler's `eventhandlers.go`. Each kind the scheduler reads has an
Informer (informer.py: list, then watch, relist when the watch breaks), built
here (`build_informers`) with its two handlers: one per watch event and one
for a fresh list (`replace_*`, which reconciles the cache with the list). The
handlers are synchronous and run between two cycles, so a cycle always sees a
consistent cache.

What an event moves in the queue (kube's queueing hints, coarser): a node added
or changed, or a placed pod leaving, moves every unschedulable pod back to be
tried (`move_all`); a placed pod arriving moves only pods whose constraints
look at other pods (affinity, spread); a namespace's labels only pods with
required pod affinity terms; a volume object only pods with claims.

Kinds watched only while a profile needs them (kube-scheduler always watches
them): Services, ReplicationControllers, ReplicaSets and StatefulSets for
PodTopologySpread's system defaults, PersistentVolumes, claims, StorageClasses
and CSINodes for the volume plugins. A reload that brings such a profile adds
their informers (`watch_optional`), which then run on.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Container, Sequence
from typing import Any

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import RESOURCE as DISRUPTION_BUDGETS
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import RESOURCES as VOLUME_RESOURCES
from ai_scheduler.cache.workloads import RESOURCES as WORKLOAD_RESOURCES
from ai_scheduler.config import Config
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import SchedulingQueue
from ai_scheduler.scheduler.feedback import Feedback
from ai_scheduler.scheduler.informer import Informer
from ai_scheduler.scheduler.metrics import Metrics
from ai_scheduler.scheduler.plugins import reads_volumes, reads_workloads, waits_for_other_pods
from ai_scheduler.scheduler.reservation import Reserver


class EventHandlers:
    def __init__(
        self,
        client: KubeClient,
        cache: SchedulerCache,
        queue: SchedulingQueue,
        gangs: GangRegistry,
        budgets: DisruptionBudgets,
        reserver: Reserver,
        feedback: Feedback,
        metrics: Metrics,
        logger: JsonLogger,
        profiles: Callable[[], Container[str]],
        ready: asyncio.Event,
    ) -> None:
        self.client = client
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
        self.informers: dict[str, Informer[Any]] = {}
        self._gpu_problems: dict[str, str] = {}  # node -> the GPU report problem last logged
        self._spawn: Callable[[Informer[Any]], None] | None = None  # starts an informer added later

    # ------------------------------------------------------------------ informers
    def build_informers(self, config: Config) -> dict[str, Informer[Any]]:
        """The informers of every kind the config needs; none runs yet."""
        self.informers = {
            "nodes": self._informer("nodes", self.on_node_event, self.replace_nodes, NodeRecord.from_api),
            "pods": self._informer("pods", self.on_pod_event, self.replace_pods, PodRecord.from_api),
            # Namespace labels, for pod affinity terms' namespaceSelector.
            "namespaces": self._informer("namespaces", self.on_namespace_event, self.replace_namespaces),
            # PodDisruptionBudgets: preemption takes the pods they protect last, as kube-scheduler does.
            DISRUPTION_BUDGETS: self._informer(DISRUPTION_BUDGETS, self.budgets.apply, self.budgets.replace),
            # Optional: without the PodGroup CRD, label-declared gangs still work.
            "podgroups": self._informer(
                "podgroups", self.on_podgroup_event, self.replace_podgroups, optional=True
            ),
        }
        self.watch_optional(config)
        return self.informers

    def start_added(self, spawn: Callable[[Informer[Any]], None]) -> None:
        """From now on an informer added by `watch_optional` is started with `spawn`."""
        self._spawn = spawn

    def watch_optional(self, config: Config) -> None:
        """Informers for the kinds only some profiles read, once a profile of `config` reads them:
        workloads' selectors for PodTopologySpread's system defaults, volume objects for the volume
        plugins (the default profile filters with VolumeBinding, so in practice they always run). They
        run on if a later config drops the plugin (their cost is a few small objects)."""
        if WORKLOAD_RESOURCES[0] not in self.informers and any(map(reads_workloads, config.profiles)):
            workloads = self.cache.workloads
            self._add(WORKLOAD_RESOURCES, workloads.apply, workloads.replace, config)
        if VOLUME_RESOURCES[0] not in self.informers and any(map(reads_volumes, config.profiles)):
            self._add(VOLUME_RESOURCES, self.on_volume_event, self.replace_volumes, config)

    def _informer(
        self,
        resource: str,
        on_event: Callable[..., None],
        on_replace: Callable[..., None],
        convert: Callable[[dict[str, Any]], Any] | None = None,
        *,
        optional: bool = False,
    ) -> Informer[Any]:
        extra: dict[str, Any] = {"convert": convert} if convert is not None else {}
        return Informer(
            self.client,
            resource,
            on_event,
            on_replace,
            self.log,
            on_relist=self.on_relist,
            optional=optional,
            **extra,
        )

    def _add(
        self,
        resources: Sequence[str],
        on_event: Callable[[str, str, dict[str, Any]], None],
        on_replace: Callable[[str, list[dict[str, Any]]], None],
        config: Config,
    ) -> None:
        """Informers for kinds added after start-up, their handlers told which resource spoke."""
        for resource in resources:
            informer = self._informer(
                resource, functools.partial(on_event, resource), functools.partial(on_replace, resource)
            )
            informer.watch_idle = config.scheduling.watch_idle_seconds
            self.informers[resource] = informer
            if self._spawn is not None:
                self._spawn(informer)

    def on_relist(self, resource: str, reason: str) -> None:
        self.metrics.relists.labels(resource, reason).inc()

    # ------------------------------------------------------------------ nodes
    def on_node_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            name = (obj.get("metadata") or {}).get("name", "")
            self.cache.remove_node(name)
            self._gpu_problems.pop(name, None)
            return
        node = NodeRecord.from_api(obj)
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
        pod = PodRecord.from_api(obj)
        if kind == "DELETED":
            change = self.cache.remove_pod(pod.uid)
            self.queue.delete(pod.uid)
            self.feedback.forget(pod.uid)
            self.gangs.forget_pod(pod.uid)
            self.reserver.placed(pod.uid)
        else:
            change = self.cache.set_pod(pod)
            self.gangs.observe_pod(pod)
            self.sync_queue(pod)
        if change.freed:
            self.queue.move_all("AssignedPodDelete")
        elif change.placed:
            self.queue.move_matching("AssignedPodAdd", waits_for_other_pods)

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
        """Keep the queue equal to the set of our pending pods that are not already placed."""
        ours = pod.scheduler_name in self.profiles()
        if ours and pod.pending and pod.gated:
            self.queue.gate(pod.uid)  # never tried until its gates go; counted as gated
        elif ours and pod.pending:
            if not self.cache.is_assumed(pod.uid):
                self.queue.add(pod)
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

    def on_podgroup_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.gangs.remove_podgroup(obj)
        else:
            self.gangs.set_podgroup(obj)
        self.queue.move_all("PodGroupChange")

    def replace_podgroups(self, items: list[dict[str, Any]]) -> None:
        self.gangs.replace_podgroups(items)
        self.queue.move_all("PodGroupRelist")
