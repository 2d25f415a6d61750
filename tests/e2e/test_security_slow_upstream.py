"""A slow upstream cannot starve the database pool, and an exhausted pool answers 5030 with the error body.

A server with a pool of three connections runs more `analysis_ingest` calls at once than it has
connections, against an upstream on 127.0.0.1 that trickles one byte every 0.2 s (each read passes
httpx's per-read timeout; the answer never ends in time). The ingests wait on the upstream with no
transaction open, so another key's `list_projects` (a stored key: its lookup needs a connection too)
answers 200 meanwhile; each ingest ends near its `timeout_seconds` with a clear 5020. And when every
pooled connection is really taken, a call answers 5030 with the JSON error body, not a plain 500.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.analysis import analysis_settings
from tests.support.server import (
    ADMIN_KEY,
    PROJECT_KEY,
    WRITE_KEY,
    PgCluster,
    RunningServer,
    free_port,
    serve_app,
    server_settings,
    start_server,
    stop_server,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

TIMEOUT_S = 2.0  # the upstream's timeout_seconds
POOL = 3
INGESTS = 6  # twice the pool


class Trickle:
    """An upstream whose answers arrive one byte every 0.2 s for a minute; counts the requests in flight."""

    def __init__(self) -> None:
        self.open = 0

    def app(self) -> Starlette:
        async def slow(request: Request) -> Response:
            async def body() -> AsyncIterator[bytes]:
                self.open += 1
                try:
                    yield b'{"data": ['
                    for _ in range(300):
                        await asyncio.sleep(0.2)
                        yield b" "
                    yield b"]}"
                finally:
                    self.open -= 1

            return StreamingResponse(body(), media_type="application/json")

        async def items(request: Request) -> Response:
            return JSONResponse({"data": [{"id": 1, "x": 0}, {"id": 2, "x": 0}]})

        return Starlette(
            routes=[
                Route("/api/slow", slow),
                Route("/api/items", items),
                Route("/api/items/{id}", slow, methods=["PATCH"]),
            ]
        )


@pytest.fixture(scope="module")
def trickle() -> Iterator[tuple[Trickle, Path]]:
    port = free_port()
    registry = Path(tempfile.mkdtemp(prefix="cairn-trickle-")) / "upstreams.yaml"
    model = {"list_path": "slow", "items_path": "data", "pagination": {"style": "none"}}
    writable = {
        "list_path": "items",
        "items_path": "data",
        "pagination": {"style": "none"},
        "writable": True,
        "update": {"method": "PATCH", "path": "items/{id}"},
    }
    upstream = {"base_url": f"http://127.0.0.1:{port}/api", "timeout_seconds": TIMEOUT_S, "max_retries": 0}
    models = {"slow": model, "items": writable}
    registry.write_text(yaml.safe_dump({"upstreams": {"trickle": {**upstream, "models": models}}}))
    state = Trickle()
    server, thread = serve_app(state.app(), port, "trickling")
    try:
        yield state, registry
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def small_pool_database(pg: PgCluster) -> str:
    return pg.new_database()


@pytest.fixture(scope="module")
def small_pool(pg: PgCluster, small_pool_database: str) -> Iterator[RunningServer]:
    """A server whose pool has three connections, a 3 s pool timeout and no key cache."""
    settings = server_settings(
        pg.handle.url(small_pool_database),
        features=["analysis"],
        db_pool_size=POOL,
        db_max_overflow=0,
        db_pool_timeout=3.0,
    )
    srv, thread, app = start_server(settings)
    try:
        yield RunningServer(url=f"http://127.0.0.1:{settings.port}", settings=settings, app=app)
    finally:
        stop_server(srv, thread)


async def _stored_key(url: str) -> str:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=60) as c:
        made = await c.post("/api/v1/keys", json={"scopes": ["read", "write"], "name": "victim"})
        assert made.status_code == 200, made.text
        return str(made.json()["token"])


async def _ingest(client: httpx.AsyncClient, key: str, n: int) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    r = await client.post(
        "/api/v1/analysis/ingest",
        json={"analysis_id": f"slow-{n}", "model": "slow"},
        headers={"Authorization": f"Bearer {key}"},
    )
    return time.monotonic() - started, r


async def test_slow_upstreams_hold_no_connection_and_each_ingest_ends_at_its_timeout(
    small_pool: RunningServer, trickle: tuple[Trickle, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream, registry = trickle
    analysis_settings(small_pool, monkeypatch, upstreams=registry)
    victim = await _stored_key(small_pool.url)
    async with (
        httpx.AsyncClient(base_url=small_pool.url, timeout=120) as attacker,
        httpx.AsyncClient(base_url=small_pool.url, headers={"Authorization": f"Bearer {victim}"}, timeout=120) as c,
    ):
        # Two long operations per key at most: three keys run two ingests each.
        keys = [ADMIN_KEY, WRITE_KEY, PROJECT_KEY]
        calls = [asyncio.create_task(_ingest(attacker, keys[n % 3], n)) for n in range(INGESTS)]
        await eventually(
            lambda: upstream.open >= INGESTS or any(t.done() for t in calls), timeout=30, what="the ingests waiting"
        )
        assert not any(t.done() for t in calls), [t.result()[1].text for t in calls if t.done()]
        started = time.monotonic()
        listed = await c.get("/api/v1/projects")
        took = time.monotonic() - started
        assert listed.status_code == 200, listed.text
        assert took < 2.0, f"list_projects took {took:.1f} s while the ingests waited"
        results = await asyncio.gather(*calls)
    for elapsed, r in results:
        assert r.status_code == 502, r.text
        error: dict[str, Any] = r.json()["error"]
        assert error["code"] == 5020 and f"timed out after {TIMEOUT_S:g}s" in error["message"], error
        assert "nothing was stored" in error["message"]
        # Its timeout, plus what a loaded machine adds; a per-read timeout alone would run a minute.
        assert elapsed < TIMEOUT_S + 8, f"an ingest ran {elapsed:.1f} s with a {TIMEOUT_S:g} s timeout"


async def test_acts_waiting_on_a_slow_upstream_hold_no_connection(
    small_pool: RunningServer, trickle: tuple[Trickle, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream, registry = trickle
    analysis_settings(small_pool, monkeypatch, upstreams=registry)
    victim = await _stored_key(small_pool.url)
    keys = [ADMIN_KEY, WRITE_KEY, PROJECT_KEY]
    async with httpx.AsyncClient(base_url=small_pool.url, timeout=120) as c:
        for n in range(INGESTS):  # each act's session holds two records of the fast listing
            r = await c.post(
                "/api/v1/analysis/ingest",
                json={"analysis_id": f"act-{n}", "model": "items"},
                headers={"Authorization": f"Bearer {keys[n % 3]}"},
            )
            assert r.status_code == 200, r.text

        async def act(n: int) -> tuple[float, httpx.Response]:
            started = time.monotonic()
            r = await c.post(
                "/api/v1/analysis/act",
                json={
                    "analysis_id": f"act-{n}",
                    "model": "items",
                    "action": "update",
                    "attributes": {"x": 1},
                    "deadline_seconds": 4,
                },
                headers={"Authorization": f"Bearer {keys[n % 3]}"},
            )
            return time.monotonic() - started, r

        calls = [asyncio.create_task(act(n)) for n in range(INGESTS)]
        await eventually(
            lambda: upstream.open >= INGESTS or any(t.done() for t in calls), timeout=30, what="the acts waiting"
        )
        assert not any(t.done() for t in calls), [t.result()[1].text for t in calls if t.done()]
        started = time.monotonic()
        listed = await c.get("/api/v1/projects", headers={"Authorization": f"Bearer {victim}"})
        took = time.monotonic() - started
        assert listed.status_code == 200, listed.text
        assert took < 2.0, f"list_projects took {took:.1f} s while the acts waited"
        results = await asyncio.gather(*calls)
    for elapsed, r in results:
        assert r.status_code == 200, r.text
        summary = r.json()["summary"]
        assert summary["succeeded"] == 0 and summary["total"] == 2, summary
        assert elapsed < 4 + 8, f"an act ran {elapsed:.1f} s with a 4 s deadline"


async def test_an_exhausted_pool_answers_5030_with_the_error_body(
    small_pool: RunningServer, pg: PgCluster, small_pool_database: str
) -> None:
    victim = await _stored_key(small_pool.url)
    lock = await asyncpg.connect(pg.handle.libpq_uri(small_pool_database))
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(base_url=small_pool.url, timeout=60) as c:
        try:
            async with lock.transaction():
                await lock.execute("LOCK TABLE projects IN ACCESS EXCLUSIVE MODE")
                # Three calls of a static key (no lookup) wait on the lock, each holding a pooled connection.
                blocked = [asyncio.create_task(c.get("/api/v1/projects", headers=admin)) for _ in range(POOL)]

                async def all_waiting() -> bool:
                    return int(await lock.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted")) >= POOL

                await eventually(all_waiting, timeout=30, what="every pooled connection waiting on the lock")
                r = await c.get("/api/v1/projects", headers={"Authorization": f"Bearer {victim}"})
                mcp = await c.post(
                    "/mcp",
                    headers={"Authorization": f"Bearer {victim}", "Accept": "application/json, text/event-stream"},
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                )
        finally:
            await lock.close()
        for answer in (r, mcp):
            assert answer.status_code == 503, answer.text
            assert answer.headers["content-type"].startswith("application/json"), answer.text
            body = answer.json()["error"]
            assert body["code"] == 5030 and "busy" in body["message"] and answer.headers.get("retry-after")
        assert [b.status_code for b in await asyncio.gather(*blocked)] == [200] * POOL
        served = await c.get("/api/v1/projects", headers={"Authorization": f"Bearer {victim}"})
        assert served.status_code == 200, served.text


async def test_the_whole_call_has_a_deadline(
    small_pool: RunningServer, trickle: tuple[Trickle, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    analysis_settings(small_pool, monkeypatch, upstreams=trickle[1], ingest_deadline_seconds=0.5)
    async with httpx.AsyncClient(base_url=small_pool.url, timeout=60) as c:
        elapsed, r = await _ingest(c, ADMIN_KEY, 99)
    assert r.status_code == 502, r.text
    message = r.json()["error"]["message"]
    assert "CAIRN_ANALYSIS_INGEST_DEADLINE_SECONDS" in message and "nothing was stored" in message, message
    assert elapsed < TIMEOUT_S + 6
