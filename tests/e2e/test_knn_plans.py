"""Every family's vector search plans on its partial HNSW index, under the generic plan asyncpg ends
up with (`app.core.embeddings.knn`).

Each test runs the family's own search on a real database (fresh, migrated) with its filters,
captures the statement the driver was given, and plans exactly that statement as a prepared
statement with `plan_cache_mode = force_generic_plan`: the parameters stay parameters, as in a
statement asyncpg has run five times. `enable_sort = off` leaves the planner one way to avoid
sorting, the ordered scan of the partial index, so the index's name is in the plan exactly when the
index can serve the statement: the model must be a literal (a parameter does not prove the index's
`model = '...'` in a generic plan: the control below) and the distance must be on the index's
expression, `(embedding::vector(384))`.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import pytest
from pgvector import SparseVector, Vector
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.analysis.repository import FINDING_VECTORS, AnalysisRepository
from app.core import migrations
from app.core.db import Database
from app.core.embeddings.knn import model_literal
from app.core.embeddings.provider import LOCAL_MODEL_NAME
from app.core.embeddings.repository import VectorRepository
from app.core.embeddings.vectors import EmbeddedRows, vector_param
from app.features import FEATURES
from app.graph.repository import ENTITY_VECTORS
from app.graph.repository_search import REFLECTION_VECTORS, SearchRepository
from app.memory.repository import MEMORY_VECTORS, MemoryRepository, Scope
from tests.support.server import PgCluster, server_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

MODEL = LOCAL_MODEL_NAME  # the model the migrations index
DIM = 384
ROWS = 40


class Plans:
    """A migrated database whose driver statements are recorded."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.statements: list[tuple[str, Sequence[Any]]] = []
        event.listen(db.engine.sync_engine, "before_cursor_execute", self._record)

    def _record(self, _c: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, _many: bool) -> None:
        self.statements.append((statement, tuple(parameters or ())))

    def knn_statement(self) -> tuple[str, Sequence[Any]]:
        """The one statement of the search that ordered by distance."""
        found = [(s, p) for s, p in self.statements if " <=> " in s and "ORDER BY" in s]
        assert len(found) == 1, [s for s, _ in self.statements]
        return found[0]


@pytest.fixture(scope="module")
async def plans(pg: PgCluster) -> AsyncIterator[Plans]:
    url = pg.handle.url(pg.new_database())
    await migrations.upgrade_async(url, [f.name for f in FEATURES])
    db = Database(url, server_settings(url))
    try:
        yield Plans(db)
    finally:
        await db.dispose()


