"""app/core/embeddings/repository.py: the statements made from an `EmbeddedRows` declaration."""

from __future__ import annotations

import re
from typing import Any, cast

import pytest

from app.core.db import Database
from app.core.embeddings.repository import (
    FAIR_LEASE,
    QUEUED_TARGET,
    EmbeddingQueueRepository,
    LeasedJob,
    QueueBacklog,
    vector_statements,
)
from app.core.embeddings.vectors import EmbeddedRows
from tests.support.databases import database_fixture

PARAM = re.compile(r"(?<![:\w]):(\w+)")
LIVE = "t.expires_at IS NULL OR t.expires_at > now()"


def squash(sql: str) -> str:
    return " ".join(sql.split())


def composed(name: str, kind: str, notes: str) -> str:
    return f"{name} ({kind}): {notes}"


def test_texts_read_the_column_or_expression_or_the_composed_columns() -> None:
    plain = vector_statements(EmbeddedRows("m", "memories", "memory_vectors", text="content", key_type="uuid"))
    assert squash(plain.texts) == (
        "SELECT t.id AS ref, t.content AS text FROM memories t WHERE t.id = ANY(CAST(:keys AS uuid[]))"
    )
    live = vector_statements(EmbeddedRows("f", "findings", "finding_vectors", text="finding", live=LIVE))
    assert squash(live.texts) == (
        f"SELECT t.id AS ref, t.finding AS text FROM findings t WHERE t.id = ANY(CAST(:keys AS bigint[])) AND ({LIVE})"
    )
    expression = vector_statements(EmbeddedRows("d", "docs", "doc_vectors", text="t.title || ' ' || t.body"))
    assert "(t.title || ' ' || t.body) AS text" in expression.texts
    rows = EmbeddedRows("e", "entities", "entity_vectors", columns=("name", "kind", "notes"), compose=composed)
    assert squash(vector_statements(rows).texts) == (
        "SELECT t.id AS ref, t.name, t.kind, t.notes FROM entities t WHERE t.id = ANY(CAST(:keys AS bigint[]))"
    )


def test_store_is_one_ordered_upsert_that_skips_deleted_owners() -> None:
    rows = EmbeddedRows("m", "memories", "memory_vectors", text="content", key_type="uuid", owner="memory_id")
    sql = squash(vector_statements(rows).store)
    assert sql == (
        "INSERT INTO memory_vectors (memory_id, model, dim, embedding) "
        "SELECT u.owner, :model, vector_dims(u.embedding), u.embedding "
        "FROM unnest(CAST(:owners AS uuid[]), CAST(:vectors AS vector[])) AS u(owner, embedding) "
        "JOIN memories t ON t.id = u.owner ORDER BY u.owner FOR KEY SHARE OF t "
        "ON CONFLICT (memory_id, model) DO UPDATE SET embedding = EXCLUDED.embedding, dim = EXCLUDED.dim, "
        "created_at = now()"
    )
    unstamped = vector_statements(EmbeddedRows("f", "findings", "finding_vectors", text="finding", stamped=False))
    assert squash(unstamped.store).endswith("SET embedding = EXCLUDED.embedding, dim = EXCLUDED.dim")
    assert "CAST(:owners AS bigint[])" in unstamped.store


def test_missing_lists_live_rows_without_a_vector_that_are_not_queued() -> None:
    rows = EmbeddedRows("f", "findings", "finding_vectors", text="finding", live=LIVE)
    assert squash(vector_statements(rows).missing) == (
        f"SELECT t.id AS ref FROM findings t WHERE TRUE AND ({LIVE}) "
        "AND NOT EXISTS (SELECT 1 FROM finding_vectors v WHERE v.owner_id = t.id AND v.model = :model) "
        "AND NOT EXISTS (SELECT 1 FROM embedding_queue q WHERE q.target = :target AND q.ref = t.id::text "
        "AND q.model = :model) ORDER BY t.id LIMIT :limit"
    )


def test_values_are_bound_parameters_only() -> None:
    rows = EmbeddedRows("f", "findings", "finding_vectors", text="t.finding::text", live=LIVE)
    statements = vector_statements(rows)
    assert set(PARAM.findall(statements.texts)) == {"keys"}
    assert set(PARAM.findall(statements.store)) == {"model", "owners", "vectors"}
    assert set(PARAM.findall(statements.missing)) == {"model", "target", "limit"}
    assert vector_statements(rows) is statements  # made once per declaration


