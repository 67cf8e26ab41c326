"""A stand-in for the `pynvml` module: the same functions, constants and error classes, no driver.

The agent's tests and the simulated cluster's agents read GPUs through it
exactly as they read real ones through `pynvml`. Constants and the NVMLError
hierarchy are pynvml's own, so `except nvml.NVMLError_GpuIsLost` and
`nvml.NVML_TOPOLOGY_SYSTEM` mean the same thing on both.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

MIB = 2**20
DEFAULT_LINKS = 18  # NVLink ports of an H100; links without a peer report as inactive


@dataclass(slots=True)
class FakeGpu:
    """One simulated device; change its fields to change what the next read sees."""

    index: int
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_mib: int = 81559
    memory_used_mib: int = 0
    utilization_pct: int = 0
    bus_id: str = ""
    links: list[str | None] = field(default_factory=list)  # remote bus id per NVLink, None = inactive


@dataclass(frozen=True, slots=True)
class FakeHandle:
    """What nvmlDeviceGetHandleByIndex returns: opaque to callers, as the real ctypes handle is."""

    index: int


class FakeNvml:
    """An object that answers the pynvml calls the agent makes, from a simple description of a node.

    Knobs: `gpus[i]` fields (used memory, utilization, links), `set_memory_used`,
    `set_utilization`, `fail(index, call)` (that call on that device raises an
    NVML error), `fail_init(...)` (no driver), `remote_pci_supported` (False makes
    link remote ends unreadable, so the P2P fallback answers), `p2p_nvlink` (the
    pairs NVML's NVLink P2P capability names; None: derived from the links),
    `bytes_strings` (names and UUIDs as bytes, as old bindings return them).
    `calls` counts every call.
    """

    # Constants and errors are pynvml's own (the loop below copies all of them; these are named for readers).
    NVMLError = pynvml.NVMLError
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_Uninitialized = pynvml.NVMLError_Uninitialized

    def __init__(self, gpus: Sequence[FakeGpu] = (), topology: dict[tuple[int, int], int] | None = None,
                 *, p2p_nvlink: Iterable[tuple[int, int]] | None = None) -> None:
        """`topology[(i, j)]`: an NVML_TOPOLOGY_* level (symmetric; missing pairs answer SYSTEM).
        `p2p_nvlink`: pairs NVML reports NVLink P2P for (default: derived from the links)."""
        self.gpus = list(gpus)
        self.topology = dict(topology or {})
        self.p2p_nvlink: set[tuple[int, int]] | None = None if p2p_nvlink is None else set(p2p_nvlink)
        self.remote_pci_supported = True
        self.bytes_strings = False
        self.calls: Counter[str] = Counter()
        self._init_error: int | None = None
        self._failures: dict[tuple[int | None, str], int] = {}
        self._initialized = 0
        self._lock = threading.Lock()  # the agent reads from a worker thread; tests change knobs meanwhile

    # ------------------------------------------------------------------ descriptions
    @classmethod
    def dgx(cls, count: int = 8, memory_mib: int = 81920, islands: Sequence[Sequence[int]] | None = None,
            *, model: str = "NVIDIA H100 80GB HBM3", seed: str = "", links_per_peer: int = 2) -> FakeNvml:
        """A node of `count` GPUs: NVLink within each island, PCIe switches shared by consecutive pairs.

        Within an island: the same pair is PIX (one PCIe switch), another pair PXB;
        across islands SYS (the other CPU socket). `seed` (e.g. the node name) makes
        the UUIDs differ between simulated nodes. Default: one island of all GPUs.
        """
        islands = [list(island) for island in (islands or [list(range(count))])]
        bus_ids = [f"00000000:{0x18 + 0x10 * i:02X}:00.0" for i in range(count)]
        gpus = [FakeGpu(index=i, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'fake-gpu/{seed}/{i}')}",
                        name=model, memory_total_mib=memory_mib, bus_id=bus_ids[i]) for i in range(count)]
        island_of = {i: n for n, island in enumerate(islands) for i in island}
        topology: dict[tuple[int, int], int] = {}
        for gpu in gpus:
            island = islands[island_of[gpu.index]] if gpu.index in island_of else []
            peers = [j for j in island if j != gpu.index]
            links: list[str | None] = [bus_ids[j] for j in peers for _ in range(links_per_peer)]
            gpu.links = links + [None] * max(0, DEFAULT_LINKS - len(links))
            for j in range(count):
                if j == gpu.index:
                    continue
                if island_of.get(j, -1) != island_of.get(gpu.index, -2):
                    topology[(gpu.index, j)] = pynvml.NVML_TOPOLOGY_SYSTEM
                elif j // 2 == gpu.index // 2:
                    topology[(gpu.index, j)] = pynvml.NVML_TOPOLOGY_SINGLE
                else:
                    topology[(gpu.index, j)] = pynvml.NVML_TOPOLOGY_MULTIPLE
        return cls(gpus, topology)

    @classmethod
    def no_driver(cls) -> FakeNvml:
        """A node without an NVIDIA driver: nvmlInit raises NVMLError_LibraryNotFound."""
        fake = cls()
        fake.fail_init()
        return fake

    # ------------------------------------------------------------------ knobs
    def set_memory_used(self, index: int, mib: int) -> None:
        with self._lock:
            self.gpus[index].memory_used_mib = mib

    def set_utilization(self, index: int, pct: int) -> None:
        with self._lock:
            self.gpus[index].utilization_pct = pct

    def fail(self, index: int | None, call: str, error: int = pynvml.NVML_ERROR_GPU_IS_LOST) -> None:
        """From now on `call` (e.g. "nvmlDeviceGetMemoryInfo") raises NVMLError(error) for device `index`
        (None: whatever the device, e.g. for nvmlDeviceGetCount)."""
        with self._lock:
            self._failures[(index, call)] = error

    def clear_failures(self) -> None:
        with self._lock:
            self._failures.clear()

    def fail_init(self, error: int | None = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND) -> None:
        """nvmlInit raises NVMLError(error) from now on; None makes the driver appear."""
        with self._lock:
            self._init_error = error

    # ------------------------------------------------------------------ pynvml's API
    def _enter(self, call: str, *handles: FakeHandle) -> None:
        self.calls[call] += 1
        if not self._initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        for key in [(None, call), *((h.index, call) for h in handles)]:
            if key in self._failures:
                raise pynvml.NVMLError(self._failures[key])

    def _gpu(self, handle: FakeHandle) -> FakeGpu:
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle.index]

    def _string(self, value: str) -> str | bytes:
        return value.encode() if self.bytes_strings else value

    def nvmlInit(self) -> None:
        with self._lock:
            self.calls["nvmlInit"] += 1
            if self._init_error is not None:
                raise pynvml.NVMLError(self._init_error)
            self._initialized += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            self.calls["nvmlShutdown"] += 1
            if not self._initialized:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
            self._initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        with self._lock:
            self._enter("nvmlDeviceGetCount")
            return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        with self._lock:
            handle = FakeHandle(index)
            self._enter("nvmlDeviceGetHandleByIndex", handle)
            self._gpu(handle)
            return handle

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str | bytes:
        with self._lock:
            self._enter("nvmlDeviceGetName", handle)
            return self._string(self._gpu(handle).name)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str | bytes:
        with self._lock:
            self._enter("nvmlDeviceGetUUID", handle)
            return self._string(self._gpu(handle).uuid)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> SimpleNamespace:
        with self._lock:
            self._enter("nvmlDeviceGetMemoryInfo", handle)
            gpu = self._gpu(handle)
            total, used = gpu.memory_total_mib * MIB, gpu.memory_used_mib * MIB
            return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        with self._lock:
            self._enter("nvmlDeviceGetUtilizationRates", handle)
            return SimpleNamespace(gpu=self._gpu(handle).utilization_pct, memory=0)

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> SimpleNamespace:
        with self._lock:
            self._enter("nvmlDeviceGetPciInfo", handle)
            return _pci_info(self._gpu(handle).bus_id, self.bytes_strings)

    def nvmlDeviceGetTopologyCommonAncestor(self, first: FakeHandle, second: FakeHandle) -> int:
        with self._lock:
            self._enter("nvmlDeviceGetTopologyCommonAncestor", first, second)
            a, b = self._gpu(first).index, self._gpu(second).index
            if a == b:
                return pynvml.NVML_TOPOLOGY_INTERNAL
            return self.topology.get((a, b), self.topology.get((b, a), pynvml.NVML_TOPOLOGY_SYSTEM))

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        with self._lock:
            self._enter("nvmlDeviceGetNvLinkState", handle)
            links = self._gpu(handle).links
            if not links:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if not 0 <= link < len(links):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return pynvml.NVML_FEATURE_ENABLED if links[link] else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: FakeHandle, link: int) -> SimpleNamespace:
        with self._lock:
            self._enter("nvmlDeviceGetNvLinkRemotePciInfo", handle)
            links = self._gpu(handle).links
            if not self.remote_pci_supported:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if not 0 <= link < len(links) or links[link] is None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return _pci_info(links[link] or "", self.bytes_strings)

    def nvmlDeviceGetP2PStatus(self, first: FakeHandle, second: FakeHandle, index: int) -> int:
        with self._lock:
            self._enter("nvmlDeviceGetP2PStatus", first, second)
            a, b = self._gpu(first), self._gpu(second)
            if index != pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
                return pynvml.NVML_P2P_STATUS_OK
            if self.p2p_nvlink is not None:
                linked = (a.index, b.index) in self.p2p_nvlink or (b.index, a.index) in self.p2p_nvlink
            else:
                linked = b.bus_id in a.links or a.bus_id in b.links
            return pynvml.NVML_P2P_STATUS_OK if linked else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED


def _pci_info(bus_id: str, as_bytes: bool) -> SimpleNamespace:
    """The fields of nvmlPciInfo_t that callers use (busId as the v3 struct spells it)."""
    domain, bus, rest = (bus_id or "0:0:0.0").split(":")
    legacy = f"{int(domain, 16):04x}:{bus.lower()}:{rest}"
    return SimpleNamespace(busId=bus_id.encode() if as_bytes else bus_id,
                           busIdLegacy=legacy.encode() if as_bytes else legacy,
                           domain=int(domain, 16), bus=int(bus, 16), device=int(rest.split(".")[0], 16))


# Every other NVML_* constant and NVMLError_* class, so that code written against pynvml finds them here.
for _name in dir(pynvml):
    if _name.startswith(("NVML_", "NVMLError")) and not hasattr(FakeNvml, _name):
        setattr(FakeNvml, _name, getattr(pynvml, _name))
del _name
