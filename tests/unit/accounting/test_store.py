"""The accounting database (accounting/store.py) on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import dataclasses
import io
import json
import re

import pytest

from ai_scheduler.accounting import AccountingError, PodUsage, open_store, usage
from ai_scheduler.accounting.command import run
from ai_scheduler.cli import _parser

T0 = 1_800_000_000.0
HOUR = 3600.0


def row(uid: str, user: str, started: float, ended: float | None, gpus: float = 1.0,
        **fields: object) -> PodUsage:
    base = PodUsage(uid=uid, namespace=f"ns-{user}", pod=uid, user_name=user, group_name="vision",
                    queue="default", task="", node="n1", gpu_model="H100", gpus=gpus, cpu_cores=2.0,
                    memory_bytes=4 * 2**30, started=started, ended=ended)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_rows_are_upserts_and_an_end_once_known_stays(database: str) -> None:
    store = open_store(database)
    try:
        assert store.upsert([row("p1", "alice", T0, None), row("p2", "bob", T0, T0 + HOUR)]) == 2
        store.upsert([row("p1", "alice", T0, None)])  # again: nothing changes
        assert [r.uid for r in store.running()] == ["p1"]
        store.upsert([row("p1", "alice", T0, T0 + 2 * HOUR, node="n2")])
        store.upsert([row("p1", "alice", T0, None)])  # a stale picture of it, written by a new leader
        [p1] = [r for r in store.rows(T0, T0 + 3 * HOUR) if r.uid == "p1"]
        assert (p1.ended, p1.node) == (T0 + 2 * HOUR, "n1")
        assert store.running() == []
    finally:
        store.close()


def test_use_over_a_period_cuts_each_lifetime_to_it(database: str) -> None:
    store = open_store(database)
    try:
        store.upsert([row("a1", "alice", T0, T0 + 2 * HOUR, gpus=4),  # 1 h of it in the period
                      row("a2", "alice", T0 + 3 * HOUR, None, gpus=0.5),  # running: counts to the end
                      row("b1", "bob", T0 + HOUR, T0 + 1.5 * HOUR, gpus=2),
                      row("old", "carol", T0 - 5 * HOUR, T0 - HOUR)])  # before the period
        since, until = T0 + HOUR, T0 + 4 * HOUR
        rows = store.rows(since, until)
        assert sorted(r.uid for r in rows) == ["a1", "a2", "b1"]
        by_user = {u.key: u for u in usage(rows, since, until, "user")}
        assert by_user["alice"].gpu_hours == pytest.approx(4 * 1 + 0.5 * 1)
        assert by_user["bob"].gpu_hours == pytest.approx(2 * 0.5)
        assert by_user["alice"].cpu_hours == pytest.approx(2 * 2) and by_user["alice"].pods == 2
        assert by_user["alice"].memory_gib_hours == pytest.approx(4 * 2)
        assert [u.key for u in usage(rows, since, until, "gpu_model")] == ["H100"]
    finally:
        store.close()


def test_fair_share_usage_is_kept_with_when_it_was_taken(database: str) -> None:
    store = open_store(database)
    try:
        assert store.load_fair_share() == ({}, None)
        store.save_fair_share({("group", "vision"): 7200.0, ("queue", "prod"): 10.5}, T0)
        store.save_fair_share({("group", "vision"): 3600.0}, T0 + 60)
        assert store.load_fair_share() == ({("group", "vision"): 3600.0}, T0 + 60)
    finally:
        store.close()


def test_the_usage_command_reports_from_the_database(database: str) -> None:
    store = open_store(database)
    try:
        store.upsert([row("a1", "alice", T0, T0 + 2 * HOUR, gpus=4), row("b1", "bob", T0, T0 + HOUR)])
    finally:
        store.close()
    out, err = io.StringIO(), io.StringIO()
    window = _parser().parse_args(["usage", "--database", database, "--since", "2027-01-15T08:00:00Z",
                                   "--until", "2027-01-15T10:00:00Z", "-o", "json"])
    assert run(window, out, err) == 0, err.getvalue()
    body = json.loads(out.getvalue())
    assert body["items"] == [
        {"key": "alice", "gpuHours": 8.0, "cpuHours": 4.0, "memoryGiBHours": 8.0, "pods": 1},
        {"key": "bob", "gpuHours": 1.0, "cpuHours": 2.0, "memoryGiBHours": 4.0, "pods": 1},
    ]
    table = io.StringIO()
    window.output = "table"
    assert run(window, table, err) == 0
    assert table.getvalue().splitlines()[1].split() == ["USER", "GPU-HOURS", "CPU-HOURS", "MEMORY-GIB-HOURS",
                                                         "PODS"]


def test_a_database_that_cannot_be_opened_says_why() -> None:
    with pytest.raises(AccountingError, match=re.escape("must be sqlite:///PATH or postgresql://")):
        open_store("mysql://x")
    with pytest.raises(AccountingError, match=re.escape("cannot connect to postgresql://nobody@127.0.0.1:1/x")):
        open_store("postgresql://nobody:secret@127.0.0.1:1/x")
