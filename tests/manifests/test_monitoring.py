"""deploy/monitoring/: the Grafana dashboard and the Prometheus alerting rules read only series that the
scheduler really serves on /metrics, and both files are well-formed.

The served names come from a running daemon's /metrics, read over HTTP as Prometheus reads it. Every
family has its `# TYPE` line there even before its first sample, so a labelled counter nobody has
incremented yet still counts; a histogram counts as its `_bucket`, `_sum` and `_count` series (the bare
name is no series: `rate(x_seconds[5m])` on a histogram returns nothing, and is reported).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import yaml
from conftest import fast_config, wait_for
from paths import ROOT

from ai_scheduler.api.kube import KubeClient
from ai_scheduler.daemon.app import Scheduler
from ai_scheduler.log import JsonLogger
from ai_scheduler.sim import SimApiServer

MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
ALERTS = MONITORING / "alerts.yaml"

# The series a family of each type puts into Prometheus (text format: a counter's TYPE line names its
# `_total` series already).
SERIES_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count"),
}

# PromQL's functions and aggregation operators (Prometheus 3.x): an identifier followed by "(".
PROMQL_FUNCTIONS = frozenset({
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg",
    "avg_over_time", "bottomk", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count",
    "count_over_time", "count_values", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
    "delta", "deriv", "double_exponential_smoothing", "end", "exp", "floor", "group", "histogram_avg",
    "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev", "histogram_stdvar",
    "histogram_sum", "holt_winters", "hour", "idelta", "increase", "info", "irate", "label_join",
    "label_replace", "last_over_time", "limit_ratio", "limitk", "ln", "log10", "log2", "mad_over_time",
    "max", "max_over_time", "min", "min_over_time", "minute", "month", "pi", "predict_linear",
    "present_over_time", "quantile", "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn",
    "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "start", "stddev",
    "stddev_over_time", "stdvar", "stdvar_over_time", "sum", "sum_over_time", "tan", "tanh", "time",
    "timestamp", "topk", "vector", "year",
})
# Keywords that are not followed by "(" (or whose parenthesised label list is removed first).
PROMQL_KEYWORDS = frozenset({
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right",
    "inf", "nan",
})
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
TOKEN = re.compile(r"(?P<number>\d[\w.]*)|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<call>\s*\()?")
# Grafana's built-in variables, and the dashboard's own as `$name`, `${name}` or `${name:format}`.
GRAFANA_BUILTIN = re.compile(r"\$__\w+|\$\{__\w+(?::\w+)?\}")
GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
LABEL_VALUES = re.compile(r"^\s*label_values\((?:(?P<selector>.*),)?\s*(?P<label>\w+)\s*\)\s*$", re.DOTALL)
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
SEVERITIES = {"critical", "warning", "info"}


# ---------------------------------------------------------------------------------------------- PromQL
def _without_grafana_variables(expr: str) -> str:
    """Grafana's interval variables become a duration, the dashboard's own a number (inside a label
    matcher's string, where they all are here, anything would do)."""
    return GRAFANA_VARIABLE.sub("1", GRAFANA_BUILTIN.sub("5m", expr))


def _balanced(expr: str) -> bool:
    stack: list[str] = []
    for char in expr:
        if char in "([{":
            stack.append(char)
        elif char in ")]}" and (not stack or "([{"[")]}".index(char)] != stack.pop()):
            return False
    return not stack


def parse_promql(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, unknown functions) of a PromQL expression, by a small tokenizer: strings, label
    matchers `{...}`, ranges `[...]`, the label lists of by/without/on/ignoring/group_left/group_right,
    numbers and durations, keywords and function names are not metric names; every other identifier is."""
    text = STRING.sub('""', _without_grafana_variables(expr))
    assert _balanced(text), f"unbalanced brackets in {expr!r}"
    text = re.sub(r"\{[^{}]*\}", " ", text)
    text = re.sub(r"\[[^\[\]]*\]", " ", text)
    text = GROUPING.sub(" ", text)  # `sum by (a) (x)` becomes `sum (x)`: a call
    names: set[str] = set()
    functions: set[str] = set()
    for token in TOKEN.finditer(text):
        name = token.group("name")
        if name is None:
            continue
        if name.lower() in PROMQL_KEYWORDS:  # `and (`, `offset 5m`, ...
            continue
        if token.group("call"):
            if name.lower() not in PROMQL_FUNCTIONS:
                functions.add(name)
        else:
            names.add(name)
    return names, functions


def series_names(exposition: str) -> set[str]:
    """The series names a scrape of this Prometheus text gives: from every `# TYPE` line (present with no
    sample yet) and every sample line."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            names.update(family + suffix for suffix in SERIES_SUFFIXES[kind])
        elif line and not line.startswith("#"):
            match = re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line)
            assert match is not None, line
            names.add(match.group())
    return names


