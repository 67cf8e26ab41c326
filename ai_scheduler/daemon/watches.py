"""What the daemon lists and watches, and which event handler each kind feeds.

Each kind the scheduler reads has an Informer (informer.py: list, then watch,
relist when the watch breaks) wired here to its two handlers in
eventhandlers.py. Kinds watched only while a profile needs them (kube-scheduler
always watches them): Services, ReplicationControllers, ReplicaSets and
StatefulSets for PodTopologySpread's system defaults, PersistentVolumes,
claims, StorageClasses and CSINodes for the volume plugins, and DRA's
ResourceClaims, ResourceClaimTemplates, ResourceSlices and DeviceClasses for the
DynamicResources plugin. A reload that
brings such a profile adds their informers (`watch_optional`), which then run
on. Kubernetes PodGroups and the owners of inferred gangs (Jobs, JobSets,
Kubeflow jobs, RayClusters, LeaderWorkerSets) are optional kinds: an informer
each, which treats a kind the API server does not serve as empty.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cache.disruption import RESOURCE as DISRUPTION_BUDGETS
from ai_scheduler.cache.gangs import NATIVE_PODGROUP_API
from ai_scheduler.cache.pod_grouper import OWNER_RESOURCES, resource_key
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.cache.volumes import RESOURCES as VOLUME_RESOURCES
from ai_scheduler.cache.workloads import RESOURCES as WORKLOAD_RESOURCES
from ai_scheduler.config import Config
from ai_scheduler.daemon.history import History
from ai_scheduler.daemon.informer import Informer
from ai_scheduler.log import JsonLogger
from ai_scheduler.scheduler.eventhandlers import EventHandlers
from ai_scheduler.scheduler.framework.plugins import reads_dra, reads_volumes, reads_workloads

# Dynamic Resource Allocation (resource.k8s.io/v1): what kube-scheduler's DynamicResources plugin lists and
# watches, read only while a profile filters with it (kube-scheduler starts them when the plugin is on).
DRA_RESOURCES = ("resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses")

NATIVE_PODGROUPS = resource_key(*NATIVE_PODGROUP_API)


class PodObserver(Protocol):
    def pod_event(self, kind: str, obj: dict[str, Any]) -> None: ...

    def pods_listed(self, uids: set[str]) -> None: ...


class Watches:
    def __init__(
        self, client: KubeClient, handlers: EventHandlers, logger: JsonLogger, history: History | None = None
    ) -> None:
        self.client = client
        self.handlers = handlers
        self.log = logger
        # The replayable history (history.py): every Node and Pod the informers see, before the handlers.
        self.history = history or History(logger)
        # Others that follow every Pod as the history does (daemon/accounting.py), added before the start.
        self.pod_observers: list[PodObserver] = []
        self.informers: dict[str, Informer[Any]] = {}
        self._spawn: Callable[[Informer[Any]], None] | None = None  # starts an informer added later

    def build(self, config: Config) -> dict[str, Informer[Any]]:
        """The informers of every kind the config needs; none runs yet."""
        on, history = self.handlers, self.history
        nodes = _recorded(on.on_node_event, on.replace_nodes, NodeRecord.from_api, lambda node: node.name,
                          history.node_event, history.node_seen, history.nodes_listed)
        observers = self.pod_observers

        def pod_event(kind: str, obj: dict[str, Any]) -> None:
            history.pod_event(kind, obj)
            for observer in observers:
                observer.pod_event(kind, obj)

        def pod_seen(obj: dict[str, Any]) -> None:
            history.pod_seen(obj)
            for observer in observers:
                observer.pod_event("ADDED", obj)

        def pods_listed(uids: set[str]) -> None:
            history.pods_listed(uids)
            for observer in observers:
                observer.pods_listed(uids)

        pods = _recorded(on.on_pod_event, on.replace_pods, PodRecord.from_api, lambda pod: pod.uid,
                         pod_event, pod_seen, pods_listed)
        self.informers = {
            "nodes": self._informer("nodes", *nodes),
            "pods": self._informer("pods", *pods),
            # Namespace labels, for pod affinity terms' namespaceSelector.
            "namespaces": self._informer("namespaces", on.on_namespace_event, on.replace_namespaces),
            # PodDisruptionBudgets: preemption takes the pods they protect last, as kube-scheduler does.
            DISRUPTION_BUDGETS: self._informer(DISRUPTION_BUDGETS, on.budgets.apply, on.budgets.replace),
            # Optional: without the PodGroup CRD, label-declared gangs still work.
            "podgroups": self._informer(
                "podgroups", on.on_podgroup_event, on.replace_podgroups, optional=True
            ),
            # Kubernetes' own PodGroups (native gangs): served with the GenericWorkload feature gate only.
            NATIVE_PODGROUPS: self._informer(
                NATIVE_PODGROUPS, on.on_native_podgroup_event, on.replace_native_podgroups, optional=True
            ),
        }
        # The owners of gangs inferred from the workload (cache/pod_grouper.py); a kind whose CRD is not
        # installed is looked for again every half minute.
        for group, version, plural, kind in OWNER_RESOURCES:
            resource = resource_key(group, version, plural)
            self.informers[resource] = self._informer(
                resource,
                functools.partial(on.on_owner_event, kind),
                functools.partial(on.replace_owners, kind),
                optional=True,
            )
        self.watch_optional(config)
        return self.informers

    def watch_elastic_quotas(
        self, on_event: Callable[[str, dict[str, Any]], None], on_replace: Callable[[list[Any]], None]
    ) -> None:
        """ElasticQuota objects (scheduler-plugins' Capacity Scheduling; an optional CRD): group quotas
        under the config's (config/elasticquota.py). Call before the informers start."""
        self.informers["elasticquotas"] = self._informer("elasticquotas", on_event, on_replace, optional=True)

    def add_informers(self, informers: dict[str, Informer[Any]]) -> None:
        """Informers of the daemon's other parts (the Task controller's: daemon/tasks.py), made with
        `informer`. Call before the informers start."""
        self.informers.update(informers)

    def informer(self, resource: str, on_event: Callable[..., None], on_replace: Callable[..., None],
                 **extra: Any) -> Informer[Any]:
        """An informer of this daemon's client, its relists counted as the others' (Informer's keywords)."""
        return Informer(self.client, resource, on_event, on_replace, self.log,
                        on_relist=self.handlers.on_relist, **extra)

    def start_added(self, spawn: Callable[[Informer[Any]], None]) -> None:
        """From now on an informer added by `watch_optional` is started with `spawn`."""
        self._spawn = spawn

    def watch_optional(self, config: Config) -> None:
        """Informers for the kinds only some profiles read, once a profile of `config` reads them:
        workloads' selectors for PodTopologySpread's system defaults, volume objects for the volume
        plugins (the default profile filters with VolumeBinding, so in practice they always run). They
        run on if a later config drops the plugin (their cost is a few small objects)."""
        handlers = self.handlers
        if WORKLOAD_RESOURCES[0] not in self.informers and any(map(reads_workloads, config.profiles)):
            workloads = handlers.cache.workloads
            self._add(WORKLOAD_RESOURCES, workloads.apply, workloads.replace, config)
        if VOLUME_RESOURCES[0] not in self.informers and any(map(reads_volumes, config.profiles)):
            self._add(VOLUME_RESOURCES, handlers.on_volume_event, handlers.replace_volumes, config)
        if DRA_RESOURCES[0] not in self.informers and any(map(reads_dra, config.profiles)):
            history = self.history

            def dra_event(resource: str, kind: str, obj: dict[str, Any]) -> None:
                history.dra_event(resource, kind, obj)  # the replayable log first, as for nodes and pods
                handlers.on_dra_event(resource, kind, obj)

            def dra_replace(resource: str, items: list[dict[str, Any]]) -> None:
                history.dra_listed(resource, items)
                handlers.replace_dra(resource, items)

            # `resource.k8s.io/v1` is served from Kubernetes v1.34: on an older cluster the plugin is in
            # the default profile all the same, with no claims, slices or classes to read.
            self._add(DRA_RESOURCES, dra_event, dra_replace, config, optional=True)

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
        return self.informer(resource, on_event, on_replace, optional=optional, **extra)

    def _add(
        self,
        resources: Sequence[str],
        on_event: Callable[[str, str, dict[str, Any]], None],
        on_replace: Callable[[str, list[dict[str, Any]]], None],
        config: Config,
        *,
        optional: bool = False,
    ) -> None:
        """Informers for kinds added after start-up, their handlers told which resource spoke; `optional`:
        kinds a cluster may not serve (absent: empty, and looked for again)."""
        for resource in resources:
            informer = self._informer(
                resource, functools.partial(on_event, resource), functools.partial(on_replace, resource),
                optional=optional,
            )
            informer.watch_idle = config.scheduling.watch_idle_seconds
            self.informers[resource] = informer
            if self._spawn is not None:
                self._spawn(informer)


R = TypeVar("R")


def _recorded(
    on_event: Callable[[str, dict[str, Any]], None],
    on_replace: Callable[[list[R]], None],
    convert: Callable[[dict[str, Any]], R],
    key: Callable[[R], str],
    seen_event: Callable[[str, dict[str, Any]], None],
    seen: Callable[[dict[str, Any]], None],
    listed: Callable[[set[str]], None],
) -> tuple[Callable[[str, dict[str, Any]], None], Callable[[list[R]], None], Callable[[dict[str, Any]], R]]:
    """An informer's event handler, relist handler and converter that show each object to the history
    (history.py) before the event handlers get it: every watch event, every listed object, and which
    objects a relist no longer has."""

    def handle(kind: str, obj: dict[str, Any]) -> None:
        seen_event(kind, obj)
        on_event(kind, obj)

    def replace(records: list[R]) -> None:
        listed({key(record) for record in records})
        on_replace(records)

    def converted(obj: dict[str, Any]) -> R:
        seen(obj)
        return convert(obj)

    return handle, replace, converted
