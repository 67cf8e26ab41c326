"""Topology domains per node row: for a label key, which domain (label value) each node is in.

InterPodAffinity and PodTopologySpread reason about domains: the nodes that
share a value of a topology key (`kubernetes.io/hostname`, a zone, a rack).
kube-scheduler looks the value up in each node's labels, node by node. We keep,
per topology key that some pod has asked about, one int32 column over the
node rows holding a domain number (-1 where the node lacks the key), so that
"count per domain" is one `np.bincount` and "the count of this node's domain"
one fancy index, whatever the number of nodes.

A key's column is built the first time it is asked for (one pass over the
nodes) and then kept current as nodes are added, relabelled and removed.
Domain numbers are never reused while the key is tracked: a value that
disappears leaves an empty domain, which counts nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np


class _KeyColumn:
    __slots__ = ("ids", "number_of", "values")

    def __init__(self, rows: int) -> None:
        self.ids = np.full(rows, -1, dtype=np.int32)
        self.number_of: dict[str, int] = {}
        self.values: list[str] = []

    def set(self, row: int, value: str | None) -> None:
        if value is None:
            self.ids[row] = -1
            return
        number = self.number_of.get(value)
        if number is None:
            number = self.number_of[value] = len(self.values)
            self.values.append(value)
        self.ids[row] = number


class TopologyIndex:
    """Domain numbers per (topology key, node row), for the keys in use."""

    def __init__(self, rows: int) -> None:
        self._rows = rows
        self._columns: dict[str, _KeyColumn] = {}

    def grow(self, rows: int) -> None:
        for column in self._columns.values():
            grown = np.full(rows, -1, dtype=np.int32)
            grown[: column.ids.shape[0]] = column.ids
            column.ids = grown
        self._rows = rows

    def set_row(self, row: int, labels: Mapping[str, str]) -> None:
        """A node was added or its labels changed."""
        for key, column in self._columns.items():
            column.set(row, labels.get(key))

    def clear_row(self, row: int) -> None:
        for column in self._columns.values():
            column.ids[row] = -1

    def domains(
        self, key: str, labels_of_rows: Callable[[], Sequence[Mapping[str, str] | None]]
    ) -> tuple[np.ndarray, int]:
        """The key's domain number per row (-1: no such label) and how many domain numbers exist.

        `labels_of_rows` gives each row's labels (None for an empty row); it is called only the first
        time a key is asked for.
        """
        column = self._columns.get(key)
        if column is None:
            column = self._columns[key] = _KeyColumn(self._rows)
            for row, labels in enumerate(labels_of_rows()):
                if labels is not None:
                    column.set(row, labels.get(key))
        return column.ids, len(column.values)

    def value_of(self, key: str, number: int) -> str:
        return self._columns[key].values[number]

    def forget(self, keys: set[str]) -> None:
        """Stop tracking keys no pod asks about any more (keeps node updates cheap)."""
        for key in keys:
            self._columns.pop(key, None)

    @property
    def keys(self) -> list[str]:
        return list(self._columns)
