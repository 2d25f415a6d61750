"""app/analysis/schemas.py: analysis_ingest takes one mode (a top-level model, or a parent model and its
child resource), and the rules that keep each mode's options to itself."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.analysis.schemas import IngestIn

TOP = {"analysis_id": "a1", "model": "book"}
NESTED = {"analysis_id": "a1", "parent_model": "book", "child_resource": "sessions"}


def test_either_mode_alone_is_accepted() -> None:
    top = IngestIn.model_validate({**TOP, "ingest_all": True, "resume": True})
    assert top.model == "book" and top.parent_model is None and top.per_page == 50
    nested = IngestIn.model_validate({**NESTED, "parent_ids": ["1", "2"]})
    assert nested.child_resource == "sessions" and nested.parent_ids == ["1", "2"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"analysis_id": "a1"}, "give either model"),
        ({**TOP, "parent_model": "author", "child_resource": "books"}, "give either model"),
        ({"analysis_id": "a1", "parent_model": "book"}, "needs both parent_model and child_resource"),
        ({"analysis_id": "a1", "child_resource": "sessions"}, "needs both parent_model and child_resource"),
        ({**TOP, "parent_ids": ["1"]}, "parent_ids belongs to nested mode"),
        ({**NESTED, "parent_ids": ["1"], "resume": True}, "with parent_ids, list the ones left"),
    ],
)
def test_mixed_or_missing_modes_are_refused(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        IngestIn.model_validate(raw)


@pytest.mark.parametrize(
    "bad",
    [
        {"per_page": 0},
        {"per_page": 201},
        {"page": 0},
        {"user_id": "del\x7f"},
        {"user_id": "tab\there"},
        {"user_id": "ünï"},
        {"fields": []},
        {"project": "not a project"},
    ],
)
def test_argument_bounds(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        IngestIn.model_validate({**TOP, **bad})


def test_a_user_id_is_printable_ascii_with_inner_spaces() -> None:
    assert IngestIn.model_validate({**TOP, "user_id": "librarian 7"}).user_id == "librarian 7"
    assert IngestIn.model_validate({**TOP, "user_id": "x"}).user_id == "x"
    assert IngestIn.model_validate({**TOP, "user_id": " padded "}).user_id == "padded"  # trimmed first
