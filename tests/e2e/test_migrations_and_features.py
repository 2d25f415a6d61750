"""Feature-tagged migrations on a real database, and disabled features staying invisible."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx

from app.core import migrations
from tests.support.server import ADMIN_KEY, PgCluster, mcp_client, server_settings, start_server, stop_server

FEATURE_TABLE_PREFIXES = {"memory": "memor", "graph": "graph_", "analysis": "analysis_", "datasets": "dataset"}


async def _tables(pg: PgCluster, database: str) -> set[str]:
    conn = await asyncpg.connect(pg.handle.libpq_uri(database))
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


async def test_every_branch_upgrades_and_downgrades(pg: PgCluster) -> None:
    db = pg.new_database()
    url = pg.handle.url(db)
    all_features = ["memory", "graph", "analysis", "datasets"]
    await migrations.upgrade_async(url, all_features)
    tables = await _tables(pg, db)
    assert {"projects", "api_keys", "embedding_models", "alembic_version"} <= tables
    assert await migrations.at_head(url, all_features)
    branches = migrations.branches(all_features)
    assert branches[0] == "core"
    for branch in reversed(branches[1:]):
        before = await _tables(pg, db)
        migrations.downgrade_branch(url, branch)
        after = await _tables(pg, db)
        prefix = FEATURE_TABLE_PREFIXES[branch]
        assert any(t.startswith(prefix) for t in before), (branch, before)
        assert not any(t.startswith(prefix) for t in after), (branch, after)
        assert "projects" in after
    migrations.downgrade_branch(url, "core")
    assert await _tables(pg, db) <= {"alembic_version"}
    await migrations.upgrade_async(url, all_features)
    assert await migrations.at_head(url, all_features)


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


async def test_models_match_the_migrations(pg: PgCluster) -> None:
    """The ORM models are the schema: after upgrading every branch, Alembic's comparison of the
    database with `Base.metadata` (every model of every feature) finds no difference."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.ext.asyncio import create_async_engine

    from app.core.db import Base
    from app.features import FEATURES

    db = pg.new_database()
    url = pg.handle.url(db)
    await migrations.upgrade_async(url, [f.name for f in FEATURES])
    modelled = set(Base.metadata.tables)

    def include(obj: Any, name: str | None, kind: str, reflected: bool, compare_to: Any) -> bool:
        # A table with no model is declared by its migration alone; everything on a modelled table is compared.
        if kind == "table":
            return name in modelled
        table = getattr(obj, "table", None)
        return table is None or table.name in modelled

    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            diffs = await conn.run_sync(
                lambda c: compare_metadata(
                    MigrationContext.configure(c, opts={"include_object": include, "compare_type": True}),
                    Base.metadata,
                )
            )
    finally:
        await engine.dispose()
    assert diffs == [], "\n".join(str(d) for d in diffs)


async def test_no_gin_index_keeps_a_pending_list(pg: PgCluster) -> None:
    """Every GIN index is written through (`fastupdate = off`, memory_0005 / graph_0002): with a pending
    list, every search of the index reads the entries others wrote since the last merge, and one key's
    large pushes slowed another project's lexical search (docs/benchmarks.md, hostile load)."""
    db = pg.new_database()
    await migrations.upgrade_async(pg.handle.url(db), ["memory", "graph", "analysis", "datasets"])
    conn = await asyncpg.connect(pg.handle.libpq_uri(db))
    try:
        rows = await conn.fetch(
            "SELECT c.relname, coalesce(c.reloptions, '{}') AS options FROM pg_class c "
            "JOIN pg_am am ON am.oid = c.relam WHERE am.amname = 'gin' AND c.relkind = 'i'"
        )
    finally:
        await conn.close()
    options = {r["relname"]: r["options"] for r in rows}
    assert {"ix_memories_tsv", "ix_memories_tags", "ix_graph_entities_tsv", "ix_graph_reflections_tsv"} <= set(options)
    assert {name for name, opts in options.items() if "fastupdate=off" not in opts} == set()
