"""Operations and resources, each declared once and served by both transports.

A feature's `operations.py` creates an `OperationSet` and decorates its handlers:

    ops = OperationSet("notes")

    @ops.operation(name="search", input=SearchIn, output=SearchOut, path="/notes/search",
                   read_only=True)
    async def search(ctx: CallContext, args: SearchIn) -> SearchOut:
        '''Semantic search over indexed memories.'''

A family that splits its operations over several files (`operations_<part>.py`, each with an
`OperationSet` of its own) composes them at the end of `operations.py` with `ops.include(...)`.

The MCP adapter turns each `Operation` into a tool (inputSchema, outputSchema, annotations) and
the REST adapter into a route under `/api/v1`; both call `executor.run_operation`.

The errors an operation can answer (its OpenAPI responses) derive from the declaration
(`Operation.error_classes`): every call can fail validation, authentication, scope, the database or
its time limit; a body can be too large; a rate-limited call can be refused; a `{param}` in the path
names a thing that may not exist; a write can conflict; an `open_world` operation can meet a failing
upstream. What a family raises besides these it declares next to the operation with `errors=`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from app.core.errors import (
    CairnError,
    Conflict,
    Forbidden,
    InternalError,
    InvalidInput,
    NotFound,
    RateLimited,
    Timeout,
    TooLarge,
    Unauthenticated,
    Unavailable,
    UpstreamError,
)
from app.core.toolsets import Toolset

Scope = Literal["read", "write", "admin"]
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
# Called with the call's `app.core.context.CallContext` and its arguments. The context is not named
# here: the process state it carries names the registry, and the types would import each other.
Handler = Callable[[Any, Any], Awaitable[BaseModel]]
ResourceHandler = Callable[..., Awaitable[BaseModel]]
# Renders a result as the MCP text content items when a tool must match another server's text shape.
TextRenderer = Callable[[BaseModel], list[str]]

_NAME = re.compile(r"^[A-Za-z0-9_\-.]{1,64}$")
ErrorClass = type[CairnError]
# Any call: a refused key or scope, a client locked out after presenting unknown keys (4290), an
# unexpected failure, the database down or cancelling a slow statement.
_EVERY_CALL: tuple[ErrorClass, ...] = (Unauthenticated, Forbidden, RateLimited, InternalError, Unavailable, Timeout)


def _ordered(classes: list[ErrorClass]) -> tuple[ErrorClass, ...]:
    return tuple(sorted(set(classes), key=lambda cls: cls.code))


def _doc(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn)
    if not doc:
        raise ValueError(f"{fn.__qualname__} needs a docstring: it becomes the tool description")
    return doc


def first_sentence(text: str) -> str:
    """The first sentence of `text`, its line breaks joined: up to the first '.', '!' or '?' that
    ends a word and is followed by a space or the end; the whole first paragraph if none."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    match = re.search(r"(?<!e\.g)(?<!i\.e)(?<!etc)(?<!vs)[.!?](?=\s|$)", paragraph)
    return paragraph[: match.end()] if match else paragraph


