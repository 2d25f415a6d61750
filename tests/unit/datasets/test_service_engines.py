"""app/datasets/service_engines.py: the engine of each call (`auto` by the seed's rules, with its reason)
and polars_expr errors phrased for the polars caller."""

from __future__ import annotations

import re
from typing import Any

import pytest

from app.core.errors import InvalidInput, NotFound, QueryError, SchemaError
from app.datasets.schemas import QueryIn
from app.datasets.service_engines import SMALL_INPUT_BYTES, choose, for_polars, language_of, with_inputs

SEED_PANDAS = """
    import pandas as pd
    from sklearn.preprocessing import StandardScaler

    df = pd.read_csv('data.csv')
    scaler = StandardScaler()
    df['normalized'] = scaler.fit_transform(df[['value']])
    result = df.describe()
"""
MB = 1024 * 1024


@pytest.mark.parametrize(
    ("args", "enabled", "engine"),
    [
        ({"query": "SELECT 1"}, False, "duckdb"),
        ({"query": "SELECT 1", "engine": "duckdb"}, False, "duckdb"),
        ({"query": "df.head()", "query_type": "polars_expr"}, False, "polars_expr→duckdb"),
        ({"query": "df.head()", "engine": "polars"}, False, "polars_expr→duckdb"),
        ({"query": "result = 1", "engine": "pandas"}, True, "python"),
    ],
)
def test_the_engine_of_each_query_type(args: dict[str, Any], enabled: bool, engine: str) -> None:
    assert choose(QueryIn.model_validate(args), enabled).engine == engine


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"query": "result = 1", "engine": "pandas"}, "disabled on this server"),
        ({"query": "SELECT 1", "engine": "pandas", "query_type": "sql"}, "runs query_type 'python' only"),
        ({"query": "df.head()", "engine": "duckdb", "query_type": "polars_expr"}, "runs query_type 'sql'"),
        ({"query": "SELECT 1", "engine": "polars", "query_type": "sql"}, "runs query_type 'polars_expr'"),
        ({"query": SEED_PANDAS, "query_type": "python"}, "'auto' chose pandas (the code imports sklearn)"),
    ],
)
def test_an_engine_that_does_not_run_the_query_type_is_refused(args: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(needle)):
        choose(QueryIn.model_validate(args), False)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        (SEED_PANDAS, "python"),
        ("result = con.sql('SELECT 1')", "python"),
        ("df = pd.read_csv('a.csv')\nresult = df", "python"),
        ("SELECT pd.amount FROM payments pd", None),
        ("SELECT\nresult = 1 AS flag FROM t", None),
        ("FROM data LIMIT 2", None),
        ("  pl.scan_csv('a.csv').limit(3)", "polars_expr"),
        ("SELECT * FROM orders -- import x", None),
        ("SELECT result = 1 FROM t", None),
    ],
)
def test_the_language_of_a_text(text: str, language: str | None) -> None:
    assert language_of(text) == language


@pytest.mark.parametrize(
    ("args", "files", "size", "engine", "reason"),
    [
        # The seed's rules, each named in the reason.
        (
            {"query": SEED_PANDAS, "query_type": "python"},
            1,
            20 * MB,
            "python",
            "imports sklearn: ML operations → pandas",
        ),
        (
            {"query": "result = con.sql('SELECT 1')"},
            1,
            MB,
            "python",
            "python code, 1.0 MB of input: files under 10 MB → pandas",
        ),
        ({"query": "result = con.sql('SELECT 1')"}, 1, SMALL_INPUT_BYTES, "python", "runs on pandas only"),
        ({"query": "SELECT 1"}, 2, MB, "duckdb", "2 files: multiple files → duckdb"),
        ({"query": "SELECT 1"}, 1, MB, "duckdb", "SQL query → duckdb"),
        (
            {"query": "pl.table('t').limit(1)"},
            1,
            MB,
            "polars_expr→duckdb",
            "polars_expr chain: complex transforms → polars",
        ),
        (
            {"query": "pl.scan_csv('s_*.csv')"},
            3,
            MB,
            "polars_expr→duckdb",
            "3 files: multiple files → duckdb (the polars_expr chain compiled to SQL)",
        ),
    ],
)
def test_auto_chooses_by_the_seeds_rules_and_says_why(
    args: dict[str, Any], files: int, size: int, engine: str, reason: str
) -> None:
    choice = choose(QueryIn.model_validate(args), True)
    assert choice.engine == engine
    said = with_inputs(choice, files, size)
    assert said is not None and reason in said


def test_auto_follows_the_text_over_a_query_type_it_is_not() -> None:
    """Python code sent with the default query_type (sql) runs as python, and the reason says so."""
    choice = choose(QueryIn.model_validate({"query": SEED_PANDAS}), True)
    assert (choice.engine, choice.language) == ("python", "python")
    assert "(query_type 'sql' was given)" in str(with_inputs(choice, 1, MB))


def test_a_named_engine_has_no_reason() -> None:
    assert with_inputs(choose(QueryIn.model_validate({"query": "SELECT 1", "engine": "duckdb"}), False), 2, MB) is None


def test_a_missing_view_or_file_is_named_in_polars_terms() -> None:
    missing = SchemaError("Table with name orders does not exist! Did you mean sales?")
    err = for_polars(missing, ["orders"])
    assert isinstance(err, NotFound) and err.code == 4002
    assert err.message.startswith("polars_expr: pl.scan_csv('orders') names no registered dataset")
    sandbox = QueryError('Access refused by the sandbox: Cannot access file "x" - file system operations are disabled')
    err = for_polars(sandbox, [])
    assert isinstance(err, NotFound) and "'x' names no registered dataset" in err.message
    assert "disabled" not in err.message and "file system" not in err.message


def test_a_date_that_does_not_parse_points_to_strict_false() -> None:
    err = for_polars(QueryError('Could not parse string "03/01/2025" according to format specifier "%Y-%m-%d"'), [])
    assert err.message.startswith("polars_expr: Could not parse") and any("strict=False" in s for s in err.suggestions)
    other = for_polars(SchemaError("Column 'x' not found."), [])
    assert other.message == "polars_expr: Column 'x' not found."
