"""app/memory/service_items.py with a real call context on a database of its own: one memory read with
a page of its document's chunks and their vector counts per model, its tags replaced on it or on its
whole document, deleted alone or with its document, and hidden from a key bound to another project."""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager

import pytest
from sqlalchemy import text

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.errors import NotFound
from app.memory import service, service_items, service_thoughts
from app.memory.config import MemorySettings
from app.memory.schemas import PushIn
from app.memory.schemas_items import PREVIEW_CHARS, DeleteMemoryIn, GetMemoryIn, ListMemoriesIn, UpdateMemoryIn
from app.memory.schemas_thoughts import CaptureThoughtIn
from tests.support.calls import service_call
from tests.support.databases import database_fixture

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
ELSEWHERE = Principal(key_id="k2", name="bound", scopes=frozenset({"write"}), project="elsewhere")
SENTENCE = "Sentence number {i} on {topic} talks about rivers, stones and the weather of day {i}."


db = database_fixture(["memory"])


def call(db: Database, principal: Principal = WRITER) -> AbstractAsyncContextManager[CallContext]:
    memory = MemorySettings(memory_chunk_tokens=64, memory_chunk_overlap=8)
    return service_call(db, principal, feature_settings={MemorySettings: memory})


async def _document(db: Database, topic: str) -> uuid.UUID:
    """A pushed document of several chunks (on `topic`: each test's own text); its first chunk's id."""
    async with call(db) as ctx:
        body = " ".join(SENTENCE.format(i=i, topic=topic) for i in range(40))
        pushed = await service.push(ctx, PushIn.model_validate({"text": body, "project": "lab", "tags": ["old"]}))
        assert pushed.chunksIndexed >= 5
        first = await ctx.session.scalar(
            text("SELECT id FROM memories WHERE document_id = :d ORDER BY chunk_index LIMIT 1"),
            {"d": uuid.UUID(pushed.document_id)},
        )
    assert isinstance(first, uuid.UUID)
    return first


async def test_a_memory_reads_with_a_page_of_its_documents_chunks(db: Database) -> None:
    document = await _document(db, "reading")
    async with call(db) as ctx:
        first = await service_items.get(ctx, GetMemoryIn(id=document, chunk_limit=2))
        total = first.chunks_total
        assert [c.chunk_index for c in first.chunks] == [0, 1] and first.next_chunk_offset == 2 and total >= 5
        rest = await service_items.get(ctx, GetMemoryIn(id=document, chunk_offset=2, chunk_limit=100))
        assert [c.chunk_index for c in rest.chunks] == list(range(2, total)) and rest.next_chunk_offset is None
        none = await service_items.get(ctx, GetMemoryIn(id=document, chunk_limit=0))
        assert none.chunks == [] and none.chunks_total == total
    [active] = first.embeddings  # queued, not made: the vectors come after the commit
    assert active.active and active.model == ctx.embedder.model
    assert (active.embedded, active.missing, active.queued) == (0, total, total)
    assert first.memory.kind == "chunk" and first.memory.tags == ["old"] and first.memory.project == "lab"


async def test_tags_are_replaced_on_one_chunk_or_the_whole_document(db: Database) -> None:
    document = await _document(db, "tagging")
    async with call(db) as ctx:
        chunks = (await service_items.get(ctx, GetMemoryIn(id=document, chunk_limit=100))).chunks
        second = uuid.UUID(chunks[1].id)
        one = await service_items.update(ctx, UpdateMemoryIn(id=second, tags=["b", "a", "b"]))
        assert one.tags == ["a", "b"] and one.updated == 1
        assert (await service_items.get(ctx, GetMemoryIn(id=second))).memory.tags == ["a", "b"]
        assert (await service_items.get(ctx, GetMemoryIn(id=document))).memory.tags == ["old"]
        whole = await service_items.update(ctx, UpdateMemoryIn(id=second, tags=[], document=True))
        assert whole.updated == len(chunks)
        assert (await service_items.get(ctx, GetMemoryIn(id=document))).memory.tags == []


