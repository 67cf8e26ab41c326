"""One scheduling cycle for one pod: filter, score, select (no I/O; the caller reserves and binds)."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.scheduler.framework import DevicePicker, FilterPlugin, ScorePlugin, StaticResults

TOP_SCORES_LOGGED = 3
MIN_NODES_TO_SCORE = 100  # kube-scheduler's minFeasibleNodesToFind


@dataclass(slots=True)
class Decision:
    """The outcome of a cycle, with everything the decision log and the pod's status need."""

    node: str | None
    total_nodes: int
    feasible: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    top: list[tuple[str, int]] = field(default_factory=list)
    error: str = ""  # the pod itself is invalid (no node could ever fit it as written)
    duration: float = 0.0
    gpu_ids: tuple[int, ...] = ()  # managed GPUs chosen on `node`
    gpu_uuids: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return fit_error_message(self.total_nodes, self.reasons, self.error)


def fit_error_message(total: int, reasons: dict[str, int], error: str = "") -> str:
    """kube-scheduler's FitError text: `0/12 nodes are available: 8 Insufficient cpu, 4 ...`."""
    text = f"0/{total} nodes are available:"
    if error:
        return f"{text} {error}."
    parts = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    if not parts:
        return f"{text} no nodes to schedule on." if total == 0 else text
    return f"{text} " + ", ".join(f"{count} {reason}" for reason, count in parts) + "."


class Framework:
    """A profile's plugins, bound to the cache: runs cycles."""

    def __init__(
        self,
        scheduler_name: str,
        filters: Sequence[FilterPlugin],
        scores: Sequence[ScorePlugin],
        cache: SchedulerCache,
        *,
        percentage_of_nodes_to_score: int = 100,
        rng: random.Random | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.filters = list(filters)
        self.scores = [s for s in scores if s.weight > 0]
        self.cache = cache
        self.static = StaticResults(cache)
        self.percentage = percentage_of_nodes_to_score
        self.rng = rng or random.Random()
        self._next_start = 0
        # Reserve step for devices: the filter that knows managed GPUs also picks them on the chosen node.
        self.device_picker = next((f for f in self.filters if isinstance(f, DevicePicker)), None)

    def schedule(
        self,
        pod: PodRecord,
        node_mask: np.ndarray | None = None,
        blocked: Sequence[tuple[np.ndarray, str]] = (),
    ) -> Decision:
        """Place one pod; `node_mask` (bool per row) limits it to some nodes, e.g. one topology domain."""
        started = time.perf_counter()
        decision = self._schedule(pod, node_mask, blocked)
        decision.duration = time.perf_counter() - started
        return decision

    def feasible_rows(
        self,
        pod: PodRecord,
        node_mask: np.ndarray | None = None,
        blocked: Sequence[tuple[np.ndarray, str]] = (),
    ) -> tuple[np.ndarray, dict[str, int]]:
        """Rows of nodes that pass every filter, and the per-reason counts of those that do not.

        As in kube-scheduler, a node is charged to the first filter it fails;
        a filter may charge one node several reasons (Insufficient cpu and memory).
        """
        cache = self.cache
        alive = cache.valid.copy() if node_mask is None else cache.valid & node_mask
        reasons: dict[str, int] = {}
        for mask, reason in blocked:  # nodes kept for others (reservations) or to avoid (recent preemption)
            kept_off = alive & mask
            if kept_off.any():
                reasons[reason] = int(np.count_nonzero(kept_off))
                alive &= ~mask
        for plugin in self.filters:
            failed_any = None
            for reason, mask in plugin.run(pod, cache, alive, self.static):
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
        return np.flatnonzero(alive), reasons

    def _schedule(
        self, pod: PodRecord, node_mask: np.ndarray | None, blocked: Sequence[tuple[np.ndarray, str]] = ()
    ) -> Decision:
        cache = self.cache
        total = cache.node_count if node_mask is None else int(np.count_nonzero(cache.valid & node_mask))
        if pod.spec_error:
            return Decision(None, total, error=pod.spec_error)
        for plugin in self.filters:
            error = plugin.prefilter(pod, cache)
            if error:
                return Decision(None, total, error=error)
        rows, reasons = self.feasible_rows(pod, node_mask, blocked)
        if rows.size == 0:
            return Decision(None, total, reasons=reasons)
        rows = self._sample(rows, total)
        scores = np.zeros(rows.shape[0], dtype=np.int64)
        for scorer in self.scores:
            values = scorer.score(pod, cache, rows, self.static)
            if values is not None:
                scores += values * scorer.weight
        best = int(scores.max())
        ties = np.flatnonzero(scores == best)
        pick = int(ties[self.rng.randrange(ties.shape[0])]) if ties.shape[0] > 1 else int(ties[0])
        names = cache.row_names
        chosen = names[int(rows[pick])]
        if rows.shape[0] > TOP_SCORES_LOGGED:
            top_idx = np.argpartition(-scores, TOP_SCORES_LOGGED)[:TOP_SCORES_LOGGED]
        else:
            top_idx = np.arange(rows.shape[0])
        top_idx = top_idx[np.argsort(-scores[top_idx], kind="stable")]
        top = [(names[int(rows[i])], int(scores[i])) for i in top_idx]
        gpu_ids: tuple[int, ...] = ()
        gpu_uuids: tuple[str, ...] = ()
        if self.device_picker is not None:
            gpu_ids, gpu_uuids = self.device_picker.pick(pod, cache, int(rows[pick]))
        return Decision(
            chosen,
            total,
            feasible=int(rows.shape[0]),
            reasons=reasons,
            top=top,
            gpu_ids=gpu_ids,
            gpu_uuids=gpu_uuids,
        )

    def _sample(self, rows: np.ndarray, total: int) -> np.ndarray:
        """percentageOfNodesToScore: score a rotating window of the feasible nodes on large clusters."""
        if self.percentage >= 100:
            return rows
        wanted = max(MIN_NODES_TO_SCORE, total * self.percentage // 100)
        if rows.shape[0] <= wanted:
            return rows
        start = self._next_start % rows.shape[0]
        self._next_start = start + wanted
        return np.take(rows, np.arange(start, start + wanted), mode="wrap")


def resourceless(pod: PodRecord) -> PodRecord:
    """The pod without resource requests: where could it go if room were made (preemption, reservation)?"""
    shadow = PodRecord.__new__(PodRecord)
    for slot in PodRecord.__slots__:
        setattr(shadow, slot, getattr(pod, slot))
    shadow.requests = {}
    shadow.annotations = {
        k: v for k, v in pod.annotations.items() if not k.startswith("ai-scheduler.io/gpu-")
    }
    return shadow
