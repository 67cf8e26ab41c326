"""The trace simulator's metrics and reports, on small hand-built runs whose figures are worked out here.

The main run (`timed_run`) has four pods on a cluster of 4 GPUs (4000 milli):

    pod  submit start end  duration  user   group level gpu   note
    p0   0      0     10   10        alice  g1    0     1000
    p1   0      10    20   10        bob    g2    1     1000
    p2   10     30    40   10        bob    g2    1     500   backfilled
    p3   5      -     -    10        carol  g3    2     2000  never placed

so the waits are 0, 10, 20 (mean 10, p50 10, p95 19, max 20), the JCTs 10, 20, 30 and the makespan 40.
Its samples hold 1000 milli allocated from 0 to 20, nothing from 20 to 30 and 500 from 30 to 40: a
time-weighted allocation of (20 * 1000 + 10 * 500) / (40 * 4000) = 0.15625, the same as the pods'
GPU-seconds over capacity times makespan.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from ai_scheduler.tracesim.metrics import (
    Stats,
    alloc_at,
    frag_at,
    jain_groups,
    jain_index,
    summarize,
    time_weighted_mean,
)
from ai_scheduler.tracesim.records import Mode, PodOutcome, Sample, SimResult
from ai_scheduler.tracesim.report import compare, summary_table, write_events, write_plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def outcome(
    name: str,
    submit: float,
    start: float | None,
    end: float | None,
    *,
    duration: float | None = 10.0,
    user: str = "alice",
    group: str = "g1",
    level: int = 0,
    gpu_milli: int = 1000,
    backfilled: bool = False,
) -> PodOutcome:
    return PodOutcome(
        name=name,
        submit=submit,
        duration=duration,
        user=user,
        group=group,
        queue=f"q{level}",
        level=level,
        gpu_milli=gpu_milli,
        cpu=1000,
        memory=1 << 30,
        start=start,
        end=end,
        backfilled=backfilled,
    )


def sample(
    time: float,
    requested: int,
    allocated: int,
    fragmentation: float = 0.0,
    *,
    arrived: int = 0,
    placed: int = 0,
    failed: int = 0,
) -> Sample:
    return Sample(
        time=time,
        arrived=arrived,
        placed=placed,
        failed=failed,
        running=0,
        requested_gpu_milli=requested,
        requested_cpu=2 * requested,
        allocated_gpu_milli=allocated,
        allocated_cpu=2 * allocated,
        fragmentation_milli=fragmentation,
    )


@pytest.fixture
def timed_run() -> SimResult:
    pods = [
        outcome("p0", 0, 0, 10),
        outcome("p1", 0, 10, 20, user="bob", group="g2", level=1),
        outcome("p2", 10, 30, 40, user="bob", group="g2", level=1, gpu_milli=500, backfilled=True),
        outcome("p3", 5, None, None, user="carol", group="g3", level=2, gpu_milli=2000),
    ]
    samples = [
        sample(0, 2000, 1000, arrived=2, placed=1),
        sample(5, 4000, 1000, 500, arrived=3, placed=1),  # 100 % arrived
        sample(10, 4500, 1000, 1000, arrived=4, placed=2),
        sample(20, 4500, 0, arrived=4, placed=2),
        sample(30, 4500, 500, arrived=4, placed=3),
        sample(40, 4500, 0, arrived=4, placed=3),
    ]
    return SimResult(
        mode=Mode.TIMED,
        config="default",
        nodes=2,
        capacity_gpu_milli=4000,
        capacity_cpu=8000,
        pods=pods,
        samples=samples,
        preemptions=2,
        wall_seconds=1.5,
    )


@pytest.fixture
def placement_run() -> SimResult:
    """Placement mode on 1 GPU: arrived 50, 99.5, 100, 100.4, 100.5, 130, 129.6 % of capacity."""
    requested = [500, 995, 1000, 1004, 1005, 1300, 1296]
    allocated = [500, 900, 950, 1000, 990, 980, 970]
    fragmentation = [0, 0, 0, 0, 0, 100, 200]
    samples = [
        sample(float(i), r, a, f, arrived=i + 1, failed=3 if i >= 5 else 0)
        for i, (r, a, f) in enumerate(zip(requested, allocated, fragmentation, strict=True))
    ]
    pods = [
        outcome("a", 0, 0, None, duration=None, gpu_milli=500),
        outcome("b", 1, 1, None, duration=None, gpu_milli=400),
        outcome("c", 2, None, None, duration=None),
        outcome("d", 3, 4, None, duration=None, gpu_milli=50),  # waits 1 s, the longest of the placed
        outcome("e", 9, None, None, duration=None),  # never placed: no wait in placement mode
        outcome("f", 9, None, None, duration=None),
    ]
    return SimResult(
        mode=Mode.PLACEMENT,
        config="fgd",
        nodes=1,
        capacity_gpu_milli=1000,
        capacity_cpu=2000,
        pods=pods,
        samples=samples,
    )


def test_stats_of_known_values() -> None:
    stats = Stats.of([20.0, 0.0, 10.0])
    assert stats.count == 3
    assert stats.mean == pytest.approx(10.0)
    assert stats.p50 == pytest.approx(10.0)
    assert stats.p95 == pytest.approx(19.0)  # linear: rank 0.95 * 2 = 1.9, between 10 and 20
    assert stats.max == pytest.approx(20.0)


def test_stats_of_nothing_is_none_not_nan() -> None:
    stats = Stats.of([])
    assert (stats.mean, stats.p50, stats.p95, stats.max, stats.count) == (None, None, None, None, 0)


def test_summary_waits_jct_makespan_counts(timed_run: SimResult) -> None:
    summary = summarize(timed_run)
    assert summary.wait.count == 3
    assert summary.wait.mean == pytest.approx(10.0)
    assert summary.wait.max == pytest.approx(20.0)
    assert summary.jct.mean == pytest.approx(20.0)
    assert summary.jct.max == pytest.approx(30.0)
    assert summary.makespan == pytest.approx(40.0)
    assert (summary.pods, summary.placed, summary.failed, summary.never_placed) == (4, 3, 0, 1)
    assert (summary.finished, summary.running_at_end) == (3, 0)
    assert summary.preemptions == 2
    assert summary.backfilled == 1


def test_summary_breakdowns(timed_run: SimResult) -> None:
    summary = summarize(timed_run)
    assert list(summary.by_level) == [0, 1, 2]
    assert summary.by_level[0].wait.mean == pytest.approx(0.0)
    assert summary.by_level[1].wait.mean == pytest.approx(15.0)
    assert summary.by_level[1].jct.mean == pytest.approx(25.0)  # (20 + 30) / 2
    assert (summary.by_level[2].pods, summary.by_level[2].placed) == (1, 0)
    assert summary.by_level[2].wait.mean is None
    assert summary.by_group["g2"].wait.max == pytest.approx(20.0)
    assert summary.by_user["bob"].pods == 2
    assert summary.by_user["carol"].wait.count == 0


def test_longest_wait_counts_a_pod_still_waiting_in_timed_mode(timed_run: SimResult) -> None:
    summary = summarize(timed_run)
    # p3 arrived at 5 and was still waiting at the last sample (40): 35 s, more than p2's 20.
    assert summary.longest_wait == pytest.approx(35.0)
    assert (summary.longest_wait_pod, summary.longest_wait_user) == ("p3", "carol")
    assert summary.longest_wait_placed is False


def test_allocation_fragmentation_and_utilisation(timed_run: SimResult) -> None:
    summary = summarize(timed_run)
    assert summary.gpu_alloc_mean == pytest.approx(0.15625)
    assert summary.gpu_util == pytest.approx(0.15625)  # 25000 GPU milli-seconds / (4000 * 40)
    assert summary.cpu_alloc_mean == pytest.approx(0.15625)  # CPU is twice the GPU over twice the capacity
    assert summary.gpu_alloc_peak == pytest.approx(0.25)
    assert summary.gpu_alloc_final == pytest.approx(0.0)
    # Fragmentation: 500 from 5 to 10, 1000 from 10 to 20: (2500 + 10000) / (40 * 4000).
    assert summary.frag_mean == pytest.approx(0.078125)
    assert summary.alloc_at == {100: pytest.approx(0.25), 130: None}
    assert summary.frag_at == {100: pytest.approx(0.125), 130: None}


def test_time_weighted_mean_ignores_the_last_value_and_handles_no_time() -> None:
    import numpy as np

    times = np.array([0.0, 10.0, 40.0])
    assert time_weighted_mean(times, np.array([1.0, 0.0, 99.0])) == pytest.approx(0.25)
    assert time_weighted_mean(np.array([3.0, 3.0]), np.array([0.2, 0.7])) == pytest.approx(0.7)
    assert time_weighted_mean(np.array([]), np.array([])) is None


def test_alloc_at_rounds_arrived_percent_half_up(placement_run: SimResult) -> None:
    assert alloc_at(placement_run, 100) == pytest.approx((900 + 950 + 1000) / 3 / 1000)
    assert alloc_at(placement_run, 101) == pytest.approx(0.99)  # 100.5 % rounds up
    assert alloc_at(placement_run, 130) == pytest.approx((980 + 970) / 2 / 1000)
    assert alloc_at(placement_run, 120) is None
    assert frag_at(placement_run, 130) == pytest.approx(0.15)
    assert frag_at(placement_run, 100) == pytest.approx(0.0)


def test_placement_mode_summary(placement_run: SimResult) -> None:
    summary = summarize(placement_run)
    assert summary.failed == 3  # the last sample's cumulative count
    assert summary.never_placed == 3
    assert summary.makespan == pytest.approx(4.0)  # last start 4 - first submit 0: nothing ends
    assert summary.gpu_alloc_mean is None  # no time-weighting in placement mode
    assert summary.frag_mean is None
    assert summary.gpu_util is None
    assert summary.gpu_alloc_final == pytest.approx(0.97)
    assert summary.running_at_end == 0
    assert summary.longest_wait == pytest.approx(1.0)
    assert summary.longest_wait_pod == "d"
    assert summary.jain_groups is None  # no pod has a duration
    figures = summary.as_dict()
    assert figures["alloc_at_100"] == pytest.approx(0.95)
    assert figures["alloc_at_130"] == pytest.approx(0.975)
    assert figures["frag_at_130"] == pytest.approx(0.15)


def test_jain_of_two_groups_ratios_one_and_a_half() -> None:
    pods = [
        outcome("x", 0, 0, 10, group="fast"),  # 10 / (0 + 10) = 1
        outcome("y", 0, 10, 20, group="slow"),  # 10 / (10 + 10) = 0.5
    ]
    assert jain_groups(pods) == pytest.approx(1.5**2 / (2 * (1 + 0.25)))
    assert jain_groups(pods) == pytest.approx(0.9)


def test_jain_edge_cases(timed_run: SimResult) -> None:
    assert jain_groups([outcome("x", 0, 30, 40)]) == pytest.approx(1.0)  # one group
    assert jain_index([1.0, 0.0]) == pytest.approx(0.5)  # one of two gets everything: 1/n
    assert jain_index([]) is None
    # g1: 1; g2: (10/20 + 10/30) / 2 = 5/12; g3 placed nothing and is left out.
    x = [1.0, 5 / 12]
    assert summarize(timed_run).jain_groups == pytest.approx(sum(x) ** 2 / (2 * sum(v * v for v in x)))


def test_empty_run_summarises_without_nan() -> None:
    result = SimResult(mode=Mode.TIMED, config="empty", nodes=0, capacity_gpu_milli=0, capacity_cpu=0)
    figures = summarize(result).as_dict()
    assert figures["wait_mean"] is None
    assert figures["wait_count"] == 0
    assert figures["makespan"] is None
    assert figures["gpu_alloc_mean"] is None
    assert figures["longest_wait"] is None
    assert figures["jain_groups"] is None
    assert orjson.loads(orjson.dumps(figures)) == figures  # JSON-able, with no NaN


def test_as_dict_keys_and_json(timed_run: SimResult) -> None:
    figures = summarize(timed_run).as_dict()
    for key in (
        "wait_mean",
        "wait_p95",
        "jct_mean",
        "makespan",
        "alloc_at_100",
        "alloc_at_130",
        "frag_at_130",
        "gpu_alloc_mean",
        "jain_groups",
        "preemptions",
        "backfilled",
        "longest_wait",
        "placed",
        "failed",
    ):
        assert key in figures
    assert figures["wait_p95"] == pytest.approx(19.0)
    assert figures["levels"]["1"]["wait_mean"] == pytest.approx(15.0)
    assert figures["groups"]["g2"]["placed"] == 2
    assert figures["users"]["alice"]["jct_mean"] == pytest.approx(10.0)
    assert orjson.loads(orjson.dumps(figures)) == figures


def test_summary_table_names_levels_groups_users(timed_run: SimResult) -> None:
    table = summary_table(summarize(timed_run))
    lines = table.splitlines()
    for heading in ("by queue level", "by group", "by user"):
        assert any(heading in line for line in lines)
    for name in ("0", "1", "2", "g1", "g2", "g3", "alice", "bob", "carol"):
        assert any(line.split()[:1] == [name] for line in lines), name
    level1 = next(line for line in lines if line.split()[:1] == ["1"])
    assert level1.split()[1:4] == ["2", "2", "15.0"]  # pods, placed, wait mean
    assert "35.0 (p3, user carol, never placed)" in table
    assert "25.0 %" in table  # alloc@100


def test_summary_table_caps_users() -> None:
    pods = [outcome(f"p{i}-{j}", 0, 0, 1, user=f"user{i:02d}") for i in range(25) for j in range(i + 1)]
    result = SimResult(
        mode=Mode.TIMED, config="many", nodes=1, capacity_gpu_milli=1000, capacity_cpu=1000, pods=pods
    )
    table = summary_table(summarize(result))
    assert "5 more users not shown" in table
    assert "user24" in table  # 25 pods, the most
    assert "user05" in table  # the 20th most
    assert "user04" not in table


def test_events_file_round_trips(timed_run: SimResult, tmp_path: Path) -> None:
    path = tmp_path / "out" / "events.jsonl"
    write_events(timed_run, path)
    lines = path.read_bytes().splitlines()
    assert len(lines) == len(timed_run.samples)
    read = [orjson.loads(line) for line in lines]
    assert read == [dataclasses.asdict(s) for s in timed_run.samples]
    assert list(read[0]) == [
        "time",
        "arrived",
        "placed",
        "failed",
        "running",
        "requested_gpu_milli",
        "requested_cpu",
        "allocated_gpu_milli",
        "allocated_cpu",
        "fragmentation_milli",
    ]
    assert Sample(**read[2]) == timed_run.samples[2]


def test_plots_are_png_files(timed_run: SimResult, tmp_path: Path) -> None:
    paths = write_plots(timed_run, tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["alloc_over_time.png", "alloc_vs_arrived.png", "wait_cdf.png"]
    for path in paths:
        assert path.parent == tmp_path / "plots"
        data = path.read_bytes()
        assert data[:8] == PNG_MAGIC
        assert len(data) > 1000


def test_plots_skip_what_has_nothing_to_show(placement_run: SimResult, tmp_path: Path) -> None:
    placement_run.samples = [dataclasses.replace(s, time=0.0) for s in placement_run.samples]
    paths = write_plots(placement_run, tmp_path)
    assert sorted(p.name for p in paths) == ["alloc_vs_arrived.png", "wait_cdf.png"]
    empty = SimResult(mode=Mode.TIMED, config="empty", nodes=0, capacity_gpu_milli=0, capacity_cpu=0)
    assert write_plots(empty, tmp_path / "empty") == []
    assert list((tmp_path / "empty").iterdir()) == []


def _row(table: str, key: str) -> list[str]:
    return next(line.split() for line in table.splitlines() if line.split()[:1] == [key])


def test_compare_shows_difference_and_better_side(timed_run: SimResult) -> None:
    base = summarize(timed_run)
    new = dataclasses.replace(base, wait=Stats.of([0.0, 10.0, 50.0]), alloc_at={100: 0.5, 130: None})
    table = compare(base, new, "base", "new")
    assert table.splitlines()[0].split() == ["figure", "base", "new", "new", "-", "base", "change", "better"]
    # Lower wait is better: the base wins.
    assert _row(table, "wait_mean") == ["wait_mean", "10.00", "20.00", "+10.00", "+100.0", "%", "base"]
    assert _row(table, "wait_max") == ["wait_max", "20.00", "50.00", "+30.00", "+150.0", "%", "base"]
    # Higher allocation is better: the new one wins.
    assert _row(table, "alloc_at_100") == [
        "alloc_at_100",
        "0.2500",
        "0.5000",
        "+0.2500",
        "+100.0",
        "%",
        "new",
    ]
    # Unchanged with a direction: "="; no direction: no mark; missing on both sides: dashes.
    assert _row(table, "makespan")[-1] == "="
    assert _row(table, "preemptions") == ["preemptions", "2", "2", "+0", "+0.0", "%"]
    assert _row(table, "alloc_at_130") == ["alloc_at_130", "-", "-"]
    # Per level figures are compared too; strings are not.
    assert _row(table, "levels.1.wait_mean")[1:3] == ["15.00", "15.00"]
    assert "longest_wait_pod" not in table
    assert "config" not in table


def test_compare_is_symmetric_in_the_better_side(timed_run: SimResult) -> None:
    base = summarize(timed_run)
    worse = dataclasses.replace(base, makespan=80.0, jain_groups=0.5)
    forward = compare(base, worse, "A", "B")
    backward = compare(worse, base, "A", "B")
    assert _row(forward, "makespan")[-1] == "A"
    assert _row(backward, "makespan")[-1] == "B"
    assert _row(forward, "jain_groups")[-1] == "A"
    assert _row(backward, "jain_groups")[-1] == "B"
