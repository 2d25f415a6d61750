"""analysis_sessions and analysis_session over REST and MCP: what each session of a project holds,
paging, project-bound keys kept to their project, and a cleared session gone."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support import analysis as analysis_helpers
from tests.support.analysis import Upstream, structured
from tests.support.server import BOUND_PROJECT, PROJECT_KEY, RunningServer, mcp_client

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf


async def _ok(rest: httpx.AsyncClient, path: str, **params: Any) -> dict[str, Any]:
    r = await rest.get(f"/api/v1{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def _post(rest: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await rest.post(f"/api/v1{path}", json=body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_sessions_list_their_models_pages_findings_and_activity(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    assert await _ok(rest, "/analysis/sessions") == {
        "project": "default",
        "sessions": [],
        "total": 0,
        "next_offset": None,
        "tokens": (await _ok(rest, "/analysis/sessions"))["tokens"],
    }
    # "books": pages 1 and 3 of 50 books, plus a finding; "notes": findings only, stored later.
    for page in (1, 3):
        await _post(rest, "/analysis/ingest", {"analysis_id": "books", "model": "book", "page": page, "per_page": 50})
    finding = {"finding": "Locked books refuse edits", "category": "quality_issue", "metadata": {"ids": [1, 2]}}
    await _post(rest, "/analysis/store", {"analysis_id": "books", "findings": [finding]})
    await _post(
        rest, "/analysis/store", {"analysis_id": "notes", "persistent": True, "findings": [{"finding": "a note"}]}
    )

    listed = await _ok(rest, "/analysis/sessions")
    assert listed["total"] == 2 and listed["next_offset"] is None and listed["project"] == "default"
    notes, books = listed["sessions"]  # most recently active first
    assert notes["analysis_id"] == "notes" and notes["models"] == [] and notes["records"] == 0
    assert (notes["findings"], notes["page_summaries"], notes["pages_held"]) == (1, 0, 0)
    assert books["analysis_id"] == "books"
    assert books["models"] == [{"model": "book", "records": 100, "pages": 2, "first_page": 1, "last_page": 3}]
    assert (books["records"], books["findings"], books["page_summaries"], books["pages_held"]) == (100, 1, 2, 2)
    assert notes["last_activity"] >= books["last_activity"]
    assert 0 < listed["tokens"] < 400

    first = await _ok(rest, "/analysis/sessions", limit=1)
    assert [s["analysis_id"] for s in first["sessions"]] == ["notes"] and first["next_offset"] == 1
    second = await _ok(rest, "/analysis/sessions", limit=1, offset=1)
    assert [s["analysis_id"] for s in second["sessions"]] == ["books"] and second["next_offset"] is None
    past = await _ok(rest, "/analysis/sessions", offset=5)
    assert past["sessions"] == [] and past["total"] == 2 and past["next_offset"] is None

    one = await _ok(rest, "/analysis/sessions/books")
    assert one["analysis_id"] == "books" and one["project"] == "default" and one["records"] == 100
    assert one["models"] == books["models"]
    # Two single-page ingests of the same listing share one ingest state: the last one's.
    assert len(one["ingests"]) == 1
    state = one["ingests"][0]
    assert state["model"] == "book" and state["mode"] == "top_level" and state["params"] == {"per_page": 50}
    assert state["total_available"] == analysis_helpers.N_BOOKS and state["complete"] is False
    assert state["last_page"] == 3
    assert [(f["category"], f["finding"], f["metadata"]) for f in one["findings"]] == [
        ("quality_issue", "Locked books refuse edits", {"ids": [1, 2]})
    ]
    assert one["findings_total"] == 1 and one["findings"][0]["persistent"] is False
    assert one["findings"][0]["expires_at"] is not None
    assert [(f["source_model"], f["metadata"]["page"]) for f in one["page_summaries"]] == [("book", 1), ("book", 3)]
    assert one["page_summaries_total"] == 2 and one["page_summaries"][0]["finding"].startswith("book page 1")
    assert one["message"].startswith("Analysis 'books': 100 record(s) of 1 model(s), 1 finding(s), 2 page summaries")

    counts = await _ok(rest, "/analysis/sessions/books", findings_limit=0, summaries_limit=1)
    assert counts["findings"] == [] and counts["findings_total"] == 1
    assert len(counts["page_summaries"]) == 1 and counts["page_summaries_total"] == 2

    # Over MCP: a read-only tool of the analysis toolset.
    async with mcp_client(server.url, path="/mcp/analysis") as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        for name in ("analysis_sessions", "analysis_session"):
            annotations = tools[name].annotations
            assert annotations is not None and annotations.read_only_hint is True
        got = structured(await mcp.call_tool("analysis_sessions", {"limit": 5}))
        assert [s["analysis_id"] for s in got["sessions"]] == ["notes", "books"]
        shown = structured(await mcp.call_tool("analysis_session", {"analysis_id": "notes"}))
        assert shown["findings"][0]["persistent"] is True and shown["ingests"] == []

    # Cleared: gone from the list and from its page.
    await _post(rest, "/analysis/clear", {"analysis_id": "books"})
    assert [s["analysis_id"] for s in (await _ok(rest, "/analysis/sessions"))["sessions"]] == ["notes"]
    r = await rest.get("/api/v1/analysis/sessions/books")
    assert r.status_code == 404 and r.json()["error"]["code"] == 4002


async def test_project_bound_keys_see_their_project_only(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _post(rest, "/analysis/store", {"analysis_id": "mine", "findings": [{"finding": "default one"}]})
    await _post(
        rest,
        "/analysis/store",
        {"analysis_id": "theirs", "project": BOUND_PROJECT, "findings": [{"finding": "bound one"}]},
    )
    admin_view = await _ok(rest, "/analysis/sessions", project=BOUND_PROJECT)
    assert [s["analysis_id"] for s in admin_view["sessions"]] == ["theirs"]
    async with httpx.AsyncClient(
        base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {PROJECT_KEY}"}
    ) as bound:
        own = await _ok(bound, "/analysis/sessions")
        assert own["project"] == BOUND_PROJECT and [s["analysis_id"] for s in own["sessions"]] == ["theirs"]
        r = await bound.get("/api/v1/analysis/sessions", params={"project": "default"})
        assert r.status_code == 403 and r.json()["error"]["code"] == 4030
        r = await bound.get("/api/v1/analysis/sessions/mine", params={"project": "default"})
        assert r.status_code == 403 and r.json()["error"]["code"] == 4030
        r = await bound.get("/api/v1/analysis/sessions/mine")  # its own project holds no such session
        assert r.status_code == 404 and r.json()["error"]["code"] == 4002
        assert (await _ok(bound, "/analysis/sessions/theirs"))["findings"][0]["finding"] == "bound one"
    # A project nobody used lists nothing; bad arguments are refused.
    assert (await _ok(rest, "/analysis/sessions", project="never-used"))["total"] == 0
    for params in ({"limit": 0}, {"limit": 101}, {"offset": -1}, {"project": "bad name"}):
        r = await rest.get("/api/v1/analysis/sessions", params=params)
        assert r.status_code == 400 and r.json()["error"]["code"] == 4001, (params, r.text)
    r = await rest.get("/api/v1/analysis/sessions/bad%20id")
    assert r.status_code == 400 and r.json()["error"]["code"] == 4001
