"""PodTopologySpread: DoNotSchedule constraints filter nodes; ScheduleAnyway ones (and defaults) score them.

kube-scheduler v1.36 (pkg/scheduler/framework/plugins/podtopologyspread) walks
every node at PreFilter and PreScore, counting on each the pods of the
incoming pod's namespace that match a constraint's selector (pods being
deleted left out), and adds them up per topology value. We get the same
numbers in bulk: the cache keeps the counted pods grouped by (namespace,
labels) with their per-row counts (`cache.assigned`; those being deleted also
in `cache.terminating`, to take off), and a domain number per node row for
each topology key (`cache.domains`). A constraint's per-row counts are one
selector match per group of alike pods and a sum of their rows; its
per-domain counts one `np.bincount` over the nodes that count as domains; the
per-node verdicts array lookups. Nothing loops over nodes or pods in Python.

Which nodes count as domains (kube's nodeInclusionPolicies): a node must
carry every constraint's topology key; with `nodeAffinityPolicy: Honor` (the
default) it must match the pod's nodeSelector and required node affinity,
with `nodeTaintsPolicy: Honor` its NoSchedule/NoExecute taints must be
tolerated. Both are read from the NodeAffinity and TaintToleration filters'
cached per-row results (framework.StaticResults), not checked again.

Filter, per node, constraint by constraint in the pod's order (a node is
charged the first one it fails):
- the node lacks the topology key: `node(s) didn't match pod topology spread
  constraints (missing required label)`;
- the matching pods in its domain, plus one if the pod matches its own
  selector, minus the smallest count over the eligible domains (0 while there
  are fewer eligible domains than `minDomains`) exceeds `maxSkew`:
  `node(s) didn't match pod topology spread constraints`.

Score (kube's PreScore, Score and NormalizeScore), over the nodes being scored:
each constraint adds count * log(domains + 2) + (maxSkew - 1) for the node's
domain, where `domains` is the number of topology values among the scored
nodes (the scored nodes themselves for `kubernetes.io/hostname`, whose count
is the node's own); the sum is rounded, and reversed and scaled so that the
least crowded node gets 100: 100 * (max + min - score) / max. With explicit
constraints, nodes lacking a key score 0 and are left out of min and max.

A pod that sets no constraints gets kube-scheduler's system defaults
(hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) in the score, with the
selector of the Services and the ReplicaSet, StatefulSet or
ReplicationController that select it (`cache.workloads`, kept by informers
that the daemon runs only when a profile scores with this plugin); nodes
without a zone label still score on hostname then. A pod that nothing selects
costs a dictionary lookup.

Per-pod state is computed once per (pod, cache contents): the framework runs
a filter once per window of nodes, and preemption, gangs and reservations
call it outside a cycle.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from ai_scheduler.cache.assigned_pods import sum_rows
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.selectors import LabelSelector
from ai_scheduler.cache.spread import HOSTNAME_KEY, NO_SPREAD, SYSTEM_DEFAULT_CONSTRAINTS, SpreadConstraint
from ai_scheduler.scheduler.framework.interface import (
    ALL_ROWS,
    MAX_NODE_SCORE,
    NO_OPINION,
    FilterPlugin,
    Reasons,
    ScorePlugin,
    StaticResults,
    Window,
)
from ai_scheduler.scheduler.framework.plugins.node_affinity import NodeAffinityFilter
from ai_scheduler.scheduler.framework.plugins.taint_toleration import TaintTolerationFilter

CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = CONSTRAINTS_NOT_MATCH + " (missing required label)"


def _per_node(per_domain: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Each row's value of its domain; 0 where the node lacks the key (ids -1 picks the padding)."""
    padded = np.zeros(per_domain.shape[0] + 1, dtype=per_domain.dtype)
    padded[:-1] = per_domain
    values: np.ndarray = padded[ids]
    return values


def _row_counts(pod: PodRecord, selector: LabelSelector, cache: SchedulerCache, rows: int) -> np.ndarray:
    """Per node row (the first `rows`), the counted pods of the pod's namespace that match `selector`,
    those being deleted left out (kube's countPodsMatchSelector; an empty selector counts nothing)."""
    if selector.everything or selector.nothing:
        return np.zeros(rows, dtype=np.int64)
    counts = sum_rows(cache.assigned.groups_in_namespace(pod.namespace, selector), rows)
    if len(cache.terminating):
        counts -= sum_rows(cache.terminating.groups_in_namespace(pod.namespace, selector), rows)
    return counts