class Recorded:
    """A session that records the statement it is given and answers with no rows."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def execute(self, statement: Any, params: Any = None) -> Recorded:
        self.calls.append((squash(str(statement)), params))
        return self

    def mappings(self) -> Recorded:
        return self

    def all(self) -> list[dict[str, Any]]:
        return [{"model": "m", "n": 2}]


async def test_queued_counts_select_the_refs_with_the_familys_own_query() -> None:
    session = Recorded()
    refs = "SELECT m.id::text FROM memories m WHERE m.document_id = :d"
    counts = await EmbeddingQueueRepository(cast(Any, session)).queued_by_model("m", refs, {"d": 7})
    assert counts == {"m": 2}
    assert session.calls == [
        (
            f"SELECT q.model, count(*) AS n FROM embedding_queue q WHERE q.target = :{QUEUED_TARGET} "
            f"AND q.ref IN ({refs}) GROUP BY q.model",
            {"d": 7, QUEUED_TARGET: "m"},
        )
    ]


@pytest.mark.parametrize(
    ("refs", "params"),
    [("SELECT 1; DELETE FROM memories", {}), ("SELECT '1' -- x", {}), ("SELECT :queued_target", {QUEUED_TARGET: 1})],
)
async def test_queued_counts_refuse_a_query_that_is_not_one_statement_of_its_own(
    refs: str, params: dict[str, Any]
) -> None:
    session = Recorded()
    with pytest.raises(ValueError):
        await EmbeddingQueueRepository(cast(Any, session)).queued_by_model("m", refs, params)
    assert session.calls == []


# The fair lease on a migrated database of its own (the statement's text is not what matters here).
MODEL = "fair-lease-test"
TARGETS = ["memory", "graph_entity"]


queue_db = database_fixture([])


async def _queue(db: Database, refs: list[str], owner: str, project: str = "p", target: str = "memory") -> None:
    async with db.transaction() as session:
        await EmbeddingQueueRepository(session).enqueue(target, refs, MODEL, owner=owner, project=project)


async def _lease(db: Database, limit: int = 64) -> list[LeasedJob]:
    async with db.transaction() as session:
        return await EmbeddingQueueRepository(session).lease(MODEL, limit, 60, TARGETS)


async def _clear(db: Database) -> None:
    async with db.transaction() as session:
        await EmbeddingQueueRepository(session).execute("DELETE FROM embedding_queue")


async def _flood(db: Database, start: int, rows: int) -> None:
    """`rows` rows of two flooding keys in one statement, numbered from `start`."""
    async with db.transaction() as session:
        await EmbeddingQueueRepository(session).execute(
            "INSERT INTO embedding_queue (target, ref, model, owner, project) "
            "SELECT 'memory', 'flood-' || i, :model, CASE WHEN i % 2 = 0 THEN 'key-a' ELSE 'key-b' END, 'p' "
            "FROM generate_series(CAST(:start AS int), CAST(:end AS int)) i",
            {"model": MODEL, "start": start, "end": start + rows - 1},
        )


async def test_a_keys_few_rows_are_in_the_next_batch_behind_two_other_keys_backlog(queue_db: Database) -> None:
    await _clear(queue_db)
    # Two keys flood before and after a third key's rows: neither the oldest nor the newest rows
    # of the queue are the third key's.
    await _flood(queue_db, 0, 10_000)
    await _queue(queue_db, ["victim-1", "victim-2", "victim-3"], "key-c")
    await _flood(queue_db, 10_000, 10_000)
    first = await _lease(queue_db)
    refs = {j.ref for j in first}
    assert {"victim-1", "victim-2", "victim-3"} <= refs, sorted(refs)
    # The rest of the batch is shared between the two flooding keys, which keep draining.
    assert len(first) > 3 + 40 and len(first) <= 64
    flood = [r for r in refs if r.startswith("flood-")]
    a = sum(1 for r in flood if int(r.split("-")[1]) % 2 == 0)
    assert abs(a - (len(flood) - a)) <= 1
    # Alone, a backlog takes whole batches, from its oldest and its newest rows.
    second = await _lease(queue_db)
    assert len(second) == 64 and not {j.id for j in first} & {j.id for j in second}


async def test_the_fair_lease_reads_the_queue_through_its_index_only(queue_db: Database) -> None:
    """Behind a backlog of 20,000 rows the lease walks the groups on the owner index and reads a few
    rows of each, whatever the backlog's size: no scan of the whole queue."""
    await _clear(queue_db)
    await _flood(queue_db, 0, 20_000)
    await _queue(queue_db, ["victim-1"], "key-c")
    literal = {":model": f"'{MODEL}'", ":limit": "64", ":lease": "60", ":targets": "ARRAY['memory']"}
    sql = FAIR_LEASE
    for name, value in literal.items():
        sql = sql.replace(name, value)
    async with queue_db.transaction() as session:
        repo = EmbeddingQueueRepository(session)
        await repo.execute("ANALYZE embedding_queue")
        plan = "\n".join(await repo.scalars(f"EXPLAIN (ANALYZE, BUFFERS) {sql}"))
        await session.rollback()
    assert "Seq Scan" not in plan and "ix_embedding_queue_model_owner" in plan, plan


