"""app/core/http/mcp_adapter.py: what tools/list shows of an operation, errors as MCP results, and the
request an SDK context carries."""

from __future__ import annotations

import json
from types import SimpleNamespace

from mcp_types import TextContent
from pydantic import BaseModel, Field

from app.core.context import CallContext
from app.core.errors import NotFound
from app.core.http.mcp_adapter import error_result, lean_input_schema, listed_tool, request_of
from app.core.registry import Operation, OperationSet


class LookIn(BaseModel):
    """Arguments of look (not shown to clients: the tool description says it)."""

    model_config = {"extra": "forbid"}
    query: str = Field(description="What to look for")
    tags: list[str] = []


class LookOut(BaseModel):
    """A result."""

    found: int = 0


def _op(**kw: object) -> Operation:
    ops = OperationSet("f")

    async def look(ctx: CallContext, args: LookIn) -> LookOut:
        """Look for things.

        More about looking."""
        return LookOut()

    ops.operation(name="look", title="Look", input=LookIn, output=LookOut, path="/f/look", **kw)(look)  # type: ignore[arg-type]
    return ops.operations[0]


def test_a_listed_tool_carries_the_lean_schemas_and_the_hints() -> None:
    op = _op(read_only=True, tool_name="look_up")
    schema = lean_input_schema(op)
    assert "description" not in schema and schema["required"] == ["query"]
    tool = listed_tool(op, output_schema=False)
    assert (tool.name, tool.title, tool.output_schema) == ("look_up", "Look", None)
    assert tool.description == "Look for things.\n\nMore about looking."
    assert tool.annotations is not None and tool.annotations.read_only_hint and tool.annotations.idempotent_hint
    assert not tool.annotations.destructive_hint and not tool.annotations.open_world_hint
    assert listed_tool(_op(), output_schema=True).output_schema is not None


def test_errors_are_is_error_results_with_the_shared_body() -> None:
    result = error_result(NotFound("No such thing", suggestions=["Look elsewhere"]))
    assert result.is_error and isinstance(result.content[0], TextContent)
    body = json.loads(result.content[0].text)
    assert body["error"]["code"] == 4002 and body["error"]["suggestions"] == ["Look elsewhere"]


def test_the_request_of_a_context() -> None:
    request = object()
    assert request_of(SimpleNamespace(request_context=SimpleNamespace(request=request))) is request
    assert request_of(None) is None and request_of(object()) is None

    class _Outside:
        @property
        def request_context(self) -> object:
            raise ValueError("Context is not available outside of a request")

    assert request_of(_Outside()) is None
