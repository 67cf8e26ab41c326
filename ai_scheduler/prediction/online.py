"""Learning between offline refits: per-user corrections from completions, and the predictor the daemon
holds.

`OnlineCorrections` keeps, per user, an exponentially weighted mean of log(actual / predicted median)
over the user's completed jobs: a user whose jobs have lately run twice as long as the model says gets
their predictions doubled, until the next `ai-scheduler learn` folds that history into the model. The
weight of a new completion is `alpha`; the correction is bounded to a factor of `bound` either way, so one
freak job (or a burst of failures) cannot move a user's predictions without limit. In log space a factor
of 2 and one of 1/2 weigh the same.

With no model at all it still learns: per user, the running mean of the run times of their completed
jobs and the `quantile` of their most recent `window` ones (the "mean of the user's past jobs" baseline
of the report), so a daemon started without a model file predicts from the second job of a user on.

`RunTimePredictor` is what the daemon wires in: a model (or none) and the corrections, with `predict`
at enqueue and `observe` at completion. Neither class is thread-safe; the daemon calls them from its
event loop.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ai_scheduler.prediction.features import Features
from ai_scheduler.prediction.model import MIN_SECONDS, Prediction, RunTimeModel

DEFAULT_ALPHA = 0.2
DEFAULT_BOUND = 8.0
DEFAULT_WINDOW = 64


@dataclass(slots=True)
class _UserState:
    log_correction: float = 0.0  # the EWMA of log(actual / model median)
    corrections: int = 0  # completions that moved it
    count: int = 0  # completions seen
    mean_s: float = 0.0  # running mean of their run times
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=DEFAULT_WINDOW))


class OnlineCorrections:
    """Per-user corrections of a model's predictions, and per-user history for predicting without one."""

    __slots__ = ("_users", "alpha", "bound", "quantile", "window")

    def __init__(self, *, alpha: float = DEFAULT_ALPHA, bound: float = DEFAULT_BOUND, quantile: float = 0.9,
                 window: int = DEFAULT_WINDOW) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be above 0 and at most 1, got {alpha}")
        if not bound >= 1:
            raise ValueError(f"bound must be a factor of at least 1, got {bound}")
        if not 0 < quantile < 1:
            raise ValueError(f"quantile must be above 0 and below 1, got {quantile}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.alpha = alpha
        self.bound = bound
        self.quantile = quantile
        self.window = window
        self._users: dict[str, _UserState] = {}

    def observe(self, user: str, actual_s: float, model_median_s: float | None = None) -> None:
        """A job of `user` ran `actual_s` seconds; `model_median_s` is the model's own (uncorrected) median
        for it, None where there was no model. Non-finite or negative figures are ignored."""
        if not (math.isfinite(actual_s) and actual_s >= 0):
            return
        state = self._users.get(user)
        if state is None:
            state = self._users[user] = _UserState(recent=deque(maxlen=self.window))
        state.count += 1
        state.mean_s += (actual_s - state.mean_s) / state.count
        state.recent.append(actual_s)
        if model_median_s is not None and math.isfinite(model_median_s) and model_median_s > 0:
            ratio = math.log(max(actual_s, MIN_SECONDS) / max(model_median_s, MIN_SECONDS))
            limit = math.log(self.bound)
            updated = (1 - self.alpha) * state.log_correction + self.alpha * ratio
            state.log_correction = min(max(updated, -limit), limit)
            state.corrections += 1

    def factor(self, user: str) -> float:
        """The multiplicative correction for `user` (1 for a user with no corrected completion)."""
        state = self._users.get(user)
        return math.exp(state.log_correction) if state is not None else 1.0

    def correct(self, user: str, prediction: Prediction) -> Prediction:
        """A model's prediction for a job of `user`, corrected."""
        return prediction.scaled(self.factor(user))

    def history(self, user: str) -> Prediction | None:
        """Without a model: the mean of the user's completed jobs and the `quantile` of their recent ones
        (at least the mean); None for a user with none."""
        state = self._users.get(user)
        if state is None or not state.count:
            return None
        upper = float(np.quantile(np.fromiter(state.recent, dtype=np.float64), self.quantile))
        return Prediction(state.mean_s, max(upper, state.mean_s))

    def completions(self, user: str) -> int:
        state = self._users.get(user)
        return state.count if state is not None else 0

    def users(self) -> list[str]:
        return sorted(self._users)


class RunTimePredictor:
    """The daemon's run-time predictor: a fitted model (or none) and the online corrections.

    `predict(features)` at enqueue; `observe(features, actual_s)` when the job completes (succeeded:
    a failed job's run time says little about the next one). `set_model` swaps in a refitted model; the
    corrections are then reset, since they corrected the old one."""

    __slots__ = ("corrections", "model")

    def __init__(self, model: RunTimeModel | None = None,
                 corrections: OnlineCorrections | None = None) -> None:
        self.model = model
        self.corrections = corrections or OnlineCorrections(quantile=model.quantile if model else 0.9)

    def predict(self, features: Features) -> Prediction | None:
        """The corrected prediction; without a model, the user's history (None for a user with none)."""
        if self.model is None:
            return self.corrections.history(features.user)
        return self.corrections.correct(features.user, self.model.predict(features))

    def predict_many(self, features: Sequence[Features]) -> list[Prediction | None]:
        if self.model is None:
            return [self.corrections.history(f.user) for f in features]
        raw = self.model.predict_many(features)
        return [self.corrections.correct(f.user, p) for f, p in zip(features, raw, strict=True)]

    def observe(self, features: Features, actual_s: float) -> None:
        """A job with `features` completed after `actual_s` seconds of running."""
        median = self.model.predict(features).median_s if self.model is not None else None
        self.corrections.observe(features.user, actual_s, median)

    def set_model(self, model: RunTimeModel | None) -> None:
        self.model = model
        self.corrections = OnlineCorrections(
            alpha=self.corrections.alpha, bound=self.corrections.bound,
            quantile=model.quantile if model else self.corrections.quantile, window=self.corrections.window,
        )
