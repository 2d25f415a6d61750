"""Every DuckDB type a CSV, Parquet or NDJSON file can hold, through every datasets tool over both
transports: one file per format with a column of each type (row 1 a value, row 2 NULL everywhere, row
3 another value), and a table of what each value must look like (the rendering rule of
docs/datasets.md, "Values")."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest
from mcp.client.session import ClientSession

from app.core import budget
from app.core.embeddings.tokens import count_tokens
from app.datasets.engine import make_source
from app.datasets.schemas import QueryOut
from tests.support.datasets import exported, root_of
from tests.support.server import RunningServer, mcp_client, text_of

pytestmark = pytest.mark.asyncio(loop_scope="session")
VIAS = ("rest", "mcp")
# A negative interval to the microsecond: what Parquet (the result store's format) cannot hold.
GAP = "TIMESTAMP '2024-01-01' - TIMESTAMP '2024-01-02 00:00:00.000001'"
NAN = "NaN"


@dataclass(frozen=True)
class Col:
    """One column of a fixture file: its DuckDB type as the file reads back, the values of rows 1 and 3
    (SQL for the Parquet file, text for CSV and NDJSON) and how an answer must show them."""

    name: str
    duck: str
    values: tuple[Any, Any]
    shown: tuple[Any, Any]


PARQUET = [
    Col("b", "BOOLEAN", ("true", "false"), (True, False)),
    Col("ti", "TINYINT", ("-128", "127"), (-128, 127)),
    Col("si", "SMALLINT", ("-32768", "32767"), (-32768, 32767)),
    Col("i", "INTEGER", ("-2147483648", "2147483647"), (-2147483648, 2147483647)),
    Col("bi", "BIGINT", ("-9223372036854775808", "9007199254740991"), ("-9223372036854775808", 9007199254740991)),
    Col("ub", "UBIGINT", ("18446744073709551615", "42"), ("18446744073709551615", 42)),
    Col("d18", "DECIMAL(18,3)", ("123456789012345.678", "-1.5"), ("123456789012345.678", -1.5)),
    Col(
        "d38",
        "DECIMAL(38,10)",
        ("1234567890123456789012345678.0123456789", "0.1"),
        ("1234567890123456789012345678.0123456789", 0.1),
    ),
    Col("dbl", "DOUBLE", ("0.1", "'nan'"), (0.1, NAN)),
    Col("rl", "FLOAT", ("1.5", "'-inf'"), (1.5, "-Infinity")),
    Col("dt", "DATE", ("'2024-02-29'", "'infinity'"), ("2024-02-29", "infinity")),
    Col("tm", "TIME", ("'23:59:59.123456'", "'00:00:00'"), ("23:59:59.123456", "00:00:00")),
    Col("tns", "TIME_NS", ("'12:00:00.123456789'", "'00:00:01'"), ("12:00:00.123456789", "00:00:01")),
    # Parquet keeps a TIMETZ as its UTC time.
    Col("ttz", "TIME WITH TIME ZONE", ("'12:30:00+05:30'", "'00:15:00+00'"), ("07:00:00+00:00", "00:15:00+00:00")),
    Col(
        "ts", "TIMESTAMP", ("'2024-01-02 03:04:05.123456'", "'-infinity'"), ("2024-01-02T03:04:05.123456", "-infinity")
    ),
    Col(
        "tstz",
        "TIMESTAMP WITH TIME ZONE",
        ("'2025-01-01 10:00:00+00'", "'2025-06-01 12:00:00.5+05:30'"),
        ("2025-01-01T10:00:00+00:00", "2025-06-01T06:30:00.5+00:00"),
    ),
    Col(
        "tstz_west",
        "TIMESTAMP WITH TIME ZONE",
        ("'2024-12-31 23:30:00-08:00'", "'2024-03-31 01:59:59.999999+01'"),
        ("2025-01-01T07:30:00+00:00", "2024-03-31T00:59:59.999999+00:00"),
    ),
    Col(
        "tsns",
        "TIMESTAMP_NS",
        ("'2024-06-30 23:59:59.999999123'", "'1999-12-31 00:00:00'"),
        ("2024-06-30T23:59:59.999999123", "1999-12-31T00:00:00"),
    ),
    Col(
        "iv",
        "INTERVAL",
        ("'1 year 2 months 3 days 04:05:06.789'", "'2 hours'"),
        ("1 year 2 months 3 days 04:05:06.789", "02:00:00"),
    ),
    Col(
        "u",
        "UUID",
        ("'550e8400-e29b-41d4-a716-446655440000'", "'00000000-0000-0000-0000-000000000000'"),
        ("550e8400-e29b-41d4-a716-446655440000", "00000000-0000-0000-0000-000000000000"),
    ),
    Col(
        "s",
        "VARCHAR",
        ("'héllo 世界 🦆 \"q\", x' || chr(10) || 'line 2'", "'tab' || chr(9) || 'end'"),
        ('héllo 世界 🦆 "q", x\nline 2', "tab\tend"),
    ),
    Col("bl", "BLOB", ("'\\x00\\xFF\\xFEabc'", "'plain'"), ("base64:AP/+YWJj", "base64:cGxhaW4=")),
    Col("li", "INTEGER[]", ("[1, 2, NULL]", "[]"), ([1, 2, None], [])),
    Col("ls", "VARCHAR[]", ("['a', 'b,c', NULL]", "['\"q\"', '']"), (["a", "b,c", None], ['"q"', ""])),
    Col(
        "st",
        "STRUCT(x INTEGER, y VARCHAR)",
        ("{'x': 1, 'y': 'two'}", "{'x': NULL, 'y': 'é'}"),
        ({"x": 1, "y": "two"}, {"x": None, "y": "é"}),
    ),
    Col("mp", "MAP(VARCHAR, INTEGER)", ("MAP {'k1': 1, 'k2': 2}", "MAP {}"), ({"k1": 1, "k2": 2}, {})),
    Col(
        "los",
        "STRUCT(a INTEGER, b TIMESTAMP WITH TIME ZONE)[]",
        ("[{'a': 1, 'b': TIMESTAMPTZ '2025-01-01 00:00:00+01'}, {'a': 2, 'b': NULL}]", "[]"),
        ([{"a": 1, "b": "2024-12-31T23:00:00+00:00"}, {"a": 2, "b": None}], []),
    ),
    Col("lod", "DECIMAL(20,2)[]", ("[123456789012345678.91, 0.5]", "[NULL]"), (["123456789012345678.91", 0.5], [None])),
]
CSV = [
    Col("b", "BOOLEAN", ("true", "false"), (True, False)),
    Col("bi", "BIGINT", ("-9223372036854775808", "9007199254740991"), ("-9223372036854775808", 9007199254740991)),
    Col(
        "hi",
        "HUGEINT",
        ("123456789012345678901234567890", "-5"),
        ("123456789012345678901234567890", -5),
    ),
    Col("dbl", "DOUBLE", ("0.1", "-2.5"), (0.1, -2.5)),
    Col("dt", "DATE", ("2024-02-29", "1970-01-01"), ("2024-02-29", "1970-01-01")),
    Col("tm", "TIME", ("23:59:59.123456", "00:00:00"), ("23:59:59.123456", "00:00:00")),
    Col(
        "ts",
        "TIMESTAMP",
        ("2024-01-02 03:04:05.123456", "2024-06-30T12:00:00"),
        ("2024-01-02T03:04:05.123456", "2024-06-30T12:00:00"),
    ),
    Col(
        "tstz",
        "TIMESTAMP WITH TIME ZONE",
        ("2025-01-01T10:00:00Z", "2025-06-01T12:00:00.5+05:30"),
        ("2025-01-01T10:00:00+00:00", "2025-06-01T06:30:00.5+00:00"),
    ),
    Col(
        "tstz_west",
        "TIMESTAMP WITH TIME ZONE",
        ("2024-12-31 23:30:00-08:00", "2025-03-30 02:30:00+02"),
        ("2025-01-01T07:30:00+00:00", "2025-03-30T00:30:00+00:00"),
    ),
    Col("s", "VARCHAR", ('héllo 世界 🦆 "q", x\nline 2', "tab\tend"), ('héllo 世界 🦆 "q", x\nline 2', "tab\tend")),
]
NDJSON = [
    Col("b", "BOOLEAN", (True, False), (True, False)),
    Col("bi", "HUGEINT", (-9223372036854775808, 9007199254740991), ("-9223372036854775808", 9007199254740991)),
    Col("ub", "HUGEINT", (18446744073709551615, -5), ("18446744073709551615", -5)),
    Col("dbl", "DOUBLE", (0.1, -2.5), (0.1, -2.5)),
    Col("dt", "DATE", ("2024-02-29", "1970-01-01"), ("2024-02-29", "1970-01-01")),
    Col("tm", "TIME", ("23:59:59.123456", "00:00:00.5"), ("23:59:59.123456", "00:00:00.5")),
    Col(
        "ts",
        "TIMESTAMP",
        ("2024-01-02 03:04:05.123456", "2024-06-30 12:00:00.5"),
        ("2024-01-02T03:04:05.123456", "2024-06-30T12:00:00.5"),
    ),
    Col(
        "tstz",
        "TIMESTAMP WITH TIME ZONE",
        ("2025-01-01T10:00:00-08:00", "2025-06-01T12:00:00.5+05:30"),
        ("2025-01-01T18:00:00+00:00", "2025-06-01T06:30:00.5+00:00"),
    ),
    Col(
        "u",
        "UUID",
        ("550e8400-e29b-41d4-a716-446655440000", "00000000-0000-0000-0000-000000000000"),
        ("550e8400-e29b-41d4-a716-446655440000", "00000000-0000-0000-0000-000000000000"),
    ),
    Col("s", "VARCHAR", ("héllo 世界 🦆\nline 2", "tab\tend"), ("héllo 世界 🦆\nline 2", "tab\tend")),
    Col("li", "BIGINT[]", ([1, 2, None], []), ([1, 2, None], [])),
    Col("ls", "VARCHAR[]", (["a", "b,c", None], ['"q"', ""]), (["a", "b,c", None], ['"q"', ""])),
    Col(
        "st",
        "STRUCT(x BIGINT, y VARCHAR)",
        ({"x": 1, "y": "two"}, {"x": None, "y": "é"}),
        ({"x": 1, "y": "two"}, {"x": None, "y": "é"}),
    ),
    Col(
        "los",
        "STRUCT(a BIGINT, b TIMESTAMP WITH TIME ZONE)[]",
        ([{"a": 1, "b": "2025-01-01T00:00:00+01:00"}, {"a": 2, "b": None}], []),
        ([{"a": 1, "b": "2024-12-31T23:00:00+00:00"}, {"a": 2, "b": None}], []),
    ),
]
TABLES = {"parquet": PARQUET, "csv": CSV, "ndjson": NDJSON}


def write_fixture(path: Path, fmt: str, cols: list[Col]) -> None:
    """The file of one format: ids 1, 2, 3; row 2 NULL in every other column."""
    if fmt == "parquet":
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        parts = ["id::INTEGER AS id"] + [
            f"CASE id WHEN 1 THEN CAST({one} AS {c.duck}) WHEN 3 THEN CAST({three} AS {c.duck}) END AS {c.name}"
            for c in cols
            for one, three in [c.values]
        ]
        con.execute(f"COPY (SELECT {', '.join(parts)} FROM range(1, 4) t(id)) TO '{path}' (FORMAT parquet)")
        con.close()
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["id", *(c.name for c in cols)])
        w.writerow([1, *(c.values[0] for c in cols)])
        w.writerow([2, *("" for _ in cols)])
        w.writerow([3, *(c.values[1] for c in cols)])
        path.write_text(buf.getvalue(), encoding="utf-8")
    else:
        lines = [
            {"id": 1, **{c.name: c.values[0] for c in cols}},
            {"id": 2},
            {"id": 3, **{c.name: c.values[1] for c in cols}},
        ]
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")


@pytest.fixture
def every_type(server: RunningServer) -> dict[str, Path]:
    """The three fixture files in the server's data root."""
    root = root_of(server)
    files = {fmt: root / f"every_type.{fmt}" for fmt in TABLES}
    for fmt, path in files.items():
        write_fixture(path, fmt, TABLES[fmt])
    return files


