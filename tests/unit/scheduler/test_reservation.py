"""Reservation arithmetic: when room frees up, which room to hold and when, and who may backfill."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
from builders import Node

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import NodeRecord, PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.log import JsonLogger, rfc3339
from ai_scheduler.scheduler.reservation import UNKNOWN, Reservation, Reserver, earliest_fit, expected_end
from ai_scheduler.scheduler.runtimes import AnnotatedRunTimes, RunTime, RunTimes
from ai_scheduler.tracesim.engine import Simulation

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
AHEAD, BEHIND = (0, -1.0, -1.0, -100), (0, -1.0, -0.5, 0)  # queue keys: lower is better


def gpu_node(name: str, gpus: int = 8) -> NodeRecord:
    allocatable = {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: str(gpus)}
    return Node.bare(name).allocatable(allocatable, ready=True).record()


def running(name: str, node_name: str, gpus: int, started_ago: float, estimate: str | None) -> PodRecord:
    annotations = {"ai-scheduler.io/estimated-runtime": estimate} if estimate else {}
    return PodRecord.from_api(
        {
            "metadata": {"name": name, "namespace": "ml", "uid": name, "annotations": annotations},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}],
            },
            "status": {"phase": "Running", "startTime": rfc3339(NOW - started_ago, millis=False)},
        }
    )


def pending(name: str, estimate: str | None = None, gpus: int = 0, created_ago: float = 0.0) -> PodRecord:
    annotations = {"ai-scheduler.io/estimated-runtime": estimate} if estimate else {}
    containers = [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}] if gpus else []
    return PodRecord.from_api(
        {
            "metadata": {
                "name": name,
                "namespace": "ml",
                "uid": name,
                "annotations": annotations,
                "creationTimestamp": rfc3339(NOW - created_ago, millis=False),
            },
            "spec": {"containers": containers},
        }
    )


def cluster() -> SchedulerCache:
    cache = SchedulerCache()
    for name in ("a", "b", "c"):
        cache.set_node(gpu_node(name))
    cache.set_pod(running("a-job", "a", 8, started_ago=600, estimate="20m"))  # ends in 10 min
    cache.set_pod(running("b-job", "b", 4, started_ago=60, estimate="5m"))  # ends in 4 min
    cache.set_pod(running("c-job", "c", 8, started_ago=60, estimate=None))  # no estimate: end unknown
    return cache


def rows(cache: SchedulerCache) -> np.ndarray:
    return np.flatnonzero(cache.valid)


def names(cache: SchedulerCache, mask: np.ndarray | None) -> list[str]:
    return [] if mask is None else sorted(cache.row_names[r] for r in np.flatnonzero(mask))


def reserver_over(cache: SchedulerCache, *, backfill: bool = True, min_wait: float = 300.0) -> Reserver:
    return Reserver(cache, JsonLogger(stream=io.BytesIO()), backfill=backfill, min_wait=min_wait,
                    clock=lambda: NOW)


def held(reserver: Reserver) -> Reservation | None:
    return reserver.current


def test_earliest_fit_uses_estimated_ends_and_no_estimate_leaves_the_end_unknown() -> None:
    cache = cluster()
    gpu8 = {GPU: 8}
    fit = earliest_fit(cache, rows(cache), gpu8, 1, NOW)
    assert (fit.due, [cache.row_names[r] for r in fit.rows]) == (NOW + 240, ["b"])
    assert fit.counted == {fit.rows[0]: ("b-job",)}, "the fit waits for b-job's end"
    fit = earliest_fit(cache, rows(cache), gpu8, 2, NOW)
    assert (fit.due, sorted(cache.row_names[r] for r in fit.rows)) == (NOW + 600, ["a", "b"])
    # The third copy needs c, whose pod has no estimate: not "seven days", but unknown.
    fit = earliest_fit(cache, rows(cache), gpu8, 3, NOW)
    assert fit.due == UNKNOWN and len(fit.rows) == 3
    assert expected_end(cache.pod_state("c-job").record, NOW) == UNKNOWN  # type: ignore[union-attr]
    # Room that is free now counts at once: 4 GPUs on b fit a 4-GPU pod immediately.
    assert earliest_fit(cache, rows(cache), {GPU: 4}, 1, NOW).due == NOW
    # More than the nodes can ever hold: no fit at all.
    assert earliest_fit(cache, rows(cache), {GPU: 16}, 1, NOW).rows == []


def test_backfill_only_for_pods_that_end_before_the_reservation_is_due() -> None:
    cache = cluster()
    log = io.BytesIO()
    reserver = Reserver(cache, JsonLogger(stream=log), backfill=True, clock=lambda: NOW)
    holder = pending("big")
    reserver.consider("ml/big", frozenset({"big"}), AHEAD, holder, {GPU: 8}, 2, rows(cache))
    assert reserver.current is not None and reserver.current.nodes == ["a", "b"]
    assert b'"event":"reservation"' in log.getvalue()
    short, long = pending("short", "3m", gpus=1), pending("long", "1h", gpus=1)
    unknown = pending("unknown", gpus=1)
    assert reserver.blocked_rows(short, BEHIND) is None, "ends before the reservation is due: backfills"
    assert names(cache, reserver.blocked_rows(long, BEHIND)) == ["a", "b"]
    assert names(cache, reserver.blocked_rows(unknown, BEHIND)) == ["a", "b"]
    assert reserver.blocked_rows(pending("cpu-only"), BEHIND) is None, "it takes none of the held GPUs"
    assert reserver.blocked_rows(holder, BEHIND) is None, "the holder itself may use its nodes"
    assert reserver.blocked_rows(long, (0, -1.0, -2.0, 0)) is None, "a better pod is not held back"
    reserver.backfill = False
    assert reserver.blocked_rows(short, BEHIND) is not None, "without backfill nobody else uses them"
    # A pod ahead of the holder takes the reservation over; one behind it does not.
    later = pending("later")
    reserver.consider("ml/later", frozenset({"later"}), (0, -1.0, -0.1, 0), later, {GPU: 8}, 1, rows(cache))
    assert reserver.current.holder == "ml/big"
    reserver.placed("big")
    assert held(reserver) is None
    assert b'"event":"reservation.released"' in log.getvalue()


def test_a_pod_without_an_estimate_does_not_make_free_gpus_wait_for_a_gang() -> None:
    """Issue 10's example: the gang default/gd (2 x 8 GPUs) does not fit because pods with no estimate run
    on both nodes; a same-priority 4-GPU pod with no estimate was refused ("2 node(s) reserved for gang
    default/gd") while n1 had 4 free GPUs. The gang's reservation would be due at an unknown time: it is
    made only once the gang has waited reservationMinWaitSeconds, and then holds what the gang needs."""
    cache = SchedulerCache()
    for name in ("n0", "n1"):
        cache.set_node(gpu_node(name))
    cache.set_pod(running("r", "n0", 8, started_ago=600, estimate=None))
    cache.set_pod(running("s", "n1", 4, started_ago=600, estimate=None))
    reserver = reserver_over(cache, min_wait=300)
    members = [pending(f"gd-{i}", gpus=8, created_ago=60) for i in range(2)]
    uids = frozenset(m.uid for m in members)

    reserver.consider("gang default/gd", uids, AHEAD, members[0], {GPU: 8}, 2, rows(cache), since=NOW - 60)
    assert held(reserver) is None, "due at an unknown time, after a one-minute wait: nothing held"
    newcomer = pending("newcomer", gpus=4)  # same priority, behind the gang in the queue, no estimate
    assert reserver.blocked_rows(newcomer, BEHIND) is None, "n1's 4 free GPUs take it"

    # A unit that has waited long enough gets its reservation, due at an unknown time.
    reserver.consider("gang default/gd", uids, AHEAD, members[0], {GPU: 8}, 2, rows(cache), since=NOW - 301)
    gd = held(reserver)
    assert gd is not None and gd.due == UNKNOWN and gd.nodes == ["n0", "n1"]
    assert names(cache, reserver.blocked_rows(newcomer, BEHIND)) == ["n0", "n1"], "n1's room is the gang's"
    short = pending("short", "1m", gpus=4)
    assert reserver.blocked_rows(short, BEHIND) is not None, "nothing surely ends before an unknown time"
    # A better unit that has not waited long (without `since`: from its pod's creation) takes nothing over.
    fresh = pending("fresh", gpus=8, created_ago=10)
    reserver.consider("ml/fresh", frozenset({"fresh"}), (0, -1.0, -3.0, 0), fresh, {GPU: 8}, 2, rows(cache))
    assert held(reserver) is gd
    reserver.min_wait = 3600  # a reload raises the bound: the gang no longer qualifies, its room is freed
    reserver.consider("gang default/gd", uids, AHEAD, members[0], {GPU: 8}, 2, rows(cache), since=NOW - 301)
    assert held(reserver) is None


def test_a_reservation_holds_only_the_room_it_needs() -> None:
    """On a 16-GPU node where a 12-GPU pod will fit in 3 minutes (8 free, 8 ending), 4 GPUs are spare: a pod
    that fits in them is not refused, whatever its estimate; one that would cut into the 12 is."""
    cache = SchedulerCache()
    cache.set_node(gpu_node("a", gpus=16))
    cache.set_node(gpu_node("b"))
    cache.set_node(gpu_node("idle", gpus=0))
    cache.set_pod(running("a-job", "a", 8, started_ago=60, estimate="4m"))  # ends in 3 min
    cache.set_pod(running("b-job", "b", 8, started_ago=60, estimate=None))
    reserver = reserver_over(cache, backfill=False)
    reserver.consider("ml/big", frozenset({"big"}), AHEAD, pending("big", gpus=12), {GPU: 12}, 1, rows(cache))
    big = held(reserver)
    assert big is not None and big.nodes == ["a"] and big.due == NOW + 180
    assert reserver.blocked_rows(pending("four", gpus=4), BEHIND) is None
    assert names(cache, reserver.blocked_rows(pending("six", gpus=6), BEHIND)) == ["a"]
    assert names(cache, reserver.blocked_rows(pending("four", gpus=4), BEHIND, 2)) == ["a"], "two of them"
    cache.set_pod(running("four", "a", 4, started_ago=0, estimate=None))  # it was placed: the spare is used
    assert names(cache, reserver.blocked_rows(pending("more", gpus=1), BEHIND)) == ["a"]


class Predicted:
    """A run-time source with a spread: median 1 min, upper 10 min, for every pod."""

    def estimate(self, pod: PodRecord) -> RunTime | None:
        return RunTime(60.0, 600.0, "prediction")


def test_reservations_and_backfill_read_the_upper_value_of_the_hook() -> None:
    assert AnnotatedRunTimes().estimate(pending("p", "90m")) == RunTime(5400.0, 5400.0, "annotation")
    assert AnnotatedRunTimes().estimate(pending("p")) is None
    cache = cluster()
    c_job = cache.pod_state("c-job")
    assert c_job is not None
    assert expected_end(c_job.record, NOW, Predicted()) == NOW - 60 + 600, "started a minute ago, upper 10"
    reserver = reserver_over(cache)
    reserver.runtimes = Predicted()
    reserver.consider("ml/big", frozenset({"big"}), AHEAD, pending("big"), {GPU: 8}, 3, rows(cache))
    big = held(reserver)
    assert big is not None and big.due == NOW + 540 and math.isfinite(big.due)
    # Every pod's upper value is 10 minutes: none ends before the reservation is due in 9.
    assert reserver.blocked_rows(pending("short", "1m", gpus=1), BEHIND) is not None


def test_the_core_holds_one_run_time_hook_and_its_reserver_asks_it() -> None:
    """A learned predictor plugs in on the scheduling core; the reserver takes it at once."""
    core = Simulation(default_config(), [], []).core
    assert type(core.runtimes) is AnnotatedRunTimes
    assert core.reserver.runtimes is core.runtimes
    predicted: RunTimes = Predicted()
    core.runtimes = predicted
    assert core.reserver.runtimes is predicted
    config = default_config()
    scheduling = dataclasses.replace(config.scheduling, reservation_min_wait_seconds=7)
    core.reconfigure(dataclasses.replace(config, scheduling=scheduling))
    assert core.reserver.min_wait == 7 and core.reserver.runtimes is predicted
