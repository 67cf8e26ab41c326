"""The scheduling queue: ordering, backoff, the unschedulable set, the move-request cycle."""

from __future__ import annotations

import asyncio

import pytest
from builders import Pod

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.queue import QueueClosed, QueuedPod, SchedulingQueue

DEADLINE = 5.0  # generous bound for awaits that must complete; never a timing assertion


class FakeClock:
    """A clock the test moves by hand, so backoff arithmetic is exact."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def queued_pod(name: str, priority: int = 0, labels: dict[str, str] | None = None,
               phase: str = "Pending", resource_version: str = "1") -> PodRecord:
    return (Pod.bare(name).uid().labels(labels or {}).rv(resource_version).spec(priority=priority)
            .container("c", "i").phase(phase).record())


def drain(q: SchedulingQueue) -> list[str]:
    names = []
    while (qp := q.pop_nowait()) is not None:
        names.append(qp.pod.name)
    return names


def pop_named(q: SchedulingQueue, name: str) -> QueuedPod:
    qp = q.pop_nowait()
    assert qp is not None and qp.pod.name == name
    return qp


def test_priority_then_arrival_order() -> None:
    q = SchedulingQueue(clock=FakeClock())
    for name, prio in [("a", 0), ("b", 10), ("c", 0), ("d", 10), ("e", -5)]:
        q.add(queued_pod(name, prio))
    assert drain(q) == ["b", "d", "a", "c", "e"]
    assert q.pop_nowait() is None


def test_reentry_is_ordered_by_the_failure() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    q.add(queued_pod("a"))
    qp = pop_named(q, "a")
    clock.now += 0.5
    q.add(queued_pod("b"))
    clock.now += 0.5
    q.requeue(qp, unschedulable=False, reason="bind failed")
    clock.now += 1.0
    assert q.flush_due() == 1
    assert drain(q) == ["b", "a"]  # a failed (its new timestamp) after b arrived


def test_a_moved_pod_goes_back_to_its_place() -> None:
    """kube-scheduler's Timestamp: equal keys are ordered by when each pod was added or last failed, not by
    when an event moved it back, nor by the order the moves came in."""
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    for name in ("a", "b"):
        q.add(queued_pod(name))
    first, second = q.pop_nowait(), q.pop_nowait()
    assert first is not None and second is not None
    q.requeue(first, unschedulable=True)
    clock.now += 1.0
    q.requeue(second, unschedulable=True)
    clock.now += 20.0
    q.add(queued_pod("c"))
    q.move_all("NodeAdd")
    assert drain(q) == ["a", "b", "c"]


def test_requeue_says_whether_it_put_the_pod_back() -> None:
    """The scheduling loop's recovery tells a pod why only when it really goes back for a retry."""
    q = SchedulingQueue(clock=FakeClock())
    q.add(queued_pod("a"))
    qp = pop_named(q, "a")
    assert q.requeue(qp, unschedulable=False, reason="error") is True
    assert q.requeue(qp, unschedulable=False, reason="error") is False  # no longer in flight
    q.add(queued_pod("b"))
    gone = pop_named(q, "b")
    q.delete(gone.pod.uid)
    assert q.requeue(gone, unschedulable=False, reason="error") is False  # deleted while in flight


def test_pop_marks_attempt_and_in_flight() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    q.add(queued_pod("a"))
    clock.now += 3
    qp = pop_named(q, "a")
    assert qp.attempts == 1
    assert qp.initial_attempt == 1000.0 and qp.enqueued == 1000.0
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "in_flight": 1}
    assert "uid-a" in q and len(q) == 1
    q.done("uid-a")
    assert "uid-a" not in q and len(q) == 0
    assert q.pending_info("uid-a") is None


@pytest.mark.parametrize("unschedulable", [False, True])
def test_backoff_durations_double_up_to_max(unschedulable: bool) -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    q.add(queued_pod("a"))
    for expected in [1, 2, 4, 8, 10, 10]:
        qp = pop_named(q, "a")
        q.requeue(qp, unschedulable=unschedulable, reason="no fit")
        if unschedulable:
            assert q.counts()["unschedulable"] == 1
            assert q.move_all("NodeAdd") == 1  # still within backoff: goes to backoffQ
        assert q.counts()["backoff"] == 1
        clock.now += expected - 0.001
        assert q.flush_due() == 0 and q.pop_nowait() is None
        clock.now += 0.001
        assert q.flush_due() == 1
        assert q.counts()["active"] == 1
    assert [q.backoff_duration(n) for n in range(1, 8)] == [1, 2, 4, 8, 10, 10, 10]


def test_move_all_after_backoff_goes_straight_to_active() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    q.add(queued_pod("a"))
    q.requeue(pop_named(q, "a"), unschedulable=True, reason="0/3 nodes are available")
    info = q.pending_info("uid-a")
    assert info is not None and info.reason == "0/3 nodes are available"
    clock.now += 60
    assert q.move_all("NodeAdd") == 1
    assert q.counts() == {"active": 1, "backoff": 0, "unschedulable": 0, "in_flight": 0}
    assert q.move_all("NodeAdd") == 0