def rows_of(cols: list[Col], only: list[str] | None = None) -> list[dict[str, Any]]:
    """The three rows as an answer must show them."""
    picked = [c for c in cols if only is None or c.name in only]
    with_id = only is None or "id" in only
    return [
        {
            **({"id": i} if with_id else {}),
            **{c.name: (None if i == 2 else c.shown[0 if i == 1 else 1]) for c in picked},
        }
        for i in (1, 2, 3)
    ]


def cell(value: Any) -> str:
    """The documented text of a shown value in a CSV answer or an xlsx cell."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Both:
    """One call of a datasets tool over REST or MCP, answering the result object; every answer's
    `context_tokens_used` is checked against what was sent."""

    def __init__(self, rest: httpx.AsyncClient, mcp: ClientSession) -> None:
        self.rest, self.mcp = rest, mcp

    async def call(self, via: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        if via == "mcp":
            res = await self.mcp.call_tool(tool, args)
            assert not res.is_error, (tool, args, res.content)
            out: dict[str, Any] = res.structured_content or {}
            sent = text_of(res)
            if "context_tokens_used" in out:
                assert 0 <= count_tokens(sent) - out["context_tokens_used"] <= 1, (tool, args)
            return out
        if tool == "get_result":
            r = await self.rest.get(
                f"/api/v1/datasets/results/{args['query_id']}",
                params={k: v for k, v in args.items() if k != "query_id"},
            )
        else:
            path = {
                "profile_dataset": "/datasets/profile",
                "execute_query": "/datasets/query",
                "stream_sample": "/datasets/sample",
                "export_result": "/datasets/export",
            }[tool]
            r = await self.rest.post(f"/api/v1{path}", json=args)
        assert r.status_code == 200, (tool, args, r.text)
        out = r.json()
        if "context_tokens_used" in out:
            used = budget.tokens_of(out, budget.image_fields(QueryOut))
            assert 0 <= used - out["context_tokens_used"] <= 1, (tool, args)
        return out


@asynccontextmanager
async def clients(server: RunningServer, rest: httpx.AsyncClient) -> AsyncIterator[Both]:
    """REST and MCP clients of the test server (admin key); the MCP session lives in the test's task."""
    async with mcp_client(server.url) as mcp:
        yield Both(rest, mcp)


