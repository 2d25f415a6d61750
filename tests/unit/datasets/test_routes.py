"""app/datasets/routes.py: the upload body read from a real ASGI request. The file part is streamed to
a hidden staged file and the form fields kept in memory; every malformed or oversized form is refused
with its own error (the field named where there is one), and a refused upload leaves no file behind."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.types import Message

from app.core.errors import CairnError, InvalidInput, TooLarge
from app.datasets.routes import FIELD_MAX, MAX_PARTS, MultipartUpload

BOUNDARY = "b0undary"
Part = tuple[str, str | None, bytes]  # (name, filename, content)


def body(parts: Sequence[Part], close: bool = True, headers: dict[str, str] | None = None) -> bytes:
    out = b""
    for name, filename, content in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n{extra}\r\n".encode() + content + b"\r\n"
    return out + (f"--{BOUNDARY}--\r\n".encode() if close else b"")


def request(data: bytes, content_type: str | None = None, length: int | None = None, chunk: int = 7) -> Request:
    headers = [(b"content-type", (content_type or f"multipart/form-data; boundary={BOUNDARY}").encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""]

    async def receive() -> Message:
        piece = pieces.pop(0) if pieces else b""
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/", "headers": headers, "query_string": b""}
    return Request(scope, receive)


def staged_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def test_the_file_is_staged_and_the_fields_kept(tmp_path: Path) -> None:
    content = b"a,b\n" + b"1,2\n" * 1000
    form = [("name", None, b" sales "), ("file", "../../etc/sales.csv", content), ("replace", None, b"true")]
    upload = MultipartUpload(request(body(form)))
    got = await upload.receive(tmp_path, limit=len(content))
    assert got.filename == "sales.csv" and got.fields == {"name": "sales", "replace": "true"}
    assert got.size == len(content) and got.staged.read_bytes() == content
    assert got.staged.parent == tmp_path and got.staged.name.startswith(".incoming-")
    assert await upload.receive(tmp_path, limit=1) is got  # the body is read once
    upload.discard()
    assert staged_files(tmp_path) == []
    upload.discard()  # already gone: nothing to do


async def refused(folder: Path, req: Request, limit: int = 1000) -> CairnError:
    upload = MultipartUpload(req)
    with pytest.raises(CairnError) as caught:
        await upload.receive(folder, limit)
    upload.discard()
    assert staged_files(folder) == []
    return caught.value


def field_of(err: CairnError) -> str | None:
    errors = (err.details or {}).get("errors")
    return str(errors[0]["field"]) if errors else None


FILE: Part = ("file", "a.csv", b"a\n1\n")


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        ([("name", None, b"x"), ("colour", None, b"red"), FILE], "colour", "Unknown form field 'colour'"),
        ([("name", None, b"x"), ("name", None, b"y"), FILE], "name", "sent twice"),
        ([("name", None, b"x" * (FIELD_MAX + 1)), FILE], "name", "longer than"),
        ([("data", "a.csv", b"1")], "data", "named 'file'"),
        ([FILE, ("file", "b.csv", b"2")], None, "exactly one file part"),
        ([("name", None, b"x"), ("description", None, b"d")], "file", "A 'file' part is required"),
        (
            [FILE, ("name", None, b"x"), ("description", None, b"d"), ("replace", None, b"1"), ("name", None, b"y")],
            None,
            f"more than {MAX_PARTS} parts",
        ),
    ],
)
async def test_malformed_forms_are_refused(tmp_path: Path, form: list[Part], field: str | None, message: str) -> None:
    err = await refused(tmp_path, request(body(form)))
    assert isinstance(err, InvalidInput) and message in err.message and field_of(err) == field


async def test_bodies_that_are_no_complete_form_are_refused(tmp_path: Path) -> None:
    plain = await refused(tmp_path, request(b"{}", content_type="application/json"))
    assert "Send multipart/form-data" in plain.message
    cut = await refused(tmp_path, request(body([("name", None, b"x"), FILE], close=False)))
    assert "ended before its closing boundary" in cut.message
    many = await refused(tmp_path, request(body([FILE], headers={f"X-H{i}": "v" for i in range(9)})))
    assert isinstance(many, InvalidInput)


async def test_an_oversized_upload_is_refused_declared_or_streamed(tmp_path: Path) -> None:
    big: Part = ("file", "a.csv", b"x" * 2000)
    streamed = await refused(tmp_path, request(body([big])), limit=1000)
    assert isinstance(streamed, TooLarge) and "exceeds 1000 bytes" in streamed.message and streamed.code == 4130
    declared = await refused(tmp_path, request(b"", length=10**9), limit=1000)
    assert isinstance(declared, TooLarge)
