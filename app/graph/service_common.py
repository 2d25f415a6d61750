"""Helpers shared by the graph services: project resolution, re-embedding, token counting."""

from __future__ import annotations

import re
import uuid

from app.core.context import CallContext
from app.core.embedding import EmbeddingUnavailable
from app.core.errors import NotFound, Unavailable
from app.core.repository import ProjectRepository
from app.graph.repository import EntityRow, GraphRepository

_WORD = re.compile(r"\w+", re.UNICODE)
LIMBIC, BASELINE = 1, 0  # the search treatments: limbic re-ranking, or the baseline order


async def project_id(ctx: CallContext, requested: str | None, *, create: bool) -> uuid.UUID | None:
    """The effective project's id (created for writes; None for reads of a missing project)."""
    name = ctx.project(requested)
    repo = ProjectRepository(ctx.session)
    if create:
        return (await repo.ensure(name)).id
    project = await repo.get(name)
    return project.id if project is not None else None


async def embed(ctx: CallContext, texts: list[str]) -> list[list[float]]:
    """Embed texts with the active model; an unreachable model is a 5030, not an internal error."""
    try:
        return await ctx.embedder.embed(texts)
    except EmbeddingUnavailable as exc:
        raise Unavailable(f"The embedding model is unavailable: {exc}") from exc


async def reembed(ctx: CallContext, repo: GraphRepository, entity_ids: list[int]) -> None:
    """Rebuild the searchable text and the embedding of entities from a full snapshot of their
    name, type and current observations."""
    snapshots = await repo.refresh_text(entity_ids)
    if not snapshots:
        return
    vectors = await embed(ctx, [s for _, s in snapshots])
    await repo.upsert_embeddings([(i, v) for (i, _), v in zip(snapshots, vectors, strict=True)], ctx.embedder.model)


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
