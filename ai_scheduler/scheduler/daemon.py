"""The scheduler daemon: informer path and scheduling path over one cache.

Everything runs on one event loop. Watch handlers and scheduling cycles are
synchronous between awaits, so a cycle always sees a consistent cache; the
loop yields after every pod so that watch events and binding replies keep
flowing while a long queue drains.

A config reload (file change or SIGHUP) is applied between two cycles, whole:
each component is handed the new values, and those that read settings at use
read them from the daemon's current config, so no component keeps what it was
given at start. The few keys that cannot change in a running process are
declared in `RESTART_REQUIRED`; the reload's log line names every changed key,
as `applied` or under `restart_required_for` (config.keys derives the keys from
the schema, so a new key falls on one side or the other, never in between).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.disruption import RESOURCE as DISRUPTION_BUDGETS
from ai_scheduler.cache.disruption import DisruptionBudgets
from ai_scheduler.cache.gangs import GangRegistry
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.tenancy import Tenancy, quota_amounts
from ai_scheduler.cache.volumes import RESOURCES as VOLUME_RESOURCES
from ai_scheduler.cache.workloads import RESOURCES as WORKLOAD_RESOURCES
from ai_scheduler.config import Config, ConfigError, ConfigWatcher
from ai_scheduler.config.keys import changed_keys, within
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import QueueClosed, QueuedPod, SchedulingQueue
from ai_scheduler.scheduler.binder import Binder
from ai_scheduler.scheduler.cycle import Decision, Framework, resourceless
from ai_scheduler.scheduler.feedback import Feedback
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.scheduler.gang_status import GangStatusWriter
from ai_scheduler.scheduler.health import ApiMonitor, HealthServer
from ai_scheduler.scheduler.informer import Informer
from ai_scheduler.scheduler.metrics import UNSCHEDULABLE, Metrics, StateCollector
from ai_scheduler.scheduler.plugins import (
    build_filters,
    build_scores,
    reads_volumes,
    reads_workloads,
    waits_for_other_pods,
)
from ai_scheduler.scheduler.preemption import Preemptor
from ai_scheduler.scheduler.priority import PriorityEngine
from ai_scheduler.scheduler.recovery import CycleGuard, JournalingBinder
from ai_scheduler.scheduler.reservation import Reserver

HOUSEKEEPING_SECONDS = 1.0
# The config keys a reload cannot apply: they take effect at the next start, and a reload that finds them
# different from what runs names them in `restart_required_for`. Every other key is applied at once.
RESTART_REQUIRED: frozenset[str] = frozenset(
    {
        # /healthz, /readyz and /metrics stay where they were bound at start (where the probes look).
        "server.port",
        "server.bindAddress",
        # Also sizes the API client's connection pool, which is made once, when the daemon connects.
        "scheduling.bindConcurrency",
    }
)


def build_frameworks(config: Config, cache: SchedulerCache, rng: random.Random) -> dict[str, Framework]:
    frameworks = {}
    for profile in config.profiles:
        frameworks[profile.scheduler_name] = Framework(
            profile.scheduler_name,
            build_filters(config, profile),
            build_scores(profile),
            cache,
            percentage_of_nodes_to_score=config.scheduling.percentage_of_nodes_to_score,
            rng=rng,
            tie_break=config.scheduling.tie_break,
        )
    return frameworks


class Scheduler:
    def __init__(
        self,
        config: Config,
        client: KubeClient,
        logger: JsonLogger,
        *,
        config_path: str | None = None,
        serve_http: bool = True,
        seed: int | None = None,
        config_poll_seconds: float = 2.0,
    ) -> None:
        self.config = config
        self.client = client
        self.log = logger
        self.config_path = config_path
        self.config_poll_seconds = config_poll_seconds
        self.serve_http = serve_http
        self.rng = random.Random(seed)
        settings = config.scheduling
        self.metrics = Metrics()
        self.cache = SchedulerCache(assume_timeout=settings.assume_timeout_seconds)
        self.cache.gpus.staleness = config.gpu.staleness_seconds
        self.tenancy = Tenancy(config)
        self.cache.tenancy = self.tenancy
        self.gangs = GangRegistry()
        self.budgets = DisruptionBudgets()  # PodDisruptionBudgets, which preemption respects
        self.priorities = PriorityEngine(config, self.tenancy, self.cache, self._job_members)
        self.queue = SchedulingQueue(
            initial_backoff=settings.initial_backoff_seconds,
            max_backoff=settings.max_backoff_seconds,
            unschedulable_flush=settings.unschedulable_flush_seconds,
            queue_name_of=lambda pod: self.tenancy.tenant_of(pod).queue,
            sort_key=self.priorities.sort_key,
            on_incoming=self.metrics.incoming,
        )
        self.frameworks = build_frameworks(config, self.cache, self.rng)
        self.gang_scheduler: GangScheduler | None = None
        self.preemptor: Preemptor | None = None
        self.reserver = Reserver(self.cache, logger, backfill=settings.backfill)
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self.http: HealthServer | None = None
        self.monitor: ApiMonitor | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._loop_task: asyncio.Task[None] | None = None
        self.feedback: Feedback | None = None
        self.binder: Binder | None = None
        self.guard: CycleGuard | None = None
        self.config_watcher: ConfigWatcher | None = None
        self.informers: dict[str, Informer[Any]] = {}
        self._gpu_problems: dict[str, str] = {}  # node -> the GPU report problem last logged
        # What the restart-only keys (RESTART_REQUIRED) still run with, whatever reloads came since.
        self._start_config = config
        self._reconfigured = asyncio.Event()  # set by a reload: loops waiting on a period take the new one
        self.priority_interval = config.scheduling.priority_refresh_seconds  # the period of the refresh loop

    # ------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        """Run until stop(); the caller owns the client."""
        settings = self.config.scheduling
        self.feedback = Feedback(
            self.client,
            self.log,
            self.metrics,
            component=self.config.scheduler_name,
            repeat_window=settings.event_repeat_seconds,
        )
        binder = self.binder = JournalingBinder(
            self.client,
            self.cache,
            self.queue,
            self.feedback,
            self.metrics,
            self.log,
            concurrency=settings.bind_concurrency,
        )
        gang_scheduler = self.gang_scheduler = GangScheduler(
            self.gangs,
            self.cache,
            self.queue,
            self.binder,
            self.feedback,
            self.metrics,
            self.log,
            settings,
            self._log_decision,
            self.admission_refusal,
            self.reserver,
            self.priorities.sort_key,
            lambda: self.config.scheduling.reservation,
        )
        self.guard = CycleGuard(
            self.cache, self.queue, binder, gang_scheduler, self.feedback, self.metrics, self.log
        )
        self.preemptor = Preemptor(
            self.cache,
            self.tenancy,
            self.gangs,
            self.client,
            self.feedback,
            self.log,
            self.metrics,
            self.budgets,
        )
        binder.on_success = self._bound
        binder.on_failure = lambda pod, result: gang_scheduler.bind_failed(pod, result.message)
        self.metrics.watch_state(
            StateCollector(
                self.queue.counts_by_queue,
                self._cache_sizes,
                lambda: binder.in_flight,
                self._gpu_allocation,
                self.queue.pending_counts,
            )
        )
        if self.serve_http:
            self.http = HealthServer(live=self._live, ready=self._ready, metrics=self.metrics.render)
            port = await self.http.start(self.config.server.bind_address, self.config.server.port)
            self.log.info("http.listening", port=port)
        self.informers = {
            "nodes": Informer(
                self.client,
                "nodes",
                self._on_node_event,
                self._replace_nodes,
                self.log,
                convert=NodeRecord.from_api,
                on_relist=self._on_relist,
            ),
            "pods": Informer(
                self.client,
                "pods",
                self._on_pod_event,
                self._replace_pods,
                self.log,
                convert=PodRecord.from_api,
                on_relist=self._on_relist,
            ),
            # Namespace labels, for pod affinity terms' namespaceSelector.
            "namespaces": Informer(
                self.client,
                "namespaces",
                self._on_namespace_event,
                self._replace_namespaces,
                self.log,
                on_relist=self._on_relist,
            ),
            # PodDisruptionBudgets: preemption takes the pods they protect last, as kube-scheduler does.
            DISRUPTION_BUDGETS: Informer(
                self.client,
                DISRUPTION_BUDGETS,
                self.budgets.apply,
                self.budgets.replace,
                self.log,
                on_relist=self._on_relist,
            ),
            # Optional: without the PodGroup CRD, label-declared gangs still work.
            "podgroups": Informer(
                self.client,
                "podgroups",
                self._on_podgroup_event,
                self._replace_podgroups,
                self.log,
                on_relist=self._on_relist,
                optional=True,
            ),
        }
        self._watch_workloads(start=False)
        self._watch_volumes(start=False)
        self._apply_api_settings()
        monitor = self.monitor = ApiMonitor(
            self.client,
            self.log,
            self.informers.values,
            restart_after=lambda: self.config.scheduling.api_unreachable_restart_seconds,
        )
        self._tasks = [
            asyncio.create_task(inf.run(), name=f"informer-{name}") for name, inf in self.informers.items()
        ]
        self._tasks.append(asyncio.create_task(monitor.run(), name="api-monitor"))
        if self.config_path:
            watcher = self.config_watcher = ConfigWatcher(
                self.config_path, self._apply_config, self._config_refused, interval=self.config_poll_seconds
            )
            self._tasks.append(asyncio.create_task(watcher.run(), name="config-watcher"))
        self.log.info(
            "scheduler.starting", profiles=sorted(self.frameworks), bind_concurrency=settings.bind_concurrency
        )
        try:
            synced = asyncio.gather(*(inf.synced.wait() for inf in self.informers.values()))
            stop = asyncio.ensure_future(self.stopped.wait())
            waiting: list[asyncio.Future[Any]] = [synced, stop]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not self.stopped.is_set():
                # Normalisers come from the waiting pods: take them before the first pop.
                self.priorities.refresh(self.queue.pending())
                self.queue.reprioritize()
                self.ready.set()
                self.log.info("scheduler.ready", nodes=self.cache.node_count, pending=len(self.queue))
                self._loop_task = asyncio.create_task(self._scheduling_loop(), name="scheduling-loop")
                self._tasks.append(asyncio.create_task(self._housekeeping(), name="housekeeping"))
            self._tasks.append(asyncio.create_task(self._refresh_priorities(), name="priorities"))
            writer = GangStatusWriter(self.client, self.gangs, self.log, self.metrics)
            self._tasks.append(asyncio.create_task(writer.run(), name="gang-status"))
            await stop
            synced.cancel()
        finally:
            await self._shutdown()

    def stop(self) -> None:
        self.stopped.set()

    async def _shutdown(self) -> None:
        self.queue.close()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        if self.binder is not None:
            await self.binder.drain(timeout=5.0)
        if self.preemptor is not None:
            await self.preemptor.drain(timeout=5.0)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.feedback is not None:
            await self.feedback.close()
        if self.http is not None:
            await self.http.stop()
        self.log.info("scheduler.stopped")

    def _live(self) -> str:
        """Why /healthz fails ("" when it does not): the scheduling loop stopped, or the API server has been
        out of reach long enough that a restart is wanted (health.ApiMonitor)."""
        if self.ready.is_set() and (self._loop_task is None or self._loop_task.done()):
            return "scheduling loop stopped"
        return self.monitor.live_problem() if self.monitor is not None else ""

    def _ready(self) -> str:
        """Why /readyz fails ("" when it does not): no first sync yet, or the API server out of reach."""
        if not self.ready.is_set():
            return "informers not synced"
        return self.monitor.ready_problem() if self.monitor is not None else ""

    def _apply_api_settings(self) -> None:
        """The request timeout, for every request from now on, and the watches' idle bound: when that
        changed, the open watches are ended and reopened from where they were (no relist), so that it
        holds at once rather than from the informers' next watch, minutes later."""
        settings = self.config.scheduling
        self.client.request_timeout = settings.api_request_timeout_seconds
        idle_changed = False
        for informer in self.informers.values():
            idle_changed |= informer.watch_idle != settings.watch_idle_seconds
            informer.watch_idle = settings.watch_idle_seconds
        if idle_changed:
            self.client.end_watches()

    def _gpu_allocation(self) -> dict[str, dict[str, int]]:
        gpus = self.cache.gpus
        return {self.cache.row_names[row]: gpus.allocation(row) for row in list(gpus.nodes)}

    def _cache_sizes(self) -> dict[str, int]:
        return {
            "nodes": self.cache.node_count,
            "pods": len(self.cache.pods),
            "assumed_pods": self.cache.assumed_count,
        }

    # ------------------------------------------------------------------ informer path
    def _on_node_event(self, kind: str, obj: dict[str, Any]) -> None:
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

    def _replace_nodes(self, nodes: list[NodeRecord]) -> None:
        changed, removed = self.cache.replace_nodes(nodes)
        if changed or removed:
            self.queue.move_all("NodeRelist")
        if self.ready.is_set():
            self.log.info("informer.reconciled", resource="nodes", changed=len(changed), removed=len(removed))

    def _on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        pod = PodRecord.from_api(obj)
        if kind == "DELETED":
            change = self.cache.remove_pod(pod.uid)
            self.queue.delete(pod.uid)
            if self.feedback is not None:
                self.feedback.forget(pod.uid)
            self.gangs.forget_pod(pod.uid)
            self.reserver.placed(pod.uid)
        else:
            change = self.cache.set_pod(pod)
            self.gangs.observe_pod(pod)
            self._sync_queue(pod)
        if change.freed:
            self.queue.move_all("AssignedPodDelete")
        elif change.placed:
            self.queue.move_matching("AssignedPodAdd", waits_for_other_pods)

    def _replace_pods(self, pods: list[PodRecord]) -> None:
        changed, removed = self.cache.replace_pods(pods)
        for pod in removed:
            self.queue.delete(pod.uid)
            self.gangs.forget_pod(pod.uid)
            if self.feedback is not None:
                self.feedback.forget(pod.uid)
        for pod in changed:
            self.gangs.observe_pod(pod)
            self._sync_queue(pod)
        if self.ready.is_set():
            self.queue.move_all("PodRelist")
            self.log.info("informer.reconciled", resource="pods", changed=len(changed), removed=len(removed))

    def _sync_queue(self, pod: PodRecord) -> None:
        """Keep the queue equal to the set of our pending pods that are not already placed."""
        if pod.scheduler_name in self.frameworks and pod.pending and pod.gated:
            self.queue.gate(pod.uid)  # never tried until its gates go; counted as gated
        elif pod.scheduler_name in self.frameworks and pod.pending:
            if not self.cache.is_assumed(pod.uid):
                self.queue.add(pod)
        else:
            self.queue.delete(pod.uid)
            if self.feedback is not None and not pod.pending:
                self.feedback.forget(pod.uid)

    def _on_namespace_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        before = self.cache.namespace_version
        self.cache.set_namespace(meta.get("name") or "", None if kind == "DELETED" else dict(labels))
        if self.cache.namespace_version != before:
            self.queue.move_matching("NamespaceChange", lambda pod: pod.pod_affinity.has_required)

    def _replace_namespaces(self, items: list[dict[str, Any]]) -> None:
        known = set(self.cache.namespace_labels)
        for obj in items:
            known.discard((obj.get("metadata") or {}).get("name") or "")
            self._on_namespace_event("ADDED", obj)
        for name in known:
            self._on_namespace_event("DELETED", {"metadata": {"name": name}})

    def _watch_workloads(self, *, start: bool) -> None:
        """Informers for the Services, ReplicationControllers, ReplicaSets and StatefulSets whose selectors
        PodTopologySpread's system default constraints read, once a profile scores with it (at start, or
        from the reload that brings such a profile); kube-scheduler watches them for the same reason.
        They run on if a later config drops the plugin (their cost is a few small objects)."""
        if WORKLOAD_RESOURCES[0] in self.informers or not any(map(reads_workloads, self.config.profiles)):
            return
        workloads = self.cache.workloads
        self._add_informers(WORKLOAD_RESOURCES, workloads.apply, workloads.replace, start=start)

    def _watch_volumes(self, *, start: bool) -> None:
        """Informers for PersistentVolumes, PersistentVolumeClaims and StorageClasses, once a profile filters
        with VolumeBinding (at start, or from the reload that brings such a profile). The default profile
        does, so in practice they always run, as kube-scheduler always watches them. Any change wakes the
        pods with claims (kube's queueing hints for these kinds), and only them."""
        if VOLUME_RESOURCES[0] in self.informers or not any(map(reads_volumes, self.config.profiles)):
            return
        self._add_informers(VOLUME_RESOURCES, self._on_volume_event, self._replace_volumes, start=start)

    def _add_informers(
        self,
        resources: Sequence[str],
        on_event: Callable[[str, str, dict[str, Any]], None],
        on_replace: Callable[[str, list[dict[str, Any]]], None],
        *,
        start: bool,
    ) -> None:
        """Informers for resources added after start-up, their handlers told which resource spoke."""
        for resource in resources:
            informer: Informer[dict[str, Any]] = Informer(
                self.client,
                resource,
                functools.partial(on_event, resource),
                functools.partial(on_replace, resource),
                self.log,
                on_relist=self._on_relist,
            )
            informer.watch_idle = self.config.scheduling.watch_idle_seconds
            self.informers[resource] = informer
            if start:
                self._tasks.append(asyncio.create_task(informer.run(), name=f"informer-{resource}"))

    def _on_volume_event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        self.cache.volumes.apply(resource, kind, obj)
        self.queue.move_matching("VolumeChange", lambda pod: bool(pod.claims))

    def _replace_volumes(self, resource: str, items: list[dict[str, Any]]) -> None:
        self.cache.volumes.replace(resource, items)
        self.queue.move_matching("VolumeRelist", lambda pod: bool(pod.claims))

    def _on_podgroup_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.gangs.remove_podgroup(obj)
        else:
            self.gangs.set_podgroup(obj)
        self.queue.move_all("PodGroupChange")

    def _replace_podgroups(self, items: list[dict[str, Any]]) -> None:
        self.gangs.replace_podgroups(items)
        self.queue.move_all("PodGroupRelist")

    def _on_relist(self, resource: str, reason: str) -> None:
        self.metrics.relists.labels(resource, reason).inc()

    # ------------------------------------------------------------------ scheduling path
    async def _scheduling_loop(self) -> None:
        try:
            await self._schedule_forever()
        except Exception as exc:  # a bug in the loop itself: say so; /healthz turns red and the pod restarts
            self.log.error("scheduler.loop_crashed", error=f"{type(exc).__name__}: {exc}")
            raise

    async def _schedule_forever(self) -> None:
        assert self.binder is not None and self.guard is not None
        while True:
            await self.binder.wait_for_room()
            try:
                qp = await self.queue.pop()
            except QueueClosed:
                return
            # A bug for one pod must not stop scheduling for all, nor leave its pods without a reason.
            self.guard.run(qp, self._schedule_one)
            await asyncio.sleep(0)

    def _schedule_one(self, qp: QueuedPod) -> None:
        """One cycle: a lone pod, or the whole gang the popped pod belongs to."""
        state = self.cache.pod_state(qp.pod.uid)
        pod = state.record if state is not None else qp.pod
        framework = self.frameworks.get(pod.scheduler_name)
        if (
            framework is None
            or not pod.pending
            or pod.gated
            or (state is not None and (state.assumed or state.node))
        ):
            self.queue.delete(pod.uid)
            return
        gang = self.gangs.gang_of(pod)
        if gang is not None:
            assert self.gang_scheduler is not None
            self.gang_scheduler.schedule(qp, gang, framework)
            return
        refusal = self.admission_refusal(pod, quota_amounts(pod))
        if refusal:
            self._refuse(qp, pod, refusal)
            return
        # The queue key only matters against a reservation: computing it costs a policy evaluation.
        key = self.priorities.sort_key(qp) if self.reserver.current is not None else ()
        decision = framework.schedule(pod, blocked=self.reserved_for_others(pod, key))
        assert self.binder is not None and self.feedback is not None
        if decision.node is not None:
            self.reserver.placed(pod.uid)
            self.cache.assume(pod, decision.node, decision.gpu_ids)
            self.binder.submit(qp, pod, decision)
            self._log_decision(qp, pod, decision, "scheduled", {})
        else:
            # PostFilter first, as kube-scheduler runs it: when preemption cannot help, its verdict ends
            # the Unschedulable message.
            plan = None
            if self.preemptor is not None:
                verdict = self.preemptor.post_filter(pod, framework, decision)
                plan, decision.post_filter = verdict.plan, verdict.message
            message = decision.message
            self.queue.requeue(qp, unschedulable=True, reason=message)
            self.feedback.unschedulable(pod, message)
            self._log_decision(qp, pod, decision, "unschedulable", {})
            if not decision.error and self.preemptor is not None:
                if plan is not None:
                    self.preemptor.execute(pod, plan)
                elif self.config.scheduling.reservation:
                    rows, _ = framework.feasible_rows(resourceless(pod))
                    key = key or self.priorities.sort_key(qp)
                    self.reserver.consider(pod.key, frozenset({pod.uid}), key, pod, pod.requests, 1, rows)

    def _bound(self, pod: PodRecord, _node: str) -> None:
        assert self.gang_scheduler is not None
        self.gang_scheduler.bound(pod)
        self.reserver.placed(pod.uid)

    def reserved_for_others(self, pod: PodRecord, key: tuple[Any, ...]) -> list[tuple[Any, str]]:
        """Nodes this pod keeps off, each with its reason: the node its workload was just preempted from,
        and nodes reserved for a pod or gang ahead of it (unless it may backfill)."""
        kept: list[tuple[Any, str]] = []
        avoided = self.preemptor.avoid(pod) if self.preemptor is not None else ""
        row = self.cache.row_of(avoided) if avoided else -1
        if row >= 0:
            mask = np.zeros(self.cache.rows, dtype=bool)
            mask[row] = True
            kept.append((mask, "node(s) its workload was just preempted from"))
        if self.config.scheduling.reservation and self.reserver.current is not None:
            blocked = self.reserver.blocked_rows(pod, key)
            if blocked is not None:
                kept.append((blocked, f"node(s) reserved for {self.reserver.current.holder}"))
        return kept

    def _job_members(self, pod: PodRecord) -> int:
        gang = self.gangs.gang_of(pod)
        return gang.min_member if gang is not None else 1

    def admission_refusal(self, pod: PodRecord, amounts: dict[str, int]) -> str:
        """Why the pod (or gang, with the gang's total `amounts`) may not be placed for its owner now."""
        tenant = self.tenancy.tenant_of(pod)
        return tenant.error or self.tenancy.quota_refusal(tenant, amounts)

    def _refuse(self, qp: QueuedPod, pod: PodRecord, reason: str) -> None:
        """Admission refused: nothing tried, the pod waits until usage drops (a pod leaving moves it)."""
        tenant = self.tenancy.tenant_of(pod)
        assert self.feedback is not None
        self.queue.requeue(qp, unschedulable=True, reason=reason)
        self.feedback.unschedulable(pod, reason)
        self.log.info(
            "admission.refused",
            pod=pod.key,
            user=tenant.user,
            group=tenant.group,
            queue=tenant.queue,
            reason=reason,
        )
        self._log_decision(qp, pod, Decision(None, self.cache.node_count), "refused", {"message": reason})

    def _log_decision(
        self, qp: QueuedPod, pod: PodRecord, decision: Decision, result: str, extra: dict[str, Any]
    ) -> None:
        """Metrics and the decision log line: everything needed to understand and replay the attempt."""
        if result != "scheduled":  # a placement is counted once its binding succeeds (Binder), as kube does
            self.metrics.attempt(UNSCHEDULABLE, pod.scheduler_name, decision.duration)
        fields: dict[str, Any] = {
            "pod": pod.key,
            "uid": pod.uid,
            "profile": pod.scheduler_name,
            "queue": self.tenancy.tenant_of(pod).queue,
            **self._priority_fields(pod),
            "attempt": qp.attempts,
            "result": result,
            "requests": pod.requests,
            "nodes": decision.total_nodes,
            "evaluated": decision.evaluated,
            "feasible": decision.feasible,
            "filtered": decision.reasons,
            "top": decision.top,
            "node": decision.node,
            "cycle_ms": round(decision.duration * 1000, 3),
            "wait_ms": round((time.monotonic() - qp.initial_attempt) * 1000, 1),
        }
        if decision.gpu_ids:
            fields["gpus"] = {"ids": decision.gpu_ids, "uuids": decision.gpu_uuids}
        if decision.node is None:
            fields["message"] = decision.message
        fields.update(extra)
        self.log.info("decision", **fields)

    def _priority_fields(self, pod: PodRecord) -> dict[str, Any]:
        priority = self.priorities.explain(pod.uid)
        tenant = self.tenancy.tenant_of(pod)
        fields: dict[str, Any] = {"specPriority": pod.priority, "user": tenant.user, "group": tenant.group}
        if priority is not None:
            fields["priority"] = round(priority.score, 6)
            fields["factors"] = {name: round(value, 6) for name, value in priority.factors.items()}
            fields["policy"] = self.config.active_policy
        return fields

    async def _refresh_priorities(self) -> None:
        """Priorities move with waiting time and usage: recompute them, re-sort only what moved. A reload
        (which refreshes them itself) cuts the wait short, so that a new period counts from then."""
        while True:
            self.priority_interval = self.config.scheduling.priority_refresh_seconds
            self._reconfigured.clear()
            try:
                await asyncio.wait_for(self._reconfigured.wait(), self.priority_interval)
                continue
            except TimeoutError:
                pass
            self.priorities.refresh(self.queue.pending())
            moved = self.queue.reprioritize()
            if moved and self.log.enabled("debug"):
                self.log.debug("priorities.refreshed", moved=moved, pending=len(self.queue))

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            if self.gang_scheduler is not None:
                self.gang_scheduler.check_timeouts()
            if self.preemptor is not None:
                self.preemptor.expire()
            for pod in self.cache.expire_assumed():
                self.log.warning(
                    "assume.expired",
                    pod=pod.key,
                    uid=pod.uid,
                    reason="binding succeeded but the watch never showed the pod bound",
                )
                current = self.cache.pod_state(pod.uid)
                if current is not None:
                    self._sync_queue(current.record)
                self.queue.move_all("AssumeExpired")

    # ------------------------------------------------------------------ config reload
    def _apply_config(self, config: Config) -> None:
        """Put a new config in force at once, all of it but the keys of RESTART_REQUIRED: every component
        is handed the new values (none keeps a copy from the start). The log line names the keys changed
        since the last config that took effect (`applied`), and those whose value in the file differs
        from the one still running until a restart (`restart_required_for`), as dotted paths."""
        applied = sorted(c.path for c in changed_keys(self.config, config) if not _needs_restart(c.key))
        waiting = sorted(c.path for c in changed_keys(self._start_config, config) if _needs_restart(c.key))
        settings = config.scheduling
        self.config = config
        self._apply_api_settings()
        self.cache.set_assume_timeout(settings.assume_timeout_seconds)
        self.cache.gpus.staleness = config.gpu.staleness_seconds
        self.reserver.backfill = settings.backfill
        if not settings.reservation:
            self.reserver.current = None
        if self.gang_scheduler is not None:
            self.gang_scheduler.reconfigure(settings)
        if self.feedback is not None:
            self.feedback.repeat_window = settings.event_repeat_seconds
            self.feedback.component = config.scheduler_name
        self.tenancy.reconfigure(config, [s.record for s in self.cache.pods.values() if s.node])
        self.priorities.reconfigure(config)
        self.frameworks = build_frameworks(config, self.cache, self.rng)
        self._watch_workloads(start=True)
        self._watch_volumes(start=True)
        # Pods of a profile that came or went join or leave the queue; the others are counted in the
        # queue their namespace now gives them.
        for state in list(self.cache.pods.values()):
            if state.record.pending:
                self._sync_queue(state.record)
        self.queue.reconfigure(
            initial_backoff=settings.initial_backoff_seconds,
            max_backoff=settings.max_backoff_seconds,
            unschedulable_flush=settings.unschedulable_flush_seconds,
        )
        self.priorities.refresh(self.queue.pending())
        self.queue.reprioritize()
        self._reconfigured.set()
        self.metrics.config_reloads.labels("applied").inc()
        self.log.info(
            "config.reloaded",
            path=self.config_path,
            profiles=sorted(self.frameworks),
            applied=applied,
            restart_required_for=waiting,
        )
        self.queue.move_all("ConfigReload")

    def _config_refused(self, error: ConfigError) -> None:
        self.metrics.config_reloads.labels("refused").inc()
        self.log.error(
            "config.refused", path=self.config_path, error=str(error), detail="keeping the last good config"
        )

    def reload_config(self) -> None:
        """SIGHUP: read the config file now and apply it, changed or not; the outcome is logged as for a
        change the watcher finds (config.reloaded or config.refused)."""
        self.log.info("config.reload_requested", path=self.config_path, signal="SIGHUP")
        if self.config_watcher is None:
            reason = "no config file given" if not self.config_path else "not watching the file yet"
            self.log.warning("config.reload_skipped", path=self.config_path, reason=reason)
            return
        self.config_watcher.reload()


def _needs_restart(key: str) -> bool:
    """Whether a change at this config key (a leaf, or an entry that holds leaves) waits for a restart."""
    return any(within(leaf, key) for leaf in RESTART_REQUIRED)


async def run_scheduler(
    config: Config,
    *,
    kubeconfig: str | None,
    master: str | None,
    logger: JsonLogger,
    config_path: str | None = None,
) -> None:
    """Connect, run until SIGTERM/SIGINT, reload the config on SIGHUP, and close cleanly (the `run`
    sub-command)."""
    import signal

    client = await KubeClient.connect(
        kubeconfig, host=master, pool_size=config.scheduling.bind_concurrency + 16
    )
    scheduler = Scheduler(config, client, logger, config_path=config_path)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, scheduler.stop)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, scheduler.reload_config)
    try:
        await scheduler.run()
    finally:
        await client.close()
