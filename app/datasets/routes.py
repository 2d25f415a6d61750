"""REST-only route: multipart upload of a dataset file, streamed to disk under a size limit and
registered by name. (A remote client cannot hand the server a path on its own disk.)

    POST /api/v1/datasets/upload   multipart/form-data: name, file, [description], [replace]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from python_multipart import MultipartParser
from python_multipart.multipart import parse_options_header

from app.core.context import AppState
from app.core.errors import InvalidInput, TooLarge, invalid_field
from app.core.executor import check_scope, run_operation
from app.core.rest_adapter import authenticate
from app.datasets import service
from app.datasets.config import data_roots, get_dataset_settings
from app.datasets.schemas import DATASET_NAME

router = APIRouter(prefix="/api/v1")
UPLOAD_PATH = "/api/v1/datasets/upload"
FIELD_MAX = 4096
FLUSH_BYTES = 1 << 20


class _Upload:
    """Multipart callbacks: small fields in memory, the file part streamed to a temp file."""

    def __init__(self, tmp: Path, limit: int) -> None:
        self.tmp = tmp
        self.limit = limit
        self.fields: dict[str, str] = {}
        self.filename: str | None = None
        self.size = 0
        self._headers: dict[str, str] = {}
        self._hname = b""
        self._hvalue = b""
        self._part: str | None = None
        self._is_file = False
        self._buf = bytearray()
        self._pending = bytearray()
        self._fh: Any = None
        self.too_large = False

    # header parsing
    def on_part_begin(self) -> None:
        self._headers, self._part, self._is_file, self._buf = {}, None, False, bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._hname += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._hvalue += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._hname.decode("latin-1").lower()] = self._hvalue.decode("latin-1")
        self._hname, self._hvalue = b"", b""

    def on_headers_finished(self) -> None:
        _, params = parse_options_header(self._headers.get("content-disposition", ""))
        self._part = params.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" in params:
            if self.filename is not None:
                raise InvalidInput("Send exactly one file part")
            self._is_file = True
            self.filename = os.path.basename(params[b"filename"].decode("utf-8", "replace"))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self._is_file:
            self.size += len(chunk)
            if self.size > self.limit:
                self.too_large = True
                raise TooLarge(
                    f"The upload exceeds {self.limit} bytes",
                    suggestions=[
                        "Compress the file (.csv.gz) or convert it to Parquet",
                        "The limit is CAIRN_DATASETS_UPLOAD_MAX_BYTES",
                    ],
                )
            self._pending += chunk
        else:
            self._buf += chunk
            if len(self._buf) > FIELD_MAX:
                raise InvalidInput(f"Form field '{self._part}' is longer than {FIELD_MAX} bytes")

    def on_part_end(self) -> None:
        if not self._is_file and self._part:
            self.fields[self._part] = self._buf.decode("utf-8", "replace").strip()

    def callbacks(self) -> dict[str, Any]:
        return {
            name: getattr(self, name)
            for name in (
                "on_part_begin",
                "on_header_field",
                "on_header_value",
                "on_header_end",
                "on_headers_finished",
                "on_part_data",
                "on_part_end",
            )
        }

    def take_pending(self) -> bytes:
        data = bytes(self._pending)
        self._pending.clear()
        return data


_FORM_SCHEMA = {
    "type": "object",
    "required": ["name", "file"],
    "properties": {
        "name": {"type": "string", "pattern": DATASET_NAME, "description": "Dataset name (also a SQL view name)"},
        "file": {
            "type": "string",
            "format": "binary",
            "description": "CSV/TSV/Parquet/JSON/NDJSON, optionally .gz/.zst",
        },
        "description": {"type": "string", "maxLength": FIELD_MAX},
        "replace": {"type": "boolean", "description": "Overwrite an existing dataset of this name"},
    },
}


@router.post(
    "/datasets/upload",
    tags=["datasets"],
    summary="Upload a dataset file (multipart) and register it.",
    operation_id="upload_dataset",
    openapi_extra={
        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": _FORM_SCHEMA}}},
        "security": [{"bearer": []}],
    },
)
async def upload_dataset(request: Request) -> JSONResponse:
    """Stream a CSV/Parquet/JSON file to the first data root (`uploads/<name><ext>`) and register it
    under `name`. Form fields: `name` (letters, digits, '_'), `file`, optional `description` and
    `replace` ("true" to overwrite an existing name). Needs the write scope. Answers 413 past
    CAIRN_DATASETS_UPLOAD_MAX_BYTES without keeping anything. The registration is the
    `upload_dataset` operation, run by the executor like every other call (rate limit, validation,
    transaction, audit row, metrics)."""
    principal = await authenticate(request)
    state: AppState = request.app.state.cairn
    op = state.registry.get("upload_dataset")
    assert op is not None, "the datasets feature declares upload_dataset"
    check_scope(op, principal)  # before reading a possibly large body
    limit = get_dataset_settings().datasets_upload_max_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit + 64 * 1024:
        raise TooLarge(
            f"The upload exceeds {limit} bytes", suggestions=["The limit is CAIRN_DATASETS_UPLOAD_MAX_BYTES"]
        )
    ctype, params = parse_options_header(request.headers.get("content-type", ""))
    if ctype != b"multipart/form-data" or b"boundary" not in params:
        raise InvalidInput("Send multipart/form-data with a 'file' part and a 'name' field")
    folder = service.upload_folder(await asyncio.to_thread(data_roots, state.settings.data_dir))
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    staged = f".incoming-{uuid.uuid4().hex}"
    tmp = folder / staged
    upload = _Upload(tmp, limit)
    parser = MultipartParser(params[b"boundary"], upload.callbacks())  # type: ignore[arg-type]
    fh = await asyncio.to_thread(open, tmp, "wb")
    try:
        async for chunk in request.stream():
            parser.write(chunk)
            if len(upload._pending) >= FLUSH_BYTES:
                await asyncio.to_thread(fh.write, upload.take_pending())
        parser.finalize()
        await asyncio.to_thread(fh.write, upload.take_pending())
        await asyncio.to_thread(fh.close)
        if upload.filename is None:
            raise invalid_field("file", "A 'file' part is required", rule="missing")
        args = {
            "name": upload.fields.get("name", ""),
            "staged": staged,
            "filename": upload.filename,
            "description": upload.fields.get("description", ""),
            "replace": upload.fields.get("replace", "").lower() in ("1", "true", "yes"),
            "bytes": upload.size,
        }
        result = await run_operation(state, op, args, principal, transport="rest", request_id=request.state.request_id)
        return JSONResponse(result.model_dump(mode="json"))
    finally:
        if not fh.closed:
            await asyncio.to_thread(fh.close)
        # Gone when the operation moved it into place; otherwise nothing of the upload is kept.
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(tmp.unlink)
