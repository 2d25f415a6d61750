"""Helpers shared by both dialects: projects, collections, hashing, embedding with error mapping."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

from app.core.context import CallContext
from app.core.embedding import EmbeddingUnavailable
from app.core.errors import NotFound, SchemaError, Unavailable
from app.core.models import Project
from app.core.repository import ProjectRepository
from app.memory.config import MemorySettings
from app.memory.models import MemoryCollection
from app.memory.repository import MemoryRepository


def settings(ctx: CallContext) -> MemorySettings:
    """The memory settings."""
    return ctx.feature_settings(MemorySettings)


def content_hash(text: str) -> str:
    """SHA-256 of a text (the dedupe key of chunks)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def key_of(*parts: Any) -> str:
    """A stable key for a set of parameters (a summary's identity)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


async def project_for_write(ctx: CallContext, requested: str | None) -> Project:
    """The effective project (bound keys enforced), created when missing."""
    return await ProjectRepository(ctx.session).ensure(ctx.project(requested))


async def project_for_read(ctx: CallContext, requested: str | None) -> tuple[str, Project | None]:
    """The effective project name and its row (None when it does not exist yet)."""
    name = ctx.project(requested)
    return name, await ProjectRepository(ctx.session).get(name)


async def project_filter(ctx: CallContext, requested: str | None) -> tuple[bool, uuid.UUID | None]:
    """Thoughts dialect: no project means every project (a bound key: its own).

    Returns (exists, project id or None for all)."""
    name = requested or ctx.bound_project
    if name is None:
        return True, None
    ctx.project(name)
    row = await ProjectRepository(ctx.session).get(name)
    return (row is not None), (row.id if row is not None else None)


async def collection_for_write(ctx: CallContext, name: str | None) -> MemoryCollection:
    """The named (or default) collection, created for the active model when missing; its vector size must
    match the active model."""
    repo = MemoryRepository(ctx.session)
    coll, _ = await repo.ensure_collection(
        name or settings(ctx).memory_default_collection, ctx.embedder.model, ctx.embedder.dimension
    )
    if coll.vector_size != ctx.embedder.dimension:
        raise SchemaError(
            f"Collection '{coll.name}' holds {coll.vector_size}-d vectors but the active model "
            f"{ctx.embedder.model} makes {ctx.embedder.dimension}-d ones",
            suggestions=[
                f"Resize it with new-collection(name='{coll.name}', vector_size={ctx.embedder.dimension})",
                "Or push into another collection",
            ],
        )
    return coll


async def collection_for_read(ctx: CallContext, name: str | None) -> MemoryCollection | None:
    """The named collection (NotFound when it was named and is missing) or the default one (None if absent)."""
    coll = await MemoryRepository(ctx.session).get_collection(name or settings(ctx).memory_default_collection)
    if coll is None and name is not None:
        raise NotFound(f"No collection named '{name}'", suggestions=["List them with get-collections"])
    return coll


async def embed(ctx: CallContext, texts: Sequence[str]) -> list[list[float]]:
    """Embed with the active model; an unreachable embedder becomes Unavailable (5030)."""
    try:
        return await ctx.embedder.embed(list(texts))
    except EmbeddingUnavailable as exc:
        raise Unavailable(f"The embedding model is unavailable: {exc}") from exc
