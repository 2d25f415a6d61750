"""The graph entities' lexical index in its side table (graph_0006, `LexicalIndex.side`,
`app.core.embeddings.lexical_mover`) on a real database: a write lists the entity as pending instead of
inserting into the HNSW graph; search finds a pending entity at once, scored from its current text,
before and after the mover copies it; a change made while its batch is copied leaves it listed; one
host copies at a time; and the running server's mover empties the list by itself."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from app.core import migrations
from app.core.config import Settings
from app.core.db import Database
from app.core.embeddings import lexical
from app.core.embeddings.lexical_mover import LexicalMover
from app.core.embeddings.load import Load
from app.core.embeddings.repository_lexical import LexicalMoveRepository
from app.features import FEATURES
from app.graph.repository import GraphRepository
from app.graph.repository_search import ENTITY_LEXICAL, SearchRepository
from tests.e2e.test_knn_plans import Plans, generic_plan
from tests.support.graph import call
from tests.support.server import PgCluster, RunningServer, mcp_client, server_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")


class Side:
    """A migrated database, a mover on it, and a plain connection to look at the tables."""

    def __init__(self, db: Database, dsn: str, settings: Settings) -> None:
        self.db = db
        self.dsn = dsn
        self.settings = settings
        self.mover = LexicalMover(db, [ENTITY_LEXICAL], settings)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.dsn)
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.close()

    async def pending(self) -> set[int]:
        return {r["id"] for r in await self.fetch("SELECT id FROM graph_entity_lexical_pending")}

    async def copied(self) -> set[int]:
        return {r["id"] for r in await self.fetch("SELECT id FROM graph_entity_lexical")}

    async def entities(self, pid: uuid.UUID, rows: dict[str, str]) -> dict[str, int]:
        async with self.db.transaction() as session:
            repo = GraphRepository(session)
            made = await repo.insert_entities(pid, [(n, "note", "active") for n in rows], [[o] for o in rows.values()])
        return {r.name: r.id for r in made}

    async def search(self, pid: uuid.UUID, words: str, entity_type: str | None = None) -> list[int]:
        lexical.forget_stats()
        async with self.db.transaction() as session:
            repo = SearchRepository(session)
            return [i for i, _ in await repo.text_candidates(pid, await repo.lexical_query(words), 10, entity_type)]


@pytest.fixture(scope="module")
async def side(pg: PgCluster) -> AsyncIterator[Side]:
    name = pg.new_database()
    url = pg.handle.url(name)
    await migrations.upgrade_async(url, [f.name for f in FEATURES])
    settings = server_settings(url)
    db = Database(url, settings)
    try:
        yield Side(db, pg.handle.libpq_uri(name), settings)
    finally:
        await db.dispose()


async def _project(side: Side) -> uuid.UUID:
    pid = uuid.uuid4()
    async with side.db.transaction() as session:
        await session.execute(text("INSERT INTO projects (id, name) VALUES (:p, :n)"), {"p": pid, "n": f"s-{pid.hex}"})
    return pid


async def test_a_new_entity_is_found_while_pending_and_after_its_copy(side: Side) -> None:
    await side.mover.drain(30)
    pid = await _project(side)
    ids = await side.entities(
        pid, {"Lovelace": "wrote the first program for the analytical engine", "Turing": "broke ciphers at Bletchley"}
    )
    assert await side.pending() == set(ids.values())
    assert not await side.copied() & set(ids.values())  # the write did not touch the HNSW graph
    assert await side.search(pid, "analytical engine program") == [ids["Lovelace"]]
    assert await side.mover.drain(30) == 0
    assert await side.pending() == set() and set(ids.values()) <= await side.copied()
    assert await side.search(pid, "analytical engine program") == [ids["Lovelace"]]
    assert await side.search(pid, "ciphers") == [ids["Turing"]]
    assert await side.search(pid, "ciphers", entity_type="person") == []


async def test_a_pending_entity_sharing_only_a_common_word_is_found(side: Side) -> None:
    """Past `RARE_FLOOR` rows a word is no longer looked up through the GIN index: only the pending
    scan can find a new entity that holds nothing rarer."""
    pid = await _project(side)
    await side.entities(
        pid, {f"Part {i}": f"an engine part with a long description of bolt number {i}" for i in range(60)}
    )
    await side.mover.drain(30)
    ids = await side.entities(pid, {"Motor": "engine engine"})
    assert await side.pending() == {ids["Motor"]}
    assert (await side.search(pid, "engine"))[0] == ids["Motor"]
    await side.mover.drain(30)
    assert (await side.search(pid, "engine"))[0] == ids["Motor"]


async def test_a_changed_entity_is_scored_from_its_new_text_not_its_stale_copy(side: Side) -> None:
    pid = await _project(side)
    ids = await side.entities(pid, {"Hopper": "wrote a compiler", "Other": "kept bees", "Third": "a compiler too"})
    await side.mover.drain(30)
    async with side.db.transaction() as session:
        await session.execute(
            text("UPDATE graph_entities SET obs_text = 'sailed the navy fleet' WHERE id = :i"), {"i": ids["Hopper"]}
        )
        await session.execute(text("UPDATE graph_entities SET status = 'archived' WHERE id = :i"), {"i": ids["Other"]})
    assert await side.pending() == {ids["Hopper"]}  # a status change lists nothing
    # The copy still holds the old text, and is not read.
    assert await side.search(pid, "compiler") == [ids["Third"]]
    assert await side.search(pid, "navy fleet") == [ids["Hopper"]]
    await side.mover.drain(30)
    assert await side.search(pid, "compiler") == [ids["Third"]]
    assert await side.search(pid, "navy fleet") == [ids["Hopper"]]
    rows = await side.fetch(
        "SELECT g.lexical::text = s.lexical::text AS same FROM graph_entities g "
        "JOIN graph_entity_lexical s USING (id) WHERE g.id = $1",
        ids["Hopper"],
    )
    assert [r["same"] for r in rows] == [True]


async def test_a_deleted_entity_leaves_neither_copy_nor_listing(side: Side) -> None:
    pid = await _project(side)
    ids = await side.entities(pid, {"Gone": "a passing note", "Kept": "a lasting note"})
    await side.mover.drain(30)
    await side.entities(pid, {"Gone soon": "never copied"})
    await side.fetch("DELETE FROM graph_entities WHERE project_id = $1 AND name LIKE 'Gone%'", pid)
    assert ids["Gone"] not in await side.copied()  # the side table's foreign key took it away
    await side.mover.drain(30)
    assert await side.pending() == set()
    assert await side.search(pid, "note") == [ids["Kept"]]


async def test_an_entity_changed_while_its_batch_is_copied_stays_listed(side: Side) -> None:
    await side.mover.drain(30)
    pid = await _project(side)
    ids = await side.entities(pid, {"Racer": "first words"})
    conn = await asyncpg.connect(side.dsn)
    try:
        writer = conn.transaction()
        await writer.start()
        await conn.execute("UPDATE graph_entities SET obs_text = 'second words' WHERE id = $1", ids["Racer"])
        move = asyncio.create_task(side.mover.move_batch(ENTITY_LEXICAL))
        deadline = time.monotonic() + 30
        while not await side.fetch(  # the copy waits on the writer's lock of the listing
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%graph_entity_lexical%'"
        ):
            assert time.monotonic() < deadline and not move.done(), "the copy never waited on the writer"
            await asyncio.sleep(0.02)
        await writer.commit()
        assert await move == 0
    finally:
        await conn.close()
    assert await side.pending() == {ids["Racer"]}  # listed again, so copied again
    await side.mover.drain(30)
    assert await side.search(pid, "second") == [ids["Racer"]] and await side.search(pid, "first") == []
    rows = await side.fetch("SELECT lexical::text AS v FROM graph_entity_lexical WHERE id = $1", ids["Racer"])
    current = await side.fetch("SELECT lexical::text AS v FROM graph_entities WHERE id = $1", ids["Racer"])
    assert rows[0]["v"] == current[0]["v"]


async def test_one_host_copies_an_index_at_a_time(side: Side) -> None:
    pid = await _project(side)
    await side.entities(pid, {"Queued": "waiting for its copy"})
    async with side.db.transaction() as session:
        assert await LexicalMoveRepository(session).take_turn(ENTITY_LEXICAL)
        assert await side.mover.move_batch(ENTITY_LEXICAL) is None  # the other host's turn
    assert await side.mover.move_batch(ENTITY_LEXICAL) == 1


async def test_the_side_table_scan_plans_on_its_hnsw_index_once_copied(side: Side) -> None:
    """The planner's own choice (no setting forces it), under a generic plan: after a bulk of rows is
    copied, the mover refreshes the side table's statistics, so the scan walks the HNSW index instead of
    sorting every row of the project (which it picks while it believes a project holds a handful)."""
    pid = await _project(side)
    await side.entities(pid, {f"Bulk {i}": f"an engine of many parts, number {i}" for i in range(1_500)})
    await side.mover.drain(60)
    [analysed] = await side.fetch("SELECT reltuples FROM pg_class WHERE relname = 'graph_entity_lexical'")
    assert analysed["reltuples"] >= 1_500
    plans = Plans(side.db)
    assert await side.search(pid, "engine parts") != []
    [(statement, parameters)] = [(s, p) for s, p in plans.statements if " <#> " in s and "LIMIT" in s]
    async with side.db.sessionmaker() as session:
        plan = await generic_plan(session, statement, parameters)
        await session.rollback()
    assert "Index Scan using ix_graph_entity_lexical on graph_entity_lexical" in plan, plan
    assert "Seq Scan on graph_entity_lexical " not in plan, plan


async def test_the_mover_gives_way_to_calls_then_copies(side: Side) -> None:
    pid = await _project(side)
    ids = await side.entities(pid, {"Patient": "waits for a quiet moment"})
    load = Load()
    mover = LexicalMover(
        side.db, [ENTITY_LEXICAL], side.settings.model_copy(update={"embedding_queue_defer_seconds": 60}), load
    )
    load.call_started()
    waiting = asyncio.create_task(mover.give_way(ENTITY_LEXICAL))
    for _ in range(20):  # a mover that did not hold back would be done within these turns
        await asyncio.sleep(0.01)
    assert not waiting.done()
    load.call_finished()
    assert await asyncio.wait_for(waiting, 10) > 0
    mover.start()
    try:
        deadline = time.monotonic() + 30
        while ids["Patient"] in await side.pending():
            assert time.monotonic() < deadline, "the running mover never copied the entity"
            await asyncio.sleep(0.05)
    finally:
        await mover.stop()
    assert ids["Patient"] in await side.copied()


async def test_the_servers_mover_empties_the_list_by_itself(server: RunningServer, pg: PgCluster) -> None:
    async with mcp_client(server.url) as mcp:
        entities = [{"name": f"Moved {i}", "entityType": "note", "observations": [f"zebra{i}"]} for i in range(30)]
        await call(mcp, "create_entities", {"entities": entities})
        found = await call(mcp, "search_semantic", {"query": "zebra7", "limit": 3})
        assert found["results"][0]["name"] == "Moved 7"
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        deadline = time.monotonic() + 30
        while await conn.fetchval("SELECT count(*) FROM graph_entity_lexical_pending"):
            assert time.monotonic() < deadline, "the server's mover left entities listed"
            await asyncio.sleep(0.05)
        assert await conn.fetchval("SELECT count(*) FROM graph_entity_lexical") >= 30
    finally:
        await conn.close()
