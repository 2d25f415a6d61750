"""Shared fixtures: one embedded PostgreSQL per test session, a fresh database, a real server on
127.0.0.1 (uvicorn in a thread), REST through httpx. Helpers live in `tests/support/`."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from playwright.async_api import Browser

from app.core.pgembedded import start_embedded
from tests.support.browser import launched
from tests.support.instrumentation import ops as test_ops
from tests.support.pgbouncer import PgBouncer
from tests.support.server import ADMIN_KEY, PgCluster, RunningServer, server_settings, start_server, stop_server

KEEP_TABLES = {"alembic_version", "embedding_models"}
os.environ.setdefault("CAIRN_LOG_LEVEL", "WARNING")


@pytest.fixture(scope="session")
def pg() -> Iterator[PgCluster]:
    """One embedded PostgreSQL for the whole run, with a fresh database."""
    root = Path(tempfile.mkdtemp(prefix="cairn-pg-"))
    handle = start_embedded(root)
    name = f"cairn_t_{uuid.uuid4().hex[:10]}"
    handle.ensure_database(name)
    try:
        yield PgCluster(handle=handle, database=name)
    finally:
        handle.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def server(pg: PgCluster) -> Iterator[RunningServer]:
    """The main test server (all features, static test keys, plus the test instrumentation ops).

    With `CAIRN_TEST_POOLER=pgbouncer` its database URL goes through a real PgBouncer in transaction
    mode (`CAIRN_DATABASE_POOLER=transaction`, migrations on the direct URL), so the whole suite's
    calls run through the pooler."""
    bouncer = PgBouncer.start(pg, pool_size=8) if os.environ.get("CAIRN_TEST_POOLER") == "pgbouncer" else None
    if bouncer is None:
        settings = server_settings(pg.url)
    else:
        settings = server_settings(bouncer.url(), database_pooler="transaction", database_direct_url=pg.url)
    srv, thread, app = start_server(settings, extra=[test_ops])
    try:
        yield RunningServer(url=f"http://127.0.0.1:{settings.port}", settings=settings, app=app)
    finally:
        stop_server(srv, thread)
        if bouncer is not None:
            bouncer.stop()


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """One headless Chromium for the whole run (each test opens its own context: its own cookies)."""
    async with launched() as chromium:
        yield chromium


@pytest.fixture(autouse=True)
async def _clean_tables(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Isolation: every table except bookkeeping is emptied after each test that used the server."""
    yield
    if "server" not in request.fixturenames:
        return
    cluster: PgCluster = request.getfixturevalue("pg")
    dsn = cluster.handle.libpq_uri(cluster.database)
    conn = await asyncpg.connect(dsn)
    try:
        tables = [
            r["tablename"] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        tables = [t for t in tables if t not in KEEP_TABLES]
        for attempt in range(5):
            if not tables:
                break
            try:
                await conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")
                break
            except asyncpg.DeadlockDetectedError:
                # The server's queue workers may still be storing vectors: PostgreSQL chose this
                # statement to break the lock cycle, so it runs again once they are done.
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await conn.close()


@pytest.fixture
async def rest(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the REST API with the admin key."""
    async with httpx.AsyncClient(
        base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    ) as client:
        yield client
