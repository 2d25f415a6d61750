"""Operations and resources, each declared once and served by both transports.

A feature's `operations.py` creates an `OperationSet` and decorates its handlers:

    ops = OperationSet("notes")

    @ops.operation(name="search", input=SearchIn, output=SearchOut, path="/notes/search",
                   read_only=True)
    async def search(ctx: CallContext, args: SearchIn) -> SearchOut:
        '''Semantic search over indexed memories.'''

The MCP adapter turns each `Operation` into a tool (inputSchema, outputSchema, annotations) and
the REST adapter into a route under `/api/v1`; both call `executor.run_operation`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from app.core.context import CallContext

Scope = Literal["read", "write", "admin"]
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
Handler = Callable[["CallContext", Any], Awaitable[BaseModel]]
ResourceHandler = Callable[..., Awaitable[BaseModel]]

_NAME = re.compile(r"^[A-Za-z0-9_\-.]{1,64}$")


def _doc(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn)
    if not doc:
        raise ValueError(f"{fn.__qualname__} needs a docstring: it becomes the tool description")
    return doc


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

    @property
    def description(self) -> str:
        """The handler's docstring: the tool description and the OpenAPI summary/description."""
        return _doc(self.handler)

    @property
    def summary(self) -> str:
        """First line of the description."""
        return self.description.splitlines()[0]

    def input_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments (validation mode)."""
        return self.input_model.model_json_schema(mode="validation", by_alias=True)

    def output_schema(self) -> dict[str, Any]:
        """JSON schema of the result (serialization mode)."""
        return self.output_model.model_json_schema(mode="serialization", by_alias=True)

    def path_params(self) -> list[str]:
        """Names of `{param}` segments in the REST path."""
        return re.findall(r"{(\w+)}", self.path)


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

    @property
    def description(self) -> str:
        """The handler's docstring."""
        return _doc(self.handler)

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
    """The operations and resources of one feature."""

    feature: str
    operations: list[Operation] = field(default_factory=list)
    resources: list[ResourceDef] = field(default_factory=list)

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
    ) -> Callable[[Handler], Handler]:
        """Declare `handler` as an operation of this feature.

        `mcp=False` keeps it out of tools/list; `rest=False` means the REST adapter makes no route for
        it because a feature route (e.g. a multipart upload) calls the executor with it itself."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"invalid operation name {name!r}")
        effective_scope: Scope = scope or ("read" if read_only else "write")

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
                )
            )
            return handler

        return decorate

    def resource(
        self, *, uri: str, name: str, output: type[BaseModel], path: str, scope: Scope = "read"
    ) -> Callable[[ResourceHandler], ResourceHandler]:
        """Declare `handler(ctx, **params)` as a resource (template when `uri` has `{params}`)."""

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
                )
            )
            return handler

        return decorate


@dataclass
class Registry:
    """All operations and resources of the enabled features."""

    operations: list[Operation] = field(default_factory=list)
    resources: list[ResourceDef] = field(default_factory=list)

    def add(self, opset: OperationSet) -> None:
        """Add one feature's declarations, refusing duplicate names, URIs and routes."""
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
