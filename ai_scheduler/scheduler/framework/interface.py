"""The scheduling framework's extension points, run over all nodes at once.

kube-scheduler calls each Filter and Score plugin once per node. We keep the
same plugin semantics but shape the calls for arrays:

- a FilterPlugin returns, for a window of the node table (a slice of rows,
  all of them by default, or an array of row numbers when a window wraps round
  the end of the table), boolean masks of the rows that fail, each with the
  reason string that the Unschedulable message counts. The cycle looks at one
  window at a time and stops once it has found enough feasible nodes
  (kube-scheduler's percentageOfNodesToScore), so a filter must only read the
  window's rows (index its columns with it): its cost then follows the rows
  looked at, not the cluster;
- a StaticFilterPlugin (or StaticScorePlugin) reads only the pod's spec and the
  node's labels, taints, unschedulable flag and readiness. It is written as a
  plain per-node check; the framework caches its per-node results by the pod's
  *signature* (the parts of the pod the plugin reads) and recomputes only the
  rows whose static attributes changed — Borg's equivalence classes, per plugin;
- a ScorePlugin returns integer scores in [0, 100] for the feasible rows;
- a DevicePicker (a filter: the one that knows managed GPUs) chooses the devices
  on the chosen node, at Reserve; a DevicePreference (a score) may name the
  device a GPU share should take there, so that the device follows the same
  measure that chose the node (FGD's device choice);
- every plugin says, per pod, how its verdict on a node depends on the rest of
  the cluster (`locality`): NO_OPINION (it fails no node and scores none for
  this pod, whatever else is placed), PER_NODE (a node's verdict reads only the
  pod and that node, so placing a pod elsewhere leaves it as it was), or ''
  (anything else, the default). The gang fast path (gang_shapes.py) filters and
  scores a gang's identical members once when every plugin is one of the first
  two, and falls back to a cycle per member otherwise;
- one node's verdict alone (`failing_one`, `score_one`), which that fast path
  asks again for the node a member was placed on: by default the plugin's own
  `run` or `score` over that one row; a plugin whose arithmetic on one node is
  far cheaper than a dozen numpy calls says it in plain Python (the resource
  plugins do), and tests/unit/scheduler/framework/test_one_row.py holds the two
  writings to the same verdicts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import ClassVar

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord

MAX_NODE_SCORE = 100
ALL_ROWS = slice(None)  # the whole node table, as a window

Reasons = list[tuple[str, np.ndarray]]
# Rows of the node table a filter looks at: a slice, or row numbers (a window wrapping round the end).
Window = slice | np.ndarray

# How a plugin's verdict on a node depends on the rest of the cluster, for one pod (see the module).
NO_OPINION = "none"
PER_NODE = "node"

_ONE_ALIVE = np.ones(1, dtype=bool)  # the candidates of a one-row window


def position_in_window(window: Window, row: int) -> int:
    """Where `row` sits among the window's rows, or -1 when it is not one of them."""
    if isinstance(window, slice):
        start, stop = window.start or 0, window.stop
        return row - start if start <= row and (stop is None or row < stop) else -1
    hits = np.flatnonzero(window == row)
    return int(hits[0]) if hits.size else -1


class FilterPlugin:
    """Filter extension point: which nodes cannot host the pod, and why."""

    name: ClassVar[str] = ""

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        """NO_OPINION, PER_NODE or '' (see the module): '' unless the plugin knows better."""
        return ""

    def prefilter(self, pod: PodRecord, cache: SchedulerCache) -> str:
        """PreFilter: a reason no node could ever take the pod as written (checked once per cycle), or ''."""
        return ""

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        """Masks of the rows in `window` that fail, with their reasons.

        `candidates` (bool, one per row of the window) holds the rows still alive; rows outside it
        may be marked failing or not, the caller only counts the alive ones.
        """
        raise NotImplementedError

    def failing_one(
        self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults
    ) -> tuple[str, ...]:
        """The reasons the node of `row` fails, in `run`'s order (none: it passes): one node's verdict, asked
        again after a placement on it (gang_shapes.py). `run` over that one row by default; a plugin whose
        `run` costs far more than its arithmetic on one node (a dozen numpy calls, each with its fixed
        cost) says it in plain Python, and tests hold the two to the same verdicts."""
        masks = self.run(pod, cache, _ONE_ALIVE, static, slice(row, row + 1))
        return tuple([reason for reason, mask in masks if mask[0]])


