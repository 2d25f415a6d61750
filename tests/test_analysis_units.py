"""Pure functions of the analysis feature: validation, summaries, flattening, registry parsing."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pytest

from app.analysis.config import DEMO_REGISTRY
from app.analysis.registry import load_registry, parse_registry
from app.analysis.repository import _json, where_sql
from app.analysis.service_ingest import project_fields, upstream_params
from app.analysis.summaries import summarize
from app.analysis.upstream import dig, flatten, retry_after_seconds
from app.analysis.validation import bucket_interval, field_name, interval, parse_where
from app.core.errors import InvalidInput, SchemaError


def test_where_parsing_and_sql_binds_values() -> None:
    w = parse_where({"status": "done", "rating": {"$gte": 2, "$lt": 4.5}, "at": {"$gt": "2026-01-02"}})
    assert w.exact == {"status": "done"}
    assert [(c.field, c.op, c.kind) for c in w.ranges] == [
        ("rating", ">=", "numeric"),
        ("rating", "<", "numeric"),
        ("at", ">", "timestamptz"),
    ]
    at = w.ranges[2].value
    assert w.ranges[0].value == Decimal("2") and isinstance(at, datetime) and at.tzinfo is not None
    params: dict[str, object] = {}
    sql = where_sql(w, params)
    assert "done" not in sql and "2026" not in sql and json.loads(str(params["w_exact"])) == {"status": "done"}
    for bad in ({"x y": 1}, {"a": {"$ne": 1}}, {"a": {"$gt": None}}, {"a": {"$gt": [1]}}, {"a": {"$gt": "soon"}}):
        with pytest.raises(InvalidInput):
            parse_where(bad)


@pytest.mark.parametrize("name", ["a.b", "1a", "a-b", "a b", "a'", "", "x" * 65, "status; drop table t"])
def test_field_names_refused(name: str) -> None:
    with pytest.raises(InvalidInput):
        field_name(name, "group_by")


def test_intervals() -> None:
    assert interval(" 7 days ", "w") == "7 days" and interval("1 week", "w") == "1 week"
    for bad in ("1 day; drop table x", "day", "1 fortnight", "1.5 days", "-1 day"):
        with pytest.raises(InvalidInput):
            interval(bad, "window")
    assert bucket_interval("2 months") == "60 days" and bucket_interval("3 hours") == "3 hours"


def test_page_summary_text() -> None:
    rows = [
        {"id": i, "status": s, "rating": r, "at": f"2026-0{m}-01T00:00:00Z", "author_id": 3, "title": f"T{i}"}
        for i, (s, r, m) in enumerate([("done", 5, 1), ("done", 1, 3), ("open", None, 2), ("done", 3, 4)])
    ]
    text = summarize("book", "page 2", rows)
    assert text.startswith("book page 2 (4 records): ")
    assert "status done 3, open 1" in text and "rating 1-5 avg 3 median 3 (1 empty)" in text
    assert "at 2026-01-01..2026-04-01" in text and "author_id" not in text and "T1" not in text


def test_flatten_projection_and_filters() -> None:
    row = flatten({"id": 1, "author": {"id": 7, "name": "A"}, "_links": {"self": "x"}, "tags": [1]})
    assert row == {"id": 1, "author_id": 7, "author_name": "A", "tags": [1]}
    assert project_fields(row, ["author_name"], {"id"}) == {"id": 1, "author_id": 7, "author_name": "A"}
    assert dig({"_embedded": {"books": [1]}}, "_embedded.books") == [1] and dig([1], "") == [1]
    model = load_registry(DEMO_REGISTRY).model("book").cfg
    assert upstream_params(model, {"status": "done", "min_rating": 3, "genre": None}) == {
        "status": "done",
        "min_rating": 3,
    }
    with pytest.raises(InvalidInput):
        upstream_params(model, {"colour": "red"})


def test_retry_after_and_nul_bytes() -> None:
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert 0 <= (retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") or 0) <= 1
    assert json.loads(_json({"a": "x\x00y", "b": "\\u0000"})) == {"a": "xy", "b": "\\u0000"}


def test_registry_validation() -> None:
    with pytest.raises(SchemaError, match="must contain"):
        parse_registry(
            "upstreams: {u: {base_url: 'http://x', models: {m: {list_path: /m, writable: true, "
            "update: {method: PATCH, path: /m}}}}}"
        )
    with pytest.raises(SchemaError, match="declared by both"):
        parse_registry(
            "upstreams: {a: {base_url: 'http://x', models: {m: {list_path: /m}}}, "
            "b: {base_url: 'http://y', models: {m: {list_path: /m}}}}"
        )
    with pytest.raises(SchemaError, match="not valid YAML"):
        parse_registry("upstreams: [")
    with pytest.raises(SchemaError, match="colour"):
        parse_registry("upstreams: {a: {base_url: 'http://x', colour: red, models: {}}}")
    reg = load_registry(DEMO_REGISTRY)
    assert reg.child_model_name("book", "sessions") == "reading_session"
    assert "device" in reg.attributes_of("reading_session")