def reread(fmt: str, path: str, types: dict[str, str]) -> str:
    """The DuckDB table function that reads an export back with the result's column types."""
    if fmt == "parquet":
        return f"read_parquet('{path}')"
    # DuckDB's JSON reader does not decode its own blob escapes: a blob comes back as that text.
    declared = {n: ("VARCHAR" if fmt == "json" and t == "BLOB" else t) for n, t in types.items()}
    columns = "{" + ", ".join(f"'{n}': '{t}'" for n, t in declared.items()) + "}"
    if fmt == "csv":
        return f"read_csv('{path}', header = true, columns = {columns})"
    return f"read_json('{path}', columns = {columns})"


def texts(con: duckdb.DuckDBPyConnection, table: str, types: dict[str, str]) -> list[tuple[Any, ...]]:
    """Every value of `table` as DuckDB's text of it, in id order: format() for dates and times, since a
    cast to VARCHAR of a CSV column answers its raw text, and a cast for the rest (format() goes through
    a float64 for a DECIMAL)."""
    temporal = ("DATE", "TIME", "TIMESTAMP", "INTERVAL")
    picked = ", ".join(
        f"format('{{}}', {n})" if t.startswith(temporal) else f"CAST({n} AS VARCHAR)" for n, t in types.items()
    )
    return con.execute(f"SELECT {picked} FROM {table} ORDER BY id").fetchall()


