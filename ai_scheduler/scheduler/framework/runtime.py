"""One scheduling cycle for one pod: filter, score, select (no I/O; the caller reserves and binds)."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework.interface import (
    DevicePicker,
    DevicePreference,
    FilterPlugin,
    ScorePlugin,
    StaticFilterPlugin,
    StaticResults,
    StaticScorePlugin,
    Window,
)
from ai_scheduler.scheduler.framework.plugins.dynamic_resources import DynamicResources, DynamicResourcesScore

TOP_SCORES_LOGGED = 3
# kube-scheduler's numFeasibleNodesToFind (pkg/scheduler/schedule_one.go): below this many nodes every node
# is looked at; above it, at least this many feasible nodes are searched for.
MIN_FEASIBLE_NODES_TO_FIND = 100
# The adaptive share (percentageOfNodesToScore 0) never drops below this percentage of the nodes.
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
# Smallest window of rows the filters run over at once: each window costs a fixed Python overhead per
# filter, so tiny windows would cost more than they save.
MIN_WINDOW_ROWS = 64
# A window that wraps round the end of the table is looked at in one pass, through its row numbers, up to
# this many rows; a larger one in two passes over slices, as copying its rows would cost more than a pass.
MAX_GATHERED_ROWS = 1024


def num_feasible_nodes_to_find(percentage: int, total: int) -> int:
    """How many feasible nodes the search stops at, as kube-scheduler's numFeasibleNodesToFind.

    `percentage` 0 is adaptive: 50% minus one point per 125 nodes, never under 5%, so that the
    cost per pod grows much slower than the cluster (10% = 500 nodes at 5,000). 100 looks at every
    node. Whatever the share, at least 100 nodes are searched for, and clusters under 100 nodes
    are always searched whole.
    """
    if total < MIN_FEASIBLE_NODES_TO_FIND or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(50 - total // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(total * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(slots=True)
class Decision:
    """The outcome of a cycle, with everything the decision log and the pod's status need."""

    node: str | None
    total_nodes: int
    feasible: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    top: list[tuple[str, int]] = field(default_factory=list)
    evaluated: int = 0  # nodes the filters looked at (fewer than total once enough feasible ones were found)
    error: str = ""  # the pod itself is invalid (no node could ever fit it as written)
    duration: float = 0.0
    gpu_ids: tuple[int, ...] = ()  # managed GPUs chosen on `node`
    gpu_uuids: tuple[str, ...] = ()
    # What PostFilter (preemption) said when it could not help, kube-scheduler's `preemption: ...` verdict,
    # which follows the filters' part of the message as it does in kube-scheduler's FitError.
    post_filter: str = ""
    # DynamicResources' Reserve: the claims' allocations and reservations on `node` (a DraPlan), for the
    # binder to assume and to write in PreBind; None for a pod without claims.
    claims: Any = None
    # The attempt itself failed (a filter's Error status in kube: e.g. a CEL error in a claim's selector):
    # kube's SchedulerError, with this text, rather than Unschedulable.
    failure: str = ""

    def __copy__(self) -> Decision:
        # copy.copy's own way with slots (copyreg's reduce, a state tuple) cost 6% of a simulation
        # under a standing queue, where every repeated failure copies its model (SchedulingCycle).
        twin = Decision.__new__(Decision)
        for name in Decision.__slots__:
            setattr(twin, name, getattr(self, name))
        return twin

    @property
    def message(self) -> str:
        if self.failure:
            return self.failure
        text = fit_error_message(self.total_nodes, self.reasons, self.error)
        return f"{text} {self.post_filter}" if self.post_filter else text


def fit_error_message(total: int, reasons: dict[str, int], error: str = "") -> str:
    """kube-scheduler's FitError text: `0/12 nodes are available: 4 ..., 8 Insufficient cpu.`."""
    text = f"0/{total} nodes are available:"
    if error:
        return f"{text} {error}."
    if not reasons:
        return f"{text} no nodes to schedule on." if total == 0 else text
    # kube-scheduler sorts the "count reason" strings themselves (sort.Strings): "1 b, 10 a, 2 c".
    return f"{text} " + ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items())) + "."


