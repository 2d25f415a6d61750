"""app/datasets/engine/values.py: the rendering rule of values (docs/datasets.md, "Values"), a summary's
extremes, and DuckDB's numeric type names."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from decimal import Decimal

from app.datasets.engine import values


def test_the_rendering_rule_of_values() -> None:
    """docs/datasets.md, "Values": numbers a float64 cannot hold exactly travel as text."""
    big = 2**53
    assert [values.jsonable(v) for v in (big - 1, big, -big, True)] == [big - 1, str(big), str(-big), True]
    decimals = ["1.50", "0.1000000000", "123456789012345.678", "12345678901234567890", "-0.000"]
    assert [values.jsonable(Decimal(d)) for d in decimals] == [
        1.5,
        0.1,
        "123456789012345.678",
        "12345678901234567890",
        -0.0,
    ]
    assert [values.jsonable(float(f)) for f in ("nan", "inf", "-inf")] == ["NaN", "Infinity", "-Infinity"]
    assert values.jsonable(b"\x00\xff" * 100) == "base64:" + base64.b64encode(b"\x00\xff" * 48).decode() + "…"
    assert values.jsonable(b"\x00\xff" * 100, cut=False) == "base64:" + base64.b64encode(b"\x00\xff" * 100).decode()
    assert values.jsonable({1: [Decimal("2.5")], None: "x"}) == {"1": [2.5], "null": "x"}
    assert [values.cell_text(v) for v in (None, True, 1.5, [1, "a"], {"k": None}, "x")] == [
        "",
        "true",
        "1.5",
        '[1,"a"]',
        '{"k":null}',
        "x",
    ]


def test_dates_times_and_identifiers_as_text() -> None:
    aware = dt.datetime(2024, 3, 1, 12, 30, 0, 250000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert values.jsonable(aware) == "2024-03-01T10:30:00.25+00:00"  # UTC, no trailing zeros
    assert values.jsonable(dt.date(2024, 2, 29)) == "2024-02-29"
    assert values.jsonable(dt.time(1, 2, 3)) == "01:02:03"
    assert values.jsonable(uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert values.jsonable("é" * 400) == "é" * values.CELL_CHARS + "…"
    assert values.jsonable(list(range(80))) == list(range(values.LIST_ITEMS))
    assert values.jsonable(list(range(80)), cut=False) == list(range(80))


def test_a_summarys_extremes_are_exact_numbers_or_short_text() -> None:
    assert values.extreme("12345678901234567890", "HUGEINT") == "12345678901234567890"
    assert values.extreme("2.50", "DECIMAL(5,2)") == 2.5
    assert values.extreme("0.1", "DOUBLE") == 0.1
    assert values.extreme("x" * 50, "VARCHAR") == "x" * 40 + "…"
    assert values.extreme("not a number", "INTEGER") == "not a number"
    assert values.extreme(None, "INTEGER") is None


def test_numeric_types_and_sizes() -> None:
    assert all(values.is_numeric(t) for t in ("integer", "UBIGINT", "DOUBLE", "DECIMAL(18, 3)"))
    assert not any(values.is_numeric(t) for t in ("VARCHAR", "DATE", "INTEGER[]", "DECIMAL"))
    assert [values.human_bytes(n) for n in (0, 1536, 5 * 1024**3, 3 * 1024**5)] == [
        "0 B",
        "1.5 KB",
        "5.0 GB",
        "3072.0 TB",
    ]
    assert [values.rounded(v) for v in (1 / 3, "2.5", None, float("inf"), "x")] == [0.333333, 2.5, None, None, None]
    assert values.rows_as_dicts(["a", "b"], [(1, b"\x00"), (None, "t")]) == [
        {"a": 1, "b": "base64:AA=="},
        {"a": None, "b": "t"},
    ]


def test_doubles_are_shown_to_fifteen_digits_and_exports_keep_them_whole() -> None:
    assert values.jsonable(0.1 + 0.2) == 0.3
    assert values.jsonable(32763.999999999993) == 32764.0
    assert values.jsonable([2.675, 19.99, 1e-300, 123456789012345.0]) == [2.675, 19.99, 1e-300, 123456789012345.0]
    assert values.jsonable(0.1 + 0.2, cut=False) == 0.30000000000000004
    assert values.shortest(-1234.5678901234567) == -1234.56789012346
