"""download_export: the check behind the console's download of an exported file (no MCP tool, no REST
route: the console's download page calls it through the executor, then streams the file).
`operations.py` adds this set to the family's operations (`ops.include`)."""

from __future__ import annotations

from app.core.context import CallContext
from app.core.registry import OperationSet
from app.datasets import service_downloads
from app.datasets.schemas_downloads import DownloadIn, DownloadOut
from app.datasets.service_common import storage_errors

ops = OperationSet("datasets")


@ops.operation(
    name="download_export",
    title="Download Export",
    input=DownloadIn,
    output=DownloadOut,
    path="/datasets/exports/download",
    method="GET",
    read_only=True,
    mcp=False,
    rest=False,
)
async def download_export(ctx: CallContext, args: DownloadIn) -> DownloadOut:
    """Check that a file of the project's own folder (an export, or an upload) may be sent to the
    caller: inside the folder of the caller's project, a regular file, not hidden, no symbolic link on
    the way. Returns its path, size and media type; the console then streams it."""
    with storage_errors():
        return await service_downloads.download_export(ctx, args)
