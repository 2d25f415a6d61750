"""app/core/http/openapi.py: schemas hoisted into the components, the published examples (recorded,
declared or made), one error response per status of an operation's own errors, and ReDoc without
its remote logo."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.core.context import CallContext
from app.core.errors import Conflict, InternalError, NotFound
from app.core.http.openapi import _example, _hoist, error_responses, examples_file, operation_id, redoc_script
from app.core.registry import Operation, OperationSet


class FindIn(BaseModel):
    """Arguments."""

    model_config = {"extra": "forbid"}
    q: str
    limit: int = 10


class FindOut(BaseModel):
    """A result."""

    n: int = 0


def _op(example: dict[str, Any] | None = None) -> Operation:
    ops = OperationSet("f")

    async def find(ctx: CallContext, args: FindIn) -> FindOut:
        """Find."""
        return FindOut()

    ops.operation(name="find-it", title="Find", input=FindIn, output=FindOut, path="/f", method="GET", example=example)(
        find
    )
    return ops.operations[0]


def test_definitions_move_into_the_components() -> None:
    components: dict[str, Any] = {}
    schema = {"$defs": {"Inner": {"type": "object"}}, "properties": {"a": {"$ref": "#/$defs/Inner"}}}
    hoisted = _hoist(schema, components)
    assert hoisted == {"properties": {"a": {"$ref": "#/components/schemas/Inner"}}}
    assert components == {"Inner": {"type": "object"}} and "$defs" in schema  # the input is not changed


def test_a_recorded_call_wins_over_the_declared_example_and_only_valid_ones_are_published() -> None:
    assert _example(_op({"q": "x", "limit": 3})) == {"q": "x", "limit": 3}
    assert _example(_op({"q": "x"}), {"request": {"q": "recorded"}, "response": {"n": 1}}) == {"q": "recorded"}
    assert _example(_op({"q": "x"}), {"request": {"q": "x", "unknown": 1}}) is None
    assert _example(_op({"q": "x", "unknown": 1})) is None
    made = _example(_op())
    assert made is not None and isinstance(made["q"], str)


def test_error_responses_group_the_codes_by_status() -> None:
    schema = {"$ref": "#/components/schemas/ErrorBody"}
    responses = error_responses([NotFound, InternalError, Conflict], schema)
    assert list(responses) == ["404", "409", "500"]
    assert responses["404"]["x-cairn-codes"] == [4002] and responses["404"]["description"] == "4002 Not Found"
    assert responses["500"]["content"]["application/json"]["schema"] == schema


def test_operation_ids_and_where_the_examples_live() -> None:
    op = _op()
    assert operation_id(op) == "find_it"
    path = examples_file(op.handler)
    assert path is not None and path.name == "openapi_examples.json" and path.parent.name == "http"


def test_redoc_script_fetches_no_remote_logo() -> None:
    script = redoc_script()
    assert b"cdn.redoc.ly" not in script and b'alt:"redocly logo"' in script and len(script) > 100_000
