"""app/datasets/operations_downloads.py: download_export is declared for the console alone (no MCP tool,
no REST route) and, called with a real context, hands over a file of the caller's own project folder,
keeps a bound key to its project and turns a filesystem failure into the caller's error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from app.core.config import Settings
from app.core.context import AppState, CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.errors import Forbidden, InvalidInput, NotFound
from app.core.registry import Registry
from app.datasets.config import DatasetSettings
from app.datasets.operations_downloads import download_export, ops
from app.datasets.schemas_downloads import DownloadIn, DownloadOut
from tests.support.server import PgCluster

READER = Principal(key_id="r", name="reader", scopes=frozenset({"read"}))
BOUND = Principal(key_id="b", name="bound", scopes=frozenset({"read"}), project="lab")


@asynccontextmanager
async def call(pg: PgCluster, data: Path, principal: Principal = READER) -> AsyncIterator[CallContext]:
    db = Database(pg.url, Settings())
    state = AppState(Settings(data_dir=data), db, LocalOnnxEmbedder(), Registry())
    state.feature_settings[DatasetSettings] = DatasetSettings()
    try:
        async with db.transaction() as s:
            yield CallContext(session=s, principal=principal, app=state, request_id="t", transport="test")
    finally:
        await db.dispose()


def test_it_is_declared_for_the_console_alone() -> None:
    (op,) = ops.operations
    assert (op.name, op.method, op.path, op.scope) == ("download_export", "GET", "/datasets/exports/download", "read")
    assert not op.mcp and not op.rest and op.read_only and not op.destructive
    assert op.input_model is DownloadIn and op.output_model is DownloadOut and op.handler is download_export


async def test_a_file_of_the_callers_own_folder_is_handed_over(pg: PgCluster, tmp_path: Path) -> None:
    async with call(pg, tmp_path) as ctx:
        with pytest.raises(NotFound):
            await download_export(ctx, DownloadIn(path="exports/sales.csv", project="lab"))
        folder = tmp_path / "datasets-projects" / "lab"
        (folder / "exports").mkdir(parents=True)
        (folder / "exports" / "sales.csv").write_text("a,b\n1,2\n")
        out = await download_export(ctx, DownloadIn(path="exports/sales.csv", project="lab"))
        assert isinstance(out, DownloadOut)
        assert (out.relative_path, out.size_bytes, out.media_type) == ("exports/sales.csv", 8, "text/csv")
        assert out.path == str(folder / "exports" / "sales.csv")
        with pytest.raises(NotFound):  # the same path in another project's folder
            await download_export(ctx, DownloadIn(path="exports/sales.csv", project="other"))
        with pytest.raises(InvalidInput):  # a name too long for the filesystem: its error, not an OSError
            await download_export(ctx, DownloadIn(path="exports/" + "n" * 300, project="lab"))
    async with call(pg, tmp_path, BOUND) as ctx:
        bound = await download_export(ctx, DownloadIn(path="exports/sales.csv"))
        assert isinstance(bound, DownloadOut) and bound.name == "sales.csv"
        with pytest.raises(Forbidden):
            await download_export(ctx, DownloadIn(path="exports/sales.csv", project="other"))
