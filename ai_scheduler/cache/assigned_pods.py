"""The pods counted on nodes, grouped so that "which pods match this selector, per node" is cheap.

kube-scheduler's InterPodAffinity and PodTopologySpread walk every pod on
every node at PreFilter, matching each against the incoming pod's terms (in
16 goroutines). Pods are mostly replicas of a few templates, so we group
them instead:

- by (namespace, labels): a *label group* holds how many of its pods count on
  each node row. A selector is matched once per group, not once per pod, and
  the groups worth matching are found through an index by (key, value) and by
  namespace. The per-row counts of the matching groups are summed with numpy.
- by parsed affinity (`PodAffinityTerms`, one object per distinct spec and
  namespace): an *affinity group* holds where the pods carrying those terms
  are, so the existing pods' anti-affinity against an incoming pod is one
  match per group, not a scan.

The cache calls `add` whenever a pod starts or stops counting on a row
(bound, assumed, finished, deleted, its node removed), exactly where it
updates the resource columns, so the groups always agree with them.
`version` changes with every such call: per-cycle results computed from the
index stay valid while it does not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.cache.selectors import NO_AFFINITY, AffinityTerm, LabelSelector, PodAffinityTerms

_LabelKey = tuple[str, tuple[tuple[str, str], ...]]
NamespaceLabels = Callable[[str], Mapping[str, str] | None]


class RowCounts:
    """How many pods of a group count on each node row.

    Small groups (most: a pod or a few) keep a dict and build the arrays numpy needs when asked;
    a group on `DENSE_ROWS` rows or more (a large set of replicas, which changes with nearly every
    placement) also keeps a dense column over the node rows, updated in place, so that reading it
    costs no rebuild.
    """

    __slots__ = ("_arrays", "dense", "rows")

    DENSE_ROWS = 64

    def __init__(self) -> None:
        self.rows: dict[int, int] = {}
        self.dense: np.ndarray | None = None
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, row: int, sign: int) -> None:
        count = self.rows.get(row, 0) + sign
        if count > 0:
            self.rows[row] = count
        else:
            self.rows.pop(row, None)
            count = 0
        self._arrays = None
        dense = self.dense
        if dense is not None:
            if row >= dense.shape[0]:
                dense = self.dense = np.concatenate(
                    [dense, np.zeros(max(row + 1, 2 * dense.shape[0]) - dense.shape[0], dtype=np.int64)]
                )
            dense[row] = count
        elif len(self.rows) >= self.DENSE_ROWS:
            size = max(self.rows) + 1
            dense = np.zeros(2 * size, dtype=np.int64)
            at, counts = self.arrays()  # from the dict: `self.dense` is set only once it holds them
            dense[at] = counts
            self.dense = dense

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows, counts) as int arrays."""
        if self._arrays is None:
            if self.dense is not None:
                at = np.flatnonzero(self.dense)
                self._arrays = (at, self.dense[at])
            else:
                size = len(self.rows)
                self._arrays = (
                    np.fromiter(self.rows.keys(), dtype=np.intp, count=size),
                    np.fromiter(self.rows.values(), dtype=np.int64, count=size),
                )
        return self._arrays

    def add_into(self, total: np.ndarray) -> None:
        """Add the per-row counts into `total` (one entry per node row)."""
        dense = self.dense
        if dense is not None:
            size = min(dense.shape[0], total.shape[0])
            total[:size] += dense[:size]
            return
        at, counts = self.arrays()
        total[at] += counts  # a group's rows are distinct

    def __bool__(self) -> bool:
        return bool(self.rows)


class LabelGroup(RowCounts):
    __slots__ = ("labels", "namespace")

    def __init__(self, namespace: str, labels: Mapping[str, str]) -> None:
        super().__init__()
        self.namespace = namespace
        self.labels = labels


class AffinityGroup(RowCounts):
    __slots__ = ("terms",)

    def __init__(self, terms: PodAffinityTerms) -> None:
        super().__init__()
        self.terms = terms


