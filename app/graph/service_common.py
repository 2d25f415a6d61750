"""Helpers shared by the graph services: project resolution, re-embedding, token counting."""

from __future__ import annotations

import logging
import re
import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.context import CallContext
from app.core.embedding import EmbeddingUnavailable
from app.core.embedding_queue import EmbeddingTarget, enqueue
from app.core.errors import NotFound
from app.core.repository import ProjectRepository
from app.graph.repository import ENTITY_TARGET, REFLECTION_TARGET, EntityRow, GraphRepository
from app.graph.repository_search import SearchRepository

log = logging.getLogger("cairn.graph")

_WORD = re.compile(r"\w+", re.UNICODE)
LIMBIC, BASELINE = 1, 0  # the search treatments: limbic re-ranking, or the baseline order


async def project_id(ctx: CallContext, requested: str | None, *, create: bool) -> uuid.UUID | None:
    """The effective project's id (created for writes; None for reads of a missing project)."""
    name = ctx.project(requested)
    repo = ProjectRepository(ctx.session)
    if create:
        return await repo.ensure_id(name)
    return await repo.id_of(name)


async def query_vector(ctx: CallContext, text: str) -> list[float] | None:
    """The query's vector, or None when the model is unavailable (searches then use text alone).

    Call it before any SQL of the call, so that no transaction is open while the model runs."""
    try:
        return await ctx.embedder.embed_one(text)
    except EmbeddingUnavailable as exc:
        log.warning("graph search without vectors: %s", exc)
        return None


async def reembed(ctx: CallContext, repo: GraphRepository, entity_ids: list[int]) -> None:
    """Rebuild the searchable text of entities from their name, type and current observations, and
    queue their vectors (made by the embedding queue after the commit)."""
    snapshots = await repo.refresh_text(entity_ids)
    await enqueue(ctx, ENTITY_TARGET, [i for i, _ in snapshots])


async def _entity_texts(session: AsyncSession, refs: list[str]) -> dict[str, str]:
    return {str(k): v for k, v in (await GraphRepository(session).entity_texts([int(r) for r in refs])).items()}


async def _store_entities(session: AsyncSession, model: str, items: list[tuple[str, list[float]]]) -> None:
    await GraphRepository(session).upsert_embeddings([(int(r), v) for r, v in items], model)


async def _entities_missing(session: AsyncSession, model: str, limit: int) -> list[str]:
    return await GraphRepository(session).entities_missing_vectors(model, limit)


async def _reflection_texts(session: AsyncSession, refs: list[str]) -> dict[str, str]:
    return {str(k): v for k, v in (await SearchRepository(session).reflection_texts([int(r) for r in refs])).items()}


async def _store_reflections(session: AsyncSession, model: str, items: list[tuple[str, list[float]]]) -> None:
    await SearchRepository(session).upsert_reflection_embeddings([(int(r), v) for r, v in items], model)


async def _reflections_missing(session: AsyncSession, model: str, limit: int) -> list[str]:
    return await SearchRepository(session).reflections_missing_vectors(model, limit)


EMBEDDING_TARGETS = (
    EmbeddingTarget(ENTITY_TARGET, _entity_texts, _store_entities, _entities_missing),
    EmbeddingTarget(REFLECTION_TARGET, _reflection_texts, _store_reflections, _reflections_missing),
)


def not_found(name: str) -> NotFound:
    """The error for a missing entity (the reference server's wording)."""
    return NotFound(
        f"Entity with name {name} not found",
        suggestions=["Create it with create_entities, or check the name with search_nodes"],
    )


def require(rows: list[EntityRow], names: list[str]) -> dict[str, EntityRow]:
    """Rows by name; NotFound for the first requested name that is missing."""
    by_name = {r.name: r for r in rows}
    for n in names:
        if n not in by_name:
            raise not_found(n)
    return by_name


def query_words(query: str, cap: int = 32) -> list[str]:
    """Lower-cased words of a query for the OR full-text match."""
    words: list[str] = []
    for w in _WORD.findall(query.lower()):
        if w not in words:
            words.append(w)
    return words[:cap]
