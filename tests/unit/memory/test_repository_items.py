"""app/memory/repository_items.py on a database of its own: the members of a document (its chunks, or a
memory alone), one memory with its names, a page of chunks with their models, the counts of vectors and
queued embeddings per model, tags replaced and rows deleted for one memory or its whole document."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text

from app.core.db import Database
from app.core.embeddings.repository import EmbeddingQueueRepository
from app.core.repository import ProjectRepository
from app.memory.repository import MEMORY_TARGET, MemoryRepository
from app.memory.repository_items import Members, MemoryItemsRepository
from tests.support.databases import database_fixture


def test_members_cover_the_document_or_the_memory_alone() -> None:
    mid, pid, cid, doc = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    members = Members.of({"id": mid, "project_id": pid, "collection_id": cid, "document_id": doc})
    where, params = members.where()
    assert where == "m.document_id = :m_d AND m.project_id = :m_p AND m.collection_id = :m_c"
    assert params == {"m_p": pid, "m_c": cid, "m_d": doc}
    assert members.where(document=False) == ("m.id = :m_id", {"m_id": mid})
    alone = Members(mid, pid, cid, None)
    assert alone.where() == ("m.id = :m_id", {"m_id": mid})


db = database_fixture(["memory"])


def _chunk(pid: uuid.UUID, cid: uuid.UUID, doc: uuid.UUID | None, index: int | None, tags: list[str]) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "project_id": pid,
        "collection_id": cid,
        "kind": "chunk" if doc else "thought",
        "memory_type": "semantic",
        "content": f"part {index}",
        "content_hash": f"h{index}-{uuid.uuid4()}",
        "tags": tags,
        "metadata": json.dumps({}),
        "source_uri": None,
        "document_id": doc,
        "chunk_index": index,
        "summary_key": None,
    }


async def test_a_documents_chunks_vectors_and_queue_are_counted_per_model(db: Database) -> None:
    async with db.transaction() as session:
        pid = await ProjectRepository(session).ensure_id("items")
        coll, _ = await MemoryRepository(session).ensure_collection("items-c", "m", 3)
        doc = uuid.uuid4()
        rows = [_chunk(pid, coll.id, doc, i, ["old"]) for i in (2, 0, 1)]
        lone = _chunk(pid, coll.id, None, None, ["solo"])
        other_doc = _chunk(pid, coll.id, uuid.uuid4(), 0, ["x"])
        await MemoryRepository(session).insert_memories([*rows, lone, other_doc])
        for row, model in [(rows[1], "m-a"), (rows[1], "m-b"), (rows[2], "m-a")]:
            await session.execute(
                text("INSERT INTO memory_embeddings (memory_id, model, dim, embedding) VALUES (:m, :model, 3, :v)"),
                {"m": row["id"], "model": model, "v": [1.0, 0.0, 0.0]},
            )
        await EmbeddingQueueRepository(session).enqueue(MEMORY_TARGET, [str(rows[0]["id"]), str(lone["id"])], "m-a")
        repo = MemoryItemsRepository(session)
        got = await repo.get(rows[0]["id"])
        assert got is not None and got["project"] == "items" and got["collection"] == "items-c"
        assert got["collection_id"] == coll.id and await repo.get(uuid.uuid4()) is None
        members = Members.of(got)
        page = await repo.chunks(members, 0, 2)
        assert [c["chunk_index"] for c in page] == [0, 1] and page[0]["vectors"] == ["m-a", "m-b"]
        assert page[1]["vectors"] == ["m-a"]
        rest = await repo.chunks(members, 2, 10)
        assert [c["chunk_index"] for c in rest] == [2] and rest[0]["vectors"] == []
        assert await repo.count(members) == 3
        assert await repo.vector_counts(members) == {"m-a": 2, "m-b": 1}
        assert await repo.queued_counts(members) == {"m-a": 1}
        solo_row = await repo.get(lone["id"])
        assert solo_row is not None
        solo = Members.of(solo_row)
        assert await repo.count(solo) == 1 and await repo.queued_counts(solo) == {"m-a": 1}
        assert await repo.vector_counts(solo) == {}


async def test_tags_and_deletions_cover_one_memory_or_its_document(db: Database) -> None:
    async with db.transaction() as session:
        pid = await ProjectRepository(session).ensure_id("items-w")
        coll, _ = await MemoryRepository(session).ensure_collection("items-w-c", "m", 3)
        doc = uuid.uuid4()
        rows = [_chunk(pid, coll.id, doc, i, ["old"]) for i in range(3)]
        other = _chunk(pid, coll.id, uuid.uuid4(), 0, ["keep"])
        await MemoryRepository(session).insert_memories([*rows, other])
        repo = MemoryItemsRepository(session)
        first = await repo.get(rows[0]["id"])
        assert first is not None
        members = Members.of(first)
        assert await repo.set_tags(members, ["one"], document=False) == 1
        assert await repo.set_tags(members, ["all"], document=True) == 3
        tags = await session.scalars(
            text("SELECT DISTINCT unnest(tags) FROM memories WHERE project_id = :p ORDER BY 1"), {"p": pid}
        )
        assert list(tags) == ["all", "keep"]  # the other document's chunk untouched
        last = await repo.get(rows[2]["id"])
        assert last is not None
        assert await repo.delete(Members.of(last), document=False) == 1
        assert await repo.delete(members, document=True) == 2
        assert await repo.get(other["id"]) is not None and await repo.count(members) == 0