def test_move_request_cycle_rule() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    q.add(queued_pod("a"))
    q.add(queued_pod("b"))
    a = pop_named(q, "a")
    assert q.move_all("NodeAdd") == 0  # nothing unschedulable yet, but a is in flight
    b = pop_named(q, "b")  # popped after the move: it saw the new node
    q.requeue(a, unschedulable=True)
    q.requeue(b, unschedulable=True)
    assert q.counts()["backoff"] == 1 and q.counts()["unschedulable"] == 1
    clock.now += 1
    q.flush_due()
    assert pop_named(q, "a").attempts == 2
    assert q.pop_nowait() is None


def test_unschedulable_flushed_after_timeout() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock, unschedulable_flush=300)
    q.add(queued_pod("a"))
    q.requeue(pop_named(q, "a"), unschedulable=True)
    clock.now += 100
    q.add(queued_pod("b"))
    q.requeue(pop_named(q, "b"), unschedulable=True)
    clock.now += 199.999
    assert q.flush_due() == 0
    clock.now += 0.001
    assert q.flush_due() == 1
    assert drain(q) == ["a"]
    clock.now += 100
    assert q.flush_due() == 1
    assert drain(q) == ["b"]


def test_delete_in_every_state() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    for name in "abcd":
        q.add(queued_pod(name))
    pop_named(q, "a")
    q.requeue(pop_named(q, "b"), unschedulable=False)
    q.requeue(pop_named(q, "c"), unschedulable=True)
    in_flight = pop_named(q, "d")
    q.add(queued_pod("e"))
    assert q.counts() == {"active": 1, "backoff": 1, "unschedulable": 1, "in_flight": 2}
    for name in "abcde":
        q.delete(f"uid-{name}")
    q.delete("uid-unknown")
    assert len(q) == 0
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "in_flight": 0}
    assert q.counts_by_queue() == {}
    q.requeue(in_flight, unschedulable=False)  # attempt outlived its pod: ignored
    q.done("uid-a")
    assert len(q) == 0
    clock.now += 1000
    assert q.flush_due() == 0 and q.move_all("PodDelete") == 0 and q.pop_nowait() is None


def test_stale_attempt_of_readded_pod_is_ignored() -> None:
    q = SchedulingQueue(clock=FakeClock())
    q.add(queued_pod("a"))
    old = pop_named(q, "a")
    q.delete("uid-a")
    q.add(queued_pod("a"))
    q.requeue(old, unschedulable=True)
    q.done("uid-a")  # not in flight: the new incarnation waits in activeQ
    assert q.counts() == {"active": 1, "backoff": 0, "unschedulable": 0, "in_flight": 0}
    assert pop_named(q, "a").attempts == 1


def test_update_resorts_on_priority_change() -> None:
    q = SchedulingQueue(clock=FakeClock())
    for name in "abc":
        q.add(queued_pod(name, priority=5))
    q.update(queued_pod("c", priority=10))
    q.update(queued_pod("a", priority=1))
    q.add(queued_pod("b", priority=5, labels={"x": "y"}))  # known uid: an update, keeps its place
    assert drain(q) == ["c", "b", "a"]
    assert len(q) == 3


def test_update_of_in_flight_and_unknown_pods() -> None:
    q = SchedulingQueue(clock=FakeClock())
    q.add(queued_pod("a"))
    qp = pop_named(q, "a")
    newer = queued_pod("a", priority=7)
    q.update(newer)
    assert qp.pod is newer
    assert q.counts()["in_flight"] == 1
    q.update(queued_pod("z"))  # unknown: added
    assert q.counts()["active"] == 1 and "uid-z" in q


def test_update_of_unschedulable_pod_moves_only_on_spec_change() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock)
    q.add(queued_pod("a"))
    q.requeue(pop_named(q, "a"), unschedulable=True)
    # Our own PodScheduled=False patch comes back as a status-only update: no retry storm.
    q.update(queued_pod("a", resource_version="2"))
    assert q.counts()["unschedulable"] == 1
    q.update(queued_pod("a", labels={"tier": "gold"}, resource_version="3"))
    assert q.counts()["backoff"] == 1
    q.requeue(pop_after_backoff(q, clock), unschedulable=True)
    clock.now += 60
    q.update(queued_pod("a", priority=3, resource_version="4"))
    assert q.counts()["active"] == 1


def pop_after_backoff(q: SchedulingQueue, clock: FakeClock) -> QueuedPod:
    clock.now += 10
    q.flush_due()
    qp = q.pop_nowait()
    assert qp is not None
    return qp


