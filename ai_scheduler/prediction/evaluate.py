"""How good a run-time model is: a time-ordered held-out split, the model against two baselines.

The jobs are ordered by submit time and the last `test_fraction` of them held out, so the model is
judged as it would be used: fitted on the past, predicting the future (a random split would let it see
the later runs of a job it is asked about). Each method gives a typical run time and an upper bound:

- model: its median and its upper quantile, fitted on the earlier part;
- user estimate: the user's own estimate as both (only on the jobs that carry one; the report says how
  many). It is also what the model is compared with on just those jobs;
- user history: the mean of the user's jobs in the earlier part (the global mean for a user who has
  none), and the same quantile of those jobs as the bound.

Two figures per method: the median absolute error of the typical run time, in seconds, and the share of
jobs that ran longer than the upper bound (for a well-calibrated upper quantile q, about 1 - q).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ai_scheduler.prediction.features import Features
from ai_scheduler.prediction.model import RunTimeModel


@dataclass(frozen=True, slots=True)
class Sample:
    """One job of the history: its features, its run time and when it was submitted (seconds)."""

    features: Features
    duration: float
    submit_time: float


@dataclass(frozen=True, slots=True)
class Score:
    """One method's figures on `jobs` held-out jobs (None where it had no job to predict)."""

    method: str
    jobs: int
    median_abs_error_s: float | None
    exceed_share: float | None  # share of the jobs that ran longer than its upper bound


@dataclass(slots=True)
class Report:
    quantile: float
    train_jobs: int
    test_jobs: int
    scores: list[Score] = field(default_factory=list)

    def score(self, method: str) -> Score:
        return next(score for score in self.scores if score.method == method)

    def as_dict(self) -> dict[str, Any]:
        return {"quantile": self.quantile, "train_jobs": self.train_jobs, "test_jobs": self.test_jobs,
                "scores": [asdict(score) for score in self.scores]}


MODEL = "model"
MODEL_WITH_ESTIMATE = "model (jobs with an estimate)"
ESTIMATE = "user estimate"
HISTORY = "user history (mean of past jobs)"


def split_by_time(samples: Sequence[Sample], test_fraction: float) -> tuple[list[Sample], list[Sample]]:
    """The earlier `1 - test_fraction` of the samples by submit time, and the later rest (at least one of
    each when there are two)."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"the test fraction must be above 0 and below 1, got {test_fraction}")
    ordered = sorted(samples, key=lambda sample: sample.submit_time)
    held = min(max(round(len(ordered) * test_fraction), 1), len(ordered) - 1)
    return ordered[:len(ordered) - held], ordered[len(ordered) - held:]


def _score(method: str, actual: np.ndarray, typical: np.ndarray, upper: np.ndarray) -> Score:
    if not len(actual):
        return Score(method, 0, None, None)
    return Score(method, len(actual), float(np.median(np.abs(typical - actual))),
                 float(np.mean(actual > upper)))


def evaluate(train: Sequence[Sample], test: Sequence[Sample], quantile: float = 0.9, *, seed: int = 0,
             model: RunTimeModel | None = None) -> tuple[RunTimeModel, Report]:
    """Fit a model on `train` (or use `model`) and score it and the baselines on `test`."""
    if model is None:
        model = RunTimeModel.fit([s.features for s in train], [s.duration for s in train], quantile,
                                 seed=seed)
    actual = np.array([s.duration for s in test], dtype=np.float64)
    predictions = model.predict_many([s.features for s in test])
    median = np.array([p.median_s for p in predictions], dtype=np.float64)
    upper = np.array([p.upper_s for p in predictions], dtype=np.float64)
    report = Report(quantile, len(train), len(test))
    report.scores.append(_score(MODEL, actual, median, upper))

    with_estimate = np.array([s.features.estimate is not None for s in test], dtype=bool)
    estimates = np.array([s.features.estimate if s.features.estimate is not None else math.nan for s in test],
                         dtype=np.float64)
    report.scores.append(_score(MODEL_WITH_ESTIMATE, actual[with_estimate], median[with_estimate],
                                upper[with_estimate]))
    report.scores.append(_score(ESTIMATE, actual[with_estimate], estimates[with_estimate],
                                estimates[with_estimate]))

    past: dict[str, list[float]] = defaultdict(list)
    for sample in train:
        past[sample.features.user].append(sample.duration)
    everything = np.array([s.duration for s in train], dtype=np.float64)
    fallback = (float(everything.mean()), float(np.quantile(everything, quantile))) if len(everything) else (
        0.0, 0.0)
    per_user = {user: (float(np.mean(runs)), float(np.quantile(runs, quantile)))
                for user, runs in past.items()}
    history = [per_user.get(s.features.user, fallback) for s in test]
    report.scores.append(_score(HISTORY, actual, np.array([h[0] for h in history], dtype=np.float64),
                                np.array([h[1] for h in history], dtype=np.float64)))
    return model, report


def report_table(report: Report) -> str:
    """The report as a table for a terminal."""
    q = f"{report.quantile:g}"
    header = ("method", "jobs", "median abs error", f"ran past q{q} bound")
    rows = [header]
    for score in report.scores:
        error = "-" if score.median_abs_error_s is None else _duration(score.median_abs_error_s)
        share = "-" if score.exceed_share is None else f"{score.exceed_share:.1%}"
        rows.append((score.method, str(score.jobs), error, share))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"held-out: the last {report.test_jobs} jobs by submit time; fitted on the {report.train_jobs} "
             f"before them; target share past the bound: {1 - report.quantile:.0%}"]
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"
