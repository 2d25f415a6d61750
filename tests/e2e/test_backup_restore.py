"""`cairn backup` / `cairn restore` round trip: the restored database answers the same queries."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.support.server import ADMIN_KEY, PgCluster, mcp_client, server_settings, start_server, stop_server

pytestmark = pytest.mark.slow  # subprocesses, restarts or generated inputs: seconds per test

ROOT = Path(__file__).resolve().parents[2]


def _cli(url: str, *args: str) -> None:
    env = {**os.environ, "CAIRN_DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "-m", "app", *args], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300
    )


async def _snapshot(url: str) -> tuple[object, object]:
    settings = server_settings(url)
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    try:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
            projects = (await c.get("/api/v1/projects")).json()
        async with mcp_client(base) as mcp:
            audit = (await mcp.call_tool("audit_log", {"operation": "create_project"})).structured_content
        return projects, [(e["operation"], e["project"]) for e in audit["entries"]]
    finally:
        stop_server(srv, thread)


async def _populate(url: str) -> None:
    settings = server_settings(url)
    srv, thread, _ = start_server(settings)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{settings.port}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            for name in ("kept-1", "kept-2", "kept-3"):
                assert (await c.post("/api/v1/projects", json={"name": name})).status_code == 200
    finally:
        stop_server(srv, thread)


async def test_backup_then_restore_answers_the_same(pg: PgCluster) -> None:
    source = pg.handle.url(pg.new_database())
    await _populate(source)
    before = await _snapshot(source)
    dump = str(Path(tempfile.mkdtemp()) / "cairn.dump")
    _cli(source, "backup", dump)
    assert Path(dump).stat().st_size > 1000  # noqa: ASYNC240
    target = pg.handle.url(pg.new_database())
    _cli(target, "migrate")  # an already-initialised target is replaced, not merged
    _cli(target, "restore", dump)
    after = await _snapshot(target)
    assert after == before
    assert [p["name"] for p in after[0]["projects"]] == ["kept-1", "kept-2", "kept-3"]  # type: ignore[index]
