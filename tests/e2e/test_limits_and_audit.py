"""Per-key rate limits on both transports, and the audit log of write-scope calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from app.core.auth import hash_key
from tests.support.server import (
    ADMIN_KEY,
    READ_KEY,
    WRITE_KEY,
    PgCluster,
    RunningServer,
    error_of,
    mcp_client,
    server_settings,
    start_server,
    stop_server,
)
from tests.support.waiting import eventually


async def test_rate_limit_answers_429_with_retry_after_on_both_transports(pg: PgCluster) -> None:
    # 3 calls per window of 3,000 s: however slowly the calls run, the window cannot pass between them.
    settings = server_settings(
        pg.handle.url(pg.new_database()), rate_limit_per_second=0.001, rate_limit_burst=3, features=[]
    )
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    try:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {READ_KEY}"}) as c:
            codes = [(await c.get("/api/v1/projects")).status_code for _ in range(4)]
            assert codes == [200, 200, 200, 429]
            limited = await c.get("/api/v1/projects")
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
            assert limited.json()["error"]["code"] == 4290
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
            assert (await c.get("/api/v1/projects")).status_code == 200  # buckets are per key
        async with mcp_client(base, key=READ_KEY) as mcp:
            err = error_of(await mcp.call_tool("list_projects", {}))
            assert err["code"] == 4290 and err["details"]["retry_after"] >= 1
    finally:
        stop_server(srv, thread)


async def test_audit_log_records_writes_and_failures(server: RunningServer, rest: httpx.AsyncClient) -> None:
    writer = {"Authorization": f"Bearer {WRITE_KEY}"}
    assert (await rest.post("/api/v1/projects", json={"name": "audited"}, headers=writer)).status_code == 200
    async with mcp_client(server.url, key=WRITE_KEY) as mcp:
        assert not (await mcp.call_tool("create_project", {"name": "audited-too"})).is_error
        await mcp.call_tool("list_projects", {})  # read-only: not audited
    assert (await rest.post("/api/v1/testing/boom", json={"project": "p1"})).status_code == 500
    page = (await rest.get("/api/v1/audit", params={"limit": 10})).json()
    entries = page["entries"]
    ops = [(e["operation"], e["transport"], e["outcome"]) for e in entries]
    assert ops == [("test_boom", "rest", "error"), ("create_project", "mcp", "ok"), ("create_project", "rest", "ok")]
    write_id = f"static:{hash_key(WRITE_KEY)[:8]}"
    assert entries[1]["key_id"] == write_id and entries[1]["counts"] == {"created": True}
    assert entries[0]["error_code"] == 5000
    assert WRITE_KEY not in str(page)
    only_mcp = (await rest.get("/api/v1/audit", params={"operation": "create_project", "limit": 1})).json()
    assert len(only_mcp["entries"]) == 1 and only_mcp["next_before_id"] == only_mcp["entries"][0]["id"]
    older = (
        await rest.get("/api/v1/audit", params={"operation": "create_project", "before_id": only_mcp["next_before_id"]})
    ).json()
    assert [e["transport"] for e in older["entries"]] == ["rest"]
    denied = await rest.get("/api/v1/audit", headers=writer)
    assert denied.status_code == 403


async def test_long_jobs_are_limited_per_key(server: RunningServer, rest: httpx.AsyncClient, tmp_path: Path) -> None:
    limit = server.settings.max_long_jobs_per_key
    release = tmp_path / "release"
    started = [tmp_path / f"started-{i}" for i in range(limit)]
    held = {"steps": 1, "delay_ms": 0, "release": str(release)}
    slow = [
        asyncio.create_task(rest.post("/api/v1/testing/progress", json={**held, "started": str(mark)}))
        for mark in started
    ]
    # Every slot is taken: the calls run, and wait until the test releases them.
    await eventually(lambda: all(mark.exists() for mark in started), what="the held calls running")
    refused = await rest.post("/api/v1/testing/progress", json={"steps": 1, "delay_ms": 0})
    assert refused.status_code == 429 and "long operation" in refused.json()["error"]["message"]
    other_key = await rest.post(
        "/api/v1/testing/progress", json={"steps": 1, "delay_ms": 0}, headers={"Authorization": f"Bearer {WRITE_KEY}"}
    )
    assert other_key.status_code == 200
    assert not any(task.done() for task in slow)
    release.touch()
    assert [r.status_code for r in await asyncio.gather(*slow)] == [200] * limit
    again = await rest.post("/api/v1/testing/progress", json={"steps": 1, "delay_ms": 0})
    assert again.status_code == 200
