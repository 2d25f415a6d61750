"""app/datasets/service_answer.py: execute_query's reply from a stored result, fitted to the token
budget. The results are stored by the real engine; its calls run in this process (`in_process`), as
the engine's own unit tests call it, rather than in worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core import budget
from app.datasets import engine
from app.datasets.config import DatasetSettings
from app.datasets.schemas import QueryIn
from app.datasets.service_answer import Reply, Stored, answer, csv_lines, rest_estimate, result_type, rows_shown
from tests.support.datasets import small_engine_config

SETTINGS = DatasetSettings()


@pytest.fixture
def cfg(tmp_path: Path) -> engine.EngineConfig:
    return small_engine_config(tmp_path, memory_limit="512MB", timeout_s=5.0)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The engine's calls run here, each named in the list yielded."""
    calls: list[str] = []

    async def offload(fn: Any, cfg: engine.EngineConfig, *args: Any, **kwargs: Any) -> Any:
        calls.append(fn.__name__)
        return fn(cfg, *args, **kwargs)

    def offload_sync(fn: Any, cfg: engine.EngineConfig, *args: Any, **kwargs: Any) -> Any:
        calls.append(fn.__name__)
        return fn(cfg, *args, **kwargs)

    monkeypatch.setattr(engine, "offload", offload)
    monkeypatch.setattr(engine, "offload_sync", offload_sync)
    yield calls


def store(cfg: engine.EngineConfig, sql: str, name: str = "q_00000000000000aa", head: int = 1000) -> Stored:
    res = engine.execute_to_store(cfg, sql, [], {}, cfg.results / f"{name}.parquet", 100_000, head)
    meta = {
        "query_id": name,
        "result_path": str(res.path),
        "columns": res.columns,
        "types": res.types,
        "rows_stored": res.rows_stored,
        "rows_total": res.rows_total,
        "elapsed_ms": res.elapsed_ms,
    }
    return Stored(meta, False, "duckdb", "select n, label from t", ["data"])


ROWS = "SELECT i AS n, 'label ' || i AS label FROM range({}) t(i) ORDER BY i"


def test_the_kind_of_result_and_the_rows_a_reply_may_show() -> None:
    assert result_type("select count(*) from data", "json") == "aggregation"
    assert result_type("select a from data group by a", "csv") == "aggregation"
    assert result_type("select a from data", "json") == "tabular"
    assert result_type("select count(*) from data", "chart") == "chart"
    assert rows_shown(QueryIn(query="x", return_limit=7)) == 7
    assert rows_shown(QueryIn(query="x", return_format="summary")) == 0
    assert rows_shown(QueryIn(query="x", return_format="chart")) == 0


def test_csv_lines_quote_what_needs_quoting() -> None:
    rows: list[dict[str, Any]] = [{"a": "x,y", "b": "two\nlines"}, {"a": None, "b": 3}]
    assert csv_lines(["a", "b"], rows) == ["a,b", '"x,y","two\nlines"', ",3"]


async def test_a_result_that_fits_is_answered_whole_from_its_first_rows(
    cfg: engine.EngineConfig, in_process: list[str]
) -> None:
    stored = store(cfg, ROWS.format(3))
    head = engine.read_rows(cfg, stored.path, 0, 10)
    out = await answer(SETTINGS, QueryIn(query="x"), stored, cfg, head)
    assert in_process == []  # the rows in hand are the reply: no engine call
    assert out.data == [{"n": 0, "label": "label 0"}, {"n": 1, "label": "label 1"}, {"n": 2, "label": "label 2"}]
    assert (out.rows_returned, out.rows_total, out.truncated, out.degradation) == (3, 3, False, "none")
    assert (out.next_offset, out.query_id, out.views, out.result_type) == (
        None,
        stored.meta["query_id"],
        ["data"],
        "tabular",
    )
    assert out.summary.engine_used == "duckdb" and not out.summary.cache_hit
    assert 0 < out.context_tokens_used <= 2000
    rows = await answer(SETTINGS, QueryIn(query="x", return_format="csv"), stored, cfg)
    assert in_process == ["read_rows"] and rows.data == ["n,label", "0,label 0", "1,label 1", "2,label 2"]


