"""The scheduler's shared state: nodes, the pods on them, and our own assumptions.

Per-node allocatable and requested resources live in numpy columns (one row
per node, one column per resource) so that fit filters and scores run over all
nodes in one pass. Usage is kept in integer units (millicores for cpu, bytes,
counts), exactly as kube-scheduler's NodeInfo keeps it.

Pod accounting rule: a pod counts on a node while it is bound there (or we
assumed it there) and has not reached Succeeded/Failed; a terminating pod still
counts until it is gone, as in kube-scheduler.

A pod's states here (kube-scheduler's cache, `backend/cache/interface.go`), and
the calls that move it; Assumed and Added count the pod on its node:

               set_pod (seen bound in the watch)
      Initial --------------------------------------------> Added ---+
       |  ^                                                  ^  |  ^  | set_pod
       |  | forget (the binding failed)                      |  |  +--+ (changed)
       |  | expire_assumed (its deadline passed unconfirmed) |  |
       |  +-----------------------+                          |  | set_pod (finished)
       | assume (Reserve)         |     set_pod (seen bound: |  | or remove_pod
       v                          |     confirmed, or moved) |  v
      Assumed --binding_finished--> Assumed, deadline -------+  Deleted

   (seen bound before its binding returned, an Assumed pod is Added too;
   remove_pod takes a pod from any state to Deleted)

- `assume` (Reserve) counts the pod on the chosen node at once, before the binding;
  a second `assume` of an assumed or bound pod raises.
- `binding_finished` starts its deadline (`assume_timeout`): the watch should
  confirm the binding soon.
- `set_pod` with the pod bound confirms it (`confirmed`, or `moved` when another
  scheduler or a user bound it elsewhere: it is counted where it really is);
  while the binding is in flight a watch event without a node keeps the
  reservation.
- `forget` (the binding failed) and `expire_assumed` put it back to Initial:
  pending again, its room freed (`freed_version` moves).

`row_version[row]` moves whenever what the row holds or offers changes: its
allocatable (set_node), the requests counted on it and the GPUs held there
(every pod added, removed or moved, and `_without`'s temporary removals), or
the node leaving. A score that keeps per-row results (the fragmentation
scores' kept evaluations) compares against it, as kube-scheduler's snapshot
compares a NodeInfo's generation.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ai_scheduler.cache.assigned_pods import AssignedPodIndex
from ai_scheduler.cache.dra import DraState
from ai_scheduler.cache.gpus import GpuTable
from ai_scheduler.cache.host_ports import HostPortTable
from ai_scheduler.cache.records import PODS, NodeRecord, PodRecord
from ai_scheduler.cache.tenancy import Tenancy
from ai_scheduler.cache.topology import TopologyIndex
from ai_scheduler.cache.volumes import VolumeIndex
from ai_scheduler.cache.workloads import WorkloadSelectors

BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage", PODS)


@dataclass(slots=True)
class PodState:
    record: PodRecord
    node: str = ""  # where it counts ("" = nowhere)
    assumed: bool = False  # placed by us, not yet seen bound in the watch
    deadline: float | None = None  # assumed pods expire after their binding finished


@dataclass(slots=True)
class NodeState:
    name: str
    record: NodeRecord | None = None  # None: pods reference a node we have not seen (yet)
    row: int = -1
    pods: set[str] | None = None


@dataclass(slots=True)
class NodeChange:
    added: bool = False
    static_changed: bool = False  # labels, taints, unschedulable, readiness
    resources_changed: bool = False  # allocatable
    gpus_freed: bool = False  # managed GPUs became usable or gained room

    @property
    def any(self) -> bool:
        return self.added or self.static_changed or self.resources_changed or self.gpus_freed


@dataclass(slots=True)
class PodChange:
    freed: bool = False  # resources were released somewhere: pending pods may now fit
    confirmed: bool = False  # an assumption of ours was confirmed by the watch
    moved: bool = False  # bound somewhere other than where we assumed it
    placed: bool = False  # seen bound to a node: pods waiting for other pods (affinity, spread) may now fit


class SchedulerCache:
    """Nodes, pods and assumptions; the only writer of the resource columns."""

    def __init__(
        self,
        *,
        assume_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        initial_rows: int = 64,
    ) -> None:
        self.assume_timeout = assume_timeout
        self._clock = clock
        self.resource_index: dict[str, int] = {name: i for i, name in enumerate(BASE_RESOURCES)}
        self.resource_names: list[str] = list(BASE_RESOURCES)
        cols = len(BASE_RESOURCES)
        self.allocatable = np.zeros((initial_rows, cols), dtype=np.int64)
        self.requested = np.zeros((initial_rows, cols), dtype=np.int64)
        # Requests as scoring sees them: pods without cpu/memory requests count kube-scheduler's defaults.
        self.score_requested = np.zeros((initial_rows, cols), dtype=np.int64)
        # Room held for preemptors on the node they were nominated to, while their victims terminate.
        self.nominated = np.zeros((initial_rows, cols), dtype=np.int64)
        self.nominations: dict[str, tuple[int, dict[str, int]]] = {}
        self.valid = np.zeros(initial_rows, dtype=bool)
        self._valid_rows = 0  # np.count_nonzero(self.valid), kept as rows come and go (asked every cycle)
        # Bumped whenever a row's static attributes change; cached static filter results compare against it.
        self.static_version = 0
        self.row_static_version = np.zeros(initial_rows, dtype=np.int64)
        # Moves whenever a row's allocatable, requests or GPUs change (see the module).
        self.row_tick = 0
        self.row_version = np.zeros(initial_rows, dtype=np.int64)
        self.row_records: list[NodeRecord | None] = [None] * initial_rows
        self.row_names: list[str] = [""] * initial_rows
        self._free_rows: list[int] = list(range(initial_rows - 1, -1, -1))
        # One past the highest row ever given to a node: rows beyond it are empty (the table doubles when
        # full), so scans over the nodes stop here instead of at the end of the table.
        self.row_limit = 0
        self.nodes: dict[str, NodeState] = {}
        self.pods: dict[str, PodState] = {}
        self.assumed_count = 0
        self.gpus = GpuTable(initial_rows)
        self.host_ports = HostPortTable(initial_rows)  # host ports in use per node (NodePorts)
        # Pods grouped by labels and by affinity, and topology domains per node (InterPodAffinity, spread).
        self.assigned = AssignedPodIndex()
        self.topology = TopologyIndex(initial_rows)
        # The counted pods that are being deleted, grouped alike: PodTopologySpread leaves them out.
        self.terminating = AssignedPodIndex()
        # Services' and controllers' pod selectors, for PodTopologySpread's system defaults (from informers).
        self.workloads = WorkloadSelectors()
        # PersistentVolumes, claims and StorageClasses, for VolumeBinding (from informers).
        self.volumes = VolumeIndex()
        # ResourceClaims, templates, ResourceSlices and DeviceClasses, with our assumed allocations (DRA).
        self.dra = DraState()
        # Namespace labels, for affinity terms' namespaceSelector (kept by the namespace informer).
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.namespace_version = 0
        # Bumped whenever room is given back on a node (a placed pod leaving or shrinking, an assumption
        # forgotten, a nomination cleared): the event handlers' queueing hints know from it whether the room
        # freed since they last looked is all on the node of the event they handle.
        self.freed_version = 0
        # Bumped by every node added, changed (even its status alone) or removed.
        self.nodes_version = 0
        self.tenancy: Tenancy | None = None  # usage per user/group/queue, charged as pods start counting
        self._chosen_gpus: dict[str, tuple[int, ...]] = {}  # our device choice for pods not yet annotated

    # ------------------------------------------------------------------ columns
    @property
    def rows(self) -> int:
        return self.valid.shape[0]

    @property
    def node_count(self) -> int:
        return self._valid_rows

    def column(self, resource: str, create: bool = False) -> int:
        """Column of a resource; -1 if unknown and not created."""
        col = self.resource_index.get(resource)
        if col is not None:
            return col
        if not create:
            return -1
        col = len(self.resource_names)
        self.resource_index[resource] = col
        self.resource_names.append(resource)
        pad = np.zeros((self.rows, 1), dtype=np.int64)
        self.allocatable = np.hstack([self.allocatable, pad])
        self.requested = np.hstack([self.requested, pad])
        self.score_requested = np.hstack([self.score_requested, pad])
        self.nominated = np.hstack([self.nominated, pad])
        return col

    def _grow(self) -> None:
        old = self.rows
        new = old * 2
        for attr in ("allocatable", "requested", "score_requested", "nominated"):
            arr = getattr(self, attr)
            grown = np.zeros((new, arr.shape[1]), dtype=np.int64)
            grown[:old] = arr
            setattr(self, attr, grown)
        self.valid = np.concatenate([self.valid, np.zeros(old, dtype=bool)])
        self.row_static_version = np.concatenate([self.row_static_version, np.zeros(old, dtype=np.int64)])
        self.row_version = np.concatenate([self.row_version, np.zeros(old, dtype=np.int64)])
        self.row_records.extend([None] * old)
        self.row_names.extend([""] * old)
        self._free_rows.extend(range(new - 1, old - 1, -1))
        self.gpus.grow(new)
        self.host_ports.grow(new)
        self.topology.grow(new)

    def _touch_static(self, row: int) -> None:
        self.static_version += 1
        self.row_static_version[row] = self.static_version

    def _touch(self, row: int) -> None:
        self.row_tick += 1
        self.row_version[row] = self.row_tick

    # ------------------------------------------------------------------ nodes
    def set_node(self, record: NodeRecord) -> NodeChange:
        """Add or update a node from the watch."""
        self.nodes_version += 1
        change = NodeChange()
        state = self.nodes.get(record.name)
        if state is None:
            state = self.nodes[record.name] = NodeState(record.name, pods=set())
        old = state.record
        if state.row < 0:
            if not self._free_rows:
                self._grow()
            state.row = self._free_rows.pop()
            self.row_limit = max(self.row_limit, state.row + 1)
            self.valid[state.row] = True
            self._valid_rows += 1
            self.row_names[state.row] = record.name
            change.added = True
            self._recount_row(state)
        row = state.row
        self._touch(row)
        state.record = record
        self.row_records[row] = record
        if old is None or old.static_identity() != record.static_identity():
            change.static_changed = True
            self._touch_static(row)
            self.topology.set_row(row, record.labels)
        if old is None or old.allocatable != record.allocatable:
            change.resources_changed = True
            self.allocatable[row] = 0
            for name, value in record.allocatable.items():
                col = self.column(name, create=True)  # may widen the arrays: index after
                self.allocatable[row, col] = value
        was_managed = bool(self.gpus.managed[row])
        change.gpus_freed = self.gpus.set_node(row, record)
        if self.gpus.managed[row] and not was_managed:
            for uid in state.pods or ():  # pods placed before the node was managed: account their devices
                self._attach_gpus(uid, row, self.pods[uid].record)
        return change

    def remove_node(self, name: str) -> bool:
        state = self.nodes.get(name)
        if state is None or state.row < 0:
            return False
        self.nodes_version += 1
        row = state.row
        self._touch(row)
        self.valid[row] = False
        self._valid_rows -= 1
        self.allocatable[row] = 0
        self.requested[row] = 0
        self.score_requested[row] = 0
        self.host_ports.clear_row(row)
        self.topology.clear_row(row)
        self.row_records[row] = None
        self.row_names[row] = ""
        self.gpus.remove_node(row)
        for uid in state.pods or ():
            self.gpus.detach(uid)
            self.assigned.add(row, self.pods[uid].record, -1)
            if self.pods[uid].record.deleting:
                self.terminating.add(row, self.pods[uid].record, -1)
        self._touch_static(row)
        self._free_rows.append(row)
        state.row = -1
        state.record = None
        if not state.pods:
            del self.nodes[name]
        return True

    def domains(self, key: str) -> tuple[np.ndarray, int]:
        """Topology domain number per node row for a label key (-1: no such label), and how many."""
        return self.topology.domains(key, self._row_labels)

    def _row_labels(self) -> list[dict[str, str] | None]:
        return [record.labels if record is not None else None for record in self.row_records]

    def set_namespace(self, name: str, labels: dict[str, str] | None) -> None:
        """A namespace was added or relabelled (labels), or deleted (None)."""
        if labels is None:
            if self.namespace_labels.pop(name, None) is not None:
                self.namespace_version += 1
        elif self.namespace_labels.get(name) != labels:
            self.namespace_labels[name] = labels
            self.namespace_version += 1

    def labels_of_namespace(self, namespace: str) -> dict[str, str] | None:
        """A namespace's labels (None while it is unknown), for affinity terms' namespaceSelector."""
        return self.namespace_labels.get(namespace)

    def room_version(self) -> tuple[int, ...]:
        """Changes whenever a pod that did not fit anywhere might fit now for reasons other than its own
        pod affinity, spread, ports, volumes or claims: room given back (`freed_version`), a node added,
        changed or removed, a namespace's labels, any DRA object. Placing pods takes room and leaves it
        as it is. The scheduling cycle's equivalence of identical pods (schedule_one.py) holds a failure
        only while this stays the same."""
        return (self.freed_version, self.nodes_version, self.namespace_version, self.dra.version)

    def node_record(self, name: str) -> NodeRecord | None:
        state = self.nodes.get(name)
        return state.record if state else None

    def row_of(self, name: str) -> int:
        state = self.nodes.get(name)
        return state.row if state else -1

    def _recount_row(self, state: NodeState) -> None:
        """Usage of pods that arrived before their node did."""
        row = state.row
        self._touch(row)
        self.requested[row] = 0
        self.score_requested[row] = 0
        self.host_ports.clear_row(row)
        for uid in state.pods or ():
            self._apply(row, self.pods[uid].record, 1)
            self._attach_gpus(uid, row, self.pods[uid].record)

    # ------------------------------------------------------------------ pods
    def _apply(self, row: int, pod: PodRecord, sign: int) -> None:
        self._touch(row)  # every change to a row's requests; the GPUs' attach or detach comes beside it
        for name in pod.requests:
            if name not in self.resource_index:
                self.column(name, create=True)  # widens the arrays: before taking references
        index = self.resource_index
        requested = self.requested
        for name, value in pod.requests.items():
            requested[row, index[name]] += sign * value
        requested[row, 3] += sign  # the pod slot itself ("pods" is column 3)
        scored = self.score_requested
        for name, value in pod.score_requests().items():
            scored[row, index[name]] += sign * value
        if pod.host_ports:
            self.host_ports.add(row, pod.host_ports, sign)
        self.assigned.add(row, pod, sign)
        if pod.deleting:
            self.terminating.add(row, pod, sign)

    def _attach(self, uid: str, node: str, pod: PodRecord) -> None:
        if self.tenancy is not None:
            self.tenancy.charge(pod)
        if pod.claims or pod.disks:
            self.volumes.count_users(pod, node, 1)
        state = self.nodes.get(node)
        if state is None:
            state = self.nodes[node] = NodeState(node, pods=set())
        assert state.pods is not None
        state.pods.add(uid)
        if state.row >= 0:
            self._apply(state.row, pod, 1)
            self._attach_gpus(uid, state.row, pod)

    def _attach_gpus(self, uid: str, row: int, pod: PodRecord) -> None:
        """Managed GPUs: our own choice for a pod we placed (the binder writes it into the pod's gpu-ids
        annotation, over anything the pod arrived with); the annotation for pods placed before we started."""
        chosen = self._chosen_gpus.get(uid)
        self.gpus.attach(uid, row, pod, chosen)

    def _detach(self, uid: str, node: str, pod: PodRecord) -> None:
        if self.tenancy is not None:
            self.tenancy.release(uid)
        if pod.claims or pod.disks:
            self.volumes.count_users(pod, node, -1)
        state = self.nodes.get(node)
        if state is None or state.pods is None:
            return
        state.pods.discard(uid)
        self.gpus.detach(uid)
        if state.row >= 0:
            self._apply(state.row, pod, -1)
        elif not state.pods:
            del self.nodes[node]

    def set_pod(self, record: PodRecord) -> PodChange:
        """Apply a pod from the watch (added or modified)."""
        change = PodChange()
        if self.nominations and not record.pending:
            self.clear_nomination(record.uid)
        state = self.pods.get(record.uid)
        old_node = state.node if state else ""
        old_record = state.record if state else None
        assumed_state = state if state is not None and state.assumed else None
        if record.node_name:
            new_node = "" if record.terminal else record.node_name
            if assumed_state is not None:
                change.confirmed = record.node_name == old_node
                change.moved = not change.confirmed
                self._unassume(assumed_state)
        elif assumed_state is not None and not record.deleting and not record.terminal:
            new_node = old_node  # binding still in flight: keep the reservation
        else:
            new_node = ""
            if assumed_state is not None:
                self._unassume(assumed_state)
        if state is None:
            state = self.pods[record.uid] = PodState(record)
        if old_record is not None and old_node and (old_node != new_node or old_record is not record):
            self._detach(record.uid, old_node, old_record)
            change.freed = old_node != new_node
            if change.freed or old_record.requests != record.requests:
                self.freed_version += 1
        state.record = record
        state.node = new_node
        if new_node and (old_node != new_node or old_record is not record):
            self._attach(record.uid, new_node, record)
        change.placed = bool(new_node) and (old_node != new_node or change.confirmed)
        if not new_node and not record.pending and not state.assumed:
            # Finished or deleting-unbound pods need no tracking beyond the watch's own record.
            self.pods.pop(record.uid, None)
            self._chosen_gpus.pop(record.uid, None)
        return change

    def remove_pod(self, uid: str) -> PodChange:
        change = PodChange()
        state = self.pods.pop(uid, None)
        self._chosen_gpus.pop(uid, None)
        self.clear_nomination(uid)
        if state is None:
            return change
        if state.assumed:
            self._unassume(state)
        if state.node:
            self._detach(uid, state.node, state.record)
            change.freed = True
            self.freed_version += 1
        return change

    def nominate(self, pod: PodRecord, node: str) -> None:
        """Hold room on `node` for a preemptor until it is placed (or gives up)."""
        self.clear_nomination(pod.uid)
        row = self.row_of(node)
        if row < 0:
            return
        amounts = {**pod.requests, PODS: 1}
        for name in amounts:
            self.column(name, create=True)
        for name, value in amounts.items():
            self.nominated[row, self.resource_index[name]] += value
        self.nominations[pod.uid] = (row, amounts)

    def clear_nomination(self, uid: str) -> None:
        held = self.nominations.pop(uid, None)
        if held is None:
            return
        row, amounts = held
        self.freed_version += 1
        for name, value in amounts.items():
            self.nominated[row, self.resource_index[name]] -= value

    def pod_state(self, uid: str) -> PodState | None:
        return self.pods.get(uid)

    def is_assumed(self, uid: str) -> bool:
        state = self.pods.get(uid)
        return bool(state and state.assumed)

    # ------------------------------------------------------------------ assumptions
    def assume(self, pod: PodRecord, node: str, gpu_ids: tuple[int, ...] = ()) -> None:
        """Reserve the pod's resources (and the managed GPUs chosen for it) on `node` before binding."""
        state = self.pods.get(pod.uid)
        if state is not None and (state.node or state.assumed):
            raise ValueError(f"pod {pod.key} is already on {state.node or 'an assumed node'}")
        if state is None:
            state = self.pods[pod.uid] = PodState(pod)
        state.record = pod
        state.assumed = True
        state.deadline = None
        state.node = node
        self.assumed_count += 1
        self.clear_nomination(pod.uid)
        if gpu_ids:
            self._chosen_gpus[pod.uid] = gpu_ids
        self._attach(pod.uid, node, pod)

    def binding_finished(self, uid: str) -> None:
        """The binding call returned: the watch should confirm soon, else the assumption expires."""
        state = self.pods.get(uid)
        if state is not None and state.assumed:
            state.deadline = self._clock() + self.assume_timeout

    def set_assume_timeout(self, seconds: float) -> None:
        """A new assume timeout (a config reload), for the assumptions already counting down as well:
        each expires `seconds` after its binding finished."""
        shift = seconds - self.assume_timeout
        self.assume_timeout = seconds
        if shift and self.assumed_count:
            for state in self.pods.values():
                if state.assumed and state.deadline is not None:
                    state.deadline += shift

    @contextlib.contextmanager
    def without(self, pods: Iterable[PodRecord]) -> Iterator[None]:
        """For preemption's what-if: the placed `pods` off their nodes (resources, pod slots, host ports,
        labels for affinity and spread, claims, managed GPUs, the DRA devices of the claims reserved for
        them alone) while the block runs, then back as they were, on the same devices. Their quota use
        stays."""
        pods = list(pods)
        with self.dra.without_pods({p.uid for p in pods}), self._without(pods):
            yield

    @contextlib.contextmanager
    def _without(self, pods: Iterable[PodRecord]) -> Iterator[None]:
        off: list[tuple[int, str, PodRecord, tuple[int, ...] | None]] = []
        try:
            for pod in pods:
                state = self.pods.get(pod.uid)
                node = self.nodes.get(state.node) if state is not None and state.node else None
                if state is None or node is None or node.row < 0:
                    continue
                assignment = self.gpus.assignments.get(pod.uid)
                off.append((node.row, state.node, state.record, assignment.indices if assignment else None))
                if state.record.claims or state.record.disks:
                    self.volumes.count_users(state.record, state.node, -1)
                self._apply(node.row, state.record, -1)
                if assignment is not None:
                    self.gpus.detach(pod.uid)
            yield
        finally:
            for row, node_name, record, devices in reversed(off):
                self._apply(row, record, 1)
                if devices is not None:
                    self.gpus.attach(record.uid, row, record, devices)
                if record.claims or record.disks:
                    self.volumes.count_users(record, node_name, 1)

    def forget(self, uid: str) -> bool:
        """Drop an assumption whose binding failed; the pod is pending again."""
        state = self.pods.get(uid)
        if state is None or not state.assumed:
            return False
        self._unassume(state)
        if state.node:
            self._detach(uid, state.node, state.record)
            self.freed_version += 1
            state.node = ""
        self._chosen_gpus.pop(uid, None)
        return True

    def _unassume(self, state: PodState) -> None:
        if state.assumed:
            state.assumed = False
            state.deadline = None
            self.assumed_count -= 1

    def expire_assumed(self) -> list[PodRecord]:
        """Forget assumptions whose binding finished long ago without the watch confirming them."""
        if not self.assumed_count:
            return []
        now = self._clock()
        expired = [
            s.record for s in self.pods.values() if s.assumed and s.deadline is not None and s.deadline <= now
        ]
        for pod in expired:
            self.forget(pod.uid)
        return expired

    # ------------------------------------------------------------------ relist
    def replace_nodes(self, records: Iterable[NodeRecord]) -> tuple[list[NodeRecord], list[str]]:
        """Reconcile with a fresh list: returns (added or changed, removed names)."""
        seen: set[str] = set()
        changed: list[NodeRecord] = []
        for record in records:
            seen.add(record.name)
            current = self.node_record(record.name)
            if current is None or current.resource_version != record.resource_version:
                self.set_node(record)
                changed.append(record)
        removed = [name for name, st in self.nodes.items() if st.record is not None and name not in seen]
        for name in removed:
            self.remove_node(name)
        return changed, removed

    def replace_pods(self, records: Iterable[PodRecord]) -> tuple[list[PodRecord], list[PodRecord]]:
        """Reconcile with a fresh list: returns (added or changed, removed records)."""
        seen: set[str] = set()
        changed: list[PodRecord] = []
        for record in records:
            seen.add(record.uid)
            state = self.pods.get(record.uid)
            if state is None or state.record.resource_version != record.resource_version:
                self.set_pod(record)
                changed.append(record)
        removed = [s.record for uid, s in self.pods.items() if uid not in seen]
        for record in removed:
            self.remove_pod(record.uid)
        return changed, removed

    # ------------------------------------------------------------------ views
    def gpu_problem(self, name: str) -> str:
        """Why a managed node's GPU report cannot be used ("" when it can, or the node is not managed)."""
        row = self.row_of(name)
        state = self.gpus.nodes.get(row) if row >= 0 else None
        return state.problem if state is not None else ""

    def node_usage(self, name: str) -> dict[str, int]:
        """Requested amounts on a node, by resource name (for logs, tests and the demo)."""
        row = self.row_of(name)
        if row < 0:
            return {}
        return {
            res: int(self.requested[row, col])
            for res, col in self.resource_index.items()
            if self.requested[row, col]
        }

    def pods_on(self, name: str) -> set[str]:
        state = self.nodes.get(name)
        return set(state.pods or ()) if state else set()

    def check_consistency(self) -> list[str]:
        """Recompute every row from the pod records; differences mean a bookkeeping bug (tests use this)."""
        problems = []
        valid_rows = int(np.count_nonzero(self.valid))
        if self._valid_rows != valid_rows:
            problems.append(f"node count {self._valid_rows} but {valid_rows} valid rows")
        expected = np.zeros_like(self.requested)
        expected_ports: dict[int, Counter[tuple[str, str, int]]] = defaultdict(Counter)
        expected_groups: Counter[tuple[str, tuple[tuple[str, str], ...], int]] = Counter()
        for uid, state in self.pods.items():
            if not state.node:
                continue
            node = self.nodes.get(state.node)
            if node is None or uid not in (node.pods or ()):
                problems.append(
                    f"pod {state.record.key} counts on {state.node} but the node does not list it"
                )
                continue
            if node.row >= 0:
                for res, value in state.record.requests.items():
                    expected[node.row, self.resource_index[res]] += value
                expected[node.row, 3] += 1
                expected_ports[node.row].update(state.record.host_ports)
                labels = tuple(sorted(state.record.labels.items()))
                expected_groups[(state.record.namespace, labels, node.row)] += 1
        for name, node in self.nodes.items():
            for uid in node.pods or ():
                if self.pods.get(uid) is None or self.pods[uid].node != name:
                    problems.append(f"node {name} lists pod {uid} that does not count there")
        for row in range(self.row_limit):
            kept, wanted = self.host_ports.counts_on(row), dict(expected_ports.get(row, {}))
            if kept != wanted:
                problems.append(f"row {row} ({self.row_names[row]}) ports: kept {kept}, expected {wanted}")
        problems.extend(self.host_ports.check())
        kept_groups = self.assigned.label_counts()
        if kept_groups != expected_groups:
            wrong = sorted(set(kept_groups.items()) ^ set(expected_groups.items()))[:5]
            problems.append(f"label groups differ from the pods counted on nodes: {wrong}")
        diff = np.argwhere(expected != self.requested)
        problems.extend(
            f"row {r} ({self.row_names[r]}) {self.resource_names[c]}: "
            f"kept {self.requested[r, c]}, expected {expected[r, c]}"
            for r, c in diff
        )
        return problems
