"""Upstream faults, nested mode, other pagination styles and hostile input."""

from __future__ import annotations

import time
from typing import Any

import httpx

from app.analysis.demo_upstream import generate
from tests.support import analysis as analysis_helpers
from tests.support.analysis import N_BOOKS, Upstream, analysis_settings, structured
from tests.support.server import READ_KEY, RunningServer, error_of, mcp_client

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf

AID = "faults"


async def _ingest(rest: httpx.AsyncClient, **body: Any) -> httpx.Response:
    return await rest.post("/api/v1/analysis/ingest", json={"analysis_id": AID, **body})


async def test_500_mid_ingest_keeps_pages_and_resume_continues(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    bookshelf.faults({"path": "/api/books", "mode": "500", "skip": 2, "times": -1})
    r = await _ingest(rest, model="book", ingest_all=True, per_page=100)
    out = r.json()
    assert r.status_code == 200, r.text
    assert out["stored"] == 200 and out["pages"] == 2 and out["complete"] is False and out["next_page"] == 3
    assert "HTTP 500" in out["error"] and "resume: true" in out["message"]
    assert bookshelf.stats()["requests"]["/api/books"] == 2 + 3  # page 3 tried once plus two retries
    bookshelf.faults()
    again = (await _ingest(rest, model="book", ingest_all=True, per_page=100, resume=True)).json()
    assert again["stored"] == 400 and again["complete"] is True and again["session_records"] == N_BOOKS
    assert again["error"] is None


async def test_first_page_failure_is_an_upstream_error(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    bookshelf.faults({"path": "/api/books", "mode": "malformed", "times": -1})
    r = await _ingest(rest, model="book")
    assert r.status_code == 502 and r.json()["error"]["code"] == 5020
    assert "malformed JSON" in r.json()["error"]["message"]
    bookshelf.faults({"path": "/api/books", "mode": "500", "times": -1})
    async with mcp_client(server.url) as mcp:
        err = error_of(await mcp.call_tool("analysis_ingest", {"analysis_id": AID, "model": "book"}))
    assert err["code"] == 5020 and "nothing was stored" in err["message"]


async def test_429_retry_after_is_honoured(server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream) -> None:
    bookshelf.faults({"path": "/api/books", "mode": "429", "retry_after": 1, "times": 1})
    started = time.monotonic()
    out = (await _ingest(rest, model="book", per_page=10)).json()
    assert out["stored"] == 10 and time.monotonic() - started >= 0.95
    bookshelf.faults({"path": "/api/books", "mode": "429", "retry_after": 60, "times": 1})
    r = await _ingest(rest, model="book", per_page=10)
    assert r.status_code == 502 and "retry after 60s" in r.json()["error"]["message"]


async def test_hanging_upstream_times_out(server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream) -> None:
    bookshelf.rewrite_registry(timeout_seconds=0.3, max_retries=1)
    bookshelf.faults({"path": "/api/books", "mode": "hang", "hang_seconds": 2, "times": -1})
    started = time.monotonic()
    r = await _ingest(rest, model="book")
    assert r.status_code == 502 and "timed out after 0.3s" in r.json()["error"]["message"]
    assert time.monotonic() - started < 2.5


async def test_missing_credential_and_wrong_token(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream, monkeypatch: Any
) -> None:
    monkeypatch.setenv("CAIRN_TEST_BOOKSHELF_TOKEN", "wrong")
    r = await _ingest(rest, model="book")
    assert r.status_code == 502 and "HTTP 401" in r.json()["error"]["message"]
    monkeypatch.delenv("CAIRN_TEST_BOOKSHELF_TOKEN")
    r = await _ingest(rest, model="book")
    assert r.status_code == 400 and "CAIRN_TEST_BOOKSHELF_TOKEN is not set" in r.json()["error"]["message"]


async def test_nested_children_in_batches_of_25(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    lib = generate(N_BOOKS)
    r = await _ingest(rest, parent_model="book", child_resource="sessions")
    assert r.status_code == 404 and "Ingest the parents first" in r.json()["error"]["suggestions"][0]
    await _ingest(rest, model="book", per_page=30, filters={"genre": "mystery"})
    parents = [b["id"] for b in lib.books.values() if b["genre"] == "mystery"][:30]
    first = (await _ingest(rest, parent_model="book", child_resource="sessions", fields=["duration_minutes"])).json()
    want = sum(len(lib.sessions[p]) for p in parents[:25])
    assert first["model"] == "reading_session" and first["mode"] == "nested"
    assert first["stored"] == want and first["parents_processed"] == 25 and first["parents_remaining"] == 5
    second = (
        await _ingest(rest, parent_model="book", child_resource="sessions", resume=True, fields=["duration_minutes"])
    ).json()
    assert second["parents_processed"] == 5 and second["parents_remaining"] == 0 and second["complete"] is True
    assert second["session_records"] == sum(len(lib.sessions[p]) for p in parents)
    rows = (
        await rest.post(
            "/api/v1/analysis/query",
            json={
                "analysis_id": AID,
                "mode": "filter",
                "model": "reading_session",
                "where": {"duration_minutes": {"$gte": 0}},
                "limit": 200,
            },
        )
    ).json()["rows"]
    assert set(rows[0]) == {"id", "book_id", "duration_minutes"} and {r["book_id"] for r in rows} <= set(parents)
    multi = await rest.post(
        "/api/v1/analysis/query", json={"analysis_id": AID, "mode": "aggregate", "group_by": "status"}
    )
    assert multi.status_code == 400 and "reading_session" in multi.json()["error"]["suggestions"][0]
    bad = await _ingest(rest, parent_model="book", child_resource="reviews")
    assert bad.status_code == 404 and "sessions" in bad.json()["error"]["suggestions"][0]


async def test_other_pagination_styles(server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream) -> None:
    lib = generate(N_BOOKS)
    hal = (await _ingest(rest, model="hal_author", ingest_all=True, per_page=7)).json()
    assert hal["stored"] == len(lib.authors) and hal["complete"] is True and hal["total_available"] == len(lib.authors)
    row = (
        await rest.post(
            "/api/v1/analysis/query",
            json={"analysis_id": AID, "mode": "filter", "model": "hal_author", "where": {"id": 1}},
        )
    ).json()["rows"][0]
    assert "stats_books" in row and "_links" not in row  # HAL item flattened, links dropped
    feed = (await _ingest(rest, model="feed_book", ingest_all=True, per_page=100)).json()
    assert feed["stored"] == N_BOOKS and feed["pages"] == 6 and feed["complete"] is True
    every = sum(len(s) for s in lib.sessions.values())
    cur = (await _ingest(rest, model="session_feed", ingest_all=True, per_page=100)).json()
    assert cur["complete"] is (every <= 5000) and cur["stored"] == min(every, 5000)
    jump = await _ingest(rest, model="feed_book", page=3)
    assert jump.status_code == 400 and "cannot jump" in jump.json()["error"]["message"]


async def test_hostile_and_malformed_input(server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream) -> None:
    await _ingest(rest, model="book", per_page=50)

    async def q(**kw: Any) -> httpx.Response:
        return await rest.post("/api/v1/analysis/query", json={"analysis_id": AID, **kw})

    cases: list[tuple[dict[str, Any], str]] = [
        ({"mode": "aggregate", "group_by": "status'; drop table analysis_records; --"}, "Invalid field name"),
        ({"mode": "filter", "where": {"a.b": 1}}, "Invalid field name"),
        ({"mode": "filter", "where": {"rating": {"$regex": "x"}}}, "Unknown operator"),
        ({"mode": "filter", "where": {"rating": {"$gt": True}}}, "numbers or ISO dates"),
        ({"mode": "filter", "where": {"updated_at": {"$gt": "yesterday"}}}, "not an ISO date"),
        ({"mode": "filter", "where": {"rating": {"$gt": 1, "plain": 2}}}, "do not mix"),
        ({"mode": "filter"}, "needs where"),
        ({"mode": "aggregate"}, "needs group_by"),
        ({"mode": "semantic"}, "needs query"),
        ({"mode": "sample", "stratify_by": "1status"}, "Invalid field name"),
        (
            {
                "mode": "sample",
                "proximity": {
                    "field": "updated_at",
                    "origin": "2026-01-01",
                    "window": "1 day; drop table analysis_records",
                },
            },
            "Invalid interval",
        ),
        (
            {
                "mode": "sample",
                "proximity": {
                    "field": "updated_at",
                    "origin": "2026-01-01",
                    "window": "1 day",
                    "bucket": "1 fortnight",
                },
            },
            "Invalid interval",
        ),
        (
            {"mode": "sample", "proximity": {"field": "updated_at", "origin": "soon", "window": "1 day"}},
            "not an ISO date",
        ),
        ({"mode": "describe", "where": {"a": 1}}, "does not use where"),
    ]
    for body, text in cases:
        r = await q(**body)
        assert r.status_code == 400 and text in r.json()["error"]["message"], (body, r.text)
        assert r.json()["error"]["code"] == 4001
    r = await q(mode="filter", where={"title": "x' OR '1'='1"})
    assert r.status_code == 200 and r.json()["total"] == 0  # values are bound, never spliced
    r = await rest.post("/api/v1/analysis/ingest", json={"analysis_id": AID, "model": "book", "fields": ["a-b"]})
    assert r.status_code == 400 and "fields.0" in r.json()["error"]["message"]
    r = await rest.post(
        "/api/v1/analysis/ingest",
        json={"analysis_id": AID, "model": "book", "parent_model": "book", "child_resource": "sessions"},
    )
    assert r.status_code == 400 and "either model" in r.json()["error"]["message"]
    r = await rest.post("/api/v1/analysis/ingest", json={"analysis_id": AID, "model": "spaceship"})
    assert r.status_code == 404 and "book" in r.json()["error"]["suggestions"][0]
    r = await rest.post("/api/v1/analysis/ingest", json={"analysis_id": "bad id!", "model": "book"})
    assert r.status_code == 400
    async with mcp_client(server.url, key=READ_KEY) as mcp:
        assert error_of(await mcp.call_tool("analysis_ingest", {"analysis_id": AID, "model": "book"}))["code"] == 4030
        assert error_of(await mcp.call_tool("analysis_clear", {"analysis_id": AID}))["code"] == 4030
        ok = structured(
            await mcp.call_tool("analysis_query", {"analysis_id": AID, "mode": "aggregate", "group_by": "genre"})
        )
        assert ok["total"] == 50


async def test_registry_problems_are_reported(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream, monkeypatch: Any
) -> None:
    analysis_settings(server, monkeypatch, upstreams=None)
    r = await _ingest(rest, model="book")
    assert r.status_code == 400 and "CAIRN_ANALYSIS_UPSTREAMS" in r.json()["error"]["suggestions"][0]
    bad = bookshelf.registry.parent / "bad.yaml"
    bad.write_text("upstreams:\n  x:\n    base_url: ftp://nope\n    models: {}\n")
    analysis_settings(server, monkeypatch, upstreams=bad)
    r = await _ingest(rest, model="book")
    assert r.status_code == 400 and r.json()["error"]["code"] == 4003 and "base_url" in r.json()["error"]["message"]