def xlsx_rows(path: str) -> list[list[Any]]:
    """The cells of the first sheet of an xlsx file XlsxWriter wrote, row by row (None where empty)."""
    ns = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
    with zipfile.ZipFile(path) as z:
        shared = []
        if "xl/sharedStrings.xml" in z.namelist():
            root = ET.fromstring(z.read("xl/sharedStrings.xml"))
            shared = ["".join(t.text or "" for t in si.iter(f"{{{ns['m']}}}t")) for si in root.findall("m:si", ns)]
        sheet = ET.fromstring(z.read("xl/worksheets/sheet1.xml"))
    out: list[list[Any]] = []
    for row in sheet.iter(f"{{{ns['m']}}}row"):
        cells: dict[int, Any] = {}
        for c in row.findall("m:c", ns):
            ref = "".join(ch for ch in c.get("r", "") if ch.isalpha())
            index = 0
            for ch in ref:
                index = index * 26 + ord(ch) - 64
            kind, v = c.get("t"), c.find("m:v", ns)
            if kind == "inlineStr":
                cells[index - 1] = "".join(t.text or "" for t in c.iter(f"{{{ns['m']}}}t"))
            elif kind == "s" and v is not None:
                cells[index - 1] = shared[int(v.text or 0)]
            elif kind == "b" and v is not None:
                cells[index - 1] = v.text == "1"
            elif v is not None:
                cells[index - 1] = float(v.text or "nan")
        out.append([cells.get(i) for i in range(max(cells) + 1 if cells else 0)])
    return out


