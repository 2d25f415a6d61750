"""BM25 over English stems (`app.core.embeddings.lexical`, memory_0003) on a real database: stemming, the ranking
against an exact scan, the inner-product HNSW index under a generic plan, and idf from the planner's
statistics (a small analysed table has every lexeme among them; one missing is counted)."""

from __future__ import annotations

import math
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.embeddings import lexical
from app.memory.repository import MEMORY_LEXICAL, MemoryRepository, Scope
from tests.e2e.test_knn_plans import DIM, MODEL, Plans, generic_plan, plans, search_session

pytestmark = pytest.mark.asyncio(loop_scope="session")
__all__ = ["plans"]  # the module fixture of the k-NN plan tests, shared

NOTES = [
    "The planets rotate slowly around their axis.",
    "Rotation of the earth makes day and night.",
    "Cells divide; a dividing cell doubles its DNA.",
    "Stem cells rotate between states during development of the embryo.",
    "A recipe for bread with flour, water and salt.",
] + [f"Filler note number {i} about bread and weather." for i in range(40)]


async def _memories(session: AsyncSession) -> Scope:
    pid, cid = uuid.uuid4(), uuid.uuid4()
    await session.execute(text("INSERT INTO projects (id, name) VALUES (:p, :n)"), {"p": pid, "n": f"lex-{pid.hex}"})
    await session.execute(
        text("INSERT INTO memory_collections (id, name, model, vector_size) VALUES (:c, :n, :m, :d)"),
        {"c": cid, "n": f"lex-{cid.hex}", "m": MODEL, "d": DIM},
    )
    await session.execute(
        text(
            "INSERT INTO memories (id, project_id, collection_id, content, content_hash) "
            "SELECT gen_random_uuid(), :p, :c, u.t, md5(u.t) FROM unnest(CAST(:texts AS text[])) AS u(t)"
        ),
        {"p": pid, "c": cid, "texts": NOTES},
    )
    return Scope(project_id=pid, collection_id=cid)


async def _texts(session: AsyncSession, hits: list[tuple[uuid.UUID, float]]) -> list[str]:
    rows = (
        await session.execute(text("SELECT id, content FROM memories WHERE id = ANY(:i)"), {"i": [h for h, _ in hits]})
    ).all()
    by_id = {r[0]: r[1] for r in rows}
    return [by_id[h] for h, _ in hits]


async def test_bm25_matches_word_forms_and_ranks_as_an_exact_scan(plans: Plans) -> None:
    lexical.forget_stats()
    async with search_session(plans) as session:
        scope = await _memories(session)
        repo = MemoryRepository(session)
        query = await repo.lexical_query("rotating cells")
        assert {t.lexeme for t in query.terms} == {"rotat", "cell"}  # Snowball stems; 'rotating' -> 'rotat'
        plans.statements.clear()
        hits = await repo.bm25(scope, query, 10, 400)
        texts = await _texts(session, hits)
        # Both stems first, then either; 'rotate', 'Rotation', 'cells', 'cell' all match.
        assert texts[0] == NOTES[3]
        assert set(texts[1:]) == {NOTES[0], NOTES[1], NOTES[2]}
        assert all(s > 0 for _, s in hits) and [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        assert 0 < query.coverage(hits[0][1]) <= 1

        statement, parameters = next((s, p) for s, p in plans.statements if "<#>" in s and "ORDER BY" in s)
        plan = await generic_plan(session, statement, parameters)
        assert "Index Scan using ix_memories_lexical on" in plan, plan

        await session.execute(text("SET LOCAL enable_indexscan = off"))
        exact = await repo.bm25(scope, query, 10, 400)
        assert [round(s, 5) for _, s in exact] == [round(s, 5) for _, s in hits]


async def test_idf_comes_from_the_planner_statistics_once_analysed(plans: Plans) -> None:
    async with search_session(plans) as session:
        await _memories(session)
        await session.execute(text("ANALYZE memories"))
        lexical.forget_stats()
        repo = MemoryRepository(session)
        n = int(
            (
                await session.execute(text("SELECT reltuples::bigint FROM pg_class WHERE oid = 'memories'::regclass"))
            ).scalar_one()
        )
        query = await repo.lexical_query("bread embryo zebra")
        by = {t.lexeme: t for t in query.terms}
        counts: dict[str, int] = dict(
            (
                await session.execute(
                    text(
                        "SELECT t, (SELECT count(*) FROM memories WHERE tsv @@ CAST(quote_literal(t) AS tsquery)) "
                        "FROM unnest(CAST(:t AS text[])) AS t"
                    ),
                    {"t": ["bread", "embryo"]},
                )
            ).all()
        )
        (stats,) = [v for (_, table), v in lexical._STATS.items() if table == MEMORY_LEXICAL.table]
        assert {"bread", "embryo"} <= set(stats.frequent) and "zebra" not in stats.frequent
        assert set(by) == {"bread", "embryo"}  # 'zebra' is counted through the index: in no memory
        assert by["embryo"].idf == pytest.approx(lexical.idf(n, counts["embryo"]), rel=0.05)
        assert by["bread"].idf == pytest.approx(lexical.idf(n, counts["bread"]), rel=0.05)
        assert by["embryo"].idf > by["bread"].idf
        # 'zebra', in no memory, counts against coverage with the idf of a lexeme in no row.
        assert [(t.lexeme, t.df) for t in query.missing] == [("zebra", 0)]
        assert query.missing[0].idf == pytest.approx(lexical.idf(n, 0)) and query.missing[0].idf > by["embryo"].idf
        expected = (by["bread"].idf + by["embryo"].idf + query.missing[0].idf) * (lexical.K1 + 1)
        assert math.isclose(query.best, expected)
        # A typo, an acronym and a Spanish word are in no memory too, but name nothing the notes are known
        # not to be about; "Walnuts" counts through its stem, "Café" through its unaccented spelling.
        other = await repo.lexical_query("Walnuts breadd PTPRS receta Café bread")
        assert {t.lexeme for t in other.terms} == {"bread"}
        assert sorted(t.lexeme for t in other.missing) == ["café", "walnut"]  # memories keep accents


async def test_any_query_text_is_a_parameter_and_never_breaks_the_statement(plans: Plans) -> None:
    lexical.forget_stats()
    async with search_session(plans) as session:
        scope = await _memories(session)
        repo = MemoryRepository(session)
        for hostile in ["o'neil's \\ cells 'x' :* & | !", "'; DROP TABLE memories; --", "rotat:* | cell", "\x01\\'"]:
            query = await repo.lexical_query(hostile)
            hits = await repo.bm25(scope, query, 10, 400)
            assert all(s > 0 for _, s in hits)
        assert (await session.execute(text("SELECT count(*) FROM memories"))).scalar_one() >= len(NOTES)
