"""Limits an attacker meets before any key is verified: failed authentications per client address
(each unknown key costs a database lookup) and open `GET /mcp` event streams per key."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from app.core.db import Database
from app.core.limits_repository import LimitsRepository
from tests.support.server import (
    ADMIN_KEY,
    READ_KEY,
    WRITE_KEY,
    PgCluster,
    RunningServer,
    mcp_client,
    server_settings,
    start_server,
    stop_server,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")

FAILURES = 3
STREAMS = 2
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture(scope="module")
def limited(pg: PgCluster) -> Iterator[RunningServer]:
    """A keyed server with small limits: 3 failed authentications per address per minute, 2 open
    event streams per key."""
    settings = server_settings(
        pg.handle.url(pg.new_database()),
        features=[],
        auth_failure_limit=FAILURES,
        max_sse_streams_per_key=STREAMS,
    )
    srv, thread, app = start_server(settings)
    try:
        yield RunningServer(url=f"http://127.0.0.1:{settings.port}", settings=settings, app=app)
    finally:
        stop_server(srv, thread)


class CountingDb:
    """Counts the key store's key lookups (each unknown key is one) and its reads of the valid keys'
    hashes (a locked-out address's requests share one per `VALID_REFRESH_SECONDS`)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.runs = 0
        self.reads = 0

    async def run(self, fn: Any) -> Any:
        if fn.__name__ == "read":
            self.reads += 1
        else:
            self.runs += 1
        return await self.db.run(fn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


async def test_failed_authentications_are_limited_per_address(limited: RunningServer) -> None:
    store = limited.app.state.callers.store
    counting = store.db = CountingDb(store.db)
    try:
        async with httpx.AsyncClient(base_url=limited.url) as c:
            for i in range(FAILURES):
                r = await c.get("/api/v1/projects", headers={"Authorization": f"Bearer made-up-key-{i:04d}-xxxx"})
                assert r.status_code == 401 and r.json()["error"]["code"] == 4010
            assert counting.runs == FAILURES
            # Locked out: REST and MCP answer 4290 with Retry-After, and no key is looked up any more.
            for i in range(5):
                bad = {"Authorization": f"Bearer another-made-up-{i:04d}-xxxx"}
                r = await c.get("/api/v1/projects", headers=bad)
                assert r.status_code == 429 and r.json()["error"]["code"] == 4290, r.text
                assert 1 <= int(r.headers["retry-after"]) <= 60
                r = await c.post("/mcp", json=PING, headers={**bad, **MCP_HEADERS})
                assert r.status_code == 429 and r.json()["error"]["code"] == 4290, r.text
                assert int(r.headers["retry-after"]) >= 1
            assert counting.runs == FAILURES and 1 <= counting.reads <= 10
            # Valid keys still work from the same address, on both transports: static keys, and
            # (issue 41 #9) a stored key this process has never looked up.
            ok = await c.get("/api/v1/projects", headers={"Authorization": f"Bearer {READ_KEY}"})
            assert ok.status_code == 200, ok.text
            async with mcp_client(limited.url, key=WRITE_KEY) as mcp:
                assert not (await mcp.call_tool("list_projects", {})).is_error
            for transport in ("rest", "mcp"):
                admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
                made = await c.post(
                    "/api/v1/keys", json={"scopes": ["read"], "name": f"fresh-{transport}"}, headers=admin
                )
                fresh = {"Authorization": f"Bearer {made.json()['token']}"}
                if transport == "rest":
                    r = await c.get("/api/v1/projects", headers=fresh)
                else:
                    r = await c.post("/mcp", json=PING, headers={**fresh, **MCP_HEADERS})
                assert r.status_code == 200, r.text
            r = await c.get("/api/v1/projects", headers={"Authorization": "Bearer another-made-up-9999-xxxx"})
            assert r.status_code == 429, r.text  # the address is still locked out
            # A request without a key costs no lookup: it is still the plain 4010.
            missing = await c.get("/api/v1/projects")
            assert missing.status_code == 401
    finally:
        store.db = counting.db
        await forget_failures(limited)


async def forget_failures(server: RunningServer) -> None:
    """Clear the lockout the test caused, in the database (the fleet's record) and in the process."""
    failures = server.app.state.callers.store.failures
    failures._failures.clear()
    failures._locked.clear()
    db = Database(server.app.state.cairn.db.url, server.settings)  # the server's pool belongs to its own loop
    try:
        async with db.transaction() as session:
            await LimitsRepository(session).execute("DELETE FROM limit_auth_failures")
    finally:
        await db.dispose()


async def test_event_streams_are_capped_per_key(limited: RunningServer) -> None:
    async def open_stream(stack: AsyncExitStack, key: str) -> httpx.Response:
        client = await stack.enter_async_context(httpx.AsyncClient(base_url=limited.url, timeout=30))
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        return await stack.enter_async_context(client.stream("GET", "/mcp", headers=headers))

    async with AsyncExitStack() as outer:
        streams = [await open_stream(outer, ADMIN_KEY) for _ in range(STREAMS)]
        assert all(s.status_code == 200 for s in streams), [s.status_code for s in streams]
        async with AsyncExitStack() as stack:
            refused = await open_stream(stack, ADMIN_KEY)
            assert refused.status_code == 429
            body = await refused.aread()
            assert b'"code":4290' in body and int(refused.headers["retry-after"]) >= 1
        async with AsyncExitStack() as stack:  # another key has its own streams
            assert (await open_stream(stack, READ_KEY)).status_code == 200
        # POSTs are not streams: the key still calls tools.
        async with mcp_client(limited.url, key=ADMIN_KEY) as mcp:
            assert not (await mcp.call_tool("list_projects", {})).is_error
    # Closed streams give their slots back.
    await eventually(lambda: not limited.app.state.mcp_streams.held(), what="every closed stream's slot given back")
    async with AsyncExitStack() as stack:
        again = [await open_stream(stack, ADMIN_KEY) for _ in range(STREAMS)]
        assert all(s.status_code == 200 for s in again)


async def test_a_locked_out_address_cannot_fill_the_stream_slots(limited: RunningServer) -> None:
    """Refusals of unauthenticated streams end at once and keep no slot."""
    async with httpx.AsyncClient(base_url=limited.url) as c:
        for _ in range(STREAMS + 2):
            r = await c.get("/mcp", headers={"Accept": "text/event-stream"})
            assert r.status_code == 401
    assert not limited.app.state.mcp_streams.held()
