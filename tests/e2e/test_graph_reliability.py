"""Concurrent writers, deletes without orphans, bounded read_graph, and JSONL import/export."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.support.graph import API, PEOPLE, call, seed
from tests.support.server import PgCluster, RunningServer, mcp_client

CLIENTS = 8
PER_CLIENT = 4


async def _mcp_writer(url: str, c: int) -> None:
    async with mcp_client(url) as mcp:
        await _write(lambda tool, args: call(mcp, tool, args), c)


async def _rest_writer(url: str, headers: dict[str, str], c: int) -> None:
    paths = {"create_entities": "/entities", "add_observations": "/observations", "create_relations": "/relations"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:

        async def post(tool: str, args: dict[str, Any]) -> dict[str, Any]:
            r = await client.post(API + paths[tool], json=args)
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

        await _write(post, c)


async def _write(do: Any, c: int) -> None:
    mine = [
        {"name": f"c{c}-e{i}", "entityType": "item", "observations": [f"client {c} item {i}"]}
        for i in range(PER_CLIENT)
    ]
    await do("create_entities", {"entities": [{"name": "Hub", "entityType": "hub", "observations": ["shared"]}, *mine]})
    for i in range(PER_CLIENT):
        await do(
            "add_observations",
            {
                "observations": [
                    {"entityName": "Hub", "contents": [f"from client {c} step {i}", "everyone says this"]},
                    {"entityName": f"c{c}-e{i}", "contents": [f"extra {c}/{i}"]},
                ]
            },
        )
        await do(
            "create_relations",
            {
                "relations": [
                    {"from": "Hub", "to": "Hub", "relationType": "is itself"},
                    {"from": f"c{c}-e{i}", "to": "Hub", "relationType": "part of"},
                    {"from": "Hub", "to": f"c{c}-e{i}", "relationType": "contains"},
                ]
            },
        )


async def test_concurrent_writers_lose_nothing(server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster) -> None:
    headers = dict(rest.headers)
    jobs = [_mcp_writer(server.url, c) if c % 2 else _rest_writer(server.url, headers, c) for c in range(CLIENTS)]
    await asyncio.gather(*jobs)
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        assert await conn.fetchval("SELECT count(*) FROM graph_entities") == 1 + CLIENTS * PER_CLIENT
        hub_obs = await conn.fetch(
            "SELECT content FROM graph_observations o JOIN graph_entities g ON g.id = o.entity_id WHERE g.name = 'Hub'"
        )
        texts = [r["content"] for r in hub_obs]
        assert sorted(texts) == sorted(
            {
                "shared",
                "everyone says this",
                *[f"from client {c} step {i}" for c in range(CLIENTS) for i in range(PER_CLIENT)],
            }
        )
        assert await conn.fetchval("SELECT count(*) FROM graph_observations") == (len(texts) + CLIENTS * PER_CLIENT * 2)
        assert await conn.fetchval("SELECT count(*) FROM graph_relations") == CLIENTS * PER_CLIENT * 2 + 1
        # the hub's embedding snapshot saw every observation (writers queue on the entity row)
        obs_text = await conn.fetchval("SELECT obs_text FROM graph_entities WHERE name = 'Hub'")
        assert all(t in obs_text for t in texts)
        assert await conn.fetchval("SELECT count(*) FROM graph_embeddings") == 1 + CLIENTS * PER_CLIENT
    finally:
        await conn.close()


async def test_delete_leaves_no_orphans(server: RunningServer, pg: PgCluster) -> None:
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
        await call(mcp, "search_semantic", {"query": "Babbage engine", "treatment": "limbic"})
        await call(
            mcp,
            "add_reflection",
            {"target_type": "entity", "target_name": "Charles Babbage", "content": "Never finished the engine"},
        )
        await call(mcp, "delete_entities", {"entityNames": ["Charles Babbage"]})
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        assert await conn.fetchval("SELECT count(*) FROM graph_entities") == 3
        for table, cols in [
            ("graph_observations", ["entity_id"]),
            ("graph_embeddings", ["owner_id"]),
            ("graph_relations", ["from_entity", "to_entity"]),
            ("graph_entity_access", ["entity_id"]),
            ("graph_access_log", ["entity_id"]),
            ("graph_cooccurrences", ["entity_a_id", "entity_b_id"]),
            ("graph_search_results", ["entity_id"]),
        ]:
            for col in cols:
                orphans = await conn.fetchval(
                    f"SELECT count(*) FROM {table} t WHERE t.{col} IS NOT NULL AND NOT EXISTS "
                    f"(SELECT 1 FROM graph_entities g WHERE g.id = t.{col})"
                )
                assert orphans == 0, (table, col)
        assert await conn.fetchval("SELECT count(*) FROM graph_relations") == 0
        assert await conn.fetchval("SELECT count(*) FROM graph_embeddings") == 3
        # the search log keeps the name of the deleted entity, without a dangling id
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM graph_search_results WHERE entity_name = 'Charles Babbage' AND entity_id IS NULL"
            )
            == 1
        )
    finally:
        await conn.close()


async def test_read_graph_is_paginated_and_bounded(server: RunningServer, rest: httpx.AsyncClient) -> None:
    long_obs = [f"observation number {k} describes a fairly long detail about the subject at hand" for k in range(12)]
    ents = [
        {"name": f"node-{i:03d}", "entityType": "even" if i % 2 == 0 else "odd", "observations": long_obs}
        for i in range(60)
    ]
    assert (await rest.post(f"{API}/entities", json={"entities": ents})).status_code == 200
    rels = [{"from": f"node-{i:03d}", "to": f"node-{(i + 1) % 60:03d}", "relationType": "next"} for i in range(60)]
    assert (await rest.post(f"{API}/relations", json={"relations": rels})).status_code == 200
    seen_e: list[str] = []
    seen_r: list[tuple[str, str]] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        page = (await rest.get(API, params={"offset": offset, "token_budget": 3000})).json()
        assert page["tokens"] <= 3000 and page["total_entities"] == 60 and page["total_relations"] == 60
        seen_e += [e["name"] for e in page["entities"]]
        seen_r += [(r["from"], r["to"]) for r in page["relations"]]
        offset, pages = page["next_offset"], pages + 1
    assert pages > 3 and seen_e == [e["name"] for e in ents]
    assert sorted(seen_r) == sorted((r["from"], r["to"]) for r in rels)
    tiny = (await rest.get(API, params={"token_budget": 200, "max_observations": 200})).json()
    assert len(tiny["entities"]) == 1 and tiny["truncated"] and tiny["tokens"] <= 200
    summary = (await rest.get(API, params={"mode": "summary"})).json()
    assert summary["entities"] == [] and summary["summary"]["entity_count"] == 60
    assert {t["entityType"]: t["count"] for t in summary["summary"]["by_type"]} == {"even": 30, "odd": 30}
    assert summary["summary"]["observation_count"] == 720 and len(summary["summary"]["top_entities"]) == 10
    odd = (await rest.get(API, params={"entity_type": "odd", "limit": 5})).json()
    assert odd["total_entities"] == 30 and all(e["entityType"] == "odd" for e in odd["entities"])
    found = (await rest.get(f"{API}/nodes/search", params={"query": "NODE-01", "limit": 3})).json()
    assert found["total"] == 10 and len(found["entities"]) == 3 and found["next_offset"] == 3


async def test_import_export_round_trip(server: RunningServer, tmp_path: Path) -> None:
    from app.graph.cli import run_export, run_import

    lines = [
        json.dumps({"type": "entity", "name": "Zoë", "entityType": "person", "observations": ["Likes café"]}),
        json.dumps({"type": "entity", "name": "Zoë", "entityType": "person", "observations": ["Plays chess"]}),
        json.dumps({"type": "entity", "name": "Chess", "entityType": "game", "observations": []}),
        json.dumps({"type": "relation", "from": "Zoë", "to": "Chess", "relationType": "plays"}),
        json.dumps({"type": "relation", "from": "Zoë", "to": "Nowhere", "relationType": "visits"}),
        "{not json",
        json.dumps({"type": "entity", "name": "", "entityType": "x", "observations": []}),
    ]
    src = tmp_path / "memory.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from app.core.runtime import Runtime

    settings, url = Runtime(server.settings, ["graph"]), server.settings.database_url
    assert url
    report = await asyncio.to_thread(run_import, settings, url, str(src), "imp")
    assert report["entities_created"] == 2 and report["relations_created"] == 1
    assert report["relations_dangling"] == 1 and report["invalid_lines"] == [6, 7]
    exported = await asyncio.to_thread(run_export, settings, url, "imp")
    assert [json.loads(x) for x in exported] == [
        {"type": "entity", "name": "Zoë", "entityType": "person", "observations": ["Likes café", "Plays chess"]},
        {"type": "entity", "name": "Chess", "entityType": "game", "observations": []},
        {"type": "relation", "from": "Zoë", "to": "Chess", "relationType": "plays"},
    ]
    again = await asyncio.to_thread(run_import, settings, url, str(src), "imp")
    assert again["entities_created"] == 0 and again["observations_added"] == 0
    copy = tmp_path / "copy.jsonl"
    copy.write_text("\n".join(exported) + "\n", encoding="utf-8")
    async with mcp_client(server.url) as mcp:
        await seed(mcp, project="src")
        await call(
            mcp,
            "add_observations",
            {
                "project": "src",
                "observations": [{"entityName": "Sourdough", "contents": ['Ünïcode "quoted" text\nwith a newline']}],
            },
        )
    full = await asyncio.to_thread(run_export, settings, url, "src")
    (tmp_path / "src.jsonl").write_text("\n".join(full) + "\n", encoding="utf-8")
    await asyncio.to_thread(run_import, settings, url, str(tmp_path / "src.jsonl"), "dst")
    assert await asyncio.to_thread(run_export, settings, url, "dst") == full
    async with mcp_client(server.url) as mcp:
        a = await call(mcp, "read_graph", {"project": "src"})
        b = await call(mcp, "read_graph", {"project": "dst"})
        assert a["entities"] == b["entities"] and a["relations"] == b["relations"]
        assert len(b["entities"]) == len(PEOPLE)


async def test_read_graph_caps_relations_per_entity(server: RunningServer, rest: httpx.AsyncClient) -> None:
    ents = [{"name": "hub", "entityType": "hub"}] + [{"name": f"leaf{i}", "entityType": "leaf"} for i in range(55)]
    assert (await rest.post(f"{API}/entities", json={"entities": ents})).status_code == 200
    rels = [{"from": "hub", "to": f"leaf{i}", "relationType": "has"} for i in range(55)]
    assert (await rest.post(f"{API}/relations", json={"relations": rels})).status_code == 200
    page = (await rest.get(API, params={"limit": 2, "token_budget": 20000})).json()
    assert [e["name"] for e in page["entities"]] == ["hub", "leaf0"]
    assert len(page["relations"]) == 50 and page["truncated"] and page["total_relations"] == 55
    opened = (await rest.post(f"{API}/nodes/open", json={"names": ["hub"]})).json()
    assert len(opened["relations"]) == 55 and not opened["truncated"]
