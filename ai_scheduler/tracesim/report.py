"""What a trace simulation leaves for people and tools: a text table, an event file, plots, a comparison.

- `summary_table` prints a `Summary` as fixed-width text: the run's overall figures, then the waits and
  completion times per queue level, per group and per user (the 20 users with the most pods; the table
  says how many more there are).
- `write_events` writes one JSON line per `Sample` (orjson), the cluster after each event, for tools that
  plot or check a run without this package.
- `write_plots` draws PNGs: FGD's allocated GPU against arrived GPU request (both in % of capacity), the
  GPU allocation over simulated time, and the wait-time CDF of each queue level. It uses matplotlib's
  object-oriented `Figure` API, never pyplot: no global figure registry (nothing to close or leak), no
  GUI backend picked from the environment; `Figure.savefig` renders a PNG with Agg. A plot with nothing to
  draw (no samples, no time passing, no placed pod) is not written; the returned list holds the paths
  written.
- `compare` lines two summaries up key by key (every numeric key of `Summary.as_dict`, and those of each
  queue level), with B - A, the relative change, and which side is better where the direction is known.

Everything here reads the records and the `Summary` built from them (metrics.py); nothing is computed
twice. Seconds are printed with one decimal, ratios as percentages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ai_scheduler.tracesim.metrics import Breakdown, Summary
from ai_scheduler.tracesim.records import SimResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_USERS = 20  # users shown by summary_table, those with the most pods

# Keys whose lower value is better, and those whose higher value is better (by name, prefix first);
# `compare` marks the better side only for these. Counts of a statistic (`*_count`) have no direction.
_LOWER_BETTER_PREFIXES = ("wait_", "jct_", "frag_")
_LOWER_BETTER = frozenset({"makespan", "longest_wait", "failed", "never_placed"})
_HIGHER_BETTER_PREFIXES = ("alloc_at_", "gpu_alloc_", "cpu_alloc_")
_HIGHER_BETTER = frozenset({"gpu_util", "jain_groups", "placed"})

# Keys that are fractions of capacity or indices in [0, 1], printed with four decimals by `compare`.
_RATIO_PREFIXES = ("alloc_at_", "frag_", "gpu_alloc_", "cpu_alloc_")
_RATIOS = frozenset({"gpu_util", "jain_groups"})

_STAT_COLUMNS = ("wait_mean", "wait_p50", "wait_p95", "wait_max", "jct_mean", "jct_p50", "jct_p95", "jct_max")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f} %"


def _number(value: float | int | None, ratio: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.4f}" if ratio else f"{value:.2f}"


def _is_ratio(key: str) -> bool:
    name = key.rsplit(".", 1)[-1]
    return name in _RATIOS or name.startswith(_RATIO_PREFIXES)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _breakdown_table(title: str, heading: str, parts: Iterable[tuple[str, Breakdown]]) -> list[str]:
    rows = [(name, part.as_dict()) for name, part in parts]
    width = min(max([len(heading), *(len(name) for name, _ in rows)]), 32)
    header = f"  {heading:<{width}} {'pods':>7} {'placed':>7}" + "".join(
        f" {column.replace('_', ' '):>10}" for column in _STAT_COLUMNS
    )
    lines = [title, header]
    for name, figures in rows:
        line = f"  {_clip(name, width):<{width}} {figures['pods']:>7} {figures['placed']:>7}"
        line += "".join(f" {_seconds(figures[column]):>10}" for column in _STAT_COLUMNS)
        lines.append(line)
    return lines


def summary_table(summary: Summary) -> str:
    """The summary as fixed-width text: overall figures, then waits and JCTs by level, group and user."""
    s = summary
    overall: list[tuple[str, str]] = [
        ("pods", str(s.pods)),
        ("placed", str(s.placed)),
        ("failed", str(s.failed)),
        ("never placed", str(s.never_placed)),
        ("finished", str(s.finished)),
        ("running at the end", str(s.running_at_end)),
        (
            "wait mean / p50 / p95 / max (s)",
            " / ".join(map(_seconds, (s.wait.mean, s.wait.p50, s.wait.p95, s.wait.max))),
        ),
        (
            "JCT mean / p50 / p95 / max (s)",
            " / ".join(map(_seconds, (s.jct.mean, s.jct.p50, s.jct.p95, s.jct.max))),
        ),
        ("makespan (s)", _seconds(s.makespan)),
        ("GPU allocation, time-weighted mean", _percent(s.gpu_alloc_mean)),
        ("GPU allocation, peak / final", f"{_percent(s.gpu_alloc_peak)} / {_percent(s.gpu_alloc_final)}"),
        ("CPU allocation, time-weighted mean", _percent(s.cpu_alloc_mean)),
        ("GPU utilisation (from the pods)", _percent(s.gpu_util)),
    ]
    overall += [
        (f"GPU allocation at {point} % arrived", _percent(value)) for point, value in s.alloc_at.items()
    ]
    overall += [
        (f"fragmentation at {point} % arrived", _percent(value)) for point, value in s.frag_at.items()
    ]
    longest = "-"
    if s.longest_wait is not None:
        state = "placed" if s.longest_wait_placed else "never placed"
        longest = f"{_seconds(s.longest_wait)} ({s.longest_wait_pod}, user {s.longest_wait_user}, {state})"
    overall += [
        ("fragmentation, time-weighted mean", _percent(s.frag_mean)),
        ("Jain's index across groups", _number(s.jain_groups, ratio=True)),
        ("preemptions", str(s.preemptions)),
        ("backfilled pods", str(s.backfilled)),
        ("longest wait (s)", longest),
        ("wall time (s)", _seconds(s.wall_seconds)),
    ]
    gpus = s.capacity_gpu_milli / 1000
    lines = [
        f"Trace simulation: config {s.config}, {s.mode} mode, {s.nodes} nodes, "
        f"{gpus:g} GPUs ({s.capacity_gpu_milli} milli), {s.capacity_cpu} millicores",
        "",
        "Overall",
    ]
    width = max(len(name) for name, _ in overall)
    lines += [f"  {name:<{width}}  {value}" for name, value in overall]

    lines.append("")
    lines += _breakdown_table(
        "Wait and JCT (s) by queue level", "level", ((str(level), part) for level, part in s.by_level.items())
    )
    lines.append("")
    lines += _breakdown_table("Wait and JCT (s) by group", "group", s.by_group.items())
    lines.append("")
    users = sorted(s.by_user.items(), key=lambda item: (-item[1].pods, item[0]))
    lines += _breakdown_table(
        f"Wait and JCT (s) by user (the {min(len(users), MAX_USERS)} with the most pods)",
        "user",
        users[:MAX_USERS],
    )
    if len(users) > MAX_USERS:
        lines.append(f"  ... and {len(users) - MAX_USERS} more users not shown")
    return "\n".join(lines) + "\n"


def write_events(result: SimResult, path: Path) -> None:
    """One JSON object per line, one line per sample, in the order the engine recorded them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for sample in result.samples:
            out.write(
                orjson.dumps(
                    {
                        "time": sample.time,
                        "arrived": sample.arrived,
                        "placed": sample.placed,
                        "failed": sample.failed,
                        "running": sample.running,
                        "requested_gpu_milli": sample.requested_gpu_milli,
                        "requested_cpu": sample.requested_cpu,
                        "allocated_gpu_milli": sample.allocated_gpu_milli,
                        "allocated_cpu": sample.allocated_cpu,
                        "fragmentation_milli": sample.fragmentation_milli,
                    },
                    option=orjson.OPT_APPEND_NEWLINE,
                )
            )