async def test_a_keys_projects_share_its_part_and_unowned_rows_are_a_group_of_their_own(queue_db: Database) -> None:
    await _clear(queue_db)
    # One key spreads its rows over ten projects: together they get one key's share, not ten.
    for n in range(10):
        await _queue(queue_db, [f"spread-{n}-{i}" for i in range(100)], "key-a", project=f"p{n}")
    await _queue(queue_db, [f"other-{i}" for i in range(100)], "key-b")
    async with queue_db.transaction() as session:  # the sweep's and backfills' rows: no owner
        await EmbeddingQueueRepository(session).enqueue("graph_entity", [f"swept-{i}" for i in range(100)], MODEL)
    batch = await _lease(queue_db, 60)
    by = {prefix: sum(1 for j in batch if j.ref.startswith(prefix)) for prefix in ("spread-", "other-", "swept-")}
    assert by == {"spread-": 20, "other-": 20, "swept-": 20}, by
    assert len({j.ref.split("-")[1] for j in batch if j.ref.startswith("spread-")}) == 10  # each project's 2


async def test_two_workers_leasing_at_once_never_share_a_row_and_drain_every_group(queue_db: Database) -> None:
    await _clear(queue_db)
    await _queue(queue_db, [f"a-{i}" for i in range(300)], "key-a")
    await _queue(queue_db, [f"b-{i}" for i in range(7)], "key-b")
    async with queue_db.transaction() as one, queue_db.transaction() as two:
        a = await EmbeddingQueueRepository(one).lease(MODEL, 32, 60, TARGETS)
        b = await EmbeddingQueueRepository(two).lease(MODEL, 32, 60, TARGETS)
    assert a and b and not {j.id for j in a} & {j.id for j in b}
    seen = {j.ref for j in a + b}
    while batch := await _lease(queue_db, 32):
        assert not seen & {j.ref for j in batch}
        seen |= {j.ref for j in batch}
    assert len(seen) == 307


async def test_a_bumped_row_becomes_the_bumping_callers_and_a_key_counts_its_pending_rows(queue_db: Database) -> None:
    await _clear(queue_db)
    await _queue(queue_db, ["shared", "a-1"], "key-a")
    await _queue(queue_db, ["shared"], "key-b")
    async with queue_db.transaction() as session:
        repo = EmbeddingQueueRepository(session)
        assert await repo.backlog_of(MODEL, "key-a", 100, 64) == QueueBacklog(1, 1)
        assert await repo.backlog_of(MODEL, "key-b", 100, 64) == QueueBacklog(1, 1)
        assert await repo.backlog_of("another-model", "key-b", 100, 64) == QueueBacklog(0, 0)
        await repo.enqueue("memory", [f"x-{i}" for i in range(50)], MODEL, owner="key-a")
        # own rows up to the cap; others are not read for a key past the light bound
        assert await repo.backlog_of(MODEL, "key-a", 10, 5) == QueueBacklog(10, 0)
        assert await repo.backlog_of(MODEL, "key-b", 100, 64) == QueueBacklog(1, 51)
        assert await repo.backlog_of(MODEL, "key-b", 100, 20) == QueueBacklog(1, 20)  # up to the light bound
