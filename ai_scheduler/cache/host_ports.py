"""Host ports in use per node, kept so that the NodePorts filter costs a few array operations per port.

kube-scheduler keeps a HostPortInfo per node (hostIP -> {(protocol, port)})
and checks a pod's ports against each node in turn. Nearly every pod has no
host port, and the few that have one have one or two, so we turn it round:
per (protocol, port) that some pod on some node uses, a column of counts over
the node rows, one for every hostIP it is used with and one for all of them
together. A wanted (hostIP, protocol, port) then conflicts, on every node at
once:
- hostIP 0.0.0.0 (every address): where the port is used with any hostIP;
- another hostIP: where it is used with that hostIP, or with 0.0.0.0.

Columns are created when a port is first used and dropped when the last pod
using it goes, so memory follows the ports in use, not the ports ever seen.
Counts, not flags: two pods on one node that name the same port (possible for
pods bound by name, which no scheduler checked) free it only when both are gone.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ai_scheduler.cache.records import BIND_ALL_HOST_IP, HostPort

_ProtocolPort = tuple[str, int]


class _PortColumns:
    """The counts of one (protocol, port) over the node rows: in total and per hostIP."""

    __slots__ = ("by_ip", "total", "uses")

    def __init__(self, rows: int) -> None:
        self.total = np.zeros(rows, dtype=np.int32)
        self.by_ip: dict[str, np.ndarray] = {}
        self.uses = 0  # how many (pod, node) uses the columns hold: dropped at 0


class HostPortTable:
    """(protocol, port) -> per-row use counts; the cache calls `add` as pods start and stop counting."""

    def __init__(self, rows: int) -> None:
        self._rows = rows
        self._ports: dict[_ProtocolPort, _PortColumns] = {}

    def __len__(self) -> int:
        """How many (protocol, port) pairs are in use somewhere."""
        return len(self._ports)

    def grow(self, rows: int) -> None:
        for columns in self._ports.values():
            columns.total = _grown(columns.total, rows)
            columns.by_ip = {ip: _grown(counts, rows) for ip, counts in columns.by_ip.items()}
        self._rows = rows

    def add(self, row: int, ports: Iterable[HostPort], sign: int) -> None:
        """Count a pod's ports on a row (sign 1) or stop counting them (sign -1)."""
        for host_ip, protocol, port in ports:
            key = (protocol, port)
            columns = self._ports.get(key)
            if columns is None:
                if sign < 0:
                    continue
                columns = self._ports[key] = _PortColumns(self._rows)
            counts = columns.by_ip.get(host_ip)
            if counts is None:
                if sign < 0:
                    continue
                counts = columns.by_ip[host_ip] = np.zeros(self._rows, dtype=np.int32)
            counts[row] += sign
            columns.total[row] += sign
            columns.uses += sign
            if sign < 0:
                self._drop_unused(key, columns, host_ip, counts)

    def _drop_unused(
        self, key: _ProtocolPort, columns: _PortColumns, host_ip: str, counts: np.ndarray
    ) -> None:
        if columns.uses <= 0:
            del self._ports[key]
        elif not counts.any():
            del columns.by_ip[host_ip]

    def clear_row(self, row: int) -> None:
        """A node left: nothing counts on its row any more (its pods are counted again if it comes back)."""
        for key, columns in list(self._ports.items()):
            used = int(columns.total[row])
            if not used:
                continue
            columns.total[row] = 0
            columns.uses -= used
            for host_ip, counts in list(columns.by_ip.items()):
                counts[row] = 0
                if not counts.any():
                    del columns.by_ip[host_ip]
            if columns.uses <= 0:
                del self._ports[key]

    def conflicts(self, ports: Iterable[HostPort], window: slice | np.ndarray) -> np.ndarray | None:
        """Rows of `window` where one of `ports` is taken (HostPortInfo.CheckConflict); None when none is."""
        result: np.ndarray | None = None
        for host_ip, protocol, port in ports:
            columns = self._ports.get((protocol, port))
            if columns is None:
                continue
            if host_ip == BIND_ALL_HOST_IP:
                taken = columns.total[window] > 0
            else:
                taken = None
                for ip in (BIND_ALL_HOST_IP, host_ip):
                    counts = columns.by_ip.get(ip)
                    if counts is not None:
                        used = counts[window] > 0
                        taken = used if taken is None else taken | used
                if taken is None:
                    continue
            result = taken if result is None else result | taken
        return result

    def counts_on(self, row: int) -> dict[HostPort, int]:
        """How many pods use each (hostIP, protocol, port) on a row (for consistency checks and tests)."""
        return {
            (ip, protocol, port): int(counts[row])
            for (protocol, port), columns in self._ports.items()
            for ip, counts in columns.by_ip.items()
            if counts[row]
        }


    def check(self) -> list[str]:
        """Differences between each port's total column and its per-hostIP columns (bookkeeping bugs)."""
        problems = []
        for (protocol, port), columns in self._ports.items():
            summed = sum(columns.by_ip.values(), np.zeros(self._rows, dtype=np.int32))
            if not np.array_equal(summed, columns.total) or columns.uses != int(columns.total.sum()):
                problems.append(f"host port {protocol}/{port}: totals differ from the per-address counts")
        return problems


def _grown(counts: np.ndarray, rows: int) -> np.ndarray:
    grown = np.zeros(rows, dtype=counts.dtype)
    grown[: counts.shape[0]] = counts
    return grown
