"""Toolsets, from declaration to the tools one request sees (the transport keeps no session).

A feature declares its toolsets (`OperationSet.toolset`, which makes a `Toolset` here) and its
operations name the ones they join. A client picks its toolsets by URL, so one server serves every
kind of agent without restarting and without session state:

- `/mcp/graph`, `/mcp/memory,datasets` (`+` works too), `/mcp/all`;
- `/mcp?toolsets=graph,datasets` on the plain endpoint;
- `readonly` anywhere (`/mcp/graph,readonly`, `/mcp/graph?readonly=true`, `/mcp?toolsets=readonly`)
  keeps only read-only tools and refuses the others when called; a query the endpoint cannot read
  (an unknown parameter, `readonly=maybe`, toolsets both in the path and the query) is refused (4001)
  rather than served without the read-only restriction it may have asked for;
- plain `/mcp`: the key's own default toolsets (`cairn keys create --toolsets …`), else the server's
  `CAIRN_MCP_TOOLSETS`, else the toolsets the features declare as default.

Tools the caller's key may not call (scope) are not listed. A tool outside the chosen toolsets is
refused with 4002 and the endpoint that lists it. REST serves every operation whatever the toolset.

One parser reads every toolset list (URL, query, a key's defaults, `cairn stdio --toolsets`): names
separated by commas, `+` or spaces.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs

from app.core.errors import Forbidden, InvalidInput, NotFound

MCP_PATH = "/mcp"
ALL = "all"
READONLY = "readonly"
_SPLIT = re.compile(r"[,+\s]+")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


@dataclass(frozen=True)
class Toolset:
    """A named group of tools an MCP client can choose to see (`/mcp/<toolset>`).

    `includes` names tools declared elsewhere that belong here too (e.g. project tools in a dialect
    that needs them); a toolset `exclusive_of` others reuses their tool names and cannot be combined
    with them; `output_schemas` advertises its tools' output schemas even when the server does not
    do so for every tool; `default` toolsets are what plain `/mcp` lists unless configured."""

    name: str
    description: str
    includes: tuple[str, ...] = ()
    exclusive_of: tuple[str, ...] = ()
    output_schemas: bool = False
    default: bool = False

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name) or self.name in (ALL, READONLY):
            raise ValueError(f"invalid toolset name {self.name!r}")


class Member(Protocol):
    """What a toolset lists: an operation, as far as toolsets are concerned."""

    @property
    def name(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def mcp(self) -> bool: ...
    @property
    def toolsets(self) -> tuple[str, ...]: ...
    @property
    def scope(self) -> str: ...
    @property
    def read_only(self) -> bool: ...


class Caller(Protocol):
    """Who asks, as far as toolsets are concerned: the key's scopes and its default toolsets."""

    @property
    def toolsets(self) -> tuple[str, ...] | None: ...
    def has_scope(self, scope: str) -> bool: ...


OpT = TypeVar("OpT", bound=Member)
OpT_co = TypeVar("OpT_co", bound=Member, covariant=True)


class Declarations(Protocol[OpT_co]):
    """The declared toolsets and operations (the registry)."""

    @property
    def toolsets(self) -> Mapping[str, Toolset]: ...
    @property
    def operations(self) -> Sequence[OpT_co]: ...


def words(raw: str | Sequence[str]) -> list[str]:
    """The names in a toolset list (`graph,memory`, `graph+memory`, `graph memory`, or a list of such),
    lowercased, each once, in order."""
    text = raw if isinstance(raw, str) else ",".join(raw)
    return list(dict.fromkeys(w for w in _SPLIT.split(text.strip().lower()) if w))


def key_toolsets(raw: str | Sequence[str] | None) -> list[str] | None:
    """Validate a key's default toolsets (`all` and `readonly` included); None when none are given.

    Only the form is checked: names the running server does not know are ignored when it serves.

    Raises:
        InvalidInput: a name is not a plain lowercase identifier.
    """
    if raw is None:
        return None
    names = words(raw)
    bad = [n for n in names if not _NAME.fullmatch(n)]
    if bad:
        raise InvalidInput(f"invalid toolset names {bad}")
    return names or None


