"""The daemon and the trace simulator drive one scheduling core: given the same workload they make the
same placements, in the same order.

A small workload drawn with a fixed seed (whole GPUs, GPU fractions, CPU-only pods, distinct priorities,
more than the cluster holds) is created on the backend before the daemon starts, so that its first
sync finds every pod pending, as the simulator's first instant does. The daemon's placements are read
from its decision log; the simulator's from its run. Both use the same config (node-order tie-breaks,
so that no random draw separates them) and the same cluster, built from one trace cluster file.
"""

from __future__ import annotations

import random

import pytest
from backends import Cluster
from conftest import StartScheduler, create_all, fast_config, wait_for
from paths import DATA

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.trace import TraceJob, read_cluster
from ai_scheduler.trace.pods import pod_of
from ai_scheduler.tracesim.engine import Simulation, pod_names
from ai_scheduler.tracesim.records import Mode

pytestmark = pytest.mark.e2e

CLUSTER = DATA / "cluster_small.csv"
GIB = 2**30


def workload(seed: int, count: int) -> list[TraceJob]:
    rng = random.Random(seed)
    priorities = rng.sample(range(1, 1000), count)
    jobs = []
    for i, priority in enumerate(priorities):
        kind = rng.choice(["cpu", "whole", "whole", "fraction", "fraction"])
        shape: dict[str, float | int] = {}
        if kind == "whole":
            shape["gpus"] = rng.choice([1, 2, 4, 8])
        elif kind == "fraction":
            shape["gpu_fraction"] = rng.choice([0.25, 0.5, 0.75])
        jobs.append(TraceJob(
            name=f"job-{i}", submit_time=0.0, duration=None, cpu=rng.choice([1, 2, 4, 16]) * 1000,
            memory=rng.choice([2, 8, 32]) * GIB, priority=priority, **shape,  # type: ignore[arg-type]
        ))
    return jobs


async def test_daemon_and_simulator_place_the_same_pods_in_the_same_order(
    cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    nodes = read_cluster(CLUSTER)
    jobs = workload(seed=11, count=60)
    config = fast_config(tieBreak="nodeOrder")
    names = pod_names(jobs)
    pods = [pod_of(job, scheduler_name=config.scheduler_name, name=name) for job, name in zip(jobs, names,
                                                                                            strict=True)]
    await create_all(api, [spec.to_node() for spec in nodes], pods)

    simulation = Simulation(config, nodes, jobs, Mode.TIMED, seed=1)
    simulation.run()
    expected = [(pod, node, list(gpus)) for pod, node, gpus in simulation.placements]
    assert 0 < len(expected) < len(jobs), "the workload must both fit in part and overflow the cluster"

    running = await start_scheduler(config)

    def placements() -> list[tuple[str, str, list[int]]]:
        lines = running.log_lines("decision")
        if len({line["pod"] for line in lines}) < len(jobs):  # every pod tried once at least
            return []
        return [
            (line["pod"], line["node"], list((line.get("gpus") or {}).get("ids", [])))
            for line in lines
            if line["result"] == "scheduled"
        ]

    got = await wait_for(placements, what="every pod tried")
    print(f"same decisions: {len(jobs)} pods, {len(expected)} placed by both, first "
          f"{expected[:3]}")
    assert got == expected
