"""The REST upload route: multipart streamed to disk, size limit, registration, scopes."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.core.context import feature_settings_of
from app.datasets.config import DatasetSettings, projects_dir
from tests.support.server import ADMIN_KEY, READ_KEY, RunningServer, mcp_client, overridden

pytestmark = pytest.mark.asyncio(loop_scope="session")


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


async def test_upload_registers_and_queries(server: RunningServer, rest: httpx.AsyncClient) -> None:
    content = b"city,temp\nOslo,3\nLima,19\nPerth,24\n"
    r = await rest.post(
        "/api/v1/datasets/upload",
        data={"name": "weather", "description": "temps"},
        files={"file": ("weather.csv", io.BytesIO(content), "text/csv")},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["created"] is True and body["bytes"] == len(content)
    assert body["dataset"]["name"] == "weather" and body["dataset"]["source"] == "upload"
    # The registry names the upload by its key in the store (here the local folders).
    assert body["dataset"]["path"] == "projects/default/uploads/weather.csv"
    cfg = feature_settings_of(server.app.state.cairn.feature_settings, DatasetSettings)
    stored = projects_dir(server.settings.data_dir, cfg) / "default" / "uploads" / "weather.csv"
    assert read_bytes(stored) == content
    assert not list(stored.parent.glob(".incoming-*"))
    doc = (await rest.get("/openapi.json")).json()
    form = doc["paths"]["/api/v1/datasets/upload"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert form["schema"]["required"] == ["name", "file"]
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool(
            "execute_query",
            {"query_type": "sql", "files": ["weather"], "query": "SELECT city FROM weather WHERE temp > 10 ORDER BY 1"},
        )
        assert res.structured_content["data"] == [{"city": "Lima"}, {"city": "Perth"}]
        prof = await mcp.call_tool("profile_dataset", {"file_path": "weather"})
        assert prof.structured_content["statistics"]["row_count"] == 3
    dup = await rest.post(
        "/api/v1/datasets/upload",
        data={"name": "weather"},
        files={"file": ("w.csv", io.BytesIO(b"a\n1\n"), "text/csv")},
    )
    assert dup.status_code == 409
    rep = await rest.post(
        "/api/v1/datasets/upload",
        data={"name": "weather", "replace": "true"},
        files={"file": ("w.csv", io.BytesIO(b"city,temp\nRome,15\n"), "text/csv")},
    )
    assert rep.status_code == 200 and rep.json()["created"] is False
    assert read_bytes(stored) == b"city,temp\nRome,15\n"
    # The upload runs through the executor: each call has its audit row, the refused one included.
    audit = (await rest.get("/api/v1/audit", params={"operation": "upload_dataset"})).json()["entries"]
    assert [(e["transport"], e["outcome"], e["error_code"]) for e in audit] == [
        ("rest", "ok", None),
        ("rest", "error", 4090),
        ("rest", "ok", None),
    ]
    assert not list(stored.parent.glob(".incoming-*"))


@pytest.fixture
def small_limit(server: RunningServer) -> Iterator[int]:
    """A 256 KiB upload limit for this test (the running server's settings, restored after)."""
    with overridden(server, DatasetSettings, datasets_upload_max_bytes=256 * 1024) as changed:
        yield changed.datasets_upload_max_bytes


async def raw_post_status(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """Send only the request head (a declared huge body) and read the status line and body."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = "POST /api/v1/datasets/upload HTTP/1.1\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items()
    )
    writer.write((head + "\r\n").encode())
    await writer.drain()
    head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    lines = head_bytes.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = next(int(ln.split(":", 1)[1]) for ln in lines if ln.lower().startswith("content-length:"))
    payload = await asyncio.wait_for(reader.readexactly(length), timeout=10)
    writer.close()
    return status, payload


async def test_upload_refusals(server: RunningServer, small_limit: int) -> None:
    limit = small_limit
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
        auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
        r = await c.post(
            "/api/v1/datasets/upload", data={"name": "x"}, files={"file": ("x.csv", io.BytesIO(b"a\n1\n"), "text/csv")}
        )
        assert r.status_code == 401
        r = await c.post(
            "/api/v1/datasets/upload",
            data={"name": "x"},
            headers={"Authorization": f"Bearer {READ_KEY}"},
            files={"file": ("x.csv", io.BytesIO(b"a\n1\n"), "text/csv")},
        )
        assert r.status_code == 403
        r = await c.post(
            "/api/v1/datasets/upload",
            data={"name": "bad name"},
            headers=auth,
            files={"file": ("x.csv", io.BytesIO(b"a\n1\n"), "text/csv")},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == 4001
        r = await c.post(
            "/api/v1/datasets/upload",
            data={"name": "exe"},
            headers=auth,
            files={"file": ("x.exe", io.BytesIO(b"MZ"), "application/octet-stream")},
        )
        assert r.status_code == 400
        status, payload = await raw_post_status(
            server.url, {**auth, "Content-Type": "multipart/form-data; boundary=B", "Content-Length": str(limit * 4)}
        )
        assert status == 413 and json.loads(payload)["error"]["code"] == 4130

        # No Content-Length (chunked): the limit is enforced while streaming, and nothing is kept.
        async def body() -> AsyncIterator[bytes]:
            boundary = b"BOUNDARY"
            yield b"--" + boundary + b'\r\nContent-Disposition: form-data; name="name"\r\n\r\nhuge\r\n'
            yield b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="h.csv"\r\n\r\n'
            chunk = b"x" * (64 * 1024)
            sent = 0
            while sent <= limit:
                yield chunk
                sent += len(chunk)
            yield b"\r\n--" + boundary + b"--\r\n"

        r = await c.post(
            "/api/v1/datasets/upload",
            headers={**auth, "Content-Type": "multipart/form-data; boundary=BOUNDARY"},
            content=body(),
        )
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == 4130
    root = Path(server.settings.data_dir) / "datasets" / "uploads"
    assert not list(root.glob(".incoming-*")) and not (root / "huge.csv").exists()