def _literal(value: Any) -> str:
    """A captured parameter as an SQL literal for EXECUTE (the prepared statement's types apply)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, bytes):  # app.core.embeddings.vectors.vector_param
        return _literal(Vector.from_binary(value).to_text())
    if isinstance(value, SparseVector):  # app.core.embeddings.lexical.LexicalQuery.vector
        return _literal(value.to_text())
    if isinstance(value, str | uuid.UUID | datetime):
        return "'" + str(value).replace("'", "''") + "'"
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(_literal(v) for v in value) + "]::text[]"
    raise TypeError(f"no literal for {type(value).__name__}")


async def generic_plan(session: AsyncSession, statement: str, parameters: Sequence[Any]) -> str:
    """EXPLAIN of `statement` prepared, under a generic plan, with `parameters`."""
    raw: Any = (await (await session.connection()).get_raw_connection()).driver_connection
    name = f"knn_{uuid.uuid4().hex[:12]}"
    await raw.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    await raw.execute(f"PREPARE {name} AS {statement}")
    try:
        rows = await raw.fetch(f"EXPLAIN EXECUTE {name}({', '.join(_literal(p) for p in parameters)})")
    finally:
        await raw.execute(f"DEALLOCATE {name}")
    return "\n".join(str(r[0]) for r in rows)


async def assert_plans_on(session: AsyncSession, plans: Plans, index: str) -> None:
    """The search's k-NN statement plans on `index` under a generic plan; the same statement with
    the model bound as a parameter does not (so the plan is generic, and the test can fail)."""
    statement, parameters = plans.knn_statement()
    plan = await generic_plan(session, statement, parameters)
    assert f"Index Scan using {index} on" in plan, plan
    literal = f"e.model = {model_literal(MODEL)}"
    assert statement.count(literal) == 1
    bound = statement.replace(literal, f"e.model = ${len(parameters) + 1}")
    assert index not in await generic_plan(session, bound, [*parameters, MODEL])


def _vectors(n: int, seed: int) -> list[list[float]]:
    rnd = random.Random(seed)
    return [[rnd.uniform(-1, 1) for _ in range(DIM)] for _ in range(n)]


async def _store(session: AsyncSession, rows: EmbeddedRows, owners: list[Any], vectors: list[list[float]]) -> None:
    await VectorRepository(session).store(rows, MODEL, owners, [vector_param(v) for v in vectors])


async def _project(session: AsyncSession) -> uuid.UUID:
    pid = uuid.uuid4()
    await session.execute(text("INSERT INTO projects (id, name) VALUES (:p, :n)"), {"p": pid, "n": f"knn-{pid.hex}"})
    return pid


@asynccontextmanager
async def search_session(plans: Plans) -> AsyncIterator[AsyncSession]:
    """A transaction that is rolled back, in which planning avoids a sort whenever it can."""
    async with plans.db.sessionmaker() as session:
        try:
            await session.execute(text("SET LOCAL enable_sort = off"))
            yield session
        finally:
            await session.rollback()


async def test_memory_search_plans_on_its_partial_hnsw_index(plans: Plans) -> None:
    async with search_session(plans) as session:
        pid, other, cid = await _project(session), await _project(session), uuid.uuid4()
        await session.execute(
            text("INSERT INTO memory_collections (id, name, model, vector_size) VALUES (:c, :n, :m, :d)"),
            {"c": cid, "n": f"knn-{cid.hex}", "m": MODEL, "d": DIM},
        )
        ids = [uuid.uuid4() for _ in range(ROWS)]
        await session.execute(
            text(
                "INSERT INTO memories (id, project_id, collection_id, content, content_hash, tags) "
                "SELECT u.id, CASE WHEN u.n % 4 = 0 THEN CAST(:other AS uuid) ELSE CAST(:pid AS uuid) END, :c, "
                "'note ' || u.n, md5(u.n::text), "
                "CASE WHEN u.n % 3 = 0 THEN ARRAY['skip'] ELSE ARRAY['keep'] END "
                "FROM unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS u(id, n)"
            ),
            {"ids": ids, "pid": pid, "other": other, "c": cid},
        )
        vectors = _vectors(ROWS, 1)
        await _store(session, MEMORY_VECTORS, ids, vectors)
        wanted = {ids[i] for i in range(ROWS) if (i + 1) % 4 and (i + 1) % 3}
        probe = next(i for i in range(ROWS) if ids[i] in wanted)
        scope = Scope(project_id=pid, collection_id=cid, tags=["keep"], memory_type="semantic")

        plans.statements.clear()
        hits = await MemoryRepository(session).semantic(scope, MODEL, vectors[probe], 10, 100)
        assert hits[0][0] == ids[probe] and hits[0][1] == pytest.approx(1.0)
        assert {i for i, _ in hits} <= wanted and len(hits) == 10
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        await assert_plans_on(session, plans, "ix_memory_embeddings_hnsw_minilm")

        # The recall benchmark's reference: the same statement with index scans off around it.
        statement, _ = plans.knn_statement()
        plans.statements.clear()
        exact = await MemoryRepository(session).semantic(scope, MODEL, vectors[probe], 10, 100, exact=True)
        assert [i for i, _ in exact] == [i for i, _ in hits]
        assert plans.knn_statement()[0] == statement
        before, _, after = (s for s, _ in plans.statements)
        assert "set_config('enable_indexscan', 'off', true)" in before and "'on'" in after


async def _even_rows(
    session: AsyncSession, insert: str, pid: uuid.UUID, rows: EmbeddedRows, seed: int
) -> tuple[list[int], list[list[float]], set[int], int]:
    """ROWS rows made by `insert` (`:pid`, `:n`; an `n % 2` choice sets the attribute the search
    filters on) with random vectors: their ids, vectors, the even rows' ids and one even row's index."""
    ids = [int(i) for i in (await session.execute(text(insert), {"pid": pid, "n": ROWS})).scalars()]
    vectors = _vectors(ROWS, seed)
    await _store(session, rows, ids, vectors)
    even = {ids[i] for i in range(ROWS) if (i + 1) % 2 == 0}
    return ids, vectors, even, next(i for i in range(ROWS) if ids[i] in even)


async def test_graph_entity_search_plans_on_its_partial_hnsw_index(plans: Plans) -> None:
    async with search_session(plans) as session:
        pid = await _project(session)
        ids, vectors, people, probe = await _even_rows(
            session,
            "INSERT INTO graph_entities (project_id, name, entity_type) "
            "SELECT :pid, 'entity ' || n, CASE WHEN n % 2 = 0 THEN 'person' ELSE 'place' END "
            "FROM generate_series(1, :n) AS n ORDER BY n RETURNING id",
            pid,
            ENTITY_VECTORS,
            2,
        )
        plans.statements.clear()
        hits = await SearchRepository(session).vector_candidates(pid, vectors[probe], MODEL, 8, "person")
        assert hits[0][0] == ids[probe] and hits[0][1] == pytest.approx(1.0)
        assert {i for i, _ in hits} <= people and len(hits) == 8
        await assert_plans_on(session, plans, "ix_graph_embeddings_hnsw")


async def test_graph_reflection_search_plans_on_its_partial_hnsw_index(plans: Plans) -> None:
    async with search_session(plans) as session:
        pid = await _project(session)
        ids, vectors, ops, probe = await _even_rows(
            session,
            "INSERT INTO graph_reflections (project_id, target_type, author, content) "
            "SELECT :pid, 'project', CASE WHEN n % 2 = 0 THEN 'ops' ELSE 'sofia' END, 'thought ' || n "
            "FROM generate_series(1, :n) AS n ORDER BY n RETURNING id",
            pid,
            REFLECTION_VECTORS,
            3,
        )
        plans.statements.clear()
        repo = SearchRepository(session)
        unmatched = await repo.reflection_query("unmatched")
        rows = await repo.search_reflections(pid, vectors[probe], DIM, MODEL, unmatched, 6, "project", "ops")
        assert {int(r["id"]) for r in rows} <= ops and len(rows) == 6
        best = max(rows, key=lambda r: float(r["cos"]))
        assert int(best["id"]) == ids[probe] and float(best["cos"]) == pytest.approx(1.0)
        await assert_plans_on(session, plans, "ix_graph_reflection_embeddings_hnsw")


async def test_analysis_finding_search_plans_on_its_partial_hnsw_index(plans: Plans) -> None:
    async with search_session(plans) as session:
        pid = await _project(session)
        ids = [
            int(i)
            for i in (
                await session.execute(
                    text(
                        "INSERT INTO analysis_findings (project_id, analysis_id, category, finding, expires_at) "
                        "SELECT :pid, CASE WHEN n % 5 = 0 THEN 'other' ELSE 'run-1' END, "
                        "CASE WHEN n % 2 = 0 THEN 'risk' ELSE 'note' END, 'finding ' || n, "
                        "CASE WHEN n % 7 = 0 THEN now() - interval '1 hour' END "
                        "FROM generate_series(1, :n) AS n ORDER BY n RETURNING id"
                    ),
                    {"pid": pid, "n": ROWS},
                )
            ).scalars()
        ]
        vectors = _vectors(ROWS, 4)
        await _store(session, FINDING_VECTORS, ids, vectors)
        live_risks = {ids[i] for i in range(ROWS) if (i + 1) % 5 and (i + 1) % 2 == 0 and (i + 1) % 7}
        probe = next(i for i in range(ROWS) if ids[i] in live_risks)

        plans.statements.clear()
        hits = await AnalysisRepository(session).semantic(pid, "run-1", vectors[probe], MODEL, 5, "risk")
        assert hits[0][0] == ids[probe] and hits[0][1] == "risk" and hits[0][4] == pytest.approx(1.0)
        assert {h[0] for h in hits} <= live_risks and len(hits) == 5
        await assert_plans_on(session, plans, "ix_analysis_finding_embeddings_hnsw")
