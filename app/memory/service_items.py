"""Use cases of the memory-item tools: read one memory with its document and vectors, retag, delete."""

from __future__ import annotations

import uuid
from typing import Any

from app.core.context import CallContext
from app.core.errors import NotFound
from app.memory import service_common as common
from app.memory.repository import MemoryRepository, Scope
from app.memory.repository_items import Members, MemoryItemsRepository
from app.memory.schemas_items import (
    PREVIEW_CHARS,
    DeleteMemoryIn,
    DeleteMemoryOut,
    EmbeddingStatus,
    GetMemoryIn,
    GetMemoryOut,
    ListedMemory,
    ListMemoriesIn,
    ListMemoriesOut,
    MemoryChunk,
    MemoryItem,
    UpdateMemoryIn,
    UpdateMemoryOut,
)


async def _row(ctx: CallContext, repo: MemoryItemsRepository, memory_id: uuid.UUID) -> dict[str, Any]:
    """The memory, if the key may see it: a key bound to a project sees no other project's memories
    (they answer as missing, as get_thought does)."""
    row = await repo.get(memory_id)
    if row is None or not common.visible(ctx, row):
        raise NotFound(
            f"No memory with id {memory_id}", suggestions=["Find ids with search (each result's id) or list_thoughts"]
        )
    return row


def _item(row: dict[str, Any]) -> MemoryItem:
    return MemoryItem(
        id=str(row["id"]),
        kind=row["kind"],
        memory_type=row["memory_type"],
        project=row["project"],
        collection=row["collection"],
        content=row["content"],
        tags=list(row["tags"] or []),
        metadata=row["metadata"] or {},
        source_uri=row["source_uri"],
        document_id=str(row["document_id"]) if row["document_id"] is not None else None,
        chunk_index=row["chunk_index"],
        archived=row["archived"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def get(ctx: CallContext, args: GetMemoryIn) -> GetMemoryOut:
    """One memory, a page of its document's chunks, and per model how many of them have a vector."""
    repo = MemoryItemsRepository(ctx.session)
    row = await _row(ctx, repo, args.id)
    members = Members.of(row)
    total = await repo.count(members)
    chunks = await repo.chunks(members, args.chunk_offset, args.chunk_limit) if args.chunk_limit else []
    vectors, queued = await repo.vector_counts(members), await repo.queued_counts(members)
    active = ctx.embedder.model
    models = [active, *sorted((set(vectors) | set(queued)) - {active})]
    nxt = args.chunk_offset + len(chunks)
    return GetMemoryOut(
        memory=_item(row),
        chunks=[
            MemoryChunk(id=str(c["id"]), chunk_index=c["chunk_index"], content=c["content"], vectors=list(c["vectors"]))
            for c in chunks
        ],
        chunks_total=total,
        next_chunk_offset=nxt if chunks and nxt < total else None,
        embeddings=[
            EmbeddingStatus(
                model=m,
                active=m == active,
                embedded=vectors.get(m, 0),
                missing=total - vectors.get(m, 0),
                queued=queued.get(m, 0),
            )
            for m in models
        ],
    )


async def update(ctx: CallContext, args: UpdateMemoryIn) -> UpdateMemoryOut:
    """Replace the tags of one memory, or of every chunk of its document."""
    repo = MemoryItemsRepository(ctx.session)
    row = await _row(ctx, repo, args.id)
    tags = sorted(set(args.tags))
    updated = await repo.set_tags(Members.of(row), tags, args.document)
    return UpdateMemoryOut(id=str(args.id), tags=tags, updated=updated)


async def delete(ctx: CallContext, args: DeleteMemoryIn) -> DeleteMemoryOut:
    """Delete one memory, or every chunk of its document, with their vectors."""
    repo = MemoryItemsRepository(ctx.session)
    row = await _row(ctx, repo, args.id)
    deleted = await repo.delete(Members.of(row), args.document)
    return DeleteMemoryOut(id=str(args.id), deleted=deleted)


async def list_memories(ctx: CallContext, args: ListMemoriesIn) -> ListMemoriesOut:
    """Memories newest first (a push's chunks in document order), filtered in SQL; each text cut to a
    preview."""
    exists, project_id = await common.project_filter(ctx, args.project)
    if not exists:
        return ListMemoriesOut(memories=[], total=0)
    scope = Scope(
        project_id=project_id,
        memory_type=args.memory_type,
        tags=args.tags or None,
        source_prefix=args.source,
        kinds=list(args.kind) if args.kind else None,
        include_archived=args.include_archived,
    )
    repo = MemoryRepository(ctx.session)
    rows = await repo.list_memories(scope, ctx.embedder.model, args.limit, args.offset)
    total = await repo.count(scope)
    listed = []
    for row in rows:
        item = _item(row)
        cut = len(item.content) > PREVIEW_CHARS
        listed.append(ListedMemory(**{**item.model_dump(), "content": item.content[:PREVIEW_CHARS], "truncated": cut}))
    queued = await MemoryItemsRepository(ctx.session).queued_in(scope, ctx.embedder.model)
    nxt = args.offset + len(rows)
    return ListMemoriesOut(memories=listed, total=total, next_offset=nxt if nxt < total else None, queued=queued)
