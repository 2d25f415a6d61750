"""MCP toolsets (`/mcp/<toolsets>`): what each endpoint lists and costs, the default, per-key
defaults, read-only endpoints, refusals, and the reference-compatible endpoint driven side by side
with the real reference memory server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp_types import TextContent

from app.core.jsonschema import size
from app.graph.config import GraphSettings
from tests.support.reference import reference_session
from tests.support.server import (
    ADMIN_KEY,
    READ_KEY,
    PgCluster,
    RunningServer,
    error_of,
    mcp_client,
    overridden,
    server_settings,
    start_server,
    stop_server,
    text_of,
)

TOOLSET_KEY = "test-toolset-key-0123456789"
PROMPT_BUDGET = 12_000  # name + description + inputSchema of plain /mcp


def prompt_chars(tools: list[Any]) -> int:
    """What a client puts in front of the model per tool: name, description and inputSchema."""
    return sum(len(t.name) + len(t.description or "") + size(t.input_schema) for t in tools)


def wire_chars(tools: list[Any]) -> int:
    """The tools/list entries as compact JSON."""
    return sum(
        len(json.dumps(t.model_dump(mode="json", by_alias=True, exclude_none=True), separators=(",", ":")))
        for t in tools
    )


async def _list(url: str, path: str, key: str | None = ADMIN_KEY) -> list[Any]:
    async with mcp_client(url, key=key, path=path) as mcp:
        return list((await mcp.list_tools()).tools)


async def test_plain_mcp_lists_the_default_toolset_within_budget(pg: PgCluster) -> None:
    """A server with default settings: plain /mcp lists the memory toolset, under 12,000 characters,
    and a key with its own default toolsets gets those instead."""
    settings = server_settings(
        pg.handle.url(pg.new_database()),
        mcp_toolsets=[],
        api_keys=[f"{ADMIN_KEY}:admin", f"{TOOLSET_KEY}:read+write::graph+datasets"],
    )
    srv, thread, _ = start_server(settings)
    base = f"http://127.0.0.1:{settings.port}"
    try:
        plain = await _list(base, "/mcp")
        assert {t.name for t in plain} == {
            "search",
            "push",
            "summarize",
            "get-collections",
            "new-collection",
            "metrics",
        }
        assert prompt_chars(plain) <= PROMPT_BUDGET, prompt_chars(plain)
        keyed = {t.name for t in await _list(base, "/mcp", key=TOOLSET_KEY)}
        assert {"create_entities", "execute_query"} <= keyed and "push" not in keyed and "audit_log" not in keyed
        assert {t.name for t in await _list(base, "/mcp/memory", key=TOOLSET_KEY)} >= {"push"}
    finally:
        stop_server(srv, thread)


async def test_every_family_is_reachable_and_toolsets_combine(server: RunningServer) -> None:
    every = {t.name for t in await _list(server.url, "/mcp/all")}
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as client:
        listed = (await client.get("/api/v1/resources/toolsets")).json()["toolsets"]
    names = [t["name"] for t in listed if t["name"] != "reference"]
    assert {"projects", "admin", "memory", "thoughts", "graph", "analysis", "datasets"} <= set(names)
    seen: set[str] = set()
    for toolset in names:
        tools = await _list(server.url, f"/mcp/{toolset}")
        assert tools, toolset
        seen |= {t.name for t in tools}
    assert seen == every
    combined = {t.name for t in await _list(server.url, "/mcp/memory,datasets")}
    assert combined == {t.name for t in await _list(server.url, "/mcp?toolsets=memory+datasets")}
    assert {"push", "execute_query"} <= combined and "create_entities" not in combined
    thoughts = {t.name for t in await _list(server.url, "/mcp/thoughts")}
    assert {"capture_thought", "create_project", "list_projects"} <= thoughts
    admin = {t.name for t in await _list(server.url, "/mcp/admin")}
    assert admin == {"embed", "audit_log", "search_quality_report", "wait_for_embeddings"}
    assert not admin & {t.name for t in await _list(server.url, "/mcp/graph")}


async def test_scope_and_readonly_shape_the_list_and_the_calls(server: RunningServer) -> None:
    read_tools = await _list(server.url, "/mcp/memory", key=READ_KEY)
    assert {t.name for t in read_tools} == {"search", "get-collections", "metrics"}
    async with mcp_client(server.url, path="/mcp/memory,readonly") as mcp:
        tools = (await mcp.list_tools()).tools
        assert all(t.annotations and t.annotations.read_only_hint for t in tools)
        err = error_of(await mcp.call_tool("push", {"text": "hello"}))
        assert err["code"] == 4030 and "read-only" in err["message"]
        assert err["suggestions"] == ["Connect to /mcp/memory to use it"]
        assert not (await mcp.call_tool("metrics", {})).is_error
    async with mcp_client(server.url, path="/mcp/memory") as mcp:
        err = error_of(await mcp.call_tool("create_entities", {"entities": []}))
        assert err["code"] == 4002 and err["suggestions"][0].endswith(": connect to /mcp/graph")
        err = error_of(await mcp.call_tool("serch", {}))
        assert err["code"] == 4002 and "search" in err["suggestions"][0]


async def test_unknown_and_clashing_toolsets_answer_the_error_body(server: RunningServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
        r = await client.post("/mcp/nonsense", json=body)
        assert r.status_code == 404 and r.json()["error"]["code"] == 4002
        assert "graph" in r.json()["error"]["suggestions"][0]
        r = await client.post("/mcp/reference,graph", json=body)
        assert r.status_code == 400 and r.json()["error"]["code"] == 4001
        r = await client.get("/api/v1/resources/toolsets")
        names = {t["name"]: t for t in r.json()["toolsets"]}
        assert names["reference"]["endpoint"] == "/mcp/reference" and "read_graph" in names["reference"]["tools"]


@pytest.mark.parametrize(
    "path", ["/mcp/graph?readonly=1", "/mcp/graph?readonly=true", "/mcp/graph?toolsets=readonly", "/mcp/graph?readonly"]
)
async def test_readonly_in_the_query_of_a_toolset_path_is_honoured(server: RunningServer, path: str) -> None:
    """Issue 41 #8: these spellings used to be ignored and `create_entities` changed the graph."""
    async with mcp_client(server.url, path=path) as mcp:
        assert "create_entities" not in {t.name for t in (await mcp.list_tools()).tools}
        err = error_of(await mcp.call_tool("create_entities", {"entities": [{"name": "ro41", "entityType": "x"}]}))
        assert err["code"] == 4030 and "read-only" in err["message"]
    async with mcp_client(server.url, path="/mcp/graph") as mcp:
        found = _payload(await mcp.call_tool("open_nodes", {"names": ["ro41"]}))
        assert found["entities"] == [], found  # nothing was created


