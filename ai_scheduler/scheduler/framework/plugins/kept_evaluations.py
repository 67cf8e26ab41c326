"""Evaluations kept per pod shape and table row, for the fragmentation scores (gpu_fragmentation.py).

A fragmentation score's evaluation of a row (before, after, the device a share would take) reads only
that row's state, the pod's shape and the shapes measured against. `RowStamps` keeps the state of every
row as last read (free GPU thousandths, free cpu and memory, device sizes, NVLink islands) and a stamp
per row that moves when the state read differs; `Evaluations` keeps, per pod shape (at most
KEPT_SHAPES, the least recently used dropped first), each row's evaluation with the stamp it was made
at, so the plugin evaluates again only the rows whose stamp moved. The plugin drops them all when the
shapes it measures against change (`clear`); a new width of the table (more devices per node) drops
them too. Plain arrays and no knowledge of the scores: what an evaluation is stays in the plugin.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ai_scheduler.cache.fragmentation import MILLI, NO_DEVICE, Placement

KEPT_SHAPES = 64  # pod shapes whose evaluations are kept (the least recently used dropped first)

PodKey = tuple[int, int, int, int, int]  # cpu, memory, GPU thousandths, share memory, largest device


@dataclass(slots=True)
class RowState:
    """What a row's evaluation reads of it, for the candidate rows of one pod."""

    rows: np.ndarray
    free: np.ndarray  # (R, D) free GPU thousandths (row_state)
    free_cpu: np.ndarray
    free_memory: np.ndarray
    total: np.ndarray  # (R, Dg) device sizes (share_need)
    island: np.ndarray  # (R, Dg) NVLink islands (_split)


class RowStamps:
    """The state of every row as last read, and a stamp per row that moves when the state read differs."""

    def __init__(self) -> None:
        self.stamp = np.zeros(0, dtype=np.int64)
        self._tick = 0
        self._arrays: tuple[np.ndarray, ...] = ()

    def read(self, state: RowState) -> bool:
        """Stamp the rows of `state` whose state changed; False when the table's shape changed, which
        makes every stamp new (the caller drops what it kept)."""
        current = (state.free, state.free_cpu, state.free_memory, state.total, state.island)
        rows = state.rows
        size = int(rows.max(initial=-1)) + 1
        same_shape = bool(self._arrays) and all(
            a.shape[1:] == c.shape[1:] for a, c in zip(self._arrays, current, strict=True))
        if not same_shape:
            self._arrays = tuple(np.zeros((0, *c.shape[1:]), dtype=c.dtype) for c in current)
            self.stamp = np.zeros(0, dtype=np.int64)
        if size > self.stamp.shape[0]:  # new rows: state zero at stamp 0, so a real state reads as moved
            grow = size - self.stamp.shape[0]
            self._arrays = tuple(np.concatenate([a, np.zeros((grow, *a.shape[1:]), dtype=a.dtype)])
                                 for a in self._arrays)
            self.stamp = np.concatenate([self.stamp, np.zeros(grow, dtype=np.int64)])
        changed = np.zeros(rows.shape[0], dtype=bool)
        for kept, now in zip(self._arrays, current, strict=True):
            differs = kept[rows] != now
            changed |= differs.any(axis=1) if differs.ndim > 1 else differs
        if changed.any():
            self._tick += 1
            moved = rows[changed]
            self.stamp[moved] = self._tick
            for kept, now in zip(self._arrays, current, strict=True):
                kept[moved] = now[changed]
        return same_shape


@dataclass(slots=True)
class Evaluated:
    """One pod shape's evaluation per table row, valid where `stamp` equals the row's stamp."""

    stamp: np.ndarray  # (N,) the row's stamp when evaluated, -1 for never
    before: np.ndarray
    after: np.ndarray
    device: np.ndarray
    per_device: np.ndarray | None  # (N, D) for shares

    @classmethod
    def empty(cls, size: int, width: int, share: bool) -> Evaluated:
        return cls(np.full(size, -1, dtype=np.int64), np.zeros(size), np.zeros(size),
                   np.full(size, NO_DEVICE, dtype=np.int64),
                   np.full((size, width), np.inf) if share else None)

    def grow(self, size: int) -> None:
        extra = size - self.stamp.shape[0]
        if extra <= 0:
            return
        self.stamp = np.concatenate([self.stamp, np.full(extra, -1, dtype=np.int64)])
        self.before = np.concatenate([self.before, np.zeros(extra)])
        self.after = np.concatenate([self.after, np.zeros(extra)])
        self.device = np.concatenate([self.device, np.full(extra, NO_DEVICE, dtype=np.int64)])
        if self.per_device is not None:
            pad = np.full((extra, self.per_device.shape[1]), np.inf)
            self.per_device = np.concatenate([self.per_device, pad])

    def store(self, rows: np.ndarray, stamp: np.ndarray, result: Placement) -> None:
        self.stamp[rows] = stamp
        self.before[rows] = result.before
        self.after[rows] = result.after
        self.device[rows] = result.device
        if self.per_device is not None and result.per_device is not None:
            self.per_device[rows] = result.per_device

    def placement(self, rows: np.ndarray) -> Placement:
        per_device = None if self.per_device is None else self.per_device[rows]
        return Placement(self.before[rows], self.after[rows], self.device[rows], per_device)


class Evaluations:
    """Kept evaluations per pod shape (at most KEPT_SHAPES), with the row stamps they are valid at."""

    def __init__(self) -> None:
        self.stamps = RowStamps()
        self._kept: OrderedDict[PodKey, Evaluated] = OrderedDict()

    def clear(self) -> None:
        self._kept.clear()

    def stale(self, key: PodKey, state: RowState) -> tuple[Evaluated, np.ndarray]:
        """The kept evaluation of `key` and which of the rows of `state` it must evaluate again."""
        if not self.stamps.read(state):
            self._kept.clear()
        size = self.stamps.stamp.shape[0]
        kept = self._kept.get(key)
        if kept is None:  # (a new width of the table cleared them all in `read`)
            kept = Evaluated.empty(size, state.free.shape[1], share=0 < key[2] < MILLI)
            self._kept[key] = kept
            if len(self._kept) > KEPT_SHAPES:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(key)
            kept.grow(size)
        stale: np.ndarray = kept.stamp[state.rows] != self.stamps.stamp[state.rows]
        return kept, stale
