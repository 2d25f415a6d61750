"""app/analysis/validation.py (pure parts), without a server."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import pytest

from app.analysis.repository import where_sql
from app.analysis.validation import bucket_interval, field_name, interval, parse_where
from app.core.errors import InvalidInput


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
