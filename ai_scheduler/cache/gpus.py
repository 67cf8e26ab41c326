"""GPUs that the scheduler assigns itself, on nodes labelled `ai-scheduler.io/gpu-managed: "true"`.

The node agent reports each device in the node annotation `ai-scheduler.io/gpus`;
pods ask with `ai-scheduler.io/gpu-count` (whole devices),
`ai-scheduler.io/gpu-memory` (a share of one device, in bytes) or
`ai-scheduler.io/gpu-fraction` (a share of one device, as a part of it), and the
scheduler writes the devices it chose into `ai-scheduler.io/gpu-ids` /
`gpu-uuids` before binding.

A fraction works as KAI Scheduler's `gpu-fraction` does, but for `1` (below):
- its value is a plain decimal number (`0.5`, `.25`, `5e-1`; what both Go's
  ParseFloat and a Kubernetes quantity without suffix read: no `500m`, spaces,
  `inf` or `NaN`), greater than 0 and at most 1. KAI refuses `1` (a whole GPU is
  asked for as such there); here `1` is a share of all of one device's memory,
  which, like `gpu-memory` of a whole device, fits only a device no one uses;
- it is exclusive with `gpu-count` and `gpu-memory` (one of the three at most);
- on a device of M MiB it holds the fraction of M as a memory share, so that it
  shares devices with `gpu-memory` pods, and two pods of `0.5` share one device
  whatever its size. The fraction is kept in units of 2**-20 of a device
  (`FRACTION_UNITS`), rounded down, and at least one unit: a unit of a device of
  M MiB is exactly M bytes, so the share is the fraction of M MiB less than one
  byte per MiB (never more, so that fractions that add up to at most 1 always fit
  one free device together, as KAI's do);
- the device is chosen as for `gpu-memory`: best fit on memory, each device by
  its own size; a pod found bound at start is charged on the device its
  `gpu-ids` name (the largest device known if the report does not name it);
- quotas count it as resource `ai-scheduler.io/gpu-fraction` in thousandths of a
  GPU (rounded down, at least 1m), beside `gpu-count` and `gpu-memory` (see
  cache/tenancy.py).

Per node row the table keeps, per device, the memory still free for shares
and whether the device is wholly free, in numpy arrays parallel to the cache's
node rows, so a filter over all nodes is one array expression. A report that is
malformed, or older than the staleness bound, makes the node's managed GPUs
unavailable, with that reason; it never makes them wrong.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MIN_EMIN, ROUND_FLOOR, Context, Decimal
from typing import Any

import numpy as np
import orjson

from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.log import parse_time
from ai_scheduler.messages import echo
from ai_scheduler.quantity import QuantityError, parse_go_int, to_units

MANAGED_LABEL = "ai-scheduler.io/gpu-managed"
GPUS_ANNOTATION = "ai-scheduler.io/gpus"
UPDATED_ANNOTATION = "ai-scheduler.io/gpus-updated"
GPU_COUNT_ANNOTATION = "ai-scheduler.io/gpu-count"
GPU_MEMORY_ANNOTATION = "ai-scheduler.io/gpu-memory"
GPU_FRACTION_ANNOTATION = "ai-scheduler.io/gpu-fraction"
GPU_IDS_ANNOTATION = "ai-scheduler.io/gpu-ids"
GPU_UUIDS_ANNOTATION = "ai-scheduler.io/gpu-uuids"

MIB = 2**20
# Bounds of a report: NVML numbers a node's devices from 0, and no GPU has 16 TiB. Past them a report is
# malformed: a huge index would widen the device columns of every node, a negative one alias the last.
MAX_DEVICES = 64
MAX_DEVICE_MIB = 2**24
# Closeness of two devices, lower is closer: NVLink, then the PCIe relation nvidia-smi reports.
PCIE_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
NVLINK_RANK = 0
UNKNOWN_RANK = 6
# A fraction of a device in these units: one unit of a device of M MiB is exactly M bytes.
FRACTION_UNITS = 2**20
# A decimal number as Go's ParseFloat and a suffix-less Kubernetes quantity both read it (an exponent of at
# most 18 digits, as a quantity's int64 exponent).
_FRACTION = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,18})?")
_FRACTION_MATH = Context(prec=60, rounding=ROUND_FLOOR, Emax=MAX_EMAX, Emin=MIN_EMIN)


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """What a pod asks of managed GPUs: `count` whole devices, `memory` bytes of one device, or `fraction`
    of one device (in FRACTION_UNITS)."""

    count: int = 0
    memory: int = 0
    fraction: int = 0

    def fraction_bytes(self, total: int) -> int:
        """Bytes the fraction holds on a device of `total` bytes (at least one)."""
        return max(total // MIB * self.fraction, 1)


def share_need(request: GpuRequest, total: np.ndarray) -> np.ndarray:
    """Bytes a share takes on devices of `total` bytes each: its memory, or its fraction of each device."""
    if not request.fraction:
        return np.full_like(total, request.memory)
    need: np.ndarray = np.maximum(total // MIB * request.fraction, 1)
    return need


def gpu_annotations(ids: tuple[int, ...], uuids: tuple[str, ...]) -> dict[str, str]:
    """The annotations PreBind writes for managed GPUs (what the pod maps into NVIDIA_VISIBLE_DEVICES)."""
    if not ids:
        return {}
    return {GPU_IDS_ANNOTATION: ",".join(str(i) for i in ids), GPU_UUIDS_ANNOTATION: ",".join(uuids)}


def parse_fraction(text: str) -> int:
    """A gpu-fraction value in FRACTION_UNITS (rounded down, at least 1); 0 unless a number in (0, 1]."""
    if not _FRACTION.fullmatch(text):
        return 0
    try:
        value = Decimal(text)
        if not 0 < value <= 1:
            return 0
        units = _FRACTION_MATH.multiply(value, FRACTION_UNITS).to_integral_value(rounding=ROUND_FLOOR)
    except ArithmeticError:  # an exponent past what Decimal holds: not a number we can use
        return 0
    return max(int(units), 1)


NO_GPU_REQUEST: tuple[GpuRequest | None, str] = (None, "")


def gpu_request(pod: PodRecord) -> tuple[GpuRequest | None, str]:
    """The pod's managed-GPU request (None if it has none) and an error for a malformed one: read from its
    annotations once per record (a changed pod is a new record), into its PodInfo, however many plugins
    ask."""
    annotations = pod.annotations
    if (GPU_COUNT_ANNOTATION not in annotations and GPU_MEMORY_ANNOTATION not in annotations
            and GPU_FRACTION_ANNOTATION not in annotations):
        return NO_GPU_REQUEST  # most pods: nothing to remember
    info = pod.info
    request = info.gpu
    if request is None:
        request = info.gpu = _read_gpu_request(pod)
    return request


def _read_gpu_request(pod: PodRecord) -> tuple[GpuRequest | None, str]:
    count_text = pod.annotations.get(GPU_COUNT_ANNOTATION)
    memory_text = pod.annotations.get(GPU_MEMORY_ANNOTATION)
    fraction_text = pod.annotations.get(GPU_FRACTION_ANNOTATION)
    given = [
        key
        for key, text in (
            (GPU_COUNT_ANNOTATION, count_text),
            (GPU_MEMORY_ANNOTATION, memory_text),
            (GPU_FRACTION_ANNOTATION, fraction_text),
        )
        if text is not None
    ]
    if not given:
        return None, ""
    if len(given) > 1:
        return None, f"set only one of {', '.join(given[:-1])} and {given[-1]}"
    if fraction_text is not None:
        fraction = parse_fraction(fraction_text)
        if not fraction:
            bounds = "above 0 and at most 1, such as 0.5"
            return None, f"{GPU_FRACTION_ANNOTATION} must be a number {bounds}, got {echo(fraction_text)}"
        return GpuRequest(fraction=fraction), ""
    if count_text is not None:
        count = parse_go_int(count_text) or 0  # Go's Atoi: not " 2", "1_0" or other scripts' digits
        if count < 1:
            return None, f"{GPU_COUNT_ANNOTATION} must be a positive integer, got {echo(count_text)}"
        return GpuRequest(count=count), ""
    try:
        memory = to_units("memory", memory_text or "")
    except QuantityError:
        memory = 0
    if memory <= 0:
        got = echo(memory_text)
        return None, f"{GPU_MEMORY_ANNOTATION} must be a positive quantity such as 10Gi, got {got}"
    return GpuRequest(memory=memory), ""


@dataclass(slots=True)
class Device:
    index: int
    uuid: str
    model: str
    total: int  # bytes
    used: int  # bytes in use as the agent last saw it
    nvlink: frozenset[int]
    pcie: dict[int, str]
    error: str = ""

    def rank_to(self, other: int) -> int:
        if other in self.nvlink:
            return NVLINK_RANK
        return PCIE_RANK.get(self.pcie.get(other, ""), UNKNOWN_RANK)


def nvlink_islands(devices: dict[int, Device]) -> list[list[int]]:
    """Connected components of the NVLink graph (a lone device is its own island)."""
    seen: set[int] = set()
    islands = []
    for start in sorted(devices):
        if start in seen:
            continue
        island, stack = [], [start]
        seen.add(start)
        while stack:
            i = stack.pop()
            island.append(i)
            for peer in devices[i].nvlink:
                if peer in devices and peer not in seen:
                    seen.add(peer)
                    stack.append(peer)
        islands.append(sorted(island))
    return islands


def _whole(value: object, name: str, high: int) -> int:
    """A JSON integer from 0 to `high`, as the agent writes them (not a string, a float or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ValueError(f"{name} must be an integer from 0 to {high}, got {echo(value)}")
    return value


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {echo(value)}")
    return value


def _device(item: object) -> Device:
    if not isinstance(item, dict):
        raise ValueError(f"a device must be an object, got {echo(item)}")
    index = _whole(item.get("index"), "index", MAX_DEVICES - 1)
    if item.get("error"):
        return Device(index, "", "", 0, 0, frozenset(), {}, str(item["error"]))
    peers = item.get("nvlinkPeers") or []
    pcie = item.get("pcie") or {}
    if not isinstance(peers, list) or not isinstance(pcie, dict):
        raise ValueError(f"device {index}: nvlinkPeers must be a list and pcie an object")
    relations = {}
    for peer, relation in pcie.items():
        other = parse_go_int(peer)
        if other is None or not 0 <= other < MAX_DEVICES:
            raise ValueError(f"device {index}: pcie names device {echo(peer)}")
        relations[other] = _text(relation, f"device {index}: pcie relation")
    return Device(
        index=index,
        uuid=_text(item.get("uuid"), f"device {index}: uuid"),
        model=_text(item.get("model", ""), f"device {index}: model"),
        total=_whole(item.get("memoryTotalMiB"), f"device {index}: memoryTotalMiB", MAX_DEVICE_MIB) * MIB,
        used=_whole(item.get("memoryUsedMiB", 0), f"device {index}: memoryUsedMiB", MAX_DEVICE_MIB) * MIB,
        nvlink=frozenset(_whole(p, f"device {index}: nvlinkPeers", MAX_DEVICES - 1) for p in peers),
        pcie=relations,
    )


def parse_report(text: str | None) -> tuple[list[Device], str]:
    """Devices from the agent's annotation, or an error naming the annotation and what is wrong with it."""
    if text is None:
        return [], "no GPU report"
    malformed = f"malformed GPU report in {GPUS_ANNOTATION}"
    try:
        items = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return [], f"{malformed}: {exc}"
    if not isinstance(items, list):
        return [], f"{malformed}: not a list"
    try:
        devices = [_device(item) for item in items]
    except ValueError as exc:
        return [], f"{malformed}: {exc}"
    if len({d.index for d in devices}) != len(devices):
        return [], f"{malformed}: duplicate device index"
    devices.sort(key=lambda d: d.index)
    return devices, ""


@dataclass(slots=True)
class Assignment:
    row: int
    indices: tuple[int, ...]
    memory: int  # bytes per device for a share (memory or fraction); 0 for whole devices


@dataclass(slots=True)
class NodeGpus:
    devices: list[Device] = field(default_factory=list)
    problem: str = ""
    updated: float | None = None
    shares: dict[int, int] = field(default_factory=dict)  # device index -> bytes held by shares
    whole: dict[int, set[str]] = field(default_factory=dict)  # device index -> pods holding it whole
    holders: set[str] = field(default_factory=set)


class GpuTable:
    """Managed GPUs per node row, with our assignments; the cache keeps it in step with its rows."""

    def __init__(self, rows: int, max_devices: int = 8) -> None:
        self.staleness = 120.0  # seconds a report stays trustworthy (config gpu)
        self.managed = np.zeros(rows, dtype=bool)
        self.healthy = np.zeros(rows, dtype=bool)  # report parsed and all fine
        self.missing = np.zeros(rows, dtype=bool)  # managed, but no report at all
        self.updated = np.zeros(rows, dtype=np.float64)
        self.share_free = np.full((rows, max_devices), -1, dtype=np.int64)  # -1: not usable for a share
        self.whole_free = np.zeros((rows, max_devices), dtype=bool)
        self.total = np.zeros((rows, max_devices), dtype=np.int64)
        # Each device's NVLink island, named by its lowest device index (-1: no device). A node that
        # reports no NVLink at all is one island: nothing is known that would split it.
        self.island = np.full((rows, max_devices), -1, dtype=np.int64)
        self.nodes: dict[int, NodeGpus] = {}
        self.assignments: dict[str, Assignment] = {}
        self.largest_device = 0

    @property
    def rows(self) -> int:
        return self.managed.shape[0]

    def grow(self, rows: int) -> None:
        extra = rows - self.rows
        if extra <= 0:
            return
        self.managed = np.concatenate([self.managed, np.zeros(extra, dtype=bool)])
        self.healthy = np.concatenate([self.healthy, np.zeros(extra, dtype=bool)])
        self.missing = np.concatenate([self.missing, np.zeros(extra, dtype=bool)])
        self.updated = np.concatenate([self.updated, np.zeros(extra)])
        width = self.share_free.shape[1]
        self.share_free = np.vstack([self.share_free, np.full((extra, width), -1, dtype=np.int64)])
        self.whole_free = np.vstack([self.whole_free, np.zeros((extra, width), dtype=bool)])
        self.total = np.vstack([self.total, np.zeros((extra, width), dtype=np.int64)])
        self.island = np.vstack([self.island, np.full((extra, width), -1, dtype=np.int64)])

    def _widen(self, devices: int) -> None:
        width = self.share_free.shape[1]
        if devices <= width:
            return
        extra = devices - width
        self.share_free = np.hstack([self.share_free, np.full((self.rows, extra), -1, dtype=np.int64)])
        self.whole_free = np.hstack([self.whole_free, np.zeros((self.rows, extra), dtype=bool)])
        self.total = np.hstack([self.total, np.zeros((self.rows, extra), dtype=np.int64)])
        self.island = np.hstack([self.island, np.full((self.rows, extra), -1, dtype=np.int64)])

    # ------------------------------------------------------------------ nodes
    def set_node(self, row: int, record: NodeRecord) -> bool:
        """Read the node's report; True when its managed GPUs gained room or became usable."""
        managed = record.labels.get(MANAGED_LABEL) == "true"
        was_usable = bool(self.healthy[row]) and time.time() - self.updated[row] <= self.staleness
        room_before = (int(np.clip(self.share_free[row], 0, None).sum()), int(self.whole_free[row].sum()))
        self.managed[row] = managed
        if not managed:
            self.nodes.pop(row, None)
            self.healthy[row] = False
            self._clear_row(row)
            self.island[row] = -1
            return False
        state = self.nodes.setdefault(row, NodeGpus())
        report = record.annotations.get(GPUS_ANNOTATION)
        self.missing[row] = report is None
        state.devices, state.problem = parse_report(report)
        updated = record.annotations.get(UPDATED_ANNOTATION)
        state.updated = parse_time(updated)
        if not state.problem and state.updated is None:
            state.problem = f"GPU report has no valid update time: {UPDATED_ANNOTATION} is {echo(updated)}"
        elif not state.problem and state.updated is not None and state.updated > time.time() + self.staleness:
            # A report from the future would never go stale: the node's GPUs would stay trusted for good.
            state.problem = f"GPU report has no valid update time: {UPDATED_ANNOTATION} is in the future"
        self.updated[row] = state.updated or 0.0
        self.healthy[row] = not state.problem
        if state.devices:
            self._widen(max(d.index for d in state.devices) + 1)
            self.largest_device = max(self.largest_device, *(d.total for d in state.devices))
        self._set_islands(row, state.devices)
        self._recompute(row)
        room_after = (int(np.clip(self.share_free[row], 0, None).sum()), int(self.whole_free[row].sum()))
        usable = bool(self.healthy[row]) and time.time() - self.updated[row] <= self.staleness
        return usable and (not was_usable or room_after[0] > room_before[0] or room_after[1] > room_before[1])

    def remove_node(self, row: int) -> None:
        self.managed[row] = False
        self.healthy[row] = False
        self.missing[row] = False
        self.nodes.pop(row, None)
        self._clear_row(row)
        self.island[row] = -1

    def _set_islands(self, row: int, devices: list[Device]) -> None:
        self.island[row] = -1
        usable = {d.index: d for d in devices if not d.error}
        if not usable:
            return
        linked = any(d.nvlink for d in usable.values())
        for island in nvlink_islands(usable) if linked else [sorted(usable)]:
            self.island[row, island] = island[0]

    def _clear_row(self, row: int) -> None:
        self.share_free[row] = -1
        self.whole_free[row] = False
        self.total[row] = 0

    def _recompute(self, row: int, indices: tuple[int, ...] | None = None) -> None:
        """The row's free arrays from its report and holders: all of it, or only the devices `indices`
        (those a pod took or gave back; the others are unchanged)."""
        if indices is None:
            self._clear_row(row)
        state = self.nodes.get(row)
        if state is None:
            return
        for device in state.devices:
            if device.error or (indices is not None and device.index not in indices):
                continue
            i = device.index
            self.total[row, i] = device.total
            held_whole = bool(state.whole.get(i))
            shared = state.shares.get(i, 0)
            self.whole_free[row, i] = not held_whole and shared == 0
            # Memory another process holds counts too, when it exceeds what our shares account for.
            self.share_free[row, i] = -1 if held_whole else device.total - max(shared, device.used)

    # ------------------------------------------------------------------ pods
    def attach(self, uid: str, row: int, pod: PodRecord, chosen: tuple[int, ...] | None = None) -> None:
        """Account a pod on a managed node: our own device choice, or what its gpu-ids annotation says."""
        if row < 0 or not self.managed[row]:
            return
        request, error = gpu_request(pod)
        if request is None or error:
            return
        indices = chosen or self._from_annotation(pod)
        if indices is None:
            return
        assignment = Assignment(row, indices, self._held(row, request, indices))
        state = self.nodes.setdefault(row, NodeGpus())
        for i in assignment.indices:
            if assignment.memory:
                state.shares[i] = state.shares.get(i, 0) + assignment.memory
            else:
                state.whole.setdefault(i, set()).add(uid)
        state.holders.add(uid)
        self.assignments[uid] = assignment
        self._recompute(row, assignment.indices)

    def detach(self, uid: str) -> None:
        assignment = self.assignments.pop(uid, None)
        if assignment is None:
            return
        state = self.nodes.get(assignment.row)
        if state is None:
            return
        for i in assignment.indices:
            if assignment.memory:
                state.shares[i] = state.shares.get(i, 0) - assignment.memory
                if state.shares[i] <= 0:
                    state.shares.pop(i, None)
            else:
                holders = state.whole.get(i)
                if holders is not None:
                    holders.discard(uid)
                    if not holders:
                        state.whole.pop(i, None)
        state.holders.discard(uid)
        self._recompute(assignment.row, assignment.indices)

    @staticmethod
    def _from_annotation(pod: PodRecord) -> tuple[int, ...] | None:
        text = pod.annotations.get(GPU_IDS_ANNOTATION)
        if not text:
            return None
        try:
            return tuple(int(part) for part in text.split(",") if part.strip())
        except ValueError:
            return None

    def _held(self, row: int, request: GpuRequest, indices: tuple[int, ...]) -> int:
        """Bytes per device the pod holds: 0 for whole devices, a share's memory, or a fraction of the
        device's memory (of the largest device known where the report does not name the device yet, so as
        to count too much rather than too little)."""
        if not request.fraction:
            return request.memory
        width = self.total.shape[1]
        total = max((int(self.total[row, i]) for i in indices if 0 <= i < width), default=0)
        return request.fraction_bytes(total or self.largest_device)

    def devices(self, row: int) -> list[Device]:
        state = self.nodes.get(row)
        return state.devices if state else []

    # ------------------------------------------------------------------ views for logs and metrics
    def allocation(self, row: int) -> dict[str, Any]:
        """Whole devices held, share memory allocated, and free memory stranded on partly used devices."""
        state = self.nodes.get(row)
        if state is None:
            return {}
        usable = [d for d in state.devices if not d.error]
        whole = sum(1 for d in usable if state.whole.get(d.index))
        shared = sum(state.shares.values())
        total = sum(d.total for d in usable)
        free = int(np.clip(self.share_free[row], 0, None).sum())
        stranded = int(
            sum(max(self.share_free[row, d.index], 0) for d in usable if not self.whole_free[row, d.index])
        )
        return {
            "devices": len(usable),
            "whole_used": whole,
            "shared_bytes": shared,
            "total_bytes": total,
            "free_bytes": free,
            "stranded_bytes": stranded,
        }
