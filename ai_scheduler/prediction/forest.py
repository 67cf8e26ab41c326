"""A fitted HistGradientBoostingRegressor as plain arrays, evaluated with numpy over all its trees at once.

Why: scikit-learn predicts tree by tree from Python (one call into compiled code per boosting iteration,
each starting its OpenMP threads), which costs milliseconds for a single row of a few hundred trees; the
daemon predicts one pod at a time. Here every tree's nodes sit in one set of flat arrays and a batch walks
all trees together, one numpy step per tree level (a tenth of a millisecond or so for one pod). And the
model file then holds only numbers (an .npz, read with allow_pickle=False): loading it runs no code and
does not depend on scikit-learn's version; the daemon never imports scikit-learn.

The walk is scikit-learn's own (`_predict_one_from_raw_data`): NaN goes the node's missing-value way; a
categorical split sends a category in its left set left, another category seen in training right, and a
category never seen in training (or a negative one) the missing-value way; a numeric split sends
`x <= threshold` left. The export reads the estimator's tree records (`_predictors`, `_baseline_prediction`
and the known categories of its binner), which are not public API: `from_estimator` therefore checks
its result against the estimator's own `predict` and refuses (ForestError) if they differ, so a change
in a later scikit-learn shows at fit time, never as a wrong prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_CATEGORY = 256  # scikit-learn's bitsets: 8 words of 32 bits
MAX_DEPTH = 64  # a walk deeper than this is a damaged model (31 leaves make at most 30 levels)


class ForestError(ValueError):
    """A forest that cannot be exported or used."""


def _bits(words: np.ndarray) -> np.ndarray:
    """Bitsets of 8 uint32 words each, as rows of 256 booleans (bit v of a row: category v)."""
    if not len(words):
        return np.zeros((0, MAX_CATEGORY), dtype=bool)
    raw = np.ascontiguousarray(words, dtype="<u4").view(np.uint8)
    return np.unpackbits(raw, axis=1, bitorder="little").astype(bool)


@dataclass(frozen=True, slots=True)
class Forest:
    """The nodes of all trees, concatenated; `children` and `roots` index into them. A leaf is its own
    two children, so that a walk of `depth` steps ends on a leaf in every tree."""

    feature: np.ndarray  # int64: the feature a split reads (0 at a leaf)
    threshold: np.ndarray  # float64: numeric splits go left at x <= threshold
    children: np.ndarray  # int64 (nodes, 2): right, left
    missing_left: np.ndarray  # bool: where NaN and unknown categories go
    categorical: np.ndarray  # bool: a categorical split
    split: np.ndarray  # int64: a categorical split's row of goes_left (0 elsewhere)
    goes_left: np.ndarray  # bool (categorical splits + 1, 256): the categories a split sends left
    value: np.ndarray  # float64: a leaf's value (0 elsewhere)
    roots: np.ndarray  # int64: the first node of each tree
    baseline: float
    depth: int  # the deepest leaf

    @classmethod
    def from_estimator(cls, estimator: Any, probe: np.ndarray) -> Forest:
        """Export a fitted single-output HistGradientBoostingRegressor; `probe` (rows of its input) is
        predicted both ways to check the export."""
        try:
            forest = cls._export(estimator, probe.shape[1])
            mine = forest.predict_raw(probe)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise ForestError(f"cannot export this scikit-learn's gradient boosting trees: {exc}") from exc
        theirs = np.asarray(estimator.predict(probe), dtype=np.float64)
        if mine.shape != theirs.shape or not np.allclose(mine, theirs, rtol=1e-9, atol=1e-9):
            raise ForestError("the exported trees do not predict as scikit-learn does")
        return forest

    @classmethod
    def _export(cls, estimator: Any, n_features: int) -> Forest:
        if estimator.n_trees_per_iteration_ != 1:
            raise ForestError("only a single-output regressor can be exported")
        known_words, f_idx_map = estimator._bin_mapper.make_known_categories_bitsets()
        known = np.zeros((n_features, MAX_CATEGORY), dtype=bool)
        if estimator.is_categorical_ is not None:
            known_bits = _bits(np.asarray(known_words))
            for f in np.flatnonzero(estimator.is_categorical_):
                known[f] = known_bits[f_idx_map[f]]
        parts: dict[str, list[np.ndarray]] = {name: [] for name in ARRAYS if name != "roots"}
        parts["goes_left"].append(np.zeros((1, MAX_CATEGORY), dtype=bool))  # row 0: no categorical split
        roots = []
        offset = 0
        split = 1
        for (tree,) in estimator._predictors:
            nodes = tree.nodes
            n = len(nodes)
            leaf = nodes["is_leaf"].astype(bool)
            own = np.arange(offset, offset + n)
            categorical = nodes["is_categorical"].astype(bool) & ~leaf
            missing_left = nodes["missing_go_to_left"].astype(bool)
            roots.append(offset)
            parts["feature"].append(np.where(leaf, 0, nodes["feature_idx"].astype(np.int64)))
            parts["threshold"].append(nodes["num_threshold"].astype(np.float64))
            parts["children"].append(np.stack([
                np.where(leaf, own, nodes["right"].astype(np.int64) + offset),
                np.where(leaf, own, nodes["left"].astype(np.int64) + offset),
            ], axis=1))
            parts["missing_left"].append(missing_left)
            parts["categorical"].append(categorical)
            # As scikit-learn walks a categorical split: its left set goes left; another category seen in
            # training goes right; one never seen goes where missing values go.
            left_sets = _bits(np.asarray(tree.raw_left_cat_bitsets))
            at = np.flatnonzero(categorical)
            row = np.zeros(n, dtype=np.int64)
            row[at] = np.arange(split, split + len(at))
            parts["split"].append(row)
            split += len(at)
            unseen = ~known[nodes["feature_idx"][at]]
            parts["goes_left"].append(left_sets[nodes["bitset_idx"][at]] | (unseen & missing_left[at, None]))
            parts["value"].append(np.where(leaf, nodes["value"].astype(np.float64), 0.0))
            offset += n
        arrays = {name: np.concatenate(chunks) for name, chunks in parts.items()}
        roots_array = np.asarray(roots, dtype=np.int64)
        baseline = float(np.asarray(estimator._baseline_prediction, dtype=np.float64).reshape(-1)[0])
        return cls(**arrays, roots=roots_array, baseline=baseline,
                   depth=_depth(arrays["children"], roots_array))

    def predict_raw(self, rows: np.ndarray) -> np.ndarray:
        """The sum of the trees' leaves for each row (n_rows, n_features), plus the baseline."""
        total: np.ndarray = self.leaves(rows).sum(axis=1) + self.baseline
        return total

    @classmethod
    def stack(cls, forests: Sequence[Forest]) -> Forest:
        """The trees of `forests` in one forest (baseline 0), to walk them all at once: its `leaves` are
        theirs, in order."""
        nodes = np.cumsum([0, *(len(f.feature) for f in forests)])
        splits = np.cumsum([0, *(len(f.goes_left) for f in forests)])
        return cls(
            feature=np.concatenate([f.feature for f in forests]),
            threshold=np.concatenate([f.threshold for f in forests]),
            children=np.concatenate([f.children + nodes[i] for i, f in enumerate(forests)]),
            missing_left=np.concatenate([f.missing_left for f in forests]),
            categorical=np.concatenate([f.categorical for f in forests]),
            split=np.concatenate([f.split + splits[i] for i, f in enumerate(forests)]),
            goes_left=np.concatenate([f.goes_left for f in forests]),
            value=np.concatenate([f.value for f in forests]),
            roots=np.concatenate([f.roots + nodes[i] for i, f in enumerate(forests)]),
            baseline=0.0,
            depth=max(f.depth for f in forests),
        )

    def leaves(self, rows: np.ndarray) -> np.ndarray:
        """The value of the leaf each row (n_rows, n_features) reaches in each tree: (n_rows, n_trees)."""
        n_rows, n_features = rows.shape
        flat = np.ascontiguousarray(rows, dtype=np.float64).ravel()
        base = (np.arange(n_rows) * n_features)[:, None]
        node = np.broadcast_to(self.roots, (n_rows, len(self.roots)))
        children = self.children.ravel()
        for _ in range(self.depth):
            x = flat[base + self.feature[node]]
            go_left = x <= self.threshold[node]
            missing = np.isnan(x)
            if missing.any():
                go_left = np.where(missing, self.missing_left[node], go_left)
            categorical = self.categorical[node] & ~missing
            if categorical.any():
                # scikit-learn: a negative category is a missing value; none of ours is past 255.
                code = np.where(categorical, np.clip(x, -1, MAX_CATEGORY - 1), 0).astype(np.int64)
                category_left = np.where(code < 0, self.missing_left[node],
                                         self.goes_left[self.split[node], np.maximum(code, 0)])
                go_left = np.where(categorical, category_left, go_left)
            node = children[node * 2 + go_left]
        values: np.ndarray = self.value[node]
        return values

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The arrays to store (the depth is worked out again on load)."""
        stored = {name: getattr(self, name) for name in ARRAYS}
        stored["baseline"] = np.array([self.baseline])
        return {f"{prefix}{name}": value for name, value in stored.items()}

    @classmethod
    def from_arrays(cls, arrays: Any, prefix: str, n_features: int) -> Forest:
        """Rebuild from `arrays` (an npz file's), checking every index so that a damaged file fails here."""
        try:
            fields = {name: np.asarray(arrays[f"{prefix}{name}"]) for name in (*ARRAYS, "baseline")}
        except KeyError as exc:
            raise ForestError(f"missing array {exc}") from None
        nodes = len(fields["feature"])
        splits = len(fields["goes_left"])
        shapes = {"children": (nodes, 2), "goes_left": (splits, MAX_CATEGORY), "baseline": (1,)}
        for name, value in fields.items():
            if value.dtype.kind != KINDS[name] or value.shape != shapes.get(name, value.shape[:1]) or (
                    name not in shapes and value.shape != (len(value),)):
                raise ForestError(f"array {prefix}{name} has the wrong type or shape")
        for name in ("threshold", "missing_left", "categorical", "split", "value"):
            if len(fields[name]) != nodes:
                raise ForestError(f"array {prefix}{name} has the wrong length")
        children, roots, feature = fields["children"], fields["roots"], fields["feature"]
        if (not len(roots) or _outside(roots, nodes) or _outside(children, nodes)
                or _outside(feature, n_features) or _outside(fields["split"], splits)
                or not np.isfinite(fields["baseline"]).all()):
            raise ForestError(f"the trees of {prefix.rstrip('_')} are damaged")
        depth = _depth(children, roots)
        return cls(feature, fields["threshold"], children, fields["missing_left"], fields["categorical"],
                   fields["split"], fields["goes_left"], fields["value"], roots, float(fields["baseline"][0]),
                   depth)


ARRAYS = ("feature", "threshold", "children", "missing_left", "categorical", "split", "goes_left", "value",
          "roots")
KINDS = {"feature": "i", "threshold": "f", "children": "i", "missing_left": "b", "categorical": "b",
         "split": "i", "goes_left": "b", "value": "f", "roots": "i", "baseline": "f"}


def _outside(values: np.ndarray, high: int) -> bool:
    return bool(((values < 0) | (values >= high)).any())


def _depth(children: np.ndarray, roots: np.ndarray) -> int:
    """The depth of the deepest leaf (a leaf is its own child); ForestError past MAX_DEPTH (a cycle)."""
    frontier = np.unique(roots)
    for depth in range(MAX_DEPTH + 1):
        inner = frontier[(children[frontier, 0] != frontier) | (children[frontier, 1] != frontier)]
        if not len(inner):
            return depth
        frontier = np.unique(children[inner].ravel())
    raise ForestError(f"a tree is deeper than {MAX_DEPTH} levels: the model is damaged")