class DevicePicker(FilterPlugin):
    """A filter that also reserves devices on the chosen node (the Reserve point, for managed GPUs)."""

    def pick(
        self, pod: PodRecord, cache: SchedulerCache, row: int, prefer: int | None = None
    ) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The device indices and UUIDs for the pod on `row` (empty when it takes no managed GPU).

        `prefer`: the device a DevicePreference asks for a share; taken when the share fits on it,
        the picker's own rule otherwise."""
        raise NotImplementedError


REASON_JOIN = "\n"  # a static check's reasons, when one node fails for several at once


class StaticFilterPlugin(FilterPlugin):
    """A filter over static node attributes, written per node and cached per pod signature."""

    def signature(self, pod: PodRecord) -> Hashable | None:
        """What of the pod `check` reads; None when the pod passes on every node."""
        raise NotImplementedError

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if self.signature(pod) is None else PER_NODE

    def check(self, pod: PodRecord, node: NodeRecord) -> str | None:
        """The reason this node cannot host the pod (several joined by REASON_JOIN), or None."""
        raise NotImplementedError

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        signature = self.signature(pod)
        if signature is None:
            return []
        codes, reasons = static.filter_codes(self, pod, signature)
        if codes is None:
            return []
        codes = codes[window]
        failing = codes[candidates]
        if not failing.any():
            return []
        masks: dict[str, np.ndarray] = {}
        for code in np.unique(failing[failing > 0]).tolist():
            hit = codes == code
            for reason in reasons[code].split(REASON_JOIN):
                masks[reason] = masks[reason] | hit if reason in masks else hit
        return list(masks.items())


class StaticClaimFilterPlugin(StaticFilterPlugin):
    """A static filter that looks only at pods with PersistentVolumeClaims, and whose PreFilter may
    refuse a pod outright (VolumeBinding, VolumeZone): a caller that skips PreFilter gets every node
    failing with PreFilter's reason."""

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if not pod.claims else ""  # claims are bound and provisioned as pods are placed

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        if not pod.claims:
            return []
        refusal = self.prefilter(pod, cache)
        if refusal:
            return [(refusal, np.ones(candidates.shape[0], dtype=bool))]
        return super().run(pod, cache, candidates, static, window)


class ScorePlugin:
    """Score extension point (with its normalisation): higher is better, in [0, MAX_NODE_SCORE]."""

    name: ClassVar[str] = ""

    def __init__(self, weight: int) -> None:
        self.weight = weight

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        """NO_OPINION (`score` gives None for this pod whatever the nodes), PER_NODE (a node's score reads
        only the pod and that node, not the other nodes scored with it) or '' (see the module)."""
        return ""

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        """Scores for `rows`; None when the plugin has no opinion about this pod."""
        raise NotImplementedError

    def score_one(self, pod: PodRecord, cache: SchedulerCache, row: int, static: StaticResults) -> int | None:
        """`score` of one row (a PER_NODE score only: it reads no other row), asked again after a placement
        on it (gang_shapes.py); as `failing_one`, a plugin may say it in plain Python."""
        scores = self.score(pod, cache, np.array([row], dtype=np.intp), static)
        return None if scores is None else int(scores[0])

    def learn(self, pod: PodRecord, cache: SchedulerCache) -> None:
        """Count the pod in what the plugin learns from the pods it scores (the fragmentation scores' pod
        shapes): called in every cycle that reaches the scores, before them, on either gang path."""

    def hold(self, held: bool) -> None:
        """While held (a gang's attempt: `Framework.learning_held`), what the plugin learns does not move
        its scores, so that the attempt's members score alike whether the gang fast path scores their
        shape once or each member's cycle scores it."""


class DevicePreference(ScorePlugin):
    """A score plugin that also ranks the devices of the chosen node for a GPU share.

    Called once per placed pod, after the node is chosen and before the DevicePicker picks, with the
    row the scores chose; the state is the one `score` saw in the same cycle (or, on the gang fast path,
    the row's state as that member's cycle sees it: the answer must read only the pod and that row)."""

    def preferred_device(self, pod: PodRecord, cache: SchedulerCache, row: int) -> int | None:
        """The device the share should take on `row`, or None to leave it to the DevicePicker."""
        raise NotImplementedError


