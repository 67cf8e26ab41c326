"""`ai-scheduler tune` (tracesim/tune.py): the objective language, the FIFO reference, and the search end to
end on the sample of tests/data/ (trace_tune.csv on cluster_tune.csv with config_tune.yaml: one node of 2
GPUs, 24 one-GPU jobs arriving within 25 minutes, long and short ones mixed, all of priority 0, so that the
default policy serves them about in queue order and shortest-estimate-first clearly lowers the waits).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from paths import DATA

from ai_scheduler.cli import main
from ai_scheduler.config import FrozenMap, PolicySpec, default_config, load_config, parse_config
from ai_scheduler.trace import NodeSpec, TraceJob, read_cluster, read_workload
from ai_scheduler.tracesim.engine import Simulation
from ai_scheduler.tracesim.objective import Metric, ObjectiveError, parse_objective
from ai_scheduler.tracesim.tune import FIFO_POLICY, TuneResult, tune, with_policy

CLUSTER = DATA / "cluster_tune.csv"
TRACE = DATA / "trace_tune.csv"
CONFIG = DATA / "config_tune.yaml"
OBJECTIVE = (
    "minimize levels[1].wait_mean "
    "subject to jain_groups >= 0.95 and gpu_alloc_mean >= 0.98 * fifo.gpu_alloc_mean"
)
TRIALS = 10
Gi = 2**30


def figures(**flat: Any) -> dict[str, Any]:
    """A run's figures as Summary.as_dict() lays them out, with only what a test reads."""
    return {"levels": {}, "groups": {}, "users": {}, **flat}


def runs(run: dict[str, Any], fifo: dict[str, Any] | None = None, current: dict[str, Any] | None = None
         ) -> dict[str, dict[str, Any]]:
    return {"run": run, "fifo": fifo or figures(), "current": current or figures()}


# --------------------------------------------------------------------------- the objective language
def test_parses_direction_expression_and_conditions() -> None:
    objective = parse_objective(
        "Minimise  levels[1].wait_mean + 0.5 * users['alice'].wait_p95 "
        "subject to jain_groups >= 0.95 and gpu_alloc_mean >= fifo.gpu_alloc_mean"
    )
    assert not objective.maximize
    assert objective.direction == "minimize"
    assert objective.expression == "levels[1].wait_mean + 0.5 * users['alice'].wait_p95"
    assert [c.text for c in objective.conditions] == [
        "jain_groups >= 0.95", "gpu_alloc_mean >= fifo.gpu_alloc_mean"
    ]
    assert objective.metrics == (
        Metric("run", ("levels", "1", "wait_mean")),
        Metric("run", ("users", "alice", "wait_p95")),
        Metric("run", ("jain_groups",)),
        Metric("run", ("gpu_alloc_mean",)),
        Metric("fifo", ("gpu_alloc_mean",)),
    )
    assert parse_objective("maximize gpu_util").maximize


def test_evaluates_slices_references_and_arithmetic() -> None:
    objective = parse_objective(
        'minimize groups["vision"].jct_mean - groups.nlp.jct_mean / 2 + max(wait_mean, 10)'
        " - abs(-current.makespan) + -current.levels[0].wait_p50"
    )
    run = figures(
        wait_mean=4.0,
        groups={"vision": {"jct_mean": 100.0}, "nlp": {"jct_mean": 40.0}},
    )
    current = figures(makespan=7, levels={"0": {"wait_p50": 3.0}})
    assert objective.value(runs(run, current=current)) == 100.0 - 20.0 + 10.0 - 7.0 - 3.0


def test_undefined_figures_leave_the_objective_undefined() -> None:
    objective = parse_objective("minimize wait_mean / placed")
    assert objective.value(runs(figures(wait_mean=5.0, placed=0))) is None  # division by zero
    assert objective.value(runs(figures(wait_mean=None, placed=2))) is None  # the run had no such figure
    assert objective.value(runs(figures(wait_mean=5.0, placed=2))) == 2.5


