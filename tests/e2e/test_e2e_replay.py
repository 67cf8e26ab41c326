"""The daemon's log replays: `ai-scheduler replay` rebuilds the cluster and the workload from what the
daemon logged (format v1) and the simulator makes the same placements.

The daemon runs a small workload drawn with a fixed seed (whole GPUs, GPU fractions, CPU-only pods,
distinct priorities, more than the cluster holds) under a config file; some pods finish after a few
seconds, spaced apart, so that waiting pods are placed on the room they leave. Its log then goes
through the replay reader alone: nodes, pods, run times and the config come from the log, nothing
from the test. At least 99% of the daemon's placements must come out identical (node and GPUs), and
any difference is printed with its explanation.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from backends import Cluster
from conftest import StartScheduler, create_all, wait_for
from paths import DATA

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.cli import main
from ai_scheduler.config import load_config
from ai_scheduler.sim import DURATION_ANNOTATION
from ai_scheduler.trace import read_cluster
from ai_scheduler.trace.pods import pod_of
from ai_scheduler.tracesim.engine import Simulation, pod_names
from ai_scheduler.tracesim.records import Mode
from ai_scheduler.tracesim.replay import compare_placements, explain, read_log
from e2e.test_e2e_same_decisions import workload

pytestmark = pytest.mark.e2e

CLUSTER = DATA / "cluster_small.csv"
CONFIG: dict[str, Any] = {
    "server": {"port": 0, "bindAddress": "127.0.0.1"},
    "scheduling": {"initialBackoffSeconds": 0.05, "maxBackoffSeconds": 0.2, "unschedulableFlushSeconds": 5,
                   "tieBreak": "nodeOrder"},
}
FINISHING = 6  # pods that end, 0.8 s apart, so that each leaves room on its own


async def test_the_daemons_log_replays_to_the_same_placements(
    tmp_path: Path, cluster: Cluster, api: KubeClient, start_scheduler: StartScheduler
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    config = load_config(path)
    nodes = read_cluster(CLUSTER)
    jobs = workload(seed=11, count=40)
    pods = [pod_of(job, scheduler_name=config.scheduler_name, name=name)
            for job, name in zip(jobs, pod_names(jobs), strict=True)]
    # Which pods finish: the first ones the daemon places (the highest priorities), at spaced times.
    placed_first = [p for _, p in sorted(((j.priority, p) for j, p in zip(jobs, pods, strict=True)),
                                         key=lambda pair: -pair[0])][:FINISHING]
    for i, pod in enumerate(placed_first):
        pod["metadata"].setdefault("annotations", {})[DURATION_ANNOTATION] = f"{1.5 + 0.8 * i:.1f}s"
    await create_all(api, [spec.to_node() for spec in nodes], pods)
    running = await start_scheduler(config, config_path=str(path))

    def finished() -> int:
        return len(running.log_lines("pod.finished"))

    await wait_for(lambda: finished() >= FINISHING, what="the finishing pods to finish", timeout=60)
    await asyncio.sleep(1.5)  # the last room left is taken
    log = tmp_path / "scheduler.log"
    log.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in running.log_lines()))
    sizes = [len(orjson.dumps(line)) + 1 for line in running.log_lines()]

    replay = read_log([log])
    assert {n.name for n in replay.nodes} == {n.name for n in nodes}
    assert len(replay.jobs) == len(jobs) and replay.config.scheduling.tie_break == "nodeOrder"
    assert sum(job.duration is not None for job in replay.jobs) == FINISHING
    simulation = Simulation(replay.config, replay.nodes, replay.jobs, Mode.TIMED, seed=1)
    simulation.run()
    comparison = compare_placements(replay.placements, simulation.placements)
    placed = comparison.logged
    print(f"replay: {comparison.identical} of {placed} placements identical; "
          f"{sum(sizes) / max(placed, 1):.0f} log bytes per placed pod")
    for difference in comparison.differences:
        print("  " + explain(difference))
    assert placed > FINISHING + 10, "pods were placed on the room the finished ones left"
    assert comparison.share >= 0.99, comparison.differences

    # The command does the same, and reports under another config beside it.
    other = tmp_path / "spread.yaml"
    other.write_text(yaml.safe_dump({**CONFIG, "scheduling": {**CONFIG["scheduling"], "tieBreak": "random"}}))
    assert main(["replay", str(log), "--no-progress", "--json", str(tmp_path / "replay.json"),
                 "--config", str(other)]) == 0
    figures = orjson.loads((tmp_path / "replay.json").read_bytes())
    assert figures["placements"]["identical"] == comparison.identical
    assert set(figures) >= {"logged", "spread"}