class StaticScorePlugin(ScorePlugin):
    """A score over static node attributes: raw per-node values cached per signature, normalised per cycle."""

    reverse: ClassVar[bool] = False

    def signature(self, pod: PodRecord) -> Hashable | None:
        raise NotImplementedError

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        # Not PER_NODE (normalised over the nodes scored): the gang fast path normalises `raw_scores` itself.
        return NO_OPINION if self.signature(pod) is None else ""

    def raw_score(self, pod: PodRecord, node: NodeRecord) -> int:
        raise NotImplementedError

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        signature = self.signature(pod)
        if signature is None:
            return None
        raw = static.raw_scores(self, pod, signature)
        if raw is None:  # what default_normalize gives for all zeros, without reading them
            return np.full(rows.shape[0], MAX_NODE_SCORE if self.reverse else 0, dtype=np.int64)
        return default_normalize(raw[rows], self.reverse)


def default_normalize(raw: np.ndarray, reverse: bool) -> np.ndarray:
    """kube-scheduler's helper.DefaultNormalizeScore: scale to [0, 100] by the maximum."""
    top = int(raw.max()) if raw.size else 0
    if top == 0:
        return np.full(raw.shape, MAX_NODE_SCORE if reverse else 0, dtype=np.int64)
    scaled = MAX_NODE_SCORE * raw // top
    return MAX_NODE_SCORE - scaled if reverse else scaled


class _Entry:
    __slots__ = ("any_nonzero", "codes", "reason_codes", "reasons", "version")

    def __init__(self, rows: int, dtype: type) -> None:
        self.version = -1
        self.codes: np.ndarray = np.zeros(rows, dtype=dtype)
        # Most pods fail on no node for most static filters (no taints, no selector): knowing that the
        # codes are all zero lets a cycle skip reading them at all.
        self.any_nonzero = False
        self.reasons: list[str] = [""]
        self.reason_codes: dict[str, int] = {}


class StaticResults:
    """Per-(plugin, pod signature) results over the node table, kept current row by row."""

    def __init__(self, cache: SchedulerCache, max_entries: int = 1024) -> None:
        self._cache = cache
        self._entries: OrderedDict[tuple[str, Hashable], _Entry] = OrderedDict()
        self._max_entries = max_entries

    def _entry(
        self, kind: str, plugin_name: str, signature: Hashable, dtype: type
    ) -> tuple[_Entry, np.ndarray]:
        """The cached entry and the rows it must (re)compute."""
        key = (kind + plugin_name, signature)
        cache = self._cache
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(cache.rows, dtype)
            self._entries[key] = entry
            if len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
            stale = np.flatnonzero(cache.valid)
        else:
            self._entries.move_to_end(key)
            if entry.version == cache.static_version and entry.codes.shape[0] == cache.rows:
                return entry, stale_none
            if entry.codes.shape[0] < cache.rows:
                grown: np.ndarray = np.zeros(cache.rows, dtype=dtype)
                grown[: entry.codes.shape[0]] = entry.codes
                entry.codes = grown
            stale = np.flatnonzero(cache.row_static_version > entry.version)
        entry.version = cache.static_version
        return entry, stale

    def filter_codes(
        self, plugin: StaticFilterPlugin, pod: PodRecord, signature: Hashable
    ) -> tuple[np.ndarray | None, list[str]]:
        """Per-row reason codes (0 = passes) and the reasons they index; None when every node passes."""
        entry, stale = self._entry("f:", plugin.name, signature, np.int32)
        records = self._cache.row_records
        codes = entry.codes
        for row in stale.tolist():
            node = records[row]
            reason = plugin.check(pod, node) if node is not None else None
            if reason is None:
                codes[row] = 0
                continue
            code = entry.reason_codes.get(reason)
            if code is None:
                code = entry.reason_codes[reason] = len(entry.reasons)
                entry.reasons.append(reason)
            codes[row] = code
        if stale.size:
            entry.any_nonzero = bool(codes.any())
        return (codes if entry.any_nonzero else None), entry.reasons

    def raw_scores(self, plugin: StaticScorePlugin, pod: PodRecord, signature: Hashable) -> np.ndarray | None:
        """Per-row raw scores; None when they are all zero."""
        entry, stale = self._entry("s:", plugin.name, signature, np.int64)
        records = self._cache.row_records
        values = entry.codes
        for row in stale.tolist():
            node = records[row]
            values[row] = plugin.raw_score(pod, node) if node is not None else 0
        if stale.size:
            entry.any_nonzero = bool(values.any())
        return values if entry.any_nonzero else None

    def clear(self) -> None:
        self._entries.clear()


stale_none = np.zeros(0, dtype=np.int64)