def problems(expressions: dict[str, str], served: set[str]) -> list[str]:
    """What is wrong with each expression (`where -> expr`): metrics not served, functions PromQL lacks,
    no metric at all."""
    found = []
    for where, expr in expressions.items():
        names, functions = parse_promql(expr)
        for name in sorted(names - served):
            found.append(f"{where}: metric {name} is not served on /metrics")
        for function in sorted(functions):
            found.append(f"{where}: {function}() is no PromQL function")
        if not names:
            found.append(f"{where}: reads no metric: {expr!r}")
    return found


# ---------------------------------------------------------------------------------------------- files
def _dashboard() -> dict[str, Any]:
    with DASHBOARD.open() as f:
        dashboard: dict[str, Any] = json.load(f)
    return dashboard


def _alerts() -> dict[str, Any]:
    with ALERTS.open() as f:
        rules: dict[str, Any] = yaml.safe_load(f)
    return rules


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _variable_query(variable: dict[str, Any]) -> str:
    query = variable.get("query", "")
    return str(query.get("query", "") if isinstance(query, dict) else query)


def dashboard_expressions(dashboard: dict[str, Any]) -> dict[str, str]:
    """`panel title / refId` -> expr for every target, and the metric selector of every
    `label_values(selector, label)` variable."""
    found = {}
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            found[f"panel {panel['title']!r} / {target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.match(_variable_query(variable))
            assert match and match.group("selector"), f"{variable['name']}: not label_values(metric, label)"
            found[f"variable {variable['name']}"] = match.group("selector")
    return found


def _rules(rules: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in rules["groups"]:
        yield from group["rules"]


def alert_expressions(rules: dict[str, Any]) -> dict[str, str]:
    return {f"alert {rule['alert']}": rule["expr"] for rule in _rules(rules)}


async def _scrape() -> str:
    """A running daemon's /metrics against the simulated cluster, over HTTP."""
    sim = SimApiServer(bookmark_interval=0.2)
    await sim.start()
    client = await KubeClient.connect(host=sim.url)
    scheduler = Scheduler(fast_config(), client, JsonLogger(stream=io.BytesIO()))
    task = asyncio.create_task(scheduler.run())
    try:
        port = await wait_for(lambda: scheduler.http.port if scheduler.http else 0, what="/metrics served")
        url = f"http://127.0.0.1:{port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as reply:
            assert reply.status == 200
            return await reply.text()
    finally:
        scheduler.stop()
        await asyncio.wait_for(task, 15)
        await client.close()
        await sim.stop()


@pytest.fixture(scope="module")
def served() -> set[str]:
    return series_names(asyncio.run(_scrape()))


# ---------------------------------------------------------------------------------------------- tests
def test_the_scrape_is_read_whole(served: set[str]) -> None:
    """What the check compares with: families with no sample yet and histograms' series are there."""
    assert {"scheduler_schedule_attempts_total", "ai_scheduler_bind_errors_total",  # no sample yet
            "scheduler_scheduling_attempt_duration_seconds_bucket",
            "scheduler_scheduling_attempt_duration_seconds_count", "scheduler_pending_pods",
            "ai_scheduler_gpu_fragmentation_ratio"} <= served
    assert "scheduler_scheduling_attempt_duration_seconds" not in served  # a histogram's bare name


def test_dashboard_uses_only_served_metrics(served: set[str]) -> None:
    assert problems(dashboard_expressions(_dashboard()), served) == []


def test_alerts_use_only_served_metrics(served: set[str]) -> None:
    assert problems(alert_expressions(_alerts()), served) == []


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (queue) (scheduler_pending_pods{job=~"$job", queue!="gated"})', {"scheduler_pending_pods"}),
    ("histogram_quantile(0.99, sum by (le, result) (rate(x_seconds_bucket{a=\"}{[\"}[$__rate_interval])))",
     {"x_seconds_bucket"}),
    ("a / ignoring (measure) group_left (node) b offset 1h30m > bool 0.5e-3 unless on (job) c @ start()",
     {"a", "b", "c"}),
    ('sum without (instance) (rate(d_total[5m:30s])) > Inf or absent(e{x="and or by"})', {"d_total", "e"}),
    ('label_replace(f, "dst", "$1", "src", "(.*)") and (g)', {"f", "g"}),
])
def test_the_tokenizer_finds_exactly_the_metrics(expr: str, names: set[str]) -> None:
    assert parse_promql(expr) == (names, set())


