"""Upstream safety of the analysis family, against a hostile upstream on 127.0.0.1.

- A next-page URL that leaves the registered base URL (`base/../x`, encoded dots, another port or
  host) is refused before anything is sent there: the server's credential never reaches it, and the
  ingest stops cleanly with the pages it stored.
- A response body is capped once decompressed (a gzip bomb stops at the cap) and a page's item count
  is capped; each refusal names its setting.
- `user_id` travels as a header: text that is not printable ASCII is refused with 4001.
"""

from __future__ import annotations

import gzip
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.analysis import analysis_settings
from tests.support.server import PgCluster, RunningServer, error_of, free_port, mcp_client, serve_app

SECRET = "hostile-upstream-secret"
# 50 MiB of JSON whitespace inside a valid document: about 50 KiB gzipped.
BOMB = gzip.compress(b'{"data": [' + b" " * (50 * 1024 * 1024) + b"]}", compresslevel=9)
ESCAPES = ("escape_abs", "escape_rel", "escape_enc", "escape_port", "escape_host")


@dataclass
class Hostile:
    """The hostile upstream: its base URL, the registry file and every request it saw."""

    url: str
    registry: Path
    hits: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    writes: list[tuple[str, str]] = field(default_factory=list)

    def outside_hits(self) -> list[tuple[str, str | None, str | None]]:
        return [h for h in self.hits if not h[0].startswith("/api/")]


