"""Core behaviour over both transports: auth, errors, parity of schemas, resources, progress."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import httpx
import pytest

from app.core.jsonschema import lean
from tests.support.server import (
    ADMIN_KEY,
    BOUND_PROJECT,
    PROJECT_KEY,
    READ_KEY,
    WRITE_KEY,
    RunningServer,
    error_of,
    mcp_client,
    resource_text,
)


async def test_health_ready_metrics(server: RunningServer, rest: httpx.AsyncClient) -> None:
    assert (await rest.get("/healthz")).json() == {"status": "ok", "pid": os.getpid()}  # served in this process
    ready = await rest.get("/readyz")
    assert ready.status_code == 200, ready.text
    checks = ready.json()["checks"]
    assert {k: checks[k] for k in ("database", "migrations", "embedder")} == {
        "database": True,
        "migrations": True,
        "embedder": True,
    }
    assert checks["embedding_queue"]["depth"] >= 0
    await rest.get("/api/v1/projects")
    body = (await rest.get("/metrics")).text
    assert 'cairn_calls_total{operation="list_projects",outcome="ok",transport="rest"}' in body
    assert "cairn_db_pool_checked_out" in body
    assert "cairn_embedding_queue_depth" in body


async def test_projects_rest_and_mcp_share_state(server: RunningServer, rest: httpx.AsyncClient) -> None:
    r = await rest.post("/api/v1/projects", json={"name": "alpha", "description": "first"})
    assert r.status_code == 200, r.text
    assert r.json()["created"] is True
    again = await rest.post("/api/v1/projects", json={"name": "alpha"})
    assert again.json()["created"] is False
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool("list_projects", {"limit": 10})
        assert not res.is_error
        names = [p["name"] for p in res.structured_content["projects"]]
        assert names == ["alpha"]
        created = await mcp.call_tool("create_project", {"name": "beta"})
        assert created.structured_content["created"] is True
    page = (await rest.get("/api/v1/projects", params={"limit": 1})).json()
    assert [p["name"] for p in page["projects"]] == ["alpha"] and page["total"] == 2
    assert page["next_offset"] == 1


async def test_rest_auth_errors(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as anon:
        r = await anon.get("/api/v1/projects")
        assert r.status_code == 401
        assert r.json()["error"]["code"] == 4010
        assert "resource_metadata=" in r.headers["www-authenticate"]
        r = await anon.get("/api/v1/projects", headers={"Authorization": "Bearer nope-not-a-key-123456"})
        assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]
        r = await anon.post("/api/v1/projects", json={"name": "x1"}, headers={"Authorization": f"Bearer {READ_KEY}"})
        assert r.status_code == 403
        assert r.json()["error"]["code"] == 4030 and "write" in r.json()["error"]["message"]


async def test_project_bound_key(server: RunningServer, rest: httpx.AsyncClient) -> None:
    await rest.post("/api/v1/projects", json={"name": "other"})
    headers = {"Authorization": f"Bearer {PROJECT_KEY}"}
    r = await rest.post("/api/v1/projects", json={"name": "other2"}, headers=headers)
    assert r.status_code == 403 and BOUND_PROJECT in r.json()["error"]["message"]
    r = await rest.post("/api/v1/projects", json={"name": BOUND_PROJECT}, headers=headers)
    assert r.status_code == 200
    listed = (await rest.get("/api/v1/projects", headers=headers)).json()
    assert [p["name"] for p in listed["projects"]] == [BOUND_PROJECT] and listed["total"] == 1


async def test_mcp_auth(server: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as anon:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        headers = {"Accept": "application/json, text/event-stream"}
        r = await anon.post("/mcp", json=init, headers=headers)
        assert r.status_code == 401
        assert "resource_metadata=" in r.headers["www-authenticate"]
        meta = await anon.get("/.well-known/oauth-protected-resource/mcp")
        assert meta.status_code == 200 and meta.json()["resource"].endswith("/mcp")
        # Only what exists: bearer keys in the header, the three scopes, no authorization server to try.
        assert meta.json()["scopes_supported"] == ["read", "write", "admin"]
        assert meta.json()["bearer_methods_supported"] == ["header"] and "authorization_servers" not in meta.json()
        for probe in (
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration",
            "/.well-known/oauth-authorization-server/mcp",
        ):
            missing = await anon.get(probe)
            assert missing.status_code == 404 and missing.json()["error"]["code"] == 4002, probe
        r = await anon.post("/mcp", json=init, headers={**headers, "Authorization": "Bearer wrong-key-xxxxxxxx"})
        assert r.status_code == 401
    async with mcp_client(server.url, key=READ_KEY) as mcp:
        err = error_of(await mcp.call_tool("create_project", {"name": "nope"}))
        assert err["code"] == 4030
    async with mcp_client(server.url, key=PROJECT_KEY) as mcp:
        err = error_of(await mcp.call_tool("create_project", {"name": "elsewhere"}))
        assert err["code"] == 4030


async def test_unknown_fields_and_validation_both_transports(server: RunningServer, rest: httpx.AsyncClient) -> None:
    r = await rest.post("/api/v1/projects", json={"name": "ok-name", "colour": "red"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == 4001 and err["category"] == "Invalid Input"
    assert err["details"]["errors"][0]["field"] == "colour"
    assert err["details"]["errors"][0]["rule"] == "extra_forbidden"
    r = await rest.post("/api/v1/projects", json={"name": "bad name!"})
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"][0] == {
        "field": "name",
        "rule": "string_pattern_mismatch",
        "message": r.json()["error"]["details"]["errors"][0]["message"],
    }
    r = await rest.get("/api/v1/projects", params={"limit": 0})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["rule"] == "greater_than_equal"
    r = await rest.post("/api/v1/projects", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == 4001
    async with mcp_client(server.url) as mcp:
        err = error_of(await mcp.call_tool("create_project", {"name": "fine", "colour": "red"}))
        assert err["code"] == 4001 and err["details"]["errors"][0]["field"] == "colour"
        err = error_of(await mcp.call_tool("list_projects", {"limit": 999}))
        assert err["details"]["errors"][0]["field"] == "limit"
        unknown = error_of(await mcp.call_tool("no_such_tool", {}))
        assert unknown["code"] == 4002 and unknown["message"] == "Unknown tool: no_such_tool"
        near = error_of(await mcp.call_tool("list_project", {}))
        assert near["suggestions"][0].startswith("Did you mean list_projects")


async def test_unexpected_error_hides_internals_and_writes_nothing(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    r = await rest.post("/api/v1/testing/boom", json={"project": "half-written"})
    assert r.status_code == 500
    err = r.json()["error"]
    assert err["code"] == 5000 and "secret" not in r.text and "passwd" not in r.text
    assert err["details"]["request_id"] == r.headers["x-request-id"]
    async with mcp_client(server.url) as mcp:
        mcp_err = error_of(await mcp.call_tool("test_boom", {"project": "half-written"}))
        assert mcp_err["code"] == 5000 and "secret" not in json.dumps(mcp_err)
    names = [p["name"] for p in (await rest.get("/api/v1/projects")).json()["projects"]]
    assert "half-written" not in names


async def test_unknown_route_and_oversized_body(server: RunningServer, rest: httpx.AsyncClient) -> None:
    r = await rest.get("/api/v1/nothing/here")
    assert r.status_code == 404 and r.json()["error"]["code"] == 4002
    big = {"name": "x", "description": "y" * (server.settings.max_body_bytes + 10)}
    r = await rest.post("/api/v1/projects", json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == 4130
    r = await rest.post(
        "/mcp",
        content=b"x" * (server.settings.max_body_bytes + 10),
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 413


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    """Inline every $ref (against `root`) and drop titles, so schemas compare by structure."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            ref = schema["$ref"]
            path = ref.split("/")
            node: Any = root
            for part in path[1:]:
                node = node[part]
            siblings = {k: _resolve(v, root) for k, v in schema.items() if k not in ("$ref", "title")}
            return {**_resolve(node, root), **siblings}
        return {k: _resolve(v, root) for k, v in schema.items() if k not in ("title", "$defs")}
    if isinstance(schema, list):
        return [_resolve(v, root) for v in schema]
    return schema


