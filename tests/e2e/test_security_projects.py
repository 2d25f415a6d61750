"""A project-bound key stays inside its project: it cannot change what every project shares, and the
server-wide answers (audit log, metrics, collections, the embedding queue) are scoped to its project.
Each refusal is checked over MCP and REST, with the shared error body, and leaves nothing changed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from mcp.shared.exceptions import MCPError as McpError

from app.core.auth import create_key
from app.core.db import Database
from tests.support.server import (
    ADMIN_KEY,
    BOUND_PROJECT,
    PROJECT_KEY,
    WRITE_KEY,
    PgCluster,
    RunningServer,
    error_of,
    mcp_client,
    resource_text,
)


async def _rest(server: RunningServer, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        if method == "GET":
            return await c.get(f"/api/v1{path}", params=body)
        return await c.request(method, f"/api/v1{path}", json=body)


def _refused(response: httpx.Response, code: int = 4030) -> dict[str, Any]:
    assert response.status_code == 403, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code and error["category"] == "Forbidden" and error["message"]
    return error


async def _mcp(server: RunningServer, key: str, tool: str, args: dict[str, Any]) -> Any:
    async with mcp_client(server.url, key=key) as mcp:
        return await mcp.call_tool(tool, args)


@pytest.fixture
async def db(pg: PgCluster) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        yield conn
    finally:
        await conn.close()


async def _keys(server: RunningServer, **bound: tuple[list[str], str]) -> dict[str, str]:
    """Stored keys bound to projects: name -> (scopes, project) in, name -> token out."""
    database = Database(server.settings.database_url or "", server.settings)
    try:
        out = {}
        for name, (scopes, project) in bound.items():
            _, out[name] = await create_key(database, scopes=scopes, project=project, name=name)
        return out
    finally:
        await database.dispose()


async def _sizes(db: asyncpg.Connection) -> dict[str, int]:
    return {r["name"]: r["vector_size"] for r in await db.fetch("SELECT name, vector_size FROM memory_collections")}


async def test_bound_key_cannot_resize_a_shared_collection_and_a_resize_never_blocks_writes(
    server: RunningServer, rest: httpx.AsyncClient, db: asyncpg.Connection
) -> None:
    assert (await rest.post("/api/v1/memory/push", json={"text": "admin note", "project": "other"})).status_code == 200
    before = await _sizes(db)
    assert before == {"cairn-memory": 384}
    resize = {"name": "cairn-memory", "vector_size": 768}
    # The attack: a key bound to one project relabels the collection every project writes to.
    error = _refused(await _rest(server, PROJECT_KEY, "POST", "/memory/collections", resize))
    assert "bound to project" in error["message"] and "cairn-memory" in error["message"]
    assert error_of(await _mcp(server, PROJECT_KEY, "new-collection", resize))["code"] == 4030
    # Nor may it create a collection with a size of its choosing, nor an unbound non-admin key resize.
    odd = {"name": "fresh", "vector_size": 12}
    _refused(await _rest(server, PROJECT_KEY, "POST", "/memory/collections", odd))
    assert error_of(await _mcp(server, PROJECT_KEY, "new-collection", odd))["code"] == 4030
    assert "admin" in _refused(await _rest(server, WRITE_KEY, "POST", "/memory/collections", resize))["message"]
    assert error_of(await _mcp(server, WRITE_KEY, "new-collection", resize))["code"] == 4030
    assert await _sizes(db) == before
    # Making sure a collection exists with the active dimension is what a push does anyway: allowed.
    mine = await _rest(server, PROJECT_KEY, "POST", "/memory/collections", {"name": "mine"})
    assert mine.status_code == 200 and mine.json()["created"] and mine.json()["vectorSize"] == 384
    same = await _mcp(server, PROJECT_KEY, "new-collection", {"name": "cairn-memory", "vector_size": 384})
    assert not same.is_error and same.structured_content["resized"] is False

    # An unbound admin key may relabel it, and the label never blocks anyone's write: vectors are
    # stored per model.
    resized = await rest.post("/api/v1/memory/collections", json=resize)
    assert resized.status_code == 200 and resized.json()["resized"]
    pushed = await _rest(server, PROJECT_KEY, "POST", "/memory/push", {"text": "still writable after a resize"})
    assert pushed.status_code == 200 and pushed.json()["embedding"] == "done", pushed.text
    captured = await _rest(server, PROJECT_KEY, "POST", "/thoughts", {"content": "a thought after the resize"})
    assert captured.status_code == 200 and captured.json()["embedded"], captured.text
    async with mcp_client(server.url, key=PROJECT_KEY) as mcp:
        res = await mcp.call_tool("push", {"text": "and over MCP too"})
        assert not res.is_error and res.structured_content["embedding"] == "done"
        res = await mcp.call_tool("capture_thought", {"content": "an MCP thought after the resize"})
        assert not res.is_error and res.structured_content["embedded"]
        found = await mcp.call_tool("search", {"query_text": "still writable after a resize", "mode": "semantic"})
        assert not found.is_error and found.structured_content["results"]
    assert (await _sizes(db))["cairn-memory"] == 768


async def test_a_bound_admin_key_reads_the_audit_log_of_its_project_only(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    keys = await _keys(server, alpha=(["admin"], "alpha"), beta=(["read", "write"], "beta"))
    assert (await _rest(server, keys["alpha"], "POST", "/projects", {"name": "alpha"})).status_code == 200
    pushed = await _rest(server, keys["beta"], "POST", "/memory/push", {"text": "beta's secret plan"})
    assert pushed.status_code == 200
    pushed = await rest.post("/api/v1/memory/push", json={"text": "gamma notes", "project": "gamma"})
    assert pushed.status_code == 200
    everything = (await rest.get("/api/v1/audit")).json()["entries"]
    assert {e["project"] for e in everything} >= {"alpha", "beta", "gamma"}

    own = await _rest(server, keys["alpha"], "GET", "/audit", {})
    assert own.status_code == 200 and {e["project"] for e in own.json()["entries"]} == {"alpha"}
    async with mcp_client(server.url, key=keys["alpha"]) as mcp:
        res = await mcp.call_tool("audit_log", {})
        assert not res.is_error and {e["project"] for e in res.structured_content["entries"]} == {"alpha"}
        # The attack: naming another project.
        error = error_of(await mcp.call_tool("audit_log", {"project": "beta"}))
        assert error["code"] == 4030 and "beta" in error["message"]
        res = await mcp.call_tool("audit_log", {"project": "alpha", "operation": "create_project"})
        assert [e["project"] for e in res.structured_content["entries"]] == ["alpha"]
    _refused(await _rest(server, keys["alpha"], "GET", "/audit", {"project": "beta"}))
    # An unbound admin key still reads every project.
    assert {e["project"] for e in (await rest.get("/api/v1/audit", params={"project": "beta"})).json()["entries"]} == {
        "beta"
    }


async def test_metrics_and_collections_are_scoped_to_a_bound_keys_project(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    for text in ("first other document", "second other document"):
        r = await rest.post("/api/v1/memory/push", json={"text": text, "project": "other", "collection": "secret-coll"})
        assert r.status_code == 200
    assert (await rest.post("/api/v1/memory/push", json={"text": "third", "project": "other"})).status_code == 200
    empty = await _rest(server, PROJECT_KEY, "GET", "/memory/metrics", {})
    assert empty.json() == {"documentsIndexed": 0, "chunksIndexed": 0, "lastChunkSize": None}
    assert (await _rest(server, PROJECT_KEY, "POST", "/memory/push", {"text": "mine alone"})).status_code == 200

    mine = {"documentsIndexed": 1, "chunksIndexed": 1, "lastChunkSize": 200}
    assert (await _rest(server, PROJECT_KEY, "GET", "/memory/metrics", {})).json() == mine
    assert (await _rest(server, PROJECT_KEY, "GET", "/memory/collections", {})).json() == {
        "collections": ["cairn-memory"]
    }
    async with mcp_client(server.url, key=PROJECT_KEY) as mcp:
        assert (await mcp.call_tool("metrics", {})).structured_content == mine
        assert (await mcp.call_tool("get-collections", {})).structured_content == {"collections": ["cairn-memory"]}
    # Unbound keys see every project's totals and every collection.
    assert (await rest.get("/api/v1/memory/metrics")).json() == {
        "documentsIndexed": 4,
        "chunksIndexed": 4,
        "lastChunkSize": 200,
    }
    assert (await rest.get("/api/v1/memory/collections")).json() == {"collections": ["cairn-memory", "secret-coll"]}
    assert (await _rest(server, WRITE_KEY, "GET", "/memory/metrics", {})).json()["chunksIndexed"] == 4


async def test_server_wide_queue_tools_are_not_for_bound_keys(server: RunningServer, rest: httpx.AsyncClient) -> None:
    error = _refused(await _rest(server, PROJECT_KEY, "POST", "/embeddings/wait", {"timeout_seconds": 1}))
    assert BOUND_PROJECT in error["message"] and "wait_for_embedding" in error["suggestions"][0]
    assert error_of(await _mcp(server, PROJECT_KEY, "wait_for_embeddings", {"timeout_seconds": 1}))["code"] == 4030
    # The queue's depth counts every project's writes: a bound key's health report leaves it out.
    health = (await _rest(server, PROJECT_KEY, "GET", "/resources/health", {})).json()
    assert health["status"] == "ok" and health.get("embedding_queue") is None
    assert (await rest.get("/api/v1/resources/health")).json()["embedding_queue"] is not None
    async with mcp_client(server.url, key=PROJECT_KEY) as mcp:
        assert '"embedding_queue"' not in resource_text(await mcp.read_resource("mcp://health")).replace(
            '"embedding_queue":null', ""
        )
    async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
        assert not (await mcp.call_tool("wait_for_embeddings", {"timeout_seconds": 1})).is_error


async def test_a_forbidden_resource_read_answers_the_error_not_an_internal_error(server: RunningServer) -> None:
    """Issue 41 #11: reading another project's tags with a bound key answered JSON-RPC -32603
    "Internal error"; it is -32602 (the caller's request) with the shared error body, over real MCP HTTP."""
    body = {"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": {"uri": "mcp://not-mine/tags"}}
    headers = {"Authorization": f"Bearer {PROJECT_KEY}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as c:
        r = await c.post("/mcp", json=body)
    assert r.status_code == 200, r.text
    text = r.text if r.text.lstrip().startswith("{") else r.text.split("data:", 1)[1]
    error = json.loads(text)["error"]
    assert error["code"] == -32602, error
    assert "bound to project" in error["message"] and "Internal error" not in error["message"]
    assert error["data"]["error"]["code"] == 4030 and error["data"]["uri"] == "mcp://not-mine/tags"
    async with mcp_client(server.url, key=PROJECT_KEY) as mcp:  # what an SDK client sees
        with pytest.raises(McpError) as caught:
            await mcp.read_resource("mcp://not-mine/tags")
        assert caught.value.error.code == -32602 and "bound to project" in caught.value.error.message
        tags = json.loads(resource_text(await mcp.read_resource(f"mcp://{BOUND_PROJECT}/tags")))
        assert tags["project_id"] == BOUND_PROJECT
