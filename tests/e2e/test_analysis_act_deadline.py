"""analysis_act against a hanging upstream: the deadline, client cancellation (the copy still follows
what the upstream accepted), child models, credentials read per call, honest annotations and
errors that name no server path."""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import yaml

from app.analysis.demo_upstream import generate
from app.analysis.service_act import CONCURRENCY
from tests.support import analysis as analysis_helpers
from tests.support.analysis import N_BOOKS, TOKEN, Upstream, analysis_settings, expected_books, structured
from tests.support.server import ADMIN_KEY, PgCluster, RunningServer, mcp_client
from tests.support.waiting import eventually_sync

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf

AID = "act-deadline"
MARK = "Deadline test"
ACCEPTED = 7  # PATCHes the upstream answers before it starts hanging


async def _ingest(rest: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await rest.post("/api/v1/analysis/ingest", json={"analysis_id": AID, **body})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def _unread() -> list[dict[str, Any]]:
    return [b for b in expected_books() if b["status"] == "unread" and not b["locked"]]


def _act_body(**extra: Any) -> dict[str, Any]:
    return {
        "analysis_id": AID,
        "model": "book",
        "where": {"status": "unread", "locked": False},
        "action": "update",
        "attributes": {"title": MARK},
        **extra,
    }


def _hang_after(bookshelf: Upstream, accepted: int) -> None:
    """The upstream answers `accepted` PATCHes, then hangs on every one."""
    bookshelf.faults(
        {"path": "/api/books/", "method": "PATCH", "mode": "hang", "hang_seconds": 20, "skip": accepted, "times": -1}
    )


def _patches(bookshelf: Upstream) -> int:
    """The requests for one book the upstream has received (the act's PATCHes, hung ones included)."""
    return sum(n for path, n in bookshelf.stats()["requests"].items() if path.startswith("/api/books/"))


def _renamed_upstream(bookshelf: Upstream, ids: list[int]) -> set[int]:
    """The books among `ids` whose title the upstream changed (read directly from it)."""
    with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as direct:
        return {i for i in ids if direct.get(f"{bookshelf.url}/api/books/{i}").json()["title"] == MARK}


async def _renamed_in_copy(rest: httpx.AsyncClient) -> set[int]:
    r = await rest.post(
        "/api/v1/analysis/query",
        json={"analysis_id": AID, "mode": "aggregate", "group_by": "id", "where": {"title": MARK}, "limit": 200},
    )
    assert r.status_code == 200, r.text
    ids = {int(group["value"]) for group in r.json()["groups"]}
    assert len(ids) == r.json()["total"]
    return ids


async def test_act_ends_within_its_deadline_with_a_true_copy(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest, model="book", ingest_all=True, per_page=100)
    target = _unread()
    assert len(target) > 60  # more than one batch
    bookshelf.rewrite_registry(timeout_seconds=10.0, max_retries=3)  # a slow upstream: 10 s per attempt
    _hang_after(bookshelf, ACCEPTED)
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    started = time.monotonic()
    async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
        out = structured(
            await mcp.call_tool("analysis_act", _act_body(deadline_seconds=3), progress_callback=on_progress)
        )
    elapsed = time.monotonic() - started
    assert elapsed < 3 + 2.5, elapsed
    s = out["summary"]
    assert s["deadline_reached"] is True and s["total"] == len(target)
    assert s["succeeded"] == ACCEPTED and s["failed"] == 0 and s["unknown"] == 5  # the 5 in flight
    assert s["not_attempted"] == len(target) - ACCEPTED - 5
    assert s["succeeded"] + s["failed"] + s["unknown"] + s["not_attempted"] == s["total"]
    assert len(out["unknown_ids"]) == 5 and out["sample_errors"] == []
    assert "deadline (3s) was reached" in out["message"] and "run the same act again" in out["message"]
    assert sorted(seen) == list(range(1, ACCEPTED + 1))  # one notification per finished record
    ids = [b["id"] for b in target]
    accepted = _renamed_upstream(bookshelf, ids)
    assert len(accepted) == ACCEPTED and not accepted & {int(i) for i in out["unknown_ids"]}
    assert await _renamed_in_copy(rest) == accepted  # the copy is true
    # acts are idempotent per record: once the upstream is back, the same act finishes the job
    bookshelf.faults()
    again = (await rest.post("/api/v1/analysis/act", json=_act_body())).json()["summary"]
    assert again["total"] == again["succeeded"] == len(target) and again["already_done"] == ACCEPTED
    assert await _renamed_in_copy(rest) == set(ids) == _renamed_upstream(bookshelf, ids)


async def test_record_budget_bounds_each_record(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest, model="book", ingest_all=True, per_page=100)
    books = [b for b in expected_books() if not b["locked"]][:6]
    ids = [b["id"] for b in books]
    bookshelf.rewrite_registry(timeout_seconds=10.0, max_retries=3)
    bookshelf.faults({"path": "/api/books/", "method": "PATCH", "mode": "hang", "hang_seconds": 20, "ids": [ids[2]]})
    started = time.monotonic()
    out = (
        await rest.post(
            "/api/v1/analysis/act",
            json={
                "analysis_id": AID,
                "model": "book",
                "where": {"id": {"$lte": max(ids)}, "locked": False},
                "action": "update",
                "attributes": {"title": MARK},
                "record_seconds": 1.5,
            },
        )
    ).json()
    assert time.monotonic() - started < 6
    s = out["summary"]
    assert s["unknown"] == 1 and s["succeeded"] == len(ids) - 1 and s["deadline_reached"] is False
    assert out["unknown_ids"] == [str(ids[2])] and "record_seconds" in out["message"]
    assert await _renamed_in_copy(rest) == set(ids) - {ids[2]} == _renamed_upstream(bookshelf, ids)


async def test_mcp_cancellation_still_records_what_the_upstream_accepted(
    server: RunningServer,
    rest: httpx.AsyncClient,
    bookshelf: Upstream,
    pg: PgCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="cairn.call")
    caplog.set_level(logging.INFO, logger="cairn.analysis.act")
    await _ingest(rest, model="book", ingest_all=True, per_page=100)
    ids = [b["id"] for b in _unread()]
    bookshelf.rewrite_registry(timeout_seconds=10.0, max_retries=3)
    _hang_after(bookshelf, ACCEPTED)
    seen: list[float] = []
    accepted_all = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        if len(seen) == ACCEPTED:
            accepted_all.set()

    async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
        call = asyncio.ensure_future(
            mcp.call_tool("analysis_act", _act_body(deadline_seconds=120), progress_callback=on_progress)
        )
        await asyncio.wait_for(accepted_all.wait(), 30)
        # the upstream has received the hung requests too (the call sends CONCURRENCY at a time)
        await asyncio.to_thread(
            eventually_sync, lambda: _patches(bookshelf) >= ACCEPTED + CONCURRENCY, what="the hung requests in flight"
        )
        call.cancel()  # the client gives up: the SDK sends notifications/cancelled
        with pytest.raises(asyncio.CancelledError):
            await call
    accepted = _renamed_upstream(bookshelf, ids)
    assert len(accepted) == ACCEPTED
    deadline = time.monotonic() + 15
    while await _renamed_in_copy(rest) != accepted:
        assert time.monotonic() < deadline, "the accepted records never reached the copy"
        await asyncio.sleep(0.2)
    # the server cancelled the call (its transaction rolled back) and the rollback step wrote the copy
    calls = [r for r in caplog.records if r.getMessage() == "call" and getattr(r, "operation", "") == "analysis_act"]
    assert [getattr(r, "outcome", None) for r in calls] == ["cancelled"]
    assert any("after a rollback" in r.getMessage() and getattr(r, "records", 0) == ACCEPTED for r in caplog.records)
    # and the cancelled call's own transaction ended: no connection of the server is left in one
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        held = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'cairn' AND state LIKE 'idle in transaction%'"
        )
    finally:
        await conn.close()
    assert held == 0


