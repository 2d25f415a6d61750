"""Lifespan hooks of the datasets feature: the DuckDB worker processes (`app.datasets.engine.pool`) start
with the server, so the first query does not wait for them, and stop with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.context import feature_settings_of
from app.datasets.config import DatasetSettings
from app.datasets.engine import pool

if TYPE_CHECKING:
    from app.core.context import AppState


async def startup(state: AppState) -> None:
    """Start the worker processes (they finish starting in the background)."""
    settings = feature_settings_of(state.feature_settings, DatasetSettings)
    pool.pool_of(settings.datasets_max_concurrency, settings.datasets_memory_limit)


async def shutdown(state: AppState) -> None:
    """Stop the worker processes (a call still running ends first)."""
    pool.shutdown()
