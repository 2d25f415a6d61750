"""app/core/errors.py: the error hierarchy's codes and statuses, the body both transports send, and the
one 4001 shape built from a pydantic validation failure."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.core import errors
from app.core.errors import CairnError, ErrorBody, InvalidInput, Unavailable, invalid_field, validation_error
from app.core.schemas import StrictModel


def _subclasses(cls: type[CairnError]) -> list[type[CairnError]]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


def test_every_error_has_its_own_code_and_a_status_of_its_class() -> None:
    found = [c for c in _subclasses(CairnError) if c.__module__ == errors.__name__ and c is not CairnError]
    assert len(found) >= 16
    codes = [c.code for c in found]
    assert len(set(codes)) == len(codes), "two errors share a code"
    for cls in found:
        # the code's first digit is the HTTP class: 4xxx answers 4xx, 5xxx answers 5xx
        assert str(cls.code)[0] == str(cls.status)[0], cls.__name__
        assert 400 <= cls.status < 600 and cls.category


def test_the_body_carries_details_and_query_context_only_when_set() -> None:
    plain = errors.NotFound("no such project 'x'")
    assert plain.body() == {
        "error": {"code": 4002, "category": "Not Found", "message": "no such project 'x'", "suggestions": []}
    }
    full = errors.QueryError(
        "bad column", suggestions=["Check the column names"], details={"column": "y"}, query_context="SELECT y"
    )
    body = full.body()["error"]
    assert body["details"] == {"column": "y"} and body["query_context"] == "SELECT y"
    ErrorBody.model_validate(full.body())  # the documented schema describes what is sent
    assert errors.Conflict("x", details={}).body()["error"].keys() == {"code", "category", "message", "suggestions"}


def test_default_suggestions_apply_unless_the_caller_gives_its_own() -> None:
    assert Unavailable("database down").suggestions == ["Retry shortly; check /readyz"]
    assert Unavailable("database down", suggestions=[]).suggestions == []
    own = ["retry in 1 s"]
    err = Unavailable("x", suggestions=own)
    own.append("changed later")
    assert err.suggestions == ["retry in 1 s"]  # a copy, not the caller's list
    assert errors.RateLimited("slow", headers={"Retry-After": "3"}).headers == {"Retry-After": "3"}
    assert errors.InternalError("boom").headers == {}
    assert str(errors.Timeout("took too long")) == "took too long"


def test_invalid_field_names_the_field_and_its_rule() -> None:
    err = invalid_field("filters.year", "must be a number", rule="type", suggestions=["Send 2024"])
    assert isinstance(err, InvalidInput) and err.status == 400 and err.code == 4001
    assert err.details == {"errors": [{"field": "filters.year", "rule": "type", "message": "must be a number"}]}
    assert err.suggestions == ["Send 2024"]
    assert invalid_field("q", "empty").details == {"errors": [{"field": "q", "rule": "invalid", "message": "empty"}]}


class _Args(StrictModel):
    query: str
    limit: int = 10
    tags: list[str] = []


def _failure(**raw: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Args.model_validate(raw)
    return caught.value


def test_validation_error_lists_every_field_with_its_rule() -> None:
    err = validation_error(_failure(limit="many", tags=["a", 3], colour="red").errors())
    problems = err.details["errors"] if err.details else []
    assert {(p["field"], p["rule"]) for p in problems} == {
        ("query", "missing"),
        ("limit", "int_parsing"),
        ("tags.1", "string_type"),
        ("colour", "extra_forbidden"),
    }
    unknown = next(p for p in problems if p["field"] == "colour")
    assert unknown["message"] == "unknown field (not accepted by this operation)"
    assert err.message.startswith("Invalid arguments: ") and "tags.1: " in err.message
    assert err.suggestions == ["Check the operation's input schema (tools/list or /openapi.json)"]


def test_validation_error_of_the_whole_value_and_of_many_fields() -> None:
    root = validation_error([{"loc": (), "type": "model_type", "msg": "Input should be an object"}])
    assert root.details == {
        "errors": [{"field": "(root)", "rule": "model_type", "message": "Input should be an object"}]
    }
    many = validation_error([{"loc": (f"f{i}",), "type": "missing", "msg": "Field required"} for i in range(30)])
    assert many.details is not None and len(many.details["errors"]) == 20  # the first twenty are named
