"""analysis_ingest and analysis_query against the bookshelf demo upstream, over MCP and REST."""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest

from tests.support import analysis as analysis_helpers
from tests.support.analysis import N_BOOKS, TOKEN, Upstream, expected_books, structured
from tests.support.server import RunningServer, mcp_client

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf

AID = "library-audit"


async def _ingest_all(rest: httpx.AsyncClient, **extra: Any) -> dict[str, Any]:
    body = {"analysis_id": AID, "model": "book", "ingest_all": True, "per_page": 100, **extra}
    r = await rest.post("/api/v1/analysis/ingest", json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_ingest_all_over_mcp_with_progress_then_query_modes(server: RunningServer, bookshelf: Upstream) -> None:
    books = expected_books()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with mcp_client(server.url) as mcp:
        out = structured(
            await mcp.call_tool(
                "analysis_ingest",
                {
                    "analysis_id": AID,
                    "model": "book",
                    "ingest_all": True,
                    "per_page": 100,
                    "fields": ["id", "title", "author", "status", "rating", "updated_at"],
                },
                progress_callback=on_progress,
            )
        )
        assert out["stored"] == N_BOOKS and out["pages"] == 6 and out["complete"] is True
        assert out["session_records"] == N_BOOKS and out["total_available"] == N_BOOKS
        assert out["page_summaries"] == 6 and out["capped"] is False and out["next_page"] is None
        assert out["fields_per_record"] == 7  # the six fields plus author_id kept for "author"
        assert out["message"].startswith(f"Stored {N_BOOKS} record(s) (7 fields per record) across 6 page(s)")
        assert 0 < out["tokens"] < 200
        assert [p for p, _, _ in seen] == [1, 2, 3, 4, 5, 6] and seen[-1][1] == 6

        agg = structured(
            await mcp.call_tool("analysis_query", {"analysis_id": AID, "mode": "aggregate", "group_by": "status"})
        )
        want = Counter(b["status"] for b in books)
        assert agg["total"] == N_BOOKS
        assert [(g["value"], g["count"]) for g in agg["groups"]] == want.most_common()
        assert abs(sum(g["percent"] for g in agg["groups"]) - 100) < 0.5

        flt = structured(
            await mcp.call_tool(
                "analysis_query",
                {
                    "analysis_id": AID,
                    "mode": "filter",
                    "where": {"status": "completed", "rating": {"$lt": 2}},
                    "limit": 20,
                },
            )
        )
        low = [b for b in books if b["status"] == "completed" and b["rating"] is not None and b["rating"] < 2]
        assert flt["total"] == len(low) and len(flt["rows"]) == min(20, len(low))
        assert all(r["rating"] == 1 and r["status"] == "completed" for r in flt["rows"])
        assert set(flt["rows"][0]) == {"id", "title", "author", "author_id", "status", "rating", "updated_at"}

        smp = structured(
            await mcp.call_tool(
                "analysis_query", {"analysis_id": AID, "mode": "sample", "sample_size": 9, "stratify_by": "status"}
            )
        )
        assert Counter(r["status"] for r in smp["rows"]) == {"completed": 3, "reading": 3, "unread": 3}

        sem = structured(
            await mcp.call_tool(
                "analysis_query",
                {
                    "analysis_id": AID,
                    "mode": "semantic",
                    "query": "book page 3 status distribution and ratings",
                    "threshold": 0.3,
                    "top_k": 10,
                },
            )
        )
        assert sem["findings"] and all(f["category"] == "page_summary" for f in sem["findings"])
        assert any("page 3 (100 records)" in f["finding"] for f in sem["findings"])
        assert all(f["score"] >= 0.3 for f in sem["findings"])

        desc = structured(await mcp.call_tool("analysis_query", {"analysis_id": AID, "mode": "describe"}))
        assert "| status | string | Reading status; values: completed, reading, unread |" in desc["text"]
        assert "| updated_at | datetime |" in desc["text"] and '"group_by": "' in desc["text"]
        assert desc["total"] == N_BOOKS


async def test_rest_filters_projection_single_page_and_dedupe(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    books = expected_books()
    sci = [b for b in books if b["genre"] == "sci-fi"]
    body = {
        "analysis_id": AID,
        "model": "book",
        "filters": {"genre": "sci-fi"},
        "per_page": 40,
        "page": 2,
        "fields": ["title", "status"],
    }
    r = await rest.post("/api/v1/analysis/ingest", json=body)
    out = r.json()
    assert r.status_code == 200, r.text
    assert out["stored"] == 40 and out["pages"] == 1 and out["next_page"] == 3 and out["complete"] is False
    assert out["total_available"] == len(sci)
    rows = (
        await rest.post(
            "/api/v1/analysis/query",
            json={"analysis_id": AID, "mode": "filter", "where": {"status": "reading"}, "limit": 200},
        )
    ).json()
    assert {tuple(sorted(row)) for row in rows["rows"]} == {("id", "status", "title")}
    assert {row["id"] for row in rows["rows"]} <= {b["id"] for b in sci[40:80]}
    # the same page again replaces rather than duplicates
    again = (await rest.post("/api/v1/analysis/ingest", json=body)).json()
    assert again["session_records"] == 40
    agg = (
        await rest.post("/api/v1/analysis/query", json={"analysis_id": AID, "mode": "aggregate", "group_by": "status"})
    ).json()
    assert agg["total"] == 40
    # one page summary per page, even after re-ingesting it
    sem = (
        await rest.post(
            "/api/v1/analysis/query",
            json={"analysis_id": AID, "mode": "semantic", "query": "book page 2", "threshold": 0.0},
        )
    ).json()
    assert sem["total"] == 1 and sem["findings"][0]["finding"].startswith("book page 2 (40 records)")
    bad = await rest.post("/api/v1/analysis/ingest", json={**body, "filters": {"colour": "red"}})
    assert bad.status_code == 400 and "colour" in bad.json()["error"]["message"]
    assert "genre" in " ".join(bad.json()["error"]["suggestions"])


async def test_cap_at_50_pages_then_resume(server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream) -> None:
    first = await _ingest_all(rest, per_page=10)
    assert first["pages"] == 50 and first["stored"] == 500 and first["capped"] is True
    assert first["complete"] is False and first["next_page"] == 51 and "capped at 50 pages" in first["message"]
    second = await _ingest_all(rest, per_page=10, resume=True)
    assert second["pages"] == 10 and second["stored"] == 100 and second["complete"] is True
    assert second["session_records"] == N_BOOKS
    third = await _ingest_all(rest, per_page=10, resume=True)
    assert third["pages"] == 0 and "already completed" in third["message"]
    stats = bookshelf.stats()
    assert stats["requests"]["/api/books"] == 60  # nothing fetched twice


async def test_one_call_holds_at_most_the_byte_cap_of_pages_then_resume_continues(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages are held until the call stores them (no transaction is open while the upstream answers):
    # a call stops fetching once they hold CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES.
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as up:
        sizes = [
            len((await up.get(f"{bookshelf.url}/api/books", params={"per_page": 10, "page": p})).content)
            for p in (1, 2, 3)
        ]
    cap = sizes[0] + sizes[1] + sizes[2] // 2  # two pages fit, the third passes the cap
    analysis_helpers.analysis_settings(server, monkeypatch, max_upstream_bytes=cap)
    first = await _ingest_all(rest, per_page=10)
    assert first["pages"] == 3 and first["stored"] == 30 and first["capped"] is True, first
    assert first["next_page"] == 4 and "CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES" in first["message"]
    second = await _ingest_all(rest, per_page=10, resume=True)
    assert second["pages"] == 3 and second["session_records"] == 60


async def test_sample_where_and_proximity_buckets(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest_all(rest)
    books = expected_books()

    async def q(**kw: Any) -> dict[str, Any]:
        r = await rest.post("/api/v1/analysis/query", json={"analysis_id": AID, "mode": "sample", **kw})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    assert len((await q())["rows"]) == 5
    pool = [b for b in books if b["rating"] is not None and b["rating"] >= 4]
    res = await q(sample_size=12, where={"rating": {"$gte": 4}}, stratify_by="genre")
    assert res["total"] == len(pool) and all(r["rating"] >= 4 for r in res["rows"])
    assert len({r["genre"] for r in res["rows"]}) >= 6  # minorities appear despite the skew
    window = await q(sample_size=50, proximity={"field": "updated_at", "origin": "2026-03-15", "window": "14 days"})
    lo, hi = "2026-03-01T00:00:00Z", "2026-03-29T00:00:00Z"
    in_window = [b for b in books if lo <= b["updated_at"] <= hi]
    assert window["total"] == len(in_window)
    assert all(lo <= r["updated_at"] <= hi for r in window["rows"])
    bucketed = await q(
        sample_size=8,
        proximity={"field": "updated_at", "origin": "2026-03-15", "window": "14 days", "bucket": "1 week"},
    )
    weeks = {r["updated_at"][:10] >= "2026-03-15" for r in bucketed["rows"]}
    assert weeks == {True, False} and "strata" in bucketed["message"]
    combo = await q(
        sample_size=6,
        stratify_by="status",
        where={"genre": "sci-fi"},
        proximity={"field": "added_at", "origin": "2026-01-01", "window": "6 months", "bucket": "1 month"},
    )
    assert all(r["genre"] == "sci-fi" for r in combo["rows"]) and len(combo["rows"]) <= 6


async def test_filter_ranges_dates_offset_and_bounds(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest_all(rest)
    books = expected_books()

    async def q(**kw: Any) -> dict[str, Any]:
        r = await rest.post("/api/v1/analysis/query", json={"analysis_id": AID, "mode": "filter", **kw})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    since = [b for b in books if b["updated_at"] >= "2026-04-01"]
    res = await q(where={"updated_at": {"$gte": "2026-04-01"}}, limit=200)
    assert res["total"] == len(since)
    pages = [b for b in books if 200 <= b["pages"] < 300]
    res = await q(where={"pages": {"$gte": 200, "$lt": 300}}, limit=5, offset=5)
    assert res["total"] == len(pages) and [r["id"] for r in res["rows"]] == [b["id"] for b in pages[5:10]]
    assert res["truncated"] is True and "next offset 10" in res["message"]
    res = await q(where={"status": "unread", "rating": None}, limit=200)
    assert res["total"] == sum(1 for b in books if b["status"] == "unread")
    default = await q(where={"status": "completed"})
    assert len(default["rows"]) == 20
    big = await rest.post(
        "/api/v1/analysis/query",
        json={"analysis_id": AID, "mode": "filter", "where": {"status": "completed"}, "limit": 201},
    )
    assert big.status_code == 400 and big.json()["error"]["details"]["errors"][0]["field"] == "limit"
    agg = (
        await rest.post(
            "/api/v1/analysis/query",
            json={
                "analysis_id": AID,
                "mode": "aggregate",
                "group_by": "rating",
                "where": {"status": "completed"},
                "limit": 2,
            },
        )
    ).json()
    assert len(agg["groups"]) == 2 and agg["truncated"] is True and "top 2 of 5 shown" in agg["message"]