def test_an_unknown_metric_or_function_is_reported(served: set[str]) -> None:
    """The check can fail: a name /metrics lacks, a histogram's bare name, a function PromQL lacks."""
    found = problems({
        "typo": 'sum by (queue) (rate(ai_scheduler_no_such_metric_total{job=~"$job"}[5m]))',
        "bare histogram": "histogram_quantile(0.99, rate(scheduler_scheduling_attempt_duration_seconds[5m]))",
        "function": "ratee(scheduler_schedule_attempts_total[5m])",
        "nothing": "vector(1)",
    }, served)
    assert found == [
        "typo: metric ai_scheduler_no_such_metric_total is not served on /metrics",
        "bare histogram: metric scheduler_scheduling_attempt_duration_seconds is not served on /metrics",
        "function: ratee() is no PromQL function",
        "nothing: reads no metric: 'vector(1)'",
    ]
    # and through the files' own path: a dashboard with one target changed
    dashboard = _dashboard()
    panel = next(p for p in dashboard["panels"] if p.get("targets"))
    panel["targets"][0]["expr"] = "sum(ai_scheduler_gang_timeouts_nonexistent_total)"
    assert [p for p in problems(dashboard_expressions(dashboard), served) if "nonexistent" in p] == [
        f"panel {panel['title']!r} / A: metric ai_scheduler_gang_timeouts_nonexistent_total is not served on "
        "/metrics"]
    with pytest.raises(AssertionError, match="unbalanced"):
        parse_promql("sum(rate(x[5m])")


def test_dashboard_is_a_grafana_dashboard_on_a_chosen_prometheus() -> None:
    dashboard = _dashboard()
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 36
    assert dashboard.get("id") is None  # importable: Grafana assigns the id
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    on_datasource = {"type": "prometheus", "uid": "${datasource}"}
    ids = [panel["id"] for panel in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    used: set[str] = set()
    panels = [panel for panel in _panels(dashboard["panels"]) if panel["type"] != "row"]
    assert len(panels) >= 10
    for panel in panels:
        where = f"panel {panel['title']!r}"
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, where
        assert panel["datasource"] == on_datasource, where
        assert panel.get("targets"), f"{where} has no query"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in panel["targets"]:
            assert target["datasource"] == on_datasource and target["expr"].strip(), where
            for match in GRAFANA_VARIABLE.finditer(GRAFANA_BUILTIN.sub("", target["expr"])):
                used.add(next(group for group in match.groups() if group))
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == on_datasource, variable["name"]
    assert used <= set(variables), f"undefined variables: {used - set(variables)}"


def test_dashboard_covers_what_operators_watch() -> None:
    """Pending pods by queue, latency, bind errors, GPU allocation and fragmentation, gangs, preemption."""
    read: set[str] = set()
    for expr in dashboard_expressions(_dashboard()).values():
        read |= parse_promql(expr)[0]
    assert {"scheduler_pending_pods", "ai_scheduler_pending_pods",
            "scheduler_scheduling_attempt_duration_seconds_bucket", "scheduler_schedule_attempts_total",
            "ai_scheduler_bind_errors_total", "ai_scheduler_gpu_cluster",
            "ai_scheduler_gpu_fragmentation_ratio", "ai_scheduler_gang_attempt_duration_seconds_count",
            "scheduler_preemption_attempts_total"} <= read


def test_alerting_rules_are_complete() -> None:
    rules = _alerts()
    assert set(rules) == {"groups"}
    groups = [group["name"] for group in rules["groups"]]
    assert len(groups) == len(set(groups))
    names = []
    for rule in _rules(rules):
        where = f"alert {rule.get('alert')!r}"
        assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, where
        assert rule["alert"] and isinstance(rule["expr"], str) and rule["expr"].strip(), where
        assert DURATION.match(str(rule["for"])), f"{where}: for {rule['for']!r}"
        assert rule["labels"]["severity"] in SEVERITIES, where
        for key in ("summary", "description"):
            text = rule["annotations"][key]
            assert isinstance(text, str) and text.strip(), f"{where}: {key}"
            assert text.count("{{") == text.count("}}"), f"{where}: {key} template"
        names.append(rule["alert"])
    assert len(names) == len(set(names)), "alert names are unique"
    assert "AISchedulerDown" in names and len(names) >= 8
