"""The objective language of `ai-scheduler tune`: one line over the simulator's figures.

    minimize EXPR [subject to COND [and COND ...]]        (or: maximize; minimise/maximise are read too)

EXPR is arithmetic (numbers, `+ - * /`, unary minus, parentheses, `min(...)`, `max(...)`, `abs(...)`)
over metric names; a COND compares two EXPRs (`<`, `<=`, `>`, `>=`, chains such as `0.9 <= x <= 1`),
and conditions combine with `and` and `or`. A metric is

- a flat key of the summary (metrics.Summary.as_dict): `wait_mean`, `wait_p95`, `jct_mean`, `makespan`,
  `gpu_alloc_mean`, `jain_groups`, `longest_wait`, `preemptions`, ...;
- a slice's figure: `levels[1].wait_mean` (queue level 1), `groups["vision"].jct_mean` or
  `groups.vision.jct_mean`, `users["alice"].wait_p95` (a slice's keys: pods, placed, wait_*, jct_*);
- either of those for a reference run, prefixed: `fifo.gpu_alloc_mean`, `current.levels[1].wait_mean`.

The text is parsed with Python's `ast` and nothing else is accepted: every node must be one of those listed
above (no other calls, no attribute of anything but a metric path, no names but metrics), so an objective
can never run code. Structure and metric names are checked when parsed (`ObjectiveError`); slice names (a
level, group or user the trace lacks) when the figures are first read. A condition's violation is <= 0
when met (`a >= b` gives b - a), as Optuna's constraints want it; an undefined figure makes the objective
undefined and a condition violated.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from ai_scheduler.tracesim.records import Mode

REFERENCES = ("fifo", "current")
SLICES = ("levels", "groups", "users")
_FUNCTIONS: Mapping[str, Callable[..., float]] = {"min": min, "max": max, "abs": abs}
_STRICT_MARGIN = 1e-9  # the violation of a strict comparison whose sides are equal
_UNDEFINED_VIOLATION = 1e12  # a condition that cannot be evaluated counts as far from met
_OBJECTIVE = re.compile(
    r"^\s*(?P<direction>minimi[sz]e|maximi[sz]e)\s+(?P<expr>.+?)(?:\s+subject\s+to\s+(?P<conds>.+?))?\s*$",
    re.IGNORECASE | re.DOTALL,
)

Figures = Mapping[str, Any]  # Summary.as_dict() of one run
Runs = Mapping[str, Figures]  # "run" (the run judged), "fifo", "current"
Value = Callable[[Runs], float | None]
Violation = Callable[[Runs], float]


class ObjectiveError(ValueError):
    """An objective that is not well formed or names a figure that does not exist."""


@cache
def known_figures() -> tuple[frozenset[str], frozenset[str]]:
    """The numeric flat keys of every summary, and those of every slice (the keys never change); taken
    from an empty run's summary, imported here so that building the command's parser stays cheap."""
    from ai_scheduler.tracesim.metrics import Breakdown, Stats, summarize
    from ai_scheduler.tracesim.records import SimResult

    figures = summarize(SimResult(mode=Mode.TIMED, config="", nodes=0, capacity_gpu_milli=0, capacity_cpu=0))
    flat = frozenset(
        key for key, value in figures.as_dict().items()
        if not isinstance(value, Mapping | str | bool)
    )
    part = Breakdown(pods=0, placed=0, wait=Stats.of([]), jct=Stats.of([])).as_dict()
    return flat, frozenset(part)


# --------------------------------------------------------------------------- the objective language
@dataclass(frozen=True, slots=True)
class Metric:
    """One figure of one run: `run` is "run" (the run judged), "fifo" or "current"; `path` its keys in
    Summary.as_dict(), e.g. ("wait_mean",) or ("levels", "1", "wait_mean")."""

    run: str
    path: tuple[str, ...]

    @property
    def text(self) -> str:
        head = "" if self.run == "run" else f"{self.run}."
        if len(self.path) == 1:
            return head + self.path[0]
        kind, name, key = self.path
        index = name if kind == "levels" else repr(name)
        return f"{head}{kind}[{index}].{key}"

    def value(self, runs: Runs) -> float | None:
        node: Any = runs[self.run]
        for key in self.path:
            if not isinstance(node, Mapping) or key not in node:
                return None
            node = node[key]
        return float(node) if isinstance(node, int | float) and not isinstance(node, bool) else None

    def check(self, figures: Figures) -> None:
        """Raise ObjectiveError when `figures` (a reference run) have no such slice."""
        if len(self.path) == 3:
            kind, name, _ = self.path
            if name not in figures[kind]:
                known = ", ".join(sorted(figures[kind])) or "none"
                raise ObjectiveError(f"{self.text}: the trace has no {kind[:-1]} {name!r} (it has: {known})")


@dataclass(frozen=True, slots=True)
class Condition:
    """One top-level condition: its text and its violation (<= 0 when met)."""

    text: str
    violation: Violation


@dataclass(frozen=True, slots=True)
class Objective:
    text: str
    maximize: bool
    expression: str
    value: Value
    conditions: tuple[Condition, ...]
    metrics: tuple[Metric, ...]  # every figure named, in order of appearance, once each

    @property
    def direction(self) -> Literal["minimize", "maximize"]:
        return "maximize" if self.maximize else "minimize"

    def check(self, figures: Figures) -> None:
        for metric in self.metrics:
            metric.check(figures)

    def better(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b


class _Compiler:
    """Turns a checked `ast` tree into closures over the runs' figures."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.metrics: dict[Metric, None] = {}

    def fail(self, node: ast.AST, problem: str) -> ObjectiveError:
        segment = ast.get_source_segment(self.source, node) or ast.unparse(node)
        return ObjectiveError(f"{problem}: {segment!r}")

    # ---- arithmetic
    def value(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise self.fail(node, "only numbers may be written as constants")
            number = float(node.value)
            return lambda _runs: number
        if isinstance(node, ast.Name | ast.Attribute | ast.Subscript):
            metric = self.metric(node)
            self.metrics[metric] = None
            return metric.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.value(node.operand)
            sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
            return lambda runs: None if (v := operand(runs)) is None else sign * v
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
            return _arithmetic(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Compare | ast.BoolOp):
            raise self.fail(node, "a comparison where a number is expected")
        raise self.fail(node, "not allowed in an objective (numbers, metrics, + - * /, min, max, abs)")

    def call(self, node: ast.Call) -> Value:
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise self.fail(node, "the only functions are min, max and abs")
        if node.keywords or not node.args or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, f"{node.func.id} takes numbers, as positional arguments")
        name = node.func.id
        if name == "abs" and len(node.args) != 1:
            raise self.fail(node, "abs takes one number")
        function = _FUNCTIONS[name]
        arguments = [self.value(argument) for argument in node.args]

        def call(runs: Runs) -> float | None:
            values = [argument(runs) for argument in arguments]
            if any(value is None for value in values):
                return None
            return float(function(*values))

        return call

    def metric(self, node: ast.expr) -> Metric:
        parts: list[str] = []
        current = node
        while not isinstance(current, ast.Name):
            if isinstance(current, ast.Attribute):
                parts.append(current.attr)
                current = current.value
            elif isinstance(current, ast.Subscript):
                index = current.slice
                if not isinstance(index, ast.Constant) or isinstance(index.value, bool) or not isinstance(
                    index.value, int | str
                ):
                    raise self.fail(node, "a slice is named by a number or a quoted name, as levels[1]")
                parts.append(str(index.value))
                current = current.value
            else:
                raise self.fail(node, "not a metric")
        parts.append(current.id)
        parts.reverse()
        run = "run"
        if parts[0] in REFERENCES:
            run = parts.pop(0)
            if not parts:
                raise self.fail(node, f"{run} is a reference run: name one of its figures ({run}.wait_mean)")
        if parts[0] in _FUNCTIONS:
            raise self.fail(node, f"{parts[0]} is a function: call it")
        head = parts[0]
        flat_metrics, slice_metrics = known_figures()
        if head in SLICES:
            if len(parts) != 3 or parts[2] not in slice_metrics:
                known = ", ".join(sorted(slice_metrics))
                raise self.fail(node, f"a slice's figure is {head}[NAME].KEY with KEY one of {known}")
        elif head in flat_metrics:
            if len(parts) != 1:
                raise self.fail(node, f"{head} is a number, it has no parts")
        else:
            known = ", ".join(sorted(flat_metrics))
            raise self.fail(
                node, f"unknown metric {head!r} (metrics: {known}; slices: levels[N].KEY, groups[NAME].KEY, "
                "users[NAME].KEY; references: fifo.METRIC, current.METRIC)"
            )
        return Metric(run, tuple(parts))

    # ---- conditions
    def violation(self, node: ast.expr) -> Violation:
        if isinstance(node, ast.BoolOp):
            parts = [self.violation(value) for value in node.values]
            combine = max if isinstance(node.op, ast.And) else min
            return lambda runs: combine(part(runs) for part in parts)
        if isinstance(node, ast.Compare):
            sides = [self.value(node.left), *(self.value(c) for c in node.comparators)]
            pairs: list[Violation] = []
            for index, op in enumerate(node.ops):
                if not isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE):
                    raise self.fail(node, "comparisons are <, <=, > and >=")
                pairs.append(_comparison(op, sides[index], sides[index + 1]))
            return lambda runs: max(pair(runs) for pair in pairs)
        raise self.fail(node, "a condition must compare two figures (as jain_groups >= 0.95)")


