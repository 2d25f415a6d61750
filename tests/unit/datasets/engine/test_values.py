"""app/datasets/engine/values.py: the rendering rule of values (docs/datasets.md, "Values")."""

from __future__ import annotations

import base64
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