def test_counts_and_counts_by_queue() -> None:
    q = SchedulingQueue(clock=FakeClock(), queue_name_of=lambda pod: pod.labels.get("queue", "default"))
    q.add(queued_pod("a", labels={"queue": "research"}))
    q.add(queued_pod("b", labels={"queue": "research"}))
    q.add(queued_pod("c"))
    q.add(queued_pod("d", priority=-1, labels={"queue": "prod"}))
    q.requeue(pop_named(q, "a"), unschedulable=True)
    q.requeue(pop_named(q, "b"), unschedulable=False)
    pop_named(q, "c")
    assert q.counts() == {"active": 1, "backoff": 1, "unschedulable": 1, "in_flight": 1}
    assert q.counts_by_queue() == {
        ("research", "unschedulable"): 1, ("research", "backoff"): 1,
        ("default", "in_flight"): 1, ("prod", "active"): 1,
    }
    q.update(queued_pod("d", priority=-1, labels={"queue": "research"}))  # relabelled into another queue
    q.done("uid-c")
    assert q.counts_by_queue() == {
        ("research", "unschedulable"): 1, ("research", "backoff"): 1, ("research", "active"): 1,
    }
    assert len(q) == 3


async def test_pop_blocks_until_add() -> None:
    q = SchedulingQueue()
    waiter = asyncio.create_task(q.pop())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not waiter.done()
    q.add(queued_pod("a", priority=1))
    qp = await asyncio.wait_for(waiter, DEADLINE)
    assert qp.pod.name == "a"
    assert q.counts()["in_flight"] == 1


async def test_two_waiters_each_get_one_pod() -> None:
    q = SchedulingQueue()
    waiters = [asyncio.create_task(q.pop()) for _ in range(2)]
    await asyncio.sleep(0)
    q.add(queued_pod("a"))
    q.add(queued_pod("b"))
    got = await asyncio.wait_for(asyncio.gather(*waiters), DEADLINE)
    assert sorted(qp.pod.name for qp in got) == ["a", "b"]


async def test_backoff_timer_moves_pod_back() -> None:
    q = SchedulingQueue(initial_backoff=0.01, max_backoff=0.02)
    q.add(queued_pod("a"))
    for attempt in (1, 2, 3):
        qp = await asyncio.wait_for(q.pop(), DEADLINE)
        assert qp.attempts == attempt
        q.requeue(qp, unschedulable=False, reason="bind failed")
        assert q.counts()["backoff"] == 1
    qp = await asyncio.wait_for(q.pop(), DEADLINE)
    assert qp.attempts == 4 and qp.reason == "bind failed"


async def test_timer_rearms_for_earlier_deadline() -> None:
    q = SchedulingQueue(initial_backoff=0.01, max_backoff=60.0)
    q.add(queued_pod("slow"))
    q.add(queued_pod("fast"))
    slow = await q.pop()
    fast = await q.pop()
    slow.attempts = 20  # long (60 s) backoff armed first...
    q.requeue(slow, unschedulable=False)
    q.requeue(fast, unschedulable=False)  # ...then a shorter one must re-arm the timer
    qp = await asyncio.wait_for(q.pop(), DEADLINE)
    assert qp.pod.name == "fast"
    assert q.counts()["backoff"] == 1
    q.close()


async def test_unschedulable_flush_timer() -> None:
    q = SchedulingQueue(initial_backoff=0.001, unschedulable_flush=0.02)
    q.add(queued_pod("a"))
    q.requeue(await q.pop(), unschedulable=True)
    assert q.counts()["unschedulable"] == 1
    qp = await asyncio.wait_for(q.pop(), DEADLINE)
    assert qp.attempts == 2


def test_queue_built_and_fed_outside_a_loop() -> None:
    q = SchedulingQueue(initial_backoff=0.01)
    q.add(queued_pod("a"))
    q.requeue(pop_named(q, "a"), unschedulable=False)  # no loop: no timer yet

    async def main() -> QueuedPod:
        return await asyncio.wait_for(q.pop(), DEADLINE)  # pop arms the timer

    assert asyncio.run(main()).attempts == 2


async def test_close_wakes_waiters() -> None:
    q = SchedulingQueue(initial_backoff=0.01)
    q.add(queued_pod("a"))
    q.requeue(await q.pop(), unschedulable=False)
    waiters = [asyncio.create_task(q.pop()) for _ in range(3)]
    await asyncio.sleep(0)
    q.close()
    results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), DEADLINE)
    assert all(isinstance(r, QueueClosed) for r in results)
    with pytest.raises(QueueClosed):
        await q.pop()
    q.add(queued_pod("b"))
    assert q.pop_nowait() is None


def test_take_pulls_a_sibling_from_any_state_into_flight() -> None:
    clock = FakeClock()
    q = SchedulingQueue(clock=clock, initial_backoff=1.0, max_backoff=10.0)
    a, b, c = queued_pod("a"), queued_pod("b"), queued_pod("c")
    for pod in (a, b, c):
        q.add(pod)
    first = q.pop_nowait()
    assert first is not None
    q.requeue(first, unschedulable=True)          # a: unschedulable
    second = q.pop_nowait()
    assert second is not None
    q.requeue(second, unschedulable=False)        # b: backoff
    taken = [q.take(uid) for uid in ("uid-a", "uid-b", "uid-c")]
    assert all(t is not None for t in taken)
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0, "in_flight": 3}
    assert [t.attempts for t in taken if t] == [2, 2, 1]
    assert q.take("uid-a") is None and q.take("missing") is None
    q.done("uid-a")
    assert len(q) == 2
