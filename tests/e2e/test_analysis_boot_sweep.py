"""The analysis feature's boot sweep runs through the core lifecycle hooks."""

from __future__ import annotations

import asyncpg
import httpx

from tests.support.server import ADMIN_KEY, PgCluster, server_settings, start_server, stop_server


async def _count(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM analysis_findings"))
    finally:
        await conn.close()


async def test_expired_findings_are_swept_at_boot(pg: PgCluster) -> None:
    name = pg.new_database()
    dsn = pg.handle.libpq_uri(name)
    settings = server_settings(pg.handle.url(name), features=["analysis"])
    srv, thread, _ = start_server(settings)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{settings.port}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60
        ) as c:
            for text, persistent in (("short-lived note", False), ("kept note", True)):
                r = await c.post(
                    "/api/v1/analysis/store",
                    json={
                        "analysis_id": "boot",
                        "persistent": persistent,
                        "findings": [{"finding": text, "category": "note"}],
                    },
                )
                assert r.status_code == 200, r.text
    finally:
        stop_server(srv, thread)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "UPDATE analysis_findings SET expires_at = now() - interval '1 hour' WHERE expires_at IS NOT NULL"
        )
    finally:
        await conn.close()
    assert await _count(dsn) == 2
    settings = server_settings(pg.handle.url(name), features=["analysis"])
    srv, thread, _ = start_server(settings)
    try:
        assert await _count(dsn) == 1
    finally:
        stop_server(srv, thread)
