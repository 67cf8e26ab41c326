"""The trace simulator end to end: `ai-scheduler simulate` on the sample files of tests/data/, and the
engine (tracesim/engine.py) on tiny clusters and workloads built here, whose outcomes are worked out by
hand from the mode's definition (engine.py's docstring), not read back from the code under test.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import fast_config
from paths import DATA

from ai_scheduler.cli import main
from ai_scheduler.config import Config
from ai_scheduler.log import JsonLogger
from ai_scheduler.trace import NodeSpec, TraceJob, read_workload
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.records import Mode, SimResult

CLUSTER_CSV = DATA / "cluster_small.csv"
CLUSTER_YAML = DATA / "cluster_small.yaml"
TRACES = {
    "generic": DATA / "trace_generic.csv",
    "alibaba": DATA / "trace_alibaba_v2023.csv",
    "philly": DATA / "trace_philly.csv",
    "helios": DATA / "trace_helios.csv",
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVENT_KEYS = {
    "time", "arrived", "placed", "failed", "running", "requested_gpu_milli", "requested_cpu",
    "allocated_gpu_milli", "allocated_cpu", "fragmentation_milli",
}
WALL_KEYS = {"wall_seconds"}
Gi = 2**30


# --------------------------------------------------------------------------- helpers
def simulate(
    tmp_path: Path, trace: Path, mode: str, *extra: str, cluster: Path = CLUSTER_CSV
) -> tuple[int, Path]:
    """Run the CLI with every output requested; return its exit status and the output folder."""
    out = tmp_path / "out"
    argv = [
        "simulate", "--cluster", str(cluster), "--trace", str(trace), "--mode", mode,
        "--events", str(out / "ev.jsonl"), "--plots", str(out / "plots"),
        "--summary-json", str(out / "s.json"), "--no-progress", *extra,
    ]
    return main(argv), out


def load_json(path: Path) -> dict[str, Any]:
    data = orjson.loads(path.read_bytes())
    assert isinstance(data, dict)
    return data


def without_wall_time(summary: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in summary.items() if key not in WALL_KEYS}


def gpu_node(name: str, gpus: int = 1, gpu_memory: int = 80 * Gi) -> NodeSpec:
    """A managed GPU node with room for plenty of pods' cpu and memory."""
    return NodeSpec(name=name, cpu=64_000, memory=256 * Gi, gpus=gpus, gpu_model="A100-80GB",
                    gpu_memory=gpu_memory, managed=True)


def cpu_node(name: str) -> NodeSpec:
    """A node of one core and no GPU: a pod of one core fills it."""
    return NodeSpec(name=name, cpu=1000, memory=8 * Gi)


def job(name: str, submit: float = 0.0, duration: float | None = 100.0, **fields: Any) -> TraceJob:
    return TraceJob(name=name, submit_time=submit, duration=duration, cpu=1000, memory=Gi, **fields)


def run(
    nodes: Sequence[NodeSpec],
    jobs: Sequence[TraceJob],
    mode: Mode = Mode.TIMED,
    *,
    config: Config | None = None,
    seed: int = 0,
) -> tuple[Simulation, SimResult]:
    simulation = Simulation(config or fast_config(), nodes, jobs, mode, seed=seed)
    return simulation, simulation.run()


# --------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("mode", ["timed", "placement"])
@pytest.mark.parametrize("trace", sorted(TRACES))
def test_cli_simulates_every_sample_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trace: str, mode: str
) -> None:
    path = TRACES[trace]
    code, out = simulate(tmp_path, path, mode)
    assert code == 0
    printed = capsys.readouterr().out
    assert f"{mode} mode" in printed

    jobs = read_workload(path).jobs
    summary = load_json(out / "s.json")
    assert summary["mode"] == mode
    assert summary["pods"] == len(jobs)
    assert summary["placed"] + summary["never_placed"] == summary["pods"]
    if mode == "placement":
        assert summary["failed"] == summary["never_placed"]  # tried once: not placed means refused

    lines = (out / "ev.jsonl").read_bytes().splitlines()
    events = [orjson.loads(line) for line in lines]
    assert events
    assert all(set(event) == EVENT_KEYS for event in events)
    arrived = [event["arrived"] for event in events]
    assert arrived == sorted(arrived)
    assert arrived[-1] == len(jobs)
    if mode == "placement":
        assert len(events) <= len(jobs)  # one sample per pod or gang, each tried once
        assert events[-1]["placed"] == summary["placed"]
        assert events[-1]["failed"] == summary["failed"]

    plots = sorted((out / "plots").glob("*.png"))
    assert plots
    assert all(plot.read_bytes().startswith(PNG_MAGIC) for plot in plots)


