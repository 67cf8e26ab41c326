"""The daemon's collector policy (scheduler/heap.py): once the first lists are in, the cache's objects are
out of the collector's walks, the youngest generation is collected less often, and a full collection
still reclaims a reference cycle among frozen objects.

Each test restores the interpreter's collector as it found it (thresholds, nothing frozen), so that the
rest of the suite runs with CPython's defaults.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from builders import Node, Pod

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.scheduler.heap import YOUNG_THRESHOLD, collection_due, freeze_survivors
from ai_scheduler.tracesim.engine import Simulation


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


class _Cycle:
    """Half of a reference cycle (only the cyclic collector frees it)."""

    other: _Cycle | None = None


def _core_with_pods(pods: int) -> SchedulerCore:
    core = Simulation(default_config(), [], []).core  # a core whose outbox binds at once
    core.handlers.on_node_event("ADDED", Node("node-0", cpu="64", memory="256Gi").obj())
    for i in range(pods):
        core.handlers.on_pod_event("ADDED", Pod(f"pod-{i}").uid(f"uid-{i}").obj())
    return core


def _records_walked() -> int:
    """PodRecords in the collector's three generations (a frozen object is in none of them)."""
    return sum(1 for obj in gc.get_objects() if isinstance(obj, PodRecord))


def test_freezing_takes_the_cached_records_out_of_every_collection() -> None:
    core = _core_with_pods(200)
    assert _records_walked() >= 200, "the cache's records are walked by the collector before the freeze"
    freeze_survivors()
    assert _records_walked() == 0, "no cached record is left in a generation the collector walks"
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD > 700, "the youngest generation is collected less often"
    core.handlers.on_pod_event("ADDED", Pod("pod-late").uid("uid-late").obj())
    assert _records_walked() == 1, "a record that came after the freeze is walked as usual"
    assert len(core.queue) == 201


def test_a_full_collection_reclaims_a_cycle_among_frozen_objects() -> None:
    first, second = _Cycle(), _Cycle()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    freeze_survivors()
    del first, second
    gc.collect()
    assert gone() is not None, "a frozen cycle waits for the next full collection"
    freeze_survivors(full=True)
    assert gone() is None, "the full collection freed it"
    assert gc.get_freeze_count() > 0, "and froze what is still alive again"


def test_the_full_collection_is_put_off_while_pods_wait_for_at_most_one_interval() -> None:
    interval = 600.0
    assert collection_due(599.0, 0.0, None, interval, active=0) == (False, None), "not due yet"
    assert collection_due(600.0, 0.0, None, interval, active=0) == (True, None), "due, idle loop: at once"
    assert collection_due(600.0, 0.0, None, interval, active=50) == (False, 600.0), "due, pods to try: later"
    assert collection_due(900.0, 0.0, 600.0, interval, active=50) == (False, 600.0)
    assert collection_due(1200.0, 0.0, 600.0, interval, active=50) == (True, None), "an interval late at most"
