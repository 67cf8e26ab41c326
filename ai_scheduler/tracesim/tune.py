"""`ai-scheduler tune`: search the weights of a policy formula in simulation for an administrator's objective.

The objective is one line over the simulator's figures, `minimize EXPR [subject to COND [and COND ...]]`
(or maximize), its language in objective.py: metrics such as `wait_mean`, `levels[1].wait_mean`,
`groups["vision"].jct_mean`, and the same for the two reference runs, `fifo.` and `current.` prefixed.

Two reference runs are made first, on the same cluster, workload and seed: `current`, the config's active
policy, and `fifo`, the same config with the policy `{waitingTime: 1}` and `maxWaitSeconds` = 10^6 s
(`FIFO_POLICY`). The engine's queue orders by queue level and queue fair share first (config, not policy),
then by the policy's score rounded to 6 decimals; a score of waited / 10^6 s is first come, first served
within a queue level to a second, for waits up to 11.6 days (pods arriving less than a second apart tie,
and ties go by spec.priority, then by queue entry). Scores are retaken every `priorityRefreshSeconds`, so a
pod put back into the queue between two refreshes may pass an older one by up to that period.

Structure and metric names are checked before any simulation (`ObjectiveError`, exit status 2, naming
what is wrong); slice names (a level, group or user the trace lacks) right after the reference runs.

The search (Optuna's TPE sampler, seeded with `--seed`, `--trials` trials): each trial draws a weight in
[-1, 1] for each searched factor (the queue compares scores only, so scaling the weights changes nothing
but the rounding, and [-1, 1] covers every formula), optionally `maxWaitSeconds` log-uniformly, and runs
the simulator with that policy active, in timed mode (in placement mode pods are tried in file order, so
the policy could change nothing). The first trial is the current policy itself (weights scaled into
[-1, 1]): when the current policy meets the conditions, the tuned one is never worse on the objective.
Weights are rounded to 6 decimals before the run, so the policy written is exactly the one simulated.
Constraints go to the sampler the Optuna way, a violation per condition (<= 0 when met; `a >= b` gives
b - a): `Trial.set_constraint` on Optuna 5, the sampler's `constraints_func` on Optuna 4. The best trial
is the best objective among the trials that meet every condition, never a violating one. A trial whose
objective is undefined (a figure the run could not give, a division by zero) counts as failed; an
undefined condition counts as violated.

Scale: `--log` tunes on the cluster's own history, the daemon's replayable log as `ai-scheduler replay`
rebuilds it (cluster, workload, config). With `--storage` (Optuna's shared storage: an SQLite file, or
the PostgreSQL the accounting uses) the study is kept by name (`--study`): a later run resumes it until it
holds `--trials` trials, and runs of the same command on other machines share its trials;
`--workers N` runs N processes of this machine at once, each with its own connection and sampler seed.
The best trial is read back from the study, whichever process or machine ran it.

What the references are not: preemption still goes by spec.priority in every run (the config's, not the
policy's), so `fifo` is first come, first served in queue order, not in who holds the GPUs.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import yaml

from ai_scheduler.config import (
    POLICY_FACTORS,
    Config,
    ConfigError,
    FrozenMap,
    PolicySpec,
    default_config,
    load_config,
)
from ai_scheduler.trace import NodeSpec, TraceError, TraceJob, read_cluster, read_workload
from ai_scheduler.tracesim.command import missing_extras
from ai_scheduler.tracesim.objective import Figures, Metric, Objective, ObjectiveError, parse_objective
from ai_scheduler.tracesim.records import Mode
from ai_scheduler.tracesim.replay import ReplayError

if TYPE_CHECKING:
    from ai_scheduler.tracesim.engine import Fragmentation

# The reference "first come, first served": waited / maxWaitSeconds, resolved to a second by the queue's
# rounding of scores to 6 decimals, and never capped by a wait shorter than 11.6 days.
FIFO_MAX_WAIT_SECONDS = 1e6
FIFO_POLICY = PolicySpec("fifo", FrozenMap({"waitingTime": 1.0}), max_wait_seconds=FIFO_MAX_WAIT_SECONDS)
TUNED_POLICY_NAME = "tuned"
DEFAULT_TRIALS = 30
DEFAULT_STUDY = "ai-scheduler-tune"
EXTRA_FACTORS = ("waitingTime", "estimatedRuntime", "jobSize", "fairShare")  # searched besides the current's
WEIGHT_RANGE = (-1.0, 1.0)
# The figures printed for every run besides those the objective names.
MAIN_FIGURES = (
    "wait_mean", "wait_p95", "jct_mean", "makespan", "gpu_alloc_mean", "jain_groups", "longest_wait",
    "preemptions", "never_placed",
)
_RATIO_PREFIXES = ("gpu_alloc", "cpu_alloc", "frag_", "alloc_at_", "gpu_util")  # printed with 4 decimals
_COUNTS = frozenset({
    "nodes", "capacity_gpu_milli", "capacity_cpu", "pods", "placed", "failed", "never_placed", "finished",
    "running_at_end", "preemptions", "backfilled",
})
# --------------------------------------------------------------------------- the search
@dataclass(slots=True)
class Evaluation:
    """One run judged by the objective."""

    name: str
    policy: PolicySpec
    figures: dict[str, Any]
    value: float | None
    violations: tuple[float, ...]

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations)


@dataclass(slots=True)
class TuneResult:
    objective: Objective
    fifo: Evaluation
    current: Evaluation
    tuned: Evaluation | None  # None: no trial met every condition with a defined objective
    trials: int
    best_trial: int | None
    factors: tuple[str, ...]
    searched_max_wait: bool
    history: list[tuple[float | None, bool]] = field(default_factory=list)  # (value, feasible) per trial

    @property
    def improved(self) -> bool:
        tuned, current = self.tuned, self.current
        if tuned is None or tuned.value is None:
            return False
        if current.value is None or not current.feasible:
            return True
        return self.objective.better(tuned.value, current.value)


class Tuner:
    """Runs the simulator on one cluster and workload under policies, and judges the runs."""

    def __init__(
        self, config: Config, nodes: Sequence[NodeSpec], jobs: Sequence[TraceJob], objective: Objective,
        *, seed: int = 0,
    ) -> None:
        from ai_scheduler.tracesim.engine import workload_fragmentation

        self.config = config
        self.nodes = list(nodes)
        self.jobs = list(jobs)
        self.objective = objective
        self.seed = seed
        self.fragmentation: Fragmentation = workload_fragmentation(self.jobs, self.nodes)
        self.references: dict[str, Figures] = {}

    def simulate(self, policy: PolicySpec) -> dict[str, Any]:
        from ai_scheduler.tracesim.engine import Simulation
        from ai_scheduler.tracesim.metrics import summarize

        config = with_policy(self.config, policy)
        simulation = Simulation(
            config, self.nodes, self.jobs, Mode.TIMED, seed=self.seed, config_name=policy.name,
            fragmentation=self.fragmentation, progress=False,
        )
        return summarize(simulation.run()).as_dict()

    def evaluate(self, name: str, policy: PolicySpec, figures: dict[str, Any] | None = None) -> Evaluation:
        figures = self.simulate(policy) if figures is None else figures
        runs = {**self.references, "run": figures}
        return Evaluation(
            name=name,
            policy=policy,
            figures=figures,
            value=self.objective.value(runs),
            violations=tuple(c.violation(runs) for c in self.objective.conditions),
        )


def with_policy(config: Config, policy: PolicySpec) -> Config:
    """`config` with `policy` added (or replacing the one of its name) and active."""
    policies = FrozenMap({**config.policies, policy.name: policy})
    return replace(config, policies=policies, active_policy=policy.name)


def default_factors(current: PolicySpec) -> tuple[str, ...]:
    """The current policy's factors and EXTRA_FACTORS, in POLICY_FACTORS order."""
    chosen = set(current.weights) | set(EXTRA_FACTORS)
    return tuple(factor for factor in POLICY_FACTORS if factor in chosen)


