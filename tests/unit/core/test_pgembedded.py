"""app/core/pgembedded.py: the URLs of a running embedded cluster (the session's), creating a database
once, the bundled tools, and forgetting processes that left the cluster without saying so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg

from app.core.pgembedded import USERS_FILE, bin_path, forget_dead_users
from tests.support.server import PgCluster


async def test_the_urls_reach_the_cluster_over_its_socket(pg: PgCluster) -> None:
    handle = pg.handle
    url = handle.url(pg.database)
    assert url == f"postgresql+asyncpg://postgres@/{pg.database}?host={handle.socket_dir}&port={handle.port}"
    assert handle.libpq_uri(pg.database) == url.replace("+asyncpg", "")
    conn = await asyncpg.connect(handle.libpq_uri(pg.database))
    try:
        assert await conn.fetchval("SELECT current_database()") == pg.database
    finally:
        await conn.close()


def test_ensure_database_creates_it_once(pg: PgCluster) -> None:
    name = f"cairn_t_{uuid.uuid4().hex[:10]}"
    listed = f"SELECT count(*) FROM pg_database WHERE datname = '{name}'"
    assert pg.handle.psql("postgres", listed).strip() == "0"
    pg.handle.ensure_database(name)
    pg.handle.ensure_database(name)  # already there: nothing to do, no error
    assert pg.handle.psql("postgres", listed).strip() == "1"
    assert pg.handle.psql(name, "SELECT 40 + 2").strip() == "42"


def test_the_bundled_tools_are_there() -> None:
    for tool in ("psql", "pg_dump", "pg_restore"):
        path = bin_path(tool)
        assert path.is_file() and os.access(path, os.X_OK), path


def test_dead_users_are_forgotten_and_live_ones_kept(tmp_path: Path) -> None:
    assert forget_dead_users(tmp_path) == []  # no list yet
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(ended.stdout)  # exited and reaped: no such process now
    users = tmp_path / USERS_FILE
    users.write_text(json.dumps([os.getpid(), dead]))
    assert forget_dead_users(tmp_path) == [dead]
    assert json.loads(users.read_text()) == [os.getpid()]
    assert forget_dead_users(tmp_path) == []  # nothing left to forget
