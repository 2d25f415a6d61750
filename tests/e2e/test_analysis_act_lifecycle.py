"""analysis_store, analysis_act, analysis_clear and expiry against the demo upstream."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from app.analysis.lifecycle import sweep_expired
from app.core.db import Database
from tests.support import analysis as analysis_helpers
from tests.support.analysis import TOKEN, Upstream, analysis_settings, expected_books, structured
from tests.support.server import (
    ADMIN_KEY,
    BOUND_PROJECT,
    PROJECT_KEY,
    WRITE_KEY,
    PgCluster,
    RunningServer,
    error_of,
    mcp_client,
)
from tests.support.waiting import eventually

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf

AID = "act-session"


async def _ingest(rest: httpx.AsyncClient, aid: str = AID) -> None:
    r = await rest.post(
        "/api/v1/analysis/ingest", json={"analysis_id": aid, "model": "book", "ingest_all": True, "per_page": 100}
    )
    assert r.status_code == 200 and r.json()["complete"], r.text


def _book(up: Upstream, book_id: int) -> httpx.Response:
    return httpx.get(f"{up.url}/api/books/{book_id}", headers={"Authorization": f"Bearer {TOKEN}"})


async def test_store_semantic_category_and_clear(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest)
    async with mcp_client(server.url, key=WRITE_KEY) as mcp:
        stored = structured(
            await mcp.call_tool(
                "analysis_store",
                {
                    "analysis_id": AID,
                    "findings": [
                        {
                            "finding": "Twelve completed books are rated one star: outliers worth a re-read "
                            "or de-listing",
                            "category": "quality_issue",
                            "metadata": {"count": 12},
                        },
                        {
                            "finding": "Science fiction is over-represented among books still being read: "
                            "stalled progress",
                            "category": "pattern",
                        },
                    ],
                },
            )
        )
        assert stored["stored"] == 2 and len(stored["ids"]) == 2 and stored["expires_at"] is not None
        kept = structured(
            await mcp.call_tool(
                "analysis_store",
                {
                    "analysis_id": AID,
                    "persistent": True,
                    "findings": [{"finding": "Ratings cluster at four and five stars", "category": "pattern"}],
                },
            )
        )
        assert kept["persistent"] is True and kept["expires_at"] is None
        hits = structured(
            await mcp.call_tool(
                "analysis_query", {"analysis_id": AID, "mode": "semantic", "query": "low rated books, quality problems"}
            )
        )
        assert hits["findings"][0]["category"] == "quality_issue"
        assert hits["findings"][0]["metadata"] == {"count": 12}
        only = structured(
            await mcp.call_tool(
                "analysis_query",
                {
                    "analysis_id": AID,
                    "mode": "semantic",
                    "query": "reading progress",
                    "category": "pattern",
                    "threshold": 0.0,
                },
            )
        )
        assert {f["category"] for f in only["findings"]} == {"pattern"} and only["total"] == 2
        too_many = await mcp.call_tool("analysis_store", {"analysis_id": AID, "findings": [{"finding": "x"}] * 26})
        assert error_of(too_many)["details"]["errors"][0]["field"] == "findings"
        cleared = structured(await mcp.call_tool("analysis_clear", {"analysis_id": AID}))
    assert cleared["records_deleted"] == 600 and cleared["findings_deleted"] == 3 + 6
    assert cleared["message"] == f"Cleared 600 ingested record(s) and 9 finding(s) for analysis '{AID}'."
    r = await rest.post("/api/v1/analysis/query", json={"analysis_id": AID, "mode": "aggregate", "group_by": "status"})
    assert r.status_code == 404 and r.json()["error"]["code"] == 4002


async def test_act_dry_run_then_live_update_with_partial_failure(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest)
    books = expected_books()
    target = [b for b in books if b["status"] == "completed" and b["rating"] == 1]
    locked = [b for b in target if b["locked"]]
    where = {"status": "completed", "rating": {"$lt": 2}}
    dry = (
        await rest.post(
            "/api/v1/analysis/act",
            json={
                "analysis_id": AID,
                "model": "book",
                "where": where,
                "action": "update",
                "attributes": {"status": "unread"},
                "dry_run": True,
            },
        )
    ).json()
    assert dry["matched_count"] == len(target) and dry["dry_run"] is True
    assert dry["sample_ids"] == [str(b["id"]) for b in target[:10]]
    assert len(dry["sample_data"]) == 3 and all("ingestedAt" in row for row in dry["sample_data"])
    assert dry["ingestedAtRange"]["earliest"] <= dry["ingestedAtRange"]["latest"]
    assert bookshelf.stats()["requests"].get(f"/api/books/{target[0]['id']}") is None  # nothing sent upstream
    bookshelf.faults({"path": "/api/books/", "mode": "reject", "method": "PATCH", "ids": [target[1]["id"]]})
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with mcp_client(server.url, key=WRITE_KEY) as mcp:
        live = structured(
            await mcp.call_tool(
                "analysis_act",
                {
                    "analysis_id": AID,
                    "model": "book",
                    "where": where,
                    "action": "update",
                    "attributes": {"status": "unread", "rating": None},
                },
                progress_callback=on_progress,
            )
        )
    summary = live["summary"]
    expected_failed = len(locked) + (0 if target[1]["locked"] else 1)
    assert summary == {
        "total": len(target),
        "succeeded": len(target) - expected_failed,
        "failed": expected_failed,
        "unknown": 0,
        "not_attempted": 0,
        "already_done": 0,
        "deadline_reached": False,
        "action": "update",
    }
    assert len(live["sample_errors"]) == min(5, expected_failed)
    codes = {e["status_code"] for e in live["sample_errors"]}
    assert codes <= {409, 422} and live["sample_ids"] is None and live["sample_data"] is None
    assert sorted(seen) == list(range(1, len(target) + 1))
    assert _book(bookshelf, target[0]["id"]).json()["status"] == ("completed" if target[0]["locked"] else "unread")
    # the snapshot follows what the upstream accepted: only the rejected ones still match
    again = (
        await rest.post(
            "/api/v1/analysis/query", json={"analysis_id": AID, "mode": "filter", "where": where, "limit": 200}
        )
    ).json()
    assert again["total"] == expected_failed


async def test_delete_retry_is_safe_and_counts_already_done(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest)
    books = expected_books()
    poetry = [b for b in books if b["genre"] == "poetry" and not b["locked"]]
    # someone deletes three of them upstream after the snapshot was taken
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as direct:
        for b in poetry[:3]:
            assert (await direct.delete(f"{bookshelf.url}/api/books/{b['id']}")).status_code == 204
    body = {"analysis_id": AID, "model": "book", "where": {"genre": "poetry", "locked": False}, "action": "delete"}
    live = (await rest.post("/api/v1/analysis/act", json=body)).json()
    assert live["summary"]["total"] == len(poetry) and live["summary"]["failed"] == 0
    assert live["summary"]["already_done"] == 3 and live["summary"]["succeeded"] == len(poetry)
    assert all(_book(bookshelf, b["id"]).status_code == 404 for b in poetry)
    retry = (await rest.post("/api/v1/analysis/act", json=body)).json()
    assert retry["summary"]["total"] == 0 and retry["summary"]["failed"] == 0


async def test_act_upstream_down_summarises_and_stops(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest)
    bookshelf.faults({"path": "/api/books/", "mode": "500", "method": "PATCH", "times": -1})
    live = (
        await rest.post(
            "/api/v1/analysis/act",
            json={
                "analysis_id": AID,
                "model": "book",
                "where": {"status": "unread"},
                "action": "update",
                "attributes": {"rating": 3},
            },
        )
    ).json()
    s = live["summary"]
    assert s["succeeded"] == 0 and s["failed"] == 50 and s["not_attempted"] == s["total"] - 50 > 0
    assert live["sample_errors"][0]["status_code"] == 500 and "not attempted" in live["message"]


async def test_act_errors(server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream) -> None:
    r = await rest.post("/api/v1/analysis/act", json={"analysis_id": "never", "model": "book", "action": "delete"})
    assert r.status_code == 404
    await _ingest(rest)
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"model": "author", "action": "delete"}, 400, "not writable"),
        ({"model": "book", "action": "update"}, 400, "needs attributes"),
        ({"model": "book", "action": "update", "attributes": {"locked": False}}, 400, "not writable"),
        ({"model": "book", "action": "update", "attributes": {"bad-name": 1}}, 400, "Invalid field name"),
        ({"model": "nope", "action": "delete"}, 404, "Unknown model"),
        ({"model": "book", "action": "delete", "where": {"id; drop table x": 1}}, 400, "Invalid field name"),
    ]
    for extra, status, text in cases:
        r = await rest.post("/api/v1/analysis/act", json={"analysis_id": AID, **extra})
        assert r.status_code == status and text in r.json()["error"]["message"], (extra, r.text)
    other = await rest.post("/api/v1/analysis/act", json={"analysis_id": "other", "model": "book", "action": "delete"})
    assert other.status_code == 404 and "analysis_ingest" in other.json()["error"]["suggestions"][0]
    async with mcp_client(server.url, key=WRITE_KEY) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        act, query = tools["analysis_act"].annotations, tools["analysis_query"].annotations
        assert act is not None and act.destructive_hint is True
        assert query is not None and query.read_only_hint is True
        err = error_of(
            await mcp.call_tool(
                "analysis_act",
                {"analysis_id": AID, "model": "book", "action": "delete", "user_id": "u-1", "dry_run": True},
            )
        )
        assert err["code"] == 4030 and "admin" in err["message"]
    async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
        ok = structured(
            await mcp.call_tool(
                "analysis_act",
                {
                    "analysis_id": AID,
                    "model": "book",
                    "action": "update",
                    "attributes": {"title": "Renamed"},
                    "where": {"id": 2},
                    "user_id": "librarian-7",
                },
            )
        )
        assert ok["summary"]["total"] == 1
    assert bookshelf.stats()["headers"].get("x-act-as") == "librarian-7"


EXPIRIES = " UNION ALL ".join(
    f"SELECT max(expires_at) AS at FROM {table} WHERE analysis_id = $1"
    for table in ("analysis_records", "analysis_findings", "analysis_ingest_state")
)


async def _all_expired(pg: PgCluster, aid: str) -> bool:
    """True once the database's clock (the one expiry is judged by) is past every expiry of `aid`'s
    records, ingest state and ephemeral findings."""
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        return bool(await conn.fetchval(f"SELECT count(at) > 0 AND now() > max(at) FROM ({EXPIRIES}) AS e", aid))
    finally:
        await conn.close()


async def test_expiry_on_access_and_boot_sweep(
    server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster, bookshelf: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysis_settings(server, monkeypatch, finding_ttl_seconds=1.0, records_retention_days=1.5 / 86400)
    await _ingest(rest)
    await rest.post("/api/v1/analysis/store", json={"analysis_id": AID, "findings": [{"finding": "short lived"}]})
    await rest.post(
        "/api/v1/analysis/store",
        json={"analysis_id": AID, "persistent": True, "findings": [{"finding": "kept for good"}]},
    )
    await eventually(lambda: _all_expired(pg, AID), what=f"the database clock past {AID}'s expiry")
    sem = (
        await rest.post(
            "/api/v1/analysis/query", json={"analysis_id": AID, "mode": "semantic", "query": "kept", "threshold": 0.0}
        )
    ).json()
    assert [f["finding"] for f in sem["findings"]] == ["kept for good"]
    r = await rest.post("/api/v1/analysis/query", json={"analysis_id": AID, "mode": "describe"})
    assert r.status_code == 404 and "expired" in r.json()["error"]["message"]
    # a second session left to expire is removed by the sweep
    await _ingest(rest, aid="abandoned")
    await eventually(lambda: _all_expired(pg, "abandoned"), what="the database clock past the abandoned expiry")
    db = Database(pg.url, server.settings)
    try:
        counts = await sweep_expired(db)
    finally:
        await db.dispose()
    assert counts["analysis_records"] == 600 and counts["analysis_findings"] == 6


async def test_sessions_are_scoped_by_project(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    async with mcp_client(server.url, key=PROJECT_KEY) as mcp:
        out = structured(
            await mcp.call_tool("analysis_ingest", {"analysis_id": "scoped", "model": "book", "per_page": 25})
        )
        assert out["stored"] == 25
        err = error_of(
            await mcp.call_tool("analysis_query", {"analysis_id": "scoped", "mode": "describe", "project": "elsewhere"})
        )
        assert err["code"] == 4030
    r = await rest.post("/api/v1/analysis/query", json={"analysis_id": "scoped", "mode": "describe"})
    assert r.status_code == 404  # the admin's default project has no such session
    r = await rest.post(
        "/api/v1/analysis/query",
        json={"analysis_id": "scoped", "mode": "aggregate", "group_by": "status", "project": BOUND_PROJECT},
    )
    assert r.status_code == 200 and r.json()["total"] == 25


async def test_act_retries_429_and_reports_timeouts(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest)
    books = [b for b in expected_books() if not b["locked"]][:6]
    ids = [b["id"] for b in books]
    bookshelf.rewrite_registry(timeout_seconds=0.4, max_retries=1)
    bookshelf.faults(
        {"path": "/api/books/", "mode": "429", "retry_after": 0.3, "times": 1, "ids": [ids[0]]},
        {"path": "/api/books/", "mode": "hang", "hang_seconds": 1.5, "times": -1, "ids": [ids[1]]},
    )
    live = (
        await rest.post(
            "/api/v1/analysis/act",
            json={
                "analysis_id": AID,
                "model": "book",
                "action": "update",
                "attributes": {"rating": 2},
                "where": {"id": {"$lte": max(ids)}, "locked": False},
            },
        )
    ).json()
    s = live["summary"]
    assert s["failed"] == 1 and s["succeeded"] == s["total"] - 1
    assert live["sample_errors"][0]["record_id"] == str(ids[1])
    assert "timed out" in live["sample_errors"][0]["message"]
    assert _book(bookshelf, ids[0]).json()["rating"] == 2  # succeeded after honouring Retry-After