def _arithmetic(op: ast.operator, left: Value, right: Value) -> Value:
    def apply(runs: Runs) -> float | None:
        a, b = left(runs), right(runs)
        if a is None or b is None:
            return None
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        return None if b == 0 else a / b

    return apply


def _comparison(op: ast.cmpop, left: Value, right: Value) -> Violation:
    """How far `left op right` is from holding: <= 0 when it holds (Optuna's convention)."""

    def violation(runs: Runs) -> float:
        a, b = left(runs), right(runs)
        if a is None or b is None:
            return _UNDEFINED_VIOLATION
        gap = b - a if isinstance(op, ast.Gt | ast.GtE) else a - b  # <= 0: the right side of the bound
        if isinstance(op, ast.Lt | ast.Gt) and gap == 0:
            return _STRICT_MARGIN
        return gap

    return violation


def parse_objective(text: str) -> Objective:
    """Parse `minimize EXPR [subject to COND [and COND ...]]`; ObjectiveError names what is wrong."""
    match = _OBJECTIVE.match(text)
    if match is None:
        raise ObjectiveError(
            f"an objective reads 'minimize EXPR [subject to COND and ...]' or 'maximize ...', got {text!r}"
        )
    compiler = _Compiler("")
    expression = _parse(match["expr"], "expression")
    compiler.source = match["expr"]
    value = compiler.value(expression.body)
    conditions: list[Condition] = []
    if match["conds"]:
        tree = _parse(match["conds"], "condition")
        compiler.source = match["conds"]
        body = tree.body
        tops = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) else [body]
        for top in tops:
            conditions.append(Condition(ast.unparse(top), compiler.violation(top)))
    return Objective(
        text=" ".join(text.split()),
        maximize=match["direction"].lower().startswith("maxim"),
        expression=ast.unparse(expression.body),
        value=value,
        conditions=tuple(conditions),
        metrics=tuple(compiler.metrics),
    )


def _parse(text: str, what: str) -> ast.Expression:
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        problem = f"not a well-formed {what}: {text.strip()!r} ({exc.msg})"
        raise ObjectiveError(problem) from None
