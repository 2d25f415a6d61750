"""Toolsets: which tools an MCP client sees, chosen per request (the transport keeps no session).

A client picks its toolsets by URL, so one server serves every kind of agent without restarting and
without session state:

- `/mcp/graph`, `/mcp/memory,datasets` (`+` works too), `/mcp/all`;
- `/mcp?toolsets=graph,datasets` on the plain endpoint;
- `readonly` anywhere in the list (`/mcp/graph,readonly`) keeps only read-only tools and refuses
  the others when called;
- plain `/mcp`: the key's own default toolsets (`cairn keys create --toolsets …`), else the server's
  `CAIRN_MCP_TOOLSETS`, else the toolsets the features declare as default.

Tools the caller's key may not call (scope) are not listed. A tool outside the chosen toolsets is
refused with 4002 and the endpoint that lists it. REST serves every operation whatever the toolset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from app.core.context import Principal
from app.core.errors import CairnError, InvalidInput, NotFound
from app.core.registry import Operation, Registry

MCP_PATH = "/mcp"
ALL = "all"
READONLY = "readonly"
SCOPE_KEY = "cairn.toolsets"
_SPLIT = re.compile(r"[,+\s]+")


@dataclass(frozen=True)
class Selection:
    """What the request asked for: toolset names (None: the default) and the read-only modifier."""

    names: tuple[str, ...] | None = None
    readonly: bool = False

    @property
    def path(self) -> str:
        """The endpoint path that makes this selection."""
        parts = [*(self.names or ()), *([READONLY] if self.readonly else [])]
        return MCP_PATH + ("/" + ",".join(parts) if parts else "")


def parse(spec: str) -> Selection:
    """Parse `graph,memory+readonly` (URL path segment or `toolsets` query value)."""
    words = [w for w in _SPLIT.split(spec.strip().lower()) if w]
    readonly = READONLY in words
    names = tuple(dict.fromkeys(w for w in words if w != READONLY))
    return Selection(names or None, readonly)


class Catalog:
    """The registry's toolsets and the rules for choosing among them."""

    def __init__(self, registry: Registry, default: Sequence[str]) -> None:
        self.registry = registry
        self.members = registry.toolset_members()
        self.toolsets = {name: ts for name, ts in registry.toolsets.items() if self.members[name]}
        self.default = self._default(default)

    def _default(self, names: Sequence[str]) -> Selection:
        if not names:
            names = [name for name, ts in self.toolsets.items() if ts.default]
        selection = parse(",".join(names))
        chosen = [n for n in self._expand(selection.names or ()) if n in self.toolsets]
        if not chosen:  # e.g. CAIRN_FEATURES=graph with the default `memory`: show what is enabled
            chosen = self._expand((ALL,))
        return Selection(tuple(chosen), selection.readonly)

    def _expand(self, names: Sequence[str]) -> list[str]:
        if ALL not in names:
            return list(names)
        everything = [n for n, ts in self.toolsets.items() if not ts.exclusive_of]
        return everything + [n for n in names if n != ALL and n not in everything]

    def check(self, selection: Selection) -> None:
        """Refuse unknown names and combinations that would list two tools under one name."""
        if selection.names is None:
            return
        unknown = [n for n in selection.names if n != ALL and n not in self.toolsets]
        if unknown:
            raise NotFound(
                f"Unknown toolset {unknown[0][:40]!r}",
                suggestions=[
                    f"Toolsets: {', '.join(self.toolsets)}, {ALL} (e.g. {MCP_PATH}/graph or {MCP_PATH}/memory,graph)"
                ],
            )
        names = self._expand(selection.names)
        for name in names:
            clash = [other for other in self.toolsets[name].exclusive_of if other in names]
            if clash:
                raise InvalidInput(
                    f"Toolset {name!r} cannot be combined with {clash[0]!r}: they use the same tool names",
                    suggestions=[f"Connect to {MCP_PATH}/{name} and {MCP_PATH}/{clash[0]} as two servers"],
                )

    def effective(self, selection: Selection, principal: Principal) -> Selection:
        """The selection a request gets: explicit names, else the key's default, else the server's."""
        if selection.names is not None:
            return Selection(tuple(self._expand(selection.names)), selection.readonly)
        if principal.toolsets:
            mine = [n for n in self._expand(principal.toolsets) if n in self.toolsets]
            if mine:
                return Selection(tuple(mine), selection.readonly)
        return Selection(self.default.names, selection.readonly or self.default.readonly)

    def tools(self, selection: Selection, principal: Principal) -> list[Operation]:
        """The tools listed for this selection and caller, each once, in toolset order."""
        chosen = self.effective(selection, principal)
        seen: dict[str, Operation] = {}
        for name in chosen.names or ():
            for op in self.members.get(name, []):
                if op.tool in seen or not principal.has_scope(op.scope):
                    continue
                if chosen.readonly and not op.read_only:
                    continue
                seen[op.tool] = op
        return list(seen.values())

    def homes(self, tool: str) -> list[str]:
        """The toolsets that list a tool of this name."""
        return [name for name, ops in self.members.items() if any(op.tool == tool for op in ops)]

    def summary(self) -> list[dict[str, Any]]:
        """Each toolset with its description, tools and endpoint (the `mcp://toolsets` resource)."""
        return [
            {
                "name": name,
                "endpoint": f"{MCP_PATH}/{name}",
                "description": ts.description,
                "tools": [op.tool for op in self.members[name]],
                "default": name in (self.default.names or ()),
            }
            for name, ts in self.toolsets.items()
        ]


class ToolsetRouter:
    """ASGI middleware: maps `/mcp/<toolsets>` and `/mcp?toolsets=` onto the one MCP endpoint.

    The chosen `Selection` travels in the ASGI scope, where the MCP handlers find it through the
    request the SDK attaches to every message. Unknown toolsets answer 404 with the error body.

    With `json_app` (the same MCP server answering with single JSON bodies), a POST that cannot
    stream anything before its result is sent there, and only the others to `app` (SSE streams): see
    `answers_in_json`. Both answers carry the same JSON-RPC message; the JSON one costs less."""

    def __init__(self, app: Any, catalog: Catalog, send_error: Any, json_app: Any = None) -> None:
        self.app = app
        self.catalog = catalog
        self.send_error = send_error
        self.json_app = json_app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            await self.app(scope, receive, send)
            return
        rest = path[len(MCP_PATH) :].strip("/")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        spec = rest or ",".join(query.get("toolsets", []))
        selection = parse(spec)
        if not rest and query.get(READONLY, [""])[0].lower() in ("1", "true", "yes"):
            selection = Selection(selection.names, True)
        try:
            self.catalog.check(selection)
        except CairnError as err:
            await self.send_error(send, err)
            return
        scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode(), SCOPE_KEY: selection}
        if self.json_app is not None and scope.get("method") == "POST":
            body, receive = await read_body(receive)
            if answers_in_json(body, scope.get("headers") or ()):
                await self.json_app(scope, receive, send)
                return
        await self.app(scope, receive, send)


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


def selection_of(request: Any) -> Selection:
    """The selection the router stored for this HTTP request (plain `/mcp` when none)."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        found = scope.get(SCOPE_KEY)
        if isinstance(found, Selection):
            return found
    return Selection()
