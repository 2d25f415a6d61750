"""Builds the MCP server (official SDK, `MCPServer`) from the registry.

Each `Operation` becomes an `OperationTool`: its inputSchema and outputSchema are the JSON schemas of
the operation's Pydantic models, and calling it runs `executor.run_operation`, so validation, scope
checks, transactions and errors are exactly those of the REST twin. Errors come back as `isError`
results whose text is the shared error body.
"""

from __future__ import annotations

import inspect
from typing import Any

from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources import Resource
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolResult,
    ImageContent,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp_types import Tool as MCPTool
from pydantic import AnyHttpUrl, Field

from app import __version__
from app.core.auth import request_id
from app.core.budget import dumps, image_fields, sent_text
from app.core.context import AppState, Principal, read_only_endpoint
from app.core.errors import CairnError
from app.core.executor import read_resource, run_operation
from app.core.http.callers import CairnTokenVerifier, Callers, mcp_caller
from app.core.http.mcp_endpoint import selection_of
from app.core.jsonschema import lean
from app.core.logs import request_id_var
from app.core.registry import Operation, ResourceDef
from app.core.toolsets import Catalog, Selection

INSTRUCTIONS = """\
Cairn keeps large data and long-term memory out of your context window. Raw rows, documents and
history stay in the server; you get compact, bounded, cited answers.
How to use it economically:
- Store first, then retrieve: push/capture text, ingest datasets, then ask narrow questions.
- Prefer filters (project, type, tags, time range, category) and small limits over broad queries.
- Read summaries, counts, profiles and samples instead of raw rows; every listing is paginated and
  capped, and results cite ids you can open one at a time.
- Long operations report progress; errors carry a code, a message and suggestions.
Resources mcp://health and mcp://settings show the embedding model and the effective defaults.
This endpoint lists some toolsets; mcp://toolsets names the others and their endpoints (/mcp/<name>)."""


def error_result(err: CairnError) -> CallToolResult:
    """An error as MCP sees it: an `isError` result whose text is the shared error body."""
    return CallToolResult(content=[TextContent(type="text", text=dumps(err.body()))], is_error=True)


def lean_input_schema(op: Operation) -> dict[str, Any]:
    """The inputSchema clients see: the lean form of the operation's argument schema, without the
    model's own docstring (the tool description says it)."""
    schema = lean(op.input_schema())
    schema.pop("description", None)
    return schema


def listed_tool(op: Operation, output_schema: bool) -> MCPTool:
    """The tools/list entry of one operation."""
    return MCPTool(
        name=op.tool,
        title=op.title,
        description=op.description,
        input_schema=lean_input_schema(op),
        output_schema=lean(op.output_schema()) if output_schema else None,
        annotations=ToolAnnotations(
            read_only_hint=op.read_only,
            destructive_hint=op.destructive,
            idempotent_hint=op.idempotent,
            open_world_hint=op.open_world,
        ),
    )


async def run_tool(
    state: AppState,
    op: Operation,
    arguments: dict[str, Any],
    context: Any,
    principal: Principal,
    transport: str = "mcp",
) -> CallToolResult:
    """Run the operation for `principal` through the executor (`transport`: `mcp`, or `stdio` for a
    `cairn stdio` session); errors become `isError` results carrying the error body.

    The result goes out twice, as MCP asks: as text (the JSON the budget measured, or the operation's
    own text shape) and as structured content."""

    async def progress(done: float, total: float | None, message: str | None) -> None:
        await context.report_progress(done, total, message)

    try:
        result = await run_operation(
            state,
            op,
            arguments,
            principal,
            transport=transport,
            request_id=request_id_var.get() or request_id(),
            progress=progress,
        )
    except CairnError as err:
        return error_result(err)
    data = result.model_dump(mode="json", by_alias=True)
    text, images = sent_text(data, image_fields(type(result)))
    texts = op.text(result) if op.text is not None else [dumps(text)]
    content: list[Any] = [
        *(TextContent(type="text", text=t) for t in texts),
        *(ImageContent(type="image", data=b64, mime_type=mime) for b64, mime in images),
    ]
    return CallToolResult(content=content, structured_content=data)


def request_of(context: Any) -> Any:
    """The HTTP request an SDK `Context` carries (None over stdio or outside a request)."""
    try:
        return context.request_context.request
    except (AttributeError, ValueError):  # no context, or the SDK's "not available outside of a request"
        return None


class OperationResource(Resource):
    """A static MCP resource backed by a registry `ResourceDef` (read by `CairnMCPServer.read_resource`,
    which knows the request; `read` serves a caller without one)."""

    definition: Any = Field(exclude=True)
    server: Any = Field(exclude=True)

    async def read(self) -> str:
        """Read the resource as compact JSON."""
        server: CairnMCPServer = self.server
        return await server.read(self.definition, {}, None)


