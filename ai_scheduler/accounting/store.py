"""The accounting database: what each pod used, and the fair-share usage, in SQLite or PostgreSQL.

One table row per pod that ran (`pod_usage`, keyed by the pod's uid): who it belongs to (namespace,
user, group, queue, Task), where it ran (node, GPU model), what it held (GPUs, cpu cores, memory bytes)
and when (`started`, `ended`: epoch seconds; `ended` NULL while it runs). Every write is an upsert by
uid, so writing a row twice, or a new leader writing again what the old one wrote, changes nothing;
`ended`, once known, is never taken back. Use over a period is computed from the rows, each pod's
lifetime cut to the period (`usage`), so that GPU-hours by user, group, queue, Task and GPU model, and
their series over time, come from one place.

The second table (`fair_share`) keeps the decayed usage that fair share orders groups and queues by
(scheduler/priority.py), with the time it was taken: a daemon that starts (a restart, a new leader)
reads it back, decayed to now, so that the fair-share order survives it.

`open_store(dsn)`: `sqlite:///PATH` (a file; the default, on a volume) or `postgresql://...` (for
production and the HA pair: both replicas use it, and a new leader continues where the old one
stopped). The two dialects differ only in their placeholders; the SQL is otherwise the same. Calls
block: the daemon makes them on a thread (daemon/accounting.py).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS pod_usage (
        uid TEXT PRIMARY KEY,
        namespace TEXT NOT NULL,
        pod TEXT NOT NULL,
        user_name TEXT NOT NULL,
        group_name TEXT NOT NULL,
        queue TEXT NOT NULL,
        task TEXT NOT NULL,
        node TEXT NOT NULL,
        gpu_model TEXT NOT NULL,
        gpus DOUBLE PRECISION NOT NULL,
        cpu_cores DOUBLE PRECISION NOT NULL,
        memory_bytes DOUBLE PRECISION NOT NULL,
        started DOUBLE PRECISION NOT NULL,
        ended DOUBLE PRECISION
    )""",
    "CREATE INDEX IF NOT EXISTS pod_usage_started ON pod_usage (started)",
    """CREATE TABLE IF NOT EXISTS fair_share (
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        usage DOUBLE PRECISION NOT NULL,
        taken DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (kind, name)
    )""",
)
BY = ("user", "group", "queue", "task", "namespace", "gpu_model")  # what `usage` may group by
_COLUMNS = {"user": "user_name", "group": "group_name", "queue": "queue", "task": "task",
            "namespace": "namespace", "gpu_model": "gpu_model"}


class AccountingError(Exception):
    """The database cannot be opened or used, with the cause."""


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's row: what it held, from `started` to `ended` (None while it runs)."""

    uid: str
    namespace: str
    pod: str
    user_name: str
    group_name: str
    queue: str
    task: str
    node: str
    gpu_model: str
    gpus: float
    cpu_cores: float
    memory_bytes: float
    started: float
    ended: float | None = None


@dataclass(frozen=True, slots=True)
class Use:
    """Use over a period by one key: GPU-hours, cpu core-hours, memory GiB-hours, pods counted."""

    key: str
    gpu_hours: float
    cpu_hours: float
    memory_gib_hours: float
    pods: int


_NAMES = tuple(f.name for f in fields(PodUsage))
_UPDATED = tuple(n for n in _NAMES if n not in ("uid", "ended"))
_UPSERT = (
    f"INSERT INTO pod_usage ({', '.join(_NAMES)}) VALUES ({', '.join('?' for _ in _NAMES)}) "
    f"ON CONFLICT (uid) DO UPDATE SET {', '.join(f'{n} = excluded.{n}' for n in _UPDATED)}, "
    "ended = COALESCE(pod_usage.ended, excluded.ended)"
)


class _Connection(Protocol):
    def cursor(self) -> Any: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


