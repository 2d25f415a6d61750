"""API keys as operations (`list_keys`, `create_key`, `revoke_key`): admin only, shown once, kept to
the caller's project when its key is bound to one, and never offered to MCP clients."""

from __future__ import annotations

import httpx

from tests.support.server import WRITE_KEY, RunningServer, mcp_client


async def test_a_created_key_works_is_listed_without_its_secret_and_revokes(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    made = await rest.post("/api/v1/keys", json={"name": "ci", "scopes": ["write", "read"], "toolsets": ["graph"]})
    assert made.status_code == 200, made.text
    body = made.json()
    token = body["token"]
    assert token.startswith("cairn_") and body["key"]["prefix"] == token[:12]
    assert body["key"]["scopes"] == ["read", "write"] and body["key"]["toolsets"] == ["graph"]
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as client:
        assert (await client.get("/api/v1/projects")).status_code == 200
        assert (await client.get("/api/v1/keys")).status_code == 403  # not an admin key
        listed = (await rest.get("/api/v1/keys")).json()["keys"]
        assert [k["name"] for k in listed] == ["ci"]
        assert token not in str(listed) and "key_hash" not in listed[0]
        assert (await rest.post(f"/api/v1/keys/{body['key']['prefix']}/revoke", json={})).json() == {"revoked": 1}
        assert (await client.get("/api/v1/projects")).status_code == 401
    assert (await rest.get("/api/v1/keys")).json()["keys"] == []
    assert len((await rest.get("/api/v1/keys", params={"include_revoked": "true"})).json()["keys"]) == 1
    again = await rest.post(f"/api/v1/keys/{body['key']['id']}/revoke", json={})
    assert again.status_code == 404 and again.json()["error"]["code"] == 4002
    # The audit row of the creation holds no secret.
    audit = (await rest.get("/api/v1/audit", params={"operation": "create_key"})).json()["entries"]
    assert len(audit) == 1 and token not in str(audit)


async def test_a_project_bound_admin_manages_its_project_only(server: RunningServer, rest: httpx.AsyncClient) -> None:
    other = (await rest.post("/api/v1/keys", json={"scopes": ["read"], "project": "beta"})).json()
    bound = (await rest.post("/api/v1/keys", json={"scopes": ["admin"], "project": "alpha"})).json()
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {bound['token']}"}) as client:
        mine = await client.post("/api/v1/keys", json={"scopes": ["read"], "name": "mine"})
        assert mine.status_code == 200 and mine.json()["key"]["project"] == "alpha"
        elsewhere = await client.post("/api/v1/keys", json={"scopes": ["read"], "project": "beta"})
        assert elsewhere.status_code == 403 and elsewhere.json()["error"]["code"] == 4030
        listed = (await client.get("/api/v1/keys")).json()["keys"]
        assert {k["project"] for k in listed} == {"alpha"} and len(listed) == 2
        refused = await client.post(f"/api/v1/keys/{other['key']['id']}/revoke", json={})
        assert refused.status_code == 404
    assert len((await rest.get("/api/v1/keys")).json()["keys"]) == 3


async def test_only_admin_keys_and_valid_arguments(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {WRITE_KEY}"}) as client:
        answer = await client.post("/api/v1/keys", json={"scopes": ["admin"]})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == 4030
    cases: list[dict[str, object]] = [
        {"scopes": []},
        {"scopes": ["root"]},
        {"scopes": ["read"], "project": "../x"},
        {"scopes": ["read"], "x": 1},
    ]
    for bad in cases:
        answer = await rest.post("/api/v1/keys", json=bad)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == 4001, bad
    assert (await rest.get("/api/v1/keys")).json()["keys"] == []


async def test_key_operations_are_not_mcp_tools(server: RunningServer) -> None:
    async with mcp_client(server.url, path="/mcp/admin") as mcp:
        names = {t.name for t in (await mcp.list_tools()).tools}
    assert "audit_log" in names and not names & {"list_keys", "create_key", "revoke_key"}