def test_condition_violations_follow_optunas_sign() -> None:
    objective = parse_objective(
        "maximize gpu_alloc_mean subject to jain_groups >= 0.9 and wait_p95 < fifo.wait_p95 "
        "and 10 <= makespan <= 20 and (preemptions <= 0 or longest_wait <= 5)"
    )
    ok, strict, chain, either = objective.conditions

    def check(run: dict[str, Any], fifo: dict[str, Any] | None = None) -> list[float]:
        return [c.violation(runs(run, fifo)) for c in objective.conditions]

    met = check(figures(jain_groups=0.95, wait_p95=9.0, makespan=15, preemptions=3, longest_wait=4.0),
                figures(wait_p95=10.0))
    assert all(v <= 0 for v in met)
    assert met[0] == pytest.approx(-0.05)
    missed = check(figures(jain_groups=0.8, wait_p95=10.0, makespan=25, preemptions=3, longest_wait=9.0),
                   figures(wait_p95=10.0))
    assert missed[0] == pytest.approx(0.1)  # 0.9 - 0.8: how far below its bound
    assert missed[1] > 0  # a strict comparison of equal sides is not met
    assert missed[2] == 5  # 25 is 5 past the chain's upper bound
    assert missed[3] == 3  # either side may hold: the nearer one (preemptions, 3 past 0) counts
    # A condition on a figure the run could not give is violated.
    assert ok.violation(runs(figures(jain_groups=None))) > 0
    assert strict.text == "wait_p95 < fifo.wait_p95" and chain.text == "10 <= makespan <= 20"
    assert either.text == "preemptions <= 0 or longest_wait <= 5"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("wait_mean", "an objective reads 'minimize EXPR"),
        ("minimize", "an objective reads 'minimize EXPR"),
        ("minimize wiat_mean", "unknown metric 'wiat_mean'"),
        ("minimize mode", "unknown metric 'mode'"),  # a key of the summary, but not a number
        ("minimize wait_mean +", "not a well-formed expression"),
        ("minimize wait_mean subject to jain_groups >=", "not a well-formed condition"),
        ("minimize __import__('os').system('true')", "the only functions are min, max and abs"),
        ("minimize wait_mean.__class__", "wait_mean is a number, it has no parts"),
        ("minimize levels[1]", "a slice's figure is levels[NAME].KEY"),
        ("minimize levels[1].wait_man", "a slice's figure is levels[NAME].KEY"),
        ("minimize levels[wait_mean].wait_mean", "a slice is named by a number or a quoted name"),
        ("minimize fifo", "fifo is a reference run"),
        ("minimize current.nope", "unknown metric 'nope'"),
        ("minimize 'text'", "only numbers may be written as constants"),
        ("minimize True", "only numbers may be written as constants"),
        ("minimize [wait_mean]", "not allowed in an objective"),
        ("minimize wait_mean ** 2", "not allowed in an objective"),
        ("minimize (lambda: 1)()", "the only functions are min, max and abs"),
        ("minimize max(wait_mean, default=0)", "max takes numbers, as positional arguments"),
        ("minimize abs(wait_mean, jct_mean)", "abs takes one number"),
        ("minimize max", "max is a function"),
        ("minimize wait_mean < 3", "a comparison where a number is expected"),
        ("minimize wait_mean subject to jain_groups", "a condition must compare two figures"),
        ("minimize wait_mean subject to jain_groups == 1", "comparisons are <, <=, > and >="),
    ],
)
def test_refuses_malformed_objectives_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(ObjectiveError) as caught:
        parse_objective(text)
    assert message in str(caught.value)