def same_cell(got: Any, shown: Any) -> bool:
    if isinstance(shown, bool) or isinstance(got, bool):
        return got is shown
    if isinstance(shown, int | float) and isinstance(got, float):
        return got == float(shown)
    return bool(got == (None if shown is None else cell(shown)))


@pytest.mark.parametrize("fmt", list(TABLES))
async def test_every_type_round_trips(
    server: RunningServer, rest: httpx.AsyncClient, every_type: dict[str, Path], fmt: str
) -> None:
    async with clients(server, rest) as both:
        await round_trip(server, both, every_type, fmt)


async def round_trip(server: RunningServer, both: Both, every_type: dict[str, Path], fmt: str) -> None:
    """profile, query (json, csv, summary, each column), get_result, samples and exports of one file."""
    cols, path = TABLES[fmt], every_type[fmt]
    name = path.name
    expected = rows_of(cols)
    types = {"id": "INTEGER" if fmt == "parquet" else "BIGINT", **{c.name: c.duck for c in cols}}

    # profile_dataset: the file's types, its values shown by the rule, exact extremes of numbers and times.
    for via in VIAS:
        prof = await both.call(via, "profile_dataset", {"file_path": name, "max_tokens": 20000, "detail": "full"})
        assert prof["truncated"] is False and prof["statistics"]["row_count"] == 3
        profiled = {c["name"]: c for c in prof["schema"]["columns"]}
        for c in cols:
            p = profiled[c.name]
            assert p["duckdb_type"] == c.duck, (fmt, c.name, p)
            assert p["sample_values"] == [v for i, v in enumerate(c.shown) if v not in c.shown[:i]], (fmt, c.name, p)
            assert p["null_pct"] == pytest.approx(33.33, abs=0.01), (fmt, c.name)
            if p["type"] in ("int64", "float64", "datetime"):
                assert {p["stats"]["min"], p["stats"]["max"]} == set(c.shown), (fmt, c.name, p["stats"])

    # execute_query: every column at once (as json and as csv), then each column on its own.
    query = {"query_type": "sql", "files": [name], "query": "SELECT * FROM data ORDER BY id", "max_tokens": 20000}
    answers = [await both.call(via, "execute_query", query) for via in VIAS]
    for out in answers:
        assert out["degradation"] == "none" and out["rows_total"] == 3
        assert dict(zip(out["columns"], out["column_types"], strict=True)) == types
        assert out["data"] == expected, fmt
    qid = answers[0]["query_id"]
    for via in VIAS:
        as_csv = await both.call(via, "execute_query", {**query, "return_format": "csv"})
        parsed = [next(csv.reader(io.StringIO(line))) for line in as_csv["data"]]
        assert parsed == [list(types)] + [[cell(row[n]) for n in types] for row in expected], fmt
        summary = await both.call(via, "execute_query", {**query, "return_format": "summary"})
        stats = summary["rest_summary"]["columns"]
        assert stats["tstz" if "tstz" in stats else "s"]["null_pct"] == pytest.approx(33.33, abs=0.01)
    for i, c in enumerate(cols):
        one = await both.call(
            VIAS[i % 2],
            "execute_query",
            {"query_type": "sql", "files": [name], "query": f"SELECT {c.name} FROM data ORDER BY id"},
        )
        assert one["column_types"] == [c.duck] and one["data"] == rows_of(cols, [c.name]), (fmt, c.name)

    # get_result and stream_sample answer the same rows.
    for via in VIAS:
        page = await both.call(via, "get_result", {"query_id": qid, "offset": 0, "limit": 10})
        assert page["rows"] == expected
        head = await both.call(via, "stream_sample", {"file_path": name, "strategy": "head", "sample_size": 3})
        assert head["sample"] == expected
        rnd = await both.call(via, "stream_sample", {"file_path": name, "strategy": "random", "sample_size": 3})
        assert sorted(rnd["sample"], key=lambda r: r["id"]) == expected
        strat = await both.call(
            via,
            "stream_sample",
            {"file_path": name, "strategy": "stratified", "stratify_column": cols[-1].name, "sample_size": 3},
        )
        assert sorted(strat["sample"], key=lambda r: r["id"]) == expected

    # export_result in every format; DuckDB reads the files back to the same values, xlsx cells follow
    # the rule of answers.
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    source = make_source("src", str(path), [path]).sql()
    names = list(types)
    for via in VIAS:
        for out_fmt in ("csv", "parquet", "json", "xlsx"):
            made = await both.call(
                via,
                "export_result",
                {"query_id": qid, "destination": f"types_{fmt}_{via}", "format": out_fmt, "compression": "none"},
            )
            assert made["row_count"] == 3
            written = str(exported(server, made["files_created"][0]))
            if out_fmt == "xlsx":
                sheet = xlsx_rows(written)
                assert sheet[0] == names
                for cells, row in zip(sheet[1:], expected, strict=True):
                    cells = cells + [None] * (len(names) - len(cells))
                    assert all(same_cell(g, row[n]) for g, n in zip(cells, names, strict=True)), (fmt, cells, row)
                continue
            back = texts(con, reread(out_fmt, written, types), types)
            want = texts(con, source, types)
            differ = [(n, [r[i] for r in back], [r[i] for r in want]) for i, n in enumerate(names)]
            assert [d for d in differ if d[1] != d[2]] == [], (fmt, out_fmt)
    con.close()


