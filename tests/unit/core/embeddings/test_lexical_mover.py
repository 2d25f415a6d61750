"""`LexicalMover` on a real database (the graph entities' side table, graph_0006): it gives way to calls,
then copies by itself; after copying a bulk of rows it refreshes the side table's statistics, so the
planner's own choice walks the HNSW index."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.core.embeddings.lexical_mover import LexicalMover
from app.core.embeddings.load import Load
from app.graph.repository_search import ENTITY_LEXICAL
from tests.e2e.test_knn_plans import Plans, generic_plan
from tests.support.lexical_side import Side, project, side

pytestmark = pytest.mark.asyncio(loop_scope="session")
__all__ = ["side"]  # the module fixture, shared


async def test_the_side_table_scan_plans_on_its_hnsw_index_once_copied(side: Side) -> None:
    """The planner's own choice (no setting forces it), under a generic plan: after a bulk of rows is
    copied, the mover refreshes the side table's statistics, so the scan walks the HNSW index instead of
    sorting every row of the project (which it picks while it believes a project holds a handful)."""
    pid = await project(side)
    await side.entities(pid, {f"Bulk {i}": f"an engine of many parts, number {i}" for i in range(1_500)})
    await side.mover.drain(60)
    [analysed] = await side.fetch("SELECT reltuples FROM pg_class WHERE relname = 'graph_entity_lexical'")
    assert analysed["reltuples"] >= 1_500
    # The emptied list is vacuumed: no search reads through the 1,500 dead listings.
    assert [r["size"] for r in await side.fetch("SELECT pg_relation_size('graph_entity_lexical_pending') AS size")] == [
        0
    ]
    plans = Plans(side.db)
    assert await side.search(pid, "engine parts") != []
    [(statement, parameters)] = [(s, p) for s, p in plans.statements if " <#> " in s and "LIMIT" in s]
    async with side.db.sessionmaker() as session:
        plan = await generic_plan(session, statement, parameters)
        await session.rollback()
    assert "Index Scan using ix_graph_entity_lexical on graph_entity_lexical" in plan, plan
    assert "Seq Scan on graph_entity_lexical " not in plan, plan
    # The listed entities are looked up by key, never found by sorting the project's every entity.
    assert "Index Cond: (id = ANY ((InitPlan" in plan and "graph_entities_pkey" in plan, plan


class _CountedLoad(Load):
    """A load that counts how often it is asked whether the process is busy."""

    looks = 0

    def busy(self, quiet: float) -> bool:
        self.looks += 1
        return super().busy(quiet)


async def test_the_mover_gives_way_to_calls_then_copies(side: Side) -> None:
    pid = await project(side)
    ids = await side.entities(pid, {"Patient": "waits for a quiet moment"})
    load = _CountedLoad()
    mover = LexicalMover(
        side.db, [ENTITY_LEXICAL], side.settings.model_copy(update={"embedding_queue_defer_seconds": 60}), load
    )
    load.call_started()
    waiting = asyncio.create_task(mover.give_way(ENTITY_LEXICAL))
    deadline = time.monotonic() + 30
    while load.looks < 5:  # it keeps asking whether the process is busy, and keeps waiting
        assert time.monotonic() < deadline and not waiting.done(), "the mover did not hold back"
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


async def test_a_small_copy_leaves_the_statistics_to_autovacuum(side: Side) -> None:
    await side.mover.drain(60)
    pid = await project(side)
    await side.entities(pid, {f"Few {i}": "a few more" for i in range(20)})
    mover = LexicalMover(side.db, [ENTITY_LEXICAL], side.settings)
    assert await mover.move_batch(ENTITY_LEXICAL) == 20
    assert not await mover.refresh_statistics(ENTITY_LEXICAL)  # 20 rows: under ANALYZE_ROWS
