"""SchedulerCache transitions: watch events, our own assumptions, relists.

Every test ends with check_consistency() == [] and states the usage it expects
explicitly, worked out by hand.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from builders import Node, Pod

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import DEFAULT_SCORE_CPU_MILLI, DEFAULT_SCORE_MEMORY, NodeRecord, PodRecord

Gi, Mi = 2**30, 2**20
GPU = "nvidia.com/gpu"


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def cached_node(name: str, *, cpu: str = "4", memory: str = "8Gi", pods: str = "110", rv: str = "1",
                labels: dict[str, str] | None = None, extra: dict[str, str] | None = None) -> NodeRecord:
    return (Node.bare(name).rv(rv).labels(labels or {}).spec()
            .allocatable({"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}, ready=True).record())


def cached_pod(name: str, *, node_name: str = "", cpu: str | None = "1", memory: str | None = "1Gi",
               phase: str | None = None, deleting: bool = False, rv: str = "1",
               extra: dict[str, str] | None = None) -> PodRecord:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None} | (extra or {})
    return (Pod.bare(name).uid().rv(rv).terminating(deleting, since="2024-01-01T00:00:00Z")
            .container("c", "i", requests=requests).on(node_name)
            .phase(phase or ("Running" if node_name else "Pending")).record())


def usage(cpu: int = 0, memory: int = 0, pods: int = 0, **extra: int) -> dict[str, int]:
    return {k: v for k, v in {"cpu": cpu, "memory": memory, "pods": pods, **extra}.items() if v}


def consistent(cache: SchedulerCache) -> None:
    assert cache.check_consistency() == []


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(clock: FakeClock) -> SchedulerCache:
    c = SchedulerCache(assume_timeout=30.0, clock=clock)
    c.set_node(cached_node("n1"))
    c.set_node(cached_node("n2"))
    return c


# --------------------------------------------------------------------------- row versions
def test_row_version_moves_with_what_the_row_holds_or_offers(cache: SchedulerCache) -> None:
    """`row_version` moves on the row a pod is assumed to, forgotten from, seen bound on or taken from
    for a preemption's what-if, whose allocatable changes or which leaves; never on another row."""
    rows = [cache.row_of("n1"), cache.row_of("n2")]

    def moved(step: Callable[[], object]) -> list[bool]:
        before = cache.row_version[rows].copy()
        step()
        return [bool(m) for m in cache.row_version[rows] != before]

    pod = cached_pod("a")
    assert moved(lambda: cache.assume(pod, "n1")) == [True, False]
    assert moved(lambda: cache.forget(pod.uid)) == [True, False]
    bound = cached_pod("b", node_name="n2")
    assert moved(lambda: cache.set_pod(bound)) == [False, True]
    assert moved(lambda: cache.set_pod(cached_pod("c"))) == [False, False]  # pending: on no row

    def without() -> None:
        before = cache.row_version[rows].copy()
        with cache.without([bound]):
            assert (cache.row_version[rows] != before).tolist() == [False, True]

    assert moved(without) == [False, True]  # and again when the pod is counted back
    assert moved(lambda: cache.set_node(cached_node("n1", cpu="8", rv="2"))) == [True, False]
    assert moved(lambda: cache.remove_node("n2")) == [False, True]
    consistent(cache)


