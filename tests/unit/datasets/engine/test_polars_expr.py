"""app/datasets/engine/polars_expr.py: the restricted polars chain compiled to DuckDB SQL (parsed, never run)."""

from __future__ import annotations

import pytest

from app.core.errors import CairnError, InvalidInput, QueryError
from app.datasets.engine.polars_expr import compile_expr


def test_chains_compile_to_sql() -> None:
    assert compile_expr('pl.table("sales").filter(pl.col("a") > 3).select("a", "b").limit(5)') == (
        'SELECT "a", "b" FROM (SELECT * FROM (SELECT * FROM "sales") WHERE ("a" > 3)) LIMIT 5'
    )
    assert compile_expr('pl.scan_csv("x.csv").group_by("k").agg(pl.col("v").sum()).sort("k")') == (
        'SELECT * FROM (SELECT "k", sum("v") AS "v" FROM (SELECT * FROM read_csv_auto(\'x.csv\')) '
        'GROUP BY "k") ORDER BY "k" ASC'
    )


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ('pl.table("t").filter(pl.col("a").map_elements(print))', ".map_elements() is not supported"),
        ('pl.table("t").pipe(eval)', ".pipe() is not supported"),
        ('pl.table("t").filter(__import__("os").system("x"))', ".system() is not supported"),
        ('pl.col("a") > 3', "a chain that does not start at pl.scan_*/pl.table is not supported"),
        ("pl.table(", "polars_expr does not parse"),
    ],
)
def test_anything_outside_the_allow_list_is_refused(text: str, refused: str) -> None:
    with pytest.raises(QueryError) as caught:
        compile_expr(text)
    assert caught.value.code == 4004 and refused in caught.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pl.table('t').limit('x')", ".limit() takes a whole number, got str"),
        ("pl.table('t').head(1.5)", ".head() takes a whole number, got float"),
        ("pl.table('t').limit(1e400)", ".limit() takes a whole number, got float"),
        ("pl.table('t').limit(" + "9" * 30 + ")", ".limit() takes a number from 0 to"),
        ("pl.table('t').limit(1, 2)", ".limit() takes 0 to 1 arguments, got 2"),
        ("pl.table('t').select(pl.col('a').round('x'))", ".round() takes a whole number, got str"),
        ("pl.table('t').select(pl.col('a').round(99))", ".round() takes a number from -38 to 38"),
        ("pl.table('t').select(pl.lit())", "pl.lit takes 1 argument, got 0"),
        ("pl.table('t').select(pl.lit(1e400))", "is not finite"),
        ("pl.table('t').select(pl.col('a').alias())", ".alias() takes 1 argument, got 0"),
        ("pl.table('t').select(pl.col('a').alias(3))", ".alias() takes a string, got int"),
        ("pl.table('t').select(pl.col('a').fill_null())", ".fill_null() takes 1 argument, got 0"),
        ("pl.table('t').select(pl.col('a').cast())", ".cast() takes 1 argument, got 0"),
        ("pl.table('t').select(pl.col('a').sum(1))", ".sum() takes 0 arguments, got 1"),
        ("pl.table('t').select(pl.col('a').str.contains())", ".str.contains() takes 1 argument, got 0"),
        ("pl.table('t').select(pl.col('a').dt.year(1))", ".dt.year() takes 0 arguments, got 1"),
        ("pl.table('t').select(pl.col(1))", "pl.col takes a string, got int"),
        ("pl.table()", "pl.table() takes 1 argument, got 0"),
        ("pl.table(1)", "pl.table() takes a string, got int"),
        ("pl.scan_csv(1)", "takes a string, got int"),
        ("pl.table('t').select()", ".select() needs at least one argument"),
        ("pl.table('t').filter()", ".filter() needs at least one argument"),
        ("pl.table('t').sort()", ".sort() needs at least one argument"),
        ("pl.table('t').group_by().agg(pl.len())", ".group_by() needs at least one argument"),
        ("pl.table('t').filter(x=1)", ".filter() takes no keyword arguments"),
        ("pl.table('t').sort('a', nulls_last=True)", ".sort() takes only the keyword descending"),
        ("pl.table('t').unique('a')", ".unique() takes 0 arguments, got 1"),
        ("pl.table('t').filter(" + "~" * 3000 + "pl.col('a'))", "nests deeper than 200 levels"),
        ("pl.table('t').filter(" + "-" * 500 + "pl.col('a'))", "nests deeper than 200 levels"),
        ("pl.table('t')" + ".head(1)" * 1000, "nests deeper than 200 levels"),
    ],
)
def test_malformed_arguments_are_invalid_input(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        compile_expr(text)
    assert caught.value.code == 4001 and message in caught.value.message


def test_every_input_is_compiled_or_refused_with_the_error_body() -> None:
    """No input escapes as anything but a 4001/4004 CairnError (mutations of a valid chain)."""
    base = "pl.scan_csv('x.csv').filter(pl.col('a') > 1).group_by('k').agg([pl.col('v').sum().alias('s')])"
    base += ".sort('s', descending=True).limit(3)"
    fillers = ["", "'x'", "1", "1.5", "None", "[]", "pl.col('a')", "pl.lit()", "-1", "True", "(", ")", "~"]
    for i in range(len(base)):
        for filler in fillers:
            text = base[:i] + filler + base[i + 1 :]
            try:
                compile_expr(text)
            except CairnError as exc:
                assert exc.code in (4001, 4004), (text, exc)