# --------------------------------------------------------------------------- the FIFO reference
def test_fifo_reference_serves_in_arrival_order() -> None:
    # One GPU, busy with a blocker until t=1000; four jobs arrive meanwhile with estimates shrinking as they
    # come. FIFO serves them as they came; shortest-estimate-first (a check that order depends on the
    # policy here) serves them the other way round.
    node = NodeSpec(name="gpu", cpu=64_000, memory=256 * Gi, gpus=1, gpu_model="A100-80GB",
                    gpu_memory=80 * Gi, managed=True)
    jobs = [TraceJob(name="blocker", submit_time=0.0, duration=1000.0, cpu=1000, memory=Gi, gpus=1)]
    jobs += [
        TraceJob(name=f"j{i}", submit_time=10.0 * i, duration=estimate, estimate=estimate, cpu=1000,
                 memory=Gi, gpus=1)
        for i, estimate in enumerate((400.0, 300.0, 200.0, 100.0), start=1)
    ]

    def start_order(policy: PolicySpec) -> list[str]:
        result = Simulation(with_policy(default_config(), policy), [node], jobs).run()
        placed = [pod for pod in result.pods if pod.start is not None]
        assert len(placed) == len(jobs)
        return [pod.name for pod in sorted(placed, key=lambda pod: pod.start or 0.0)]

    assert start_order(FIFO_POLICY) == ["blocker", "j1", "j2", "j3", "j4"]
    shortest_first = PolicySpec("sjf", FrozenMap({"estimatedRuntime": -1.0}))
    assert start_order(shortest_first) == ["blocker", "j4", "j3", "j2", "j1"]


# --------------------------------------------------------------------------- the search
@pytest.fixture(scope="module")
def tuned() -> TuneResult:
    jobs = read_workload(TRACE).jobs
    return tune(load_config(CONFIG), read_cluster(CLUSTER), jobs, parse_objective(OBJECTIVE), trials=TRIALS,
                seed=0)


def test_tune_beats_the_default_policy_within_the_constraints(tuned: TuneResult) -> None:
    current, fifo, best = tuned.current, tuned.fifo, tuned.tuned
    assert current.policy.weights == {"taskPriority": 1.0}  # config_tune.yaml names no policy: the default
    assert best is not None and best.value is not None and current.value is not None
    assert best.value < 0.8 * current.value  # a clear gain, not a tie-break's
    assert tuned.improved
    # The figures themselves, read without the objective's code: the value and both conditions.
    assert best.value == best.figures["levels"]["1"]["wait_mean"]
    assert current.value == current.figures["levels"]["1"]["wait_mean"]
    assert best.figures["jain_groups"] >= 0.95
    assert best.figures["gpu_alloc_mean"] >= 0.98 * fifo.figures["gpu_alloc_mean"]
    assert best.feasible
    # It is the best of the trials that met both conditions; the first trial was the current policy.
    assert len(tuned.history) == TRIALS
    assert tuned.history[0] == (current.value, current.feasible)
    assert best.value == min(value for value, feasible in tuned.history if feasible and value is not None)
    searched = {"taskPriority", "waitingTime", "jobSize", "estimatedRuntime", "fairShare"}
    assert set(best.policy.weights) == searched  # the current policy's factor and the extra ones
    assert all(-1.0 <= weight <= 1.0 for weight in best.policy.weights.values())


def test_tune_is_repeatable_with_a_seed(tuned: TuneResult) -> None:
    again = tune(load_config(CONFIG), read_cluster(CLUSTER), read_workload(TRACE).jobs,
                 parse_objective(OBJECTIVE), trials=TRIALS, seed=0)
    assert again.current.value == tuned.current.value
    assert again.fifo.value == tuned.fifo.value
    assert again.history == tuned.history
    assert again.tuned is not None and tuned.tuned is not None
    assert again.tuned.policy == tuned.tuned.policy


def test_no_feasible_trial_gives_no_policy() -> None:
    result = tune(load_config(CONFIG), read_cluster(CLUSTER), read_workload(TRACE).jobs,
                  parse_objective("minimize wait_mean subject to placed > pods"), trials=3, seed=0)
    assert result.tuned is None and result.best_trial is None
    assert not result.improved
    assert len(result.history) == 3 and not any(feasible for _, feasible in result.history)


def test_unknown_slice_is_named_after_the_reference_runs() -> None:
    with pytest.raises(ObjectiveError, match=r"users\['zoe'\].wait_mean: the trace has no user 'zoe' "
                       r"\(it has: alice, bob, carol, dave\)"):
        tune(load_config(CONFIG), read_cluster(CLUSTER), read_workload(TRACE).jobs,
             parse_objective("minimize users['zoe'].wait_mean"), trials=2)


