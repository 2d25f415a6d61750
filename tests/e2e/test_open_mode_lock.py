"""A server started without keys (open, loopback only) locks as soon as a key is created: no restart,
REST and MCP alike, and the key's own scope applies."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import (
    PgCluster,
    error_of,
    mcp_client,
    resource_text,
    run_async,
    server_settings,
    start_server,
    stop_server,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _create_key(db_url: str, scopes: str) -> str:
    """`cairn keys create` as a user runs it while the server is up; the key is the last line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    done = subprocess.run(
        [sys.executable, "-m", "app", "keys", "create", "--scopes", scopes, "--name", "late"],
        env={**env, "CAIRN_DATABASE_URL": db_url, "CAIRN_LOG_LEVEL": "WARNING"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_a_created_key_locks_an_open_server_at_once(pg: PgCluster) -> None:
    db = pg.new_database()
    settings = server_settings(pg.handle.url(db), api_keys=[])
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    try:
        # Open: no key needed.
        assert httpx.get(f"{base}/api/v1/projects").status_code == 200

        async def tools(key: str | None) -> set[str]:
            async with mcp_client(base, key=key, path="/mcp/projects") as mcp:
                return {t.name for t in (await mcp.list_tools()).tools}

        assert run_async(tools(None)) == {"create_project", "list_projects"}

        key = _create_key(pg.handle.url(db), "read")
        deadline = time.monotonic() + 10
        while httpx.get(f"{base}/api/v1/projects").status_code == 200:
            assert time.monotonic() < deadline, "a created key did not lock the open server"
            time.sleep(0.2)
        # Locked: REST and MCP need a valid key, and the key's scope applies.
        missing = httpx.get(f"{base}/api/v1/projects")
        assert missing.status_code == 401 and missing.json()["error"]["code"] == 4010
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert "resource_metadata" not in missing.headers["www-authenticate"]  # none is served here
        wrong = httpx.get(f"{base}/api/v1/projects", headers={"Authorization": "Bearer not-a-key-at-all"})
        assert wrong.status_code == 401
        auth = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{base}/api/v1/projects", headers=auth).status_code == 200
        refused = httpx.post(f"{base}/api/v1/projects", json={"name": "x"}, headers=auth)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == 4030
        mcp_missing = httpx.post(
            f"{base}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert mcp_missing.status_code == 401 and mcp_missing.json()["error"]["code"] == 4010
        assert run_async(tools(key)) == {"list_projects"}  # a read key sees no write tool

        async def write_with_read_key() -> dict[str, object]:
            async with mcp_client(base, key=key, path="/mcp/projects") as mcp:
                return error_of(await mcp.call_tool("create_project", {"name": "x"}))

        assert run_async(write_with_read_key())["code"] == 4030

        async def resources(key: str) -> tuple[str, str]:
            async with mcp_client(base, key=key) as mcp:
                health = resource_text(await mcp.read_resource("mcp://health"))
                tags = resource_text(await mcp.read_resource("mcp://default/tags"))
                return health, tags

        health, tags = run_async(resources(key))  # static resources and templates read as the key
        assert '"status"' in health and '"tags"' in tags
    finally:
        stop_server(srv, thread)