@dataclass(frozen=True)
class Operation:
    """One callable operation: an MCP tool and a REST route."""

    name: str
    feature: str
    handler: Handler
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    method: Method
    path: str
    scope: Scope
    read_only: bool
    destructive: bool
    idempotent: bool
    title: str | None = None
    long_running: bool = False
    mcp: bool = True
    rest: bool = True
    toolsets: tuple[str, ...] = ()
    tool_name: str | None = None
    open_world: bool = False
    text: TextRenderer | None = None
    # Arguments shown as the OpenAPI example when the schema alone cannot make a valid one
    example: dict[str, Any] | None = None
    # A read-only operation whose reads must run on the primary (it writes as it reads): never routed to
    # a read replica (`app.core.replicas`)
    primary_only: bool = False
    # Errors this operation raises beyond those its declaration implies (see `error_classes`)
    errors: tuple[ErrorClass, ...] = ()
    # A read-only operation whose handler runs one SQL statement: no BEGIN / COMMIT around it
    # (`Database.run`'s `one_statement`; tests/unit/core/test_operations.py counts them)
    one_statement: bool = False
    # An operation whose every statement, the audit row's included, is a repository's text statement:
    # its transaction runs on the driver (`Database.run`'s `plain`; tests/unit/core/test_operations.py
    # runs each through the executor and finds no statement through SQLAlchemy)
    plain: bool = False

    @property
    def tool(self) -> str:
        """The MCP tool name (usually the operation name; compatibility toolsets reuse other servers' names)."""
        return self.tool_name or self.name

    @property
    def description(self) -> str:
        """The handler's docstring: the tool description and the OpenAPI summary/description."""
        return _doc(self.handler)

    @property
    def summary(self) -> str:
        """The description's first sentence (which may run over several lines)."""
        return first_sentence(self.description)

    def input_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments (validation mode)."""
        return self.input_model.model_json_schema(mode="validation", by_alias=True)

    def output_schema(self) -> dict[str, Any]:
        """JSON schema of the result (serialization mode)."""
        return self.output_model.model_json_schema(mode="serialization", by_alias=True)

    def path_params(self) -> list[str]:
        """Names of `{param}` segments in the REST path."""
        return re.findall(r"{(\w+)}", self.path)

    def error_classes(self) -> tuple[ErrorClass, ...]:
        """Every error this operation can answer, by code: those of any call, its arguments' (4001),
        a body's size (4130, not for GET), a missing `{param}` thing
        (4002), a conflicting write (4090), a failing upstream (5020, `open_world`), and its own
        declared `errors`."""
        found: list[ErrorClass] = [*_EVERY_CALL, InvalidInput, *self.errors]
        if self.method != "GET":
            found.append(TooLarge)
        if self.path_params():
            found.append(NotFound)
        if not self.read_only:
            found.append(Conflict)
        if self.open_world:
            found.append(UpstreamError)
        return _ordered(found)


@dataclass(frozen=True)
class ResourceDef:
    """One MCP resource (or resource template) with its REST GET twin."""

    uri: str
    name: str
    feature: str
    handler: ResourceHandler
    output_model: type[BaseModel]
    path: str
    scope: Scope = "read"
    errors: tuple[ErrorClass, ...] = ()

    @property
    def description(self) -> str:
        """The handler's docstring."""
        return _doc(self.handler)

    def error_classes(self) -> tuple[ErrorClass, ...]:
        """Every error a read of this resource can answer: those of any call, a missing `{param}`
        thing (4002, templates) and its declared `errors` (no arguments, no body)."""
        return _ordered([*_EVERY_CALL, *self.errors, *((NotFound,) if self.is_template else ())])

    @property
    def params(self) -> list[str]:
        """Template parameters, e.g. `project_id` in `mcp://{project_id}/tags`."""
        return re.findall(r"{(\w+)}", self.uri)

    @property
    def is_template(self) -> bool:
        """True for a resource template."""
        return bool(self.params)


