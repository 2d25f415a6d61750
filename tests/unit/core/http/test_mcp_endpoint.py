"""app/core/http/mcp_endpoint.py: the ASGI app in front of the MCP SDK, without a server: toolsets
from the URL into the request's state, refusals with the error body, event-stream slots, the open
server's lock, and which SDK app answers a POST."""

from __future__ import annotations

import json
from typing import Any

from app.core.context import OPEN_PRINCIPAL, Principal
from app.core.http.callers import CALLER_STATE, Callers
from app.core.http.mcp_endpoint import (
    SELECTIONS_KEPT,
    TOOLSETS_STATE,
    McpEndpoint,
    Shortcut,
    answers_in_json,
    read_body,
    selection_of,
)
from app.core.ratelimit import StreamSlots
from app.core.toolsets import Catalog, Selection
from tests.unit.core.test_toolsets import _registry

BOTH = [(b"accept", b"application/json, text/event-stream")]


def _rpc(method: str, params: dict[str, Any] | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})}).encode()


def test_requests_that_cannot_stream_are_answered_in_json() -> None:
    assert answers_in_json(_rpc("tools/call", {"name": "search", "arguments": {}}), BOTH)
    assert answers_in_json(_rpc("tools/list"), BOTH)
    assert answers_in_json(_rpc("tools/call", {"name": "search"}), [(b"accept", b"*/*")])
    # a long-running tool streams nothing before its result unless the call asks for progress
    assert answers_in_json(_rpc("tools/call", {"name": "ingest"}), BOTH)
    # a progress token: its progress notifications come before the result, on an SSE stream
    with_token = {"name": "search", "_meta": {"progressToken": "t"}}
    assert not answers_in_json(_rpc("tools/call", with_token), BOTH)
    # notifications, batches, broken JSON and clients refusing SSE keep the SSE path (and its checks)
    assert not answers_in_json(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}', BOTH)
    assert not answers_in_json(b"[" + _rpc("tools/list") + b"]", BOTH)
    assert not answers_in_json(b"{not json", BOTH)
    assert not answers_in_json(_rpc("tools/list"), [(b"accept", b"application/json")])
    assert not answers_in_json(_rpc("tools/list"), [])


async def test_read_body_hands_the_body_to_the_app_again() -> None:
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"a":', "more_body": True},
        {"type": "http.request", "body": b" 1}", "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    body, replay = await read_body(receive)
    assert body == b'{"a": 1}'
    assert await replay() == {"type": "http.request", "body": b'{"a": 1}', "more_body": False}
    assert await replay() == {"type": "http.disconnect"}


class _App:
    """Stands in for an SDK app (or the routes): records what it was handed and answers 200."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scopes.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class _Guard:
    """An open server's guard: `locked` once a key exists."""

    store: Any = None

    def __init__(self, locked: bool) -> None:
        self.known_locked = locked

    async def locked(self) -> bool:
        return self.known_locked


async def _call(app: Any, path: str, method: str = "POST", body: bytes = b"", **headers: str) -> tuple[int, Any]:
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 5000),
        "state": {"request_id": "r1"},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = sent[0]["status"]
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return status, (json.loads(payload) if payload.startswith(b"{") else payload)


def _endpoint(callers: Callers | None = None, streams: int = 0, json_app: Any = None) -> tuple[McpEndpoint, _App]:
    sdk = _App()
    catalog = Catalog(_registry(), ["notes"])
    callers = callers or Callers(guard=_Guard(locked=False))  # type: ignore[arg-type]
    endpoint = McpEndpoint(sdk, catalog=catalog, callers=callers, streams=StreamSlots(streams), json_transport=json_app)
    return endpoint, sdk


async def test_the_url_chooses_the_toolsets_the_handlers_read() -> None:
    endpoint, sdk = _endpoint()
    assert (await _call(endpoint, "/mcp/graph,readonly"))[0] == 200
    scope = sdk.scopes[-1]
    assert scope["path"] == "/mcp" and scope["raw_path"] == b"/mcp"
    assert scope["state"][TOOLSETS_STATE] == Selection(("graph",), True) and scope["state"]["request_id"] == "r1"
    assert scope["state"][CALLER_STATE] == OPEN_PRINCIPAL  # an open server resolves its caller here

    class _Request:
        pass

    request = _Request()
    request.scope = scope  # type: ignore[attr-defined]
    assert selection_of(request) == Selection(("graph",), True) and selection_of(None) == Selection()
    await _call(endpoint, "/mcp?toolsets=notes")
    assert sdk.scopes[-1]["state"][TOOLSETS_STATE] == Selection(("notes",), False)


