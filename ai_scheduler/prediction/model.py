"""`RunTimeModel`: a median and an upper quantile of a job's run time, fitted on history.

Why scikit-learn's HistGradientBoostingRegressor (and not LightGBM): scikit-learn is already a dependency
of the project, built on the numpy and scipy it uses anyway, with wheels for every platform the daemon
image targets; its histogram gradient boosting is LightGBM's algorithm, with the quantile (pinball) loss
and native categorical splits built in, and at the sizes of a cluster's history (thousands to a few
hundred thousand jobs) it fits in seconds. LightGBM would add a native library to the image for no gain
here.

Design:
- Two models, one per quantile (0.5 and the upper one, 0.9 by default), each with loss="quantile". The
  upper one is what a backfilling scheduler should reserve for; the median is the typical run time.
  An upper prediction below the median (the two are fitted apart) is raised to the median.
- The target is the logarithm of the run time. Run times are heavy-tailed (seconds to weeks): in log
  space an error of a factor weighs the same on a short job as on a long one, and the boosting steps are
  not dominated by a few week-long jobs. Quantiles commute with a monotone transform, so the exponential
  of a fitted quantile of log run time is the same quantile of run time: nothing is biased by the
  transform (as a mean would be).
- Strings (user, group, namespace, task type, workload class, name stem) are categorical features, coded
  as integers 0..n-1 with a vocabulary kept in the model (so that the estimator's own category encoding
  is the identity, which the export to arrays relies on). A value not in the vocabulary is a missing
  value (NaN), which the estimator routes on its own: values seen fewer than `min_count` times in
  training (where it learns where such values go), values past the `MAX_CATEGORIES` most frequent (the
  estimator's bound on a categorical feature), and at prediction time anything new. Values are
  normalised (lower case, punctuation to '-') so that a trace's `Training` and a pod label's `training`
  are one value. Numbers (cpu, memory, GPU thousandths, gang size, a Task's declared model and dataset
  sizes, estimate) are used as they are; a missing size or estimate is NaN, which the estimator routes
  on its own (a column no training job has a value in is a constant, which no tree splits on).
- The two fitted estimators are exported to plain arrays (forest.py) and walked with numpy: one pod
  costs a fraction of a millisecond where scikit-learn's own tree-by-tree predict costs milliseconds, and
  `predict` also keeps recent predictions in a small cache keyed by the (frozen, hashable) features, since
  the pods of one job share them. `predict_many` predicts a batch in one walk.
- `save` writes one .npz file of those arrays and a JSON header (format name and version, the quantile,
  the vocabulary, what it was fitted on); `load` reads it with allow_pickle=False, so a model file runs no
  code when loaded and does not depend on the scikit-learn version it was fitted with (the daemon does
  not import scikit-learn at all), and refuses a file that is not one, is damaged or of another format
  version with `ModelError`.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ai_scheduler.prediction.features import Features
from ai_scheduler.prediction.forest import Forest, ForestError

FORMAT = "ai-scheduler.run-time-model"
FORMAT_VERSION = 2  # 2: a Task's declared model and dataset sizes (model_parameters, dataset_bytes)
CATEGORICAL = ("user", "group", "namespace", "task_type", "workload_class", "name_stem")
NUMERIC = ("cpu", "memory", "gpu_milli", "gang_size", "model_parameters", "dataset_bytes", "estimate")
UNKNOWN = math.nan  # the code of a value not in the vocabulary: a missing value
MAX_CATEGORIES = 254  # codes 0..253: with the missing values' bin, within the estimator's 255 bins
MIN_SECONDS = 1.0  # run times are floored here before the logarithm
CACHE_SIZE = 4096
_PUNCTUATION = re.compile(r"[^a-z0-9]+")


class ModelError(ValueError):
    """A model file that cannot be used (not one, damaged, of another version), or a fit that cannot be
    made (too little history)."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """The predicted run time in seconds: the median and the upper quantile (`quantile` of the model)."""

    median_s: float
    upper_s: float

    def scaled(self, factor: float) -> Prediction:
        return Prediction(self.median_s * factor, self.upper_s * factor)


def category(text: str) -> str:
    """A categorical value as the model compares it: lower case, runs of punctuation as one '-'."""
    return _PUNCTUATION.sub("-", text.lower()).strip("-")


def _encode_column(values: Sequence[str], min_count: int) -> dict[str, int]:
    counts = Counter(category(value) for value in values)
    kept = [value for value, count in counts.most_common() if count >= min_count][:MAX_CATEGORIES]
    return {value: code for code, value in enumerate(sorted(kept))}


class RunTimeModel:
    """A fitted pair of quantile models (as exported forests) and the vocabulary of their categorical
    features. Build one with `fit` or `load`."""

    __slots__ = ("_both", "_cache", "_median", "_upper", "info", "quantile", "vocabulary")

    def __init__(self, quantile: float, vocabulary: dict[str, dict[str, int]], median: Forest, upper: Forest,
                 info: dict[str, Any] | None = None) -> None:
        self.quantile = quantile
        self.vocabulary = vocabulary
        self._median = median
        self._upper = upper
        self._both = Forest.stack([median, upper])  # both walked at once: half the numpy steps
        self.info: dict[str, Any] = dict(info or {})
        self._cache: OrderedDict[Features, Prediction] = OrderedDict()

    @classmethod
    def fit(cls, features: Sequence[Features], durations: Sequence[float], quantile: float = 0.9, *,
            seed: int = 0, min_count: int = 2, max_iter: int = 300, learning_rate: float = 0.05,
            max_depth: int = 8, min_samples_leaf: int = 5) -> RunTimeModel:
        """Fit the median and the `quantile` models on `features` and their run times in seconds.

        `min_count`: a categorical value seen fewer times is coded as unknown (a one-off job name teaches
        nothing). The other arguments are the estimator's; the defaults suit histories of hundreds to
        hundreds of thousands of jobs (the estimator stops early past 10,000)."""
        import sklearn
        from sklearn.ensemble import HistGradientBoostingRegressor

        if not 0.5 < quantile < 1:
            raise ModelError(f"the upper quantile must be above 0.5 and below 1, got {quantile}")
        if len(features) != len(durations):
            raise ModelError(f"{len(features)} feature rows for {len(durations)} run times")
        if len(features) < 2:
            raise ModelError(f"a model needs at least 2 jobs with a run time, got {len(features)}")
        bad = [d for d in durations if not (math.isfinite(d) and d >= 0)]
        if bad:
            raise ModelError(f"run times must be finite seconds, at least 0, got {bad[0]}")
        vocabulary = {column: _encode_column([getattr(f, column) for f in features], min_count)
                      for column in CATEGORICAL}
        matrix = _matrix(vocabulary, features)
        # A column with no value at all (no job gave an estimate) breaks the estimator's binning: make it
        # a constant, which no tree splits on, so that what a prediction puts there does not matter.
        matrix[:, np.isnan(matrix).all(axis=0)] = 0.0
        target = np.log(np.maximum(np.asarray(durations, dtype=np.float64), MIN_SECONDS))
        # The export is checked on the training rows and on rows of unknown categories and no estimate.
        unknown = matrix[:1].copy()
        unknown[:, :len(CATEGORICAL)] = UNKNOWN
        unknown[:, -1] = math.nan
        probe = np.vstack([matrix, unknown])
        forests: list[Forest] = []
        for q in (0.5, quantile):
            estimator = HistGradientBoostingRegressor(
                loss="quantile", quantile=q, learning_rate=learning_rate, max_iter=max_iter,
                max_depth=max_depth, min_samples_leaf=min_samples_leaf,
                categorical_features=list(range(len(CATEGORICAL))), random_state=seed,
            )
            estimator.fit(matrix, target)
            try:
                forests.append(Forest.from_estimator(estimator, probe))
            except ForestError as exc:
                raise ModelError(f"{exc} (scikit-learn {sklearn.__version__})") from exc
        info = {"jobs": len(features), "sklearn": sklearn.__version__}
        return cls(quantile, vocabulary, forests[0], forests[1], info)

    def matrix(self, features: Sequence[Features]) -> np.ndarray:
        """The estimators' input for `features`: the categorical codes, then the numbers."""
        return _matrix(self.vocabulary, features)

    def predict(self, features: Features) -> Prediction:
        """The prediction for one job (cached: the pods of one job share their features)."""
        cached = self._cache.get(features)
        if cached is not None:
            self._cache.move_to_end(features)
            return cached
        prediction = self.predict_many([features])[0]
        self._cache[features] = prediction
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return prediction

    def predict_many(self, features: Sequence[Features]) -> list[Prediction]:
        """The predictions for many jobs, in one walk of each forest."""
        if not features:
            return []
        leaves = self._both.leaves(self.matrix(features))
        split = len(self._median.roots)
        median = np.exp(leaves[:, :split].sum(axis=1) + self._median.baseline)
        upper = np.maximum(np.exp(leaves[:, split:].sum(axis=1) + self._upper.baseline), median)
        return [Prediction(float(m), float(u)) for m, u in zip(median, upper, strict=True)]

    def save(self, path: str | Path) -> None:
        """Write the model to one file (an .npz whatever its name), replacing it."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": FORMAT, "version": FORMAT_VERSION, "quantile": self.quantile,
                  "vocabulary": self.vocabulary, "info": self.info}
        arrays: dict[str, Any] = {"header": np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                  **self._median.arrays("median_"), **self._upper.arrays("upper_")}
        temporary = target.with_name(f".{target.name}.tmp")
        with temporary.open("wb") as out:
            np.savez_compressed(out, **arrays)
        temporary.replace(target)

    @classmethod
    def load(cls, path: str | Path) -> RunTimeModel:
        """Read a model written by `save`; ModelError names the file and what is wrong with it."""
        try:
            with np.load(Path(path), allow_pickle=False) as arrays:
                header = json.loads(arrays["header"].tobytes()) if "header" in arrays.files else None
                if not isinstance(header, dict) or header.get("format") != FORMAT:
                    raise ModelError(f"{path}: not a run-time model file (written by `ai-scheduler learn`)")
                if header.get("version") != FORMAT_VERSION:
                    version = header.get("version")
                    raise ModelError(f"{path}: model format version {version!r}; this scheduler reads "
                                     f"version {FORMAT_VERSION}: run `ai-scheduler learn` again")
                vocabulary = _vocabulary(header.get("vocabulary"))
                quantile = header.get("quantile")
                if vocabulary is None or not isinstance(quantile, float) or not 0.5 < quantile < 1:
                    raise ModelError(f"{path}: the model's header is damaged")
                n_features = len(CATEGORICAL) + len(NUMERIC)
                median = Forest.from_arrays(arrays, "median_", n_features)
                upper = Forest.from_arrays(arrays, "upper_", n_features)
        except ModelError:
            raise
        except FileNotFoundError:
            raise ModelError(f"{path}: no such model file") from None
        except ForestError as exc:
            raise ModelError(f"{path}: {exc}") from None
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            # np.load of a damaged or foreign file: no zip, a damaged member, not JSON, ...
            raise ModelError(f"{path}: not a run-time model file ({type(exc).__name__}: {exc})") from None
        info = header.get("info")
        return cls(quantile, vocabulary, median, upper, info if isinstance(info, dict) else {})


def _matrix(vocabulary: dict[str, dict[str, int]], features: Sequence[Features]) -> np.ndarray:
    users, groups, namespaces = vocabulary["user"], vocabulary["group"], vocabulary["namespace"]
    task_types, classes = vocabulary["task_type"], vocabulary["workload_class"]
    stems = vocabulary["name_stem"]
    return np.array([
        (users.get(category(f.user), UNKNOWN), groups.get(category(f.group), UNKNOWN),
         namespaces.get(category(f.namespace), UNKNOWN), task_types.get(category(f.task_type), UNKNOWN),
         classes.get(category(f.workload_class), UNKNOWN), stems.get(category(f.name_stem), UNKNOWN),
         f.cpu, f.memory, f.gpu_milli, f.gang_size, _number(f.model_parameters), _number(f.dataset_bytes),
         _number(f.estimate))
        for f in features
    ], dtype=np.float64).reshape(len(features), len(CATEGORICAL) + len(NUMERIC))


def _number(value: float | None) -> float:
    return math.nan if value is None else value


def _vocabulary(value: Any) -> dict[str, dict[str, int]] | None:
    """The vocabulary from a model file's header, or None when it is not one."""
    if not isinstance(value, dict) or set(value) != set(CATEGORICAL):
        return None
    for codes in value.values():
        if not isinstance(codes, dict) or not all(isinstance(key, str) and type(code) is int
                                                  and 0 <= code < MAX_CATEGORIES
                                                  for key, code in codes.items()):
            return None
    return value