def test_cli_reads_the_yaml_cluster_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = simulate(tmp_path / "yaml", TRACES["generic"], "placement", cluster=CLUSTER_YAML)
    assert code == 0
    from_yaml = load_json(out / "s.json")
    code, out = simulate(tmp_path / "csv", TRACES["generic"], "placement")
    assert code == 0
    from_csv = load_json(out / "s.json")
    assert from_yaml["nodes"] == 12
    assert from_yaml["capacity_gpu_milli"] == 40_000
    assert without_wall_time(from_yaml) == without_wall_time(from_csv)
    assert "placement mode, 12 nodes" in capsys.readouterr().out


def test_cli_compares_two_configs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spread = tmp_path / "spread.yaml"
    spread.write_text("scheduling:\n  tieBreak: nodeOrder\n", encoding="utf-8")
    packed = tmp_path / "packed.yaml"
    packed.write_text(
        "profiles:\n"
        "  - scores:\n"
        "      - name: GPUSpread\n"
        "        weight: 5\n",
        encoding="utf-8",
    )
    code, out = simulate(tmp_path, TRACES["alibaba"], "placement", "--compare", str(spread), str(packed))
    assert code == 0
    printed = capsys.readouterr().out
    assert "Trace simulation: config spread, placement mode" in printed
    assert "Trace simulation: config packed, placement mode" in printed
    header = next(line for line in printed.splitlines() if line.startswith("figure"))
    assert header.split()[:3] == ["figure", "spread", "packed"]
    assert any(line.startswith("placed ") for line in printed.splitlines())
    # One output per config, suffixed with its name.
    for name in ("spread", "packed"):
        summary = load_json(out / f"s-{name}.json")
        assert summary["config"] == name
        assert summary["pods"] == 40
        assert (out / f"ev-{name}.jsonl").read_bytes()
        assert any((out / "plots" / name).glob("*.png"))


def test_cli_inflates_placement_and_is_repeatable(tmp_path: Path) -> None:
    # The generic sample asks 45.5 of the 40 GPUs (memory shares counted on the typical 80 GiB device,
    # which the CLI must be able to do): clones bring it to 1.3 x 40 GPUs.
    trace = TRACES["generic"]
    jobs = len(read_workload(trace).jobs)
    summaries = []
    for attempt in ("first", "second"):
        code, out = simulate(tmp_path / attempt, trace, "placement", "--inflate", "1.3", "--seed", "3")
        assert code == 0
        summaries.append(load_json(out / "s.json"))
    first, second = summaries
    assert first["pods"] > jobs
    assert first["placed"] + first["never_placed"] == first["pods"]
    assert without_wall_time(first) == without_wall_time(second)


def test_cli_refuses_inflation_in_timed_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = simulate(tmp_path, TRACES["generic"], "timed", "--inflate", "1.3")
    assert code == 2
    assert "--inflate is for --mode placement" in capsys.readouterr().err


# --------------------------------------------------------------------------- timed mode
def test_timed_job_starts_when_the_blocker_leaves() -> None:
    nodes = [gpu_node("n0")]
    jobs = [job("first", 0.0, 100.0, gpus=1), job("second", 10.0, 50.0, gpus=1)]
    _, result = run(nodes, jobs)
    first, second = result.pods
    assert (first.start, first.end) == (0.0, 100.0)
    assert second.start == 100.0
    assert second.wait == 90.0
    assert second.end == 150.0
    assert second.jct == 90.0 + 50.0
    assert result.samples[-1].allocated_gpu_milli == 0  # everyone left


