"""Builds the MCP server (official SDK, `MCPServer`) from the registry.

Each `Operation` becomes an `OperationTool`: its inputSchema and outputSchema are the JSON schemas of
the operation's Pydantic models, and calling it runs `executor.run_operation`, so validation, scope
checks, transactions and errors are exactly those of the REST twin. Errors come back as `isError`
results whose text is the shared error body.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.resources import Resource
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp_types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import AnyHttpUrl, Field

from app import __version__
from app.core.auth import CairnTokenVerifier, KeyStore, principal_from_access_token, request_id
from app.core.budget import dumps, image_fields, sent_text
from app.core.context import OPEN_PRINCIPAL, AppState, Principal
from app.core.errors import CairnError, NotFound, Unauthenticated
from app.core.executor import read_resource, run_operation
from app.core.logs import request_id_var
from app.core.registry import Operation, ResourceDef

INSTRUCTIONS = """\
Cairn keeps large data and long-term memory out of your context window. Raw rows, documents and
history stay in the server; you get compact, bounded, cited answers.
How to use it economically:
- Store first, then retrieve: push/capture text, ingest datasets, then ask narrow questions.
- Prefer filters (project, type, tags, time range, category) and small limits over broad queries.
- Read summaries, counts, profiles and samples instead of raw rows; every listing is paginated and
  capped, and results cite ids you can open one at a time.
- Long operations report progress; errors carry a code, a message and suggestions.
Resources mcp://health and mcp://settings show the embedding model and the effective defaults."""


def error_result(err: CairnError) -> CallToolResult:
    """An error as MCP sees it: an `isError` result whose text is the shared error body."""
    return CallToolResult(content=[TextContent(type="text", text=dumps(err.body()))], is_error=True)


def current_principal(state: AppState) -> Principal:
    """The caller of the current MCP request (open mode: the anonymous admin)."""
    token = get_access_token()
    if token is not None:
        return principal_from_access_token(token)
    if state.open_mode:
        return OPEN_PRINCIPAL
    raise Unauthenticated("A bearer API key is required")


async def _placeholder() -> None:
    """Never called: `OperationTool.run` replaces the function-based call path."""


class OperationTool(Tool):
    """An MCP tool whose schemas and behaviour come from a registry `Operation`."""

    operation: Any = Field(exclude=True)
    state: Any = Field(exclude=True)

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The operation's output model schema."""
        return self.operation.output_schema()  # type: ignore[no-any-return]

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        """Run the operation; errors become `isError` results carrying the error body."""
        op: Operation = self.operation
        state: AppState = self.state

        async def progress(done: float, total: float | None, message: str | None) -> None:
            await context.report_progress(done, total, message)

        try:
            principal = current_principal(state)
            result = await run_operation(
                state,
                op,
                arguments,
                principal,
                transport="mcp",
                request_id=request_id_var.get() or request_id(),
                progress=progress,
            )
        except CairnError as err:
            return error_result(err)
        data = result.model_dump(mode="json", by_alias=True)
        text, images = sent_text(data, image_fields(type(result)))
        content: list[Any] = [
            TextContent(type="text", text=dumps(text)),
            *(ImageContent(type="image", data=b64, mime_type=mime) for b64, mime in images),
        ]
        return CallToolResult(content=content, structured_content=data)


def make_tool(op: Operation, state: AppState) -> OperationTool:
    """The MCP tool for one operation."""
    return OperationTool(
        fn=_placeholder,
        name=op.name,
        title=op.title,
        description=op.description,
        parameters=op.input_schema(),
        fn_metadata=func_metadata(_placeholder),
        is_async=True,
        context_kwarg=None,
        annotations=ToolAnnotations(
            title=op.title,
            read_only_hint=op.read_only,
            destructive_hint=op.destructive,
            idempotent_hint=op.idempotent,
            open_world_hint=False,
        ),
        operation=op,
        state=state,
    )


class OperationResource(Resource):
    """A static MCP resource backed by a registry `ResourceDef`."""

    definition: Any = Field(exclude=True)
    state: Any = Field(exclude=True)

    async def read(self) -> str:
        """Read the resource as compact JSON."""
        return await _read(self.state, self.definition, {})


async def _read(state: AppState, res: ResourceDef, params: dict[str, str]) -> str:
    try:
        principal = current_principal(state)
        result = await read_resource(
            state, res, params, principal, transport="mcp", request_id=request_id_var.get() or request_id()
        )
    except CairnError as err:
        raise ResourceError(dumps(err.body())) from None
    return dumps(result.model_dump(mode="json", by_alias=True))


def _template_function(state: AppState, res: ResourceDef) -> Any:
    async def read_template(**params: str) -> str:
        return await _read(state, res, params)

    read_template.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=str) for p in res.params],
        return_annotation=str,
    )
    read_template.__annotations__ = {**{p: str for p in res.params}, "return": str}
    read_template.__name__ = res.name.replace("-", "_")
    read_template.__doc__ = res.description
    return read_template


class CairnMCPServer(MCPServer[Any]):
    """`MCPServer` whose unknown-tool answer is the shared error body (code 4002 with close names)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """Call a tool; a name that is not served is an `isError` result like every other error."""
        if self._tool_manager.get_tool(name) is None:
            served = [t.name for t in self._tool_manager.list_tools()]
            close = difflib.get_close_matches(name, served, n=3)
            err = NotFound(
                f"Unknown tool: {name[:100]}",
                suggestions=[f"Did you mean {', '.join(close)}?"] if close else ["See tools/list"],
            )
            return error_result(err)
        return await super().call_tool(name, arguments, context)


def build_mcp(state: AppState, store: KeyStore | None) -> MCPServer[Any]:
    """The MCP server with one tool per operation and one resource per resource definition."""
    settings = state.settings
    auth = None
    verifier = None
    if store is not None:
        resource_url = settings.resource_url()
        auth = AuthSettings(
            issuer_url=AnyHttpUrl(settings.public_url or f"http://{settings.host}:{settings.port}"),
            resource_server_url=AnyHttpUrl(resource_url),
            required_scopes=["read"],
            validate_token_resource=False,
        )
        verifier = CairnTokenVerifier(store)
    server: MCPServer[Any] = CairnMCPServer(
        name="cairn",
        title="Cairn",
        version=__version__,
        instructions=INSTRUCTIONS,
        auth=auth,
        token_verifier=verifier,
        tools=[make_tool(op, state) for op in state.registry.operations if op.mcp],
        log_level=settings.log_level.upper(),  # type: ignore[arg-type]
    )
    for res in state.registry.resources:
        if res.is_template:
            server.resource(res.uri, name=res.name, description=res.description, mime_type="application/json")(
                _template_function(state, res)
            )
        else:
            server.add_resource(
                OperationResource(
                    uri=res.uri,
                    name=res.name,
                    description=res.description,
                    mime_type="application/json",
                    definition=res,
                    state=state,
                )
            )
    return server