class AssignedPodIndex:
    """Label groups and affinity groups of the pods that count on nodes."""

    def __init__(self) -> None:
        self.version = 0
        self._groups: dict[_LabelKey, LabelGroup] = {}
        self._by_pair: dict[tuple[str, str], set[_LabelKey]] = {}
        self._by_namespace: dict[str, set[_LabelKey]] = {}
        self._affinity: dict[int, AffinityGroup] = {}  # by id() of the interned terms
        self.required_anti_affinity_groups = 0  # affinity groups whose pods have required anti-affinity

    def add(self, row: int, pod: PodRecord, sign: int) -> None:
        """A pod starts (sign 1) or stops (sign -1) counting on a node row."""
        self.version += 1
        key = (pod.namespace, tuple(sorted(pod.labels.items())))
        group = self._groups.get(key)
        if group is None:
            if sign < 0:
                return
            group = self._groups[key] = LabelGroup(pod.namespace, pod.labels)
            for pair in key[1]:
                self._by_pair.setdefault(pair, set()).add(key)
            self._by_namespace.setdefault(pod.namespace, set()).add(key)
        group.add(row, sign)
        if not group:
            del self._groups[key]
            for pair in key[1]:
                keys = self._by_pair[pair]
                keys.discard(key)
                if not keys:
                    del self._by_pair[pair]
            keys = self._by_namespace[pod.namespace]
            keys.discard(key)
            if not keys:
                del self._by_namespace[pod.namespace]
        terms = pod.pod_affinity
        if terms is not NO_AFFINITY:
            self._add_affinity(row, terms, sign)

    def _add_affinity(self, row: int, terms: PodAffinityTerms, sign: int) -> None:
        affinity = self._affinity.get(id(terms))
        if affinity is None:
            if sign < 0:
                return
            affinity = self._affinity[id(terms)] = AffinityGroup(terms)
            if terms.required_anti_affinity:
                self.required_anti_affinity_groups += 1
        affinity.add(row, sign)
        if not affinity:
            del self._affinity[id(terms)]
            if terms.required_anti_affinity:
                self.required_anti_affinity_groups -= 1

    # ------------------------------------------------------------------ queries
    def _candidates(self, term: AffinityTerm) -> Iterator[LabelGroup]:
        """Label groups that may match `term`: narrowed by a required label, else by namespace."""
        best: set[_LabelKey] | None = None
        for key, values in term.selector.required_pairs():
            found: set[_LabelKey] = set()
            for value in values:
                found |= self._by_pair.get((key, value), set())
            if best is None or len(found) < len(best):
                best = found
            if not best:
                return
        if best is None and term.namespace_selector.nothing:
            best = set()
            for namespace in term.namespaces:
                best |= self._by_namespace.get(namespace, set())
        if best is None:
            yield from self._groups.values()
            return
        groups = self._groups
        for group_key in best:
            yield groups[group_key]

    def groups_matching_all(
        self, terms: Sequence[AffinityTerm], namespace_labels: NamespaceLabels
    ) -> list[LabelGroup]:
        """Label groups whose pods match every term (namespace and selector)."""
        if not terms:
            return []
        matched = []
        for group in self._candidates(terms[0]):
            labels = group.labels
            namespace = group.namespace
            if all(term.matches(namespace, labels, namespace_labels(namespace)) for term in terms):
                matched.append(group)
        return matched

    def counts_matching_all(
        self, terms: Sequence[AffinityTerm], namespace_labels: NamespaceLabels, rows: int
    ) -> np.ndarray:
        """Per node row, how many counted pods match every term."""
        return sum_rows(self.groups_matching_all(terms, namespace_labels), rows)

    def groups_in_namespace(self, namespace: str, selector: LabelSelector) -> list[LabelGroup]:
        """Label groups of one namespace whose labels match `selector` (PodTopologySpread's count)."""
        best = self._by_namespace.get(namespace)
        if best is None or selector.nothing:
            return []
        for key, values in selector.required_pairs():  # narrowed by the rarest single required label
            if len(values) == 1:
                found = self._by_pair.get((key, next(iter(values))))
                if found is None:
                    return []
                if len(found) < len(best):
                    best = found
        groups = self._groups
        return [groups[k] for k in best if k[0] == namespace and selector.matches(groups[k].labels)]

    def affinity_groups(self) -> Iterator[AffinityGroup]:
        return iter(self._affinity.values())

    @property
    def has_affinity_pods(self) -> bool:
        return bool(self._affinity)

    def __len__(self) -> int:
        return len(self._groups)

    def label_counts(self) -> Counter[tuple[str, tuple[tuple[str, str], ...], int]]:
        """(namespace, labels, row) -> pods: what the groups hold, for the cache's consistency check."""
        held: Counter[tuple[str, tuple[tuple[str, str], ...], int]] = Counter()
        for (namespace, labels), group in self._groups.items():
            for row, count in group.rows.items():
                held[(namespace, labels, row)] = count
        return held


def sum_rows(groups: Sequence[RowCounts], rows: int) -> np.ndarray:
    """The groups' per-row counts added up over `rows` node rows."""
    total = np.zeros(rows, dtype=np.int64)
    for group in groups:
        group.add_into(total)
    return total
