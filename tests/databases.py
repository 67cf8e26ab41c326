"""The accounting databases the tests use: a SQLite file, and a real PostgreSQL server.

PostgreSQL is Debian's package (`postgresql`: initdb and pg_ctl under /usr/lib/postgresql/<version>/bin),
started once per session on loopback (a port of its own, its socket in its data folder, trust
authentication for the local test user), each test given a database of its own. As root (CI's
containers), the server runs as the `postgres` user, as PostgreSQL refuses root. Where the package is
missing the PostgreSQL cases are skipped with the reason, unless AI_SCHEDULER_REQUIRE_POSTGRES is set
(CI sets it, and installs the package), in which case they fail.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_names = itertools.count()


def _binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="ai-scheduler-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *argv] if self.as_root else list(argv)
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr or done.stdout}")

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        import psycopg

        name = f"test_{os.getpid()}_{next(_names)}"
        with psycopg.connect(self.dsn(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | str]:
    """The session's PostgreSQL, or why there is none."""
    bin_dir = _binaries()
    if bin_dir is None:
        yield "PostgreSQL is not installed (Debian's postgresql package: initdb, pg_ctl)"
        return
    server = PostgresServer(bin_dir)
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        yield f"PostgreSQL did not start: {exc}"
        return
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh accounting database's DSN: a SQLite file, or a database of the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'accounting.db'}"
    server: PostgresServer | str = request.getfixturevalue("postgres_server")
    if isinstance(server, str):
        if os.environ.get("AI_SCHEDULER_REQUIRE_POSTGRES"):
            pytest.fail(server, pytrace=False)
        pytest.skip(server)
    return server.new_database()