async def test_every_type_charts(server: RunningServer, rest: httpx.AsyncClient, every_type: dict[str, Path]) -> None:
    """Charts over columns of the awkward types: decimals and huge integers as values, timestamps,
    intervals and unicode text as labels."""
    async with clients(server, rest) as both:
        await charts(both)


async def charts(both: Both) -> None:
    """Each chart type over REST and MCP."""
    cases = [
        ("every_type.parquet", "bar", "SELECT tstz, d18 FROM data ORDER BY id"),
        ("every_type.parquet", "line", "SELECT tsns, bi, ub FROM data ORDER BY id"),
        ("every_type.parquet", "scatter", "SELECT d38, d18 FROM data"),
        ("every_type.parquet", "histogram", "SELECT ub FROM data"),
        ("every_type.parquet", "heatmap", "SELECT s, iv, d18 FROM data"),
        ("every_type.csv", "bar", "SELECT tstz, hi FROM data ORDER BY id"),
        ("every_type.ndjson", "line", "SELECT ts, ub FROM data ORDER BY id"),
    ]
    for i, (file, kind, sql) in enumerate(cases):
        for via in VIAS:
            out = await both.call(
                via,
                "execute_query",
                {
                    "query_type": "sql",
                    "files": [file],
                    "query": sql,
                    "generate_chart": True,
                    "chart_type": kind,
                    "chart_format": "both" if i % 2 else "vega-lite",
                },
            )
            assert out["visualization"] is not None, (file, kind)
            assert len(out["data"]) == 3 and out["rows_total"] == 3