def test_higher_priority_preempts_on_a_full_cluster() -> None:
    # No groups in the config: pods of no group preempt by priority alone (preemption._eligible). CPU
    # is the full resource: a victim keeps off the node it was preempted from for a while
    # (RECENT_VICTIM_SECONDS), so it runs again on the other node once the filler has left.
    nodes = [cpu_node("c0"), cpu_node("c1")]
    jobs = [
        job("filler", 0.0, 200.0, priority=1000),  # as high as the preemptor: never a victim
        job("low", 1.0, 100.0, priority=1),
        job("high", 10.0, 50.0, priority=1000),
    ]
    simulation, result = run(nodes, jobs)
    filler, low, high = result.pods
    assert result.preemptions == 1
    assert (low.preemptions, high.preemptions, filler.preemptions) == (1, 0, 0)
    assert high.start is not None and 10.0 <= high.start < 11.0
    assert high.end == high.start + 50.0
    # The victim's first run ended early and its stale departure is ignored: it runs again, whole.
    # Ties by node order (the default): the filler takes c0, the victim is preempted on c1.
    assert (low.start, low.end, low.node) == (200.0, 300.0, "c0")
    assert [(name, node) for name, node, _ in simulation.placements] == [
        ("default/filler", "c0"), ("default/low", "c1"), ("default/high", "c1"), ("default/low", "c0"),
    ]


def test_no_preemption_among_equal_priorities() -> None:
    nodes = [cpu_node("c0")]
    jobs = [job("a", 0.0, 100.0, priority=5), job("b", 10.0, 50.0, priority=5)]
    _, result = run(nodes, jobs)
    assert result.preemptions == 0
    assert result.pods[1].start == 100.0


def test_timed_gang_is_placed_whole_or_not_at_all() -> None:
    # Two nodes of one GPU each: a gang of three one-GPU pods never fits, a gang of two does.
    nodes = [gpu_node("n0"), gpu_node("n1")]
    too_big = [job(f"big-{i}", 0.0, 100.0, gpus=1, gang="big", gang_size=3) for i in range(3)]
    simulation, result = run(nodes, too_big)
    assert [pod.start for pod in result.pods] == [None, None, None]
    assert simulation.placements == []
    assert all(sample.allocated_gpu_milli == 0 for sample in result.samples)

    nodes = [gpu_node("n0"), gpu_node("n1"), gpu_node("n2")]
    simulation, result = run(nodes, too_big)
    starts = {pod.start for pod in result.pods}
    assert starts == {0.0}
    assert sorted(node for _, node, _ in simulation.placements) == ["n0", "n1", "n2"]
    # Never a partial gang: the allocation is 0 or all three GPUs in every sample.
    assert {sample.allocated_gpu_milli for sample in result.samples} <= {0, 3000}


def test_timed_gang_waits_for_room_for_all_members() -> None:
    nodes = [gpu_node("n0"), gpu_node("n1"), gpu_node("n2")]
    jobs = [job("solo", 0.0, 100.0, gpus=1)]
    jobs += [job(f"gang-{i}", 5.0, 30.0, gpus=1, gang="trio", gang_size=3) for i in range(3)]
    _, result = run(nodes, jobs)
    solo, *members = result.pods
    starts = {pod.start for pod in members}
    assert len(starts) == 1
    (start,) = starts
    assert start is not None and solo.end is not None
    assert start >= solo.end  # two nodes were free before: not enough
    assert {sample.allocated_gpu_milli for sample in result.samples} <= {0, 1000, 3000}


def test_a_gang_that_timed_out_is_not_tried_again_before_its_backoff_ends() -> None:
    """A gang that cannot fit times out again and again while small jobs come and go; after each timeout
    its members wait out the gang's backoff (1 s, 2 s, 4 s, ... up to 300 s) in the queue: one attempt
    finds it backing off (the one that follows the timeout at once), not one per member backoff."""
    nodes = [gpu_node("n0", gpus=2)]
    jobs = [job(f"big-{i}", 0.0, 100.0, gpus=2, gang="big", gang_size=2) for i in range(2)]
    jobs += [job(f"small-{k}", 20.0 * k, 15.0, gpus=1) for k in range(200)]
    log = io.BytesIO()
    logger = JsonLogger(stream=log, level="info")
    simulation = Simulation(fast_config(), nodes, jobs, Mode.TIMED, logger=logger)
    simulation.run()
    lines = [orjson.loads(line) for line in log.getvalue().splitlines()]
    timeouts = [line for line in lines if line.get("event") == "gang.timed_out"]
    decisions = [line for line in lines if line.get("event") == "decision" and line["pod"] == "default/big-0"]
    backing_off = [line for line in decisions if "backing off after timing out" in line.get("message", "")]
    assert len(timeouts) >= 5 and max(line["backoff_s"] for line in timeouts) >= 32
    assert 0 < len(backing_off) <= len(timeouts)


