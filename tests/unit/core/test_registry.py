"""app/core/registry.py: declarations, their defaults, and the registry's refusals."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from app.core.context import CallContext
from app.core.registry import OperationSet, Registry
from app.core.schemas import Empty


class Out(BaseModel):
    """A result."""

    ok: bool = True


def _set(feature: str, name: str, path: str, **kw: object) -> OperationSet:
    ops = OperationSet(feature)

    async def handler(ctx: CallContext, args: Empty) -> Out:
        """Summary line.

        More text."""
        return Out()

    kw.setdefault("title", name.title())
    ops.operation(name=name, input=Empty, output=Out, path=path, **kw)(handler)  # type: ignore[arg-type]
    return ops


def test_scope_and_hints_follow_the_declaration() -> None:
    read = _set("f", "look", "/f/look", read_only=True).operations[0]
    assert (read.scope, read.idempotent, read.destructive, read.mcp, read.rest) == ("read", True, False, True, True)
    write = _set("f", "change", "/f/change").operations[0]
    assert (write.scope, write.idempotent) == ("write", False)
    admin = _set("f", "wipe", "/f/wipe", scope="admin", destructive=True).operations[0]
    assert (admin.scope, admin.destructive) == ("admin", True)
    hidden = _set("f", "upload", "/f/upload", mcp=False, rest=False).operations[0]
    assert (hidden.mcp, hidden.rest) == (False, False)


def test_description_is_the_docstring_and_summary_its_first_line() -> None:
    op = _set("f", "look", "/f/{item}/look", read_only=True).operations[0]
    assert op.summary == "Summary line."
    assert op.description == "Summary line.\n\nMore text."
    assert op.path_params() == ["item"]
    assert op.input_schema()["additionalProperties"] is False


def test_registry_refuses_duplicate_names_and_routes() -> None:
    registry = Registry()
    registry.add(_set("a", "look", "/a/look"))
    with pytest.raises(ValueError, match="duplicate operation look"):
        registry.add(_set("b", "look", "/b/look"))
    with pytest.raises(ValueError, match="duplicate operation other"):
        registry.add(_set("b", "other", "/a/look"))
    registry.add(_set("b", "other", "/a/look", method="GET"))
    assert [op.name for op in registry.operations] == ["look", "other"]
    assert registry.get("other") is not None and registry.get("missing") is None


def test_a_family_composes_its_split_files_in_order() -> None:
    ops = _set("f", "look", "/f/look")
    part = _set("f", "other", "/f/other")
    part.toolset("extra", "More tools.")
    ops.include(part)
    assert [op.name for op in ops.operations] == ["look", "other"]
    assert [ts.name for ts in ops.toolsets] == ["extra"]
    with pytest.raises(ValueError, match="cannot include g's operations in f's"):
        ops.include(_set("g", "else", "/g/else"))


def test_invalid_names_and_missing_docstrings_are_refused() -> None:
    ops = OperationSet("f")
    with pytest.raises(ValueError, match="invalid operation name"):
        ops.operation(name="bad name", input=Empty, output=Out, path="/x")
    with pytest.raises(ValueError, match="needs a title"):
        ops.operation(name="untitled", input=Empty, output=Out, path="/x")
    with pytest.raises(ValueError, match="only a read-only operation may run as one statement"):
        ops.operation(name="writes", input=Empty, output=Out, path="/x", title="Writes", one_statement=True)

    async def undocumented(ctx: CallContext, args: Empty) -> Out:
        return Out()

    ops.operation(name="quiet", input=Empty, output=Out, path="/quiet", title="Quiet")(undocumented)
    with pytest.raises(ValueError, match="needs a docstring"):
        _ = ops.operations[0].description


def test_the_errors_follow_the_declaration() -> None:
    from app.core.errors import Conflict, NotFound, SchemaError, TooLarge, UpstreamError

    def codes(**kw: object) -> set[int]:
        return {cls.code for cls in _set("f", "op", kw.pop("path", "/f/op"), **kw).operations[0].error_classes()}  # type: ignore[arg-type]

    every = {4001, 4010, 4030, 4290, 5000, 5003, 5030}
    assert codes(method="GET", read_only=True) == every  # no body, no named thing, no write
    assert codes(read_only=True) == every | {TooLarge.code}
    assert codes() == every | {TooLarge.code, Conflict.code}
    assert codes(path="/f/{id}", method="GET", read_only=True) == every | {NotFound.code}
    assert UpstreamError.code in codes(open_world=True)
    assert codes(method="GET", read_only=True, errors=(SchemaError, NotFound)) == every | {4003, 4002}


def test_a_resource_answers_the_errors_of_any_call_and_a_template_also_4002() -> None:
    ops = OperationSet("f")

    async def read(ctx: CallContext, **params: str) -> Out:
        """A resource."""
        return Out()

    ops.resource(uri="mcp://plain", name="plain", output=Out, path="/plain")(read)
    ops.resource(uri="mcp://{project_id}/things", name="things", output=Out, path="/p/{project_id}/things")(read)
    plain, template = ({cls.code for cls in res.error_classes()} for res in ops.resources)
    assert plain == {4010, 4030, 4290, 5000, 5003, 5030} and template == plain | {4002}