class _NodeInclusion:
    """The nodes a constraint counts as domains under its inclusion policies, from cached filter results."""

    def __init__(self) -> None:
        self._affinity = NodeAffinityFilter()
        self._taints = TaintTolerationFilter()

    def mask(
        self, pod: PodRecord, constraint: SpreadConstraint, static: StaticResults, base: np.ndarray
    ) -> np.ndarray:
        mask = base
        if constraint.honor_node_affinity:
            mask = self._passing(self._affinity, pod, static, mask)
        if constraint.honor_node_taints:
            mask = self._passing(self._taints, pod, static, mask)
        return mask

    @staticmethod
    def _passing(
        plugin: NodeAffinityFilter | TaintTolerationFilter,
        pod: PodRecord,
        static: StaticResults,
        mask: np.ndarray,
    ) -> np.ndarray:
        signature = plugin.signature(pod)
        if signature is None:
            return mask
        codes, _ = static.filter_codes(plugin, pod, signature)
        if codes is None:
            return mask
        passing: np.ndarray = mask & (codes[: mask.shape[0]] == 0)
        return passing


def _whole_table(mask: np.ndarray, rows: int) -> np.ndarray:
    """A mask over the rows below `row_limit`, padded to the whole table (for a window that reaches past)."""
    whole = np.zeros(rows, dtype=bool)
    whole[: mask.shape[0]] = mask
    return whole


def _keys(constraints: tuple[SpreadConstraint, ...]) -> list[str]:
    return [c.topology_key for c in constraints]


_NO_DOMAINS = np.zeros(0, dtype=np.int64)


def _state_key(pod: PodRecord, cache: SchedulerCache, *extra: Hashable) -> tuple[Hashable, ...]:
    return (
        pod.uid,
        pod.resource_version,
        pod.spread,
        id(pod.labels),
        cache.assigned.version,
        cache.static_version,
        cache.row_limit,
        *extra,
    )


@dataclass(slots=True)
class _FilterState:
    key: tuple[Hashable, ...]
    masks: list[tuple[str, np.ndarray]]  # one reason per failing node, in kube's order


class PodTopologySpreadFilter(FilterPlugin):
    name = "PodTopologySpread"

    def __init__(self) -> None:
        self._state: _FilterState | None = None
        self._inclusion = _NodeInclusion()

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return NO_OPINION if not pod.spread.hard else ""

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        constraints = pod.spread.hard
        if not constraints:
            return []  # kube's PreFilter Skip (the system defaults are all ScheduleAnyway)
        key = _state_key(pod, cache)
        state = self._state
        if state is None or state.key != key:
            state = self._state = _FilterState(key, self._masks(pod, cache, static, constraints))
        if isinstance(window, slice) and (window.stop is None or window.stop > cache.row_limit):
            return [(reason, _whole_table(mask, cache.rows)[window]) for reason, mask in state.masks]
        return [(reason, mask[window]) for reason, mask in state.masks]

    def _masks(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        static: StaticResults,
        constraints: tuple[SpreadConstraint, ...],
    ) -> list[tuple[str, np.ndarray]]:
        # Rows past `row_limit` never held a node: the masks stop there, as every window does.
        rows = cache.row_limit
        columns = [(ids[:rows], domains) for ids, domains in map(cache.domains, _keys(constraints))]
        has_all = cache.valid[:rows].copy()  # kube counts only nodes that carry every constraint's key
        for ids, _ in columns:
            has_all &= ids >= 0
        missing_label: np.ndarray | None = None
        too_skewed: np.ndarray | None = None
        counts_of: dict[LabelSelector, np.ndarray] = {}
        for constraint, (ids, domains) in zip(constraints, columns, strict=True):
            counts = counts_of.get(constraint.selector)
            if counts is None:
                counts = counts_of[constraint.selector] = _row_counts(pod, constraint.selector, cache, rows)
            eligible = self._inclusion.mask(pod, constraint, static, has_all)
            at = ids[eligible]
            per_domain = np.bincount(at, weights=counts[eligible], minlength=domains)
            present = np.bincount(at, minlength=domains) > 0
            eligible_domains = int(np.count_nonzero(present))
            minimum = int(per_domain[present].min()) if eligible_domains >= constraint.min_domains else 0
            own = 1 if constraint.selector.matches(pod.labels) else 0
            # The verdict per domain, then per node; a node without the key (-1) picks the padding.
            over = np.append(per_domain + (own - minimum) > constraint.max_skew, False)
            missing = ids < 0
            skewed = over[ids]
            if missing_label is None or too_skewed is None:
                missing_label, too_skewed = missing, skewed
            else:  # a node is charged the first constraint it fails
                charged = missing_label | too_skewed
                missing_label |= missing & ~charged
                too_skewed |= skewed & ~charged
        assert missing_label is not None and too_skewed is not None
        masks = []
        if missing_label.any():
            masks.append((MISSING_LABEL, missing_label))
        if too_skewed.any():
            masks.append((CONSTRAINTS_NOT_MATCH, too_skewed))
        return masks


@dataclass(slots=True)
class _ScoreState:
    key: tuple[Hashable, ...]
    constraints: tuple[SpreadConstraint, ...]
    require_all: bool  # explicit constraints: nodes lacking a key are not scored (kube's IgnoredNodes)
    has_all: np.ndarray  # rows with every constraint's key
    ids: list[np.ndarray]  # per constraint: domain number per row
    counts: list[np.ndarray]  # per constraint: matching pods per row
    per_domain: list[np.ndarray]  # per constraint: matching pods per domain, over the nodes that count


