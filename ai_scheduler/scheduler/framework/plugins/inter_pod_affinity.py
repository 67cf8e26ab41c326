"""InterPodAffinity: required pod (anti-)affinity filters nodes, preferred pod (anti-)affinity scores them.

kube-scheduler's PreFilter counts, per topology pair (key, value), the
existing pods that match the incoming pod's required affinity terms (a pod
counts only if it matches all of them), those that match each required
anti-affinity term, and the existing pods whose own required anti-affinity
terms match the incoming pod; Filter then looks each node's pairs up. We
compute the same counts as arrays over topology domains (`cache.domains`:
a domain number per node row), from the cache's groups of pods
(`cache.assigned`: pods grouped by namespace and labels, and by affinity
spec), so a PreFilter costs a few numpy passes per term and a selector match
per group of alike pods, never a scan of every pod, and Filter is an array
lookup per window of nodes.

Filter, per node, in kube-scheduler's order (a node is charged one reason):
1. required affinity: the node must have every term's topology key, and its
   domain must hold a pod matching all the terms; unless no such pod exists
   anywhere and the incoming pod matches its own terms (the first pod of a
   group with affinity to itself), then any node with the keys will do —
   `node(s) didn't match pod affinity rules`;
2. required anti-affinity: no pod matching a term in the node's domain for
   that term's key — `node(s) didn't match pod anti-affinity rules`;
3. existing pods' required anti-affinity: no existing pod whose term matches
   the incoming pod in the node's domain for that term's key —
   `node(s) didn't satisfy existing pods anti-affinity rules`.

Score, per node: the sum over topology keys of a per-domain score: + weight
for each existing pod matching one of the incoming pod's preferred affinity
terms, - weight for its preferred anti-affinity terms, + 1
(hardPodAffinityWeight) for each existing pod whose required affinity term
matches the incoming pod, ± weight for existing pods' preferred (anti-)
affinity terms that match it; then scaled to [0, 100] between the lowest and
highest score of the nodes being scored (kube's NormalizeScore).

The filter's per-pod state is computed once per (pod, cache contents): the
framework runs filters window by window, and preemption, gangs and
reservations call them outside a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ai_scheduler.cache.assigned_pods import AssignedPodIndex, RowCounts
from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.selectors import NO_AFFINITY, AffinityTerm
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

AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_RULES = "node(s) didn't satisfy existing pods anti-affinity rules"
HARD_POD_AFFINITY_WEIGHT = 1  # kube-scheduler's InterPodAffinityArgs default


def _per_node(domain_values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Each row's value of its domain (0 where the node lacks the key: ids -1 picks the padding)."""
    padded = np.zeros(domain_values.shape[0] + 1, dtype=domain_values.dtype)
    padded[:-1] = domain_values
    values: np.ndarray = padded[ids]
    return values


