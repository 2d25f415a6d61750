"""Memory items over REST and MCP: get_memory (a memory with its document's chunks and vector status),
update_memory (retag) and delete_memory, with project-bound keys and read keys refused what they may
not do, and the tools kept out of the default tool list."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.support.memory import api
from tests.support.server import (
    BOUND_PROJECT,
    PROJECT_KEY,
    READ_KEY,
    RunningServer,
    error_of,
    mcp_client,
)

PARAGRAPHS = [
    f"Paragraph {i} about the harbour crane {i}. " + " ".join(f"cargo{i}x{j}" for j in range(70)) for i in range(4)
]
DOCUMENT = "\n\n".join(PARAGRAPHS)


async def push(rest: httpx.AsyncClient, text: str, project: str, **extra: Any) -> dict[str, Any]:
    return await api(rest, "/memory/push", {"text": text, "project": project, "wait_for_embedding": True, **extra})


async def ids_of(rest: httpx.AsyncClient, project: str) -> list[str]:
    """Every memory of a project (list_thoughts lists every kind), oldest first."""
    page = await api(rest, "/thoughts", {"project": project, "limit": 100}, method="GET")
    return [t["id"] for t in reversed(page["thoughts"])]


def as_key(server: RunningServer, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {key}"})


async def test_a_memory_reads_with_its_chunks_and_vectors_then_is_retagged_and_deleted(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    pushed = await push(rest, DOCUMENT, "docs", tags=["harbour"], type="episodic")
    total = pushed["chunksIndexed"]
    assert total >= 3 and pushed["embedding"] == "done"
    lone = await push(rest, "A single note about lighthouses and fog horns.", "docs", tags=["coast"])
    ids = await ids_of(rest, "docs")
    assert len(ids) == total + 1
    found = await api(rest, "/memory/search", {"query_text": "harbour crane 1", "project": "docs", "mode": "lexical"})
    first = found["results"][0]["id"]

    got = await api(rest, f"/memory/items/{first}", method="GET")
    memory = got["memory"]
    assert memory["id"] == first and memory["kind"] == "chunk" and memory["memory_type"] == "episodic"
    assert memory["project"] == "docs" and memory["collection"] == "cairn-memory" and memory["tags"] == ["harbour"]
    assert memory["document_id"] == pushed["document_id"] and memory["metadata"]["tokens"] > 0
    assert "source_uri" not in memory and "harbour crane 1" in memory["content"]
    assert got["chunks_total"] == total and got["next_chunk_offset"] is None
    assert [c["chunk_index"] for c in got["chunks"]] == list(range(total))
    assert first in {c["id"] for c in got["chunks"]} and lone["document_id"] not in str(got)
    model = got["embeddings"][0]["model"]
    assert got["embeddings"] == [{"model": model, "active": True, "embedded": total, "missing": 0, "queued": 0}]
    assert all(c["vectors"] == [model] for c in got["chunks"])

    paged = await api(rest, f"/memory/items/{first}", {"chunk_offset": 1, "chunk_limit": 1}, method="GET")
    assert [c["chunk_index"] for c in paged["chunks"]] == [1] and paged["next_chunk_offset"] == 2

    # Retag this chunk, then the whole document; search filters on the new tags.
    out = await api(rest, f"/memory/items/{first}", {"tags": ["b", "a", "a"]}, method="PATCH")
    assert out == {"id": first, "tags": ["a", "b"], "updated": 1}
    other = next(c["id"] for c in got["chunks"] if c["id"] != first)
    assert (await api(rest, f"/memory/items/{other}", method="GET"))["memory"]["tags"] == ["harbour"]
    out = await api(rest, f"/memory/items/{first}", {"tags": ["cranes"], "document": True}, method="PATCH")
    assert out["updated"] == total
    assert (await api(rest, f"/memory/items/{other}", method="GET"))["memory"]["tags"] == ["cranes"]
    tagged = await api(rest, "/memory/search", {"query_text": "harbour crane", "project": "docs", "tags": ["cranes"]})
    assert tagged["results"] and all(r["tags"] == ["cranes"] for r in tagged["results"])
    cleared = await api(rest, f"/memory/items/{lone_id(ids, got)}", {"tags": []}, method="PATCH")
    assert cleared["tags"] == [] and cleared["updated"] == 1

    # Delete one chunk, then the rest of its document; the lone note stays.
    gone = await api(rest, f"/memory/items/{first}", method="DELETE")
    assert gone == {"id": first, "deleted": 1}
    err = await api(rest, f"/memory/items/{first}", method="GET", status=404)
    assert err["error"]["code"] == 4002
    gone = await api(rest, f"/memory/items/{other}", {"document": True}, method="DELETE")
    assert gone["deleted"] == total - 1
    assert await ids_of(rest, "docs") == [lone_id(ids, got)]

    audit = await api(rest, "/audit", {"operation": "delete_memory"}, method="GET")
    assert [e["counts"]["deleted"] for e in audit["entries"]] == [total - 1, 1]
    assert all(e["transport"] == "rest" and e["outcome"] == "ok" for e in audit["entries"])


def lone_id(ids: list[str], got: dict[str, Any]) -> str:
    chunk_ids = {c["id"] for c in got["chunks"]}
    return next(i for i in ids if i not in chunk_ids)


async def test_a_document_pushed_again_from_its_source_keeps_one_chunk_list(rest: httpx.AsyncClient) -> None:
    first = await push(rest, DOCUMENT, "src", source_uri="file:///crane.md")
    changed = "\n\n".join([PARAGRAPHS[0], "A new second paragraph about tugboats.", *PARAGRAPHS[2:]])
    again = await push(rest, changed, "src", source_uri="file:///crane.md")
    assert again["document_id"] == first["document_id"] and again["updated"] + again["inserted"] >= 1
    await push(rest, DOCUMENT.replace("cargo", "freight"), "src", source_uri="file:///other.md")
    ids = await ids_of(rest, "src")
    doc = [
        i
        for i in ids
        if (await api(rest, f"/memory/items/{i}", method="GET"))["memory"]["source_uri"] == "file:///crane.md"
    ]
    got = await api(rest, f"/memory/items/{doc[0]}", method="GET")
    assert got["chunks_total"] == len(doc) and {c["id"] for c in got["chunks"]} == set(doc)
    assert any("tugboats" in c["content"] for c in got["chunks"])
    assert got["memory"]["source_uri"] == "file:///crane.md"


async def test_missing_and_malformed_ids(rest: httpx.AsyncClient) -> None:
    missing = str(uuid.uuid4())
    for method, body in (("GET", None), ("PATCH", {"tags": ["x"]}), ("DELETE", None)):
        err = await api(rest, f"/memory/items/{missing}", body, method=method, status=404)
        assert err["error"]["code"] == 4002 and missing in err["error"]["message"]
    err = await api(rest, "/memory/items/not-an-id", method="GET", status=400)
    assert err["error"]["code"] == 4001 and "id" in err["error"]["message"]
    pushed = await push(rest, "Short note on tides.", "misc")
    (mid,) = await ids_of(rest, "misc")
    assert pushed["inserted"] == 1
    err = await api(rest, f"/memory/items/{mid}", {"tags": ["x" * 129]}, method="PATCH", status=400)
    assert err["error"]["code"] == 4001
    err = await api(rest, f"/memory/items/{mid}", {"tags": [f"t{i}" for i in range(33)]}, method="PATCH", status=400)
    assert err["error"]["code"] == 4001
    err = await api(rest, f"/memory/items/{mid}", {"tags": ["x"], "content": "new"}, method="PATCH", status=400)
    assert err["error"]["code"] == 4001


async def test_a_project_bound_key_reaches_only_its_own_project(server: RunningServer, rest: httpx.AsyncClient) -> None:
    await push(rest, "A note of another project about budgets.", "elsewhere")
    await push(rest, "A note of the bound project about rosters.", BOUND_PROJECT)
    (foreign,) = await ids_of(rest, "elsewhere")
    (own,) = await ids_of(rest, BOUND_PROJECT)
    async with as_key(server, PROJECT_KEY) as bound:
        for method, body in (("GET", None), ("PATCH", {"tags": ["mine"]}), ("DELETE", None)):
            r = await bound.request(method, f"/api/v1/memory/items/{foreign}", json=body)
            assert r.status_code == 404 and r.json()["error"]["code"] == 4002, r.text
        r = await bound.get(f"/api/v1/memory/items/{own}")
        assert r.status_code == 200 and r.json()["memory"]["project"] == BOUND_PROJECT
        r = await bound.patch(f"/api/v1/memory/items/{own}", json={"tags": ["mine"]})
        assert r.status_code == 200 and r.json()["tags"] == ["mine"]
        # Listed: its own project's memories only, and another project named is refused.
        r = await bound.get("/api/v1/memory/items", params={"tags": ["mine", "other"]})
        assert r.status_code == 200 and [m["id"] for m in r.json()["memories"]] == [own], r.text
        r = await bound.get("/api/v1/memory/items", params={"project": "elsewhere"})
        assert r.status_code == 403 and r.json()["error"]["code"] == 4030, r.text
    # Nothing of the other project changed.
    kept = await api(rest, f"/memory/items/{foreign}", method="GET")
    assert kept["memory"]["tags"] == []
    audit = await api(rest, "/audit", {"operation": "update_memory"}, method="GET")
    assert [(e["outcome"], e["error_code"], e["project"]) for e in audit["entries"]] == [
        ("ok", None, BOUND_PROJECT),
        ("error", 4002, BOUND_PROJECT),
    ]


async def test_a_read_key_reads_but_is_refused_writes(server: RunningServer, rest: httpx.AsyncClient) -> None:
    await push(rest, "A note about sailing knots.", "knots", tags=["sea"])
    (mid,) = await ids_of(rest, "knots")
    async with as_key(server, READ_KEY) as reader:
        r = await reader.get(f"/api/v1/memory/items/{mid}")
        assert r.status_code == 200 and r.json()["memory"]["tags"] == ["sea"]
        r = await reader.patch(f"/api/v1/memory/items/{mid}", json={"tags": ["x"]})
        assert r.status_code == 403 and r.json()["error"]["code"] == 4030
        r = await reader.request("DELETE", f"/api/v1/memory/items/{mid}")
        assert r.status_code == 403 and r.json()["error"]["code"] == 4030
    assert (await api(rest, f"/memory/items/{mid}", method="GET"))["memory"]["tags"] == ["sea"]


async def test_the_tools_have_their_own_toolset_over_mcp(server: RunningServer, rest: httpx.AsyncClient) -> None:
    await push(rest, "A note about anchors and chains.", "mcp-items", tags=["sea"])
    (mid,) = await ids_of(rest, "mcp-items")
    async with mcp_client(server.url, path="/mcp/memory") as mcp:
        listed = {t.name for t in (await mcp.list_tools()).tools}
        assert "search" in listed and not listed & {"get_memory", "update_memory", "delete_memory", "list_memories"}
    async with mcp_client(server.url, path="/mcp/memory_items") as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        assert set(tools) == {"list_memories", "get_memory", "update_memory", "delete_memory"}
        assert tools["list_memories"].annotations and tools["list_memories"].annotations.read_only_hint
        found = await mcp.call_tool("list_memories", {"project": "mcp-items", "tags": ["sea"], "kind": ["chunk"]})
        assert not found.is_error and [m["id"] for m in found.structured_content["memories"]] == [mid]
        assert tools["get_memory"].annotations and tools["get_memory"].annotations.read_only_hint
        assert tools["delete_memory"].annotations and tools["delete_memory"].annotations.destructive_hint
        got = await mcp.call_tool("get_memory", {"id": mid, "chunk_limit": 0})
        assert not got.is_error and got.structured_content["chunks"] == []
        assert got.structured_content["chunks_total"] == 1 and got.structured_content["memory"]["tags"] == ["sea"]
        out = await mcp.call_tool("update_memory", {"id": mid, "tags": ["anchor"]})
        assert out.structured_content == {"id": mid, "tags": ["anchor"], "updated": 1}
        err = error_of(await mcp.call_tool("get_memory", {"id": str(uuid.uuid4())}))
        assert err["code"] == 4002
    async with mcp_client(server.url, key=READ_KEY, path="/mcp/memory_items") as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == {"get_memory", "list_memories"}