def _app(state: Hostile, other_port: int) -> Starlette:
    def record(request: Request) -> None:
        state.hits.append((request.url.path, request.headers.get("authorization"), request.headers.get("x-user")))

    async def listing(request: Request) -> Response:
        record(request)
        name = request.path_params["name"]
        if name == "dotted":  # ids an upstream may well send, and that a URL path cannot carry
            rows = [{"id": ".."}, {"id": "."}, {"id": "../../private"}, {"id": "ok-1"}]
            return JSONResponse({"data": rows, "next": None})
        if request.query_params.get("cursor"):
            return JSONResponse({"data": [{"id": 4}, {"id": 5}], "next": None})
        port = state.url.rsplit(":", 1)[1]
        nxt = {
            "escape_abs": f"{state.url}/api/../private/secret",
            "escape_rel": "/api/../private/secret",
            "escape_enc": f"{state.url}/api/%2e%2E/private/secret",
            "escape_port": f"http://127.0.0.1:{other_port}/api/{name}?cursor=2",
            "escape_host": f"http://localhost:{port}/api/{name}?cursor=2",
            "inside": f"{state.url}/api/./x/../{name}?cursor=2",  # stays under the base once resolved
            "bomb_after": f"{state.url}/api/bomb",
            "many_after": f"{state.url}/api/many",
        }[name]
        return JSONResponse({"data": [{"id": 1}, {"id": 2}, {"id": 3}], "next": nxt})

    async def bomb(request: Request) -> Response:
        record(request)
        return Response(BOMB, headers={"content-encoding": "gzip", "content-type": "application/json"})

    async def many(request: Request) -> Response:
        record(request)
        return JSONResponse({"data": [{"id": i} for i in range(100_000)], "next": None})

    async def anything(request: Request) -> Response:
        record(request)
        if request.method != "GET":
            state.writes.append((request.method, request.url.path))
            return JSONResponse({}, status_code=204 if request.method == "DELETE" else 200)
        return JSONResponse({"data": [{"id": "stolen"}], "next": None})

    return Starlette(
        routes=[
            Route("/api/bomb", bomb),
            Route("/api/many", many),
            Route("/api/{name}", listing),
            Route("/{path:path}", anything, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        ]
    )


def _registry(base: str) -> dict[str, Any]:
    cursor = {"style": "cursor", "cursor_param": "cursor", "next_path": "next", "total_path": None}
    models: dict[str, Any] = {
        name: {"list_path": name, "items_path": "data", "pagination": cursor}
        for name in (*ESCAPES, "inside", "bomb_after", "many_after")
    }
    models["bomb"] = {"list_path": "bomb", "items_path": "data", "pagination": {"style": "none"}}
    models["many"] = {"list_path": "many", "items_path": "data", "pagination": {"style": "none"}}
    models["dotted"] = {
        "list_path": "dotted",
        "items_path": "data",
        "pagination": {"style": "none"},
        "writable": True,
        "delete": {"method": "DELETE", "path": "dotted/{id}"},
        "children": {"notes": {"path": "dotted/{parent_id}/notes", "pagination": {"style": "none"}}},
    }
    return {
        "upstreams": {
            "hostile": {
                "base_url": f"{base}/api",
                "timeout_seconds": 5,
                "max_retries": 0,
                "auth": {"header": "Authorization", "scheme": "Bearer", "value": SECRET},
                "impersonation_header": "X-User",
                "models": models,
            }
        }
    }


@pytest.fixture(scope="module")
def hostile_upstream() -> Iterator[Hostile]:
    port, other_port = free_port(), free_port()
    registry = Path(tempfile.mkdtemp(prefix="cairn-hostile-")) / "upstreams.yaml"
    state = Hostile(url=f"http://127.0.0.1:{port}", registry=registry)
    registry.write_text(yaml.safe_dump(_registry(state.url)))
    main = serve_app(_app(state, other_port), port, "hostile")
    other = serve_app(_app(state, other_port), other_port, "hostile")  # what an escape to another port would reach
    try:
        yield state
    finally:
        for server, thread in (main, other):
            server.should_exit = True
            thread.join(timeout=10)


@pytest.fixture
def hostile(hostile_upstream: Hostile, server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Hostile:
    """The hostile upstream, its registry the running server's for the test."""
    analysis_settings(server, monkeypatch, upstreams=hostile_upstream.registry)
    return hostile_upstream


@pytest.fixture
async def records(pg: PgCluster) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        yield conn
    finally:
        await conn.close()


async def _held(db: asyncpg.Connection, model: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM analysis_records WHERE model = $1", model))


async def _ingest(rest: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await rest.post("/api/v1/analysis/ingest", json={"analysis_id": "hostile", **body})


@pytest.mark.parametrize("model", ESCAPES)
async def test_a_next_url_leaving_the_base_is_refused_and_the_ingest_keeps_its_pages(
    server: RunningServer, rest: httpx.AsyncClient, hostile: Hostile, records: asyncpg.Connection, model: str
) -> None:
    hostile.hits.clear()
    r = await _ingest(rest, model=model, ingest_all=True)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["stored"] == 3 and out["pages"] == 1 and out["complete"] is False
    assert "outside its base URL" in out["error"] and "nothing was sent there" in out["error"]
    assert await _held(records, model) == 3
    assert hostile.outside_hits() == [] and [h[0] for h in hostile.hits] == [f"/api/{model}"]
    # A resume tries the refused URL again and is refused again, before sending anything: 5020, no change.
    async with mcp_client(server.url) as mcp:
        err = error_of(
            await mcp.call_tool(
                "analysis_ingest", {"analysis_id": "hostile", "model": model, "ingest_all": True, "resume": True}
            )
        )
    assert err["code"] == 5020 and "outside its base URL" in err["message"] and "nothing was stored" in err["message"]
    assert await _held(records, model) == 3 and len(hostile.hits) == 1
    assert all(h[1] == f"Bearer {SECRET}" for h in hostile.hits)  # the credential went to the base only


async def test_a_next_url_that_stays_under_the_base_is_normalised_and_followed(
    server: RunningServer, rest: httpx.AsyncClient, hostile: Hostile
) -> None:
    hostile.hits.clear()
    out = (await _ingest(rest, model="inside", ingest_all=True)).json()
    assert out["stored"] == 5 and out["complete"] is True and out["error"] is None
    assert [h[0] for h in hostile.hits] == ["/api/inside", "/api/inside"]


async def test_a_gzip_bomb_stops_at_the_byte_cap(
    server: RunningServer, rest: httpx.AsyncClient, hostile: Hostile, records: asyncpg.Connection
) -> None:
    r = await _ingest(rest, model="bomb")
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == 5020 and "16777216 bytes" in error["message"]
    assert "CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES" in error["message"] and "nothing was stored" in error["message"]
    assert await _held(records, "bomb") == 0
    async with mcp_client(server.url) as mcp:
        err = error_of(await mcp.call_tool("analysis_ingest", {"analysis_id": "hostile", "model": "bomb"}))
    assert err["code"] == 5020 and "CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES" in err["message"]
    # After a good page, the bomb ends the ingest with what it had.
    out = (await _ingest(rest, model="bomb_after", ingest_all=True)).json()
    assert out["stored"] == 3 and out["complete"] is False and "CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES" in out["error"]
    assert await _held(records, "bomb_after") == 3


async def test_a_page_with_too_many_items_is_refused(
    server: RunningServer, rest: httpx.AsyncClient, hostile: Hostile, records: asyncpg.Connection
) -> None:
    r = await _ingest(rest, model="many")
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == 5020 and "100000 items" in error["message"] and "limit is 10000" in error["message"]
    assert "CAIRN_ANALYSIS_MAX_PAGE_ITEMS" in error["message"]
    assert await _held(records, "many") == 0
    async with mcp_client(server.url) as mcp:
        err = error_of(await mcp.call_tool("analysis_ingest", {"analysis_id": "hostile", "model": "many"}))
    assert err["code"] == 5020 and "CAIRN_ANALYSIS_MAX_PAGE_ITEMS" in err["message"]
    out = (await _ingest(rest, model="many_after", ingest_all=True)).json()
    assert out["stored"] == 3 and out["complete"] is False and "CAIRN_ANALYSIS_MAX_PAGE_ITEMS" in out["error"]
    assert await _held(records, "many_after") == 3


async def test_a_user_id_that_is_not_printable_ascii_is_invalid_input(
    server: RunningServer, rest: httpx.AsyncClient, hostile: Hostile, records: asyncpg.Connection
) -> None:
    hostile.hits.clear()
    for user_id in ("José", "用户", "bob\u00a0smith", "tab\there"):
        r = await _ingest(rest, model="inside", user_id=user_id)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == 4001 and error["details"]["errors"][0]["field"] == "user_id", error
        act = {"analysis_id": "hostile", "model": "inside", "action": "delete", "user_id": user_id}
        assert (await rest.post("/api/v1/analysis/act", json=act)).json()["error"]["code"] == 4001
    async with mcp_client(server.url) as mcp:
        err = error_of(
            await mcp.call_tool("analysis_ingest", {"analysis_id": "hostile", "model": "inside", "user_id": "José"})
        )
        assert err["code"] == 4001 and "user_id" in err["message"]
    assert hostile.hits == [] and await _held(records, "inside") == 0
    # Printable ASCII goes through, as the impersonation header.
    out = await _ingest(rest, model="inside", user_id="jose.garcia@example.com")
    assert out.status_code == 200 and out.json()["stored"] == 3
    assert hostile.hits[-1][2] == "jose.garcia@example.com"


async def test_record_ids_that_are_not_one_path_segment_never_reach_a_url_path(
    server: RunningServer, rest: httpx.AsyncClient, hostile: Hostile
) -> None:
    assert (await _ingest(rest, model="dotted")).json()["stored"] == 4
    hostile.hits.clear()
    # Nested mode: '..' as a parent id would list /api/notes instead of that parent's notes.
    out = (await _ingest(rest, parent_model="dotted", child_resource="notes")).json()
    assert "cannot name a record in a URL path" in out["error"] and out["complete"] is False
    assert [h[0] for h in hostile.hits] == ["/api/dotted/ok-1/notes"]
    # Act: deleting '..' would send DELETE /api/ (the collection's parent), and '../../private' encoded
    # is a traversal for servers that decode %2F before resolving; only ok-1 is deleted.
    act = {"analysis_id": "hostile", "model": "dotted", "action": "delete"}
    r = await rest.post("/api/v1/analysis/act", json=act)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["summary"]["failed"] == 3 and body["summary"]["succeeded"] == 1, body
    assert {e["message"] for e in body["sample_errors"]} == {"this id cannot name a record in a URL path"}
    assert hostile.writes == [("DELETE", "/api/dotted/ok-1")]