async def test_delete_one_chunk_or_the_document_and_a_bound_key_sees_none(db: Database) -> None:
    document = await _document(db, "deleting")
    async with call(db, ELSEWHERE) as ctx:
        with pytest.raises(NotFound, match="No memory with id"):
            await service_items.get(ctx, GetMemoryIn(id=document))
        with pytest.raises(NotFound):
            await service_items.delete(ctx, DeleteMemoryIn(id=document, document=True))
    async with call(db) as ctx:
        chunks = (await service_items.get(ctx, GetMemoryIn(id=document, chunk_limit=100))).chunks
        last = uuid.UUID(chunks[-1].id)
        assert (await service_items.delete(ctx, DeleteMemoryIn(id=last))).deleted == 1
        assert (await service_items.get(ctx, GetMemoryIn(id=document))).chunks_total == len(chunks) - 1
        gone = await service_items.delete(ctx, DeleteMemoryIn(id=document, document=True))
        assert gone.deleted == len(chunks) - 1
        with pytest.raises(NotFound):
            await service_items.get(ctx, GetMemoryIn(id=document))
        with pytest.raises(NotFound):
            await service_items.update(ctx, UpdateMemoryIn(id=uuid.uuid4(), tags=["x"]))


async def test_memories_are_listed_newest_first_filtered_and_cut_to_a_preview(db: Database) -> None:
    long_text = "A long thought about the shed. " * 40
    for text_, kind, tags, source in (
        ("Paint the shed door green.", "episodic", ["paint"], "todo/shed.md"),
        ("Sweep the shed floor.", "semantic", ["shed"], "notes/shed.md"),
        ("Oil the hinges twice a year.", "procedural", ["paint", "hinge"], "todo/hinges.md"),
    ):
        async with call(db) as ctx:  # a transaction each: each its own time
            body = {"text": text_, "project": "yard", "type": kind, "tags": tags, "source_uri": source}
            await service.push(ctx, PushIn.model_validate(body))
    async with call(db) as ctx:
        await service_thoughts.capture(ctx, CaptureThoughtIn(content=long_text, project="yard"))
    async with call(db) as ctx:
        await service.push(ctx, PushIn.model_validate({"text": "Another yard altogether.", "project": "yard2"}))

    async def listed(principal: Principal = WRITER, **filters: object) -> tuple[list[str], int, int | None]:
        async with call(db, principal) as ctx:
            out = await service_items.list_memories(ctx, ListMemoriesIn.model_validate({"project": "yard", **filters}))
        return [m.content[:12] for m in out.memories], out.total, out.next_offset

    assert await listed() == (["A long thoug", "Oil the hing", "Sweep the sh", "Paint the sh"], 4, None)
    assert await listed(memory_type="procedural") == (["Oil the hing"], 1, None)
    assert await listed(tags=["paint"]) == (["Oil the hing", "Paint the sh"], 2, None)
    assert await listed(source="todo/") == (["Oil the hing", "Paint the sh"], 2, None)
    assert await listed(kind=["chunk", "summary"], limit=2) == (["Oil the hing", "Sweep the sh"], 3, 2)
    assert await listed(limit=2, offset=2) == (["Sweep the sh", "Paint the sh"], 4, None)
    assert await listed(project="no-such-project") == ([], 0, None)
    async with call(db) as ctx:
        out = await service_items.list_memories(ctx, ListMemoriesIn(project="yard", kind=["thought"]))
    (thought,) = out.memories
    assert thought.truncated and len(thought.content) == PREVIEW_CHARS and long_text.startswith(thought.content)
    # Nothing embeds here (no worker runs): each of them waits in the queue, and is counted in its scope.
    assert out.queued == 1
    async with call(db) as ctx:
        assert (await service_items.list_memories(ctx, ListMemoriesIn(project="yard"))).queued == 4
        assert (await service_items.list_memories(ctx, ListMemoriesIn(project="yard", source="todo/"))).queued == 2
    # A key bound to another project lists its own (here: none), never this one's.
    async with call(db, ELSEWHERE) as ctx:
        own = await service_items.list_memories(ctx, ListMemoriesIn())
    assert own.total == 0 and own.memories == []