def _title(result: SimResult, what: str) -> str:
    return f"{what}\n{result.config}, {result.mode} mode, {result.nodes} nodes"


def write_plots(result: SimResult, directory: Path) -> list[Path]:
    """Write the PNG plots that have something to show into `directory`; return their paths."""
    from matplotlib.figure import Figure  # here: a run without plots does not pay for matplotlib's import

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    capacity = result.capacity_gpu_milli
    samples = result.samples
    if samples and capacity > 0:
        time = np.array([s.time for s in samples], dtype=np.float64)
        order = np.argsort(time, kind="stable")
        time = time[order]
        requested = (
            np.array([s.requested_gpu_milli for s in samples], dtype=np.float64)[order] * 100 / capacity
        )
        allocated = (
            np.array([s.allocated_gpu_milli for s in samples], dtype=np.float64)[order] * 100 / capacity
        )
        fragmented = (
            np.array([s.fragmentation_milli for s in samples], dtype=np.float64)[order] * 100 / capacity
        )

        figure = Figure(figsize=(7, 5), layout="constrained")
        axes = figure.subplots()
        top = max(float(requested.max()), 100.0)
        axes.plot([0, top], [0, top], color="grey", linestyle=":", linewidth=1, label="all of it allocated")
        axes.axhline(100, color="grey", linestyle="--", linewidth=1)
        axes.plot(requested, allocated, label="allocated")
        axes.plot(requested, fragmented, label="fragmented")
        axes.set_xlabel("arrived GPU request (% of capacity)")
        axes.set_ylabel("GPU (% of capacity)")
        written.append(_finish(figure, axes, _title(result, "GPU allocation against arrived workload"),
                               directory / "alloc_vs_arrived.png"))

        if time[-1] > time[0]:
            figure = Figure(figsize=(9, 4.5), layout="constrained")
            axes = figure.subplots()
            axes.step(time, allocated, where="post", label="allocated")
            axes.step(time, fragmented, where="post", label="fragmented")
            axes.set_xlabel("simulated time (s)")
            axes.set_ylabel("GPU (% of capacity)")
            axes.set_ylim(bottom=0)
            written.append(_finish(figure, axes, _title(result, "GPU allocation over time"),
                                   directory / "alloc_over_time.png"))

    waits: dict[int, list[float]] = {}
    for pod in result.pods:
        if pod.start is not None:
            waits.setdefault(pod.level, []).append(pod.start - pod.submit)
    if waits:
        figure = Figure(figsize=(7, 5), layout="constrained")
        axes = figure.subplots()
        for level, values in sorted(waits.items()):
            data = np.sort(np.asarray(values, dtype=np.float64))
            # From 0 at the shortest wait, so that the first step (and a single pod's) is drawn.
            fraction = np.arange(0, data.size + 1) / data.size
            xs = np.concatenate([data[:1], data])
            axes.step(xs, fraction, where="post", label=f"level {level} ({data.size} pods)")
        axes.set_xlabel("wait (s)")
        axes.set_ylabel("fraction of placed pods")
        axes.set_ylim(0, 1.02)
        written.append(_finish(figure, axes, _title(result, "Wait-time CDF by queue level"),
                               directory / "wait_cdf.png"))
    return written


