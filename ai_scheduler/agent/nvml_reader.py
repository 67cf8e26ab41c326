"""Read every GPU of the node through a pynvml-like module into the `ai-scheduler.io/gpus` report.

The module is a parameter (the real `pynvml`, or `FakeNvml` in tests and the
simulated cluster), so the same code runs on both. Each device is read on its
own: an NVML error on one device turns only that device into an `error` entry
(the scheduler never places work on it), and an error on a secondary reading
(utilization, one link, one PCIe relation) only leaves that reading out.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

GPUS_ANNOTATION = "ai-scheduler.io/gpus"
UPDATED_ANNOTATION = "ai-scheduler.io/gpus-updated"

MIB = 2**20

# An NVML module: `pynvml` itself or an object with the same functions, constants and errors (FakeNvml).
NvmlModule = Any


def pcie_names(nvml: NvmlModule) -> dict[int, str]:
    """NVML common-ancestor levels as `nvidia-smi topo -m` names them (INTERNAL: two GPUs on one board)."""
    return {
        nvml.NVML_TOPOLOGY_INTERNAL: "PIX",
        nvml.NVML_TOPOLOGY_SINGLE: "PIX",
        nvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
        nvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
        nvml.NVML_TOPOLOGY_NODE: "NODE",
        nvml.NVML_TOPOLOGY_SYSTEM: "SYS",
    }


def _text(value: str | bytes) -> str:
    """nvidia-ml-py returns str since 11.x; older bindings (and some calls) return bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bus_key(bus_id: str | bytes) -> tuple[int, int, int, int] | str:
    """A PCI address comparable across NVML's spellings (`00000000:1B:00.0` and legacy `0000:1b:00.0`)."""
    text = _text(bus_id).strip().rstrip("\x00")
    try:
        domain, bus, rest = text.split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return text.lower()


def read_gpus(nvml: NvmlModule) -> list[dict[str, Any]]:
    """All devices of an initialized NVML, sorted by index, as the annotation lists them.

    Raises the NVML error only when the device count itself cannot be read: then
    nothing about the node's GPUs is known, and the caller decides what to report.
    """
    count = nvml.nvmlDeviceGetCount()
    handles: dict[int, Any] = {}
    reports: list[dict[str, Any]] = []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            report: dict[str, Any] = {
                "index": index,
                "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                "model": _text(nvml.nvmlDeviceGetName(handle)),
                "memoryTotalMiB": int(memory.total) // MIB,
                "memoryUsedMiB": int(memory.used) // MIB,
            }
        except nvml.NVMLError as exc:
            reports.append({"index": index, "error": str(exc)})
            continue
        with contextlib.suppress(nvml.NVMLError):  # e.g. Not Supported on a MIG device: the field is left out
            report["utilizationPct"] = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        handles[index] = handle
        reports.append(report)
    peers = nvlink_peers(nvml, handles)
    relations = pcie_relations(nvml, handles)
    for report in reports:
        if report["index"] in handles:
            report["nvlinkPeers"] = peers[report["index"]]
            report["pcie"] = relations[report["index"]]
    return reports


def nvlink_peers(nvml: NvmlModule, handles: dict[int, Any]) -> dict[int, list[int]]:
    """Per device, the other devices reached by at least one active NVLink.

    The remote end of each active link is matched by PCI bus id. When a link's
    remote end is not one of our devices (an NVSwitch, as on HGX boards) or
    cannot be read, the device falls back to NVML's NVLink P2P capability, which
    answers per pair of devices.
    """
    bus_ids: dict[tuple[int, int, int, int] | str, int] = {}
    for index, handle in handles.items():
        with contextlib.suppress(nvml.NVMLError):  # such a device is found through the P2P fallback
            bus_ids[_bus_key(nvml.nvmlDeviceGetPciInfo(handle).busId)] = index
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 0))
    result: dict[int, list[int]] = {}
    for index, handle in handles.items():
        found: set[int] = set()
        unresolved = False
        for link in range(max_links):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
            except nvml.NVMLError:
                continue  # Not Supported (no NVLink) or Invalid Argument (no such link): no link
            try:
                peer = bus_ids.get(_bus_key(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
            except nvml.NVMLError:
                peer = None
            if peer is None:
                unresolved = True
            elif peer != index:
                found.add(peer)
        if unresolved:
            found |= _p2p_nvlink_peers(nvml, index, handles)
        result[index] = sorted(found)
    return result


def _p2p_nvlink_peers(nvml: NvmlModule, index: int, handles: dict[int, Any]) -> set[int]:
    peers = set()
    for other, handle in handles.items():
        if other == index:
            continue
        try:
            status = nvml.nvmlDeviceGetP2PStatus(handles[index], handle, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
        except nvml.NVMLError:
            continue
        if status == nvml.NVML_P2P_STATUS_OK:
            peers.add(other)
    return peers


def pcie_relations(nvml: NvmlModule, handles: dict[int, Any]) -> dict[int, dict[str, str]]:
    """Per device, {peer index as a string: PIX/PXB/PHB/NODE/SYS}; a relation NVML cannot give is left out."""
    names = pcie_names(nvml)
    result: dict[int, dict[str, str]] = {index: {} for index in handles}
    indices = sorted(handles)
    for position, index in enumerate(indices):
        for other in indices[position + 1:]:
            try:
                level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[index], handles[other])
            except nvml.NVMLError:
                continue
            name = names.get(level)
            if name is not None:  # the relation is symmetric: one call serves both devices
                result[index][str(other)] = name
                result[other][str(index)] = name
    return {index: dict(sorted(relations.items(), key=lambda item: int(item[0])))
            for index, relations in result.items()}


def encode_report(gpus: list[dict[str, Any]]) -> str:
    """The annotation value: compact JSON, devices in index order."""
    return orjson.dumps(sorted(gpus, key=lambda gpu: gpu["index"])).decode()
