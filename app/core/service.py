"""Core use cases: projects and the embedding probe."""

from __future__ import annotations

import time

from app.core.context import CallContext
from app.core.errors import Unavailable
from app.core.models import Project
from app.core.repository import ProjectRepository
from app.core.schemas import ProjectOut
from app.core.tokens import count_tokens


def project_out(p: Project) -> ProjectOut:
    """API shape of a project row."""
    return ProjectOut(id=str(p.id), name=p.name, description=p.description, created_at=p.created_at)


async def create_project(ctx: CallContext, name: str, description: str) -> tuple[ProjectOut, bool]:
    """Create a project (a bound key may only create its own)."""
    ctx.project(name)
    repo = ProjectRepository(ctx.session)
    created = await repo.create(name, description)
    if created is not None:
        return project_out(created), True
    existing = await repo.get(name)
    assert existing is not None
    return project_out(existing), False


async def list_projects(ctx: CallContext, limit: int, offset: int) -> tuple[list[ProjectOut], int]:
    """Projects visible to the caller."""
    repo = ProjectRepository(ctx.session)
    only = ctx.bound_project
    rows = await repo.list(only=only, limit=limit, offset=offset)
    return [project_out(p) for p in rows], await repo.count(only=only)


async def embed_summary(ctx: CallContext, text: str) -> dict[str, object]:
    """Embed one text and summarise the vector."""
    vector = await ctx.embedder.embed_one(text)
    norm = sum(v * v for v in vector) ** 0.5
    tokens = count_tokens(text)
    return {
        "model": ctx.embedder.model,
        "provider": ctx.embedder.provider,
        "dimension": len(vector),
        "norm": round(norm, 6),
        "head": [round(v, 5) for v in vector[:8]],
        "tokens": tokens,
        "truncated": tokens + 2 > ctx.settings.embedding_max_length,
    }


async def wait_for_embeddings(ctx: CallContext, timeout: float) -> dict[str, object]:
    """Help the queue workers until no row waits for a vector of the active model, or `timeout`."""
    started = time.perf_counter()
    queue = ctx.app.queue
    if queue is None:
        raise Unavailable("This process runs no embedding queue")
    stats = await queue.drain(timeout)
    return {
        "model": queue.model,
        "drained": stats.depth == 0,
        "depth": stats.depth,
        "waited_ms": round((time.perf_counter() - started) * 1000, 1),
    }
