"""`LexicalMoveRepository` on a real database (the graph entities' side table, graph_0006): a copy drops
the listings of deleted entities, leaves listed an entity changed while its batch is copied, and one
host at a time holds an index's turn."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from app.core.embeddings.repository_lexical import LexicalMoveRepository
from app.graph.repository_search import ENTITY_LEXICAL
from tests.support.lexical_side import Side, project, side

pytestmark = pytest.mark.asyncio(loop_scope="session")
__all__ = ["side"]  # the module fixture, shared


async def test_a_deleted_entity_leaves_neither_copy_nor_listing(side: Side) -> None:
    pid = await project(side)
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
    pid = await project(side)
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
    pid = await project(side)
    await side.entities(pid, {"Queued": "waiting for its copy"})
    async with side.db.transaction() as session:
        assert await LexicalMoveRepository(session).take_turn(ENTITY_LEXICAL)
        assert await side.mover.move_batch(ENTITY_LEXICAL) is None  # the other host's turn
    assert await side.mover.move_batch(ENTITY_LEXICAL) == 1


async def test_the_pending_state_counts_the_listings_and_the_oldest_age(side: Side) -> None:
    await side.mover.drain(30)
    async with side.db.transaction() as session:
        empty = await LexicalMoveRepository(session).pending_state(ENTITY_LEXICAL)
    assert empty.rows == 0 and empty.oldest_seconds is None
    pid = await project(side)
    await side.entities(pid, {"One": "first", "Two": "second"})
    await side.fetch("UPDATE graph_entity_lexical_pending SET queued_at = now() - interval '30 seconds'")
    async with side.db.transaction() as session:
        state = await LexicalMoveRepository(session).pending_state(ENTITY_LEXICAL)
    assert state.rows == 2 and state.oldest_seconds is not None and 29 <= state.oldest_seconds < 120