def tune(
    config: Config,
    nodes: Sequence[NodeSpec],
    jobs: Sequence[TraceJob],
    objective: Objective,
    *,
    trials: int = DEFAULT_TRIALS,
    seed: int = 0,
    factors: Sequence[str] | None = None,
    max_wait: tuple[float, float] | None = None,
    storage: str | None = None,
    study_name: str = DEFAULT_STUDY,
    workers: int = 1,
) -> TuneResult:
    """Run the references, then Optuna's TPE until the study holds `trials` trials; see the module
    docstring. `storage`: Optuna's shared storage (an SQLAlchemy URL: `sqlite:///FILE`,
    `postgresql://...`), where the study `study_name` is kept, resumed and shared with other processes
    and machines; `workers`: processes of this machine that run trials at once (needs `storage`)."""
    if workers > 1 and storage is None:
        raise ObjectiveError("--workers needs --storage: the processes share their trials through it")
    current_policy = config.policy
    searched = tuple(factors) if factors else default_factors(current_policy)
    tuner = Tuner(config, nodes, jobs, objective, seed=seed)
    fifo_figures = tuner.simulate(FIFO_POLICY)
    current_figures = tuner.simulate(current_policy)
    tuner.references = {"fifo": fifo_figures, "current": current_figures}
    objective.check(fifo_figures)
    fifo = tuner.evaluate("fifo", FIFO_POLICY, fifo_figures)
    current = tuner.evaluate("current", current_policy, current_figures)
    search = _Search(tuner, objective, searched, max_wait, current_policy, seed, trials)
    study = search.study(storage, study_name)
    if not study.trials:
        study.enqueue_trial(_enqueued(current_policy, searched, max_wait))
    left = trials - len([t for t in study.trials if t.state.is_finished()])
    if left > 0 and workers > 1:
        import multiprocessing

        shares = [left // workers + (1 if i < left % workers else 0) for i in range(workers)]
        context = multiprocessing.get_context("fork")  # the children share the tuner, cluster and workload
        children = [context.Process(target=search.work, args=(storage, study_name, n, seed + 1 + i))
                    for i, n in enumerate(shares[1:]) if n]
        for child in children:
            child.start()
        search.optimize(study, shares[0])
        for child in children:
            child.join()
            if child.exitcode:
                raise ObjectiveError(f"a tuning worker process exited {child.exitcode}")
        study = search.study(storage, study_name)
    elif left > 0:
        search.optimize(study, left)

    evaluations = {t.number: search.evaluation(t) for t in study.trials
                   if t.state.is_finished() and "figures" in t.user_attrs}
    best: int | None = None
    for number, evaluation in sorted(evaluations.items()):
        if evaluation.value is None or not evaluation.feasible:
            continue
        best_value = None if best is None else evaluations[best].value
        if best_value is None or objective.better(evaluation.value, best_value):
            best = number
    history = [(e.value, e.feasible) for _, e in sorted(evaluations.items())]
    return TuneResult(
        objective=objective, fifo=fifo, current=current,
        tuned=None if best is None else evaluations[best], trials=len(evaluations), best_trial=best,
        factors=searched, searched_max_wait=max_wait is not None, history=history,
    )


class _Search:
    """The Optuna side of a tuning: the study, a trial's policy and run, and a finished trial read back."""

    def __init__(self, tuner: Tuner, objective: Objective, searched: tuple[str, ...],
                 max_wait: tuple[float, float] | None, current: PolicySpec, seed: int, trials: int) -> None:
        self.tuner = tuner
        self.objective = objective
        self.searched = searched
        self.max_wait = max_wait
        self.current = current
        self.seed = seed
        self.trials = trials

    def policy(self, params: dict[str, Any]) -> PolicySpec:
        """A trial's policy from its parameters, rounded as the fragment shows them (the policy written is
        the policy simulated)."""
        weights = {factor: round(float(params[factor]), 6) for factor in self.searched}
        wait = self.current.max_wait_seconds
        if self.max_wait is not None:
            wait = round(float(params["maxWaitSeconds"]), 3)
        return PolicySpec(TUNED_POLICY_NAME, FrozenMap(weights), max_wait_seconds=wait,
                          fair_share_half_life_seconds=self.current.fair_share_half_life_seconds)

    def study(self, storage: str | None, name: str, seed: int | None = None) -> Any:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        # Optuna 5 takes constraints from the trial (Trial.set_constraint); Optuna 4 from the sampler's
        # constraints_func, which Optuna 5 deprecates.
        per_trial = hasattr(optuna.trial.Trial, "set_constraint")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=self.seed if seed is None else seed,
                n_startup_trials=min(10, max(2, self.trials // 3)),
                constraints_func=_constraints if self.objective.conditions and not per_trial else None,
            )
            return optuna.create_study(direction=self.objective.direction, sampler=sampler,
                                       storage=_storage(storage), study_name=name if storage else None,
                                       load_if_exists=storage is not None)

    def run_trial(self, trial: Any) -> float:
        import optuna

        params = {factor: trial.suggest_float(factor, *WEIGHT_RANGE) for factor in self.searched}
        if self.max_wait is not None:
            params["maxWaitSeconds"] = trial.suggest_float("maxWaitSeconds", *self.max_wait, log=True)
        evaluation = self.tuner.evaluate(TUNED_POLICY_NAME, self.policy(params))
        trial.set_user_attr("constraints", list(evaluation.violations))
        trial.set_user_attr("figures", evaluation.figures)
        if hasattr(optuna.trial.Trial, "set_constraint"):
            for index, violation in enumerate(evaluation.violations):
                trial.set_constraint(str(index), violation)
        return math.nan if evaluation.value is None else evaluation.value  # nan: Optuna fails the trial

    def optimize(self, study: Any, trials: int) -> None:
        study.optimize(self.run_trial, n_trials=trials, catch=())

    def work(self, storage: str, name: str, trials: int, seed: int) -> None:
        """A worker process's share: its own connection to the shared study and its own sampler seed."""
        self.optimize(self.study(storage, name, seed), trials)

    def evaluation(self, trial: Any) -> Evaluation:
        """A finished trial, read back from the study (whichever process or machine ran it)."""
        figures = dict(trial.user_attrs["figures"])
        runs = {**self.tuner.references, "run": figures}
        return Evaluation(name=TUNED_POLICY_NAME, policy=self.policy(dict(trial.params)), figures=figures,
                          value=self.objective.value(runs),
                          violations=tuple(c.violation(runs) for c in self.objective.conditions))


def _constraints(trial: Any) -> Sequence[float]:
    values: list[float] = trial.user_attrs.get("constraints", [])
    return values


def _storage(url: str | None) -> Any:
    """Optuna's storage for a URL (None: in memory); `postgresql://` goes through psycopg 3."""
    if url is None:
        return None
    import optuna

    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def _enqueued(
    current: PolicySpec, factors: Iterable[str], max_wait: tuple[float, float] | None
) -> dict[str, float]:
    """The current policy as a point of the search space: weights scaled into [-1, 1] (the queue compares
    scores only, so the order is the same), factors it does not weigh at 0."""
    weights = {factor: current.weights.get(factor, 0.0) for factor in factors}
    scale = max((abs(w) for w in weights.values()), default=0.0)
    point = {factor: w / scale if scale > 1 else w for factor, w in weights.items()}
    if max_wait is not None:
        point["maxWaitSeconds"] = min(max(current.max_wait_seconds, max_wait[0]), max_wait[1])
    return point


# --------------------------------------------------------------------------- output
def policy_fragment(policy: PolicySpec) -> dict[str, Any]:
    """The config file's form of `policy` under `policies`, and `activePolicy`."""
    return {
        "policies": {
            policy.name: {
                "weights": dict(policy.weights),
                "maxWaitSeconds": policy.max_wait_seconds,
                "fairShareHalfLifeSeconds": policy.fair_share_half_life_seconds,
            }
        },
        "activePolicy": policy.name,
    }


def _number(value: float | None, key: str = "") -> str:
    """Counts as whole numbers, ratios with 4 decimals, anything else (seconds, expressions) with 2."""
    if value is None:
        return "-"
    name = key.rsplit(".", 1)[-1]
    if (name in _COUNTS or name.endswith("_count")) and float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}" if _is_ratio(key) else f"{value:.2f}"


def _is_ratio(key: str) -> bool:
    name = key.rsplit(".", 1)[-1]
    return name == "jain_groups" or name.startswith(_RATIO_PREFIXES)


def _runs(result: TuneResult) -> list[Evaluation]:
    return [result.fifo, result.current, *([result.tuned] if result.tuned is not None else [])]


def table(result: TuneResult) -> str:
    """The objective, each condition and the figures that matter, for fifo, current and tuned."""
    objective = result.objective
    runs = _runs(result)
    rows: list[tuple[str, ...]] = [("", *(run.name for run in runs))]
    rows.append((f"{objective.direction} {objective.expression}", *(_number(run.value) for run in runs)))
    for index, condition in enumerate(objective.conditions):
        rows.append(
            (f"  {condition.text}", *("met" if run.violations[index] <= 0 else "VIOLATED" for run in runs))
        )
    named = [metric for metric in objective.metrics if metric.run == "run"]
    keys = [metric.text for metric in named] + [key for key in MAIN_FIGURES if (key,) not in
                                                 {metric.path for metric in named}]
    paths = [metric.path for metric in named] + [(key,) for key in MAIN_FIGURES if (key,) not in
                                                  {metric.path for metric in named}]
    for key, path in zip(keys, paths, strict=True):
        metric = Metric("run", path)
        rows.append((key, *(_number(metric.value({"run": run.figures}), key) for run in runs)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))])
        .rstrip()
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines) + "\n"


