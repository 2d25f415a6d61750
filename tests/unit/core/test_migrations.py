"""app/core/migrations.py on the session's embedded PostgreSQL: feature-tagged branches that upgrade and
downgrade alone, "at head" as Alembic records it, the models matching the migrations, no GIN index
with a pending list, and rolling deploys: every revision says whether older code may run on it, each
upgrade records that, and a build runs on a newer build's schema only when every newer revision
allows it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app import __version__
from app.core import migrations
from app.features import FEATURES
from tests.support.server import PgCluster

ROOT = Path(__file__).resolve().parents[3]
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


async def test_no_gin_index_keeps_more_than_a_small_pending_list(pg: PgCluster) -> None:
    """Every GIN index is written through (`fastupdate = off`, memory_0005 / graph_0002): with a pending
    list, every search of the index reads the entries others wrote since the last merge, and one key's
    large pushes slowed another project's lexical search (docs/benchmarks.md, hostile load). The graph
    entities' two indexes keep a list bounded at 256 kB (graph_0005), which bulk entity writes merge in
    sorted passes; nothing else keeps one, and no list may reach PostgreSQL's 4 MB default."""
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
    listed = {name for name, opts in options.items() if "fastupdate=off" not in opts}
    assert listed == {"ix_graph_entities_tsv", "ix_graph_entities_trgm"}
    for name in listed:
        assert "fastupdate=on" in options[name] and "gin_pending_list_limit=256" in options[name], options[name]


async def test_cairn_text_ignores_accents_and_english_and_spanish_function_words(pg: PgCluster) -> None:
    """core_0008: the `cairn_text` configuration gives accented and unaccented words the same lexemes
    and keeps no function word of either language."""
    db = pg.new_database()
    await migrations.upgrade_async(pg.handle.url(db), [])
    [[accented], [plain], [function_words], [english]] = await _execute(
        pg,
        db,
        "SELECT to_tsvector('cairn_text', 'Migración del catálogo de la tienda')::text AS v",
        "SELECT to_tsvector('cairn_text', 'migracion catalogo tienda')::text AS v",
        "SELECT to_tsvector('cairn_text', 'with the de la los y en of and')::text AS v",
        "SELECT to_tsvector('english', 'Migración del catálogo')::text AS v",
    )
    assert _lexemes(accented["v"]) == _lexemes(plain["v"]) == {"migracion", "catalogo", "tienda"}
    assert function_words["v"] == ""
    assert _lexemes(english["v"]) != {"migracion", "catalogo"}  # the english configuration keeps accents


def _lexemes(tsvector: str) -> set[str]:
    return {part.split(":")[0].strip("'") for part in tsvector.split()}


def test_every_revision_declares_whether_older_code_may_run() -> None:
    undeclared = [
        rev.revision
        for rev in migrations.script_directory().walk_revisions()
        if not isinstance(getattr(rev.module, "older_code_may_run", None), bool)
    ]
    assert undeclared == []


async def _execute(pg: PgCluster, database: str, *statements: str) -> list[Any]:
    conn = await asyncpg.connect(pg.handle.libpq_uri(database))
    try:
        return [await conn.fetch(sql) for sql in statements]
    finally:
        await conn.close()


async def _newer_build(pg: PgCluster, database: str, *, safe: bool | None) -> None:
    """What a newer build leaves behind: memory_9999 on top of memory_0005 (recorded unless `safe` is
    None), a revision this build does not have."""
    record = (
        []
        if safe is None
        else [
            "INSERT INTO schema_revisions (revision, down_revisions, older_code_may_run, build) "
            f"VALUES ('memory_9999', ARRAY['memory_0005'], {str(safe).lower()}, '9.9.9')"
        ]
    )
    await _execute(
        pg,
        database,
        *record,
        "UPDATE alembic_version SET version_num = 'memory_9999' WHERE version_num = 'memory_0005'",
    )


async def test_each_upgrade_records_the_applied_revisions_with_their_flags(pg: PgCluster) -> None:
    db = pg.new_database()
    url = pg.handle.url(db)
    await migrations.upgrade_async(url, ["memory", "datasets"])
    [rows] = await _execute(pg, db, "SELECT * FROM schema_revisions")
    recorded = {r["revision"]: r for r in rows}
    assert {"core_0001", "core_0007", "memory_0005", "datasets_0002"} <= set(recorded)
    assert not any(r.startswith("graph") for r in recorded)  # a disabled branch is not applied
    assert (
        recorded["memory_0004"]["down_revisions"] == ["memory_0003"] and recorded["core_0001"]["down_revisions"] == []
    )
    assert recorded["memory_0004"]["older_code_may_run"] and not recorded["memory_0003"]["older_code_may_run"]
    assert {r["build"] for r in rows} == {__version__}
    await migrations.upgrade_async(url, ["memory", "datasets", "graph"])
    [again] = await _execute(pg, db, "SELECT revision FROM schema_revisions")
    assert {r["revision"] for r in again} == set(recorded) | {
        "graph_0001",
        "graph_0002",
        "graph_0003_lexical",
        "graph_0004_english_status",
        "graph_0005_gin_bounded_list",
        "graph_0006_lexical_side",
    }


