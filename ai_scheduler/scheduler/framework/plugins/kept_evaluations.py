"""Evaluations kept per pod shape and table row, for the fragmentation scores (gpu_fragmentation.py).

A fragmentation score's evaluation of a row (before, after, the device a share would take) reads only
that row's state, the pod's shape and the shapes measured against. `Evaluations` keeps, per pod shape
(at most KEPT_SHAPES, the least recently used dropped first), each row's evaluation with the cache's
`row_version` of the row when it was made (cache.py: it moves whenever the row's allocatable, requests
or GPUs change), so the plugin reads the state of, and evaluates again, only the rows whose version
moved since. The plugin drops them all when the shapes it measures against change (`clear`); a new
width of the evaluation (more devices per node) or another cache drops them too. Plain arrays and no
knowledge of the scores: what an evaluation is stays in the plugin.

A row's version says that its state moved, not what it moved to. After one placement (the next pod's
cycle, or a gang's next member on the fast path) the one row that moved usually holds a state that
another row held before: nodes of one kind, used alike. So for a few rows at a time (`FEW_ROWS`: the
one-row rescoring of gang_shapes.py and the cycle after a placement) the plugin also keeps evaluations
by the row's state itself (`by_state`: the bytes of what the evaluation reads of the row, as
`row_key` gives them), at most BY_STATE of them, the least recently used dropped first, and cleared
with the rest. Reading a row's key costs a few microseconds; evaluating it, dozens of numpy calls. The
same state gives the same figures to the bit (an evaluation reads nothing else of the table), so a
decision is the same whichever way its figures were found.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ai_scheduler.cache.fragmentation import MILLI, NO_DEVICE, Placement

KEPT_SHAPES = 64  # pod shapes whose evaluations are kept (the least recently used dropped first)
FEW_ROWS = 4  # rows to evaluate at most for which evaluations by state are looked up (`by_state`)
BY_STATE = 8192  # evaluations kept by row state (the least recently used dropped first)

PodKey = tuple[int, int, int, int, int]  # cpu, memory, GPU thousandths, share memory, largest device
# One row's evaluation: before, after, the device a share takes, and per device for shares.
RowEvaluation = tuple[float, float, int, np.ndarray | None]


@dataclass(slots=True)
class Evaluated:
    """One pod shape's evaluation per table row, valid where `stamp` equals the row's version now."""

    stamp: np.ndarray  # (N,) the row's version when evaluated, -1 for never
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

    def store_one(self, row: int, stamp: int, evaluation: RowEvaluation) -> None:
        self.stamp[row] = stamp
        self.before[row], self.after[row], self.device[row], per_device = evaluation
        if self.per_device is not None and per_device is not None:
            self.per_device[row] = per_device

    def row(self, row: int) -> RowEvaluation:
        per_device = None if self.per_device is None else self.per_device[row].copy()
        return float(self.before[row]), float(self.after[row]), int(self.device[row]), per_device


class Evaluations:
    """Kept evaluations per pod shape (at most KEPT_SHAPES), each valid at the row versions it was made."""

    def __init__(self) -> None:
        self._kept: OrderedDict[PodKey, Evaluated] = OrderedDict()
        # The cache whose row versions the stamps are, and the width (devices per row) evaluated at.
        self._cache: object = None
        self._width = -1
        self._by_state: OrderedDict[tuple[PodKey, tuple[bytes, ...]], RowEvaluation] = OrderedDict()

    def clear(self) -> None:
        self._kept.clear()
        self._by_state.clear()

    def by_state(self, key: PodKey, state: tuple[bytes, ...]) -> RowEvaluation | None:
        """The evaluation of pod shape `key` on a row whose state is `state` (`row_key`), if kept."""
        found = self._by_state.get((key, state))
        if found is not None:
            self._by_state.move_to_end((key, state))
        return found

    def keep_by_state(self, key: PodKey, state: tuple[bytes, ...], evaluation: RowEvaluation) -> None:
        self._by_state[(key, state)] = evaluation
        if len(self._by_state) > BY_STATE:
            self._by_state.popitem(last=False)

    def stale(
        self, key: PodKey, rows: np.ndarray, cache: object, versions: np.ndarray, width: int
    ) -> tuple[Evaluated, np.ndarray]:
        """The kept evaluation of `key` and which of `rows` it must evaluate again: `versions` is the
        cache's `row_version` (every row of its table), `width` the devices per row evaluated."""
        kept = self.kept(key, cache, versions.shape[0], width)
        stale: np.ndarray = kept.stamp[rows] != versions[rows]
        return kept, stale

    def kept(self, key: PodKey, cache: object, size: int, width: int) -> Evaluated:
        """The kept evaluation of `key` over a table of `size` rows (see `stale`)."""
        if cache is not self._cache or width != self._width:
            self.clear()
            self._cache, self._width = cache, width
        kept = self._kept.get(key)
        if kept is None:
            kept = Evaluated.empty(size, width, share=0 < key[2] < MILLI)
            self._kept[key] = kept
            if len(self._kept) > KEPT_SHAPES:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(key)
            kept.grow(size)
        return kept
