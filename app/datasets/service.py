"""The datasets registry: list the project's datasets and readable files, register a name for a file
or glob, and upload a file into the project's folder (the REST route hands over the body through
`INCOMING`). Helpers shared by the datasets services live in `service_common`."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from app.core.context import CallContext
from app.core.errors import Conflict, InvalidInput, invalid_field, validation_error
from app.datasets import cuts
from app.datasets.config import DatasetSettings
from app.datasets.engine import exporting
from app.datasets.engine.sandbox import DATA_EXTENSIONS, file_format, inside, resolve_path
from app.datasets.models import Dataset
from app.datasets.repository import DatasetRepository
from app.datasets.schemas import (
    DatasetOut,
    FileOut,
    ListDatasetsIn,
    ListDatasetsOut,
    RegisterIn,
    RegisterOut,
    UploadForm,
    UploadIn,
    UploadOut,
)
from app.datasets.service_common import Space, space_of
from app.datasets.storage import FolderStore, project_key

MAX_LISTED_FILES = 200


def dataset_out(d: Dataset) -> DatasetOut:
    """API view of a registry row."""
    return DatasetOut(
        name=d.name,
        path=d.path,
        format=d.format,
        size_bytes=d.size_bytes,
        description=d.description,
        source=d.source,
        created_at=d.created_at,
    )


def _under(rel: str, under: str | None) -> bool:
    """Whether the relative path `rel` lies under the folder `under` (every path without one)."""
    if not under:
        return True
    folder = under.strip("/")
    return rel == folder or rel.startswith(folder + "/")


def _scan_files(rts: list[Path], limit: int, under: str | None = None) -> tuple[list[FileOut], bool]:
    """Data files in the roots (under the relative folder `under`, when given), by the shortest name
    that reads them back: relative to their root when no earlier root holds the same relative path,
    else absolute. Hidden files (staged uploads, exports being written) are skipped."""
    out: list[FileOut] = []
    for i, root in enumerate(rts):
        for path in sorted(root.rglob("*")):
            name = path.name.lower().removesuffix(".gz").removesuffix(".zst")
            rel = path.relative_to(root)
            hidden = any(part.startswith(".") for part in rel.parts)
            if hidden or not _under(str(rel), under) or not path.is_file() or not name.endswith(DATA_EXTENSIONS):
                continue
            if len(out) >= limit:
                return out, True
            shadowed = any((earlier / rel).exists() for earlier in rts[:i])
            out.append(
                FileOut(
                    path=str(path) if shadowed else str(rel),
                    format=file_format(str(path)),
                    size_bytes=path.stat().st_size,
                )
            )
    return out, False


def listed_files(space: Space, limit: int, under: str | None = None) -> tuple[list[FileOut], bool]:
    """`_scan_files` of the space's roots, then (with a remote store) the files of the project's folder
    that only the store holds (another host's uploads and exports), by their path in the folder; one a
    shared root shadows is left out, since that name reads the root's file."""
    out, more = _scan_files(space.roots, limit, under)
    if more or isinstance(space.store, FolderStore):
        return out, more
    listed = {f.path for f in out}
    prefix = f"projects/{space.project}/"
    for obj in sorted(space.store.listing(prefix), key=lambda o: o.key):
        rel = obj.key.removeprefix(prefix)
        name = rel.lower().rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".zst")
        hidden = any(part.startswith(".") for part in rel.split("/"))
        if rel in listed or hidden or not _under(rel, under) or not name.endswith(DATA_EXTENSIONS):
            continue
        if any((root / rel).exists() for root in space.roots):
            continue
        if len(out) >= limit:
            return out, True
        out.append(FileOut(path=rel, format=file_format(rel), size_bytes=obj.size))
    return out, False


async def list_datasets(ctx: CallContext, args: ListDatasetsIn) -> ListDatasetsOut:
    """The project's registered datasets and the data files it can read."""
    space = await space_of(ctx, args.project)
    rows, total = await DatasetRepository(ctx.session, space.project).list(args.limit, args.offset)
    rts = space.roots
    files, more = (
        (await asyncio.to_thread(listed_files, space, MAX_LISTED_FILES, args.files_under))
        if args.include_files
        else ([], False)
    )
    cut = None
    if more:
        # The narrower call: the files of one folder deeper than the one listed (the first listed file's).
        deeper = [
            str(Path(f.path).parent) for f in files if not _under(args.files_under or ".", str(Path(f.path).parent))
        ]
        parts = [f"files past the first {MAX_LISTED_FILES}"]
        reason = f"at most {MAX_LISTED_FILES} files listed"
        folder = next((d for d in deeper if d != "."), None)
        cut = (
            cuts.cut(reason, parts, "list_datasets", files_under=folder)
            if folder
            else cuts.cut(reason, parts, how="list_datasets with files_under naming a folder lists that folder's files")
        )
    nxt = args.offset + len(rows)
    return ListDatasetsOut(
        datasets=[dataset_out(d) for d in rows],
        total=total,
        next_offset=nxt if nxt < total else None,
        project=space.project,
        roots=[str(r) for r in rts],
        files=files,
        files_truncated=more,
        cut=cut,
    )


