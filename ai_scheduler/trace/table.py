"""CSV files as the trace readers see them: a normalised header and rows whose fields parse or say why not.

Column names are matched without regard to case or surrounding blanks, in any order. A field is missing
when it is empty, or `nan`, `none` or `null` in any case (as pandas and other tools write a missing
value); every reader then takes the column's default. A field that is present but cannot be read raises
`RowError`, which the reader turns into a `Problem` for that row: one bad field costs its row, never the
file. A record with more or fewer fields than the header is a problem too. Row numbers are lines of the
file, the header being line 1 (a quoted field spanning lines counts the line where its record ends, as
the csv module does).

Quantities go through ai_scheduler.quantity, the parser the scheduler itself uses, so that a trace's
`500m` or `4Gi` means exactly what it would in a pod spec.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ai_scheduler.messages import echo
from ai_scheduler.quantity import QuantityError, parse_duration, to_units
from ai_scheduler.trace.records import Problem, TraceError, TraceJob

_MISSING = frozenset({"", "nan", "none", "null"})


class RowError(ValueError):
    """A field of one row that cannot be read; the message names the column."""


@dataclass(slots=True)
class Table:
    """A CSV file: its normalised column names and its records with their line numbers."""

    path: Path
    columns: tuple[str, ...]
    records: list[tuple[int, list[str]]]

    def rows(self, problems: list[Problem]) -> Iterator[Row]:
        """The records as Rows; a record of the wrong width goes to `problems` instead."""
        width = len(self.columns)
        for line, fields in self.records:
            if len(fields) != width:
                problems.append(Problem(line, f"expected {width} fields as in the header, "
                                              f"found {len(fields)}"))
                continue
            yield Row(line, dict(zip(self.columns, fields, strict=True)))


def load_table(path: str | Path) -> Table:
    """Read a CSV file (UTF-8, with or without a byte order mark); blank lines are skipped."""
    source = Path(path)
    try:
        with source.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            records = [(reader.line_num, fields) for fields in reader if fields]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{source}: cannot read: {exc}") from exc
    if not header or not any(name.strip() for name in header):
        raise TraceError(f"{source}: empty file: no header line")
    columns = tuple(name.strip().lower() for name in header)
    repeated = sorted({name for name in columns if columns.count(name) > 1})
    if repeated:
        raise TraceError(f"{source}: column {', '.join(map(repr, repeated))} appears more than once")
    if "" in columns:
        raise TraceError(f"{source}: column {columns.index('') + 1} of the header has no name")
    return Table(source, columns, records)


class Row:
    """One record of a Table, read field by field; each reader raises RowError naming its column."""

    __slots__ = ("line", "values")

    def __init__(self, line: int, values: dict[str, str]) -> None:
        self.line = line
        self.values = values

    def text(self, column: str) -> str:
        """The field stripped of blanks; "" when the column is absent or the field missing."""
        value = self.values.get(column, "").strip()
        return "" if value.lower() in _MISSING else value

    def name(self, column: str) -> str:
        """A field that must be present (a job's name or id)."""
        value = self.text(column)
        if not value:
            raise RowError(f"{column} is missing")
        return value

    def number(self, column: str) -> float | None:
        """A finite decimal number, or None when missing."""
        value = self.text(column)
        if not value:
            return None
        try:
            number = float(value)
        except ValueError:
            raise RowError(f"{column} must be a number, got {echo(value)}") from None
        if not math.isfinite(number):
            raise RowError(f"{column} must be a finite number, got {echo(value)}")
        return number

    def integer(self, column: str, default: int = 0) -> int:
        """A whole number at least 0 (`8` or `8.0`, as pandas may write it), or `default` when missing."""
        number = self.number(column)
        if number is None:
            return default
        if number < 0 or not number.is_integer():
            raise RowError(f"{column} must be a whole number, at least 0, got {echo(self.text(column))}")
        return int(number)

    def signed_integer(self, column: str, default: int = 0) -> int:
        """A whole number of either sign (a priority), or `default` when missing."""
        number = self.number(column)
        if number is None:
            return default
        if not number.is_integer():
            raise RowError(f"{column} must be a whole number, got {echo(self.text(column))}")
        return int(number)

    def quantity(self, column: str, resource: str) -> int:
        """A Kubernetes quantity in the scheduler's units for `resource` (millicores for cpu, bytes for
        memory); 0 when missing."""
        value = self.text(column)
        if not value:
            return 0
        try:
            amount = to_units(resource, value)
        except QuantityError:
            example = _EXAMPLE[resource]
            raise RowError(f"{column} must be a quantity such as {example}, got {echo(value)}") from None
        if amount < 0:
            raise RowError(f"{column} must not be negative, got {echo(value)}")
        return amount

    def seconds(self, column: str) -> float | None:
        """A length of time: a number of seconds or a Go duration (`90m`, `1h30m`); None when missing."""
        value = self.text(column)
        if not value:
            return None
        duration = parse_duration(value)
        if duration is not None:
            return duration
        number = self.number(column)
        if number is None or number < 0:
            raise RowError(
                f"{column} must be seconds or a duration such as 90m, at least 0, got {echo(value)}"
            )
        return number

    def time(self, column: str) -> float | None:
        """A point in time as epoch seconds: a number, or an ISO 8601 date and time (`2020-04-01 00:00:00`,
        taken as UTC unless it names its offset); None when missing."""
        value = self.text(column)
        if not value:
            return None
        try:
            return self.number(column)
        except RowError:
            pass
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise RowError(
                f"{column} must be epoch seconds or a date and time such as 2020-04-01 00:00:00, "
                f"got {echo(value)}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()


_EXAMPLE = {"cpu": "500m or 2", "memory": "4Gi"}


def build_jobs(
    table: Table, problems: list[Problem], build: Callable[[Row], list[TraceJob]]
) -> list[TraceJob]:
    """The jobs `build` makes of each row, in file order. A row it cannot build (a RowError, or a
    ValueError from TraceJob's checks), or one that repeats a name already read, goes to `problems`
    whole: none of its jobs is kept."""
    jobs: list[TraceJob] = []
    first_row: dict[str, int] = {}
    for row in table.rows(problems):
        try:
            made = build(row)
        except ValueError as exc:
            problems.append(Problem(row.line, str(exc)))
            continue
        repeated = next((job.name for job in made if job.name in first_row), None)
        if repeated is not None:
            problems.append(Problem(row.line, f"name {echo(repeated)} repeats row {first_row[repeated]}"))
            continue
        for job in made:
            first_row[job.name] = row.line
        jobs.extend(made)
    return jobs
