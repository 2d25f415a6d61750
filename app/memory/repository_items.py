"""The SQL of the memory-item tools: one memory by id, its document's chunks and their vectors."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from app.core.embeddings.repository import EmbeddingQueueRepository
from app.core.repository import Repository
from app.memory.repository import MEMORY_COLUMNS, MEMORY_FROM, MEMORY_TARGET, Scope


@dataclass(frozen=True)
class Members:
    """The memories a document-wide call covers: the chunks of one push (they share `document_id`,
    indexed by ix_memories_document), or the memory alone when it has no document."""

    memory_id: uuid.UUID
    project_id: uuid.UUID
    collection_id: uuid.UUID
    document_id: uuid.UUID | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> Members:
        """The members of the document of the memory `row` (`MemoryItemsRepository.get`)."""
        return cls(row["id"], row["project_id"], row["collection_id"], row["document_id"])

    def where(self, document: bool = True) -> tuple[str, dict[str, Any]]:
        """The WHERE clause (alias `m`) and its parameters: the document's chunks, or the memory alone."""
        if not document or self.document_id is None:
            return "m.id = :m_id", {"m_id": self.memory_id}
        params: dict[str, Any] = {"m_p": self.project_id, "m_c": self.collection_id, "m_d": self.document_id}
        return "m.document_id = :m_d AND m.project_id = :m_p AND m.collection_id = :m_c", params


class MemoryItemsRepository(Repository):
    """One memory, the chunks of its document, their vectors and queued embeddings; retag and delete."""

    async def get(self, memory_id: uuid.UUID) -> dict[str, Any] | None:
        """One memory with its project and collection names (and ids)."""
        rows = await self.dicts(
            f"SELECT {MEMORY_COLUMNS}, m.collection_id FROM {MEMORY_FROM} WHERE m.id = :id", {"id": memory_id}
        )
        return rows[0] if rows else None

    async def chunks(self, members: Members, offset: int, limit: int) -> list[dict[str, Any]]:
        """A page of the document's chunks by chunk index, each with the models that hold a vector of it."""
        where, params = members.where()
        return await self.dicts(
            "SELECT m.id, m.chunk_index, m.content, COALESCE((SELECT array_agg(e.model ORDER BY e.model) "
            "FROM memory_embeddings e WHERE e.memory_id = m.id), '{}') AS vectors "
            f"FROM memories m WHERE {where} ORDER BY m.chunk_index NULLS FIRST, m.created_at, m.id "
            "LIMIT :limit OFFSET :offset",
            {**params, "limit": limit, "offset": offset},
        )

    async def count(self, members: Members) -> int:
        """How many memories the document holds."""
        where, params = members.where()
        return int(await self.scalar(f"SELECT count(*) FROM memories m WHERE {where}", params) or 0)

    async def vector_counts(self, members: Members) -> dict[str, int]:
        """Per embedding model: how many of the document's memories have a vector of it."""
        where, params = members.where()
        rows = await self.dicts(
            "SELECT e.model, count(*) AS n FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id "
            f"WHERE {where} GROUP BY e.model",
            params,
        )
        return {r["model"]: int(r["n"]) for r in rows}

    async def queued_counts(self, members: Members) -> dict[str, int]:
        """Per embedding model: how many of the document's memories wait in the embedding queue."""
        where, params = members.where()
        refs = f"SELECT m.id::text FROM memories m WHERE {where}"
        return await EmbeddingQueueRepository(self.session).queued_by_model(MEMORY_TARGET, refs, params)

    async def queued_in(self, scope: Scope, model: str) -> int:
        """How many memories in `scope` wait in the embedding queue for `model`."""
        where, params = scope.where()
        refs = f"SELECT m.id::text FROM memories m WHERE {where}"
        queued = await EmbeddingQueueRepository(self.session).queued_by_model(MEMORY_TARGET, refs, params)
        return queued.get(model, 0)

    async def set_tags(self, members: Members, tags: list[str], document: bool) -> int:
        """Replace the tags of the memory (or of its document's chunks); returns the rows changed."""
        where, params = members.where(document)
        return await self.rowcount(
            f"UPDATE memories m SET tags = CAST(:tags AS text[]), updated_at = now() WHERE {where}",
            {**params, "tags": tags},
        )

    async def delete(self, members: Members, document: bool) -> int:
        """Delete the memory (or its document's chunks); vectors go with them. Returns the rows deleted."""
        where, params = members.where(document)
        return await self.rowcount(f"DELETE FROM memories m WHERE {where}", params)
