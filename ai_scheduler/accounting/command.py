"""`ai-scheduler usage`: what was used, from the accounting database, by user, group, queue, Task, GPU model.

Reads the database the daemon writes (`--database`, else the `accounting.database` of `--config`, else
the default one) and sums each pod's lifetime cut to the period: GPU-hours, cpu core-hours, memory
GiB-hours and the pods counted, largest first (a table, or `-o json`). A pod still running counts up to
the end of the period (`--until`, default now).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TextIO

from ai_scheduler.accounting.budgets import BudgetState, budget_states, period_bounds
from ai_scheduler.accounting.store import BY, AccountingError, open_store, usage
from ai_scheduler.config import ConfigError, default_config, load_config
from ai_scheduler.log import parse_time, rfc3339
from ai_scheduler.quantity import parse_duration

DESCRIPTION = (
    "Sum what pods used over a period from the accounting database the daemon writes (SQLite or "
    "PostgreSQL): GPU-hours, cpu core-hours and memory GiB-hours by user, group, queue, Task, namespace "
    "or GPU model, each pod's lifetime cut to the period; with --budgets, each budget of the config: "
    "what was used in its period and what is left."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database", metavar="DSN",
                        help="sqlite:///PATH or postgresql://... (default: accounting.database of --config)")
    parser.add_argument("--config", metavar="FILE", help="the daemon's config file, for its database")
    parser.add_argument("--since", default="7d", metavar="WHEN",
                        help="start of the period: a duration before --until (90m, 7d) or an RFC 3339 time "
                        "(default: %(default)s)")
    parser.add_argument("--until", metavar="WHEN", help="end of the period: an RFC 3339 time (default: now)")
    parser.add_argument("--by", choices=BY, default="user", help="what to sum by (default: %(default)s)")
    parser.add_argument("--budgets", action="store_true",
                        help="instead: each budget of --config (accounting.budgets): its period, what "
                        "was used in it and what is left")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")


def _when(text: str, until: float) -> float | None:
    moment = parse_time(text)
    if moment is not None:
        return moment
    seconds = parse_duration(text)
    return until - seconds if seconds is not None else None


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    until = parse_time(args.until) if args.until else time.time()
    if until is None:
        print(f"ai-scheduler usage: --until must be an RFC 3339 time, got {args.until!r}", file=err)
        return 2
    since = _when(args.since, until)
    if since is None or since >= until:
        print(f"ai-scheduler usage: --since must be a duration (90m, 7d) or a time before --until, got "
              f"{args.since!r}", file=err)
        return 2
    try:
        config = load_config(args.config) if args.config else default_config()
    except ConfigError as exc:
        print(f"ai-scheduler usage: invalid config: {exc}", file=err)
        return 2
    dsn = args.database or config.accounting.database
    budgets = config.accounting.budgets
    if args.budgets:
        since = min((period_bounds(b.period, until)[0] for b in budgets), default=until - 1)
    try:
        store = open_store(dsn)
        try:
            rows = store.rows(since, until)
        finally:
            store.close()
    except AccountingError as exc:
        print(f"ai-scheduler usage: {exc}", file=err)
        return 1
    if args.budgets:
        return _budgets(budget_states(budgets, rows, until), args.output, out)
    uses = usage(rows, since, until, args.by)
    if args.output == "json":
        items = [{"key": u.key, "gpuHours": round(u.gpu_hours, 6), "cpuHours": round(u.cpu_hours, 6),
                  "memoryGiBHours": round(u.memory_gib_hours, 6), "pods": u.pods} for u in uses]
        body = {"since": rfc3339(since), "until": rfc3339(until), "by": args.by, "items": items}
        print(json.dumps(body, indent=2), file=out)
        return 0
    header = (args.by.upper().replace("_", " "), "GPU-HOURS", "CPU-HOURS", "MEMORY-GIB-HOURS", "PODS")
    table = [header] + [(u.key or "<none>", f"{u.gpu_hours:.2f}", f"{u.cpu_hours:.2f}",
                         f"{u.memory_gib_hours:.2f}", str(u.pods)) for u in uses]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print(f"From {rfc3339(since, millis=False)} to {rfc3339(until, millis=False)}:", file=out)
    for row in table:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("   ".join(cells).rstrip(), file=out)
    if not uses:
        print("No pod ran in that period.", file=out)
    return 0


def _budgets(states: list[BudgetState], output: str, out: TextIO) -> int:
    if output == "json":
        items = [{"name": s.spec.name, "scope": s.spec.scope, "subject": s.spec.subject,
                  "period": s.spec.period, "start": rfc3339(s.start, millis=False),
                  "end": rfc3339(s.end, millis=False), "gpuHours": s.spec.gpu_hours,
                  "usedGpuHours": round(s.used_hours, 6), "leftGpuHours": round(s.left_hours, 6),
                  "spent": s.spent, "action": s.spec.action} for s in states]
        print(json.dumps({"items": items}, indent=2), file=out)
        return 0
    if not states:
        print("No budget in the config (accounting.budgets).", file=out)
        return 0
    header = ("BUDGET", "SUBJECT", "PERIOD", "ENDS", "USED", "BUDGET-GPU-HOURS", "LEFT", "SPENT")
    table = [header] + [(s.spec.name, s.subject, s.spec.period, rfc3339(s.end, millis=False),
                         f"{s.used_hours:.2f}", f"{s.spec.gpu_hours:g}", f"{s.left_hours:.2f}",
                         f"yes: {s.spec.action}" if s.spent else "no") for s in states]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("   ".join(cells).rstrip(), file=out)
    return 0