def fragment_text(result: TuneResult) -> str:
    """The config fragment of the tuned policy, with a comment header: the objective and the figures."""
    assert result.tuned is not None
    header = [
        "Written by `ai-scheduler tune`: merge into the config file (adds policy "
        f"{TUNED_POLICY_NAME!r} and makes it active).",
        f"objective: {result.objective.text}",
        f"search: {result.trials} trials of Optuna's TPE over {', '.join(result.factors)}"
        + (", maxWaitSeconds" if result.searched_max_wait else "") + f"; best: trial {result.best_trial}",
        "",
        *table(result).rstrip("\n").split("\n"),
    ]
    body = yaml.safe_dump(policy_fragment(result.tuned.policy), sort_keys=False)
    return "".join(f"# {line}".rstrip() + "\n" for line in header) + body


def as_json(result: TuneResult) -> dict[str, Any]:
    def run(evaluation: Evaluation) -> dict[str, Any]:
        return {
            "policy": policy_fragment(evaluation.policy)["policies"][evaluation.policy.name],
            "objective": evaluation.value,
            "constraints": [
                {"condition": c.text, "violation": v, "met": v <= 0}
                for c, v in zip(result.objective.conditions, evaluation.violations, strict=True)
            ],
            "feasible": evaluation.feasible,
            "figures": evaluation.figures,
        }

    return {
        "objective": result.objective.text,
        "direction": result.objective.direction,
        "trials": result.trials,
        "factors": list(result.factors),
        "best_trial": result.best_trial,
        "improved": result.improved,
        "fragment": None if result.tuned is None else policy_fragment(result.tuned.policy),
        "runs": {evaluation.name: run(evaluation) for evaluation in _runs(result)},
    }