@pytest.mark.parametrize("query", ["readonly=maybe", "read_only=1", "read-only=true", "toolsets=memory"])
async def test_a_query_the_endpoint_cannot_read_is_refused(server: RunningServer, query: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers) as client:
        r = await client.post(f"/mcp/graph?{query}", json=body)
        assert r.status_code == 400 and r.json()["error"]["code"] == 4001, r.text
        assert r.json()["error"]["suggestions"]


# ---- the reference-compatible endpoint, side by side with the reference server -----------------

README_ENTITIES = [
    {"name": "John_Smith", "entityType": "person", "observations": ["Speaks fluent Spanish"]},
    {"name": "Anthropic", "entityType": "organization", "observations": ["Builds AI systems"]},
]


def _payload(result: Any) -> Any:
    """The first text item as JSON when it is JSON, else the text."""
    assert not result.is_error, text_of(result)
    first = _texts(result)[0]
    try:
        return json.loads(first)
    except json.JSONDecodeError:
        return first


def _graph(data: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    entities = sorted(data["entities"], key=lambda e: e["name"])
    relations = sorted(data["relations"], key=lambda r: (r["from"], r["to"], r["relationType"]))
    return entities, relations


SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("create_entities", {"entities": README_ENTITIES, "client_hint": "extra keys are ignored"}),
    (
        "create_entities",
        {"entities": [README_ENTITIES[0], {"name": "Acme", "entityType": "org", "observations": [], "color": "red"}]},
    ),
    ("create_relations", {"relations": [{"from": "John_Smith", "to": "Anthropic", "relationType": "works_at"}]}),
    (
        "create_relations",
        {
            "relations": [
                {"from": "John_Smith", "to": "Anthropic", "relationType": "works_at"},
                {"from": "Acme", "to": "John_Smith", "relationType": "employed", "weight": 3},
            ]
        },
    ),
    (
        "add_observations",
        {
            "observations": [
                {"entityName": "John_Smith", "contents": ["Graduated in 2019", "Prefers morning meetings"]},
                {"entityName": "Anthropic", "contents": ["Builds AI systems", "Based in San Francisco"]},
            ]
        },
    ),
    ("search_nodes", {"query": "spanish"}),
    ("search_nodes", {"query": ""}),
    ("open_nodes", {"names": ["Anthropic", "Nobody"]}),
    ("read_graph", {}),
    (
        "delete_observations",
        {
            "deletions": [
                {"entityName": "John_Smith", "observations": ["Graduated in 2019", "Prefers morning meetings"]}
            ]
        },
    ),
    ("delete_relations", {"relations": [{"from": "Acme", "to": "John_Smith", "relationType": "employed"}]}),
    ("delete_entities", {"entityNames": ["Acme"]}),
    ("read_graph", {"anything": True}),
]