@dataclass
class OperationSet:
    """The operations and resources of one feature.

    Operations join the toolset named after the feature unless they name their own `toolsets`."""

    feature: str
    description: str = ""  # one sentence: what the family does (the OpenAPI tag's description)
    operations: list[Operation] = field(default_factory=list)
    resources: list[ResourceDef] = field(default_factory=list)
    toolsets: list[Toolset] = field(default_factory=list)

    def toolset(
        self,
        name: str,
        description: str,
        *,
        includes: tuple[str, ...] = (),
        exclusive_of: tuple[str, ...] = (),
        output_schemas: bool = False,
        default: bool = False,
    ) -> None:
        """Declare a toolset (see `app.core.toolsets`; its name must be a plain identifier)."""
        self.toolsets.append(Toolset(name, description, includes, exclusive_of, output_schemas, default))

    def operation(
        self,
        *,
        name: str,
        input: type[BaseModel],
        output: type[BaseModel],
        path: str,
        method: Method = "POST",
        scope: Scope | None = None,
        read_only: bool = False,
        destructive: bool = False,
        idempotent: bool = False,
        title: str | None = None,
        long_running: bool = False,
        mcp: bool = True,
        rest: bool = True,
        toolsets: tuple[str, ...] | None = None,
        tool_name: str | None = None,
        open_world: bool = False,
        text: TextRenderer | None = None,
        example: dict[str, Any] | None = None,
        primary_only: bool = False,
        errors: tuple[ErrorClass, ...] = (),
        one_statement: bool = False,
        plain: bool = False,
    ) -> Callable[[Handler], Handler]:
        """Declare `handler` as an operation of this feature.

        `mcp=False` keeps it out of tools/list; `rest=False` means the REST adapter makes no route for
        it because a feature route (e.g. a multipart upload) calls the executor with it itself.
        `toolsets` (default: the feature's own) says where MCP clients find it; `tool_name` overrides
        its MCP name; `open_world` marks tools that reach systems outside Cairn; `text` renders the
        MCP text content when it must differ from the JSON of the result; `example` gives the
        OpenAPI example arguments when the schema alone cannot make valid ones (REST docs only).
        `primary_only` keeps a read-only operation that writes as it reads off the read replicas
        (a write part that can run after the read uses `CallContext.write_after_read` instead).
        `errors` names the error classes the handler raises beyond those the declaration implies
        (`Operation.error_classes`), e.g. `(NotFound,)` for an operation reading a named thing.
        `one_statement` marks a read-only operation whose handler runs exactly one SQL statement (no
        BEGIN / COMMIT); `plain` one whose every statement is text: its transaction runs on the driver."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"invalid operation name {name!r}")
        if mcp and not title:
            raise ValueError(f"operation {name} needs a title: clients show it for the tool")
        effective_scope: Scope = scope or ("read" if read_only else "write")
        if one_statement and not read_only:
            raise ValueError(f"operation {name}: only a read-only operation may run as one statement")

        def decorate(handler: Handler) -> Handler:
            self.operations.append(
                Operation(
                    name=name,
                    feature=self.feature,
                    handler=handler,
                    input_model=input,
                    output_model=output,
                    method=method,
                    path=path,
                    scope=effective_scope,
                    read_only=read_only,
                    destructive=destructive,
                    idempotent=idempotent or read_only,
                    title=title,
                    long_running=long_running,
                    mcp=mcp,
                    rest=rest,
                    toolsets=toolsets if toolsets is not None else (self.feature,),
                    tool_name=tool_name,
                    open_world=open_world,
                    text=text,
                    example=example,
                    primary_only=primary_only,
                    errors=errors,
                    one_statement=one_statement,
                    plain=plain,
                )
            )
            return handler

        return decorate

    def include(self, *others: OperationSet) -> None:
        """Add the declarations of other sets of the same feature after this one's: a family whose
        operations are split over several files composes them in its `operations.py` this way."""
        for other in others:
            if other.feature != self.feature:
                raise ValueError(f"cannot include {other.feature}'s operations in {self.feature}'s")
            self.operations += other.operations
            self.resources += other.resources
            self.toolsets += other.toolsets

    def resource(
        self,
        *,
        uri: str,
        name: str,
        output: type[BaseModel],
        path: str,
        scope: Scope = "read",
        errors: tuple[ErrorClass, ...] = (),
    ) -> Callable[[ResourceHandler], ResourceHandler]:
        """Declare `handler(ctx, **params)` as a resource (template when `uri` has `{params}`);
        `errors` as for operations."""

        def decorate(handler: ResourceHandler) -> ResourceHandler:
            self.resources.append(
                ResourceDef(
                    uri=uri,
                    name=name,
                    feature=self.feature,
                    handler=handler,
                    output_model=output,
                    path=path,
                    scope=scope,
                    errors=errors,
                )
            )
            return handler

        return decorate


@dataclass
class Registry:
    """All operations and resources of the enabled features."""

    operations: list[Operation] = field(default_factory=list)
    resources: list[ResourceDef] = field(default_factory=list)
    toolsets: dict[str, Toolset] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)  # feature -> what it does

    def add(self, opset: OperationSet) -> None:
        """Add one feature's declarations, refusing duplicate names, URIs, routes and toolsets."""
        if opset.description:
            self.descriptions[opset.feature] = opset.description
        for ts in opset.toolsets:
            if ts.name in self.toolsets:
                raise ValueError(f"duplicate toolset {ts.name}")
            self.toolsets[ts.name] = ts
        names = {op.name for op in self.operations}
        routes = {(op.method, op.path) for op in self.operations}
        for op in opset.operations:
            if op.name in names or (op.method, op.path) in routes:
                raise ValueError(f"duplicate operation {op.name} / {op.method} {op.path}")
            names.add(op.name)
            routes.add((op.method, op.path))
            self.operations.append(op)
        uris = {r.uri for r in self.resources}
        for res in opset.resources:
            if res.uri in uris:
                raise ValueError(f"duplicate resource {res.uri}")
            uris.add(res.uri)
            self.resources.append(res)

    def get(self, name: str) -> Operation | None:
        """The operation called `name`, if enabled."""
        return next((op for op in self.operations if op.name == name), None)
