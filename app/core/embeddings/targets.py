"""What the embedding queue embeds: each family's rows as an `EmbeddingTarget`.

A family declares its rows as `app.core.embeddings.vectors.EmbeddedRows` and hands
`embedding_target(rows)` to its `Feature`; the queue reads texts, stores vectors and sweeps for rows
lacking one through it, and never names a family.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.embeddings.repository import VectorRepository
from app.core.embeddings.vectors import KEY_TYPES, EmbeddedRows, vector_param

__all__ = ["EmbeddingTarget", "embedding_target"]

Texts = Callable[[AsyncSession, list[str]], Awaitable[dict[str, str]]]
Store = Callable[[AsyncSession, str, list[tuple[str, list[float]]]], Awaitable[None]]
Missing = Callable[[AsyncSession, str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class EmbeddingTarget:
    """Rows of one kind that carry a vector per model.

    - `name`: the queue's `target` value (e.g. ``memory``, ``graph_entity``).
    - `texts(session, refs)`: the current text of each ref that still exists (missing refs are
      dropped from the queue).
    - `store(session, model, [(ref, vector)])`: upsert the vectors of `model`.
    - `missing(session, model, limit)`: up to `limit` refs that have no vector of `model` and are
      not queued for it (the sweep after a model switch, and backfills).
    """

    name: str
    texts: Texts
    store: Store
    missing: Missing


def embedding_target(rows: EmbeddedRows) -> EmbeddingTarget:
    """The embedding queue's view of `rows`: read their texts, store their vectors (one statement per
    batch), list those lacking a vector of a model."""
    key = KEY_TYPES[rows.key_type]

    async def texts(session: AsyncSession, refs: list[str]) -> dict[str, str]:
        return await VectorRepository(session).texts(rows, [key(r) for r in refs])

    async def store(session: AsyncSession, model: str, items: list[tuple[str, list[float]]]) -> None:
        latest = {key(r): v for r, v in items}  # one statement may not write a row twice
        await VectorRepository(session).store(rows, model, list(latest), [vector_param(v) for v in latest.values()])

    async def missing(session: AsyncSession, model: str, limit: int) -> list[str]:
        return await VectorRepository(session).missing(rows, model, limit)

    return EmbeddingTarget(rows.target, texts, store, missing)