async def test_every_tool_has_a_rest_twin_with_the_same_schemas(server: RunningServer, rest: httpx.AsyncClient) -> None:
    """/mcp/all lists every operation once; its inputSchema is the lean form of the REST body (or query
    parameters) and every tool has a title, a description and annotations."""
    doc = (await rest.get("/openapi.json")).json()
    rest_ops: dict[str, tuple[str, dict[str, Any]]] = {}
    for item in doc["paths"].values():
        for method, entry in item.items():
            if "x-cairn-operation" in entry:
                rest_ops[entry["x-cairn-operation"]] = (method, entry)
    async with mcp_client(server.url, path="/mcp/all") as mcp:
        tools = (await mcp.list_tools()).tools
        resources = (await mcp.list_resources()).resources
        templates = (await mcp.list_resource_templates()).resource_templates
    # Operations declared mcp=False (key management, the console's own reads) have a REST route only.
    rest_only = {op.name for op in server.app.state.cairn.registry.operations if not op.mcp}
    assert {"create_key", "list_keys", "revoke_key"} <= rest_only & set(rest_ops)
    assert {t.name for t in tools} == set(rest_ops) - rest_only
    assert len(tools) >= 3
    for tool in tools:
        method, entry = rest_ops[tool.name]
        if method == "get":
            rest_props = {p["name"]: lean(_resolve(p["schema"], doc)) for p in entry.get("parameters", [])}
            assert rest_props == tool.input_schema.get("properties", {}), tool.name
        else:
            rest_in = lean(_resolve(entry["requestBody"]["content"]["application/json"]["schema"], doc))
            rest_in.pop("description", None)
            assert rest_in == tool.input_schema, tool.name
        assert "$defs" not in json.dumps(tool.input_schema) and '"title"' not in json.dumps(tool.input_schema)
        assert entry["responses"]["200"]["content"]["application/json"]["schema"], tool.name
        assert tool.output_schema is None, tool.name  # advertised only with CAIRN_MCP_OUTPUT_SCHEMAS
        assert tool.title and tool.description and tool.annotations is not None, tool.name
    rest_resources = {
        entry["x-cairn-resource"]
        for item in doc["paths"].values()
        for entry in item.values()
        if "x-cairn-resource" in entry
    }
    mcp_uris = {str(r.uri) for r in resources} | {t.uri_template for t in templates}
    assert mcp_uris == rest_resources
    assert {"mcp://health", "mcp://settings"} <= mcp_uris