# --------------------------------------------------------------------------- the command
def add_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--cluster", metavar="FILE",
                         help="the cluster: a CSV or YAML node list (see ai_scheduler/trace/cluster.py)")
    command.add_argument("--trace", metavar="FILE", help="the workload: a CSV trace (or --log)")
    command.add_argument("--log", metavar="LOG", nargs="+",
                         help="instead of --cluster and --trace: the daemon's replayable log (files or a "
                         "directory of rotated logs), whose cluster, workload and config are tuned on, as "
                         "`ai-scheduler replay` rebuilds them")
    command.add_argument("--field", metavar="PATH",
                         help="with --log: the dotted path to the original line in each collected record")
    command.add_argument("--storage", metavar="URL",
                         help="Optuna's shared storage: sqlite:///FILE or postgresql://USER:PASSWORD@HOST/"
                         "DB; the study is kept there, resumed by a later run, and shared with other "
                         "processes and machines running the same command")
    command.add_argument("--study", default=DEFAULT_STUDY, metavar="NAME",
                         help="the study's name in --storage (default: %(default)s)")
    command.add_argument("--workers", type=_positive_int, default=1,
                         help="processes of this machine running trials at once, through --storage "
                         "(default: %(default)s)")
    command.add_argument("--format", default="auto",
                         choices=["auto", "generic", "alibaba", "philly", "helios"],
                         help="the trace's format (default: told from its columns)")
    command.add_argument("--config", metavar="FILE",
                         help="scheduler config whose active policy is the current one (default: shipped)")
    command.add_argument("--objective", required=True,
                         help='e.g. "minimize levels[1].wait_mean subject to jain_groups >= 0.95 and '
                         'gpu_alloc_mean >= fifo.gpu_alloc_mean" (grammar: '
                         'docs/administrators/simulate-tune-learn.md)')
    command.add_argument("--trials", type=_positive_int, default=DEFAULT_TRIALS,
                         help=f"number of trials (simulations) the study holds when done: with --storage, "
                         f"those of earlier runs count (default: {DEFAULT_TRIALS})")
    command.add_argument("--seed", type=int, default=0,
                         help="seed of the sampler and of the scheduler's tie-breaks (default: 0)")
    command.add_argument("--factors", metavar="A,B,...",
                         help="the factors whose weights are searched, in [-1, 1] (default: the current "
                         f"policy's and {', '.join(EXTRA_FACTORS)})")
    command.add_argument("--max-wait", metavar="LO,HI",
                         help="also search maxWaitSeconds, log-uniformly between LO and HI seconds")
    command.add_argument("--out", metavar="FILE", help="write the tuned policy here as a config fragment")
    command.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def parse_factors(text: str) -> tuple[str, ...]:
    factors = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [factor for factor in factors if factor not in POLICY_FACTORS]
    if unknown or not factors:
        raise ObjectiveError(
            f"--factors: unknown factor(s) {', '.join(unknown) or '(none given)'}; "
            f"known: {', '.join(POLICY_FACTORS)}"
        )
    return tuple(dict.fromkeys(factors))