async def test_types_no_file_keeps_come_back_exact(server: RunningServer, rest: httpx.AsyncClient) -> None:
    """ENUM, UHUGEINT and HUGEINT (every sum of integers) exist only in a query: Parquet, the result
    store's format, would keep a HUGEINT as a DOUBLE; a TIMESTAMPTZ made in SQL renders in UTC."""
    async with clients(server, rest) as both:
        await query_made(both)


async def query_made(both: Both) -> None:
    """The values of the query-made types, answered, paged and read back as a view."""
    sql = (
        "SELECT 'happy'::ENUM('sad', 'ok', 'happy') AS mood, 12345678901234567890123456789::UHUGEINT AS uh,"
        " 7::UHUGEINT AS uh_small, sum(x) AS total, 123456789012345678901234567890::HUGEINT AS h,"
        " [sum(x), 1::HUGEINT << 70] AS sums, TIMESTAMPTZ '2025-01-01 10:00:00+02' AS at,"
        f" {GAP} AS gap, [INTERVAL '-1 month 1 microsecond'] AS gaps FROM range(4) t(x)"
    )
    gap = duckdb.execute(f"SELECT CAST({GAP} AS VARCHAR)").fetchall()[0]
    row = {
        "mood": "happy",
        "uh": "12345678901234567890123456789",
        "uh_small": 7,
        "total": 6,
        "h": "123456789012345678901234567890",
        "sums": [6, "1180591620717411303424"],
        "at": "2025-01-01T08:00:00+00:00",
        "gap": gap[0],
        "gaps": ["-1 month 00:00:00.000001"],
    }
    for via in VIAS:
        out = await both.call(via, "execute_query", {"query_type": "sql", "files": [], "query": sql})
        assert out["data"] == [row]
        assert out["column_types"][:5] == ["ENUM('sad', 'ok', 'happy')", "UHUGEINT", "UHUGEINT", "HUGEINT", "HUGEINT"]
        page = await both.call(via, "get_result", {"query_id": out["query_id"]})
        assert page["rows"] == [row]
        again = await both.call(
            via,
            "execute_query",
            {"query_type": "sql", "files": [out["query_id"]], "query": f"SELECT total + 1 AS n FROM {out['query_id']}"},
        )
        assert again["data"] == [{"n": 7}]
    # A HUGEINT column past 38 digits is stored as its exact text, the others as numbers still.
    widest = (
        "SELECT 170141183460469231731687303715884105727::HUGEINT AS biggest, 1::HUGEINT AS one,"
        " 340282366920938463463374607431768211455::UHUGEINT AS ubiggest"
    )
    for via in VIAS:
        out = await both.call(via, "execute_query", {"query_type": "sql", "files": [], "query": widest})
        assert out["data"] == [
            {
                "biggest": "170141183460469231731687303715884105727",
                "one": 1,
                "ubiggest": "340282366920938463463374607431768211455",
            }
        ]