async def _run_script(session: ClientSession) -> list[Any]:
    out = []
    for tool, args in SCRIPT:
        data = _payload(await session.call_tool(tool, args))
        out.append(_graph(data) if isinstance(data, dict) and "entities" in data and "relations" in data else data)
    return out


@pytest.mark.slow
async def test_reference_endpoint_answers_like_the_reference_server(server: RunningServer, tmp_path: Path) -> None:
    async with reference_session(tmp_path / "memory.jsonl") as ref:
        ref_tools = list((await ref.list_tools()).tools)
        expected = await _run_script(ref)
    async with mcp_client(server.url, path="/mcp/reference") as mcp:
        tools = list((await mcp.list_tools()).tools)
        got = await _run_script(mcp)
    for call, want, have in zip(SCRIPT, expected, got, strict=True):
        assert have == want, call
    mine = {t.name: t for t in tools}
    assert set(mine) == {t.name for t in ref_tools}
    for theirs in ref_tools:
        ours = mine[theirs.name]
        assert ours.title == theirs.title
        assert ours.annotations == theirs.annotations, theirs.name
        assert set(ours.input_schema.get("properties", {})) == set(theirs.input_schema.get("properties", {}))
        assert sorted(ours.input_schema.get("required", [])) == sorted(theirs.input_schema.get("required", []))
        assert ours.output_schema is not None and theirs.output_schema is not None
        assert set(ours.output_schema["properties"]) == set(theirs.output_schema["properties"]), theirs.name
    assert wire_chars(tools) <= 1.5 * wire_chars(ref_tools), (wire_chars(tools), wire_chars(ref_tools))


def _texts(result: Any) -> list[str]:
    """The text items of a tool result."""
    return [c.text for c in result.content if isinstance(c, TextContent)]


async def test_reference_read_graph_says_plainly_when_it_is_cut(server: RunningServer) -> None:
    entities = [
        {"name": f"Entity {i:03d}", "entityType": "thing", "observations": [f"fact number {i} " * 20]}
        for i in range(60)
    ]
    async with mcp_client(server.url, path="/mcp/reference") as mcp:
        assert not (await mcp.call_tool("create_entities", {"entities": entities})).is_error
        whole = _texts(await mcp.call_tool("read_graph", {}))
        assert len(whole) == 1 and len(json.loads(whole[0])["entities"]) == 60
        with overridden(server, GraphSettings, reference_reply_tokens=1_000):
            first = await mcp.call_tool("read_graph", {})
            texts = _texts(first)
            assert len(texts) == 2 and texts[1].startswith("TRUNCATED")
            shown = json.loads(texts[0])["entities"]
            assert 0 < len(shown) < 60 and first.structured_content == json.loads(texts[0])
            assert f'{{"offset": {len(shown)}}}' in texts[1]
            rest = _texts(await mcp.call_tool("read_graph", {"offset": len(shown)}))
            more = json.loads(rest[0])["entities"]
            assert more and more[0]["name"] == f"Entity {len(shown):03d}"
            found = _texts(await mcp.call_tool("search_nodes", {"query": ""}))
            assert found[1].startswith("TRUNCATED")
