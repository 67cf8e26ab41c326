"""The gang fast path: a gang's identical members are filtered and scored once, then placed one by one.

A gang's members are usually identical: the same requests, selectors and tolerations. The
per-member path (GangScheduler._try without a shape) runs a whole cycle for each of them: every
filter over each window of nodes the search looks at, every score over the feasible nodes it
found. Here, for one member *shape*:

- the filters run once over the whole node table, and give each row a code: 0 when it passes
  every filter, else the reasons of the first filter it fails (a node is charged to the first
  filter it fails, with all of that filter's reasons, as in a cycle);
- the scores whose locality is PER_NODE are summed once per feasible row; a StaticScorePlugin
  keeps its cached raw values and is normalised per member over the nodes that member scores.

Each member's cycle then runs the Framework's own search and selection (`Framework.schedule` with
this shape as its `Evaluation`): the same windows from the same start row, the same counts of
reasons, the same scores, the same tie-break draw; only the verdicts and scores are read from the
arrays here instead of asking the plugins. After a member's Reserve, only the row it took is
filtered (by the filters that read pods placed on it) and scored again: for a plugin whose
locality is PER_NODE a placement changes nothing on the other rows, and a NO_OPINION plugin says
nothing about the pod whatever is placed. That one row is asked through the plugins' one-row
verdicts (`failing_one`, `score_one`), which the resource plugins give in plain Python numbers: a
dozen numpy calls, each with its fixed cost, cost several times the arithmetic of one node, and
these were a third of a gang's attempt. When a try gives up, its rows go back to what they were
(`restore`), as the cache does once the try's members are unreserved.

`MemberShape.key` says when it applies: no member is nominated (a nominee's own node is searched
first, and room held for it counts as free for it only), every plugin's locality is NO_OPINION or
PER_NODE for the pod, and every member has the same key (everything the PER_NODE plugins read from
the pod: requests, scoring requests, the managed-GPU request, host ports, and each static plugin's
signature). Pod (anti-)affinity, topology spread, volumes, existing pods' anti-affinity, or a
plugin that does not say how it reads the cluster: the gang takes the per-member path. Both paths
give the same decisions (tests/unit/scheduler/test_gang_shapes.py compares them on random gangs). A
score that learns from the pods it scores (the fragmentation scores' pod shapes) is told of each
member on either path (`ScorePlugin.learn`) and keeps what it measures against for the whole attempt
(`Framework.learning_held`), so that scoring a shape once reads as scoring each member.

One difference in time only: the GPU filter's staleness of a node's GPU report is judged when the
shape is made, not again for each member of the same attempt (milliseconds apart).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ai_scheduler.cache.gpus import gpu_request
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    NO_OPINION,
    PER_NODE,
    FilterPlugin,
    ScorePlugin,
    StaticFilterPlugin,
    StaticScorePlugin,
    Window,
    default_normalize,
)
from ai_scheduler.scheduler.framework.runtime import Framework, past_blocked

_NO_ROWS = np.zeros(0, dtype=np.intp)
_SHAPED = frozenset((NO_OPINION, PER_NODE))  # the localities the fast path takes


class MemberShape:
    """Filter verdicts and scores over the node table for one member shape (see the module).

    Implements the cycle's `Evaluation`: `filter_window`, `score` and `nodes`, read from the arrays."""

    def __init__(self, framework: Framework, pod: PodRecord, localities: Sequence[str]) -> None:
        """`localities`: the pod's locality for each of `framework.located` (its key's first part)."""
        cache = self.cache = framework.cache
        self.framework = framework
        static = framework.static
        located = zip(framework.located, localities, strict=True)
        per_node = [plugin for plugin, locality in located if locality == PER_NODE]
        filters = [p for p in per_node if isinstance(p, FilterPlugin)]
        # The filters that read what placed pods use: a placement can change their verdict on its row.
        self._dynamic: list[FilterPlugin] = [f for f in filters if not isinstance(f, StaticFilterPlugin)]
        self._row_scorers: list[ScorePlugin] = [p for p in per_node if isinstance(p, ScorePlugin)]
        self._static_scores: list[tuple[StaticScorePlugin, np.ndarray | None]] = []
        for scorer in framework.scores:
            if isinstance(scorer, StaticScorePlugin):
                signature = scorer.signature(pod)
                if signature is not None:
                    self._static_scores.append((scorer, static.raw_scores(scorer, pod, signature)))
        self.reason_sets: list[tuple[str, ...]] = [()]
        self._codes_of: dict[tuple[str, ...], int] = {(): 0}
        self._filters = filters
        self._pod = pod
        limit = cache.row_limit
        # Rows are filtered and scored once, all the usable ones when a search first reads one of them: the
        # members' searches overlap (inside a domain, or once the search wraps round the table) and go on
        # to read most of it, and one numpy pass over all costs about what one window does.
        self.codes = np.zeros(limit, dtype=np.int32)
        self.filtered = np.zeros(limit, dtype=bool)
        self.row_scores = np.zeros(limit, dtype=np.int64)
        self.scored = np.zeros(limit, dtype=bool)
        self._changed: set[int] = set()  # rows this try's placements changed
        self._masked: tuple[np.ndarray | None, np.ndarray] = (None, cache.valid)  # node mask -> valid & it
        self._complete: np.ndarray | None = None  # the usable rows (`_masked`'s) when all are filtered
        # Once every usable row is filtered: per row, 0 when it is not usable (not a node, or outside the
        # node mask), else its code + 1. One bincount of a window then gives the nodes looked at, the
        # feasible ones and the count of each failing code at once.
        self._window_codes = np.zeros(limit, dtype=np.intp)
        # The same, once complete, for the usable rows alone (`_usable_rows`, ascending): a window that is a
        # slice of the table reads only the usable rows in it, a tenth of them inside one of ten domains.
        self._usable_rows = _NO_ROWS
        self._usable_codes = _NO_ROWS
        # The usable rows (`_masked`'s) whose feasible rows are all scored but for `_stale`: the rows that
        # placements changed since, rescored when a member next scores.
        self._scored_for: np.ndarray | None = None
        self._stale: list[int] = []
        self._nodes: tuple[np.ndarray | None, int] = (None, 0)  # node mask -> the nodes in it

    @staticmethod
    def key(framework: Framework, pod: PodRecord) -> tuple[tuple[str, ...], Hashable] | None:
        """What of the pod the shape's verdicts depend on: its locality for each of `framework.located`,
        and what the PER_NODE plugins read from it; None when the fast path does not apply."""
        cache = framework.cache
        if pod.uid in cache.nominations:
            return None
        localities = tuple([plugin.locality(pod, cache) for plugin in framework.located])
        if not _SHAPED.issuperset(localities):
            return None
        return localities, MemberShape._pod_key(framework, pod)

    @staticmethod
    def _pod_key(framework: Framework, pod: PodRecord) -> Hashable:
        """The part of the key read from the pod alone, kept in its PodInfo for this framework (a reload
        builds new frameworks, whose plugins may read other parts of the pod)."""
        info = pod.info
        cached = info.gang_shape
        if cached is not None and cached[0] is framework:
            key: Hashable = cached[1]
            return key
        signatures = tuple([plugin.signature(pod) for plugin in framework.static_plugins])
        key = (
            signatures,
            tuple(sorted(pod.requests.items())),
            tuple(sorted(pod.score_requests().items())),
            gpu_request(pod),
            pod.host_ports,
            pod.scheduler_name,
        )
        info.gang_shape = (framework, key)
        return key

    @classmethod
    def of(cls, framework: Framework, pods: Sequence[PodRecord]) -> MemberShape | None:
        """The shape of `pods` when they share one and the fast path applies to it, else None."""
        if len(pods) < 2:
            return None
        first = cls.key(framework, pods[0])
        if first is None:
            return None
        for pod in pods[1:]:
            if cls.key(framework, pod) != first:
                return None
        return cls(framework, pods[0], first[0])

    # ------------------------------------------------------------------ the cycle's Evaluation
    def filter_window(
        self,
        pod: PodRecord,
        window: Window,
        node_mask: np.ndarray | None,
        blocked: Sequence[tuple[np.ndarray, str]],
        reasons: dict[str, int],
    ) -> tuple[np.ndarray, int]:
        """Framework._filter_window, read from the codes (rows not filtered yet are filtered first)."""
        mask, usable = self._masked
        if mask is not node_mask:
            usable = self.cache.valid if node_mask is None else self.cache.valid & node_mask
            self._masked = (node_mask, usable)
        if self._complete is not usable:
            # Every usable row not filtered yet, in one pass: the members' searches go on to read the rest of
            # the table (or of the domain), and one pass over it costs about what one window does. Then no
            # window needs the check again until `restore` (or another node mask).
            limit = self.filtered.shape[0]
            todo = (usable[:limit] & ~self.filtered).nonzero()[0]
            if todo.size:
                self._filter(todo)
            np.add(self.codes, 1, out=self._window_codes)
            self._window_codes *= usable[:limit]
            self._usable_rows = usable[:limit].nonzero()[0]
            self._usable_codes = self._window_codes[self._usable_rows]
            self._complete = usable
        if type(window) is slice:  # the usable rows in it: a run of `_usable_rows`
            rows = self._usable_rows
            first = int(rows.searchsorted(window.start or 0))
            stop = rows.shape[0] if window.stop is None else int(rows.searchsorted(window.stop))
            if first == stop:
                return _NO_ROWS, 0
            window_codes = self._usable_codes[first:stop]
            counts = np.bincount(window_codes)
            self._charge(counts, reasons)
            return past_blocked(window_codes == 1, rows[first:stop], blocked, reasons), stop - first
        window_codes = self._window_codes[window]
        counts = np.bincount(window_codes)
        looked_at = window_codes.shape[0] - int(counts[0])
        if not looked_at:
            return _NO_ROWS, 0
        self._charge(counts, reasons)
        return past_blocked(window_codes == 1, window, blocked, reasons), looked_at

    def _charge(self, counts: np.ndarray, reasons: dict[str, int]) -> None:
        """Each failing code's reasons, charged its count of nodes (`counts[code + 1]`, as bincount of
        the window's codes + 1 gives them)."""
        if counts.shape[0] > 2:  # some nodes failed a filter
            reason_sets = self.reason_sets
            for i in counts[2:].nonzero()[0].tolist():  # counts[i + 2]: the rows of code i + 1
                count = int(counts[i + 2])
                for reason in reason_sets[i + 1]:
                    reasons[reason] = reasons.get(reason, 0) + count

    def nodes(self, node_mask: np.ndarray) -> int:
        """Nodes in `node_mask`, counted once per mask (the members of a try share it)."""
        mask, count = self._nodes
        if mask is not node_mask:
            count = int(np.count_nonzero(self.cache.valid & node_mask))
            self._nodes = (node_mask, count)
        return count

    def score(self, pod: PodRecord, rows: np.ndarray) -> np.ndarray:
        """Framework.score, from the per-row sums (rows not scored yet are scored first) and the static
        scores' raw values, normalised over `rows` as StaticScorePlugin.score does."""
        usable = self._masked[1]
        if self._scored_for is not usable:
            # Every feasible usable row not scored yet, in one pass (as `filter_window` filters them).
            todo_mask = usable[: self.scored.shape[0]] & self.filtered
            todo_mask &= self.codes == 0
            todo_mask[rows] = True
            todo_mask &= ~self.scored
            todo = todo_mask.nonzero()[0]
            self.row_scores[todo] = self._scores(pod, todo)
            self.scored[todo] = True
            self._scored_for = usable
            self._stale.clear()
        elif self._stale and not self.scored[rows].all():
            # Some of `rows` were changed by a placement since: rescore the changed rows still feasible
            # (the only feasible usable rows not scored).
            codes, row_scores, scored = self.codes, self.row_scores, self.scored
            for row in self._stale:
                if not codes[row]:
                    row_scores[row] = self._score_one(pod, row)
                    scored[row] = True
            self._stale.clear()
        scores: np.ndarray = self.row_scores[rows]
        for scorer, raw in self._static_scores:
            if raw is None:  # what StaticScorePlugin.score gives for all zeros
                if scorer.reverse:
                    scores += MAX_NODE_SCORE * scorer.weight
                continue
            scores += default_normalize(raw[rows], scorer.reverse) * scorer.weight
        return scores

    # ------------------------------------------------------------------ placements
    def placed(self, pod: PodRecord, row: int) -> None:
        """A member was reserved on `row`: that row is filtered (by the filters that read pods placed on
        it; it passed the others) and scored again."""
        self._changed.add(row)
        cache, static = self.cache, self.framework.static
        code = 0
        for plugin in self._dynamic:
            failing = plugin.failing_one(pod, cache, row, static)
            if failing:
                code = self._code(failing)
                break
        self.codes[row] = code
        if self._complete is not None and self._complete[row]:
            self._window_codes[row] = code + 1
            self._usable_codes[int(self._usable_rows.searchsorted(row))] = code + 1
        self.scored[row] = False
        self._stale.append(row)

    def restore(self) -> None:
        """The try's members were unreserved: their rows are read again from the cache as it is back."""
        changed = list(self._changed)
        self.filtered[changed] = False
        self._complete = None
        self.scored[changed] = False
        self._scored_for = None
        self._stale.clear()
        self._changed.clear()

    def _filter(self, rows: np.ndarray) -> None:
        """Codes of `rows` (row numbers): 0 when they pass every filter, else the reasons of the first
        filter they fail, as Framework._filter_window charges them."""
        cache, static, pod = self.cache, self.framework.static, self._pod
        alive = np.ones(rows.shape[0], dtype=bool)
        codes = np.zeros(rows.shape[0], dtype=np.int32)
        for plugin in self._filters:
            failing = []
            for reason, mask in plugin.run(pod, cache, alive, static, rows):
                hit = mask & alive
                if hit.any():
                    failing.append((reason, hit))
            if not failing:
                continue
            if len(failing) == 1:
                codes[failing[0][1]] = self._code((failing[0][0],))
                alive &= ~failing[0][1]
            else:
                bits = np.zeros(rows.shape[0], dtype=np.int64)
                for i, (_, hit) in enumerate(failing):
                    bits[hit] |= 1 << i
                failed = bits != 0
                for value in np.unique(bits[failed]).tolist():
                    chosen = tuple(reason for i, (reason, _) in enumerate(failing) if value >> i & 1)
                    codes[bits == value] = self._code(chosen)
                alive &= ~failed
            if not alive.any():
                break
        self.codes[rows] = codes
        self.filtered[rows] = True

    def _scores(self, pod: PodRecord, rows: np.ndarray) -> np.ndarray:
        scores = np.zeros(rows.shape[0], dtype=np.int64)
        for scorer in self._row_scorers:
            values = scorer.score(pod, self.cache, rows, self.framework.static)
            if values is not None:
                scores += values * scorer.weight
        return scores

    def _score_one(self, pod: PodRecord, row: int) -> int:
        """`_scores` of one row, by each plugin's `score_one` (in Python numbers where it has them)."""
        total = 0
        for scorer in self._row_scorers:
            value = scorer.score_one(pod, self.cache, row, self.framework.static)
            if value is not None:
                total += value * scorer.weight
        return total

    def _code(self, reasons: tuple[str, ...]) -> int:
        code = self._codes_of.get(reasons)
        if code is None:
            code = self._codes_of[reasons] = len(self.reason_sets)
            self.reason_sets.append(reasons)
        return code