def past_blocked(
    alive: np.ndarray, window: Window, blocked: Sequence[tuple[np.ndarray, str]], reasons: dict[str, int]
) -> np.ndarray:
    """The last step of a filter pass over `window`: the `blocked` masks (nodes kept for others by a
    reservation, or to avoid after a recent preemption) charged on the rows still `alive` (which it
    narrows), then those rows as rows of the whole cache."""
    for mask, reason in blocked:
        kept_off = alive & mask[window]
        count = int(np.count_nonzero(kept_off))
        if count:
            reasons[reason] = reasons.get(reason, 0) + count
            alive &= ~kept_off
    rows = alive.nonzero()[0]  # np.flatnonzero without its wrappers (a 1-D mask)
    if not isinstance(window, slice):
        return window[rows]
    if window.start:
        rows += window.start
    return rows


class Evaluation(Protocol):
    """Where a cycle's filter verdicts and scores come from: the Framework's own plugins, or results kept
    per member shape for a gang's identical members (gang_shapes.py)."""

    def filter_window(
        self,
        pod: PodRecord,
        window: Window,
        node_mask: np.ndarray | None,
        blocked: Sequence[tuple[np.ndarray, str]],
        reasons: dict[str, int],
    ) -> tuple[np.ndarray, int]: ...

    def score(self, pod: PodRecord, rows: np.ndarray) -> np.ndarray: ...

    def nodes(self, node_mask: np.ndarray) -> int:
        """How many nodes `node_mask` holds (the cache's valid rows in it)."""
        ...


