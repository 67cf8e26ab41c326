"""Readable text for the visibility API's answers: pure functions from its JSON to lines.

The answers are Kubernetes-style lists (`items`); every renderer here takes the decoded body and gives
the text `ai-scheduler status` prints, so that what a person reads is tested from fixed samples without a
cluster. Tables are laid out as kubectl lays out its own: upper-case headers, columns left-aligned and
two spaces apart, `<none>` where a value is absent. Times in the future are shown relative to `now` (wall
seconds, a parameter so that a test fixes it), as `kubectl get` shows ages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ai_scheduler.log import parse_time

NONE = "<none>"
HIDDEN = "<hidden>"  # an entry of another user's namespace: counted in positions, not named
REASON_WIDTH = 72  # the queue table cuts reasons here; `why` shows them whole


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns two spaces apart, each as wide as its widest cell; the last column is not padded."""
    body = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in body) for i in range(len(headers))]
    lines = []
    for row in body:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def number(value: Any, places: int = 3) -> str:
    """A score as a person reads it: at most `places` decimals, no trailing zeros."""
    if value is None:
        return NONE
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    text = f"{value:.{places}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def duration(seconds: float) -> str:
    """kubectl's short form: 45s, 12m, 3h05m, 2d4h."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def starts(text: str | None, now: float) -> str:
    """An expected start: `in 12m`, `now` once due, `<none>` when the forecast gives none."""
    when = parse_time(text)
    if when is None:
        return NONE
    return "now" if when <= now else f"in {duration(when - now)}"


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _meta(item: Mapping[str, Any]) -> tuple[str | None, str | None]:
    meta = item.get("metadata") or {}
    return meta.get("namespace"), meta.get("name")


def pod_key(item: Mapping[str, Any]) -> str:
    namespace, name = _meta(item)
    return HIDDEN if name is None else f"{namespace}/{name}"


def queue_table(body: Mapping[str, Any], now: float, *, all_namespaces: bool) -> str:
    """`ai-scheduler status queue`: the pending pods in the scheduler's order."""
    items = list(body.get("items") or ())
    if not items:
        return "No pods are waiting."
    headers = ["POS", *(["NAMESPACE"] if all_namespaces else []), "NAME", "GANG", "QUEUE", "QPOS", "USER",
               "PRIORITY", "ATTEMPTS", "START", "REASON"]
    rows = []
    for item in items:
        namespace, name = _meta(item)
        priority = number(item.get("priority"))
        if item.get("promoted"):
            priority += "*"
        rows.append([
            str(item.get("position", "")),
            *([namespace or HIDDEN] if all_namespaces else []),
            name or HIDDEN,
            _gang_name(item.get("gang"), namespace) if name is not None else "",
            str(item.get("queue") or NONE),
            str(item.get("positionInQueue", "")),
            str(item.get("user") or NONE),
            priority,
            str(item.get("attempts", 0)),
            starts(item.get("expectedStart"), now),
            cut(str(item.get("reason") or ""), REASON_WIDTH) or NONE,
        ])
    legend = "\n\n(* promoted: waited past its queue's promoteAfterSeconds)" if any(
        item.get("promoted") for item in items) else ""
    return table(headers, rows) + legend


def _gang_name(gang: str | None, namespace: str | None) -> str:
    """A gang as `ns/name`; within its own namespace's listing just the name."""
    if not gang:
        return NONE
    gang_namespace, _, name = gang.rpartition("/")
    return name if gang_namespace == namespace else gang


def why_text(items: Sequence[Mapping[str, Any]], now: float, *, gang: str | None = None) -> str:
    """`ai-scheduler status why`: for each pod, where it stands, its priority factor by factor (as
    Slurm's sprio) and why it waits with when it should start (as squeue --start)."""
    blocks = []
    if gang is not None:
        blocks.append(f"Gang {gang}: {len(items)} member(s) waiting")
    for item in items:
        blocks.append(_why_one(item, now))
    return "\n\n".join(blocks)


