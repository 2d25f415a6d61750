"""Messy files profiled as they are (issue 39, item 4), over MCP and REST on the real server, with the
files tests/support/messy.py writes: a date column in three formats gets the share of each and the SQL
that parses them; nested NDJSON is profiled per inner field by path and shown as JSON; doubles come
without float noise; a histogram of the integers 1-20 gives each its own bar; a damaged Parquet file
is a 4004 naming it, never the server's own SQL; did-you-mean suggestions name each column once."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.support.datasets import Both, callers, root_of
from tests.support.messy import DATE_FORMATS, MessyFiles, write_messy
from tests.support.server import RunningServer

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

ROWS = 3000


@pytest.fixture
def messy(server: RunningServer) -> MessyFiles:
    """messy39.csv (3,000 rows), its Parquet copy, messy39_nested.ndjson and two damaged Parquet files
    in the server's data root."""
    return write_messy(root_of(server), rows=ROWS, prefix="messy39")


async def both_ok(caller: Both, tool: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool's answer over MCP and over REST (each must succeed)."""
    answers = await caller.both(tool, args)
    for code, body in answers:
        assert code == 0, (tool, args, body)
    return [body for _, body in answers]


def column(profile: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in profile["schema"]["columns"] if c["name"] == name)
    return found


async def test_a_date_column_in_three_formats_gets_their_shares_and_the_sql_that_parses_them(
    server: RunningServer, messy: MessyFiles
) -> None:
    expected = {fmt: share / 10 for fmt, share in DATE_FORMATS}
    async with callers(server) as (admin, _):
        for name in (messy.csv.name, messy.parquet.name):
            args = {"file_path": name, "detail": "full", "sample_size": 2000, "max_tokens": 20000}
            for body in await both_ok(admin, "profile_dataset", args):
                formats = column(body, "order_date")["date_formats"]
                assert list(formats) == list(expected), formats  # most first
                for fmt, share in expected.items():
                    assert abs(formats[fmt] - share) < 0.05, formats
                advice = [r for r in body["recommendations"] if r.startswith("'order_date'")]
                assert len(advice) == 1, body["recommendations"]
                assert "mixes 3 date formats" in advice[0]
                parse = "try_strptime(order_date, [" + ", ".join(f"'{f}'" for f in expected) + "])"
                assert parse in advice[0]
                # The SQL given parses every value of the column.
                query = f"SELECT count(*) AS n, count({parse}) AS parsed FROM data"
                stored = await admin.ok("execute_query", {"query": query, "files": [name]})
                assert stored["data"] == [{"n": ROWS, "parsed": ROWS}]
            # The summary's default budget drops recommendations first: a budget that holds them.
            summary = await both_ok(admin, "profile_dataset", {"file_path": name, "max_tokens": 2000})
            assert all(any("mixes 3 date formats" in r for r in b["recommendations"]) for b in summary)


async def test_nested_json_is_profiled_per_inner_field_and_shown_as_json(
    server: RunningServer, messy: MessyFiles
) -> None:
    name = messy.ndjson.name
    async with callers(server) as (admin, _):
        for body in await both_ok(admin, "profile_dataset", {"file_path": name, "detail": "full", "max_tokens": 20000}):
            customer = column(body, "customer")
            assert customer["type"] == "struct"
            sample = customer["sample_values"][0]
            assert isinstance(sample, dict) and set(sample) == {"id", "name", "address"}
            fields = {f["path"]: f for f in customer["fields"]}
            assert list(fields) == ["customer.id", "customer.name", "customer.address.city", "customer.address.zip"]
            assert fields["customer.id"]["type"] == "int64"
            assert 1 <= fields["customer.id"]["stats"]["min"] <= fields["customer.id"]["stats"]["max"] <= 50
            cities = dict(fields["customer.address.city"]["stats"]["top_values"])
            assert fields["customer.address.city"]["type"] == "category" and "東京" in cities
            items = {f["path"]: f for f in column(body, "items")["fields"]}
            assert column(body, "items")["type"] == "list"
            assert set(items) == {"items[].sku", "items[].qty"}
            assert items["items[].qty"]["stats"]["max"] == 5
            tags = column(body, "tags")["fields"]
            assert [t["path"] for t in tags] == ["tags[]"] and tags[0]["type"] == "category"
            # A field of mixed kinds (DuckDB's JSON): its values shown parsed, its kinds counted.
            meta = column(body, "meta")
            assert meta["type"] == "json" and set(meta["stats"]["json_kinds"]) == {"object", "string", "array"}
            assert {type(v) for v in meta["sample_values"]} == {dict, str, list}, meta["sample_values"]
        for body in await both_ok(admin, "profile_dataset", {"file_path": name, "max_tokens": 20000}):
            lines = body["schema"]["columns"]
            assert any(line.startswith("customer,struct,") for line in lines), lines
            assert any(line.startswith("customer.id,int64,0,") for line in lines), lines
            assert any(line.startswith("customer.address.city,category,0,") for line in lines), lines
            assert any(line.startswith("items[].qty,int64,0,") for line in lines), lines
            assert any(line.startswith("meta,json,0,") and "object " in line for line in lines), lines
            assert not any('{""' in line or '[""' in line for line in lines), lines  # no JSON escaped into CSV
        # A sample shows a struct as a JSON object.
        for body in await both_ok(admin, "stream_sample", {"file_path": name, "strategy": "head", "sample_size": 2}):
            assert isinstance(body["sample"][0]["customer"], dict)
            assert isinstance(body["sample"][0]["items"], list)


def digits(value: float) -> int:
    """The significant digits of a double's shortest text."""
    mantissa = repr(value).split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    return len(mantissa)


async def test_doubles_carry_no_float_noise(server: RunningServer, messy: MessyFiles) -> None:
    name = messy.csv.name
    query = (
        "SELECT 0.1::DOUBLE + 0.2::DOUBLE AS tiny, sum(amount) AS total, avg(amount) AS mean, "
        "CAST(min(amount) AS REAL) AS least FROM data"
    )
    exact = math.fsum(float(v) for v in [0.1, 0.2, 0.3, 1.1, 2.675, 19.99] * (ROWS // 6))
    async with callers(server) as (admin, _):
        for body in await both_ok(admin, "execute_query", {"query": query, "files": [name]}):
            row = body["data"][0]
            assert row["tiny"] == 0.3
            assert row["least"] == 0.1
            assert digits(row["total"]) <= 15 and abs(row["total"] - exact) < 1e-6, row
            assert digits(row["mean"]) <= 15, row
        for body in await both_ok(admin, "profile_dataset", {"file_path": name, "detail": "full", "max_tokens": 20000}):
            stats = column(body, "amount")["stats"]
            assert stats["min"] == 0.1 and stats["max"] == 19.99


async def test_a_histogram_of_the_integers_1_to_20_gives_each_its_own_bar(
    server: RunningServer, messy: MessyFiles
) -> None:
    args = {
        "query": "SELECT qty FROM data",
        "files": [messy.csv.name],
        "return_format": "chart",
        "chart_type": "histogram",
        "chart_format": "vega-lite",
    }
    async with callers(server) as (admin, _):
        for query in ("SELECT qty FROM data", "SELECT CAST(qty AS DOUBLE) AS qty FROM data"):
            for body in await both_ok(admin, "execute_query", {**args, "query": query}):
                values = body["visualization"]["vega_lite"]["data"]["values"]
                assert [(v["lo"], v["n"]) for v in values] == [(q, ROWS // 20) for q in range(1, 21)], values


async def test_a_damaged_parquet_file_is_named_as_such_on_every_tool(server: RunningServer, messy: MessyFiles) -> None:
    async with callers(server) as (admin, _):
        for path in (messy.corrupt, messy.truncated):
            dataset = path.stem
            calls: list[tuple[str, dict[str, Any]]] = [
                ("profile_dataset", {"file_path": path.name}),
                ("stream_sample", {"file_path": path.name, "strategy": "random", "sample_size": 5}),
                ("execute_query", {"query": f"SELECT * FROM {dataset}", "files": [path.name]}),
            ]
            for tool, args in calls:
                for code, body in await admin.both(tool, args):
                    error = body["error"]
                    assert code == 4004, (tool, path.name, body)
                    assert f"dataset '{dataset}'" in error["message"] and "damaged" in error["message"], error
                    text = json.dumps(body)
                    assert "CREATE" not in text and "VIEW" not in text and str(Path(path).parent) not in text, body
                    if tool == "execute_query":
                        assert error["query_context"] and dataset in error["query_context"], error


async def test_did_you_mean_names_each_column_once(server: RunningServer, messy: MessyFiles) -> None:
    async with callers(server) as (admin, _):
        for query, wanted in (("SELECT amout FROM data", "amount"), ("SELECT regon FROM messy39", "region")):
            err = await admin.refused("execute_query", {"query": query, "files": [messy.csv.name]}, 4003, "not found")
            known = [s for s in err["suggestions"] if s.startswith("Known columns include: ")]
            assert len(known) == 1, err
            names = known[0].removeprefix("Known columns include: ").split(", ")
            assert wanted in names and len(names) == len(set(names)), err
