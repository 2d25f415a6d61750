"""app/memory/repository.py on a database of its own: the SQL a `Scope` becomes, collections, memories
written (hashes, re-pushed chunks, summaries upserted by key), the ingest counters, listings with their
filters and order, facet counts, and the searches (vector, web-search syntax, BM25, per-memory
signals) with the backfill's keyset paging of memories without vectors."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.db import Database
from app.core.repository import ProjectRepository
from app.memory.repository import MemoryRepository, Scope
from tests.support.databases import database_fixture

MODEL = "test-model"


def test_a_scope_becomes_bound_conditions() -> None:
    where, params = Scope().where()
    assert where == "TRUE AND NOT m.archived" and params == {}
    pid, mid = uuid.uuid4(), uuid.uuid4()
    where, params = Scope(
        project_id=pid, tags=["a"], include_archived=True, exclude_id=mid, kinds=["thought"], ids=[], days=3
    ).where("x")
    assert "x.project_id = :f_project" in where and "x.tags && CAST(:f_tags AS text[])" in where
    assert "archived" not in where and "x.id <> :f_exclude" in where and "x.id = ANY(CAST(:f_ids" in where
    assert params == {
        "f_project": pid,
        "f_tags": ["a"],
        "f_exclude": mid,
        "f_kinds": ["thought"],
        "f_ids": [],
        "f_days": 3,
    }
    assert "lower(t.v) = lower(CAST(:f_topic_nc AS text))" in Scope(topic_nocase="X").where()[0]
    assert Scope(tags=[]).where()[1] == {}  # an empty tag list filters nothing


db = database_fixture(["memory"])


def _row(pid: uuid.UUID, cid: uuid.UUID, content: str, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": uuid.uuid4(),
        "project_id": pid,
        "collection_id": cid,
        "kind": "thought",
        "memory_type": "semantic",
        "content": content,
        "content_hash": f"h-{content}",
        "tags": [],
        "metadata": json.dumps({}),
        "source_uri": None,
        "document_id": None,
        "chunk_index": None,
        "summary_key": None,
    }
    row.update(over)
    return row


async def _scope(session: AsyncSession, project: str, collection: str) -> tuple[MemoryRepository, uuid.UUID, uuid.UUID]:
    repo = MemoryRepository(session)
    pid = await ProjectRepository(session).ensure_id(project)
    coll, _ = await repo.ensure_collection(collection, MODEL, 3)
    return repo, pid, coll.id


async def _vector(session: AsyncSession, memory_id: uuid.UUID, vec: list[float]) -> None:
    await session.execute(
        text("INSERT INTO memory_embeddings (memory_id, model, dim, embedding) VALUES (:m, :model, :d, :v)"),
        {"m": memory_id, "model": MODEL, "d": len(vec), "v": vec},
    )


async def _age(session: AsyncSession, memory_id: uuid.UUID, days: float) -> None:
    await session.execute(
        text("UPDATE memories SET created_at = now() - make_interval(secs => :s) WHERE id = :id"),
        {"s": days * 86400, "id": memory_id},
    )


async def test_collections_are_made_once_resized_listed_and_dropped(db: Database) -> None:
    async with db.transaction() as session:
        repo = MemoryRepository(session)
        made, created = await repo.ensure_collection("c-one", MODEL, 3)
        again, created_again = await repo.ensure_collection("c-one", "other", 9)
        assert created and not created_again and again.id == made.id and again.vector_size == 3
        await repo.resize_collection(made.id, "bigger", 8)
        await session.refresh(made)
        assert (made.model, made.vector_size) == ("bigger", 8)
        pid = await ProjectRepository(session).ensure_id("p-coll")
        await repo.insert_memories([_row(pid, made.id, "x", source_uri="file:a"), _row(pid, made.id, "y")])
        assert set((await repo.sources_of(made.id)).values()) == {"file:a", None}
        await repo.ensure_collection("c-two", MODEL, 3)
        assert {"c-one", "c-two"} <= set(await repo.collection_names())
        assert await repo.collection_names(pid) == ["c-one"]  # only collections holding the project's memories
        await repo.clear_collection(made.id)
        assert await repo.sources_of(made.id) == {} and await repo.get_collection("c-one") is not None
        await repo.delete_collection(made.id)
        assert await repo.get_collection("c-one") is None


async def test_memories_written_rehashed_retagged_and_summaries_upserted(db: Database) -> None:
    async with db.transaction() as session:
        repo, pid, cid = await _scope(session, "p-write", "c-write")
        doc = uuid.uuid4()
        chunks = [
            _row(pid, cid, f"chunk {i}", kind="chunk", source_uri="file:doc", document_id=doc, chunk_index=i)
            for i in (1, 0)
        ]
        await repo.insert_memories(chunks)
        await repo.insert_memories([])
        assert await repo.existing_hashes(pid, cid, ["h-chunk 0", "h-none", "h-chunk 0"]) == {"h-chunk 0"}
        other = await ProjectRepository(session).ensure_id("p-write-other")
        assert await repo.existing_hashes(other, cid, ["h-chunk 0"]) == set()
        source = await repo.chunks_of_source(pid, cid, "file:doc")
        assert [c["chunk_index"] for c in source] == [0, 1] and source[0]["document_id"] == doc
        first = source[0]["id"]
        await _vector(session, first, [1.0, 0.0, 0.0])
        assert await repo.vector_of(first, MODEL) == [1.0, 0.0, 0.0]
        new_doc = uuid.uuid4()
        await repo.replace_chunk(first, "chunk zero", "h-new", "episodic", ["t"], new_doc)
        assert await repo.vector_of(first, MODEL) is None  # the old text's vector is gone
        await repo.retag_chunks([source[1]["id"]], "procedural", ["u"], new_doc)
        rows = await repo.fetch([first, source[1]["id"]], MODEL)
        assert (rows[first]["content"], rows[first]["memory_type"], rows[first]["tags"]) == (
            "chunk zero",
            "episodic",
            ["t"],
        )
        assert rows[source[1]["id"]]["memory_type"] == "procedural" and rows[source[1]["id"]]["document_id"] == new_doc
        assert rows[first]["project"] == "p-write" and rows[first]["collection"] == "c-write"
        columns = ("id", "project_id", "collection_id", "content", "content_hash", "tags", "metadata", "summary_key")
        summary = {k: v for k, v in _row(pid, cid, "sum one", summary_key="week-1").items() if k in columns}
        sid = await repo.upsert_summary(summary)
        same = await repo.upsert_summary({**summary, "id": uuid.uuid4(), "content": "sum two"})
        assert same == sid and (await repo.fetch([sid], MODEL))[sid]["content"] == "sum two"
        assert (await repo.fetch([sid], MODEL))[sid]["kind"] == "summary"
        assert await repo.delete_memories([first, uuid.uuid4()]) == 1 and await repo.delete_memories([]) == 0
        assert await repo.fetch([], MODEL) == {}


async def test_ingest_counters_per_project_and_in_all(db: Database) -> None:
    async with db.transaction() as session:
        repo, pid, _ = await _scope(session, "p-ingest", "c-ingest")
        before = await repo.ingest_stats()
        assert await repo.ingest_stats(pid) == {"documents_indexed": 0, "chunks_indexed": 0, "last_chunk_size": None}
        await repo.bump_ingest(pid, 1, 5, 256)
        await repo.bump_ingest(pid, 2, 3, 128)
        assert await repo.ingest_stats(pid) == {"documents_indexed": 3, "chunks_indexed": 8, "last_chunk_size": 128}
        after = await repo.ingest_stats()
        assert after["documents_indexed"] - (before["documents_indexed"] or 0) == 3
        assert after["last_chunk_size"] == 128


async def test_listings_filter_order_count_and_facet(db: Database) -> None:
    async with db.transaction() as session:
        repo, pid, cid = await _scope(session, "p-list", "c-list")
        meta = {"type": "idea", "topics": ["Rivers", "maps"], "people": ["ana"]}
        rows = [
            _row(pid, cid, "oldest", tags=["a"], metadata=json.dumps(meta)),
            _row(pid, cid, "middle", tags=["b"], memory_type="episodic", metadata=json.dumps({"type": "task"})),
            _row(pid, cid, "newest", tags=["a", "b"], kind="chunk", metadata=json.dumps({"topics": "not a list"})),
            _row(pid, cid, "archived", tags=["a"]),
        ]
        await repo.insert_memories(rows)
        for row, days in zip(rows, (3, 2, 1, 0), strict=True):
            await _age(session, row["id"], days)
        await repo.update_memory(rows[3]["id"], {"archived": True, "metadata": json.dumps({"type": "gone"})})
        scope = Scope(project_id=pid)
        assert [m["content"] for m in await repo.list_memories(scope, MODEL, 10)] == ["newest", "middle", "oldest"]
        assert [m["content"] for m in await repo.list_memories(scope, MODEL, 1, 1, oldest_first=True)] == ["middle"]
        assert await repo.count(Scope(project_id=pid, include_archived=True)) == 4
        assert await repo.count(Scope(project_id=pid, tags=["a"])) == 2
        assert await repo.count(Scope(project_id=pid, thought_type="idea")) == 1
        assert await repo.count(Scope(project_id=pid, topic="rivers")) == 0
        assert await repo.count(Scope(project_id=pid, topic_nocase="rivers")) == 1
        assert await repo.count(Scope(project_id=pid, person="ana", kinds=["thought"])) == 1
        assert await repo.count(Scope(project_id=pid, memory_type="episodic")) == 1
        assert await repo.count(Scope(project_id=pid, days=2)) == 2  # created within the last two days
        assert (
            await repo.count(Scope(project_id=pid, exclude_id=rows[0]["id"], ids=[rows[0]["id"], rows[1]["id"]])) == 1
        )
        start = datetime.now(UTC) - timedelta(days=2, hours=12)
        assert await repo.count(Scope(project_id=pid, start=start, end=datetime.now(UTC) - timedelta(hours=12))) == 2
        total, active, facets = await repo.facet_counts(Scope(project_id=pid, include_archived=True))
        assert (total, active) == (4, 3)
        assert facets["type"] == [("idea", 1), ("task", 1)]  # the archived one's type not counted
        assert facets["memory_type"] == [("semantic", 2), ("episodic", 1)]
        assert facets["topics"] == [("Rivers", 1), ("maps", 1)] and facets["people"] == [("ana", 1)]
        assert await repo.project_tags(pid) == ["a", "b"]
        assert await repo.project_names("p-list") == ["p-list"] and await repo.project_names("nobody") == []
        listed = (await repo.list_memories(Scope(ids=[rows[0]["id"]]), MODEL, 1))[0]
        assert listed["has_embedding"] is False and listed["metadata"] == meta


async def test_vector_words_and_bm25_searches_stay_in_scope(db: Database) -> None:
    async with db.transaction() as session:
        repo, pid, cid = await _scope(session, "p-search", "c-search")
        rows = [
            _row(pid, cid, "The river floods the valley every spring"),
            _row(pid, cid, "Mountains and a river of ice"),
            _row(pid, cid, "Bread needs flour and water", tags=["food"]),
        ]
        await repo.insert_memories(rows)
        ids = [r["id"] for r in rows]
        for mid, vec in zip(ids, ([1.0, 0.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0]), strict=True):
            await _vector(session, mid, vec)
        scope = Scope(project_id=pid)
        assert await repo.has_vectors(scope, MODEL) and not await repo.has_vectors(scope, "other")
        near = await repo.semantic(scope, MODEL, [1.0, 0.0, 0.0], 2, 40)
        assert [i for i, _ in near] == ids[:2] and near[0][1] == pytest.approx(1.0)
        exact = await repo.semantic(Scope(project_id=pid, tags=["food"]), MODEL, [1.0, 0.0, 0.0], 5, 40, exact=True)
        assert [i for i, _ in exact] == [ids[2]]
        terms = await repo.lexical_query("river floods")
        assert terms.terms
        words = await repo.lexical(scope, "river floods", terms, 10)
        assert [i for i, _ in words] == [ids[0]]  # web-search syntax: every word must match
        either = await repo.lexical(scope, "river", terms, 10)
        assert {i for i, _ in either} == set(ids[:2])
        assert await repo.lexical(scope, "-river bread", terms, 10) == [(ids[2], 0.0)]
        best = await repo.bm25(scope, terms, 10, 40)
        assert best[0][0] == ids[0] and {i for i, _ in best} == set(ids[:2]) and best[0][1] > best[1][1]
        assert await repo.bm25(scope, await repo.lexical_query("zebra"), 10, 40) == []
        signals = await repo.signals(ids, terms, MODEL, [1.0, 0.0, 0.0])
        assert signals[ids[0]][0] == pytest.approx(1.0) and signals[ids[0]][1] > 0 and signals[ids[2]][1] == 0
        blind = await repo.signals(ids[:1], None, MODEL, None)
        assert blind == {ids[0]: (None, 0.0)} and await repo.signals([], None, MODEL, None) == {}


async def test_turns_give_each_memory_its_speaker_and_time(db: Database) -> None:
    async with db.transaction() as session:
        repo, pid, cid = await _scope(session, "p-turns", "c-turns")
        rows = [
            _row(pid, cid, "We fly on the 9th", metadata=json.dumps({"speaker": "Maya", "session": "s5"})),
            _row(pid, cid, "A note of nobody's"),
        ]
        await repo.insert_memories(rows)
        await _age(session, rows[0]["id"], 4)
        turns = await repo.turns([r["id"] for r in rows])
        assert turns[rows[0]["id"]].speaker == "Maya" and turns[rows[1]["id"]].speaker is None
        age = turns[rows[1]["id"]].when - turns[rows[0]["id"]].when
        assert abs(age - timedelta(days=4)) < timedelta(minutes=1), age
        assert await repo.turns([]) == {}


async def test_memories_without_vectors_page_oldest_first(db: Database) -> None:
    async with db.transaction() as session:
        repo, pid, cid = await _scope(session, "p-missing", "c-missing")
        rows = [_row(pid, cid, f"note {i}") for i in range(4)]
        await repo.insert_memories(rows)
        for row, days in zip(rows, (4, 3, 2, 1), strict=True):
            await _age(session, row["id"], days)
        await _vector(session, rows[1]["id"], [1.0, 0.0, 0.0])
        await repo.update_memory(rows[3]["id"], {"archived": True})
        assert await repo.count_missing(MODEL, pid) == 2 and await repo.count_missing(MODEL, pid, True) == 3
        first = await repo.missing_embeddings(MODEL, pid, False, 0, 1)
        assert [r["content"] for r in first] == ["note 0"]
        after = (first[0]["created_at"], first[0]["id"])
        assert [r["content"] for r in await repo.missing_embeddings(MODEL, pid, True, 0, 10, after)] == [
            "note 2",
            "note 3",
        ]
        assert [r["content"] for r in await repo.missing_embeddings(MODEL, pid, False, 3, 10)] == ["note 0"]
        await repo.drop_vectors(rows[1]["id"])
        assert await repo.count_missing(MODEL, pid) == 3