def _per_domain(ids: np.ndarray, domains: int, at: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Counts at node rows `at`, added up per domain (rows without the key are left out)."""
    dom = ids[at]
    has = dom >= 0
    return np.bincount(dom[has], weights=counts[has], minlength=domains)


def _matches_all(pod: PodRecord, terms: tuple[AffinityTerm, ...], cache: SchedulerCache) -> bool:
    labels = cache.labels_of_namespace(pod.namespace)
    return all(term.matches(pod.namespace, pod.labels, labels) for term in terms)


@dataclass(slots=True)
class _FilterState:
    key: tuple[str, str, int, int, int]
    # One reason per failing node, in kube's order; None where no node fails that way.
    masks: list[tuple[str, np.ndarray]]


class InterPodAffinityFilter(FilterPlugin):
    name = "InterPodAffinity"

    def __init__(self) -> None:
        self._state: _FilterState | None = None

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return (
            NO_OPINION
            if not pod.pod_affinity.has_required and not cache.assigned.required_anti_affinity_groups
            else ""
        )

    def run(
        self,
        pod: PodRecord,
        cache: SchedulerCache,
        candidates: np.ndarray,
        static: StaticResults,
        window: Window = ALL_ROWS,
    ) -> Reasons:
        terms = pod.pod_affinity
        index = cache.assigned
        if not terms.has_required and not index.required_anti_affinity_groups:
            return []  # kube's PreFilter Skip
        key = (pod.uid, pod.resource_version, index.version, cache.static_version, cache.namespace_version)
        state = self._state
        if state is None or state.key != key:
            state = self._state = _FilterState(key, self._masks(pod, cache, index))
        return [(reason, mask[window]) for reason, mask in state.masks]

    def _masks(
        self, pod: PodRecord, cache: SchedulerCache, index: AssignedPodIndex
    ) -> list[tuple[str, np.ndarray]]:
        rows = cache.rows
        terms = pod.pod_affinity
        namespace_labels = cache.labels_of_namespace
        charged = np.zeros(rows, dtype=bool)
        masks: list[tuple[str, np.ndarray]] = []

        def charge(reason: str, failing: np.ndarray) -> None:
            nonlocal charged
            failing = failing & ~charged
            if failing.any():
                masks.append((reason, failing))
                charged = charged | failing

        if terms.required_affinity:
            counts = index.counts_matching_all(terms.required_affinity, namespace_labels, rows)
            failing = np.zeros(rows, dtype=bool)
            pods_missing = np.zeros(rows, dtype=bool)
            matched_anywhere = False
            for term in terms.required_affinity:
                ids, domains = cache.domains(term.topology_key)
                has = ids >= 0
                per_domain = np.bincount(ids[has], weights=counts[has], minlength=domains)
                matched_anywhere = matched_anywhere or bool(per_domain.any())
                failing |= ~has
                pods_missing |= _per_node(per_domain, ids) <= 0
            if matched_anywhere or not _matches_all(pod, terms.required_affinity, cache):
                failing |= pods_missing
            charge(AFFINITY_RULES, failing)
        if terms.required_anti_affinity:
            failing = np.zeros(rows, dtype=bool)
            for term in terms.required_anti_affinity:
                counts = index.counts_matching_all((term,), namespace_labels, rows)
                ids, domains = cache.domains(term.topology_key)
                has = ids >= 0
                per_domain = np.bincount(ids[has], weights=counts[has], minlength=domains)
                failing |= _per_node(per_domain, ids) > 0
            charge(ANTI_AFFINITY_RULES, failing)
        if index.required_anti_affinity_groups:
            own_labels = namespace_labels(pod.namespace)
            blocked: dict[str, np.ndarray] = {}
            for group in index.affinity_groups():
                for term in group.terms.required_anti_affinity:
                    if not term.matches(pod.namespace, pod.labels, own_labels):
                        continue
                    ids, domains = cache.domains(term.topology_key)
                    at, _ = group.arrays()
                    dom = ids[at]
                    domain_blocked = blocked.get(term.topology_key)
                    if domain_blocked is None:
                        domain_blocked = blocked[term.topology_key] = np.zeros(domains, dtype=bool)
                    domain_blocked[dom[dom >= 0]] = True
            if blocked:
                failing = np.zeros(rows, dtype=bool)
                for topology_key, domain_blocked in blocked.items():
                    ids, _ = cache.domains(topology_key)
                    failing |= _per_node(domain_blocked, ids)
                charge(EXISTING_ANTI_AFFINITY_RULES, failing)
        return masks


class InterPodAffinityScore(ScorePlugin):
    name = "InterPodAffinity"

    def locality(self, pod: PodRecord, cache: SchedulerCache) -> str:
        return (
            NO_OPINION if not pod.pod_affinity.has_preferred and not cache.assigned.has_affinity_pods else ""
        )

    def score(
        self, pod: PodRecord, cache: SchedulerCache, rows: np.ndarray, static: StaticResults
    ) -> np.ndarray | None:
        terms = pod.pod_affinity
        index = cache.assigned
        if not terms.has_preferred and not index.has_affinity_pods:
            return None
        per_key: dict[str, np.ndarray] = {}

        def add(topology_key: str, groups: list[RowCounts] | RowCounts, weight: int) -> None:
            ids, domains = cache.domains(topology_key)
            total = per_key.get(topology_key)
            if total is None:
                total = per_key[topology_key] = np.zeros(domains, dtype=np.float64)
            for group in groups if isinstance(groups, list) else (groups,):
                at, counts = group.arrays()
                total += _per_domain(ids, domains, at, counts) * weight

        namespace_labels = cache.labels_of_namespace
        if terms is not NO_AFFINITY:
            for term in terms.preferred_affinity:
                add(
                    term.topology_key, list(index.groups_matching_all((term,), namespace_labels)), term.weight
                )
            for term in terms.preferred_anti_affinity:
                add(
                    term.topology_key,
                    list(index.groups_matching_all((term,), namespace_labels)),
                    -term.weight,
                )
        own_labels = namespace_labels(pod.namespace)
        for group in index.affinity_groups():
            existing = group.terms
            for term in existing.required_affinity:
                if term.matches(pod.namespace, pod.labels, own_labels):
                    add(term.topology_key, group, HARD_POD_AFFINITY_WEIGHT)
            for term in existing.preferred_affinity:
                if term.matches(pod.namespace, pod.labels, own_labels):
                    add(term.topology_key, group, term.weight)
            for term in existing.preferred_anti_affinity:
                if term.matches(pod.namespace, pod.labels, own_labels):
                    add(term.topology_key, group, -term.weight)
        if not per_key:
            return None
        scores = np.zeros(rows.shape[0], dtype=np.int64)
        for topology_key, per_domain in per_key.items():
            ids, _ = cache.domains(topology_key)
            scores += _per_node(per_domain.astype(np.int64), ids[rows])
        return normalize_min_max(scores)


def normalize_min_max(scores: np.ndarray) -> np.ndarray:
    """kube's InterPodAffinity NormalizeScore: 100 * (s - min) / (max - min), truncated; all 0 when equal."""
    if scores.size == 0:
        return scores
    low, high = int(scores.min()), int(scores.max())
    if high == low:
        return np.zeros(scores.shape, dtype=np.int64)
    return (MAX_NODE_SCORE * ((scores - low) / (high - low))).astype(np.int64)