def _finish(figure: Figure, axes: Axes, title: str, path: Path) -> Path:
    """Title, legend and grid, then the PNG written to `path`."""
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.savefig(path, dpi=100)
    return path


def _direction(key: str) -> int:
    """-1: lower is better, +1: higher is better, 0: unknown (by the last part of a dotted key)."""
    name = key.rsplit(".", 1)[-1]
    if name.endswith("_count"):
        return 0
    if name in _LOWER_BETTER or name.startswith(_LOWER_BETTER_PREFIXES):
        return -1
    if name in _HIGHER_BETTER or name.startswith(_HIGHER_BETTER_PREFIXES):
        return 1
    return 0


def _is_number(value: object) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def numeric_figures(figures: Mapping[str, Any]) -> dict[str, float | int | None]:
    """The numeric keys of `Summary.as_dict()` (None counts: a figure the run could not give), and
    those of each queue level as `levels.<level>.<key>`."""
    out: dict[str, float | int | None] = {
        key: value for key, value in figures.items() if not isinstance(value, Mapping) and _is_number(value)
    }
    for level, level_figures in figures.get("levels", {}).items():
        for key, value in level_figures.items():
            if _is_number(value):
                out[f"levels.{level}.{key}"] = value
    return out


def compare(a: Summary, b: Summary, label_a: str = "A", label_b: str = "B") -> str:
    """A, B, B - A, the relative change and the better side, for every numeric figure of either."""
    figures_a = numeric_figures(a.as_dict())
    figures_b = numeric_figures(b.as_dict())
    keys = list(figures_a)
    keys += [key for key in figures_b if key not in figures_a]
    rows: list[tuple[str, str, str, str, str, str]] = []
    for key in keys:
        value_a = figures_a.get(key)
        value_b = figures_b.get(key)
        delta = relative = better = ""
        ratio = _is_ratio(key)
        if value_a is not None and value_b is not None:
            difference = value_b - value_a
            delta = f"{'+' if difference >= 0 else ''}{_number(difference, ratio)}"
            if value_a != 0:
                relative = f"{100.0 * difference / abs(value_a):+.1f} %"
            elif value_b == 0:
                relative = "+0.0 %"
            direction = _direction(key)
            if direction:
                better = "=" if difference == 0 else (label_b if difference * direction > 0 else label_a)
        rows.append((key, _number(value_a, ratio), _number(value_b, ratio), delta, relative, better))
    headers = ("figure", label_a, label_b, f"{label_b} - {label_a}", "change", "better")
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)]
    widths[0] = max(widths[0], 8)

    def line(cells: tuple[str, ...]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = [f"{cell:>{width}}" for cell, width in zip(cells[1:5], widths[1:5], strict=True)]
        return "  ".join([first, *rest, f"{cells[5]:<{widths[5]}}"]).rstrip()

    lines = [line(headers), line(tuple("-" * width for width in widths))]
    lines += [line(row) for row in rows]
    return "\n".join(lines) + "\n"
