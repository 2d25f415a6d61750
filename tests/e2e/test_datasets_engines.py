"""The seed's engines whole, over MCP and REST: the seed's pandas example on the python engine, `auto`
choosing by the seed's rules and saying why, polars_expr reading registered datasets by name with its
string and date methods and errors phrased for polars, and partial results of a query out of time."""

from __future__ import annotations

import csv
import random
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.datasets.config import DatasetSettings
from tests.support.datasets import OK, Both, callers, python_engine_on, root_of
from tests.support.server import RunningServer, overridden

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

# The seed's pandas example, as the seed quotes it (indented).
SEED_PANDAS = """
    import pandas as pd
    from sklearn.preprocessing import StandardScaler

    df = pd.read_csv('data.csv')
    scaler = StandardScaler()
    df['normalized'] = scaler.fit_transform(df[['value']])
    result = df.describe()
"""
# Rows that come steadily, far more than a 3 s limit lets the whole query make.
STREAMING = "SELECT i, md5(repeat(i::VARCHAR, 200)) AS h FROM range(100000000) t(i)"


@pytest.fixture
def files(server: RunningServer) -> Path:
    """data.csv (the seed's `value` column) and two orders files with day/month/year dates."""
    root = root_of(server)
    rng = random.Random(39)
    with (root / "data.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "value"])
        for i in range(200):
            w.writerow([i, round(rng.gauss(50, 10), 3)])
    for part in (1, 2):
        with (root / f"orders39_{part}.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["order_id", "placed", "carrier", "amount"])
            for i in range(30):
                w.writerow([f"{part}-{i}", f"{1 + i % 28:02d}/0{part}/2025", ["DHL", "UPS", "Fedex"][i % 3], i * 2.5])
    return root


@pytest.fixture
def python_enabled(server: RunningServer) -> Iterator[None]:
    yield from python_engine_on(server, cpu_seconds=20, memory_mb=1024)


async def test_the_seeds_pandas_example_runs_on_the_python_engine(
    server: RunningServer, files: Path, python_enabled: None
) -> None:
    values = [float(r["value"]) for r in csv.DictReader((files / "data.csv").open())]
    async with callers(server) as (admin, _):
        # As the seed sends it (engine pandas), and left to auto without a query_type: both run it.
        for args in (
            {"engine": "pandas", "query_type": "python", "query": SEED_PANDAS},
            {"query": SEED_PANDAS, "max_tokens": 2000},
        ):
            for code, out in await admin.both("execute_query", args):
                assert code == OK, out
                rows = {r["index"]: r for r in out["data"]}
                assert rows["count"]["value"] == 200 and rows["mean"]["value"] == pytest.approx(statistics.mean(values))
                assert rows["mean"]["normalized"] == pytest.approx(0, abs=1e-9)
                assert rows["std"]["normalized"] == pytest.approx(1, abs=0.01)
                assert out["summary"]["engine_used"] == "python"
                if "engine" not in args:
                    reason = out["summary"]["engine_reason"]
                    assert reason.startswith("imports sklearn: ML operations → pandas")
        # Out of time, python code has nothing to give, and says so.
        slow = {"engine": "pandas", "query": "import time\ntime.sleep(30)\nresult = {'x': [1]}", "timeout_ms": 1500}
        await admin.refused("execute_query", slow, 5003, "the python engine keeps no partial result")


async def test_auto_chooses_by_the_seeds_rules_and_says_why(server: RunningServer, files: Path) -> None:
    async with callers(server) as (admin, _):
        cases: list[tuple[dict[str, Any], str, str]] = [
            ({"query": "SELECT count(*) AS n FROM data", "files": ["data.csv"]}, "duckdb", "SQL query → duckdb"),
            (
                {"query": "SELECT count(*) AS n FROM read_csv_auto('orders39_*.csv')"},
                "duckdb",
                "2 files: multiple files → duckdb",
            ),
            (
                {"query": "pl.scan_csv('orders39_1.csv').group_by('carrier').agg(pl.len())"},
                "polars_expr→duckdb",
                "polars_expr chain: complex transforms → polars",
            ),
        ]
        for args, engine, reason in cases:
            for code, out in await admin.both("execute_query", args):
                assert code == OK, out
                assert out["summary"]["engine_used"] == engine and reason in out["summary"]["engine_reason"], out
        # A named engine is the caller's choice: no reason.
        _, named = (await admin.both("execute_query", {**cases[0][0], "engine": "duckdb"}))[1]
        assert "engine_reason" not in named["summary"]
        # ML code while the python engine is off: auto says what it chose and why it cannot run it.
        err = await admin.refused("execute_query", {"query": SEED_PANDAS}, 4001, "auto' chose pandas")
        assert "imports sklearn" in err["message"] and "CAIRN_DATASETS_PYTHON_ENABLED" in str(err["suggestions"])
        assert "import pandas as pd" in err["query_context"]


async def test_polars_reads_registered_datasets_by_name_with_dates_and_strings(
    server: RunningServer, files: Path
) -> None:
    async with callers(server) as (admin, _):
        await admin.ok("register_dataset", {"name": "orders39", "path": "orders39_*.csv"})
        chain = (
            "pl.{read}('orders39')"
            ".with_columns(pl.col('placed').str.strptime(pl.Date, '%d/%m/%Y').alias('day'))"
            ".filter(pl.col('carrier').str.to_lowercase().str.contains('^d'))"
            ".group_by(pl.col('day').dt.month().alias('month'))"
            ".agg(pl.len().alias('n'), pl.col('day').dt.strftime('%Y-%m').first().alias('ym'))"
            ".sort('month')"
        )
        for read in ("scan_csv", "read_csv"):
            for code, out in await admin.both("execute_query", {"engine": "polars", "query": chain.format(read=read)}):
                assert code == OK, out
                assert out["data"] == [{"month": 1, "n": 10, "ym": "2025-01"}, {"month": 2, "n": 10, "ym": "2025-02"}]
                assert "orders39" in out["views"]
        lenient = "pl.scan_csv('orders39').select(pl.col('carrier').str.to_date('%Y-%m-%d', strict=False).alias('d'))"
        _, out = (await admin.both("execute_query", {"engine": "polars", "query": lenient}))[1]
        assert {r["d"] for r in out["data"]} == {None}
        strict = "pl.scan_csv('orders39').select(pl.col('carrier').str.strptime(pl.Date, '%Y-%m-%d'))"
        err = await admin.refused("execute_query", {"engine": "polars", "query": strict}, 4004, "polars_expr:")
        assert any("strict=False" in s for s in err["suggestions"])
        missing = await admin.refused(
            "execute_query",
            {"engine": "polars", "query": "pl.scan_csv('orderz').limit(3)"},
            4002,
            "pl.scan_csv('orderz') names no registered dataset",
        )
        assert "file system" not in missing["message"] and "pl.scan_csv('<file>.csv')" in missing["message"]
        for query in ("pl.scan_csv('orders39.csv').limit(3)", "pl.scan_csv('nope/orders.csv').limit(3)"):
            err = await admin.refused("execute_query", {"engine": "polars", "query": query}, 4002, "polars_expr:")
            assert "file system operations" not in err["message"] and "disabled" not in err["message"]
        split = await admin.refused(
            "execute_query",
            {"engine": "polars", "query": "pl.scan_csv('orders39').select(pl.col('carrier').str.split('H'))"},
            4004,
            ".str.split() is not supported",
        )
        assert "strptime" in split["suggestions"][0] and "replace_all" in split["suggestions"][0]


async def _partial(both: Both, args: dict[str, Any]) -> None:
    for code, out in await both.both("execute_query", args):
        assert code == OK, out
        assert out["partial"] is True and "Raise timeout_ms" in out["partial_reason"], out
        assert out["rows_total"] >= len(out["data"]) > 0 and out["summary"]["cache_hit"] is False


async def test_a_query_out_of_time_answers_the_rows_it_produced(server: RunningServer, files: Path) -> None:
    async with callers(server) as (admin, _):
        # Rows DuckDB streams: those produced before the limit, marked partial (and never cached).
        await _partial(admin, {"query": STREAMING, "timeout_ms": 3000, "return_limit": 5})
        _, out = (await admin.both("execute_query", {"query": STREAMING, "timeout_ms": 3000, "return_limit": 5}))[1]
        assert [r["i"] for r in out["data"]] == [0, 1, 2, 3, 4]
        assert out["partial_reason"].startswith("The query ran out of its time limit: these are the first")
        page = await admin.ok("get_result", {"query_id": out["query_id"], "offset": 5, "limit": 5})
        assert [r["i"] for r in page["rows"]] == [5, 6, 7, 8, 9]  # the stored partial rows page as any
        # The auditor's cross join: its first rows are stored whole, counting the rest runs out of time.
        cross = "SELECT a.id, b.id AS id2 FROM data a, data b, data c, data d WHERE (a.id + b.id + c.id) % 7 <> 3"
        with overridden(server, DatasetSettings, datasets_result_max_rows=1000):
            await _partial(admin, {"query": cross, "files": ["data.csv"], "timeout_ms": 1500})
        # An aggregate gives its row only at its end: nothing to answer, and the error says so.
        total = "SELECT sum(a.id * b.id * c.id * d.id) AS s FROM data a, data b, data c, data d"
        err = await admin.refused(
            "execute_query", {"query": total, "files": ["data.csv"], "timeout_ms": 1500}, 5003, "no partial result"
        )
        assert any("ORDER BY, GROUP BY" in s for s in err["suggestions"])
