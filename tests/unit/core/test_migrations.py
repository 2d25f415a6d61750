"""app/core/migrations.py on the session's embedded PostgreSQL: feature-tagged branches that upgrade and
downgrade alone, "at head" as Alembic records it, the models matching the migrations, and no GIN
index with a pending list."""

from __future__ import annotations

from typing import Any

import asyncpg

from app.core import migrations
from app.features import FEATURES
from tests.support.server import PgCluster

FEATURE_TABLE_PREFIXES = {"memory": "memor", "graph": "graph_", "analysis": "analysis_", "datasets": "dataset"}


async def _tables(pg: PgCluster, database: str) -> set[str]:
    conn = await asyncpg.connect(pg.handle.libpq_uri(database))
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


def test_every_feature_with_migrations_has_its_branch_and_the_core_comes_first() -> None:
    assert migrations.version_locations()[0] == migrations.ENV_DIR / "versions"
    assert all(p.name == "migrations" for p in migrations.version_locations()[1:])
    assert migrations.feature_branches() == sorted(FEATURE_TABLE_PREFIXES)
    assert migrations.branches(["graph", "no-such-feature", "memory"]) == ["core", "graph", "memory"]
    assert migrations.branches([]) == ["core"]
    core_only = migrations.expected_heads([])
    assert len(core_only) == 1 and core_only < migrations.expected_heads(["memory"])


async def test_an_empty_database_is_not_at_head(pg: PgCluster) -> None:
    db = pg.new_database()
    url = pg.handle.url(db)
    assert await migrations.current_heads(url) == set()
    assert not await migrations.at_head(url, [])
    await migrations.upgrade_async(url, [])
    assert await migrations.at_head(url, [])
    assert not await migrations.at_head(url, ["graph"])  # graph's branch is not applied
    tables = await _tables(pg, db)
    assert {"projects", "api_keys"} <= tables
    assert not any(t.startswith(tuple(FEATURE_TABLE_PREFIXES.values())) for t in tables)


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


async def test_models_match_the_migrations(pg: PgCluster) -> None:
    """The ORM models are the schema: after upgrading every branch, Alembic's comparison of the
    database with `Base.metadata` (every model of every feature) finds no difference."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.ext.asyncio import create_async_engine

    from app.core.db import Base

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
