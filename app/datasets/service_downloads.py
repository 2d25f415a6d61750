"""download_export: check that the caller's project may read a file of its own folder (an export or
an upload) before the console streams it. Only the project's private folder is served: never a shared
data root, another project's folder, a hidden file (an export or upload being written) or anything
reached through a symbolic link. With an object store, a file another host wrote is read from the store."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from app.core.context import CallContext
from app.core.errors import Forbidden, InvalidInput, NotFound
from app.datasets.engine.exporting import storage_error
from app.datasets.schemas_downloads import DownloadIn, DownloadOut
from app.datasets.service_common import Space, space_of
from app.datasets.storage import FolderStore, project_key

MEDIA_TYPES = {
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson",
    ".parquet": "application/vnd.apache.parquet",
    ".pq": "application/vnd.apache.parquet",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".gz": "application/gzip",
    ".zst": "application/zstd",
}


def media_type(name: str) -> str:
    """The media type a download is sent with (by its last extension)."""
    return MEDIA_TYPES.get(Path(name).suffix.lower(), "application/octet-stream")


def checked_file(folder: Path, raw: str) -> DownloadOut:
    """The regular file `raw` names inside `folder`, reached without a symbolic link.

    Raises:
        InvalidInput: an empty path or one naming the folder itself.
        Forbidden: a path outside the folder, or a symbolic link on the way.
        NotFound: no such file, a hidden one, or not a regular file.
    """
    text = raw.strip()
    if not text or "\x00" in text:
        raise InvalidInput("path is empty or invalid")
    path = Path(os.path.normpath(text if os.path.isabs(text) else folder / text))
    if path == folder:
        raise InvalidInput("path names the project's folder, not a file")
    if not path.is_relative_to(folder):
        raise Forbidden(
            f"'{raw[:200]}' is outside this project's folder: only its own exports and uploads are downloaded",
            suggestions=["Use the path export_result reported, with the project that exported it"],
        )
    rel = path.relative_to(folder)
    gone = NotFound(f"No file '{rel}' in this project's folder", suggestions=["Export the result again"])
    if any(part.startswith(".") for part in rel.parts):
        raise gone
    current = folder
    try:
        for part in rel.parts:
            current = current / part
            st = os.lstat(current)
            if stat.S_ISLNK(st.st_mode):
                raise Forbidden(f"'{part}' is a symbolic link: downloads never follow links")
    except (FileNotFoundError, NotADirectoryError):
        raise gone from None
    except OSError as exc:
        raise storage_error(exc, f"the file '{rel}'") from None
    if not stat.S_ISREG(st.st_mode):
        raise NotFound(f"'{rel}' is not a file", suggestions=["Partitioned exports are folders: download each file"])
    return DownloadOut(
        path=str(path), relative_path=str(rel), name=path.name, size_bytes=st.st_size, media_type=media_type(path.name)
    )


def checked_or_stored(space: Space, raw: str) -> DownloadOut:
    """`checked_file` in the project's folder; a file missing there (written by another host of a
    fleet) is read from the space's store, by the same relative path."""
    try:
        return checked_file(space.folder, raw)
    except NotFound:
        if isinstance(space.store, FolderStore):
            raise
        path = Path(os.path.normpath(raw.strip() if os.path.isabs(raw.strip()) else space.folder / raw.strip()))
        rel = path.relative_to(space.folder)  # checked_file refused a path outside the folder
        local = (
            None if any(p.startswith(".") for p in rel.parts) else space.store.fetch(project_key(space.project, rel))
        )
        if local is None:
            raise
    return DownloadOut(
        path=str(local),
        relative_path=str(rel),
        name=rel.name,
        size_bytes=local.stat().st_size,
        media_type=media_type(rel.name),
    )


async def download_export(ctx: CallContext, args: DownloadIn) -> DownloadOut:
    """The file of the caller's project folder that `args.path` names, checked for download."""
    space = await space_of(ctx, args.project)
    return await asyncio.to_thread(checked_or_stored, space, args.path)
