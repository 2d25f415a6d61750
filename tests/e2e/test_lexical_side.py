"""Search over the graph entities' lexical index kept in a side table (graph_0006, `LexicalIndex.side`)
on a real database: a write lists the entity as pending instead of inserting into the HNSW graph;
search finds a pending entity at once, scored from its current text, before and after the mover copies
it, even when it shares only a word too common for the rare-word path; and the running server's mover
empties the list by itself."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from sqlalchemy import text

from tests.support.graph import call
from tests.support.lexical_side import Side, project, side
from tests.support.server import PgCluster, RunningServer, mcp_client

pytestmark = pytest.mark.asyncio(loop_scope="session")
__all__ = ["side"]  # the module fixture, shared


async def test_a_new_entity_is_found_while_pending_and_after_its_copy(side: Side) -> None:
    await side.mover.drain(30)
    pid = await project(side)
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
    pid = await project(side)
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
    pid = await project(side)
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