async def test_resources_match_across_transports(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async with mcp_client(server.url) as mcp:
        health = json.loads(resource_text(await mcp.read_resource("mcp://health")))
        settings = json.loads(resource_text(await mcp.read_resource("mcp://settings")))
    assert health["embedding"]["model"] == "all-MiniLM-L6-v2"
    assert health["embedding"]["dimension"] == 384 and health["database"]["reachable"] is True
    rest_settings = (await rest.get("/api/v1/resources/settings")).json()
    assert rest_settings == settings
    # Thresholds from the local model's declared calibration (app.memory.thresholds).
    assert settings["search"] == {
        "default_limit": 5,
        "max_limit": 50,
        "default_score_threshold": 0.591,
        "default_score_thresholds": {"hybrid": 0.591, "semantic": 0.454, "lexical": 0.25},
        "score_threshold_source": "calibration (declared)",
    }


async def test_embed_operation(server: RunningServer, rest: httpx.AsyncClient) -> None:
    r = await rest.post("/api/v1/embed", json={"text": "The cat sat on the mat."})
    body = r.json()
    assert r.status_code == 200 and body["dimension"] == 384 and len(body["head"]) == 8
    assert abs(body["norm"] - 1.0) < 1e-3 and body["truncated"] is False


async def test_progress_notifications(server: RunningServer) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool("test_progress", {"steps": 4}, progress_callback=on_progress)
    assert not res.is_error
    assert [s[0] for s in seen] == [1, 2, 3, 4] and seen[-1][1] == 4


async def test_mcp_answers_in_one_json_body_unless_the_call_can_stream(server: RunningServer) -> None:
    """`CAIRN_MCP_JSON_RESPONSE=auto`: a request that cannot stream anything before its result gets
    the JSON-RPC response as one JSON body (a long-running tool's too); a call with a progress token
    gets an SSE stream (progress first). Every answer carries the request id."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Accept": "application/json, text/event-stream"}

    def call(name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if meta is not None:
            params["_meta"] = meta
        return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}

    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as client:
        plain = await client.post("/mcp", json=call("list_projects", {}))
        assert plain.status_code == 200 and plain.headers["content-type"].startswith("application/json")
        assert plain.json()["id"] == 7 and plain.json()["result"]["structuredContent"]["projects"] == []
        assert plain.headers["x-request-id"]
        listed = await client.post("/mcp/graph", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert listed.headers["content-type"].startswith("application/json") and listed.json()["result"]["tools"]
        streamed = await client.post("/mcp", json=call("test_progress", {"steps": 2}, {"progressToken": "p1"}))
        assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[5:]) for line in streamed.text.splitlines() if line.startswith("data:")]
        assert [e.get("method") for e in events] == ["notifications/progress"] * 2 + [None]
        assert events[-1]["id"] == 7 and not events[-1]["result"].get("isError")
        long_running = await client.post("/mcp", json=call("test_progress", {"steps": 1}))
        assert long_running.headers["content-type"].startswith("application/json")
        assert long_running.json()["id"] == 7 and not long_running.json()["result"].get("isError")
        # A client that does not accept SSE still gets the SSE path's answer (406), as before.
        refused = await client.post("/mcp", json=call("list_projects", {}), headers={"Accept": "application/json"})
        assert refused.status_code == 406


@pytest.mark.parametrize(
    "headers,status",
    [
        ({"Host": "evil.example.com"}, 421),
        ({"Origin": "http://evil.example.com"}, 403),
    ],
)
async def test_dns_rebinding_protection(server: RunningServer, headers: dict[str, str], status: int) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post(
            "/mcp",
            json=init,
            headers={
                "Authorization": f"Bearer {ADMIN_KEY}",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
        )
    assert r.status_code == status


async def test_write_key_can_write_not_admin(server: RunningServer) -> None:
    async with mcp_client(server.url, key=WRITE_KEY) as mcp:
        res = await mcp.call_tool("create_project", {"name": "writer"})
        assert not res.is_error and res.structured_content["project"]["name"] == "writer"


async def test_request_ids_reach_the_audit_log(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async with mcp_client(server.url, key=WRITE_KEY) as mcp:
        assert not (await mcp.call_tool("create_project", {"name": "traced"})).is_error
    entry = (await rest.get("/api/v1/audit", params={"limit": 1})).json()["entries"][0]
    assert entry["operation"] == "create_project" and entry["request_id"]
    r = await rest.post("/api/v1/projects", json={"name": "traced-2"}, headers={"X-Request-ID": "abc123"})
    assert r.headers["x-request-id"] == "abc123"
    entry = (await rest.get("/api/v1/audit", params={"limit": 1})).json()["entries"][0]
    assert entry["request_id"] == "abc123"


async def test_unstorable_text_and_out_of_range_values_are_invalid_input(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    r = await rest.post("/api/v1/projects", json={"name": "nul", "description": "a\x00b"})
    assert r.status_code == 400 and "'description'" in r.json()["error"]["message"]
    r = await rest.post(
        "/api/v1/projects",
        content=b'{"name": "sur", "description": "\\udc80"}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == 4001
    r = await rest.get("/api/v1/audit", params={"before_id": str(2**70)})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["field"] == "before_id"


async def test_openapi_reads_well_and_the_docs_work_offline(server: RunningServer, rest: httpx.AsyncClient) -> None:
    """Whole-sentence summaries, one operationId style, described tags, every error status declared,
    and Swagger UI / ReDoc served from the server itself (no CDN)."""
    doc = (await rest.get("/openapi.json")).json()
    entries = [entry for item in doc["paths"].values() for entry in item.values()]
    ids = [entry["operationId"] for entry in entries]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[a-z][a-z0-9_]*", i) for i in ids), ids
    assert all(entry["summary"].endswith((".", "!", "?")) for entry in entries), [
        e["summary"] for e in entries if not e["summary"].endswith((".", "!", "?"))
    ]
    tags = {t["name"]: t["description"] for t in doc["tags"]}
    assert {"core", "memory", "graph", "analysis", "datasets"} <= set(tags) and all(tags.values()), tags
    assert {tag for entry in entries for tag in entry["tags"]} <= set(tags)
    for entry in entries:  # each operation's own errors (tests/e2e/test_openapi_contract.py checks them)
        declared = set(entry["responses"])
        assert {"200", "401", "403", "500", "503", "504"} <= declared, entry["operationId"]
        for status, response in entry["responses"].items():
            if status != "200":
                assert response["x-cairn-codes"] and all(str(c)[0] == status[0] for c in response["x-cairn-codes"]), (
                    entry
                )
    by_id = {e["operationId"]: e for e in entries}
    assert "413" not in by_id["read_health"]["responses"] and "413" in by_id["create_project"]["responses"]
    assert "404" in by_id["get_thought"]["responses"] and "404" not in by_id["list_projects"]["responses"]
    for entry in entries:  # one request and one response example per operation, which its model accepted
        if "x-cairn-operation" not in entry:
            continue
        if "requestBody" in entry:
            assert "example" in entry["requestBody"]["content"]["application/json"], entry["operationId"]
        else:
            required = [p for p in entry.get("parameters", []) if p["required"]]
            assert all("example" in p for p in required), entry["operationId"]
        if not entry["operationId"].startswith("test_"):  # the suite's own instrumentation records none
            assert "example" in entry["responses"]["200"]["content"]["application/json"], entry["operationId"]
    opens = {e["operationId"]: "502" in e["responses"] for e in entries if "x-cairn-operation" in e}
    assert opens["analysis_ingest"] and not opens["list_projects"]
    for page, asset in (("/docs", "/docs/static/swagger-ui-bundle.js"), ("/redoc", "/docs/redoc.js")):
        html = (await rest.get(page)).text
        assert asset in html and "cdn" not in html.lower() and "fonts.googleapis" not in html, page
        served = await rest.get(asset)
        assert served.status_code == 200 and b"cdn.redoc.ly" not in served.content, asset
    assert '"validatorUrl": null' in (await rest.get("/docs")).text  # no badge image from swagger.io


async def test_a_field_called_query_is_named_in_validation_errors(server: RunningServer) -> None:
    async with mcp_client(server.url, path="/mcp/graph") as mcp:
        err = error_of(await mcp.call_tool("search_nodes", {"query": 5}))
    assert err["code"] == 4001 and [e["field"] for e in err["details"]["errors"]] == ["query"], err