# --------------------------------------------------------------------------- placement mode
def test_placement_tries_each_pod_once_in_file_order() -> None:
    nodes = [gpu_node("n0", gpus=2)]
    jobs = [
        job("one", 50.0, gpus=1),  # submit times are ignored: the place in the file counts
        job("too-big", 0.0, gpus=2),  # one GPU left: refused, never tried again
        job("small", 0.0, gpu_fraction=0.5),
    ]
    simulation, result = run(nodes, jobs, Mode.PLACEMENT)
    one, too_big, small = result.pods
    assert (one.start, one.wait) == (0.0, 0.0)
    assert too_big.start is None
    assert too_big.attempts == 1
    assert (small.start, small.node) == (2.0, "n0")
    assert [sample.failed for sample in result.samples] == [0, 1, 1]
    assert [sample.placed for sample in result.samples] == [1, 1, 2]
    assert [sample.time for sample in result.samples] == [0.0, 1.0, 2.0]
    assert result.samples[-1].allocated_gpu_milli == 1000 + 500
    assert result.samples[-1].allocated_gpu_milli == sum(
        pod.gpu_milli for pod in result.pods if pod.start is not None
    )
    assert [name for name, _, _ in simulation.placements] == ["default/one", "default/small"]
    assert all(pod.end is None for pod in result.pods)  # nothing leaves in placement mode


def test_placement_never_preempts() -> None:
    nodes = [gpu_node("n0")]
    jobs = [job("low", gpus=1, priority=1), job("high", gpus=1, priority=1000)]
    _, result = run(nodes, jobs, Mode.PLACEMENT)
    assert result.preemptions == 0
    assert result.pods[0].start == 0.0
    assert result.pods[1].start is None
    assert result.samples[-1].failed == 1


# --------------------------------------------------------------------------- GPU shares
@pytest.mark.parametrize("memory", [80 * Gi, 16 * Gi], ids=["80GiB", "16GiB"])
@pytest.mark.parametrize("mode", [Mode.TIMED, Mode.PLACEMENT])
def test_half_gpus_share_one_device(memory: int, mode: Mode) -> None:
    nodes = [gpu_node("n0", gpus=2, gpu_memory=memory), gpu_node("n1", gpus=2, gpu_memory=memory)]
    jobs = [job("half-a", gpu_fraction=0.5), job("half-b", gpu_fraction=0.5)]
    config = fast_config(tieBreak="nodeOrder")
    simulation, result = run(nodes, jobs, mode, config=config)
    assert len(simulation.placements) == 2
    (_, node_a, gpus_a), (_, node_b, gpus_b) = simulation.placements
    assert node_a == node_b
    assert len(gpus_a) == 1
    assert gpus_a == gpus_b
    assert [pod.gpu_milli for pod in result.pods] == [500, 500]
    assert max(sample.allocated_gpu_milli for sample in result.samples) == 1000


# --------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("mode", [Mode.TIMED, Mode.PLACEMENT])
def test_same_seed_same_placements(mode: Mode) -> None:
    nodes = [gpu_node(f"n{i}", gpus=4) for i in range(4)]
    jobs = [
        job(f"j{i}", float(i), 30.0 + 7 * i, gpus=1 + i % 2) if i % 3 else
        job(f"j{i}", float(i), 40.0, gpu_fraction=0.25)
        for i in range(24)
    ]
    first, _ = run(nodes, jobs, mode, config=fast_config(), seed=7)
    second, _ = run(nodes, jobs, mode, config=fast_config(), seed=7)
    assert first.placements
    assert first.placements == second.placements


def test_a_horizon_stops_the_run_there() -> None:
    """Nothing arrives or leaves after the horizon: the pod due later never arrives, the running one never
    ends, and the waiting one never starts."""
    jobs = [job("first", 0.0, 50.0, gpus=1), job("second", 10.0, 50.0, gpus=1), job("late", 200.0, gpus=1)]
    simulation = Simulation(fast_config(), [gpu_node("g")], jobs, Mode.TIMED, horizon=40.0)
    pods = {pod.name: pod for pod in simulation.run().pods}
    assert (pods["first"].node, pods["first"].start, pods["first"].end) == ("g", 0.0, None)
    assert (pods["second"].node, pods["second"].start) == ("", None)
    assert pods["late"].start is None and pods["late"].attempts == 0
    _, whole = run([gpu_node("g")], jobs)
    assert [(pod.start, pod.end) for pod in whole.pods] == [(0.0, 50.0), (50.0, 100.0), (200.0, 300.0)]