class Store:
    """One connection to the accounting database, its calls serialised (one thread at a time)."""

    def __init__(self, connection: _Connection, dialect: str, where: str) -> None:
        self._connection = connection
        self.dialect = dialect  # "sqlite" or "postgresql"
        self.where = where  # the DSN without its password, for messages
        self._lock = threading.Lock()
        with self._cursor() as cursor:
            for statement in SCHEMA:
                cursor.execute(statement)

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self._lock:
            cursor = self._connection.cursor()
            try:
                yield cursor
                self._connection.commit()
            except Exception as exc:
                self._connection.rollback()
                raise AccountingError(f"{self.where}: {type(exc).__name__}: {exc}") from exc
            finally:
                cursor.close()

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s") if self.dialect == "postgresql" else statement

    def close(self) -> None:
        self._connection.close()

    # ------------------------------------------------------------------ pods
    def upsert(self, rows: Iterable[PodUsage]) -> int:
        batch = [astuple(row) for row in rows]
        if batch:
            with self._cursor() as cursor:
                cursor.executemany(self._sql(_UPSERT), batch)
        return len(batch)

    def rows(self, since: float, until: float) -> list[PodUsage]:
        """The pods that ran at some time in [since, until)."""
        with self._cursor() as cursor:
            cursor.execute(self._sql(f"SELECT {', '.join(_NAMES)} FROM pod_usage WHERE started < ? "
                                     "AND (ended IS NULL OR ended > ?) ORDER BY started, uid"),
                           (until, since))
            return [PodUsage(*row) for row in cursor.fetchall()]

    def running(self) -> list[PodUsage]:
        """The pods whose end is not known yet."""
        with self._cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(_NAMES)} FROM pod_usage WHERE ended IS NULL")
            return [PodUsage(*row) for row in cursor.fetchall()]

    # ------------------------------------------------------------------ fair share
    def save_fair_share(self, usage: Mapping[tuple[str, str], float], taken: float) -> None:
        """The decayed usage by (kind, name) ("group" or "queue"), taken at `taken` (epoch seconds)."""
        statement = self._sql("INSERT INTO fair_share (kind, name, usage, taken) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT (kind, name) DO UPDATE SET usage = excluded.usage, "
                              "taken = excluded.taken")
        with self._cursor() as cursor:
            cursor.execute("DELETE FROM fair_share")
            cursor.executemany(statement, [(k, n, u, taken) for (k, n), u in usage.items()])

    def load_fair_share(self) -> tuple[dict[tuple[str, str], float], float | None]:
        """The last decayed usage saved and when it was taken (None: never)."""
        with self._cursor() as cursor:
            cursor.execute("SELECT kind, name, usage, taken FROM fair_share")
            rows = cursor.fetchall()
        taken = max((float(row[3]) for row in rows), default=None)
        return {(str(k), str(n)): float(u) for k, n, u, _ in rows}, taken


def usage(rows: Sequence[PodUsage], since: float, until: float, by: str) -> list[Use]:
    """Use in [since, until) by `by` (one of BY), each pod's lifetime cut to the period (a pod still
    running counts to `until`); largest GPU-hours first."""
    if by not in BY:
        raise ValueError(f"usage by {by!r}: one of {', '.join(BY)}")
    column = _COLUMNS[by]
    totals: dict[str, list[float]] = {}
    for row in rows:
        span = max(min(row.ended if row.ended is not None else until, until) - max(row.started, since), 0.0)
        total = totals.setdefault(str(getattr(row, column)), [0.0, 0.0, 0.0, 0])
        total[0] += row.gpus * span
        total[1] += row.cpu_cores * span
        total[2] += row.memory_bytes * span
        total[3] += 1
    uses = [Use(key, gpu / 3600, cpu / 3600, memory / 2**30 / 3600, int(pods))
            for key, (gpu, cpu, memory, pods) in totals.items()]
    return sorted(uses, key=lambda u: (-u.gpu_hours, -u.cpu_hours, u.key))


def open_store(dsn: str) -> Store:
    """The store a DSN names: `sqlite:///PATH` (`sqlite://` alone: in memory) or `postgresql://...`."""
    if dsn == "sqlite://" or dsn.startswith("sqlite:///"):
        target = dsn.removeprefix("sqlite:///") if dsn != "sqlite://" else ":memory:"  # sqlite:////abs/path
        try:
            if target != ":memory:":
                Path(target).parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(target, check_same_thread=False, timeout=30)
            return Store(connection, "sqlite", f"sqlite:{target}")
        except (OSError, sqlite3.Error, AccountingError) as exc:
            raise AccountingError(f"cannot open the SQLite database {target}: {exc}") from exc
    if dsn.startswith(("postgresql://", "postgres://")):
        import psycopg

        where = _without_password(dsn)
        try:
            return Store(psycopg.connect(dsn, connect_timeout=10), "postgresql", where)
        except psycopg.Error as exc:
            raise AccountingError(f"cannot connect to {where}: {exc}") from exc
    raise AccountingError(f"accounting.database must be sqlite:///PATH or postgresql://..., got {dsn!r}")


def _without_password(dsn: str) -> str:
    scheme, _, rest = dsn.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return dsn
    user = credentials.partition(":")[0]
    return f"{scheme}://{user}@{host}"


def usage_series(rows: Sequence[PodUsage], since: float, until: float, step: float, by: str
                 ) -> dict[str, list[float]]:
    """GPU-hours by `by` in each interval of `step` seconds from `since` (the last one cut at `until`),
    each pod's lifetime cut to each interval: {key: [GPU-hours per interval]}."""
    if by not in BY:
        raise ValueError(f"usage by {by!r}: one of {', '.join(BY)}")
    column = _COLUMNS[by]
    count = max(1, int((until - since + step - 1e-9) // step))
    series: dict[str, list[float]] = {}
    for row in rows:
        start = max(row.started, since)
        end = min(row.ended if row.ended is not None else until, until)
        if end <= start:
            continue
        values = series.setdefault(str(getattr(row, column)), [0.0] * count)
        first, last = int((start - since) // step), min(int((end - since) // step), count - 1)
        for index in range(first, last + 1):
            low, high = since + index * step, min(since + (index + 1) * step, until)
            values[index] += row.gpus * max(min(end, high) - max(start, low), 0.0) / 3600
    return series
