"""The MCP endpoint: `/mcp`, `/mcp/<toolsets>` and `/mcp?toolsets=…` as one ASGI app in front of the SDK.

It is mounted at `/` (the SDK's other paths), and `Shortcut`, innermost of the application's own
middleware (the HTTP front's request ids, browser checks and body limit still apply), hands it every
`/mcp` request before a route is tried: a mount is only tried after every REST route, and trying
them all was a measurable share of a trivial MCP call. For one `/mcp` request, in order:

1. a client locked out of key lookups by failed authentications is refused (4290; the SDK would turn
   the limit's error into a 500), unless its key is valid (`KeyStore.refusal`);
2. a `GET /mcp` event stream takes one of its key's slots (`CAIRN_MAX_SSE_STREAMS_PER_KEY`, 4290);
3. the caller is resolved here (`callers.resolve_caller`: on a server with keys, or an open one
   locked since, a missing or unknown key is 4010 with its `WWW-Authenticate` challenge);
4. the toolsets the URL chooses are checked (unknown: 4002, clashing: 4001);
5. the request goes to the SDK's streamable HTTP transport at `/mcp`, its caller and toolsets in the
   request's state, where the MCP handlers read them (`selection_of`, `callers.mcp_caller`), without
   the SDK app's routing and bearer-token middleware (the caller is known already). With
   `CAIRN_MCP_JSON_RESPONSE=auto` a POST that cannot stream anything before its result goes to the
   transport that answers with one JSON body, the others to the one that answers with SSE streams
   (`answers_in_json`).

Every refusal carries the shared error body.
"""

from __future__ import annotations

import json
from typing import Any

from app.core.auth import hash_key
from app.core.errors import CairnError
from app.core.http.callers import CALLER_STATE, Callers, resolve_caller, scope_bearer
from app.core.http.front import send_error
from app.core.ratelimit import Slots
from app.core.toolsets import MCP_PATH, Catalog, Selection, requested

TOOLSETS_STATE = "toolsets"
# Checked selections kept per (path, query): a client repeats one URL on every call. Cleared when full,
# so URLs made up by a caller cannot grow it.
SELECTIONS_KEPT = 256


def is_mcp_path(path: str) -> bool:
    """`/mcp` or a path under it."""
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


class McpEndpoint:
    """The ASGI app described in the module docstring, mounted at `/`: `/mcp` paths as described, to
    `transport` (the SDK's streamable HTTP transport; `sdk_app` when none is given) or `json_transport`;
    any other path no route took to the SDK's app (its 404, its resource metadata), behind the same
    caller check as `/mcp` on an open server. `Shortcut` hands it the `/mcp` paths before the routes
    are tried."""

    def __init__(
        self,
        sdk_app: Any,
        *,
        catalog: Catalog,
        callers: Callers,
        streams: Slots,
        transport: Any = None,
        json_transport: Any = None,
    ) -> None:
        self.sdk_app = sdk_app
        self.transport = transport if transport is not None else sdk_app
        self.json_transport = json_transport
        self.catalog = catalog
        self.callers = callers
        self.streams = streams
        self._selections: dict[tuple[str, str], Selection] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.sdk_app(scope, receive, send)
            return
        token = scope_bearer(scope)
        if not is_mcp_path(scope.get("path", "")):
            await self._other(scope, receive, send, token)
            return
        client = scope.get("client")
        try:
            refused = await self.callers.refusal(token, client[0] if client else None)
        except CairnError as err:
            refused = err
        if refused is not None:
            await send_error(send, refused)
            return
        if scope["method"] != "GET":
            await self._serve(scope, receive, send, token)
            return
        key = hash_key(token)[:16] if token else "anonymous"
        try:
            await self.streams.claim(key)
        except CairnError as err:
            await send_error(send, err)
            return
        try:
            await self._serve(scope, receive, send, token)
        finally:
            await self.streams.give_back(key)

    async def _serve(self, scope: Any, receive: Any, send: Any, token: str) -> None:
        try:
            caller = await resolve_caller(self.callers, token)
            rest = scope["path"][len(MCP_PATH) :].strip("/")
            selection = self.selection(rest, scope.get("query_string", b"").decode("latin-1"))
        except CairnError as err:
            await send_error(send, err)
            return
        state = {**(scope.get("state") or {}), TOOLSETS_STATE: selection, CALLER_STATE: caller}
        scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode(), "state": state}
        if self.json_transport is not None and scope.get("method") == "POST":
            body, receive = await read_body(receive)
            if answers_in_json(body, scope.get("headers") or ()):
                await self.json_transport(scope, receive, send)
                return
        await self.transport(scope, receive, send)

    def selection(self, rest: str, query: str) -> Selection:
        """The toolsets an MCP URL chooses (`rest`: the path after `/mcp/`), checked against the catalog;
        a URL's checked selection is kept (the catalog does not change while the server runs), a refused
        one raises every time."""
        key = (rest, query)
        found = self._selections.get(key)
        if found is None:
            found = requested(rest, query)
            self.catalog.check(found)
            if len(self._selections) >= SELECTIONS_KEPT:
                self._selections.clear()
            self._selections[key] = found
        return found

    async def _other(self, scope: Any, receive: Any, send: Any, token: str) -> None:
        try:
            await self.callers.ahead_of_sdk(token)
        except CairnError as err:
            await send_error(send, err)
            return
        await self.sdk_app(scope, receive, send)


class Shortcut:
    """Middleware (innermost of the application's own) that hands `/mcp` paths to the endpoint before
    any route is tried; everything else goes on to the routes."""

    def __init__(self, app: Any, endpoint: McpEndpoint) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and is_mcp_path(scope.get("path", "")):
            await self.endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def selection_of(request: Any) -> Selection:
    """The toolsets the endpoint chose for this HTTP request (plain `/mcp` when none)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        found = (scope.get("state") or {}).get(TOOLSETS_STATE)
        if isinstance(found, Selection):
            return found
    return Selection()


async def read_body(receive: Any) -> tuple[bytes, Any]:
    """The whole request body, and a `receive` that hands it to the app again (then the rest)."""
    chunks: list[bytes] = []
    pending: Any = None
    while True:
        message = await receive()
        if message["type"] != "http.request":
            pending = message  # the client left: the app sees it at once
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Any:
        nonlocal replayed
        if pending is not None:
            return pending
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _accepts(headers: Any) -> tuple[bool, bool]:
    """(JSON, SSE) accepted by the request's Accept header, with the SDK's wildcard rules."""
    value = next((v for k, v in headers if k == b"accept"), b"").decode("latin-1")
    types = {part.split(";")[0].strip().lower() for part in value.split(",")}
    anything = "*/*" in types
    return (
        anything or "application/json" in types or "application/*" in types,
        anything or "text/event-stream" in types or "text/*" in types,
    )


def answers_in_json(body: bytes, headers: Any) -> bool:
    """True when a single JSON body carries all an SSE stream would for this POST: a JSON-RPC request
    without a progress token (progress notifications are the only messages Cairn sends before a
    result, and only to a request that asks for them), from a client that accepts both answers
    (others get the SSE path's checks)."""
    if body[:1] != b"{" or not all(_accepts(headers)):
        return False
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # the SSE path answers the JSON-RPC parse error
        return False
    if not isinstance(message, dict) or "id" not in message or not isinstance(message.get("method"), str):
        return False
    params = message.get("params")
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict) and meta.get("progressToken") is not None:
            return False
    return True
