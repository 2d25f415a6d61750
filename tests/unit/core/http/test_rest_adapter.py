"""app/core/http/rest_adapter.py: list arguments in query strings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.core.context import CallContext
from app.core.http.rest_adapter import _list_fields
from app.core.registry import Operation, OperationSet


class FindIn(BaseModel):
    """Arguments."""

    model_config = {"extra": "forbid"}
    q: str
    tags: list[str] = []
    ids: list[int] | None = None
    limit: int = 10


class FindOut(BaseModel):
    """A result."""

    n: int = 0


def _op(example: dict[str, Any] | None = None) -> Operation:
    ops = OperationSet("f")

    async def find(ctx: CallContext, args: FindIn) -> FindOut:
        """Find."""
        return FindOut()

    ops.operation(name="find", title="Find", input=FindIn, output=FindOut, path="/f", method="GET", example=example)(
        find
    )
    return ops.operations[0]


def test_list_arguments_are_the_array_fields() -> None:
    assert _list_fields(_op()) == frozenset({"tags", "ids"})