# --------------------------------------------------------------------------- the command
def merged(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    """`fragment` merged into `base`, mappings key by key (a fragment adds a policy, keeps the others)."""
    out = dict(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def tune_argv(*extra: str) -> list[str]:
    return ["tune", "--cluster", str(CLUSTER), "--trace", str(TRACE), "--config", str(CONFIG),
            "--objective", OBJECTIVE, "--trials", str(TRIALS), *extra]


def test_cli_writes_a_fragment_that_the_config_loader_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tuned: TuneResult
) -> None:
    out = tmp_path / "tuned.yaml"
    assert main(tune_argv("--out", str(out))) == 0
    printed = capsys.readouterr().out
    assert "minimize levels[1].wait_mean" in printed and "jain_groups >= 0.95" in printed
    header = printed.splitlines()[1].split()
    assert header == ["fifo", "current", "tuned"]

    text = out.read_text()
    assert f"# objective: {OBJECTIVE}" in text
    fragment = yaml.safe_load(text)
    assert fragment["activePolicy"] == "tuned"
    base = yaml.safe_load(CONFIG.read_text())
    config = parse_config(merged(base, fragment), str(out))
    assert config.active_policy == "tuned"
    assert tuned.tuned is not None
    assert dict(config.policy.weights) == dict(tuned.tuned.policy.weights)  # the same search, the same seed

    # The written policy, loaded back and simulated by `simulate`, gives the figures tune reported.
    whole = tmp_path / "whole.yaml"
    whole.write_text(yaml.safe_dump(merged(base, fragment)))
    summary = tmp_path / "summary.json"
    argv = ["simulate", "--cluster", str(CLUSTER), "--trace", str(TRACE), "--config", str(whole),
            "--summary-json", str(summary), "--no-progress"]
    assert main(argv) == 0
    figures = orjson.loads(summary.read_bytes())
    assert figures["levels"]["1"]["wait_mean"] == tuned.tuned.value
    assert figures["jain_groups"] == tuned.tuned.figures["jain_groups"]


def test_cli_json_output(capsys: pytest.CaptureFixture[str], tuned: TuneResult) -> None:
    assert main(tune_argv("--json", "--factors", "estimatedRuntime,waitingTime")) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["objective"] == OBJECTIVE and data["direction"] == "minimize"
    assert data["factors"] == ["estimatedRuntime", "waitingTime"]
    assert set(data["runs"]) == {"fifo", "current", "tuned"}
    assert data["runs"]["current"]["objective"] == tuned.current.value
    assert data["runs"]["tuned"]["feasible"] and data["improved"]
    assert data["runs"]["tuned"]["objective"] < data["runs"]["current"]["objective"]
    assert [c["met"] for c in data["runs"]["tuned"]["constraints"]] == [True, True]
    assert set(data["fragment"]["policies"]["tuned"]["weights"]) == {"estimatedRuntime", "waitingTime"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--objective", "minimize wiat_mean"], "unknown metric 'wiat_mean'"),
        (["--objective", "minimize users['zoe'].wait_mean"], "the trace has no user 'zoe'"),
        (["--factors", "waitingTime,speed"], "--factors: unknown factor(s) speed"),
        (["--max-wait", "600"], "--max-wait: expected LO,HI"),
    ],
)
def test_cli_refuses_bad_input_with_status_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main([*tune_argv(), "--trials", "1", *extra]) == 2
    assert message in capsys.readouterr().err


def test_cli_searches_max_wait_when_asked(tmp_path: Path) -> None:
    out = tmp_path / "tuned.yaml"
    argv = [*tune_argv("--out", str(out)), "--trials", "3", "--max-wait", "60,7200", "--factors",
            "waitingTime,estimatedRuntime"]
    assert main(argv) == 0
    policy = yaml.safe_load(out.read_text())["policies"]["tuned"]
    assert 60 <= policy["maxWaitSeconds"] <= 7200
    assert not math.isnan(policy["weights"]["waitingTime"])