# --------------------------------------------------------------------------- watch transitions
def test_pod_seen_bound_counts(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1", cpu="1500m", memory="1Gi"))
    cache.set_pod(cached_pod("b", node_name="n1", cpu="500m", memory="512Mi"))
    assert cache.node_usage("n1") == usage(2000, Gi + 512 * Mi, 2)
    assert cache.node_usage("n2") == {}
    assert cache.pods_on("n1") == {"uid-a", "uid-b"}
    consistent(cache)


def test_pending_pod_is_tracked_but_takes_nothing(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a"))
    state = cache.pod_state("uid-a")
    assert state is not None and state.node == "" and not state.assumed
    assert cache.node_usage("n1") == {} and cache.node_usage("n2") == {}
    consistent(cache)


def test_pod_update_on_the_same_node_is_not_double_counted(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1", rv="1"))
    cache.set_pod(cached_pod("a", node_name="n1", rv="2"))
    cache.set_pod(cached_pod("a", node_name="n1", cpu="2", rv="3"))  # e.g. an in-place resize
    assert cache.node_usage("n1") == usage(2000, Gi, 1)
    consistent(cache)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pod_releases(cache: SchedulerCache, phase: str) -> None:
    cache.set_pod(cached_pod("a", node_name="n1"))
    cache.set_pod(cached_pod("b", node_name="n1", cpu="2"))
    change = cache.set_pod(cached_pod("a", node_name="n1", phase=phase, rv="2"))
    assert change.freed
    assert cache.node_usage("n1") == usage(2000, Gi, 1)
    assert cache.pod_state("uid-a") is None
    consistent(cache)


def test_terminal_pod_first_seen_never_counts(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1", phase="Succeeded"))
    cache.set_pod(cached_pod("b", phase="Failed"))
    assert cache.node_usage("n1") == {}
    assert cache.pod_state("uid-a") is None and cache.pod_state("uid-b") is None
    consistent(cache)


def test_terminating_pod_still_counts_until_deleted(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1"))
    change = cache.set_pod(cached_pod("a", node_name="n1", deleting=True, rv="2"))
    assert not change.freed
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    consistent(cache)
    change = cache.remove_pod("uid-a")
    assert change.freed
    assert cache.node_usage("n1") == {}
    assert cache.pods_on("n1") == set()
    consistent(cache)


def test_deleting_pending_pod_is_dropped(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a"))
    cache.set_pod(cached_pod("a", deleting=True, rv="2"))
    assert cache.pod_state("uid-a") is None
    consistent(cache)


def test_remove_unknown_pod_is_harmless(cache: SchedulerCache) -> None:
    change = cache.remove_pod("nope")
    assert not change.freed
    consistent(cache)


# --------------------------------------------------------------------------- assumptions
def test_assume_then_watch_confirms_without_double_count(cache: SchedulerCache) -> None:
    p = cached_pod("a")
    cache.set_pod(p)
    cache.assume(p, "n1")
    assert cache.is_assumed("uid-a") and cache.assumed_count == 1
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    consistent(cache)
    change = cache.set_pod(cached_pod("a", node_name="n1", rv="2"))
    assert change.confirmed and not change.moved and not change.freed
    assert not cache.is_assumed("uid-a") and cache.assumed_count == 0
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    consistent(cache)


def test_assume_a_pod_the_cache_has_not_seen(cache: SchedulerCache) -> None:
    cache.assume(cached_pod("a"), "n2")
    assert cache.node_usage("n2") == usage(1000, Gi, 1)
    consistent(cache)


def test_watch_update_of_still_unbound_assumed_pod_keeps_the_reservation(cache: SchedulerCache) -> None:
    p = cached_pod("a")
    cache.set_pod(p)
    cache.assume(p, "n1")
    cache.set_pod(cached_pod("a", rv="2"))  # e.g. a status or label update before the binding lands
    assert cache.is_assumed("uid-a")
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    consistent(cache)


def test_assume_then_forget(cache: SchedulerCache) -> None:
    p = cached_pod("a")
    cache.set_pod(p)
    cache.assume(p, "n1")
    assert cache.forget("uid-a")
    assert not cache.is_assumed("uid-a") and cache.assumed_count == 0
    assert cache.node_usage("n1") == {}
    state = cache.pod_state("uid-a")
    assert state is not None and state.node == "" and state.record.pending  # pending again, not lost
    assert not cache.forget("uid-a")
    consistent(cache)
    cache.assume(p, "n2")  # and can be placed again
    assert cache.node_usage("n2") == usage(1000, Gi, 1)
    consistent(cache)


def test_assume_twice_or_a_bound_pod_is_refused(cache: SchedulerCache) -> None:
    p = cached_pod("a")
    cache.assume(p, "n1")
    with pytest.raises(ValueError):
        cache.assume(p, "n2")
    cache.set_pod(cached_pod("b", node_name="n2"))
    with pytest.raises(ValueError):
        cache.assume(cached_pod("b"), "n1")
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    assert cache.node_usage("n2") == usage(1000, Gi, 1)
    consistent(cache)


def test_expire_only_after_binding_finished_and_timeout(cache: SchedulerCache, clock: FakeClock) -> None:
    p = cached_pod("a")
    cache.set_pod(p)
    cache.assume(p, "n1")
    clock.now += 3600
    assert cache.expire_assumed() == []  # binding still in flight: never expires
    cache.binding_finished("uid-a")       # deadline = now + 30
    clock.now += 29
    assert cache.expire_assumed() == []
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    clock.now += 2
    expired = cache.expire_assumed()
    assert [r.uid for r in expired] == ["uid-a"]
    assert not cache.is_assumed("uid-a") and cache.assumed_count == 0
    assert cache.node_usage("n1") == {}
    state = cache.pod_state("uid-a")
    assert state is not None and state.record.pending
    consistent(cache)
    assert cache.expire_assumed() == []


def test_confirmed_pod_does_not_expire(cache: SchedulerCache, clock: FakeClock) -> None:
    p = cached_pod("a")
    cache.assume(p, "n1")
    cache.binding_finished("uid-a")
    cache.set_pod(cached_pod("a", node_name="n1", rv="2"))
    clock.now += 1000
    assert cache.expire_assumed() == []
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    consistent(cache)


def test_only_the_overdue_assumption_expires(cache: SchedulerCache, clock: FakeClock) -> None:
    cache.assume(cached_pod("a"), "n1")
    cache.binding_finished("uid-a")
    clock.now += 20
    cache.assume(cached_pod("b", cpu="2"), "n1")
    cache.binding_finished("uid-b")
    clock.now += 15  # a is 35 s past its binding, b 15 s
    assert [r.uid for r in cache.expire_assumed()] == ["uid-a"]
    assert cache.node_usage("n1") == usage(2000, Gi, 1)
    consistent(cache)


def test_binding_finished_for_unknown_or_unassumed_pod_is_ignored(cache: SchedulerCache,
                                                                 clock: FakeClock) -> None:
    cache.binding_finished("nope")
    cache.set_pod(cached_pod("a", node_name="n1"))
    cache.binding_finished("uid-a")
    clock.now += 1000
    assert cache.expire_assumed() == []
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    consistent(cache)


def test_watch_shows_assumed_pod_bound_elsewhere(cache: SchedulerCache) -> None:
    p = cached_pod("a", cpu="2")
    cache.set_pod(p)
    cache.assume(p, "n1")
    change = cache.set_pod(cached_pod("a", node_name="n2", cpu="2", rv="2"))
    assert change.moved and not change.confirmed and change.freed
    assert cache.node_usage("n1") == {}
    assert cache.node_usage("n2") == usage(2000, Gi, 1)
    assert cache.assumed_count == 0
    consistent(cache)


def test_assumed_pod_seen_finished(cache: SchedulerCache) -> None:
    p = cached_pod("a")
    cache.assume(p, "n1")
    change = cache.set_pod(cached_pod("a", node_name="n1", phase="Succeeded", rv="2"))
    assert change.confirmed
    assert cache.node_usage("n1") == {} and cache.assumed_count == 0
    assert cache.pod_state("uid-a") is None
    consistent(cache)


def test_assumed_pod_deleted_before_binding(cache: SchedulerCache) -> None:
    p = cached_pod("a")
    cache.set_pod(p)
    cache.assume(p, "n1")
    cache.set_pod(cached_pod("a", deleting=True, rv="2"))
    assert cache.assumed_count == 0 and cache.node_usage("n1") == {}
    assert cache.pod_state("uid-a") is None
    consistent(cache)

    cache.assume(cached_pod("b"), "n2")
    change = cache.remove_pod("uid-b")
    assert change.freed and cache.assumed_count == 0 and cache.node_usage("n2") == {}
    consistent(cache)


# --------------------------------------------------------------------------- nodes
def test_pod_arrives_before_its_node(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n9", cpu="3"))
    assert cache.node_count == 2 and cache.row_of("n9") == -1
    assert cache.node_usage("n9") == {}
    consistent(cache)
    change = cache.set_node(cached_node("n9"))
    assert change.added
    assert cache.node_usage("n9") == usage(3000, Gi, 1)
    assert cache.node_count == 3
    consistent(cache)


def test_pod_on_missing_node_removed_before_the_node_appears(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n9"))
    cache.remove_pod("uid-a")
    assert "n9" not in cache.nodes
    cache.set_node(cached_node("n9"))
    assert cache.node_usage("n9") == {}
    consistent(cache)


def test_node_removed_and_readded(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1", cpu="2"))
    assert cache.remove_node("n1")
    assert cache.node_count == 1 and cache.row_of("n1") == -1
    assert cache.node_usage("n1") == {}
    assert cache.pods_on("n1") == {"uid-a"}  # still bound there as far as the API is concerned
    consistent(cache)
    assert not cache.remove_node("n1")
    change = cache.set_node(cached_node("n1", cpu="8", rv="2"))
    assert change.added and change.resources_changed and change.static_changed
    row = cache.row_of("n1")
    assert cache.node_usage("n1") == usage(2000, Gi, 1)
    assert cache.allocatable[row, cache.column("cpu")] == 8000
    consistent(cache)


def test_node_without_pods_is_forgotten_on_removal(cache: SchedulerCache) -> None:
    assert cache.remove_node("n2")
    assert "n2" not in cache.nodes
    assert not cache.remove_node("n2")
    consistent(cache)


def test_removed_node_row_is_reused_cleanly(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1", cpu="2"))
    row = cache.row_of("n1")
    cache.remove_node("n1")
    cache.set_node(cached_node("n3", cpu="1"))
    assert cache.row_of("n3") == row
    assert cache.node_usage("n3") == {}
    assert cache.allocatable[row, cache.column("cpu")] == 1000
    assert cache.row_names[row] == "n3"
    cache.remove_pod("uid-a")
    assert "n1" not in cache.nodes
    consistent(cache)


def test_set_node_reports_what_changed(cache: SchedulerCache) -> None:
    change = cache.set_node(cached_node("n1", rv="2"))
    assert not change.any
    change = cache.set_node(cached_node("n1", cpu="8", rv="3"))
    assert change.resources_changed and not change.static_changed and not change.added
    change = cache.set_node(cached_node("n1", cpu="8", labels={"a": "b"}, rv="4"))
    assert change.static_changed and not change.resources_changed
    consistent(cache)


def test_new_extended_resource_column_after_nodes_exist(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1"))
    assert cache.column(GPU) == -1
    cache.set_node(cached_node("g", extra={GPU: "4"}))
    col = cache.column(GPU)
    assert col >= 0
    assert cache.allocatable[cache.row_of("g"), col] == 4
    assert cache.allocatable[cache.row_of("n1"), col] == 0
    assert cache.node_usage("n1") == usage(1000, Gi, 1)  # existing usage survives the widening
    cache.set_pod(cached_pod("b", node_name="g", cpu="1", extra={GPU: "2"}))
    assert cache.node_usage("g") == {"cpu": 1000, "memory": Gi, "pods": 1, GPU: 2}
    # a pod that asks for a resource no node has yet opens a column too
    cache.set_pod(cached_pod("c", node_name="n2", extra={"example.com/fpga": "1"}))
    assert cache.node_usage("n2")["example.com/fpga"] == 1
    consistent(cache)
    cache.remove_pod("uid-b")
    assert cache.node_usage("g") == {}
    consistent(cache)


def test_rows_grow_beyond_the_initial_table(clock: FakeClock) -> None:
    cache = SchedulerCache(clock=clock, initial_rows=2)
    for i in range(7):
        cache.set_pod(cached_pod(f"p{i}", node_name=f"n{i}", cpu=f"{i + 1}"))
        cache.set_node(cached_node(f"n{i}", cpu="16"))
    assert cache.rows >= 7 and cache.node_count == 7
    for i in range(7):
        assert cache.node_usage(f"n{i}") == usage((i + 1) * 1000, Gi, 1)
    consistent(cache)


def test_row_limit_bounds_the_rows_in_use(clock: FakeClock) -> None:
    cache = SchedulerCache(clock=clock, initial_rows=4)
    assert cache.row_limit == 0
    for i in range(6):
        cache.set_node(cached_node(f"n{i}"))
    assert cache.rows == 8 and cache.row_limit == 6  # the table doubled; rows 6 and 7 are empty
    assert not cache.valid[cache.row_limit:].any()
    cache.remove_node("n2")
    assert cache.row_limit == 6  # a hole inside stays below the limit
    cache.set_node(cached_node("n6"))
    assert cache.row_of("n6") == 2 and cache.row_limit == 6  # the hole is filled first
    cache.set_node(cached_node("n7"))
    assert cache.row_of("n7") == 6 and cache.row_limit == 7


def test_score_columns_track_non_zero_defaults(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("empty", node_name="n1", cpu=None, memory=None))
    cache.set_pod(cached_pod("cpu", node_name="n1", cpu="1", memory=None))
    row = cache.row_of("n1")
    cpu, mem = cache.column("cpu"), cache.column("memory")
    assert cache.requested[row, cpu] == 1000 and cache.requested[row, mem] == 0
    assert cache.score_requested[row, cpu] == 1000 + DEFAULT_SCORE_CPU_MILLI
    assert cache.score_requested[row, mem] == 2 * DEFAULT_SCORE_MEMORY
    cache.remove_pod("uid-empty")
    cache.remove_pod("uid-cpu")
    assert not cache.score_requested[row].any()
    consistent(cache)


# --------------------------------------------------------------------------- relist
def test_replace_nodes_reconciles(cache: SchedulerCache) -> None:
    cache.set_node(cached_node("n3"))
    cache.set_pod(cached_pod("a", node_name="n2"))
    changed, removed = cache.replace_nodes([cached_node("n1"), cached_node("n2", cpu="2", rv="2"),
                                            cached_node("n4")])
    assert sorted(r.name for r in changed) == ["n2", "n4"]
    assert removed == ["n3"]
    assert cache.node_count == 3 and cache.row_of("n3") == -1
    assert cache.allocatable[cache.row_of("n2"), cache.column("cpu")] == 2000
    assert cache.node_usage("n2") == usage(1000, Gi, 1)
    consistent(cache)


def test_replace_nodes_keeps_a_removed_node_pods_for_its_return(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n2"))
    _, removed = cache.replace_nodes([cached_node("n1")])
    assert removed == ["n2"]
    assert cache.pods_on("n2") == {"uid-a"}
    changed, removed = cache.replace_nodes([cached_node("n1"), cached_node("n2", rv="5")])
    assert [r.name for r in changed] == ["n2"] and removed == []
    assert cache.node_usage("n2") == usage(1000, Gi, 1)
    consistent(cache)


def test_replace_pods_reconciles(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("same", node_name="n1"))
    cache.set_pod(cached_pod("moves", rv="1"))
    cache.set_pod(cached_pod("gone", node_name="n2", cpu="2"))
    cache.set_pod(cached_pod("ends", node_name="n2"))
    inflight = cached_pod("inflight")
    cache.set_pod(inflight)
    cache.assume(inflight, "n1")
    cache.assume(cached_pod("vanished", cpu="3"), "n2")  # assumed, but deleted on the server meanwhile

    server = [cached_pod("same", node_name="n1"), cached_pod("moves", node_name="n2", rv="2"),
              cached_pod("ends", node_name="n2", phase="Succeeded", rv="2"), cached_pod("inflight"),
              cached_pod("new", node_name="n1", cpu="500m", rv="9")]
    changed, removed = cache.replace_pods(server)
    assert sorted(r.name for r in changed) == ["ends", "moves", "new"]
    assert sorted(r.name for r in removed) == ["gone", "vanished"]
    assert cache.is_assumed("uid-inflight") and cache.assumed_count == 1
    # n1: same 1 + inflight 1 + new 0.5; n2: moves 1
    assert cache.node_usage("n1") == usage(2500, 3 * Gi, 3)
    assert cache.node_usage("n2") == usage(1000, Gi, 1)
    consistent(cache)

    # a second identical relist changes nothing that counts
    cache.replace_pods(server)
    assert cache.node_usage("n1") == usage(2500, 3 * Gi, 3)
    assert cache.node_usage("n2") == usage(1000, Gi, 1)
    consistent(cache)


def test_replace_pods_confirms_an_assumption(cache: SchedulerCache, clock: FakeClock) -> None:
    p = cached_pod("a")
    cache.set_pod(p)
    cache.assume(p, "n1")
    cache.binding_finished("uid-a")
    changed, removed = cache.replace_pods([cached_pod("a", node_name="n1", rv="2")])
    assert [r.name for r in changed] == ["a"] and removed == []
    assert cache.assumed_count == 0
    clock.now += 1000
    assert cache.expire_assumed() == []
    assert cache.node_usage("n1") == usage(1000, Gi, 1)
    consistent(cache)


def test_check_consistency_detects_drift(cache: SchedulerCache) -> None:
    cache.set_pod(cached_pod("a", node_name="n1"))
    cache.requested[cache.row_of("n1"), cache.column("cpu")] += 1
    problems = cache.check_consistency()
    assert len(problems) == 1 and "cpu" in problems[0] and "n1" in problems[0]
    cache.requested[cache.row_of("n1"), cache.column("cpu")] -= 1
    consistent(cache)
    assert np.array_equal(cache.requested[cache.row_of("n2")], np.zeros(cache.requested.shape[1]))
