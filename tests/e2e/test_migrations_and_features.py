"""Disabled features stay invisible: no tables, no operations on either transport. (The migrations' own
tests are in tests/unit/core/test_migrations.py.)"""

from __future__ import annotations

import asyncpg
import httpx

from tests.support.server import ADMIN_KEY, PgCluster, mcp_client, server_settings, start_server, stop_server

FEATURE_TABLE_PREFIXES = {"memory": "memor", "graph": "graph_", "analysis": "analysis_", "datasets": "dataset"}


async def _tables(pg: PgCluster, database: str) -> set[str]:
    conn = await asyncpg.connect(pg.handle.libpq_uri(database))
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


async def test_disabled_features_create_no_tables_and_expose_no_operations(pg: PgCluster) -> None:
    db = pg.new_database()
    settings = server_settings(pg.handle.url(db), features=[])
    srv, thread, _ = start_server(settings)
    try:
        tables = await _tables(pg, db)
        for prefix in FEATURE_TABLE_PREFIXES.values():
            assert not any(t.startswith(prefix) for t in tables), tables
        base = f"http://127.0.0.1:{settings.port}"
        async with mcp_client(base) as mcp:
            names = {t.name for t in (await mcp.list_tools()).tools}
        assert names == {"create_project", "list_projects", "embed", "audit_log", "wait_for_embeddings"}
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
            doc = (await c.get("/openapi.json")).json()
        ops = {e.get("operationId") for item in doc["paths"].values() for e in item.values()}
        assert ops == {
            "create_project",
            "list_projects",
            "embed",
            "audit_log",
            "wait_for_embeddings",
            "list_keys",
            "create_key",
            "revoke_key",
            "read_health",
            "read_settings",
            "read_toolsets",
        }
    finally:
        stop_server(srv, thread)
