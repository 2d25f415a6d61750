"""The graph feature through both transports: the reference tools, search, lifecycle, maintenance."""

from __future__ import annotations

import httpx

from tests.support.graph import API, PEOPLE, call
from tests.support.server import READ_KEY, RunningServer, error_of, mcp_client


async def test_reference_tools_over_mcp(server: RunningServer) -> None:
    async with mcp_client(server.url) as mcp:
        tools = {t.name: t for t in (await mcp.list_tools()).tools}
        for name in [
            "create_entities",
            "create_relations",
            "add_observations",
            "delete_entities",
            "delete_observations",
            "delete_relations",
            "read_graph",
            "search_nodes",
            "open_nodes",
        ]:
            assert name in tools
        props = tools["create_relations"].input_schema["properties"]["relations"]["items"]["properties"]
        assert {"from", "to", "relationType"} <= set(props)
        created = await call(mcp, "create_entities", {"entities": PEOPLE})
        assert [e["name"] for e in created["entities"]] == [p["name"] for p in PEOPLE]
        assert created["entities"][0] == PEOPLE[0] and created["skipped"] == []
        again = await call(
            mcp, "create_entities", {"entities": [PEOPLE[0], {"name": "New", "entityType": "x", "observations": []}]}
        )
        assert [e["name"] for e in again["entities"]] == ["New"] and again["skipped"] == ["Ada Lovelace"]
        rels = await call(
            mcp,
            "create_relations",
            {
                "relations": [
                    {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"},
                    {"from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"},
                    {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"},
                ]
            },
        )
        assert rels["relations"] == [
            {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"},
            {"from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"},
        ]
        dup = await call(
            mcp,
            "create_relations",
            {"relations": [{"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"}]},
        )
        assert dup["relations"] == [] and len(dup["skipped"]) == 1
        added = await call(
            mcp,
            "add_observations",
            {
                "observations": [
                    {"entityName": "Ada Lovelace", "contents": ["Born in 1815", "Worked with Charles Babbage"]}
                ]
            },
        )
        assert added == {
            "results": [{"entityName": "Ada Lovelace", "addedObservations": ["Born in 1815"]}],
            "embedding": "done",  # the test server waits for each write's vectors
        }
        found = await call(mcp, "search_nodes", {"query": "ENGINE"})
        assert {e["name"] for e in found["entities"]} == {"Charles Babbage", "Analytical Engine"}
        assert {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"} in found["relations"]
        opened = await call(mcp, "open_nodes", {"names": ["Ada Lovelace", "Nobody"]})
        assert opened["entities"][0]["observations"][-1] == "Born in 1815"
        assert opened["not_found"] == ["Nobody"] and len(opened["relations"]) == 1
        graph = await call(mcp, "read_graph", {})
        assert len(graph["entities"]) == 5 and len(graph["relations"]) == 2
        assert graph["total_entities"] == 5 and graph["next_offset"] is None
        msg = await call(
            mcp,
            "delete_observations",
            {"deletions": [{"entityName": "Ada Lovelace", "observations": ["Born in 1815"]}]},
        )
        assert msg == {"success": True, "message": "Observations deleted successfully"}
        msg = await call(
            mcp,
            "delete_relations",
            {"relations": [{"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"}]},
        )
        assert msg == {"success": True, "message": "Relations deleted successfully"}
        msg = await call(mcp, "delete_entities", {"entityNames": ["Charles Babbage", "Ghost"]})
        assert msg["success"] and "Not found: Ghost" in msg["message"]
        graph = await call(mcp, "read_graph", {})
        assert {e["name"] for e in graph["entities"]} == {"Ada Lovelace", "Analytical Engine", "Sourdough", "New"}
        assert graph["relations"] == []


async def test_rest_mirror_and_errors(server: RunningServer, rest: httpx.AsyncClient) -> None:
    r = await rest.post(f"{API}/entities", json={"entities": PEOPLE[:2], "project": "g1"})
    assert r.status_code == 200, r.text
    r = await rest.post(
        f"{API}/relations",
        json={
            "project": "g1",
            "relations": [
                {"from": "Ada Lovelace", "to": "Missing", "relationType": "knows"},
                {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "knows"},
            ],
        },
    )
    assert r.status_code == 404 and "Missing" in r.json()["error"]["message"]
    r = await rest.get(f"{API}/nodes/search", params={"query": "babbage", "project": "g1"})
    assert r.status_code == 200 and r.json()["relations"] == []  # nothing half-written
    r = await rest.post(f"{API}/entities", json={"entities": [{"name": "  ", "entityType": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["field"] == "entities.0.name"
    r = await rest.post(
        f"{API}/observations",
        json={"observations": [{"entityName": "Ada Lovelace", "contents": ["x" * 9000]}], "project": "g1"},
    )
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["field"].startswith("observations.0")
    r = await rest.post(
        f"{API}/observations",
        json={
            "project": "g1",
            "observations": [
                {"entityName": "Ada Lovelace", "contents": ["fine"]},
                {"entityName": "Nobody", "contents": ["y"]},
            ],
        },
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == 4002
    hist = (await rest.get(f"{API}/entities/history", params={"entity_name": "Ada Lovelace", "project": "g1"})).json()
    assert "fine" not in [o["content"] for o in hist["observations"]]
    r = await rest.post(f"{API}/entities", json={"entities": [], "colour": 1})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["rule"] == "extra_forbidden"
    async with mcp_client(server.url, key=READ_KEY) as mcp:
        assert error_of(await mcp.call_tool("create_entities", {"entities": PEOPLE}))["code"] == 4030
        err = error_of(
            await mcp.call_tool("create_relations", {"relations": [{"from": "", "to": "b", "relationType": "r"}]})
        )
        assert err["code"] in (4001, 4030)
        ok = await mcp.call_tool("read_graph", {"project": "g1"})
        assert not ok.is_error and ok.structured_content["total_entities"] == 2
        found = await mcp.call_tool("search_semantic", {"project": "g1", "query": "analytical engine"})
        assert not found.is_error and found.structured_content["results"][0]["name"] == "Charles Babbage"
        none = await mcp.call_tool("search_semantic", {"project": "no-such-project", "query": "x"})
        assert none.structured_content["results"] == [] and none.structured_content["event_id"] == 0
