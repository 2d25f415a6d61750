"""app/datasets/lifecycle.py: the server's start opens the DuckDB worker pool its settings shape (a
second start keeps it), and its stop closes the pool and its worker processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import Settings
from app.core.context import AppState
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.registry import Registry
from app.datasets import lifecycle
from app.datasets.config import DatasetSettings
from app.datasets.engine import pool
from app.datasets.storage import FolderStore, S3Store
from tests.support.engine import gone


@pytest.mark.slow  # worker processes
async def test_the_pool_starts_with_the_server_and_stops_with_it() -> None:
    pool.shutdown()
    db = Database("postgresql+asyncpg://unused@127.0.0.1:1/unused", Settings())  # never connected
    state = AppState(Settings(), db, LocalOnnxEmbedder(), Registry())
    state.feature_settings[DatasetSettings] = DatasetSettings(datasets_max_concurrency=1, datasets_memory_limit="256MB")
    try:
        await lifecycle.startup(state)
        started = pool.existing_pool()
        assert started is not None and started.size == 1
        assert started.memory == pool.memory_bytes(DatasetSettings().datasets_worker_memory_mb, "256MB")
        pids = started.pids()
        assert len(pids) > 1  # its slot and a spare, started at once
        await lifecycle.startup(state)
        assert pool.existing_pool() is started  # the same shape: the same pool
        await lifecycle.shutdown(state)
        assert pool.existing_pool() is None and started.closed
        assert gone(pids)
        await lifecycle.shutdown(state)  # a second stop has nothing left to do
    finally:
        pool.shutdown()
        await db.dispose()


def test_the_object_store_client_is_made_ahead_of_the_first_call(tmp_path: Path) -> None:
    remote = DatasetSettings(object_store_url="s3://bucket/prefix", datasets_object_cache_dir=tmp_path / "objects")
    store = lifecycle.warm_store(tmp_path, remote)
    assert isinstance(store, S3Store) and store._client is not None  # made, though nothing was sent
    assert lifecycle.warm_store(tmp_path, remote) is store  # the store every call of these settings uses
    local = lifecycle.warm_store(tmp_path, DatasetSettings())
    assert isinstance(local, FolderStore)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert (
        lifecycle.warm_store(tmp_path, remote.model_copy(update={"datasets_object_cache_dir": blocked / "x"})) is None
    )