class Framework:
    """A profile's plugins, bound to the cache: runs cycles."""

    def __init__(
        self,
        scheduler_name: str,
        filters: Sequence[FilterPlugin],
        scores: Sequence[ScorePlugin],
        cache: SchedulerCache,
        *,
        percentage_of_nodes_to_score: int = 0,
        rng: random.Random | None = None,
        tie_break: str = "random",
    ) -> None:
        self.scheduler_name = scheduler_name
        self.filters = list(filters)
        self.scores = [s for s in scores if s.weight > 0]
        self.cache = cache
        self.static = StaticResults(cache)
        self.percentage = percentage_of_nodes_to_score
        self.rng = rng or random.Random()
        # Among nodes of the best score: one at random (kube-scheduler's way), or the first in the node
        # table ("nodeOrder"), so that pods that tie keep landing on the same nodes (see _pick).
        self.stable_ties = tie_break == "nodeOrder"
        # kube-scheduler's nextStartNodeIndex: the row the next search starts from, so that every node
        # gets its turn when the search stops early.
        self.next_start = 0
        self._circular_rows = _NO_ROWS  # _circular's, for the table's size
        # Nodes the previous search looked at and the feasible ones among them: the share it missed
        # widens the next first window (see _find_feasible).
        self.last_looked_at = self.last_found = 0
        # Reserve step for devices: the filter that knows managed GPUs also picks them on the chosen node.
        self.device_picker = next((f for f in self.filters if isinstance(f, DevicePicker)), None)
        # A score that also ranks the chosen node's devices for a share (FGD's device choice), if any.
        self.device_preference = next((s for s in self.scores if isinstance(s, DevicePreference)), None)
        self.dra = next((f for f in self.filters if isinstance(f, DynamicResources)), None)
        # The filters with a PreFilter of their own (most have none), asked once per cycle in their order.
        self.prefilters = [f for f in self.filters if type(f).prefilter is not FilterPlugin.prefilter]
        # The scores that learn from the pods they score (ScorePlugin.learn), told of each pod first.
        self.learners = [s for s in self.scores if type(s).learn is not ScorePlugin.learn]
        # The plugins whose verdicts are cached per pod signature (StaticResults), filters first.
        self.static_plugins: list[StaticFilterPlugin | StaticScorePlugin] = [
            plugin
            for plugin in [*self.filters, *self.scores]
            if isinstance(plugin, StaticFilterPlugin | StaticScorePlugin)
        ]
        # The plugins that read placed pods or other nodes: every filter, and every score but the static
        # ones (whose verdicts are cached per pod signature). A gang's shape asks each for its locality.
        self.located: list[FilterPlugin | ScorePlugin] = [
            *self.filters,
            *(s for s in self.scores if not isinstance(s, StaticScorePlugin)),
        ]
        for scorer in self.scores:  # DynamicResources' Score reads the verdicts of the profile's filter
            if isinstance(scorer, DynamicResourcesScore):
                scorer.filter = self.dra

    def schedule(
        self,
        pod: PodRecord,
        node_mask: np.ndarray | None = None,
        blocked: Sequence[tuple[np.ndarray, str]] = (),
        via: Evaluation | None = None,
    ) -> Decision:
        """Place one pod; `node_mask` (bool per row) limits it to some nodes, e.g. one topology domain.

        `via`: where the filters' verdicts and the scores come from (the plugins by default)."""
        started = time.perf_counter()
        decision = self._schedule(pod, node_mask, blocked, via)
        decision.duration = time.perf_counter() - started
        return decision

    def feasible_rows(
        self,
        pod: PodRecord,
        node_mask: np.ndarray | None = None,
        blocked: Sequence[tuple[np.ndarray, str]] = (),
    ) -> tuple[np.ndarray, dict[str, int]]:
        """Rows of *all* nodes that pass every filter, and the per-reason counts of those that do not.

        Preemption, reservations and gangs call this to see the whole cluster; a cycle searches only
        until it has enough feasible nodes (`_find_feasible`).
        """
        reasons: dict[str, int] = {}
        rows, _ = self._filter_window(pod, slice(0, self.cache.row_limit), node_mask, blocked, reasons)
        return rows, reasons

    def fits_row(self, pod: PodRecord, row: int) -> bool:
        """Whether `pod` passes every filter on the node of `row` now (queueing hints ask it)."""
        rows, _ = self._filter_window(pod, slice(row, row + 1), None, (), {})
        return bool(rows.shape[0])

    def _filter_window(
        self,
        pod: PodRecord,
        window: Window,
        node_mask: np.ndarray | None,
        blocked: Sequence[tuple[np.ndarray, str]],
        reasons: dict[str, int],
    ) -> tuple[np.ndarray, int]:
        """Run the filters over the rows of `window`: the feasible rows, and how many nodes were looked at.

        Failing nodes are added to `reasons`. As in kube-scheduler, a node is charged to the first
        filter it fails; a filter may charge one node several reasons (Insufficient cpu and memory).
        The `blocked` masks (nodes kept for others by a reservation, or to avoid after a recent
        preemption) come after every filter, on the nodes still alive: a node is charged to them only
        when the pod could otherwise have used it, so that the message counts the filters' reasons.
        """
        cache = self.cache
        alive = cache.valid[window]
        alive = alive & node_mask[window] if node_mask is not None else alive.copy()
        looked_at = int(np.count_nonzero(alive))
        if not looked_at:
            return _NO_ROWS, 0
        for plugin in self.filters:
            failed_any = None
            for reason, mask in plugin.run(pod, cache, alive, self.static, window):
                failing = mask & alive
                count = int(np.count_nonzero(failing))
                if not count:
                    continue
                reasons[reason] = reasons.get(reason, 0) + count
                failed_any = failing if failed_any is None else failed_any | failing
            if failed_any is not None:
                alive &= ~failed_any
                if not alive.any():
                    break
        return past_blocked(alive, window, blocked, reasons), looked_at

    def _find_feasible(
        self,
        pod: PodRecord,
        node_mask: np.ndarray | None,
        blocked: Sequence[tuple[np.ndarray, str]],
        total: int,
        via: Evaluation | None = None,
    ) -> tuple[np.ndarray, dict[str, int], int]:
        """Feasible rows until enough are found (kube-scheduler's findNodesThatPassFilters).

        The search starts at `next_start` and walks the node table in windows of rows, wrapping
        round, until `num_feasible_nodes_to_find` feasible nodes are found or every node was looked
        at; the next search starts just after the last node kept, so all nodes take their turn.
        Filters are vectorised, so one window costs about the same fixed overhead whatever its size:
        the first window holds about as many nodes as wanted, and the next ones are sized from the
        share of feasible nodes seen so far. Nodes past the last one kept may have been looked at
        (and counted in the reasons) too; they are looked at again by the next search. A pod that
        fits nowhere is always checked against every node, so its reasons are complete.
        """
        reasons: dict[str, int] = {}
        filter_window = via.filter_window if via is not None else self._filter_window
        limit = self.cache.row_limit
        wanted = num_feasible_nodes_to_find(self.percentage, total)
        if wanted >= total:
            rows, looked_at = filter_window(pod, slice(0, limit), node_mask, blocked, reasons)
            return rows, reasons, looked_at
        start = self.next_start % limit
        parts: list[np.ndarray] = []
        found = looked_at = scanned = 0
        # First window: the rows that hold `wanted` nodes on average. That is exactly `wanted` on a table
        # without holes; with holes, or inside a domain (node_mask), an eighth more, so that one window
        # usually does despite the nodes not being spread evenly. When the previous search found some
        # nodes infeasible (full ones, once pods are packed), four times that share more and 16 rows (at
        # most double): a few full nodes in the window would otherwise cost a second window, a second
        # fixed cost of every filter, for a handful of rows (a quarter of the decisions of the packing
        # default profile in benchmarks/throughput.py --in-process; 6% with the margin). Which nodes
        # are kept does not depend on the window sizes, only how many are looked at.
        size = -(-wanted * limit // total)
        if limit != total:
            size += size // 8
        if self.last_found < self.last_looked_at:
            size += min(size, 4 * size * (self.last_looked_at - self.last_found) // self.last_looked_at + 16)
        position = start
        while scanned < limit:
            size = min(size, limit - scanned)
            end = position + size
            window: Window = slice(position, end)
            if end > limit:  # wrapping round the end of the table
                if size <= MAX_GATHERED_ROWS:  # the row numbers, in search order: one pass
                    window = self._circular(limit)[position:end]
                else:  # up to the end only; the next window goes on from row 0
                    window = slice(position, limit)
                    end, size = limit, limit - position
            part, seen = filter_window(pod, window, node_mask, blocked, reasons)
            looked_at += seen
            if part.size:
                parts.append(part)
                found += part.size
            scanned += size
            position = end % limit
            if found >= wanted:
                break
            # Rows still to scan for the rest, from the yield so far (twice that, so one more window
            # usually does); with nothing found yet, all the remaining rows at once.
            size = max(MIN_WINDOW_ROWS, 2 * (wanted - found) * scanned // found) if found else limit
        self.last_looked_at, self.last_found = looked_at, found
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else _NO_ROWS
        if rows.shape[0] > wanted:
            rows = rows[:wanted]
            position = int(rows[-1]) + 1
        self.next_start = position % limit
        return rows, reasons, looked_at

    def _circular(self, limit: int) -> np.ndarray:
        """The row numbers 0..limit-1 twice over (read-only): a window from `position` that wraps round the
        table's end is the slice [position, end) of it, with no array made per search."""
        rows = self._circular_rows
        if rows.shape[0] != 2 * limit:
            rows = np.arange(2 * limit, dtype=np.intp) % limit
            rows.flags.writeable = False
            self._circular_rows = rows
        return rows

    def _nominated(
        self, pod: PodRecord, node_mask: np.ndarray | None, blocked: Sequence[tuple[np.ndarray, str]]
    ) -> np.ndarray:
        """The node this pod was nominated to by preemption, if it fits there now (else no rows).

        As kube-scheduler's evaluateNominatedNode: the room made for a preemptor is where it should
        go, and a search that stops early might otherwise never look at that node.
        """
        nomination = self.cache.nominations.get(pod.uid)
        if nomination is None:
            return _NO_ROWS
        row = nomination[0]
        rows, _ = self._filter_window(pod, slice(row, row + 1), node_mask, blocked, {})
        return rows

    def _schedule(
        self,
        pod: PodRecord,
        node_mask: np.ndarray | None,
        blocked: Sequence[tuple[np.ndarray, str]] = (),
        via: Evaluation | None = None,
    ) -> Decision:
        cache = self.cache
        if node_mask is None:
            total = cache.node_count
        elif via is not None:
            total = via.nodes(node_mask)
        else:
            total = int(np.count_nonzero(cache.valid & node_mask))
        if pod.spec_error:
            return Decision(None, total, error=pod.spec_error)
        if pod.resource_claims and self.dra is None:  # never bound with claims nobody allocated
            error = (
                f"profile {self.scheduler_name} does not run DynamicResources, which pods with "
                "spec.resourceClaims need"
            )
            return Decision(None, total, error=error)
        for plugin in self.prefilters:
            error = plugin.prefilter(pod, cache)
            if error:
                return Decision(None, total, error=error)
        rows = self._nominated(pod, node_mask, blocked) if cache.nominations else _NO_ROWS
        if rows.size:
            reasons: dict[str, int] = {}
            looked_at = 1
        else:
            rows, reasons, looked_at = self._find_feasible(pod, node_mask, blocked, total, via)
        if self.dra is not None and self.dra.failure:
            return Decision(None, total, reasons=reasons, evaluated=looked_at, failure=self.dra.failure)
        if rows.size == 0:
            return Decision(None, total, reasons=reasons, evaluated=looked_at)
        for learner in self.learners:
            learner.learn(pod, cache)
        scores = via.score(pod, rows) if via is not None else self.score(pod, rows)
        best = int(scores.max())
        ties = (scores == best).nonzero()[0]
        pick = self._pick(rows, ties)
        names = cache.row_names
        top = [(names[int(rows[i])], int(scores[i])) for i in top_scores(scores, pick, ties)]
        gpu_ids: tuple[int, ...] = ()
        gpu_uuids: tuple[str, ...] = ()
        if self.device_picker is not None:
            row = int(rows[pick])
            preference = self.device_preference
            prefer = preference.preferred_device(pod, cache, row) if preference is not None else None
            gpu_ids, gpu_uuids = self.device_picker.pick(pod, cache, row, prefer)
        claims = self.dra.pick(pod, cache, int(rows[pick])) if self.dra is not None else None
        if isinstance(claims, str):  # the filter's verdict went stale within the cycle: never bind without
            return Decision(None, total, reasons={claims: 1}, evaluated=looked_at)
        return Decision(
            names[int(rows[pick])],
            total,
            feasible=int(rows.shape[0]),
            reasons=reasons,
            top=top,
            evaluated=looked_at,
            gpu_ids=gpu_ids,
            gpu_uuids=gpu_uuids,
            claims=claims,
        )

    @contextlib.contextmanager
    def learning_held(self) -> Iterator[None]:
        """A gang's attempt: what the scores learn from its members does not move their scores until it
        ends (ScorePlugin.hold), so both gang paths give the same decisions."""
        for learner in self.learners:
            learner.hold(True)
        try:
            yield
        finally:
            for learner in self.learners:
                learner.hold(False)

    def score(self, pod: PodRecord, rows: np.ndarray) -> np.ndarray:
        """The weighted sum of the score plugins' scores for `rows`."""
        scores = np.zeros(rows.shape[0], dtype=np.int64)
        for scorer in self.scores:
            values = scorer.score(pod, self.cache, rows, self.static)
            if values is not None:
                scores += values * scorer.weight
        return scores

    def _pick(self, rows: np.ndarray, ties: np.ndarray) -> int:
        """The index (into `rows`) of the chosen node among `ties`, the indices of the best score.

        Random spreads equal nodes' load, as kube-scheduler does; node order (the lowest row of the
        node table, whatever row the search started from) keeps choosing the same node while it stays
        among the best, which packs: with scores that prefer busy nodes, pods that tie on empty nodes
        all open the same one instead of one each.
        """
        if ties.shape[0] == 1:
            return int(ties[0])
        if self.stable_ties:
            return int(ties[int(np.argmin(rows[ties]))])
        return int(ties[self.rng.randrange(ties.shape[0])])


def top_scores(scores: np.ndarray, pick: int, ties: np.ndarray, count: int = TOP_SCORES_LOGGED) -> list[int]:
    """Indices of the `count` best scores for the log, best first, the chosen one (`pick`) leading.

    Scores are mostly equal (many nodes alike), and numpy's argpartition is very slow on such
    arrays (it was half the cost of a decision at 5,000 nodes): walk down the distinct values with
    max/compare passes instead, which take a few microseconds whatever the ties. `ties` holds the
    indices of the best score. (A stable sort of a few hundred scores, quicker in a loop of its own,
    took twice as long as this inside a cycle: benchmarks/gang.py --in-process.)
    """
    chosen = [pick]
    for i in ties[:count].tolist():
        if i != pick and len(chosen) < count:
            chosen.append(i)
    level = scores[pick]
    while len(chosen) < count:
        lower = scores < level
        if not lower.any():
            break
        level = scores[lower].max()
        chosen.extend((scores == level).nonzero()[0][: count - len(chosen)].tolist())
    return chosen


_NO_ROWS = np.zeros(0, dtype=np.intp)


def resourceless(pod: PodRecord) -> PodRecord:
    """The pod without resource requests: where could it go if room were made (preemption, reservation)?"""
    shadow = PodRecord.__new__(PodRecord)
    for slot in PodRecord.__slots__:
        setattr(shadow, slot, getattr(pod, slot))
    shadow.requests = {}
    shadow.forget_derived()  # derived from the requests and annotations below, not the pod's
    shadow.annotations = {
        k: v for k, v in pod.annotations.items() if not k.startswith("ai-scheduler.io/gpu-")
    }
    return shadow
