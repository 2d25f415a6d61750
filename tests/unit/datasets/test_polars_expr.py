"""app/datasets/polars_expr.py: the restricted polars chain compiled to DuckDB SQL (parsed, never run)."""

from __future__ import annotations

import pytest

from app.core.errors import QueryError
from app.datasets.polars_expr import compile_expr


def test_chains_compile_to_sql() -> None:
    assert compile_expr('pl.table("sales").filter(pl.col("a") > 3).select("a", "b").limit(5)') == (
        'SELECT "a" AS "a", "b" AS "b" FROM (SELECT * FROM (SELECT * FROM "sales") WHERE ("a" > 3)) LIMIT 5'
    )
    assert compile_expr('pl.scan_csv("x.csv").group_by("k").agg(pl.col("v").sum()).sort("k")') == (
        'SELECT * FROM (SELECT "k", sum("v") AS "v" FROM (SELECT * FROM read_csv_auto(\'x.csv\')) '
        'GROUP BY "k") ORDER BY "k" ASC'
    )


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ('pl.table("t").filter(pl.col("a").map_elements(print))', ".map_elements() is not allowed"),
        ('pl.table("t").pipe(eval)', ".pipe() is not allowed"),
        ('pl.table("t").filter(__import__("os").system("x"))', ".system() is not allowed"),
        ('pl.col("a") > 3', "a chain that does not start at pl.scan_*/pl.table is not allowed"),
        ("pl.table(", "polars_expr does not parse"),
    ],
)
def test_anything_outside_the_allow_list_is_refused(text: str, refused: str) -> None:
    with pytest.raises(QueryError) as caught:
        compile_expr(text)
    assert caught.value.code == 4004 and refused in caught.value.message
