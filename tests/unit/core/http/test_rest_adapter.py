"""app/core/http/rest_adapter.py: list arguments in query strings, schemas hoisted into the OpenAPI
components, the published examples, and the error classes the document declares."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.core.context import CallContext
from app.core.errors import CairnError, NotFound, RateLimited
from app.core.http.rest_adapter import _error_classes, _example, _hoist, _list_fields
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


def test_definitions_move_into_the_components() -> None:
    components: dict[str, Any] = {}
    schema = {"$defs": {"Inner": {"type": "object"}}, "properties": {"a": {"$ref": "#/$defs/Inner"}}}
    hoisted = _hoist(schema, components)
    assert hoisted == {"properties": {"a": {"$ref": "#/components/schemas/Inner"}}}
    assert components == {"Inner": {"type": "object"}} and "$defs" in schema  # the input is not changed


def test_only_valid_examples_are_published() -> None:
    assert _example(_op({"q": "x", "limit": 3})) == {"q": "x", "limit": 3}
    assert _example(_op({"q": "x", "unknown": 1})) is None
    made = _example(_op())
    assert made is not None and isinstance(made["q"], str)


def test_every_concrete_error_class_is_declared() -> None:
    found = _error_classes()
    assert NotFound in found and RateLimited in found and CairnError not in found