async def test_unknown_toolsets_and_locked_servers_answer_with_the_error_body() -> None:
    endpoint, sdk = _endpoint()
    status, body = await _call(endpoint, "/mcp/nope")
    assert status == 404 and body["error"]["code"] == 4002 and "Unknown toolset" in body["error"]["message"]
    status, body = await _call(endpoint, "/mcp/compat,graph")
    assert status == 400 and body["error"]["code"] == 4001
    locked, sdk = _endpoint(Callers(guard=_Guard(locked=True)))  # type: ignore[arg-type]
    status, body = await _call(locked, "/mcp")
    assert status == 401 and body["error"]["code"] == 4010 and not sdk.scopes
    status, body = await _call(locked, "/favicon.ico", method="GET")  # the SDK's other paths: the same lock
    assert status == 401 and not sdk.scopes


async def test_a_urls_checked_selection_is_kept_and_a_refused_one_refused_again() -> None:
    endpoint, sdk = _endpoint()
    for _ in range(2):
        assert (await _call(endpoint, "/mcp/graph,readonly"))[0] == 200
        assert (await _call(endpoint, "/mcp/nope"))[0] == 404
    assert sdk.scopes[0]["state"][TOOLSETS_STATE] is sdk.scopes[1]["state"][TOOLSETS_STATE]
    assert list(endpoint._selections) == [("graph,readonly", "")]
    for n in range(SELECTIONS_KEPT + 1):  # made-up URLs cannot grow it
        endpoint.selection("graph", f"toolsets=graph&readonly={'true' if n % 2 else 'false'}{' ' * n}")
    assert len(endpoint._selections) <= SELECTIONS_KEPT


async def test_a_server_with_keys_resolves_the_caller_before_the_transport() -> None:
    writer = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))

    class _Store:
        failures = None

        async def verify(self, token: str) -> Principal | None:
            return writer if token == "good" else None

    meta = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
    endpoint, sdk = _endpoint(Callers(store=_Store(), metadata_url=meta))  # type: ignore[arg-type]
    assert (await _call(endpoint, "/mcp", authorization="Bearer good"))[0] == 200
    assert sdk.scopes[-1]["state"][CALLER_STATE] == writer
    status, body = await _call(endpoint, "/mcp")
    assert status == 401 and body["error"]["code"] == 4010 and len(sdk.scopes) == 1
    status, body = await _call(endpoint, "/mcp", authorization="Bearer nope")
    assert status == 401 and body["error"]["code"] == 4010 and len(sdk.scopes) == 1


async def test_mcp_paths_go_to_the_transport_and_other_paths_to_the_sdk_app() -> None:
    transport = _App()
    sdk = _App()
    catalog = Catalog(_registry(), ["notes"])
    callers = Callers(guard=_Guard(locked=False))  # type: ignore[arg-type]
    endpoint = McpEndpoint(sdk, catalog=catalog, callers=callers, streams=StreamSlots(0), transport=transport)
    assert (await _call(endpoint, "/mcp/notes"))[0] == 200
    assert (await _call(endpoint, "/.well-known/oauth-protected-resource/mcp", method="GET"))[0] == 200
    assert [s["path"] for s in transport.scopes] == ["/mcp"]
    assert [s["path"] for s in sdk.scopes] == ["/.well-known/oauth-protected-resource/mcp"]


async def test_event_streams_take_a_slot_per_key() -> None:
    endpoint, sdk = _endpoint(streams=1)
    await endpoint.streams.claim("anonymous")
    status, body = await _call(endpoint, "/mcp", method="GET")
    assert status == 429 and body["error"]["code"] == 4290 and not sdk.scopes
    assert (await _call(endpoint, "/mcp", method="GET", authorization="Bearer k"))[0] == 200
    assert isinstance(endpoint.streams, StreamSlots)
    assert endpoint.streams._open == {"anonymous": 1}  # the keyed stream gave its slot back
    assert (await _call(endpoint, "/mcp"))[0] == 200  # a POST is no stream


async def test_posts_that_cannot_stream_go_to_the_json_app() -> None:
    json_app = _App()
    endpoint, sdk = _endpoint(json_app=json_app)
    accept = "application/json, text/event-stream"
    await _call(endpoint, "/mcp", body=_rpc("tools/list"), accept=accept)
    assert len(json_app.scopes) == 1 and not sdk.scopes
    with_token = _rpc("tools/call", {"name": "search", "_meta": {"progressToken": "t"}})
    await _call(endpoint, "/mcp", body=with_token, accept=accept)
    assert len(json_app.scopes) == 1 and len(sdk.scopes) == 1


async def test_the_shortcut_hands_only_mcp_paths_to_the_endpoint() -> None:
    endpoint, sdk = _endpoint()
    routes = _App()
    shortcut = Shortcut(routes, endpoint)
    await _call(shortcut, "/mcp/notes")
    await _call(shortcut, "/mcpx")
    await _call(shortcut, "/api/v1/projects", method="GET")
    assert [s["path"] for s in sdk.scopes] == ["/mcp"]
    assert [s["path"] for s in routes.scopes] == ["/mcpx", "/api/v1/projects"]
