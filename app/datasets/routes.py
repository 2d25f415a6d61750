"""REST-only route: multipart upload of a dataset file, streamed to disk under a size limit and
registered by name. (A remote client cannot hand the server a path on its own disk.)

    POST /api/v1/datasets/upload[?project=...]   multipart/form-data: name, file, [description], [replace]

The route authenticates, then hands the whole call to the executor as the `upload_dataset` operation:
the rate limit, the argument check (the query string), the scope and the project binding all run
before a byte of the body is read, and every outcome — refusals while reading included — is one call
with its audit row. The operation reads the body through `MultipartUpload`, set in
`service.INCOMING` for the duration of the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect

from app.core.context import AppState
from app.core.errors import InvalidInput, TooLarge, invalid_field
from app.core.executor import run_operation
from app.core.http.rest_adapter import authenticate
from app.core.schemas import PROJECT_NAME
from app.datasets import service
from app.datasets.schemas import DATASET_NAME

router = APIRouter(prefix="/api/v1")
UPLOAD_PATH = "/api/v1/datasets/upload"
FIELDS = ("name", "description", "replace")  # the form fields besides `file`
FIELD_MAX = 4096  # bytes of one form field
MAX_PARTS = 1 + len(FIELDS)  # the file and each field once
MAX_HEADERS = 8  # headers of one part
HEADER_MAX = 4096  # bytes of one part's headers
OVERHEAD = 64 * 1024  # body bytes besides the file: boundaries, headers, fields
FLUSH_BYTES = 1 << 20


class _Parts:
    """Multipart callbacks: the form fields in memory (each known name once, bounded), the file part
    handed over in chunks to be written to disk."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fields: dict[str, str] = {}
        self.filename: str | None = None
        self.size = 0
        self.ended = False
        self._parts = 0
        self._headers: dict[str, str] = {}
        self._header_bytes = 0
        self._hname = b""
        self._hvalue = b""
        self._part: str | None = None
        self._is_file = False
        self._buf = bytearray()
        self.pending = bytearray()

    def on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise InvalidInput(
                f"The form has more than {MAX_PARTS} parts; send the file and at most {', '.join(FIELDS)}"
            )
        self._headers, self._part, self._is_file, self._buf, self._header_bytes = {}, None, False, bytearray(), 0

    def _count_header(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > HEADER_MAX:
            raise InvalidInput(f"The headers of a form part exceed {HEADER_MAX} bytes")

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._hname += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._hvalue += data[start:end]

    def on_header_end(self) -> None:
        if len(self._headers) >= MAX_HEADERS:
            raise InvalidInput(f"A form part has more than {MAX_HEADERS} headers")
        self._headers[self._hname.decode("latin-1").lower()] = self._hvalue.decode("latin-1")
        self._hname, self._hvalue = b"", b""

    def on_headers_finished(self) -> None:
        _, params = parse_options_header(self._headers.get("content-disposition", ""))
        self._part = params.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" in params:
            if self._part != "file":
                raise invalid_field(self._part or "(unnamed)", "The file goes in the form part named 'file'")
            if self.filename is not None:
                raise InvalidInput("Send exactly one file part")
            self._is_file = True
            self.filename = os.path.basename(params[b"filename"].decode("utf-8", "replace"))[:255]
            return
        if self._part not in FIELDS:
            raise invalid_field(
                self._part or "(unnamed)",
                f"Unknown form field {self._part[:64]!r}: the form takes file, {', '.join(FIELDS)}",
                rule="extra_forbidden",
            )
        if self._part in self.fields:
            raise invalid_field(self._part, f"Form field '{self._part}' is sent twice", rule="duplicate")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self._is_file:
            self.size += len(chunk)
            if self.size > self.limit:
                raise _too_large(self.limit)
            self.pending += chunk
        else:
            self._buf += chunk
            if len(self._buf) > FIELD_MAX:
                raise invalid_field(
                    self._part or "(unnamed)", f"Form field '{self._part}' is longer than {FIELD_MAX} bytes"
                )

    def on_part_end(self) -> None:
        if not self._is_file and self._part:
            self.fields[self._part] = self._buf.decode("utf-8", "replace").strip()

    def on_end(self) -> None:
        self.ended = True

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
                "on_end",
            )
        }

    def take_pending(self) -> bytes:
        data = bytes(self.pending)
        self.pending.clear()
        return data


def _too_large(limit: int) -> TooLarge:
    return TooLarge(
        f"The upload exceeds {limit} bytes",
        suggestions=[
            "Compress the file (.csv.gz) or convert it to Parquet",
            "The limit is CAIRN_DATASETS_UPLOAD_MAX_BYTES",
        ],
    )