def parse_range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(part) for part in text.split(","))
    except ValueError:
        raise ObjectiveError(f"--max-wait: expected LO,HI in seconds, got {text!r}") from None
    if not 0 < low < high or math.isinf(high):
        raise ObjectiveError(f"--max-wait: expected 0 < LO < HI, got {text!r}")
    return low, high


def run(args: argparse.Namespace) -> int:
    try:
        import optuna  # noqa: F401  # checked here to name the extra to install
    except ImportError as exc:
        return missing_extras("tune", exc)
    try:
        objective = parse_objective(args.objective)
        factors = parse_factors(args.factors) if args.factors else None
        max_wait = parse_range(args.max_wait) if args.max_wait else None
        if args.log:
            from ai_scheduler.tracesim.replay import read_log

            replay = read_log(args.log, args.field)
            nodes, jobs = replay.nodes, replay.jobs
            config = load_config(args.config) if args.config else replay.config
        elif not args.cluster or not args.trace:
            raise ObjectiveError("give --cluster and --trace, or --log")
        else:
            nodes = read_cluster(args.cluster)
            workload = read_workload(args.trace, args.format)
            jobs = workload.jobs
            config = load_config(args.config) if args.config else default_config()
            if workload.problems:
                print(f"ai-scheduler tune: {args.trace}: skipped {len(workload.problems)} rows (first: "
                      f"{workload.problems[0]})", file=sys.stderr)
    except (ObjectiveError, TraceError, ConfigError, OSError, ReplayError) as exc:
        print(f"ai-scheduler tune: {exc}", file=sys.stderr)
        return 2
    try:
        result = tune(config, nodes, jobs, objective, trials=args.trials, seed=args.seed,
                      factors=factors, max_wait=max_wait, storage=args.storage, study_name=args.study,
                      workers=args.workers)
    except ObjectiveError as exc:
        print(f"ai-scheduler tune: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(orjson.dumps(as_json(result), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
                         .decode() + "\n")
    else:
        print(f"objective: {objective.text}")
        print(table(result))
    if result.tuned is None:
        print("ai-scheduler tune: no trial met every condition; nothing written", file=sys.stderr)
        return 1
    if not result.current.feasible:
        violations = zip(objective.conditions, result.current.violations, strict=True)
        unmet = [condition.text for condition, violation in violations if violation > 0]
        print(f"ai-scheduler tune: the current policy does not meet: {'; '.join(unmet)}", file=sys.stderr)
    elif not result.improved:
        print("ai-scheduler tune: no trial beat the current policy on the objective", file=sys.stderr)
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fragment_text(result), encoding="utf-8")
        if not args.json:
            print(f"tuned policy written to {path}")
    return 0
