"""Helpers shared by the graph services: project resolution, re-embedding, token counting."""

from __future__ import annotations

import logging
import uuid

from app.core.context import CallContext
from app.core.embeddings.calls import enqueue
from app.core.embeddings.targets import embedding_target
from app.core.errors import NotFound
from app.core.repository import ProjectRepository
from app.graph.repository import ENTITY_TARGET, ENTITY_VECTORS, EntityRow, GraphRepository
from app.graph.repository_search import REFLECTION_VECTORS

log = logging.getLogger("cairn.graph")

LIMBIC, BASELINE = 1, 0  # the search treatments: limbic re-ranking, or the baseline order


async def project_id(ctx: CallContext, requested: str | None, *, create: bool) -> uuid.UUID | None:
    """The effective project's id (created for writes; None for reads of a missing project)."""
    name = ctx.project(requested)
    repo = ProjectRepository(ctx.session)
    if create:
        return await repo.ensure_id(name)
    return await repo.id_of(name)


async def reembed(ctx: CallContext, repo: GraphRepository, entity_ids: list[int]) -> None:
    """Rebuild the searchable text of entities from their name, type and current observations, and
    queue their vectors (made by the embedding queue after the commit)."""
    snapshots = await repo.refresh_text(entity_ids)
    await enqueue(ctx, ENTITY_TARGET, [i for i, _ in snapshots])


EMBEDDING_TARGETS = (embedding_target(ENTITY_VECTORS), embedding_target(REFLECTION_VECTORS))


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
