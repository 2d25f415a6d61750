"""Lifespan hooks of the datasets feature: the DuckDB worker processes (`app.datasets.engine.pool`) start
with the server, so the first query does not wait for them, and stop with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.datasets.config import get_dataset_settings
from app.datasets.engine import pool

if TYPE_CHECKING:
    from app.core.context import AppState


async def startup(state: AppState) -> None:
    """Start the worker processes (they finish starting in the background)."""
    settings = get_dataset_settings()
    pool.pool_of(settings.datasets_max_concurrency, settings.datasets_memory_limit)


async def shutdown(state: AppState) -> None:
    """Stop the worker processes (a call still running ends first)."""
    pool.shutdown()