class PodTopologySpreadScore(ScorePlugin):
    """Fewer matching pods in a node's domains score higher.

    `system_defaults`: kube's defaultingType System (the default) rather than List with no constraints.
    """

    name = "PodTopologySpread"

    def __init__(self, weight: int, system_defaults: bool = True) -> None:
        super().__init__(weight)
        self.system_defaults = system_defaults
        self._state: _ScoreState | None = None
        self._inclusion = _NodeInclusion()

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        spread = pod.spread
        if spread is NO_SPREAD:
            none = not self.system_defaults or cache.workloads.default_selector(pod) is None
        else:
            none = not spread.soft
        return NO_OPINION if none else ""

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        spread = pod.spread
        if spread is NO_SPREAD:
            if not self.system_defaults:
                return None
            selector = cache.workloads.default_selector(pod)
            if selector is None:
                return None
            key = _state_key(pod, cache, cache.workloads.version)
            state = self._state
            if state is None or state.key != key:
                constraints = tuple(
                    dataclasses.replace(c, selector=selector) for c in SYSTEM_DEFAULT_CONSTRAINTS
                )
                state = self._state = self._prepare(pod, cache, static, key, constraints, require_all=False)
        else:
            if not spread.soft:
                return None
            key = _state_key(pod, cache)
            state = self._state
            if state is None or state.key != key:
                state = self._state = self._prepare(pod, cache, static, key, spread.soft, require_all=True)
        if rows.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return _normalize(*_raw_scores(state, rows))

    def _prepare(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        static: StaticResults,
        key: tuple[Hashable, ...],
        constraints: tuple[SpreadConstraint, ...],
        *,
        require_all: bool,
    ) -> _ScoreState:
        rows = cache.row_limit  # the scored rows are below it
        columns = [(ids[:rows], domains) for ids, domains in map(cache.domains, _keys(constraints))]
        valid = cache.valid[:rows]
        has_all = valid.copy()
        for ids, _ in columns:
            has_all &= ids >= 0
        counted = has_all if require_all else valid
        counts: list[np.ndarray] = []
        per_domain: list[np.ndarray] = []
        for constraint, (ids, domains) in zip(constraints, columns, strict=True):
            row_counts = _row_counts(pod, constraint.selector, cache, rows)
            counts.append(row_counts)
            if constraint.topology_key == HOSTNAME_KEY:  # scored by the node's own count: no domains
                per_domain.append(_NO_DOMAINS)
                continue
            eligible = self._inclusion.mask(pod, constraint, static, counted) & (ids >= 0)
            at = ids[eligible]
            per_domain.append(
                np.bincount(at, weights=row_counts[eligible], minlength=domains).astype(np.int64)
            )
        ids_of = [ids for ids, _ in columns]
        return _ScoreState(key, constraints, require_all, has_all, ids_of, counts, per_domain)


def _raw_scores(state: _ScoreState, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """kube's Score per row (rounded), and which rows it ignores (None: none)."""
    ignored = ~state.has_all[rows] if state.require_all else None
    scored = rows.shape[0] - (int(np.count_nonzero(ignored)) if ignored is not None else 0)
    total = np.zeros(rows.shape[0], dtype=np.float64)
    for constraint, ids, counts, per_domain in zip(
        state.constraints, state.ids, state.counts, state.per_domain, strict=True
    ):
        node_ids = ids[rows]
        if constraint.topology_key == HOSTNAME_KEY:
            weight = math.log(scored + 2)  # one domain per scored node; the node's own pods count
            count = counts[rows]
        else:
            considered = node_ids if ignored is None else node_ids[~ignored]
            present = np.bincount(considered[considered >= 0], minlength=per_domain.shape[0])
            # Without a key (system defaults only) a node is in kube's domain "": one more value.
            size = int(np.count_nonzero(present)) + int(bool((considered < 0).any()))
            weight = math.log(size + 2)
            count = _per_node(per_domain, node_ids)
        total += np.where(node_ids >= 0, count * weight + float(constraint.max_skew - 1), 0.0)
    return np.floor(total + 0.5).astype(np.int64), ignored  # Go's math.Round, for scores >= 0


def _normalize(raw: np.ndarray, ignored: np.ndarray | None) -> np.ndarray:
    """kube's NormalizeScore: 100 * (max + min - score) / max over the rows not ignored; ignored rows 0."""
    considered = raw if ignored is None else raw[~ignored]
    if considered.size == 0:
        return np.zeros(raw.shape[0], dtype=np.int64)
    low, high = int(considered.min()), int(considered.max())
    if high == 0:
        scores = np.full(raw.shape[0], MAX_NODE_SCORE, dtype=np.int64)
    else:
        scores = MAX_NODE_SCORE * (high + low - raw) // high
    if ignored is not None:
        scores[ignored] = 0
    return scores