async def test_rest_client_timeout_still_leaves_a_true_copy(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    await _ingest(rest, model="book", ingest_all=True, per_page=100)
    ids = [b["id"] for b in _unread()]
    _hang_after(bookshelf, ACCEPTED)
    async with httpx.AsyncClient(
        base_url=server.url, timeout=1.5, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    ) as impatient:
        with pytest.raises(httpx.TimeoutException):
            await impatient.post("/api/v1/analysis/act", json=_act_body(deadline_seconds=4))
    deadline = time.monotonic() + 15
    while await _renamed_in_copy(rest) != _renamed_upstream(bookshelf, ids):
        assert time.monotonic() < deadline, "the copy never matched the upstream"
        await asyncio.sleep(0.3)
    assert len(await _renamed_in_copy(rest)) == ACCEPTED


def _writable_sessions_registry(bookshelf: Upstream) -> None:
    doc = yaml.safe_load(bookshelf.registry.read_text())
    child = doc["upstreams"]["bookshelf"]["models"]["book"]["children"]["sessions"]
    child.update(
        writable=True,
        writable_attributes=["device", "pages_read"],
        update={"method": "PATCH", "path": "/books/{parent_id}/sessions/{id}"},
    )
    bookshelf.registry.write_text(yaml.safe_dump(doc, sort_keys=False))


async def test_child_model_act(server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream) -> None:
    lib = generate(N_BOOKS)
    await _ingest(rest, model="book", per_page=25, filters={"genre": "mystery"})
    await _ingest(rest, parent_model="book", child_resource="sessions")
    body = {
        "analysis_id": AID,
        "model": "reading_session",
        "where": {"device": "phone"},
        "action": "update",
        "attributes": {"device": "paper"},
    }
    refused = await rest.post("/api/v1/analysis/act", json=body)
    assert refused.status_code == 400 and "not writable" in refused.json()["error"]["message"], refused.text
    unknown = await rest.post("/api/v1/analysis/act", json={**body, "model": "ticket_comment"})
    assert unknown.status_code == 404 and "reading_session" in " ".join(unknown.json()["error"]["suggestions"])
    _writable_sessions_registry(bookshelf)
    parents = [b["id"] for b in lib.books.values() if b["genre"] == "mystery"][:25]
    phone = [(p, s["id"]) for p in parents for s in lib.sessions[p] if s["device"] == "phone"]
    assert phone
    bad = await rest.post("/api/v1/analysis/act", json={**body, "attributes": {"started_at": "x"}})
    assert bad.status_code == 400 and "not writable" in bad.json()["error"]["message"]
    out = (await rest.post("/api/v1/analysis/act", json=body)).json()
    assert out["summary"]["total"] == len(phone) and out["summary"]["succeeded"] == len(phone), out
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as direct:
        for parent, sid in phone:
            listed = await direct.get(f"{bookshelf.url}/api/books/{parent}/sessions", params={"per_page": 100})
            assert next(r for r in listed.json()["data"] if r["id"] == sid)["device"] == "paper"
    groups = (
        await rest.post(
            "/api/v1/analysis/query",
            json={"analysis_id": AID, "mode": "aggregate", "model": "reading_session", "group_by": "device"},
        )
    ).json()["groups"]
    assert "phone" not in {g["value"] for g in groups}


async def test_value_file_is_read_at_each_call(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    secret_dir = Path(tempfile.mkdtemp(prefix="cairn-secret-"))
    secret = secret_dir / "token"
    secret.write_text("an-old-token\n")
    bookshelf.rewrite_registry(auth={"header": "Authorization", "scheme": "Bearer", "value_file": str(secret)})
    body = {"analysis_id": AID, "model": "book", "per_page": 10}
    wrong = await rest.post("/api/v1/analysis/ingest", json=body)
    assert wrong.status_code == 502 and "401" in wrong.json()["error"]["message"], wrong.text
    secret.write_text(f"{TOKEN}\n")  # the mounted secret is rotated; no restart
    assert (await _ingest(rest, model="book", per_page=10))["stored"] == 10
    secret.write_text("revoked")
    assert (await rest.post("/api/v1/analysis/ingest", json=body)).status_code == 502
    secret.unlink()
    gone = await rest.post("/api/v1/analysis/ingest", json=body)
    error = gone.json()["error"]
    assert gone.status_code == 400 and error["code"] == 4003 and "value_file" in error["message"]
    assert str(secret_dir) not in gone.text and "revoked" not in gone.text


@pytest.mark.parametrize("path", ["/mcp", "/mcp/analysis", "/mcp/all"])
async def test_open_world_annotations(server: RunningServer, path: str) -> None:
    async with mcp_client(server.url, key=ADMIN_KEY, path=path) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
    if path == "/mcp" and "analysis_act" not in tools:
        pytest.skip("plain /mcp lists the default toolsets only")
    for name in ("analysis_ingest", "analysis_act"):
        annotations = tools[name].annotations
        assert annotations is not None and annotations.open_world_hint is True, (path, name, annotations)
    for name in ("analysis_query", "analysis_store", "analysis_clear"):
        annotations = tools[name].annotations
        assert annotations is not None and annotations.open_world_hint is False, (path, name, annotations)
    # the wire itself, on the single-JSON answer path a plain client gets
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(
            f"{server.url}{path}",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}", "Accept": "application/json, text/event-stream"},
        )
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.text
    listed = {t["name"]: t for t in r.json()["result"]["tools"]}
    assert listed["analysis_act"]["annotations"]["openWorldHint"] is True
    assert listed["analysis_ingest"]["annotations"]["openWorldHint"] is True


async def test_errors_name_no_server_path(
    server: RunningServer,
    rest: httpx.AsyncClient,
    bookshelf: Upstream,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="cairn-private-registry-"))
    cases = {
        "broken.yaml": "upstreams:\n  x: [unclosed\n",
        "invalid.yaml": "upstreams:\n  x:\n    base_url: ftp://nope\n    models: {}\n",
        "missing.yaml": None,
    }
    body = {"analysis_id": AID, "model": "book"}
    caplog.set_level(logging.WARNING, logger="cairn.analysis.catalog")
    for name, text in cases.items():
        path = folder / name
        if text is not None:
            path.write_text(text)
        analysis_settings(server, monkeypatch, upstreams=path)
        for call in (
            rest.post("/api/v1/analysis/ingest", json=body),
            rest.post("/api/v1/analysis/act", json={**body, "action": "delete", "dry_run": True}),
        ):
            r = await call
            assert r.status_code == 400 and r.json()["error"]["code"] == 4003, r.text
            assert str(folder) not in r.text and name not in r.text, r.text
        async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
            result = await mcp.call_tool("analysis_ingest", {"analysis_id": AID, "model": "book"})
        assert result.is_error and str(folder) not in json.dumps(result.model_dump(mode="json"))
        assert any(str(path) in record.getMessage() for record in caplog.records), name  # the log names it
    analysis_settings(server, monkeypatch, upstreams=folder / "invalid.yaml")
    r = await rest.post("/api/v1/analysis/ingest", json=body)
    assert "base_url" in r.json()["error"]["message"]  # still says what is wrong
