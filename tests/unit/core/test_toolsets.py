"""app/core/toolsets.py: parsing endpoint specs and choosing the tools a request sees."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from app.core.context import CallContext, Principal
from app.core.errors import InvalidInput, NotFound
from app.core.registry import OperationSet, Registry
from app.core.schemas import Empty
from app.core.toolsets import Catalog, Selection, answers_in_json, parse, read_body


class Out(BaseModel):
    """A result."""

    ok: bool = True


async def _handler(ctx: CallContext, args: Empty) -> Out:
    """Does nothing."""
    return Out()


def _registry() -> Registry:
    core = OperationSet("core")
    core.toolset("projects", "Projects.")
    core.toolset("admin", "Admin.")
    core.operation(
        name="list_projects", title="L", input=Empty, output=Out, path="/p", read_only=True, toolsets=("projects",)
    )(_handler)
    core.operation(
        name="audit_log",
        title="A",
        input=Empty,
        output=Out,
        path="/a",
        read_only=True,
        scope="admin",
        toolsets=("admin",),
    )(_handler)
    notes = OperationSet("notes")
    notes.toolset("notes", "Notes.", includes=("list_projects",), default=True)
    notes.operation(name="search", title="S", input=Empty, output=Out, path="/n/s", read_only=True)(_handler)
    notes.operation(name="push", title="P", input=Empty, output=Out, path="/n/p")(_handler)
    graph = OperationSet("graph")
    graph.toolset("graph", "Graph.")
    graph.toolset("compat", "Compat.", exclusive_of=("graph",))
    graph.operation(name="read_graph", title="R", input=Empty, output=Out, path="/g/r", read_only=True)(_handler)
    graph.operation(
        name="compat_read_graph",
        title="R",
        input=Empty,
        output=Out,
        path="/c/r",
        read_only=True,
        tool_name="read_graph",
        toolsets=("compat",),
        rest=False,
    )(_handler)
    registry = Registry()
    for opset in (core, notes, graph):
        registry.add(opset)
    return registry


ADMIN = Principal(key_id="k1", name="admin", scopes=frozenset({"admin"}))
READER = Principal(key_id="k2", name="reader", scopes=frozenset({"read"}))


def _tools(catalog: Catalog, selection: Selection, who: Principal = ADMIN) -> list[str]:
    return [op.tool for op in catalog.tools(selection, who)]


def test_parse_accepts_commas_plus_and_the_readonly_modifier() -> None:
    assert parse("graph,notes") == Selection(("graph", "notes"), False)
    assert parse("Graph+notes+readonly") == Selection(("graph", "notes"), True)
    assert parse("graph notes") == Selection(("graph", "notes"), False)  # `+` decoded as a space
    assert parse("") == Selection(None, False)
    assert parse("readonly") == Selection(None, True)
    assert Selection(("graph",), True).path == "/mcp/graph,readonly"


def test_default_explicit_all_and_key_defaults() -> None:
    catalog = Catalog(_registry(), ["notes"])
    assert _tools(catalog, Selection()) == ["search", "push", "list_projects"]
    assert _tools(catalog, Selection(("graph", "notes"))) == ["read_graph", "search", "push", "list_projects"]
    assert _tools(catalog, Selection(("all",))) == ["list_projects", "audit_log", "search", "push", "read_graph"]
    keyed = Principal(key_id="k3", name="g", scopes=frozenset({"write"}), toolsets=("graph",))
    assert _tools(catalog, Selection(), keyed) == ["read_graph"]
    assert _tools(catalog, Selection(("notes",)), keyed) == ["search", "push", "list_projects"]
    assert Catalog(_registry(), []).default == Selection(("notes",), False)  # declared by the toolset
    # a default naming nothing enabled falls back to everything that is
    assert _tools(Catalog(_registry(), ["missing"]), Selection()) == _tools(catalog, Selection(("all",)))


def test_scope_and_readonly_filter_the_list() -> None:
    catalog = Catalog(_registry(), ["all"])
    assert "audit_log" not in _tools(catalog, Selection(), READER)
    assert "push" not in _tools(catalog, Selection(), READER)
    assert _tools(catalog, Selection(("notes",), True)) == ["search", "list_projects"]


def test_unknown_and_clashing_toolsets_are_refused() -> None:
    catalog = Catalog(_registry(), ["notes"])
    with pytest.raises(NotFound, match="Unknown toolset 'nope'"):
        catalog.check(Selection(("nope",)))
    with pytest.raises(InvalidInput, match="cannot be combined"):
        catalog.check(Selection(("compat", "graph")))
    with pytest.raises(InvalidInput, match="cannot be combined"):
        catalog.check(Selection(("compat", "all")))
    catalog.check(Selection(("compat", "notes")))
    assert _tools(catalog, Selection(("compat",))) == ["read_graph"]
    assert catalog.homes("read_graph") == ["graph", "compat"]
    assert "compat" not in [t["name"] for t in catalog.summary() if t["default"]]


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
