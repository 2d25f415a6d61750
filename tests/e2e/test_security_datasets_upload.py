"""Regression tests of the upload route's findings: it now runs as one executor call, so the rate
limit, the scope and the project are checked before the body is read and every refusal leaves an
audit row; form fields are capped in number and size; a malformed body is 4001. Nothing of a refused
upload is kept."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.datasets import project_folder, root_of, tree
from tests.support.server import (
    ADMIN_KEY,
    BOUND_PROJECT,
    PROJECT_KEY,
    READ_KEY,
    PgCluster,
    RunningServer,
    server_settings,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")
UPLOAD = "/api/v1/datasets/upload"
B = "XBOUNDARYX"


def part(name: str, value: bytes, filename: str | None = None, extra: str = "") -> bytes:
    """One multipart part."""
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{B}\r\nContent-Disposition: {disposition}\r\n{extra}\r\n".encode() + value + b"\r\n"


def body(*parts: bytes, end: bool = True) -> bytes:
    return b"".join(parts) + (f"--{B}--\r\n".encode() if end else b"")


CSV = part("file", b"a,b\n1,2\n", "t.csv")
MULTIPART = {"Content-Type": f"multipart/form-data; boundary={B}"}


async def raw_head(url: str, headers: dict[str, str], target: str = UPLOAD) -> tuple[int, dict[str, Any]]:
    """Send only a request head that declares a body, and read the answer: the server must answer
    without waiting for the body."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = f"POST {target} HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items()
    )
    writer.write((head + "\r\n").encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    lines = raw.decode("latin-1").split("\r\n")
    length = next(int(ln.split(":", 1)[1]) for ln in lines if ln.lower().startswith("content-length:"))
    payload = await asyncio.wait_for(reader.readexactly(length), timeout=10)
    writer.close()
    return int(lines[0].split(" ", 2)[1]), json.loads(payload)


def staged(server: RunningServer) -> list[Path]:
    """Staged upload files left anywhere in the datasets folders."""
    return list(Path(server.settings.data_dir).rglob(".incoming-*"))


async def audit_codes(rest: httpx.AsyncClient) -> list[int | None]:
    entries = (await rest.get("/api/v1/audit", params={"operation": "upload_dataset", "limit": 100})).json()["entries"]
    return [e["error_code"] for e in reversed(entries)]


async def test_upload_refusals_are_4001_audited_and_leave_nothing(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    folders = (project_folder(server), root_of(server))
    (folders[0] / "uploads").mkdir(parents=True, exist_ok=True)  # made by the first upload, kept empty
    before = await asyncio.to_thread(tree, *folders)
    many_fields = b"".join(part(f"f{i}", b"x") for i in range(60_000))  # ~5 MiB of fields
    cases: list[tuple[bytes, dict[str, str], int, str]] = [
        (body(part("name", b"ok"), many_fields, CSV), MULTIPART, 4001, "unknown form field"),
        (body(*[part("description", b"x")] * 60_000, CSV), MULTIPART, 4001, "sent twice"),
        (body(part("name", b"ok"), part("description", b"x" * 5000), CSV), MULTIPART, 4001, "longer than 4096"),
        (body(part("name", b"ok", extra="X-Pad: " + "p" * 8000 + "\r\n"), CSV), MULTIPART, 4001, "header"),
        (
            body(part("name", b"ok", extra="".join(f"X-{i}: v\r\n" for i in range(20))), CSV),
            MULTIPART,
            4001,
            "header",
        ),
        (body(part("name", b"ok"), part("other", b"x", "x.csv"), CSV), MULTIPART, 4001, "named 'file'"),
        (body(part("name", b"ok"), CSV, CSV), MULTIPART, 4001, "exactly one file"),
        (body(part("name", b"ok"), part("replace", b"maybe"), CSV), MULTIPART, 4001, "replace"),
        (b"this is not multipart at all\r\n", MULTIPART, 4001, "multipart"),
        (body(part("name", b"ok"), CSV, end=False)[:-10], MULTIPART, 4001, "ended before"),
        (body(part("name", b"ok"), CSV), {"Content-Type": "multipart/form-data"}, 4001, "multipart/form-data"),
        (body(part("name", b"ok"), CSV), {"Content-Type": "multipart/form-data; boundary=" + "b" * 300}, 4001, ""),
        (body(part("name", b"ok")), MULTIPART, 4001, "'file' part is required"),
    ]
    for content, headers, code, needle in cases:
        started = time.monotonic()
        r = await rest.post(UPLOAD, content=content, headers=headers)
        assert r.status_code == 400, (needle, r.status_code, r.text[:300])
        error = r.json()["error"]
        assert error["code"] == code and needle.lower() in error["message"].lower(), (needle, error)
        assert time.monotonic() - started < 10
    assert await audit_codes(rest) == [4001] * len(cases)  # every refusal is one audited call
    assert await asyncio.to_thread(staged, server) == []
    assert await asyncio.to_thread(tree, *folders) == before
    assert (await rest.get("/api/v1/datasets")).json()["datasets"] == []


async def test_scope_and_project_are_checked_before_the_body(server: RunningServer) -> None:
    declared = {**MULTIPART, "Content-Length": "100000"}
    status, payload = await raw_head(server.url, {**declared, "Authorization": f"Bearer {READ_KEY}"})
    assert status == 403 and payload["error"]["code"] == 4030
    status, payload = await raw_head(
        server.url, {**declared, "Authorization": f"Bearer {PROJECT_KEY}"}, f"{UPLOAD}?project=beta"
    )
    assert status == 403 and "bound to project" in payload["error"]["message"]
    status, payload = await raw_head(server.url, {**declared, "Authorization": f"Bearer {ADMIN_KEY}"}, f"{UPLOAD}?x=1")
    assert status == 400 and payload["error"]["code"] == 4001
    assert await asyncio.to_thread(staged, server) == []


async def test_uploads_land_in_the_callers_project(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {PROJECT_KEY}"}) as c:
        r = await c.post(UPLOAD, content=body(part("name", b"mine"), CSV), headers=MULTIPART)
        assert r.status_code == 200, r.text
    assert r.json()["dataset"]["path"] == f"projects/{BOUND_PROJECT}/uploads/mine.csv"  # its key in the store
    assert (project_folder(server, BOUND_PROJECT) / "uploads" / "mine.csv").is_file()
    assert (await rest.get("/api/v1/datasets")).json()["datasets"] == []  # not the default project's
    theirs = (await rest.get("/api/v1/datasets", params={"project": BOUND_PROJECT})).json()["datasets"]
    assert [d["name"] for d in theirs] == ["mine"]
    missing = await rest.post("/api/v1/datasets/profile", json={"file_path": "mine"})
    assert missing.status_code == 404
    audit = (await rest.get("/api/v1/audit", params={"operation": "upload_dataset"})).json()["entries"]
    assert [(e["project"], e["outcome"]) for e in audit] == [(BOUND_PROJECT, "ok")]


async def test_the_rate_limit_applies_to_uploads_before_their_body(pg: PgCluster) -> None:
    settings = server_settings(pg.handle.url(pg.new_database()), rate_limit_per_second=2.0, rate_limit_burst=5)
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    try:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:

            async def upload(i: int) -> int:
                r = await c.post(UPLOAD, content=body(part("name", f"t{i}".encode()), CSV), headers=MULTIPART)
                return r.status_code

            codes = [await upload(i) for i in range(30)]
            assert 5 <= codes.count(200) <= 10 and codes.count(429) == 30 - codes.count(200), codes
            # Refused on its head alone: the body is never awaited.
            status, payload = await raw_head(
                base, {**MULTIPART, "Content-Length": "100000", "Authorization": f"Bearer {ADMIN_KEY}"}
            )
            assert status == 429 and payload["error"]["code"] == 4290
        uploads = Path(settings.data_dir) / "datasets-projects" / "default" / "uploads"
        left = await asyncio.to_thread(lambda: (list(uploads.glob(".incoming-*")), list(uploads.glob("t*.csv"))))
        assert left[0] == [] and len(left[1]) == codes.count(200)
    finally:
        stop_server(srv, thread)
