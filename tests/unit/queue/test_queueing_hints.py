"""Queueing hints give the decisions of a queue that retries every waiting pod on every event.

With hints, a placed pod leaving retries only the waiting pods that may fit on its node; the others are
retried "virtually" (scheduling_queue.py). Whatever a timed simulation does with hints on, it must do
with them off: the same node and the same start for every pod. The workloads here are small random ones
with a standing queue (more asked for than the cluster holds), of several users (one of them under a
quota, so that some pods are refused by it and wait for a pod of their own user to leave, wherever),
GPU shares, pods that fit only one kind of node, and gangs that need more than one node, under the
default config (starvation reservations, backfill) and with reservations off. With the hints, a pod
that fails as an equivalent pod failed at the same room version repeats that failure without the filters
(schedule_one.py): the same placements again, on these workloads and on the sample Philly and Helios
traces under a standing queue. A gang whose attempt failed for room alone waits with a hint too, its
members as one unit (`UnitHint`): moved together, or retried virtually together.
"""

from __future__ import annotations

import io
import random
from typing import Any

import orjson
import pytest
from builders import Pod
from paths import DATA

from ai_scheduler.cache.cache import SchedulerCache
from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import Config, parse_config
from ai_scheduler.log import JsonLogger
from ai_scheduler.queue import QueuedPod, SchedulingQueue, UnitHint
from ai_scheduler.scheduler.framework.runtime import Framework
from ai_scheduler.scheduler.gang import GangScheduler
from ai_scheduler.trace import NodeSpec, TraceJob, read_workload
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.records import Mode, SimResult

Gi = 2**30
USERS = ("alice", "bob", "carol", "dave")


def cluster() -> list[NodeSpec]:
    """Two kinds of GPU node (a job asking for the A100 model fits only the first kind) and CPU nodes."""
    nodes = [NodeSpec(name=f"a{i}", cpu=32_000, memory=256 * Gi, gpus=4, gpu_model="A100-80GB",
                      gpu_memory=80 * Gi, managed=True) for i in range(3)]
    nodes += [NodeSpec(name=f"v{i}", cpu=16_000, memory=128 * Gi, gpus=2, gpu_model="V100-32GB",
                       gpu_memory=32 * Gi, managed=True) for i in range(3)]
    nodes += [NodeSpec(name=f"c{i}", cpu=8_000, memory=32 * Gi) for i in range(2)]
    return nodes


def workload(seed: int, count: int = 100) -> list[TraceJob]:
    """Arrivals faster than the cluster serves them; some gangs (2 pods of 4 GPUs or 3 of 2: more than one
    node each), some GPU shares, some CPU-only jobs, a few with a GPU model."""
    rng = random.Random(seed)
    jobs: list[TraceJob] = []
    now = 0.0
    gangs = 0
    while len(jobs) < count:
        now += rng.choice([0.0, 0.0, 1.0, 2.0, 3.0, 7.0, 15.0])
        user = rng.choice(USERS)
        duration = float(rng.choice([5, 12, 30, 60, 90, 240, 600]))
        kind = rng.random()
        common: dict[str, Any] = {"submit_time": now, "duration": duration, "user": user,
                                  "cpu": rng.choice([1, 2, 4]) * 1000, "memory": rng.choice([2, 8, 16]) * Gi}
        if kind < 0.08:
            gangs += 1
            size, gpus = rng.choice([(2, 4), (3, 2)])
            jobs += [TraceJob(name=f"g{gangs}-{m}", gpus=gpus, gang=f"g{gangs}", gang_size=size, **common)
                     for m in range(size)]
        elif kind < 0.2:
            jobs.append(TraceJob(name=f"j{len(jobs)}", gpu_fraction=rng.choice([0.25, 0.5]), **common))
        elif kind < 0.3:
            jobs.append(TraceJob(name=f"j{len(jobs)}", **common))
        elif kind < 0.4:
            jobs.append(TraceJob(name=f"j{len(jobs)}", gpus=rng.choice([1, 2]), gpu_models=("A100-80GB",),
                                 **common))
        else:
            jobs.append(TraceJob(name=f"j{len(jobs)}", gpus=rng.choice([1, 1, 2, 4]), **common))
    return jobs


def config(*, reservation: bool) -> Config:
    """The defaults, with the users known by their namespaces and a cpu quota on one of them."""
    return parse_config({
        "groups": {"team": {}, "lab": {}},
        "users": {"alice": {"group": "team", "max": {"cpu": "6"}}, "bob": {"group": "team"},
                  "carol": {"group": "lab"}, "dave": {"group": "lab"}},
        "namespaces": {user: {"user": user} for user in USERS},
        "scheduling": {"reservation": reservation, "backfill": reservation},
    })


def simulate(cfg: Config, jobs: list[TraceJob], hints: bool) -> tuple[Simulation, SimResult]:
    simulation = Simulation(cfg, cluster(), jobs, Mode.TIMED, queueing_hints=hints)
    return simulation, simulation.run()