async def register_dataset(ctx: CallContext, args: RegisterIn) -> RegisterOut:
    """Register a name, in the caller's project, for a file or glob it can read."""
    space = await space_of(ctx, args.project)
    pattern, files = await asyncio.to_thread(resolve_path, args.path, space.roots)
    return await register(
        ctx,
        space,
        name=args.name,
        pattern=pattern,
        files=files,
        description=args.description,
        source="registered",
        replace=args.replace,
    )


UPLOAD_TYPES = re.compile(r"(\.(csv|tsv|txt|parquet|pq|json|jsonl|ndjson))(\.(gz|zst))?$", re.I)


@dataclasses.dataclass
class Received:
    """An upload body read to the end: the file staged under `staged` and the other form fields."""

    staged: Path
    filename: str
    fields: dict[str, str]
    size: int


class Incoming(Protocol):
    """The body of an upload request, read once into a folder (the route provides it)."""

    async def receive(self, folder: Path, limit: int) -> Received:
        """Stream the file part to a new hidden file in `folder` (at most `limit` bytes) and return
        what was received; a second call returns the same without reading again."""
        ...


# Set by the upload route around its call of the executor: the operation reads the body itself, so the
# rate limit, scope and project are checked before a byte of it is read.
INCOMING: ContextVar[Incoming | None] = ContextVar("datasets_incoming_upload", default=None)


def upload_folder(space: Space) -> Path:
    """Where a project's uploads live: `uploads/` in its own folder."""
    return space.folder / exporting.UPLOADS


async def upload_dataset(ctx: CallContext, args: UploadIn) -> UploadOut:
    """Read the upload body into the project's `uploads/` folder, then move the file into place as
    `uploads/<name><ext>` and register it under `name`. Nothing of a refused upload is kept."""
    incoming = INCOMING.get()
    if incoming is None:
        raise InvalidInput("upload_dataset reads a multipart body: POST /api/v1/datasets/upload")
    space = await space_of(ctx, args.project)
    folder = upload_folder(space)
    await asyncio.to_thread(exporting.destination, space.folder, exporting.UPLOADS, uploads=True)
    received = await incoming.receive(folder, ctx.feature_settings(DatasetSettings).datasets_upload_max_bytes)
    try:
        form = UploadForm.model_validate(received.fields)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None
    m = UPLOAD_TYPES.search(received.filename)
    if not m:
        raise invalid_field(
            "file",
            f"Unsupported file type: {received.filename[:200]}",
            rule="file_type",
            suggestions=["Upload CSV, TSV, Parquet, JSON or NDJSON (optionally .gz/.zst)"],
        )
    filename = f"{form.name}{m.group(0).lower()}"
    key = project_key(space.project, f"{exporting.UPLOADS}/{filename}")
    repo = DatasetRepository(ctx.session, space.project)
    existing = await repo.get(form.name)
    # A row written before the object store names the same file by its absolute path.
    if existing is not None and not form.replace and existing.path not in (key, str(folder / filename)):
        raise Conflict(
            f"Dataset '{form.name}' already exists for another path",
            suggestions=["Send replace=true to point the name at the upload"],
        )

    def put_in_place() -> None:
        try:
            space.store.put(key, received.staged, overwrite=form.replace, keep=False)
        except Conflict:
            raise Conflict(
                f"A dataset file named {filename} already exists", suggestions=["Send replace=true to overwrite it"]
            ) from None

    await asyncio.to_thread(put_in_place)
    result = await register(
        ctx,
        space,
        name=form.name,
        pattern=key,
        files=[],
        description=form.description,
        source="upload",
        replace=form.replace,
        size=received.size,
    )
    return UploadOut(dataset=result.dataset, created=result.created, bytes=received.size)


async def register(
    ctx: CallContext,
    space: Space,
    *,
    name: str,
    pattern: str,
    files: list[Path],
    description: str,
    source: str,
    replace: bool,
    size: int | None = None,
) -> RegisterOut:
    """Insert or update a registry row of the space's project (shared by the tool and the upload: its
    `pattern` is the object's store key, with no local `files`, and its `size` given)."""
    if not all(inside(f, space.roots) for f in files):
        raise InvalidInput("Every file must lie inside a data root or the project's folder")
    repo = DatasetRepository(ctx.session, space.project)
    existing = await repo.get(name)
    if existing is not None and not replace and existing.path != pattern:
        raise Conflict(
            f"Dataset '{name}' already exists for another path",
            suggestions=["Pass replace=true to point the name at the new path"],
        )
    if size is None:
        size = await asyncio.to_thread(lambda: sum(f.stat().st_size for f in files))
    row, created = await repo.upsert(
        name=name,
        path=pattern,
        fmt=file_format(str(files[0]) if files else pattern),
        size_bytes=size,
        description=description,
        source=source,
        created_by=ctx.principal.key_id,
        replace=True,
    )
    return RegisterOut(dataset=dataset_out(row), created=created)