@dataclass(frozen=True)
class Selection:
    """What the request asked for: toolset names (None: the default) and the read-only modifier."""

    names: tuple[str, ...] | None = None
    readonly: bool = False

    @property
    def spec(self) -> str:
        """The selection as written after `/mcp/` and after `cairn stdio --toolsets` ("" for the default)."""
        return ",".join([*(self.names or ()), *([READONLY] if self.readonly else [])])

    @property
    def path(self) -> str:
        """The endpoint path that makes this selection."""
        return MCP_PATH + ("/" + self.spec if self.spec else "")

    def reach(self, stdio: bool) -> str:
        """How a client gets this selection, for a hint: the endpoint over HTTP; over stdio, where a
        session's toolsets are fixed when it starts, the `cairn stdio` option."""
        if stdio:
            return f"start `cairn stdio --toolsets {self.spec}`" if self.spec else "start `cairn stdio`"
        return f"connect to {self.path}"


def parse(spec: str) -> Selection:
    """Parse `graph,memory+readonly` (URL path segment, `toolsets` query value, `--toolsets`)."""
    found = words(spec)
    names = tuple(w for w in found if w != READONLY)
    return Selection(names or None, READONLY in found)


_TRUE = ("", "1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
QUERY_PARAMS = ("toolsets", READONLY)


def requested(rest: str, query_string: str) -> Selection:
    """The selection an MCP URL makes: `rest` is the path after `/mcp/`, else the `toolsets` query
    value; `readonly` anywhere (in the path, in `toolsets=`, or `readonly=1|true|yes|on` or a bare
    `readonly`) makes it read-only, whatever the other parts say.

    A readonly request is never dropped silently: an unknown query parameter, a `readonly` value that
    is neither true nor false, or toolsets named both in the path and in the query are refused.

    Raises:
        InvalidInput: one of those (4001, 400).
    """
    query = parse_qs(query_string, keep_blank_values=True)
    unknown = [name for name in query if name not in QUERY_PARAMS]
    if unknown:
        raise InvalidInput(
            f"Unknown query parameter {unknown[0][:40]!r} on the MCP endpoint",
            suggestions=[
                "Accepted: toolsets=a,b and readonly=true (e.g. /mcp/graph?readonly=true or /mcp/graph,readonly)"
            ],
        )
    in_query = parse(",".join(query.get("toolsets", [])))
    selection = parse(rest) if rest else in_query
    if rest and in_query.names and set(in_query.names) != set(selection.names or ()):
        raise InvalidInput(
            "Toolsets are named both in the path and in the query",
            suggestions=[f"Name them once, e.g. {Selection(selection.names, True).path}"],
        )
    flags = [value.strip().lower() for value in query.get(READONLY, [])]
    bad = [value for value in flags if value not in _TRUE + _FALSE]
    if bad:
        raise InvalidInput(
            f"readonly={bad[0][:20]!r} is neither true nor false",
            suggestions=["Use readonly=true, or /mcp/<toolsets>,readonly"],
        )
    readonly = selection.readonly or in_query.readonly or any(value in _TRUE for value in flags)
    return Selection(selection.names, readonly)


def members(declared: Declarations[OpT]) -> dict[str, list[OpT]]:
    """The MCP tools of each declared toolset, in declaration order.

    Raises:
        ValueError: an operation names an undeclared toolset, or one toolset would list two tools
            under the same name. (An included tool that is not enabled is left out: the including
            feature may be enabled without the one that declares it.)"""
    found: dict[str, list[OpT]] = {name: [] for name in declared.toolsets}
    by_name = {op.name: op for op in declared.operations}
    for op in declared.operations:
        if not op.mcp:
            continue
        for name in op.toolsets:
            if name not in found:
                raise ValueError(f"operation {op.name} names undeclared toolset {name!r}")
            found[name].append(op)
    for ts in declared.toolsets.values():
        for included in ts.includes:
            extra = by_name.get(included)
            if extra is not None and extra not in found[ts.name]:
                found[ts.name].append(extra)
    for name, ops in found.items():
        tools = [op.tool for op in ops]
        if len(tools) != len(set(tools)):
            raise ValueError(f"toolset {name} lists a tool name twice")
    return found


class Catalog:
    """The declared toolsets and the rules for choosing among them, per request."""

    def __init__(self, declared: Declarations[Member], default: Sequence[str]) -> None:
        self.members = members(declared)
        self.toolsets = {name: ts for name, ts in declared.toolsets.items() if self.members[name]}
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

    def check(self, selection: Selection, stdio: bool = False) -> None:
        """Refuse unknown names and combinations that would list two tools under one name (the hints
        name endpoints, or `cairn stdio` options when `stdio`)."""
        if selection.names is None:
            return
        unknown = [n for n in selection.names if n != ALL and n not in self.toolsets]
        if unknown:
            first = (self.default.names or tuple(self.toolsets))[0]
            others = [n for n, ts in self.toolsets.items() if n != first and not ts.exclusive_of]
            examples = [Selection((first,)), Selection((first, *others[:1]))]
            shown = " or ".join(f"--toolsets {e.spec}" if stdio else e.path for e in examples)
            raise NotFound(
                f"Unknown toolset {unknown[0][:40]!r}",
                suggestions=[f"Toolsets: {', '.join(self.toolsets)}, {ALL} (e.g. {shown})"],
            )
        names = self._expand(selection.names)
        for name in names:
            clash = [other for other in self.toolsets[name].exclusive_of if other in names]
            if clash:
                pair = [Selection((name,)), Selection((clash[0],))]
                how = [f"`cairn stdio --toolsets {p.spec}`" if stdio else p.path for p in pair]
                raise InvalidInput(
                    f"Toolset {name!r} cannot be combined with {clash[0]!r}: they use the same tool names",
                    suggestions=[f"{'Start' if stdio else 'Connect to'} {how[0]} and {how[1]} as two servers"],
                )

    def effective(self, selection: Selection, caller: Caller) -> Selection:
        """The selection a request gets: explicit names, else the key's default, else the server's."""
        if selection.names is not None:
            return Selection(tuple(self._expand(selection.names)), selection.readonly)
        if caller.toolsets:
            mine = [n for n in self._expand(caller.toolsets) if n in self.toolsets]
            if mine:
                return Selection(tuple(mine), selection.readonly)
        return Selection(self.default.names, selection.readonly or self.default.readonly)

    def tools(self, selection: Selection, caller: Caller) -> list[Member]:
        """The tools listed for this selection and caller, each once, in toolset order."""
        chosen = self.effective(selection, caller)
        seen: dict[str, Member] = {}
        for name in chosen.names or ():
            for op in self.members.get(name, []):
                if op.tool in seen or not caller.has_scope(op.scope):
                    continue
                if chosen.readonly and not op.read_only:
                    continue
                seen[op.tool] = op
        return list(seen.values())

    def find(self, selection: Selection, tool: str, caller: Caller, stdio: bool = False) -> Member:
        """The operation a tool name means on this endpoint (scope is left to the executor). The hints
        of a refusal name the endpoint to connect to, or over `stdio` the `cairn stdio` option.

        Raises:
            Forbidden: the tool changes data and the endpoint is read-only.
            NotFound: no chosen toolset lists the tool (the error names those that do, or close names).
        """
        chosen = self.effective(selection, caller)
        for toolset in chosen.names or ():
            for op in self.members.get(toolset, []):
                if op.tool != tool:
                    continue
                if chosen.readonly and not op.read_only:
                    how = Selection(chosen.names).reach(stdio)
                    raise Forbidden(
                        f"{tool} changes data and this endpoint is read-only",
                        suggestions=[f"{how[0].upper()}{how[1:]} to use it"],
                    )
                return op
        homes = self.homes(tool)
        if homes:
            raise NotFound(
                f"{tool[:100]} is not in the toolsets of this endpoint",
                suggestions=[f"It is in {', '.join(homes)}: {Selection((homes[0],)).reach(stdio)}"],
            )
        served = sorted({op.tool for ops in self.members.values() for op in ops})
        close = difflib.get_close_matches(tool, served, n=3)
        raise NotFound(
            f"Unknown tool: {tool[:100]}",
            suggestions=[f"Did you mean {', '.join(close)}?"] if close else ["See tools/list"],
        )

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
