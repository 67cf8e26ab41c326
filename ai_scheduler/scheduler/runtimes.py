"""How long a pod runs: the one hook every part of the core that needs a run time asks.

`RunTimes.estimate(pod)` gives a `RunTime` (a median and an upper value, in seconds, and where it came
from) or None when nothing is known. Reservations use the upper value for the end of running pods (a
reservation should not be late) and for backfill (a backfilled pod must be gone before the reservation
is due). The default, `AnnotatedRunTimes`, reads the pod's own `ai-scheduler.io/estimated-runtime`
annotation (median = upper = the estimate); `PredictedRunTimes` adds a learned prediction for pods
without one (the config's `prediction` section, which the core reads: `SchedulerCore.runtimes`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from ai_scheduler.cache.records import ESTIMATE_ANNOTATION, PodRecord
from ai_scheduler.cache.tenancy import USER_LABEL, Tenancy
from ai_scheduler.prediction import Features, RunTimePredictor, features_of_pod
from ai_scheduler.quantity import parse_duration

RunTimeSource = Literal["annotation", "prediction"]


@dataclass(frozen=True, slots=True)
class RunTime:
    """A pod's run time in seconds: the median, an upper value it stays under with high probability, and
    its source ("annotation": the user's estimate; "prediction": a model's)."""

    median: float
    upper: float
    source: RunTimeSource


class RunTimes(Protocol):
    """The run-time hook: what is known of how long `pod` runs (from its start), None when nothing is."""

    def estimate(self, pod: PodRecord) -> RunTime | None: ...


class AnnotatedRunTimes:
    """The pod's own estimate, `ai-scheduler.io/estimated-runtime` ("90m", "2h"); nothing without it."""

    def estimate(self, pod: PodRecord) -> RunTime | None:
        seconds = parse_duration(pod.annotations.get(ESTIMATE_ANNOTATION))
        return None if seconds is None else RunTime(seconds, seconds, "annotation")


class FixedRunTimes:
    """Run times given once, by uid (a forecast's, read from the daemon's hook when it starts), so that
    what a simulation does never teaches the daemon's predictor."""

    def __init__(self, known: Mapping[str, RunTime | None]) -> None:
        self.known = dict(known)

    def estimate(self, pod: PodRecord) -> RunTime | None:
        return self.known.get(pod.uid)


def pod_features(pod: PodRecord, tenancy: Tenancy) -> Features:
    """The pod's features for the run-time model, its user and group as the tenancy says; where the
    config names no user for its namespace, the pod's `ai-scheduler.io/user` label, else its namespace
    (each user's own namespace, as traces are replayed), so that per-user learning still has a user."""
    tenant = tenancy.tenant_of(pod)
    user = tenant.user or pod.labels.get(USER_LABEL) or pod.namespace
    return features_of_pod(pod, user, tenant.group)


class PredictedRunTimes:
    """The pod's own estimate first; else a learned prediction (ai_scheduler/prediction).

    A pod's prediction is made once, the first time it is asked for (when the pod joins the queue: its
    priority reads it), from its features (`features_of_pod`, with the pod's user and group from the
    tenancy) and kept by uid until the pod completes or leaves. `completed` feeds a successful run's
    time back to the predictor's per-user corrections when `learn_online` is on; without a model the
    predictor answers from the user's own past run times, so a new user gets no prediction until a
    job of theirs has finished.
    """

    def __init__(
        self,
        predictor: RunTimePredictor,
        tenancy: Tenancy,
        *,
        learn_online: bool = True,
        model_path: str | None = None,
        capacity: int = 100_000,
    ) -> None:
        self.predictor = predictor
        self.tenancy = tenancy
        self.learn_online = learn_online
        self.model_path = model_path  # the file the model came from (None: no model)
        self.capacity = capacity  # predictions kept at most (the oldest go first)
        self._annotated = AnnotatedRunTimes()
        self._known: OrderedDict[str, RunTime | None] = OrderedDict()

    def estimate(self, pod: PodRecord) -> RunTime | None:
        own = self._annotated.estimate(pod)
        if own is not None:
            return own
        if pod.uid in self._known:
            return self._known[pod.uid]
        predicted = self.predictor.predict(pod_features(pod, self.tenancy))
        run = None if predicted is None else RunTime(predicted.median_s, predicted.upper_s, "prediction")
        if run is not None or self.predictor.model is not None:  # a user's first finished job may change None
            self._known[pod.uid] = run
            if len(self._known) > self.capacity:
                self._known.popitem(last=False)
        return run

    def completed(self, pod: PodRecord, seconds: float) -> None:
        """The pod ran `seconds` to its end, succeeded or failed: learn from it (if online learning is on)."""
        self._known.pop(pod.uid, None)
        if self.learn_online and seconds >= 0:
            self.predictor.observe(pod_features(pod, self.tenancy), seconds)

    def forget(self, uid: str) -> None:
        self._known.pop(uid, None)
