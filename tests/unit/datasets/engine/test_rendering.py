"""app/datasets/engine/rendering.py: values are cut in SQL to what a reply shows, and a page stops at
its byte cap; nested values are cut item by item, and a JSON export writes numbers by the
rendering rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from app.datasets.engine import databases, query, rendering, values
from tests.support.datasets import small_engine_config


@pytest.fixture
def cfg(tmp_path: Path) -> databases.EngineConfig:
    """A small engine configuration: one CSV in its root, a 1 s time limit."""
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=1.0)


LONG = "é" * 1000


def stored(cfg: databases.EngineConfig, sql: str) -> Path:
    """`sql`'s result written as a stored result (in this process)."""
    return query.execute_to_store(cfg, sql, [], {}, cfg.results / "q_cut.parquet", 1000).path


def plain(cfg: databases.EngineConfig, path: Path) -> list[dict[str, Any]]:
    """The stored rows read whole, then made JSON-safe: what a page showed before values were cut in SQL."""

    def work(con: Any) -> list[dict[str, Any]]:
        cur = con.execute(f"SELECT * FROM read_parquet('{path}')")
        return values.rows_as_dicts([d[0] for d in cur.description], cur.fetchall())

    rows: list[dict[str, Any]] = databases.run_locked(cfg, [], work)
    return rows


def test_values_are_cut_in_sql_to_what_a_reply_shows(cfg: databases.EngineConfig) -> None:
    path = stored(
        cfg,
        f"""SELECT '{LONG}' AS text, 'short' AS small, repeat('ab', 500)::BLOB AS raw, 'x'::BLOB AS tiny,
        [repeat('z', 400) FOR i IN range(80)] AS texts, range(100) AS numbers, [1, 2]::INTEGER[2] AS pair,
        {{'name': '{LONG}', 'n': 7, 'inner': {{'deep': repeat('q', 500)}}}} AS record,
        MAP {{'k': '{LONG}'}} AS mapping, [{{'a': '{LONG}'}}] AS records, NULL::VARCHAR AS nothing,
        NULL::STRUCT(a VARCHAR) AS no_record, 42 AS answer, DATE '2024-02-29' AS day, 1.5::DECIMAL(4, 2) AS price
        FROM range(3)""",
    )
    cut = query.read_rows(cfg, path, 0, 10)
    assert cut == plain(cfg, path)  # the same answer as cutting after the fact
    row = cut[0]
    assert row["text"] == "é" * 300 + "…" and row["small"] == "short" and row["record"]["name"].endswith("…")
    assert len(row["texts"]) == 50 and row["texts"][0] == "z" * 300 + "…" and row["numbers"] == list(range(50))
    assert row["nothing"] is None and row["no_record"] is None and row["answer"] == 42


def test_nothing_long_reaches_python(cfg: databases.EngineConfig) -> None:
    path = stored(cfg, "SELECT repeat('x', 1000000) AS a, repeat('y', 1000000) AS a2, [repeat('z', 100000)] AS l")

    def fetched(con: Any) -> list[Any]:
        query, _ = rendering.capped_query(con, f"read_parquet('{path}')")
        return list(con.execute(query).fetchone())

    values = databases.run_locked(cfg, [], fetched)
    assert [len(values[0]), len(values[1]), len(values[2][0])] == [301, 301, 301]


def test_a_page_stops_at_its_byte_cap(cfg: databases.EngineConfig) -> None:
    columns = ", ".join(f"repeat('v', 400) AS c{i}" for i in range(40))
    path = stored(cfg, f"SELECT {columns} FROM range(1000)")  # ~12 MB once shown
    rows = query.read_rows(cfg, path, 0, 1000)
    weight = sum(rendering._weight(r) for r in rows)
    assert 0 < len(rows) < 1000 and weight <= rendering.PAGE_MAX_BYTES
    assert len(query.read_rows(cfg, path, 0, 5)) == 5


def test_nested_values_are_cut_item_by_item() -> None:
    con = duckdb.connect(":memory:")
    try:
        source = (
            "(SELECT range(80) AS many, [1, 2]::INTEGER[2] AS pair, {'a': repeat('s', 400), 'n': 1} AS rec,"
            " MAP {'k': repeat('v', 400)} AS m, INTERVAL 14 MONTH AS span, NULL::STRUCT(a INTEGER) AS none)"
        )
        query, names = rendering.capped_query(con, source)
        row = con.execute(query).fetchone()
    finally:
        con.close()
    assert names == ["many", "pair", "rec", "m", "span", "none"]
    assert row is not None
    many, pair, rec, m, span, none = row
    assert many == list(range(values.LIST_ITEMS)) and pair == (1, 2)  # an array reaches Python whole
    assert rec == {"a": "s" * (values.CELL_CHARS + 1), "n": 1}
    assert m == {"k": "v" * (values.CELL_CHARS + 1)}
    assert span == "1 year 2 months" and none is None


def test_a_json_export_writes_numbers_by_the_rendering_rule() -> None:
    con = duckdb.connect(":memory:")
    try:
        relation = (
            "(SELECT 1.5::DECIMAL(10,2) AS exact, 123456789012345.678::DECIMAL(18,3) AS wide,"
            " 'nan'::DOUBLE AS nan, [1.25::DECIMAL(5,2)] AS items, 'x' AS text)"
        )
        picked = rendering.json_export_columns(con, relation)
        row = con.execute(f"SELECT to_json(_r) FROM (SELECT {picked} FROM {relation}) _r").fetchone()
    finally:
        con.close()
    assert row is not None
    assert json.loads(row[0]) == {
        "exact": 1.5,
        "wide": "123456789012345.678",
        "nan": "NaN",
        "items": [1.25],
        "text": "x",
    }


def test_floats_are_shown_without_their_noise(cfg: databases.EngineConfig) -> None:
    """A REAL is shown as its own shortest text, not the digits of the double it widens to; a DOUBLE to
    15 significant digits (a sum's float noise gone)."""
    path = stored(
        cfg,
        "SELECT 0.1::REAL AS r, [0.1::REAL] AS rs, 0.1::DOUBLE + 0.2 AS d, 32763.999999999993::DOUBLE AS s, "
        "'inf'::REAL AS inf",
    )
    assert query.read_rows(cfg, path, 0, 1) == [{"r": 0.1, "rs": [0.1], "d": 0.3, "s": 32764.0, "inf": "Infinity"}]