@pytest.mark.parametrize("reservation", [False, True], ids=["no-reservation", "reservation"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hints_give_the_same_placements_pod_by_pod(seed: int, reservation: bool) -> None:
    cfg = config(reservation=reservation)
    jobs = workload(seed)
    _, without = simulate(cfg, jobs, hints=False)
    _, with_hints = simulate(cfg, jobs, hints=True)
    first = [(pod.name, pod.node, pod.start) for pod in without.pods]
    second = [(pod.name, pod.node, pod.start) for pod in with_hints.pods]
    differ = [(a, b) for a, b in zip(first, second, strict=True) if a != b]
    assert not differ, f"{len(differ)} pods placed otherwise with hints, first: {differ[:3]}"
    # The workload is what it is meant to be: a standing queue, quota refusals, gangs placed.
    assert sum(pod.start is not None and pod.start > pod.submit for pod in without.pods) > len(jobs) // 3
    assert any("exceeds quota" in pod.reason for pod in without.pods)
    assert any(pod.node for pod in without.pods if pod.name.startswith("g"))
    assert sum(bool(pod.node) for pod in without.pods) > len(jobs) * 9 // 10


def test_hints_spare_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without reservations the hints leave pods untried that could not fit (else they would be moot),
    gangs' attempts too."""
    gang_attempts = {"n": 0}
    schedule = GangScheduler.schedule

    def counted(self: GangScheduler, *args: Any) -> int:
        gang_attempts["n"] += 1
        return schedule(self, *args)

    monkeypatch.setattr(GangScheduler, "schedule", counted)
    cfg = config(reservation=False)
    jobs = workload(1)
    _, without = simulate(cfg, jobs, hints=False)
    tried_without, gang_attempts["n"] = gang_attempts["n"], 0
    _, with_hints = simulate(cfg, jobs, hints=True)
    assert sum(pod.attempts for pod in with_hints.pods) < sum(pod.attempts for pod in without.pods)
    assert gang_attempts["n"] < tried_without, (gang_attempts["n"], tried_without)  # equal without UnitHint


def unit_in_queue(size: int, clock: list[float]) -> tuple[SchedulingQueue, list[QueuedPod]]:
    """A queue holding `size` members of one gang, tried at clock[0] and put back unschedulable as a unit."""
    queue = SchedulingQueue(clock=lambda: clock[0])
    for i in range(size):
        queue.add(Pod.bare(f"g-{i}").uid().container("c", "i").phase("Pending").record())
    held = [qp for qp in iter(queue.pop_nowait, None)]
    for qp in held:
        queue.requeue(qp, unschedulable=True, reason="no room", hint=UnitHint("ns/g", "shape", size))
    return queue, held


def test_a_gang_that_failed_for_room_waits_as_one_unit() -> None:
    """The members of a gang that fit nowhere wait with one unit's hints: room freed where no member fits
    retries them virtually, all together; room where one fits moves them all (one verdict per hint)."""
    clock = [100.0]
    queue, held = unit_in_queue(3, clock)
    clock[0] = 110.0  # past the members' backoff
    assert queue.move_freed("AssignedPodDelete", lambda pod: False) == 0
    assert [qp.attempts for qp in held] == [2, 2, 2] and queue.pop_nowait() is None
    clock[0] = 300.0
    asked: list[str] = []

    def fits(pod: PodRecord) -> bool:
        asked.append(pod.name)
        return True

    assert queue.move_freed("AssignedPodDelete", fits) == 3
    assert asked == ["g-0"]
    assert sorted(qp.pod.name for qp in iter(queue.pop_nowait, None)) == ["g-0", "g-1", "g-2"]


@pytest.mark.parametrize("change", ["deleted", "hint dropped"])
def test_a_unit_not_whole_in_the_queue_moves_on_every_event(change: str) -> None:
    """A unit whose members do not all wait with its hint (one was deleted; a timeout dropped one's hint)
    moves as a queue without hints would move it: whatever is unsure moves."""
    clock = [100.0]
    queue, held = unit_in_queue(3, clock)
    if change == "deleted":
        queue.delete(held[2].pod.uid)
    else:
        queue.drop_hint(held[2].pod.uid)
    clock[0] = 110.0
    assert queue.move_freed("AssignedPodDelete", lambda pod: False) == (2 if change == "deleted" else 3)
    assert [qp.attempts for qp in held] == [1, 1, 1]


def test_equivalent_pods_repeat_a_failure_without_the_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pods alike to one that just failed, with nothing freed since, fail without a filter run; their
    decision lines say whose attempt they repeat, with its message; those waiting in activeQ are retried
    virtually at once (`take_alike`: no filter run, no decision line); the placements stay the same as
    with every failure run in full (a room version that never repeats)."""
    runs = {"filters": 0, "taken": 0}
    take_alike = SchedulingQueue.take_alike

    def taken(self: SchedulingQueue, *args: Any) -> int:
        count = take_alike(self, *args)
        runs["taken"] += count
        return count

    monkeypatch.setattr(SchedulingQueue, "take_alike", taken)
    schedule = Framework.schedule

    def counted(self: Framework, *args: Any, **kwargs: Any) -> Any:
        runs["filters"] += 1
        return schedule(self, *args, **kwargs)

    def run() -> tuple[SimResult, list[dict[str, Any]], int]:
        runs["filters"] = runs["taken"] = 0
        log = io.BytesIO()
        result = Simulation(config(reservation=False), cluster(), workload(2), Mode.TIMED,
                            queueing_hints=True, logger=JsonLogger(stream=log, level="info")).run()
        lines = [orjson.loads(line) for line in log.getvalue().splitlines()]
        decisions = [line for line in lines if line.get("event") == "decision"]
        return result, decisions, runs["filters"] + runs["taken"]

    monkeypatch.setattr(Framework, "schedule", counted)
    result, decisions, filters = run()
    alike = runs["taken"]
    assert alike > 10
    filters -= alike
    repeats = [line for line in decisions if "equivalentTo" in line]
    assert len(repeats) > 10 and all(line["result"] == "unschedulable" for line in repeats)
    # Each repeat names a pod (another, or itself retried with nothing freed) whose attempt ran in full
    # before it, and says why as that attempt did.
    full_run: dict[str, str] = {}
    for line in decisions:
        if "equivalentTo" in line:
            assert full_run[line["equivalentTo"]].startswith("0/8 nodes are available:")
            assert line["message"] == full_run[line["equivalentTo"]]
        elif line["result"] == "unschedulable":
            full_run[line["uid"]] = line["message"]
    assert sum(line["equivalentTo"] != line["uid"] for line in repeats) > 5
    fresh = iter(range(10**9))
    monkeypatch.setattr(SchedulerCache, "room_version", lambda self: (next(fresh),))
    full, full_decisions, full_filters = run()
    assert not any("equivalentTo" in line for line in full_decisions) and not runs["taken"]
    assert len(full_decisions) == len(decisions) + alike
    assert filters == full_filters - len(repeats) - alike
    assert [(p.name, p.node, p.start) for p in result.pods] == [(p.name, p.node, p.start) for p in full.pods]



@pytest.mark.parametrize(("sample", "count", "gangs"), [("trace_philly.csv", 2, False),
                                                       ("trace_helios.csv", 2, False),
                                                       ("trace_philly.csv", 3, True)])
def test_hints_change_no_placement_on_the_sample_traces(sample: str, count: int, gangs: bool) -> None:
    """The sample Philly and Helios traces' lone jobs on two 8-GPU nodes, too few for them (a standing
    queue), and the Philly sample with its gangs (multi-node jobs) on three."""
    jobs = [job for job in read_workload(DATA / sample).jobs if gangs or not job.gang]
    assert not gangs or sum(bool(job.gang) for job in jobs) >= 8
    nodes = [NodeSpec(name=f"n{i}", cpu=64_000, memory=512 * Gi, gpus=8, gpu_model="V100-32GB",
                      gpu_memory=32 * Gi, managed=True) for i in range(count)]
    cfg = parse_config({"scheduling": {"reservation": False, "backfill": False}})
    without = Simulation(cfg, nodes, jobs, Mode.TIMED, queueing_hints=False).run()
    with_hints = Simulation(cfg, nodes, jobs, Mode.TIMED, queueing_hints=True).run()
    first = [(pod.name, pod.node, pod.start) for pod in without.pods]
    assert first == [(pod.name, pod.node, pod.start) for pod in with_hints.pods]
    assert sum(pod.start is not None and pod.start > pod.submit for pod in without.pods) >= 3
    assert sum(bool(pod.node) for pod in without.pods) > len(jobs) * 3 // 4


def test_the_config_turns_hints_on_and_a_reload_turns_them_off() -> None:
    """`scheduling.queueingHints` is what the daemon reads: on, the core hints and repeats equivalent
    failures (the same placements as without); a reload without it drops every hint held."""
    hinted = parse_config({"scheduling": {"reservation": False, "backfill": False, "queueingHints": True}})
    assert hinted.scheduling.queueing_hints and not config(reservation=False).scheduling.queueing_hints
    log = io.BytesIO()
    simulation = Simulation(hinted, cluster(), workload(3), Mode.TIMED,
                            logger=JsonLogger(stream=log, level="info"))
    result = simulation.run()
    assert b'"equivalentTo"' in log.getvalue()
    _, plain = simulate(parse_config({"scheduling": {"reservation": False, "backfill": False}}), workload(3),
                        hints=False)
    assert [(p.name, p.node, p.start) for p in result.pods] == [(p.name, p.node, p.start) for p in plain.pods]
    core = simulation.core

    def hints() -> tuple[bool, bool]:
        return core.cycle.hint_of is not None, core.handlers.hint is not None

    assert hints() == (True, True)
    core.reconfigure(parse_config({"scheduling": {"reservation": False}}))
    assert hints() == (False, False)
    core.reconfigure(hinted)
    assert hints() == (True, True)