class CairnMCPServer(MCPServer[Any]):
    """`MCPServer` whose tool list depends on the request: the toolsets chosen by the URL (see
    `app.core.toolsets`), the caller's key and its scopes. Unknown tools and tools outside the
    chosen toolsets answer with the shared error body (4002, naming the endpoint that lists them).

    The SDK (2.3) routes `tools/list` to `_handle_list_tools`, whose public counterpart `list_tools`
    is not handed the request, and offers no context to a static resource: those two are overridden
    here, everything else goes through public methods."""

    def __init__(self, state: AppState, callers: Callers, catalog: Catalog, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.callers = callers
        self.catalog = catalog
        # A stdio session has no URL: its toolsets are fixed when it starts (`cairn stdio --toolsets`).
        self.fixed: Selection | None = None
        everywhere = state.settings.mcp_output_schemas
        toolsets = state.registry.toolsets
        self.listing = {
            op.name: listed_tool(op, everywhere or any(toolsets[t].output_schemas for t in op.toolsets))
            for op in state.registry.operations
            if op.mcp
        }
        self.operations = {op.name: op for op in state.registry.operations}
        self.static = {str(res.uri): res for res in state.registry.resources if not res.is_template}

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        principal = await mcp_caller(self.callers, ctx.request)
        ops = self.catalog.tools(self.selection(ctx.request), principal)
        return ListToolsResult(tools=[self.listing[op.name] for op in ops])

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Call a tool of the chosen toolsets through the executor."""
        request = request_of(context)
        try:
            principal = await mcp_caller(self.callers, request)
            selection = self.selection(request)
            found = self.catalog.find(selection, name, principal, stdio=self.transport == "stdio")
        except CairnError as err:
            return error_result(err)
        read_only = read_only_endpoint.set(self.catalog.effective(selection, principal).readonly)
        try:
            op = self.operations[found.name]
            return await run_tool(self.state, op, arguments, context, principal, self.transport)
        finally:
            read_only_endpoint.reset(read_only)

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        """Read a resource: Cairn's static ones as the request's caller, the others (templates, which
        are handed the context) as the SDK does."""
        res = self.static.get(str(uri))
        if res is None:
            return await super().read_resource(uri, context)
        text = await self.read(res, {}, request_of(context))
        return [ReadResourceContents(content=text, mime_type="application/json")]

    async def read(self, res: ResourceDef, params: dict[str, str], request: Any) -> str:
        """A resource as compact JSON, read through the executor as the caller of `request`.

        Raises:
            MCPError: JSON-RPC -32602 for an error of the caller's (4xx: forbidden, not found, invalid),
                -32603 for the server's, with Cairn's message and the shared error body and the URI
                as its data (the SDK turns a `ResourceError` into -32603 whatever its cause).
        """
        try:
            principal = await mcp_caller(self.callers, request)
            result = await read_resource(
                self.state,
                res,
                params,
                principal,
                transport=self.transport,
                request_id=request_id_var.get() or request_id(),
            )
        except CairnError as err:
            code = INVALID_PARAMS if err.status < 500 else INTERNAL_ERROR
            raise MCPError(code, err.message, data={**err.body(), "uri": res.uri.format(**params)}) from None
        return dumps(result.model_dump(mode="json", by_alias=True))

    def template(self, res: ResourceDef) -> Any:
        """The function the SDK calls for a resource template: its URI parameters and the context."""

        async def read_template(context: Context[Any, Any], **params: str) -> str:
            return await self.read(res, params, request_of(context))

        read_template.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter("context", inspect.Parameter.KEYWORD_ONLY, annotation=Context),
                *(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=str) for p in res.params),
            ],
            return_annotation=str,
        )
        read_template.__annotations__ = {"context": Context, **{p: str for p in res.params}, "return": str}
        read_template.__name__ = res.name.replace("-", "_")
        read_template.__doc__ = res.description
        return read_template

    async def serve(self, read_stream: Any, write_stream: Any) -> None:
        """Serve one session on these streams (`run_stdio_async` without the streams it makes: `cairn
        stdio` wraps the read side, `app.core.stdio.Answering`)."""
        server = self._lowlevel_server
        await server.run(read_stream, write_stream, server.create_initialization_options())

    @property
    def transport(self) -> str:
        """What the executor, the audit and the hints call this session's transport: `stdio` for a
        `cairn stdio` session (its toolsets are fixed), else `mcp`."""
        return "stdio" if self.fixed is not None else "mcp"

    def selection(self, request: Any) -> Selection:
        """The toolsets of this request: the URL's over HTTP, the fixed ones over stdio."""
        return self.fixed if self.fixed is not None else selection_of(request)


def build_mcp(state: AppState, callers: Callers, catalog: Catalog) -> CairnMCPServer:
    """The MCP server with one tool per operation and one resource per resource definition; on a
    server with keys the SDK checks the bearer key (`CairnTokenVerifier`)."""
    settings = state.settings
    auth = None
    verifier = None
    if callers.store is not None:
        resource_url = settings.resource_url()
        auth = AuthSettings(
            issuer_url=AnyHttpUrl(settings.public_url or f"http://{settings.host}:{settings.port}"),
            resource_server_url=AnyHttpUrl(resource_url),
            required_scopes=["read"],
            validate_token_resource=False,
        )
        verifier = CairnTokenVerifier(callers)
    server = CairnMCPServer(
        state,
        callers,
        catalog,
        name="cairn",
        title="Cairn",
        version=__version__,
        instructions=INSTRUCTIONS,
        auth=auth,
        token_verifier=verifier,
        log_level=settings.log_level.upper(),
    )
    for res in state.registry.resources:
        if res.is_template:
            server.resource(res.uri, name=res.name, description=res.description, mime_type="application/json")(
                server.template(res)
            )
        else:
            server.add_resource(
                OperationResource(
                    uri=res.uri,
                    name=res.name,
                    description=res.description,
                    mime_type="application/json",
                    definition=res,
                    server=server,
                )
            )
    return server