async def test_a_result_over_the_budget_gives_fewer_rows_and_a_summary_of_the_rest(
    cfg: engine.EngineConfig, in_process: list[str]
) -> None:
    stored = store(cfg, ROWS.format(500))
    out = await answer(SETTINGS, QueryIn(query="x", return_limit=500, max_tokens=1000), stored, cfg)
    assert out.truncated and out.degradation == "rows_and_summary" and out.context_tokens_used <= 1000
    assert 0 < out.rows_returned < 500 and out.next_offset == out.rows_returned
    assert out.data == [{"n": i, "label": f"label {i}"} for i in range(out.rows_returned)]
    assert out.rest_summary is not None and out.rest_summary["from_row"] == out.rows_returned
    assert out.rest_summary["rows"] == 500 - out.rows_returned
    assert in_process[0] == "read_rows" and "summarize_stored" in in_process
    # A budget too small for any row with the summary of the rest: the summary of them all.
    assert out.cut is not None and out.cut.reason == "max_tokens 1000"
    assert out.cut.left_out == f"rows {out.rows_returned + 1}-500 of 500"
    assert out.cut.next_call is not None and out.cut.next_call.tool == "get_result"
    assert out.cut.next_call.args == {"query_id": out.query_id, "offset": out.rows_returned}
    least = await answer(SETTINGS, QueryIn(query="x", return_limit=500, max_tokens=350), stored, cfg)
    assert least.degradation == "summary_only" and least.data == [] and least.context_tokens_used <= 350
    assert least.cut is not None and least.cut.left_out.startswith("rows 1-500 of 500")
    summed = (least.rest_summary or {}).get("columns", {})
    if len(summed) == 1:  # the summary's columns left out are named
        assert least.cut.left_out.endswith(", ".join(c for c in ("n", "label") if c not in summed))
    elif not summed:
        assert least.cut.left_out.endswith("summary of every column")
    # Not even the summary: the envelope still says what it left out and where to get it.
    bare = await answer(SETTINGS, QueryIn(query="x", return_limit=500, max_tokens=200), stored, cfg)
    assert bare.degradation == "minimal" and bare.cut is not None and bare.cut.next_call is not None
    assert bare.cut.next_call.args == {"query_id": bare.query_id, "offset": 0}


def test_a_cut_names_the_columns_the_summary_left_out(cfg: engine.EngineConfig) -> None:
    stored = store(cfg, ROWS.format(5))
    reply = Reply(QueryIn(query="x", return_limit=2), stored, 2000)
    rest = {"rows": 3, "columns": {"n": {}}, "columns_omitted": 1}
    cut = reply.cut(2, rest, "rows_and_summary")
    assert cut.reason == "max_tokens 2000 (default)" and cut.left_out == "rows 3-5 of 5; summary of columns label"
    assert reply.cut(2, None, "none").reason == "return_limit 2"


async def test_a_summary_reply_has_no_rows(cfg: engine.EngineConfig, in_process: list[str]) -> None:
    stored = store(cfg, ROWS.format(40))
    out = await answer(SETTINGS, QueryIn(query="x", return_format="summary"), stored, cfg)
    assert out.data == [] and out.rows_returned == 0 and in_process == ["summarize_stored"]
    assert out.rest_summary is not None and out.rest_summary["rows"] == 40 and out.degradation == "none"
    assert out.truncated is False


def test_a_rest_estimate_has_the_shape_and_about_the_size_of_the_summary(cfg: engine.EngineConfig) -> None:
    sql = (
        "SELECT i AS n, 'city ' || (i % 7) AS city, i * 1.5 AS amount, "
        "CASE WHEN i % 5 = 0 THEN NULL ELSE DATE '2024-01-01' + i::INTEGER END AS day FROM range(60) t(i)"
    )
    res = engine.execute_to_store(cfg, sql, [], {}, cfg.results / "q_6.parquet", 1000, 100)
    assert len(res.head) == res.rows_stored == 60
    exact = engine.summarize_stored(cfg, res.path, 25)
    guess = rest_estimate(res.head, 25, res.columns, res.types)
    assert guess.keys() == exact.keys() and guess["rows"] == exact["rows"] == 35
    assert {c: e.keys() for c, e in guess["columns"].items()} == {c: e.keys() for c, e in exact["columns"].items()}
    assert guess["columns"]["day"]["null_pct"] == exact["columns"]["day"]["null_pct"]
    sizes = budget.tokens_of(guess), budget.tokens_of(exact)
    assert 0.75 < sizes[0] / sizes[1] < 1.33, sizes


def test_a_rest_estimate_names_the_columns_it_leaves_out() -> None:
    rows = [{f"c{i}": i for i in range(5)}]
    guess = rest_estimate(rows, 0, [f"c{i}" for i in range(5)], ["INTEGER"] * 5, max_columns=3)
    assert list(guess["columns"]) == ["c0", "c1", "c2"] and guess["columns_omitted"] == 2
