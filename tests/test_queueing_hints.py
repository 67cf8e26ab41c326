"""Queueing hints give the decisions of a queue that retries every waiting pod on every event.

With hints, a placed pod leaving retries only the waiting pods that may fit on its node; the others are
retried "virtually" (scheduling_queue.py). Whatever a timed simulation does with hints on, it must do
with them off: the same node and the same start for every pod. The workloads here are small random ones
with a standing queue (more asked for than the cluster holds), of several users (one of them under a
quota, so that some pods are refused by it and wait for a pod of their own user to leave, wherever),
GPU shares, pods that fit only one kind of node, and gangs that need more than one node, under the
default config (starvation reservations, backfill) and with reservations off.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from ai_scheduler.config import Config, parse_config
from ai_scheduler.trace import NodeSpec, TraceJob
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


def test_hints_spare_attempts() -> None:
    """Without reservations the hints leave pods untried that could not fit (else they would be moot)."""
    cfg = config(reservation=False)
    jobs = workload(1)
    _, without = simulate(cfg, jobs, hints=False)
    _, with_hints = simulate(cfg, jobs, hints=True)
    assert sum(pod.attempts for pod in with_hints.pods) < sum(pod.attempts for pod in without.pods)