def _why_one(item: Mapping[str, Any], now: float) -> str:
    lines = [f"Pod {pod_key(item)}" + (f"  (gang {item['gang']})" if item.get("gang") else "")]
    level = item.get("level")
    queue = str(item.get("queue") or NONE) + (f" (level {level})" if level is not None else "")
    fields: list[tuple[str, str]] = [
        ("Queue", f"{queue}: position {item.get('position', '?')} of all, "
                  f"{item.get('positionInQueue', '?')} in its queue"),
        ("User / group", f"{item.get('user') or NONE} / {item.get('group') or NONE}"),
        ("Priority", number(item.get("priority"), 6) + ("  (promoted)" if item.get("promoted") else "")),
    ]
    run = item.get("runTime")
    if run:
        fields.append(("Run time", f"median {duration(float(run.get('medianSeconds') or 0))}, "
                                   f"upper {duration(float(run.get('upperSeconds') or 0))} "
                                   f"({run.get('source') or 'unknown'})"))
    else:
        fields.append(("Run time", "unknown"))
    fields.append(("Attempts", str(item.get("attempts", 0))))
    gang = item.get("gangStatus")
    if gang:
        text = (f"{gang.get('pods', '?')} pod(s) of {gang.get('minMember', '?')} needed, "
                f"{gang.get('scheduled', 0)} placed")
        fields.append(("Gang", text + (f"; {gang['problem']}" if gang.get("problem") else "")))
    held = item.get("reservation")
    if held:
        nodes = ", ".join(map(str, held.get("nodes") or ())) or NONE
        due = held.get("due")
        fields.append(("Reservation", f"room held on {nodes} for {held.get('holder') or NONE}"
                       + (f", free {starts(due, now)}" if due else "")))
    start = item.get("expectedStart")
    fields.append(("Expected start", f"{start} ({starts(start, now)})" if start else
                   "none within the forecast's horizon"))
    fields.append(("Reason", str(item.get("reason") or "not tried yet")))
    width = max(len(label) for label, _ in fields) + 1
    lines += [f"  {(label + ':').ljust(width)} {value}" for label, value in fields]
    factors = item.get("factors") or {}
    if factors:
        lines.append("  Factors:")
        rows = [[name, number(value, 6)] for name, value in sorted(factors.items())]
        lines += ["    " + line for line in table(["FACTOR", "VALUE"], rows).splitlines()]
    return "\n".join(lines)


def quota_table(body: Mapping[str, Any]) -> str:
    """`ai-scheduler status quota`: per group and user, each resource's use against its min and max."""
    rows = []
    for item in body.get("items") or ():
        used, low, high = (item.get(key) or {} for key in ("used", "min", "max"))
        for resource in sorted({*used, *low, *high}):
            rows.append([str(item.get("kind") or NONE), str(item.get("name") or NONE), resource,
                         str(used.get(resource, "0")), str(low.get(resource, NONE)),
                         str(high.get(resource, NONE))])
    if not rows:
        return "No quotas apply."
    return table(["KIND", "NAME", "RESOURCE", "USED", "MIN", "MAX"], rows)


def _node_name(item: Mapping[str, Any]) -> str:
    meta = item.get("metadata") or {}
    return str(meta.get("name") or item.get("node") or item.get("name") or NONE)


def _holder(holder: Mapping[str, Any]) -> str:
    who = f"{holder.get('namespace')}/{holder.get('name')}" if holder.get("name") else HIDDEN
    if holder.get("memoryMiB") is not None:
        return f"{who} ({holder['memoryMiB']} MiB)"
    if holder.get("fraction") is not None:
        return f"{who} ({number(holder['fraction'])})"
    return f"{who} (whole)"


def gpus_table(body: Mapping[str, Any]) -> str:
    """`ai-scheduler status gpus`: each device of each node, and which pods hold how much of it."""
    nodes = body.get("items") if "items" in body else [body]
    rows = []
    for node in nodes or ():
        for device in node.get("devices") or ():
            holders = device.get("holders") or []
            rows.append([
                _node_name(node), str(device.get("index", "?")), str(device.get("model") or NONE),
                _mib(device.get("memoryMiB")), _mib(device.get("freeMemoryMiB")),
                str(device.get("island") if device.get("island") is not None else NONE),
                ", ".join(_holder(h) for h in holders) or NONE,
            ])
    if not rows:
        return "No GPUs managed by ai-scheduler."
    return table(["NODE", "GPU", "MODEL", "MEMORY", "FREE", "ISLAND", "HOLDERS"], rows)


def _mib(value: Any) -> str:
    return NONE if value is None else f"{value} MiB"
