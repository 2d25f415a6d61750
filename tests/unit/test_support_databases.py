"""tests/support/databases.py: a database cloned from the session's migrated template is the same as
one migrated from scratch (schema, extensions and their versions, alembic_version, seeded rows), each clone is its own
database, and one template serves each feature set however it is spelt or however many ask at once."""

from __future__ import annotations

import asyncio
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text

from app.core import migrations
from tests.support.databases import migrated_database, migrated_url
from tests.support.server import PgCluster

ALL = ["memory", "graph", "analysis", "datasets"]


def _name(url: str) -> str:
    found = re.search(r"/([^/?]+)\?", url)
    assert found is not None, url
    return found.group(1)


def _dump(pg: PgCluster, database: str, *args: str) -> str:
    """pg_dump's text of `database`, less the per-run `\\restrict` keys PostgreSQL 18 writes."""
    out = subprocess.run(
        [str(pg.handle.bin("pg_dump")), "--no-owner", *args, pg.handle.libpq_uri(database)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return "\n".join(line for line in out.splitlines() if not line.startswith(("\\restrict", "\\unrestrict")))


def test_a_clone_is_what_migrating_from_scratch_makes(pg: PgCluster) -> None:
    scratch = pg.new_database()
    migrations.upgrade(pg.handle.url(scratch), ALL)
    clone = _name(migrated_url(pg, ALL))
    extensions = "SELECT extname || ' ' || extversion FROM pg_extension ORDER BY 1"
    made = pg.handle.psql(scratch, extensions)
    assert "vector " in made and "pg_trgm " in made and pg.handle.psql(clone, extensions) == made
    schema = _dump(pg, scratch, "--schema-only")
    assert _dump(pg, clone, "--schema-only") == schema
    data = _dump(pg, scratch, "--data-only")
    assert "alembic_version" in data and "embedding_models" in data
    # alembic_version and every row a migration seeds; a table's rows in any order (the template's
    # branches were upgraded in the sorted order of their names)
    assert _rows(_dump(pg, clone, "--data-only")) == _rows(data)


def _rows(dump: str) -> list[str]:
    """The dump's lines in order, each revision's record in the revision log without the time it was
    applied (which differs between two migrations by construction)."""
    stamp = re.compile(r"\t\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\+00$")
    return sorted(stamp.sub("\t<applied>", line) for line in dump.splitlines())


def test_each_clone_is_a_database_of_its_own_at_head(pg: PgCluster) -> None:
    async def check() -> None:
        async with migrated_database(pg, ["graph"]) as first, migrated_database(pg, ["graph"]) as second:
            assert first.url != second.url
            async with first.transaction() as session:
                await session.execute(text("INSERT INTO projects (id, name) VALUES (gen_random_uuid(), 'only-here')"))
            for db, expected in ((first, 1), (second, 0)):
                async with db.transaction() as session:
                    found = await session.scalar(text("SELECT count(*) FROM projects WHERE name = 'only-here'"))
                assert found == expected
            assert await migrations.at_head(first.url, ["graph"])

    asyncio.run(check())


def test_one_template_serves_a_feature_set_however_many_ask_at_once(pg: PgCluster) -> None:
    def templates() -> list[str]:
        out = pg.handle.psql("postgres", "SELECT datname FROM pg_database WHERE datistemplate AND NOT datallowconn")
        return sorted(n for n in out.split() if n.startswith("cairn_tmpl_graph_memory_"))

    before = templates()
    with ThreadPoolExecutor(4) as pool:
        urls = list(pool.map(lambda f: migrated_url(pg, f), [["memory", "graph"], ["graph", "memory"]] * 2))
    assert len(set(urls)) == 4
    made = templates()
    assert len(made) == 1 and (before == [] or before == made)  # one template, also for the spelling in reverse
    assert all(asyncio.run(migrations.at_head(url, ["graph", "memory"])) for url in urls)
