"""Input and output models of the memory-item tools: one stored memory by id (read, retag, delete)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.core.schemas import PROJECT_NAME, StrictModel
from app.memory.schemas import MAX_TAGS, MemoryType, Tag

DOCUMENT_DESCRIPTION = (
    "true: every chunk of the memory's document (push splits a document into chunks sharing a document_id); "
    "false: this memory only"
)


def _absent(value: Any) -> bool:
    return value is None


class GetMemoryIn(StrictModel):
    """Arguments of get_memory."""

    id: uuid.UUID
    chunk_offset: int = Field(default=0, ge=0, description="First chunk of its document listed (by chunk_index)")
    chunk_limit: int = Field(default=20, ge=0, le=100, description="Chunks of its document listed (0: none)")


class MemoryItem(BaseModel):
    """One stored memory: a pushed chunk, a captured thought or a summary."""

    id: str
    kind: str = Field(description="chunk (pushed document), thought or summary")
    memory_type: str
    project: str
    collection: str
    content: str
    tags: list[str]
    metadata: dict[str, Any]
    source_uri: str | None = Field(default=None, exclude_if=_absent)
    document_id: str | None = Field(default=None, exclude_if=_absent, description="Shared by a document's chunks")
    chunk_index: int | None = Field(default=None, exclude_if=_absent)
    archived: bool
    created_at: datetime
    updated_at: datetime


class MemoryChunk(BaseModel):
    """One chunk of the memory's document."""

    id: str
    chunk_index: int | None = Field(default=None, exclude_if=_absent)
    content: str
    vectors: list[str] = Field(description="Embedding models that hold a vector of this chunk")


class EmbeddingStatus(BaseModel):
    """How many of the document's memories have a vector of one model."""

    model: str
    active: bool = Field(description="The model searches use now")
    embedded: int = Field(description="Memories with a vector of this model")
    missing: int = Field(description="Memories without one")
    queued: int = Field(description="Memories waiting in the embedding queue for this model")


class GetMemoryOut(BaseModel):
    """Result of get_memory."""

    memory: MemoryItem
    chunks: list[MemoryChunk] = Field(description="Chunks of its document in order (itself alone when it has none)")
    chunks_total: int
    next_chunk_offset: int | None = Field(default=None, description="chunk_offset of the next page, null at the end")
    embeddings: list[EmbeddingStatus] = Field(
        description="Per model (the active one first): vectors of the document's memories"
    )


class UpdateMemoryIn(StrictModel):
    """Arguments of update_memory."""

    id: uuid.UUID
    tags: list[Tag] = Field(max_length=MAX_TAGS, description="The new tag list (replaces the old one; [] clears it)")
    document: bool = Field(default=False, description=DOCUMENT_DESCRIPTION)


class UpdateMemoryOut(BaseModel):
    """Result of update_memory."""

    id: str
    tags: list[str] = Field(description="The stored tags (sorted, without duplicates)")
    updated: int = Field(description="Memories changed")


class DeleteMemoryIn(StrictModel):
    """Arguments of delete_memory."""

    id: uuid.UUID
    document: bool = Field(default=False, description=DOCUMENT_DESCRIPTION)


class DeleteMemoryOut(BaseModel):
    """Result of delete_memory."""

    id: str
    deleted: int = Field(description="Memories deleted (with their vectors)")


MemoryKind = Literal["chunk", "thought", "summary"]
PREVIEW_CHARS = 500  # of each listed memory's text (get_memory has the whole)


class ListMemoriesIn(StrictModel):
    """Arguments of list_memories."""

    project: str | None = Field(
        default=None, pattern=PROJECT_NAME, description="Project name (default: every project; a bound key: its own)"
    )
    memory_type: MemoryType | None = None
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS, description="Any of these tags")
    source: str | None = Field(default=None, min_length=1, max_length=1000, description="source_uri starts with this")
    kind: list[MemoryKind] | None = Field(
        default=None, max_length=3, description="Any of these kinds: chunk (pushed with push), thought, summary"
    )
    include_archived: bool = False
    limit: int = Field(default=25, ge=1, le=100)
    offset: int = Field(default=0, ge=0)


class ListedMemory(MemoryItem):
    """One memory of a listing: its text cut to a preview."""

    truncated: bool = Field(default=False, description=f"true: content is the first {PREVIEW_CHARS} characters")


class ListMemoriesOut(BaseModel):
    """A page of memories, newest first."""

    memories: list[ListedMemory]
    total: int
    next_offset: int | None = Field(default=None, description="offset of the next page, null at the end")
    queued: int = Field(
        default=0, description="Memories of these filters waiting in the embedding queue (active model)"
    )