class MultipartUpload:
    """The body of one upload request (`service.Incoming`): read once, when the operation asks."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.received: service.Received | None = None
        self.staged: Path | None = None

    async def receive(self, folder: Path, limit: int) -> service.Received:
        """Stream the file part to a new hidden file in `folder`; the form fields stay in memory."""
        if self.received is not None:
            return self.received
        declared = self.request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit + OVERHEAD:
            raise _too_large(limit)
        ctype, params = parse_options_header(self.request.headers.get("content-type", ""))
        if ctype != b"multipart/form-data" or not params.get(b"boundary"):
            raise InvalidInput("Send multipart/form-data with a 'file' part and a 'name' field")
        self.staged = folder / f".incoming-{uuid.uuid4().hex}"
        parts = _Parts(limit)
        fh = await asyncio.to_thread(_create, self.staged)
        try:
            try:
                parser = MultipartParser(
                    params[b"boundary"],
                    parts.callbacks(),  # type: ignore[arg-type]
                    max_header_count=MAX_HEADERS,
                    max_header_size=HEADER_MAX,
                )
                total = 0
                async for chunk in self.request.stream():
                    total += len(chunk)
                    if total > limit + OVERHEAD:
                        raise _too_large(limit)
                    parser.write(chunk)
                    if len(parts.pending) >= FLUSH_BYTES:
                        await asyncio.to_thread(fh.write, parts.take_pending())
                parser.finalize()
            except FormParserError as exc:
                raise InvalidInput(
                    f"Malformed multipart body: {str(exc)[:200]}",
                    suggestions=["Send multipart/form-data as curl -F or an HTTP library writes it"],
                ) from None
            except ClientDisconnect:
                raise InvalidInput("The client went away before the upload was complete") from None
            await asyncio.to_thread(fh.write, parts.take_pending())
        finally:
            await asyncio.to_thread(fh.close)
        if not parts.ended:
            raise InvalidInput("The multipart body ended before its closing boundary")
        if parts.filename is None:
            raise invalid_field("file", "A 'file' part is required", rule="missing")
        self.received = service.Received(
            staged=self.staged, filename=parts.filename, fields=parts.fields, size=parts.size
        )
        return self.received

    def discard(self) -> None:
        """Remove the staged file unless the operation moved it into place."""
        if self.staged is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.staged)


@contextlib.asynccontextmanager
async def upload_body(request: Request) -> AsyncIterator[None]:
    """Within the block, the `upload_dataset` operation reads `request`'s multipart body (the REST
    route's and the console's); after it, nothing of the upload is kept unless the operation moved
    the file into place."""
    incoming = MultipartUpload(request)
    token = service.INCOMING.set(incoming)
    try:
        yield
    finally:
        service.INCOMING.reset(token)
        await asyncio.to_thread(incoming.discard)


def _create(path: Path) -> BinaryIO:
    """A new file, never through a link."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb")


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
    "additionalProperties": False,
}


@router.post(
    "/datasets/upload",
    tags=["datasets"],
    summary="Upload a dataset file (multipart) and register it.",
    operation_id="upload_dataset",
    openapi_extra={
        "parameters": [
            {
                "name": "project",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "pattern": PROJECT_NAME},
                "description": "Project the dataset belongs to (default: the key's project or 'default')",
            }
        ],
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": _FORM_SCHEMA,
                    "example": {"name": "rain", "file": "day,rain_mm\n2026-11-01,3\n2026-11-02,0\n"},
                }
            },
        },
        "security": [{"bearer": []}],
    },
)
async def upload_dataset(request: Request) -> JSONResponse:
    """Stream a CSV/Parquet/JSON file into the project's folder (`uploads/<name><ext>`) and register it
    under `name` in the project. Form fields: `name` (letters, digits, '_'), `file`, optional
    `description` and `replace` ("true" to overwrite an existing name); `project` in the query string.
    Needs the write scope. Answers 413 past CAIRN_DATASETS_UPLOAD_MAX_BYTES without keeping anything.
    The whole upload is the `upload_dataset` operation, run by the executor like every other call
    (rate limit, validation, scope, transaction, audit row, metrics) before the body is read."""
    principal = await authenticate(request)
    state: AppState = request.app.state.cairn
    op = state.registry.get("upload_dataset")
    assert op is not None, "the datasets feature declares upload_dataset"
    async with upload_body(request):
        result = await run_operation(
            state,
            op,
            dict(request.query_params),
            principal,
            transport="rest",
            request_id=request.state.request_id,
        )
    return JSONResponse(result.model_dump(mode="json"))
