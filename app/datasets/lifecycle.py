"""Lifespan hooks of the datasets feature: the DuckDB worker processes (`app.datasets.engine.pool`) start
with the server, so the first query does not wait for them, and stop with it; the object store's client,
when one is set, is made in the background meanwhile."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.context import feature_settings_of
from app.datasets.config import DatasetSettings
from app.datasets.engine import pool
from app.datasets.service_common import make_store
from app.datasets.storage import S3Store, Store

if TYPE_CHECKING:
    from app.core.context import AppState


async def startup(state: AppState) -> None:
    """Start the worker processes (they finish starting in the background)."""
    settings = feature_settings_of(state.feature_settings, DatasetSettings)
    pool.pool_of(settings.datasets_max_concurrency, settings.datasets_memory_limit)
    if settings.object_store_url:
        # boto3's import and its client take about a second: made now, in a thread, not in the first call.
        _WARMING.append(asyncio.get_running_loop().run_in_executor(None, warm_store, state.settings.data_dir, settings))


log = logging.getLogger("cairn.datasets")
_WARMING: list[asyncio.Future[Any]] = []


def warm_store(data_dir: Path, settings: DatasetSettings) -> Store | None:
    """Make the store of `settings` and, for an object store, its client (no request is sent); None
    when that fails (the first call that needs the store reports why). Blocks."""
    try:
        store = make_store(data_dir, settings)
        if isinstance(store, S3Store):
            store.client  # noqa: B018 (made on first use)
        return store
    except Exception as exc:
        log.warning("the datasets object store could not be prepared: %s", exc)
        return None


async def shutdown(state: AppState) -> None:
    """Stop the worker processes (a call still running ends first)."""
    _WARMING.clear()
    pool.shutdown()