async def test_a_build_runs_on_a_newer_schema_when_every_newer_revision_allows_it(pg: PgCluster) -> None:
    db = pg.new_database()
    url = pg.handle.url(db)
    await migrations.upgrade_async(url, ["memory"])
    await _newer_build(pg, db, safe=True)
    assert await migrations.at_head(url, ["memory"])  # /readyz stays ready
    assert not await migrations.at_head(url, ["memory", "graph"])  # graph's branch is still missing here
    await migrations.upgrade_async(url, ["memory"])  # a restart: no migration, no error
    [heads] = await _execute(pg, db, "SELECT version_num FROM alembic_version")
    assert "memory_9999" in {r["version_num"] for r in heads}


async def test_a_build_refuses_a_newer_schema_older_code_may_not_run_on(pg: PgCluster) -> None:
    db = pg.new_database()
    url = pg.handle.url(db)
    await migrations.upgrade_async(url, ["memory"])
    await _newer_build(pg, db, safe=False)
    assert not await migrations.at_head(url, ["memory"])
    message = (
        f"the database schema is at memory_9999 (written by build 9.9.9); this build ({__version__}) "
        "cannot run on it: deploy build 9.9.9 or newer"
    )
    with pytest.raises(migrations.SchemaTooNew) as refused:
        await migrations.upgrade_async(url, ["memory"])
    assert str(refused.value) == message


async def test_a_build_refuses_a_newer_revision_nobody_recorded(pg: PgCluster) -> None:
    db = pg.new_database()
    url = pg.handle.url(db)
    await migrations.upgrade_async(url, ["memory"])
    await _newer_build(pg, db, safe=None)
    with pytest.raises(migrations.SchemaTooNew, match=r"memory_9999, which this build .* does not have"):
        await migrations.upgrade_async(url, ["memory"])
    assert not await migrations.at_head(url, ["memory"])


def test_hosts_starting_together_migrate_one_at_a_time(pg: PgCluster) -> None:
    """Separate processes, as hosts are (Alembic's `context` is one per process)."""
    db = pg.new_database()
    url = pg.handle.url(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    env |= {"CAIRN_DATABASE_URL": url, "CAIRN_FEATURES": "memory,graph", "CAIRN_LOG_LEVEL": "WARNING"}
    procs = [
        subprocess.Popen([sys.executable, "-m", "app", "migrate"], env=env, cwd=ROOT, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    errors = [proc.communicate(timeout=180)[1].decode() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], errors
    assert asyncio.run(migrations.at_head(url, ["memory", "graph"]))
    [rows] = asyncio.run(_execute(pg, db, "SELECT revision FROM schema_revisions"))
    revisions = [r["revision"] for r in rows]
    assert len(revisions) == len(set(revisions)) and {"graph_0002", "memory_0005"} <= set(revisions)


async def test_graph_statuses_move_to_english_and_back(pg: PgCluster) -> None:
    """graph_0004_english_status renames the seed's Spanish statuses (others are kept), and back."""
    from alembic import command

    db = pg.new_database()
    url = pg.handle.url(db)
    await migrations.upgrade_async(url, ["graph"])
    command.downgrade(migrations.alembic_config(url), "graph_0003_lexical")
    conn = await asyncpg.connect(pg.handle.libpq_uri(db))
    try:
        pid = await conn.fetchval("INSERT INTO projects (id, name) VALUES (gen_random_uuid(), 'p') RETURNING id")
        for name, status in (("a", "activo"), ("b", "archivado"), ("c", "draft")):
            await conn.execute(
                "INSERT INTO graph_entities (project_id, name, entity_type, status) VALUES ($1, $2, 't', $3)",
                pid,
                name,
                status,
            )
        await migrations.upgrade_async(url, ["graph"])
        rows = await conn.fetch("SELECT name, status FROM graph_entities ORDER BY name")
        assert [(r["name"], r["status"]) for r in rows] == [("a", "active"), ("b", "archived"), ("c", "draft")]
        await conn.execute("INSERT INTO graph_entities (project_id, name, entity_type) VALUES ($1, 'd', 't')", pid)
        assert await conn.fetchval("SELECT status FROM graph_entities WHERE name = 'd'") == "active"
        command.downgrade(migrations.alembic_config(url), "graph_0003_lexical")
        rows = await conn.fetch("SELECT status FROM graph_entities ORDER BY name")
        assert [r["status"] for r in rows] == ["activo", "archivado", "draft", "activo"]
    finally:
        await conn.close()
