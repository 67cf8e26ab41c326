"""Starvation across queue levels (issue 10, point 5), in the trace simulator's timed mode.

A lower queue level is always served first, so a pod of a higher level waits for as long as lower
levels have work. A queue's `promoteAfterSeconds` bounds that wait: the pod is ordered at the top level
once it has waited that long (scheduler/priority.py). The workload here keeps a one-core node busy with
a level-0 stream that arrives faster than it runs, plus one level-1 pod; the expected waits are worked
out by hand from the workload, not read back from the code under test.
"""

from __future__ import annotations

from typing import Any

from ai_scheduler.config import Config, parse_config
from ai_scheduler.tracesim.metrics import summarize
from unit.tracesim.test_engine import cpu_node, job, run

RUN = 10.0  # every pod's run time
STREAM = 30  # level-0 pods, one every 5 s from t=0: the node is busy without a gap until 30 * RUN = 300
BATCH_SUBMIT = 1.0


def config(**batch: Any) -> Config:
    return parse_config(
        {
            "server": {"port": 0, "bindAddress": "127.0.0.1"},
            "scheduling": {
                "initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2, "unschedulableFlushSeconds": 5,
            },
            "queues": [{"name": "prod", "level": 0}, {"name": "batch", "level": 1, **batch}],
        }
    )


def workload() -> list[Any]:
    # One spec priority for all: no pod preempts another, the queue's order alone decides.
    stream = [job(f"prod-{i}", 5.0 * i, RUN, queue="prod", priority=1) for i in range(STREAM)]
    return [*stream, job("batch", BATCH_SUBMIT, RUN, queue="batch", priority=1)]


def test_without_the_bound_the_higher_level_waits_until_the_stream_ends() -> None:
    _, result = run([cpu_node("c0")], workload(), config=config())
    batch = result.pods[-1]
    assert (batch.start, batch.level) == (STREAM * RUN, 1), "it runs only after the 30th prod pod"
    summary = summarize(result)
    assert summary.longest_wait == STREAM * RUN - BATCH_SUBMIT and summary.longest_wait_pod.endswith("batch")
    assert summary.by_level[1].wait.max == STREAM * RUN - BATCH_SUBMIT


def test_promote_after_seconds_bounds_the_wait_by_about_the_bound_plus_one_run() -> None:
    bound = 50.0
    _, result = run([cpu_node("c0")], workload(), config=config(promoteAfterSeconds=bound))
    batch = result.pods[-1]
    assert batch.wait is not None and bound <= batch.wait <= bound + RUN
    # Promoted at t=51 while prod-5 runs (50..60): it takes the node when prod-5 leaves, ahead of the
    # prod backlog (a level-0 peer now, with none of the usage prod has had).
    assert batch.start == 60.0
    prod_starts = sorted(pod.start for pod in result.pods[:-1] if pod.start is not None)
    assert prod_starts == [RUN * i for i in range(6)] + [RUN * i for i in range(7, STREAM + 1)], (
        "six prod pods before it, the other 24 after it: the stream goes on, one run later"
    )
    summary = summarize(result)
    assert summary.by_level[1].wait.max == 60.0 - BATCH_SUBMIT
    assert not summary.longest_wait_pod.endswith("batch"), "a prod pod of the backlog now waits longest"
