"""Reservation arithmetic: when room frees up, which nodes to hold, and who may backfill."""

from __future__ import annotations

import io

import numpy as np

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.scheduler.reservation import LONG_RUNNING, Reserver, earliest_fit

NOW = 1_800_000_000.0


def node(name: str, gpus: int = 8) -> NodeRecord:
    return NodeRecord.from_api(
        {
            "metadata": {"name": name},
            "status": {
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def running(name: str, node_name: str, gpus: int, started_ago: float, estimate: str | None) -> PodRecord:
    annotations = {"ai-scheduler.io/estimated-runtime": estimate} if estimate else {}
    return PodRecord.from_api(
        {
            "metadata": {"name": name, "namespace": "ml", "uid": name, "annotations": annotations},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            },
            "status": {"phase": "Running", "startTime": rfc3339(NOW - started_ago, millis=False)},
        }
    )


def pending(name: str, estimate: str | None = None) -> PodRecord:
    annotations = {"ai-scheduler.io/estimated-runtime": estimate} if estimate else {}
    return PodRecord.from_api(
        {"metadata": {"name": name, "namespace": "ml", "uid": name, "annotations": annotations}, "spec": {}}
    )


def cluster() -> SchedulerCache:
    cache = SchedulerCache()
    for name in ("a", "b", "c"):
        cache.set_node(node(name))
    cache.set_pod(running("a-job", "a", 8, started_ago=600, estimate="20m"))  # ends in 10 min
    cache.set_pod(running("b-job", "b", 4, started_ago=60, estimate="5m"))  # ends in 4 min
    cache.set_pod(running("c-job", "c", 8, started_ago=60, estimate=None))  # no estimate: long
    return cache


def rows(cache: SchedulerCache) -> np.ndarray:
    return np.flatnonzero(cache.valid)


def test_earliest_fit_uses_estimated_ends_and_treats_no_estimate_as_long() -> None:
    cache = cluster()
    gpu8 = {"nvidia.com/gpu": 8}
    due, chosen = earliest_fit(cache, rows(cache), gpu8, 1, NOW)
    assert (due, [cache.row_names[r] for r in chosen]) == (NOW + 240, ["b"])
    due, chosen = earliest_fit(cache, rows(cache), gpu8, 2, NOW)
    assert (due, sorted(cache.row_names[r] for r in chosen)) == (NOW + 600, ["a", "b"])
    due, chosen = earliest_fit(cache, rows(cache), gpu8, 3, NOW)
    assert due >= NOW + LONG_RUNNING - 61 and len(chosen) == 3
    # Room that is free now counts at once: 4 GPUs on b fit a 4-GPU pod immediately.
    assert earliest_fit(cache, rows(cache), {"nvidia.com/gpu": 4}, 1, NOW)[0] == NOW


def test_backfill_only_for_pods_that_end_before_the_reservation_is_due() -> None:
    cache = cluster()
    log = io.BytesIO()
    reserver = Reserver(cache, JsonLogger(stream=log), backfill=True, clock=lambda: NOW)
    holder = pending("big")
    reserver.consider(
        "ml/big", frozenset({"big"}), (0, -1.0, -1.0, -100), holder, {"nvidia.com/gpu": 8}, 2, rows(cache)
    )
    assert reserver.current is not None and reserver.current.nodes == ["a", "b"]
    assert b'"event":"reservation"' in log.getvalue()
    behind = (0, -1.0, -0.5, 0)
    short, long, unknown = pending("short", "3m"), pending("long", "1h"), pending("unknown")
    assert reserver.blocked_rows(short, behind) is None, "ends before the reservation is due: backfills"
    blocked = reserver.blocked_rows(long, behind)
    assert blocked is not None and sorted(cache.row_names[r] for r in np.flatnonzero(blocked)) == ["a", "b"]
    assert reserver.blocked_rows(unknown, behind) is not None
    assert reserver.blocked_rows(holder, behind) is None, "the holder itself may use its nodes"
    assert reserver.blocked_rows(long, (0, -1.0, -2.0, 0)) is None, "a better pod is not held back"
    reserver.backfill = False
    assert reserver.blocked_rows(short, behind) is not None, "without backfill nobody else uses them"
    # A pod ahead of the holder takes the reservation over; one behind it does not.
    reserver.consider(
        "ml/later",
        frozenset({"later"}),
        (0, -1.0, -0.1, 0),
        pending("later"),
        {"nvidia.com/gpu": 8},
        1,
        rows(cache),
    )
    assert reserver.current.holder == "ml/big"
    reserver.placed("big")
    assert reserver.current is None
