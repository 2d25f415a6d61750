"""app/core/schemas.py: what every input model refuses (unknown fields, text no database stores) and
the core operations' argument rules."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.core.schemas import (
    CreateKeyIn,
    CreateProjectIn,
    Empty,
    ListProjectsIn,
    StrictModel,
    wait_for_embedding_field,
)


class Note(StrictModel):
    title: str
    body: dict[str, object] = {}
    tags: list[str] = []
    wait_for_embedding: bool | None = wait_for_embedding_field()


def _refusal(**raw: object) -> str:
    with pytest.raises(ValidationError) as caught:
        Note.model_validate(raw)
    return str(caught.value)


def test_strings_are_trimmed_and_unknown_fields_refused() -> None:
    assert Note(title="  spaced  ").title == "spaced"
    assert "extra_forbidden" in _refusal(title="t", colour="red")
    with pytest.raises(ValidationError):
        Empty.model_validate({"anything": 1})


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"title": "a\x00b"}, "'title'"),
        ({"title": "ok", "tags": ["fine", "bad\x00"]}, "'tags[1]'"),
        ({"title": "ok", "body": {"deep": {"er": "\ud800"}}}, "'body.deep.er'"),  # an unpaired surrogate
        ({"title": "ok", "body": {"key\x00": 1}}, "'body'"),  # a key is named by where it sits
    ],
)
def test_text_no_database_stores_is_refused_with_its_place(raw: dict[str, object], where: str) -> None:
    message = _refusal(**raw)
    assert f"{where} contains a NUL character or invalid Unicode" in message


def test_a_bare_bad_value_is_named_input() -> None:
    class Bare(StrictModel):
        pass

    with pytest.raises(ValidationError, match="'input' contains a NUL"):
        Bare.model_validate("\x00")


def test_text_that_stores_passes_untouched() -> None:
    note = Note(title="Ünïcødé 😀", body={"n": 1, "list": ["a", {"b": "c"}]}, tags=["x"])
    assert note.title == "Ünïcødé 😀" and note.body["list"] == ["a", {"b": "c"}]
    assert note.wait_for_embedding is None
    assert "CAIRN_EMBEDDING_WRITE_MODE" in (Note.model_fields["wait_for_embedding"].description or "")


@pytest.mark.parametrize("name", ["alpha", "a", "A.b-c_9", "9lives", "x" * 128])
def test_project_names_that_pass(name: str) -> None:
    assert CreateProjectIn(name=name).name == name


@pytest.mark.parametrize("name", ["", "-lead", ".hidden", "has space", "slash/inside", "x" * 129, "ünï"])
def test_project_names_that_are_refused(name: str) -> None:
    with pytest.raises(ValidationError):
        CreateProjectIn(name=name)


def test_paging_bounds() -> None:
    assert ListProjectsIn().limit == 50 and ListProjectsIn().offset == 0
    for bad in ({"limit": 0}, {"limit": 201}, {"offset": -1}):
        with pytest.raises(ValidationError):
            ListProjectsIn.model_validate(bad)


def test_create_key_takes_known_scopes_and_a_project_name() -> None:
    key = CreateKeyIn.model_validate({"scopes": ["read", "write"], "project": "alpha"})
    assert key.scopes == ["read", "write"] and key.toolsets is None
    refused: list[dict[str, object]] = [
        {"scopes": []},
        {"scopes": ["root"]},
        {"scopes": ["read"], "project": "not a name"},
        {"scopes": ["read"], "unknown": True},
    ]
    for bad in refused:
        with pytest.raises(ValidationError):
            CreateKeyIn.model_validate(bad)
