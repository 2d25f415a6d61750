"""app/graph/repository_search.py on a database of its own: vector and full-text candidates within one
project (and type), the score inputs of each candidate, access counters and co-occurrences, the search
log and its implicit feedback (only the latest event credited), duplicate flags, the decay of stale
counters, and reflections found by words or vectors."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.db import Database
from app.core.repository import ProjectRepository
from app.graph.repository import GraphRepository
from app.graph.repository_search import SearchRepository
from tests.support.databases import database_fixture

MODEL = "test-model"


db = database_fixture(["graph"])


async def _entities(
    session: AsyncSession, project: str, rows: list[tuple[str, str, list[str]]]
) -> tuple[uuid.UUID, dict[str, int]]:
    pid = await ProjectRepository(session).ensure_id(project)
    made = await GraphRepository(session).insert_entities(
        pid, [(n, t, "activo") for n, t, _ in rows], [obs for _, _, obs in rows]
    )
    return pid, {r.name: r.id for r in made}


async def _vector(session: AsyncSession, table: str, owner: int, vec: list[float]) -> None:
    await session.execute(
        text(f"INSERT INTO {table} (owner_id, model, dim, embedding) VALUES (:o, :m, :d, CAST(:v AS vector))"),
        {"o": owner, "m": MODEL, "d": len(vec), "v": vec},
    )


async def test_candidates_by_vector_and_by_words_stay_in_their_project_and_type(db: Database) -> None:
    async with db.transaction() as session:
        pid, ids = await _entities(
            session,
            "cands",
            [("North", "dir", ["cold wind"]), ("East", "dir", ["sun rise"]), ("Wind", "weather", ["wind wind"])],
        )
        other, far = await _entities(session, "cands-other", [("North", "dir", ["cold wind"])])
        for name, vec in {"North": [1.0, 0.0, 0.0], "East": [0.0, 1.0, 0.0], "Wind": [0.7, 0.7, 0.0]}.items():
            await _vector(session, "graph_embeddings", ids[name], vec)
        await _vector(session, "graph_embeddings", far["North"], [1.0, 0.0, 0.0])
        repo = SearchRepository(session)
        near = await repo.vector_candidates(pid, [1.0, 0.0, 0.0], MODEL, 2, None)
        assert [i for i, _ in near] == [ids["North"], ids["Wind"]] and near[0][1] == pytest.approx(1.0)
        dirs = await repo.vector_candidates(pid, [0.0, 1.0, 0.0], MODEL, 5, "dir")
        assert [i for i, _ in dirs] == [ids["East"], ids["North"]]
        assert await repo.vector_candidates(pid, [1.0, 0.0, 0.0], "another-model", 5, None) == []
        wind_sun = await repo.lexical_query("wind and the sun")
        assert {t.lexeme for t in wind_sun.terms} == {"wind", "sun"} and not wind_sun.missing  # no function word
        words = await repo.text_candidates(pid, wind_sun, 10, None)
        # the rarer word weighs more; of two with "wind", the one saying it three times comes first
        assert [i for i, _ in words] == [ids["East"], ids["Wind"], ids["North"]]
        assert all(score > 0 for _, score in words)
        assert [i for i, _ in await repo.text_candidates(pid, await repo.lexical_query("winds"), 10, "dir")] == [
            ids["North"]
        ]  # a stem of the type's entities only
        assert await repo.text_candidates(pid, await repo.lexical_query("the of"), 10, None) == []
        cold = await repo.lexical_query("cold")
        assert [i for i, _ in await repo.text_candidates(other, cold, 10, None)] == [far["North"]]
        sun = await repo.lexical_query("sun")
        inputs = {r["name"]: r for r in await repo.score_inputs(list(ids.values()), [1.0, 0.0, 0.0], 3, MODEL, sun)}
        assert inputs["North"]["cos"] == pytest.approx(1.0) and inputs["East"]["cos"] == pytest.approx(0.0)
        assert inputs["East"]["bm25"] > 0 and inputs["North"]["bm25"] == 0 and inputs["North"]["has_vector"]
        assert 0 < sun.coverage(inputs["East"]["bm25"]) <= 1
        assert inputs["North"]["access_count"] == 0 and inputs["North"]["days_since"] < 1
        blind = await repo.score_inputs([ids["North"]], None, 3, "another-model", None)
        assert blind[0]["cos"] == 0 and blind[0]["bm25"] == 0 and not blind[0]["has_vector"]


async def test_accesses_count_per_entity_and_pair_in_canonical_order(db: Database) -> None:
    async with db.transaction() as session:
        _, ids = await _entities(session, "access", [("A", "t", []), ("B", "t", []), ("C", "t", [])])
        a, b, c = ids["A"], ids["B"], ids["C"]
        repo = SearchRepository(session)
        await repo.record_access([a, b, a], [(b, a), (a, a)])
        await repo.record_access([a, b, c], [(a, b), (c, a)])
        await repo.record_access([], [(a, b)])  # nothing accessed: nothing counted
        rows = await repo.rows("SELECT entity_id, access_count FROM graph_entity_access")
        counts = {r["entity_id"]: r["access_count"] for r in rows}
        assert counts[a] == 2 and counts[b] == 2 and counts[c] == 1
        daily = await session.scalar(
            text("SELECT access_count FROM graph_access_log WHERE entity_id = :e AND access_date = CURRENT_DATE"),
            {"e": a},
        )
        assert daily == 2
        assert sorted(await repo.cooccurrences([a, b, c])) == sorted([(a, b, 2), (min(a, c), max(a, c), 1)])
        assert await repo.cooccurrences([b, c]) == []


async def test_search_log_feedback_credits_the_latest_event_once(db: Database) -> None:
    async with db.transaction() as session:
        pid, ids = await _entities(session, "log", [("A", "t", []), ("B", "t", [])])
        repo = SearchRepository(session)

        def result(name: str, rank: int) -> dict[str, object]:
            return {
                "entity_id": ids[name],
                "entity_name": name,
                "rank": rank,
                "limbic_score": 0.5,
                "cosine_sim": 0.4,
                "text_score": 0.1,
                "importance": 0.0,
                "temporal": 1.0,
                "cooc_boost": 0.0,
                "baseline_rank": 3 - rank,
            }

        first = await repo.log_event(pid, "q", "h", 1, 10, 2, 1.5, "hybrid")
        await repo.log_results(first, [result("A", 1), result("B", 2)])
        second = await repo.log_event(pid, "q", "h", 0, 10, 1, 1.0, "text")
        await repo.log_results(second, [result("A", 1)])
        await repo.log_results(second, [])
        assert second > first
        assert await repo.record_feedback(pid, [ids["A"]], 3600, "s1") == 1
        credited = (await session.execute(text("SELECT event_id, session_id FROM graph_implicit_feedback"))).all()
        assert [tuple(r) for r in credited] == [(second, "s1")]  # the latest event that returned A
        assert await repo.record_feedback(pid, [ids["A"]], 3600, None) == 0  # already credited
        assert await repo.record_feedback(pid, [ids["B"]], 0, None) == 0  # outside a window of nothing
        assert await repo.record_feedback(pid, [], 3600, None) == 0
        rows = [(r["event_id"], r["treatment"], r["rank"], r["relevant"]) for r in await repo.quality_rows(pid, 1)]
        assert rows == [(first, 1, 1, False), (first, 1, 2, False), (second, 0, 1, True)]


async def test_duplicates_are_flagged_once_and_stale_counters_decay(db: Database) -> None:
    async with db.transaction() as session:
        pid, ids = await _entities(session, "dups", [("A", "t", ["x", "x!", "y"]), ("B", "t", ["z"])])
        repo = SearchRepository(session)
        scan = await repo.current_observations_for_scan(pid, None, 10)
        assert [r["content"] for r in scan] == ["x", "x!", "y", "z"] and scan[0]["name"] == "A"
        assert [r["content"] for r in await repo.current_observations_for_scan(pid, ids["B"], 10)] == ["z"]
        kept, dup = scan[0]["id"], scan[1]["id"]
        assert await repo.flag_duplicates([(dup, kept)]) == 1
        assert await repo.flag_duplicates([(dup, kept)]) == 0 and await repo.flag_duplicates([]) == 0
        [flagged] = await repo.flagged_duplicates(pid)
        assert (flagged["id"], flagged["duplicate_of"], flagged["name"]) == (dup, kept, "A")
        await GraphRepository(session).mark_superseded([kept])
        assert await repo.flagged_duplicates(pid) == []  # its twin is history now
        await repo.record_access([ids["A"], ids["B"]], [])
        await repo.record_access([ids["A"]], [])
        await session.execute(
            text("UPDATE graph_entity_access SET last_access = now() - interval '40 days' WHERE entity_id = :e"),
            {"e": ids["A"]},
        )
        assert await repo.stale_access(pid, 30, 0.5, apply=False) == 1
        assert await repo.stale_access(pid, 30, 0.5, apply=True) == 1
        count = await session.scalar(
            text("SELECT access_count FROM graph_entity_access WHERE entity_id = :e"), {"e": ids["A"]}
        )
        assert count == 1


async def test_reflections_are_listed_per_entity_and_found_by_words_or_vector(db: Database) -> None:
    async with db.transaction() as session:
        pid, ids = await _entities(session, "refl", [("A", "t", [])])
        repo = SearchRepository(session)
        one = await repo.insert_reflection(pid, "entity", ids["A"], "ana", "the river floods in spring", "calm")
        two = await repo.insert_reflection(pid, "entity", ids["A"], "bo", "a dry summer", None)
        free = await repo.insert_reflection(pid, "graph", None, "ana", "rivers everywhere", None)
        assert two["id"] > one["id"] and one["created_at"] is not None
        listed = await repo.reflections_for(pid, ids["A"], 10)
        assert [r["id"] for r in listed] == [two["id"], one["id"]] and listed[0]["target_name"] == "A"
        assert len(await repo.reflections_for(pid, ids["A"], 1)) == 1
        river = await repo.reflection_query("river")
        by_words = await repo.search_reflections(pid, None, 3, MODEL, river, 10, None, None)
        assert {r["id"] for r in by_words} == {one["id"], free["id"]}  # "rivers": the same stem
        assert all(r["cos"] == 0 and r["bm25"] > 0 for r in by_words)
        await _vector(session, "graph_reflection_embeddings", two["id"], [0.0, 1.0, 0.0])
        await _vector(session, "graph_reflection_embeddings", free["id"], [1.0, 0.0, 0.0])
        both = await repo.search_reflections(pid, [0.0, 1.0, 0.0], 3, MODEL, river, 10, None, None)
        cos = {r["id"]: r["cos"] for r in both}
        assert set(cos) == {one["id"], two["id"], free["id"]} and cos[two["id"]] == pytest.approx(1.0)
        mine = await repo.search_reflections(pid, [0.0, 1.0, 0.0], 3, MODEL, river, 10, "graph", "ana")
        assert [r["id"] for r in mine] == [free["id"]] and mine[0]["target_name"] is None
        nothing = await repo.reflection_query("the")
        assert await repo.search_reflections(pid, None, 3, MODEL, nothing, 10, None, None) == []
