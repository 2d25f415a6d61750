"""app/core/http/server.py: the SDK's apps made per JSON-response setting (with `auto`, a second one
answering JSON bodies, each with its session manager and a transport on it), then the test server's app
as it builds it: an unknown REST route is a 4002 naming the docs, a console error is an HTML page, the
API docs are served from packaged assets, the front's request id is on every answer, and what nothing
routes ends at the MCP endpoint's mount."""

from __future__ import annotations

import asyncio
from typing import Literal

import httpx
import pytest

from app.core.config import Settings
from app.core.http.server import _sdk_apps
from app.main import assemble
from tests.support.console import signed_in
from tests.support.databases import migrated_url
from tests.support.server import ADMIN_KEY, PgCluster, RunningServer


def test_the_sdk_apps_follow_the_json_response_setting(pg: PgCluster) -> None:
    url = migrated_url(pg, ["memory"])
    choices: list[tuple[Literal["auto"] | bool, int]] = [("auto", 2), (True, 1), (False, 1)]
    for choice, apps in choices:
        settings = Settings(database_url=url, features=["memory"], mcp_json_response=choice)
        asm = assemble(settings)
        try:
            sdk_app, transport, json_transport, managers = _sdk_apps(asm.mcp, settings)
            assert sdk_app is not None and (json_transport is not None) == (apps == 2)
            assert len(managers) == apps and len({id(m) for m in managers}) == apps
            assert transport.session_manager is managers[0]
            assert json_transport is None or json_transport.session_manager is managers[1]
        finally:
            asyncio.run(asm.state.db.dispose())


@pytest.mark.slow  # the test server
async def test_the_app_routes_and_answers_as_built(server: RunningServer, rest: httpx.AsyncClient) -> None:
    unknown = await rest.get("/api/v1/no/such/thing", headers={"X-Request-Id": "req-123"})
    assert unknown.status_code == 404 and unknown.headers["x-request-id"] == "req-123"
    error = unknown.json()["error"]
    assert (error["code"], error["message"]) == (4002, "No such endpoint: /api/v1/no/such/thing")
    assert error["suggestions"] == ["See /docs for the routes"]
    assert (await rest.post("/api/v1/no/such/thing", json={})).status_code == 404
    docs = await rest.get("/docs")
    assert docs.status_code == 200 and "/docs/static/" in docs.text and "cdn.jsdelivr" not in docs.text
    assert (await rest.get("/openapi.json")).json()["info"]["title"] == "Cairn"
    nowhere = await rest.get("/no-such-page")
    assert nowhere.status_code == 404 and nowhere.headers["x-request-id"]
    assert "error" not in nowhere.text  # the SDK's own 404, not a Cairn error body
    async with signed_in(server.url, ADMIN_KEY) as console:
        page = await console.client.get("/ui/datasets/profile")
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")
    assert "Say which dataset to profile" in page.text
