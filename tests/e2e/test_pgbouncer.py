"""A server whose database URL goes through a real PgBouncer in transaction mode (three server
connections shared by every client connection), with `CAIRN_DATABASE_POOLER=transaction` and the
migrations on the direct URL: every family works over REST and MCP, concurrent calls included."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.core.db import Database, sqlstate
from tests.support.graph import PEOPLE, call
from tests.support.pgbouncer import PgBouncer
from tests.support.server import (
    ADMIN_KEY,
    PgCluster,
    RunningServer,
    mcp_client,
    server_settings,
    start_server,
    stop_server,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow  # a PgBouncer process and a server of their own


@pytest.fixture(scope="module")
def bouncer(pg: PgCluster) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode, three server connections, on a database of its own."""
    cluster = PgCluster(handle=pg.handle, database=pg.new_database())
    pooler = PgBouncer.start(cluster, pool_size=3)
    try:
        yield pooler
    finally:
        pooler.stop()


@pytest.fixture(scope="module")
def pooled(pg: PgCluster, bouncer: PgBouncer) -> Iterator[RunningServer]:
    """A server on the pooled URL: a client pool larger than PgBouncer's server pool, so statements of
    different client connections share server connections."""
    settings = server_settings(
        bouncer.url(),
        database_pooler="transaction",
        database_direct_url=pg.handle.url(bouncer.database),
        db_pool_size=6,
        db_max_overflow=4,
        embedding_write_mode="async",
        key_usage_flush_seconds=0.3,
    )
    srv, thread, app = start_server(settings)
    try:
        yield RunningServer(url=f"http://127.0.0.1:{settings.port}", settings=settings, app=app)
    finally:
        stop_server(srv, thread)


@pytest.fixture
async def prest(pooled: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    """REST with the admin key on the pooled server."""
    async with httpx.AsyncClient(
        base_url=pooled.url, timeout=60, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    ) as client:
        yield client


async def _ok(rest: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await rest.post(f"/api/v1{path}", json=body)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


async def test_every_family_works_through_pgbouncer_in_transaction_mode(
    pooled: RunningServer, prest: httpx.AsyncClient, bouncer: PgBouncer
) -> None:
    # memory: writes queue their vectors (the queue's workers run through the pooler too), search finds them
    for note in ("The harbour crane lifts containers", "Octopuses have three hearts", "Cranes also fly south"):
        await _ok(prest, "/memory/push", {"text": note, "project": "pool", "wait_for_embedding": True})
    found = await _ok(prest, "/memory/search", {"query_text": "harbour crane", "project": "pool"})
    assert found["results"] and "The harbour crane lifts containers" in str(found), found
    # graph over MCP
    async with mcp_client(pooled.url) as mcp:
        await call(mcp, "create_entities", {"entities": PEOPLE})
        nodes = await call(mcp, "search_nodes", {"query": "Lovelace"})
        assert "Ada Lovelace" in str(nodes)
    # analysis: findings with their vectors, then a semantic query
    stored = await _ok(
        prest,
        "/analysis/store",
        {"analysis_id": "pooled", "findings": [{"finding": "Latency doubled after the pooler change"}]},
    )
    assert stored["stored"] == 1
    queried = await _ok(
        prest, "/analysis/query", {"analysis_id": "pooled", "mode": "semantic", "query": "latency", "threshold": 0.1}
    )
    assert "Latency doubled" in str(queried), queried
    # datasets: upload, then a query over MCP
    up = await prest.post(
        "/api/v1/datasets/upload",
        data={"name": "weather"},
        files={"file": ("weather.csv", io.BytesIO(b"city,temp\nOslo,3\nLima,19\n"), "text/csv")},
    )
    assert up.status_code == 200, up.text
    async with mcp_client(pooled.url) as mcp:
        res = await mcp.call_tool(
            "execute_query",
            {"query_type": "sql", "files": ["weather"], "query": "SELECT city FROM weather WHERE temp > 10"},
        )
        assert not res.is_error, res.content
        assert res.structured_content["data"] == [{"city": "Lima"}]
    # a stored key: created, then looked up on every call through the pooler
    made = await _ok(prest, "/keys", {"name": "pooled", "scopes": ["read", "write"]})
    async with httpx.AsyncClient(
        base_url=pooled.url, timeout=60, headers={"Authorization": f"Bearer {made['token']}"}
    ) as keyed:
        # concurrent calls of every kind, more at once than PgBouncer has server connections
        calls = [keyed.get("/api/v1/projects") for _ in range(10)]
        calls += [
            keyed.post("/api/v1/memory/search", json={"query_text": f"crane {i}", "project": "pool"}) for i in range(10)
        ]
        calls += [keyed.post("/api/v1/memory/push", json={"text": f"note {i}", "project": "pool"}) for i in range(10)]
        answers = await asyncio.gather(*calls)
    assert [r.status_code for r in answers] == [200] * len(answers), [r.text for r in answers if r.status_code != 200]

    async def last_used() -> str | None:
        keys = (await prest.get("/api/v1/keys")).json()["keys"]
        found: str | None = next(k["last_used_at"] for k in keys if k["name"] == "pooled")
        return found

    assert await eventually(last_used, timeout=30)  # written in the background, through the pooler
    health = (await prest.get("/readyz")).json()
    assert health["status"] == "ready", health
    # the server's pool opened more connections than PgBouncer has server connections: they shared them
    pool = pooled.app.state.cairn.db.engine.pool
    assert pool.checkedin() + pool.checkedout() > 3
    direct = await asyncpg.connect(pg_direct(pooled))
    try:
        servers = await direct.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", bouncer.database
        )
    finally:
        await direct.close()
    assert servers <= 3


def pg_direct(server: RunningServer) -> str:
    """The libpq URI of the server's direct (unpooled) database URL."""
    url = server.settings.database_direct_url
    assert url is not None
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def test_statement_timeout_holds_in_every_transaction_behind_the_pooler(
    pooled: RunningServer, bouncer: PgBouncer
) -> None:
    db = Database(bouncer.url(), pooled.settings.model_copy(update={"db_statement_timeout_ms": 300}))
    try:
        for _ in range(4):  # new transactions, on whichever server connection PgBouncer gives
            async with db.transaction() as session:
                assert await session.scalar(text("SHOW statement_timeout")) == "300ms"
        with pytest.raises(DBAPIError) as caught:
            async with db.transaction() as session:
                await session.execute(text("SELECT pg_sleep(3)"))
        assert sqlstate(caught.value) == "57014"  # canceled by the statement timeout
    finally:
        await db.dispose()
