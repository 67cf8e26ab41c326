"""Expected start times: the core's state simulated forward (tracesim/forecast.py)."""

from __future__ import annotations

from typing import Any

from builders import make_node, make_pod

from ai_scheduler.cache.records import PodRecord
from ai_scheduler.config import default_config
from ai_scheduler.log import rfc3339
from ai_scheduler.scheduler.core import SchedulerCore
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.forecast import forecast

HOUR = 3600.0


def core_with(nodes: int = 1, gpus: int = 8) -> tuple[Simulation, SchedulerCore]:
    """A scheduling core with `nodes` nodes of `gpus` GPUs, on a simulated clock an hour in."""
    simulation = Simulation(default_config(), [], [])
    simulation.clock.now = HOUR
    core = simulation.core
    for index in range(nodes):
        core.handlers.on_node_event("ADDED", make_node(f"n{index}", cpu="64", memory="512Gi", gpus=gpus))
    core.start()
    return simulation, core


def add(core: SchedulerCore, name: str, gpus: int, estimate: str | None, *, node: str | None = None,
        started_ago: float = 0.0, created_ago: float = 0.0) -> PodRecord:
    obj: dict[str, Any] = make_pod(
        name, gpus=gpus, cpu="1", memory="1Gi", node_name=node,
        annotations={"ai-scheduler.io/estimated-runtime": estimate} if estimate else None,
    )
    now = core.wall()
    obj["metadata"]["uid"] = name
    obj["metadata"]["creationTimestamp"] = rfc3339(now - created_ago, millis=False)
    if node:
        obj["status"] = {"phase": "Running", "startTime": rfc3339(now - started_ago, millis=False)}
    pod = PodRecord.from_api(obj)
    core.handlers.pod_event("ADDED", pod)
    return pod


def test_waiting_pods_start_when_the_running_ones_end_in_queue_order() -> None:
    _, core = core_with()
    add(core, "running", 8, "2h", node="n0", started_ago=HOUR)  # ends in an hour
    add(core, "b", 4, "30m", created_ago=300)
    add(core, "c", 4, "1h", created_ago=200)
    add(core, "d", 8, "1h", created_ago=100)
    now = core.wall()
    result = forecast(core)
    assert result.waiting == 3 and result.running == 1
    starts = {uid: round((result.starts[uid] - now) / 60) for uid in ("b", "c", "d")}
    # b and c share the node once `running` ends; d needs all 8 GPUs: after c (the longer) ends.
    assert starts == {"b": 60, "c": 60, "d": 120}


def test_a_pod_that_needs_room_held_by_a_pod_of_unknown_run_time_has_no_expected_start() -> None:
    _, core = core_with()
    add(core, "forever", 8, None, node="n0", started_ago=HOUR)
    add(core, "waiting", 1, "1h")
    result = forecast(core, horizon_s=2 * HOUR)
    assert result.expected_start("waiting") is None
    assert result.waiting == 1


def test_a_forecast_leaves_the_daemons_state_untouched_and_teaches_it_nothing() -> None:
    _, core = core_with(nodes=2)
    running = add(core, "running", 8, "1h", node="n0", started_ago=HOUR / 2)
    add(core, "small", 2, "10m")
    before = (core.cache.node_usage("n0"), core.cache.node_usage("n1"), len(core.queue.pending()))
    result = forecast(core)
    assert result.expected_start("small") is not None
    assert (core.cache.node_usage("n0"), core.cache.node_usage("n1"), len(core.queue.pending())) == before
    assert core.cache.pod_state("running") is not None and running.node_name == "n0"
    assert core.cache.pod_state("sim-0") is None  # the simulation's pods live in its own cache


def test_a_gang_starts_whole_in_the_forecast() -> None:
    _, core = core_with(nodes=2)
    add(core, "running", 8, "3h", node="n0", started_ago=HOUR)  # n0 frees in two hours
    for member in ("g-0", "g-1"):
        obj = make_pod(member, gpus=8, cpu="1", memory="1Gi",
                       annotations={"ai-scheduler.io/estimated-runtime": "1h"},
                       labels={"pod-group.scheduling.sigs.k8s.io/name": "g",
                               "pod-group.scheduling.sigs.k8s.io/min-available": "2"})
        obj["metadata"]["uid"] = member
        obj["metadata"]["creationTimestamp"] = rfc3339(core.wall(), millis=False)
        core.handlers.pod_event("ADDED", PodRecord.from_api(obj))
    now = core.wall()
    result = forecast(core)
    starts = [result.expected_start(member) for member in ("g-0", "g-1")]
    assert all(start is not None for start in starts)
    # n1 is free now, but the gang needs both nodes: both members start when n0 frees, together (in the
    # minute: a member tried before waits out its backoff, as in the daemon).
    assert [round(((start or 0) - now) / 60) for start in starts] == [120, 120]
