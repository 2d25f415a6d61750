"""app/core/toolsets.py: declaring toolsets, parsing every toolset list, and choosing the tools a
request sees."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from app.core.context import CallContext, Principal
from app.core.errors import Forbidden, InvalidInput, NotFound
from app.core.registry import OperationSet, Registry
from app.core.schemas import Empty
from app.core.toolsets import Catalog, Selection, key_toolsets, members, parse, requested


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


def test_one_parser_reads_urls_queries_and_key_defaults() -> None:
    assert requested("graph,readonly", "") == Selection(("graph",), True)
    assert requested("", "toolsets=graph+notes&readonly=yes") == Selection(("graph", "notes"), True)
    assert requested("", "") == Selection()


@pytest.mark.parametrize(
    "rest, query",
    [
        ("graph", "readonly=1"),
        ("graph", "readonly=true"),
        ("graph", "readonly=YES"),
        ("graph", "readonly"),
        ("graph", "readonly=on"),
        ("graph", "toolsets=readonly"),
        ("graph", "toolsets=graph,readonly"),
        ("graph,readonly", "readonly=false"),  # a read-only request is never loosened
        ("", "toolsets=graph&readonly=true"),
    ],
)
def test_readonly_is_honoured_in_every_part_of_the_url(rest: str, query: str) -> None:
    assert requested(rest, query) == Selection(("graph",), True)


@pytest.mark.parametrize(
    "query, message",
    [
        ("readonly=maybe", "neither true nor false"),
        ("read_only=1", "Unknown query parameter 'read_only'"),
        ("ro=1", "Unknown query parameter"),
        ("toolsets=memory", "both in the path and in the query"),
    ],
)
def test_a_query_that_cannot_be_read_is_refused_not_ignored(query: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        requested("graph", query)
    assert requested("graph", "readonly=0") == Selection(("graph",), False)
    assert key_toolsets(None) is None and key_toolsets("") is None and key_toolsets([" ", ""]) is None
    assert key_toolsets("Graph+memory, graph") == ["graph", "memory"]
    assert key_toolsets("graph memory") == ["graph", "memory"]  # spaces separate, as in URLs
    assert key_toolsets(["graph", "all", "readonly"]) == ["graph", "all", "readonly"]
    with pytest.raises(InvalidInput, match=r"invalid toolset names \['1x', 'a-b'\]"):
        key_toolsets("1x,a-b")


def test_find_names_the_endpoint_that_lists_a_tool() -> None:
    catalog = Catalog(_registry(), ["notes"])
    assert catalog.find(Selection(), "push", ADMIN).name == "push"
    assert catalog.find(Selection(("compat",)), "read_graph", ADMIN).name == "compat_read_graph"
    with pytest.raises(Forbidden, match="read-only"):
        catalog.find(Selection(("notes",), True), "push", ADMIN)
    with pytest.raises(NotFound, match="not in the toolsets") as elsewhere:
        catalog.find(Selection(), "audit_log", ADMIN)
    assert "/mcp/admin" in elsewhere.value.suggestions[0]
    with pytest.raises(NotFound, match="Unknown tool") as unknown:
        catalog.find(Selection(), "serch", ADMIN)
    assert "search" in unknown.value.suggestions[0]


def _set(feature: str, name: str, path: str, **kw: object) -> OperationSet:
    ops = OperationSet(feature)
    kw.setdefault("title", name.title())
    ops.operation(name=name, input=Empty, output=Out, path=path, **kw)(_handler)  # type: ignore[arg-type]
    return ops


def test_toolsets_collect_members_includes_and_refuse_clashes() -> None:
    core = _set("core", "list_projects", "/projects", read_only=True)
    core.toolset("core", "Core tools.")
    notes = _set("notes", "search", "/notes/search", read_only=True)
    notes.toolset("notes", "Notes.", includes=("list_projects", "not_enabled"))
    compat = _set("compat", "compat_search", "/compat/search", tool_name="search", toolsets=("compat",))
    compat.toolset("compat", "Another server's names.", exclusive_of=("notes",), output_schemas=True)
    registry = Registry()
    for opset in (core, notes, compat):
        registry.add(opset)
    found = {name: [op.tool for op in ops] for name, ops in members(registry).items()}
    assert found == {"core": ["list_projects"], "notes": ["search", "list_projects"], "compat": ["search"]}
    assert registry.get("compat_search") is not None and registry.get("compat_search").tool == "search"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="duplicate toolset notes"):
        again = OperationSet("other")
        again.toolset("notes", "Again.")
        registry.add(again)
    stray = Registry()
    stray.add(_set("x", "lost", "/x/lost", toolsets=("nowhere",)))
    with pytest.raises(ValueError, match="undeclared toolset"):
        members(stray)
    twice = Registry()
    one = _set("y", "a", "/y/a", tool_name="same", toolsets=("y",))
    one.toolset("y", "Y.")
    twice.add(one)
    twice.add(_set("z", "b", "/z/b", tool_name="same", toolsets=("y",)))
    with pytest.raises(ValueError, match="lists a tool name twice"):
        members(twice)
    with pytest.raises(ValueError, match="invalid toolset name"):
        OperationSet("w").toolset("all", "Reserved.")


def test_the_hints_name_the_url_over_http_and_the_stdio_option_over_stdio() -> None:
    catalog = Catalog(_registry(), ["notes"])
    hints = {}
    for stdio in (False, True):
        with pytest.raises(NotFound) as elsewhere:
            catalog.find(Selection(), "audit_log", ADMIN, stdio=stdio)
        with pytest.raises(Forbidden) as readonly:
            catalog.find(Selection(("notes",), True), "push", ADMIN, stdio=stdio)
        with pytest.raises(NotFound) as unknown:
            catalog.check(Selection(("nope",)), stdio=stdio)
        with pytest.raises(InvalidInput) as clash:
            catalog.check(Selection(("compat", "graph")), stdio=stdio)
        hints[stdio] = [e.value.suggestions[0] for e in (elsewhere, readonly, unknown, clash)]
    assert hints[False][:2] == ["It is in admin: connect to /mcp/admin", "Connect to /mcp/notes to use it"]
    assert hints[False][2].endswith("(e.g. /mcp/notes or /mcp/notes,projects)")
    assert hints[False][3] == "Connect to /mcp/compat and /mcp/graph as two servers"
    assert hints[True][:2] == [
        "It is in admin: start `cairn stdio --toolsets admin`",
        "Start `cairn stdio --toolsets notes` to use it",
    ]
    assert hints[True][2].endswith("(e.g. --toolsets notes or --toolsets notes,projects)")
    assert hints[True][3] == "Start `cairn stdio --toolsets compat` and `cairn stdio --toolsets graph` as two servers"
    assert not any("/mcp" in hint for hint in hints[True])
    assert Selection(("graph",), True).spec == "graph,readonly" and Selection().reach(True) == "start `cairn stdio`"
