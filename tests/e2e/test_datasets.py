"""Datasets over both transports on real files: a generated sales set and the palmerpenguins CSV."""

from __future__ import annotations

import base64
import csv
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.core.embeddings.tokens import count_tokens
from tests.support.datasets import exported, penguins_csv, python_engine_on, root_of
from tests.support.server import READ_KEY, RunningServer, error_of, mcp_client, text_of

pytestmark = pytest.mark.asyncio(loop_scope="session")
CATEGORIES = ["books", "games", "garden", "music", "toys"]


@pytest.fixture
def data(server: RunningServer) -> Path:
    """A root holding sales_2023.csv, sales_2024.csv, sales.parquet-free CSVs and penguins.csv."""
    root = root_of(server)
    rng = random.Random(7)
    for year in (2023, 2024):
        path = root / f"sales_{year}.csv"
        if path.exists():
            continue
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["order_id", "year", "category", "revenue", "quantity", "note"])
            for i in range(2000):
                w.writerow(
                    [
                        f"{year}-{i}",
                        year,
                        CATEGORIES[i % 5] if i % 50 else "rare",
                        round(rng.uniform(1, 500), 2),
                        rng.randint(1, 9),
                        "" if i % 4 else "promo",
                    ]
                )
    if not (root / "penguins.csv").exists():
        shutil.copy(penguins_csv(), root / "penguins.csv")
    return root


async def post(rest: httpx.AsyncClient, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    r = await rest.post(f"/api/v1{path}", json=body)
    assert r.status_code == status, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_profile_rest_and_mcp(server: RunningServer, rest: httpx.AsyncClient, data: Path) -> None:
    # The server is the session's: another test may have profiled this file already.
    await post(rest, "/datasets/cache/invalidate", {"file_path": "penguins.csv"})
    out = await post(rest, "/datasets/profile", {"file_path": "penguins.csv", "detail": "full"})
    cols = {c["name"]: c for c in out["schema"]["columns"]}
    assert out["statistics"]["row_count"] == 344 and out["statistics"]["column_count"] == 8
    assert cols["species"]["type"] == "category" and cols["species"]["unique_count"] == 3
    assert cols["species"]["stats"]["top_values"][0] == ["Adelie", 152]
    assert cols["bill_length_mm"]["type"] == "float64" and 0 < cols["bill_length_mm"]["null_pct"] < 1
    assert cols["year"]["type"] == "int64" and cols["year"]["stats"]["min"] == 2007
    assert 0.9 < out["statistics"]["quality_score"] <= 1
    assert out["context_tokens_used"] > 50 and out["truncated"] is False and out["cache_hit"] is False
    small = await post(rest, "/datasets/profile", {"file_path": "penguins.csv", "max_tokens": 300})
    assert small["truncated"] is True and small["context_tokens_used"] <= 300
    assert "columns island, " in small["cut"]["left_out"] and small["cut"]["next_call"]["tool"] == "profile_dataset"
    again = await post(rest, "/datasets/profile", {"file_path": "penguins.csv"})
    assert again["cache_hit"] is True and again["statistics"] == out["statistics"]
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool(
            "profile_dataset", {"file_path": "sales_*.csv", "compute_stats": False, "max_tokens": 300, "detail": "full"}
        )
        assert not res.is_error, res.content
        prof = res.structured_content
        assert prof["statistics"]["row_count"] == 4000 and prof["files"] == 2
        assert prof["context_tokens_used"] <= 300
        notes = {c["name"]: c for c in prof["schema"]["columns"]}
        if "note" in notes:
            assert notes["note"]["null_pct"] == pytest.approx(75.0, abs=0.5)


async def test_query_budget_cache_and_paging(server: RunningServer, rest: httpx.AsyncClient, data: Path) -> None:
    sql = (
        "SELECT category, SUM(revenue) AS total, COUNT(*) AS orders FROM read_csv_auto('sales_*.csv') "
        "GROUP BY category ORDER BY total DESC"
    )
    body = {
        "query_type": "sql",
        "engine": "duckdb",
        "query": sql,
        "files": [],
        "return_limit": 20,
        "cache_key": "sales-by-category",
    }
    first = await post(rest, "/datasets/query", body)
    assert first["result_type"] == "aggregation" and first["rows_total"] == 6
    assert first["columns"] == ["category", "total", "orders"]
    assert sum(r["orders"] for r in first["data"]) == 4000
    assert first["summary"]["cache_hit"] is False and first["summary"]["engine_used"] == "duckdb"
    assert first["truncated"] is False and first["degradation"] == "none"
    second = await post(rest, "/datasets/query", {**body, "query": sql.replace("SELECT", "select  ") + " -- again"})
    assert second["summary"]["cache_hit"] is True and second["query_id"] == first["query_id"]
    # A big result under a small budget degrades and says so.
    big = await post(
        rest,
        "/datasets/query",
        {
            "query_type": "sql",
            "files": ["sales_2024.csv"],
            "query": "SELECT * FROM sales_2024 ORDER BY order_id",
            "return_limit": 500,
            "max_tokens": 600,
        },
    )
    assert big["rows_total"] == 2000 and big["truncated"] is True
    assert big["context_tokens_used"] <= 600 and big["rows_returned"] < 500
    assert big["degradation"] in ("rows_and_summary", "summary_only")
    if big["degradation"] == "rows_and_summary":
        assert big["rest_summary"]["rows"] == 2000 - big["rows_returned"]
    assert "sales_2024" in big["views"] and "data" in big["views"]
    # context_tokens_used is the exact WordPiece count of the response as sent.
    sent = count_tokens(json.dumps(big, ensure_ascii=False, separators=(",", ":")))
    assert 0 <= sent - big["context_tokens_used"] <= 1  # exact, or one under when no value counts itself
    # Paging the stored result without re-running it (MCP), then reusing it as a table.
    async with mcp_client(server.url) as mcp:
        page = await mcp.call_tool("get_result", {"query_id": big["query_id"], "offset": 1990, "limit": 50})
        assert not page.is_error, page.content
        pc = page.structured_content
        assert len(pc["rows"]) == 10 and pc["next_offset"] is None and pc["rows_total"] == 2000
        reuse = await mcp.call_tool(
            "execute_query",
            {
                "query_type": "sql",
                "files": [big["query_id"]],
                "query": f"SELECT count(*) AS n, max(order_id) AS last FROM {big['query_id']}",
            },
        )
        assert not reuse.is_error, reuse.content
        assert reuse.structured_content["data"] == [{"n": 2000, "last": "2024-999"}]
    # csv and summary formats.
    as_csv = await post(
        rest,
        "/datasets/query",
        {
            "query_type": "sql",
            "query": "SELECT species, count(*) AS n FROM data GROUP BY 1 ORDER BY 1",
            "files": ["penguins.csv"],
            "return_format": "csv",
        },
    )
    assert as_csv["data"] == ["species,n", "Adelie,152", "Chinstrap,68", "Gentoo,124"]
    summ = await post(
        rest,
        "/datasets/query",
        {
            "query_type": "sql",
            "query": "SELECT body_mass_g FROM penguins",
            "files": ["penguins.csv"],
            "return_format": "summary",
        },
    )
    assert summ["data"] == [] and summ["rest_summary"]["columns"]["body_mass_g"]["max"] == 6300


async def test_query_errors_and_sandbox(server: RunningServer, rest: httpx.AsyncClient, data: Path) -> None:
    async def refused(query: str, files: list[str] | None = None, **extra: Any) -> dict[str, Any]:
        r = await rest.post(
            "/api/v1/datasets/query", json={"query_type": "sql", "query": query, "files": files or [], **extra}
        )
        assert r.status_code >= 400, (query, r.text)
        return r.json()["error"]  # type: ignore[no-any-return]

    for ok in [
        "DESCRIBE data",
        "SUMMARIZE data",
        "EXPLAIN SELECT * FROM data",
        "FROM data LIMIT 2",
        "WITH x AS (SELECT * FROM data) SELECT count(*) AS n FROM x",
    ]:
        good = await post(rest, "/datasets/query", {"query_type": "sql", "query": ok, "files": ["penguins.csv"]})
        assert good["rows_total"] >= 1, ok
    err = await refused("SELECT revenu FROM sales_2024", ["sales_2024.csv"])
    assert err["code"] == 4003 and "Did you mean 'revenue'?" in err["message"]
    assert (await refused("SELEC 1"))["code"] == 4004
    for q in [
        "COPY (SELECT 1) TO 'out.csv'",
        "ATTACH 'x.duckdb'",
        "INSTALL httpfs",
        "LOAD json",
        "SET enable_external_access = true",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_csv_auto('/etc/passwd')",
        "SELECT * FROM read_csv_auto('../../../etc/passwd')",
        "SELECT 1; SELECT 2",
        "CREATE TABLE t AS SELECT 1",
        "SELECT * FROM 'https://example.com/a.csv'",
        "SELECT * FROM query('SELECT 1')",
        "PRAGMA version",
    ]:
        e = await refused(q)
        assert e["code"] == 4030, (q, e)
    # Built at run time, so only DuckDB's own lock can stop it.
    e = await refused("SELECT * FROM read_csv_auto(chr(47) || 'etc' || chr(47) || 'passwd')")
    assert e["code"] == 4030 and "sandbox" in e["message"]
    e = await refused(
        "SELECT count(*) FROM range(100000) a, range(100000) b WHERE hash(a.range + b.range) = 0", timeout_ms=400
    )
    assert e["code"] == 5003
    r = await rest.post("/api/v1/datasets/profile", json={"file_path": "/etc/passwd"})
    assert r.status_code == 403 and r.json()["error"]["code"] == 4030
    r = await rest.post("/api/v1/datasets/profile", json={"file_path": "nope.csv"})
    assert r.status_code == 404 and r.json()["error"]["code"] == 4002
    async with mcp_client(server.url) as mcp:
        e2 = error_of(await mcp.call_tool("execute_query", {"query_type": "python", "query": "1", "files": []}))
        assert e2["code"] == 4001 and "disabled" in e2["message"]
        e3 = error_of(
            await mcp.call_tool(
                "execute_query", {"query_type": "sql", "files": [], "query": "SELECT * FROM read_blob('/etc/hostname')"}
            )
        )
        assert e3["code"] == 4030


async def test_sampling(server: RunningServer, rest: httpx.AsyncClient, data: Path) -> None:
    base = {"file_path": "penguins.csv", "sample_size": 9}
    r1 = await post(rest, "/datasets/sample", {**base, "strategy": "random", "seed": 3})
    r2 = await post(rest, "/datasets/sample", {**base, "strategy": "random", "seed": 3})
    r3 = await post(rest, "/datasets/sample", {**base, "strategy": "random", "seed": 4})
    assert r1["sample"] == r2["sample"] and r1["sample"] != r3["sample"]
    assert r1["sampling_info"]["total_rows"] == 344 and r1["sampling_info"]["rows_sampled"] == 9
    strat = await post(
        rest,
        "/datasets/sample",
        {
            "file_path": "sales_2023.csv",
            "strategy": "stratified",
            "stratify_column": "category",
            "sample_size": 12,
            "columns": ["category", "revenue"],
        },
    )
    cats = {row["category"] for row in strat["sample"]}
    assert cats == {*CATEGORIES, "rare"} and len(strat["sample"]) == 12
    assert set(strat["sample"][0]) == {"category", "revenue"}
    async with mcp_client(server.url, key=READ_KEY) as mcp:
        sysm = await mcp.call_tool(
            "stream_sample",
            {
                "file_path": "sales_2023.csv",
                "strategy": "systematic",
                "sample_size": 4,
                "columns": ["order_id"],
                "seed": 0,
            },
        )
        assert not sysm.is_error, sysm.content
        ids = [row["order_id"] for row in sysm.structured_content["sample"]]
        assert ids == ["2023-0", "2023-500", "2023-1000", "2023-1500"]
        head = await mcp.call_tool(
            "stream_sample", {"file_path": "penguins.csv", "strategy": "head", "sample_size": 100, "max_tokens": 400}
        )
        hc = head.structured_content
        assert hc["truncated"] is True and hc["context_tokens_used"] <= 400 and 0 < len(hc["sample"]) < 100
        k = len(hc["sample"])
        assert hc["sampling_info"]["rows_sampled"] == k and hc["cut"]["left_out"] == f"sampled rows {k + 1}-100 of 100"
        assert hc["cut"]["next_call"] == {"tool": "stream_sample", "args": {"offset": k}}
        bad = error_of(await mcp.call_tool("stream_sample", {"file_path": "penguins.csv", "columns": ["spieces"]}))
        assert bad["code"] == 4003 and "species" in bad["message"]


async def test_export_and_registry(server: RunningServer, rest: httpx.AsyncClient, data: Path) -> None:
    q = await post(
        rest,
        "/datasets/query",
        {"query_type": "sql", "files": ["penguins.csv"], "query": "SELECT species, island, body_mass_g FROM penguins"},
    )
    qid = q["query_id"]
    page = (await rest.get(f"/api/v1/datasets/results/{qid}", params={"offset": 340, "limit": 10})).json()
    assert page["offset"] == 340 and len(page["rows"]) == 4 and page["next_offset"] is None
    assert (await rest.get("/api/v1/datasets/results/q_0000000000000000")).status_code == 404
    out = await post(rest, "/datasets/export", {"query_id": qid, "destination": "exports", "format": "parquet"})
    assert out["exported"] and out["row_count"] == 344 and out["files_created"] == [f"exports/{qid}.parquet"]
    assert out["output_path"] == f"exports/{qid}.parquet" and "files" not in out and "cut" not in out
    assert exported(server, out["output_path"]).is_file()
    again = await rest.post("/api/v1/datasets/export", json={"query_id": qid, "destination": "exports"})
    assert again.status_code == 409
    part = await post(
        rest,
        "/datasets/export",
        {
            "query_id": qid,
            "destination": "exports",
            "format": "csv",
            "partition_by": "species",
            "compression": "gzip",
            "filename": "by_species",
        },
    )
    # A partitioned export answers with one pattern naming every file and a count (about 50 tokens
    # however many files): nothing is left out, so no cut.
    assert part["files_created"] == [] and part["files_total"] == 3 and "cut" not in part
    assert part["output_path"] == "exports/by_species"
    assert part["files_pattern"] == "exports/by_species/species=*/*.csv.gz"
    assert count_tokens(json.dumps(part, separators=(",", ":"))) <= 90
    listed = (await rest.get("/api/v1/datasets", params={"files_under": part["output_path"]})).json()
    assert len(listed["files"]) == 3 and all(
        f["path"].startswith("exports/by_species/species=") for f in listed["files"]
    )
    read_back = await post(
        rest, "/datasets/query", {"files": [part["files_pattern"]], "query": "SELECT count(*) AS n FROM data"}
    )
    assert read_back["data"] == [{"n": 344}]
    sized = await post(
        rest,
        "/datasets/export",
        {
            "query_id": qid,
            "destination": "exports",
            "format": "csv",
            "partition_by": "species",
            "filename": "sized",
            "list_files": True,
        },
    )
    assert len(sized["files_created"]) == 3 and all(f["size_bytes"] > 100 for f in sized["files"])
    assert sized["files_created"] == [f["path"] for f in sized["files"]] and "cut" not in sized
    assert all(exported(server, p).is_file() for p in sized["files_created"])
    xl = await post(rest, "/datasets/export", {"query_id": qid, "destination": "exports", "format": "xlsx"})
    assert exported(server, xl["output_path"]).read_bytes()[:2] == b"PK"
    js = await post(
        rest, "/datasets/export", {"query_id": qid, "destination": "exports", "format": "json", "compression": "none"}
    )
    first = json.loads(exported(server, js["output_path"]).read_bytes().decode().splitlines()[0])
    assert set(first) == {"species", "island", "body_mass_g"}
    r = await rest.post("/api/v1/datasets/export", json={"query_id": qid, "destination": "/tmp"})
    assert r.status_code == 403
    # The exported parquet reads back as a dataset by the path the export reported.
    back = await post(
        rest,
        "/datasets/query",
        {"query_type": "sql", "files": [out["output_path"]], "query": "SELECT count(*) AS n FROM data"},
    )
    assert back["data"] == [{"n": 344}]
    profiled = await post(rest, "/datasets/profile", {"file_path": out["output_path"]})
    assert profiled["statistics"]["row_count"] == 344 and profiled["format"] == "parquet"
    # Registry: a name for a glob, usable as file_path and as a view.
    reg = await post(rest, "/datasets/register", {"name": "sales", "path": "sales_*.csv", "description": "orders"})
    assert reg["created"] is True and reg["dataset"]["format"] == "csv"
    listed = (await rest.get("/api/v1/datasets")).json()
    assert [d["name"] for d in listed["datasets"]] == ["sales"]
    assert {"penguins.csv", "sales_2023.csv"} <= {f["path"] for f in listed["files"]}
    async with mcp_client(server.url) as mcp:
        sql = "SELECT year, count(*) AS n FROM sales GROUP BY 1 ORDER BY 1"
        res = await mcp.call_tool("execute_query", {"query_type": "sql", "files": ["sales"], "query": sql})
        assert res.structured_content["data"] == [{"year": 2023, "n": 2000}, {"year": 2024, "n": 2000}]
    async with mcp_client(server.url, key=READ_KEY) as mcp:
        denied = error_of(await mcp.call_tool("register_dataset", {"name": "x", "path": "penguins.csv"}))
        assert denied["code"] == 4030


async def test_cache_invalidate_and_file_change(server: RunningServer, rest: httpx.AsyncClient, data: Path) -> None:
    path = data / "small.csv"
    path.write_text("k,v\na,1\nb,2\n")
    body = {
        "query_type": "sql",
        "files": ["small.csv"],
        "query": "SELECT sum(v) AS s FROM small",
        "cache_key": "small-sum",
    }
    assert (await post(rest, "/datasets/query", body))["data"] == [{"s": 3}]
    assert (await post(rest, "/datasets/query", body))["summary"]["cache_hit"] is True
    out = await post(rest, "/datasets/cache/invalidate", {"pattern": "small-*"})
    assert out["invalidated_count"] == 1
    assert (await post(rest, "/datasets/query", body))["summary"]["cache_hit"] is False
    path.write_text("k,v\na,1\nb,2\nc,10\n")  # a changed file never hits the old entry
    fresh = await post(rest, "/datasets/query", body)
    assert fresh["data"] == [{"s": 13}] and fresh["summary"]["cache_hit"] is False
    out = await post(rest, "/datasets/cache/invalidate", {"file_path": "small.csv"})
    assert out["invalidated_count"] >= 1
    r = await rest.post("/api/v1/datasets/cache/invalidate", json={})
    assert r.status_code == 400


async def test_polars_expr_and_charts(server: RunningServer, rest: httpx.AsyncClient, data: Path) -> None:
    expr = """
    pl.scan_csv('sales_2024.csv')
      .filter(pl.col('revenue') > 100)
      .group_by('category')
      .agg([
        pl.col('revenue').sum().alias('total_revenue'),
        pl.col('quantity').count().alias('order_count')
      ])
      .sort('total_revenue', descending=True)
      .limit(3)
    """
    out = await post(
        rest, "/datasets/query", {"query_type": "polars_expr", "engine": "polars", "query": expr, "files": []}
    )
    assert out["columns"] == ["category", "total_revenue", "order_count"] and len(out["data"]) == 3
    same = await post(
        rest,
        "/datasets/query",
        {
            "query_type": "sql",
            "files": ["sales_2024.csv"],
            "query": "SELECT category, sum(revenue) AS total_revenue, count(quantity) AS order_count FROM data "
            "WHERE revenue > 100 GROUP BY 1 ORDER BY 2 DESC LIMIT 3",
        },
    )
    assert out["data"] == same["data"] and out["summary"]["engine_used"].startswith("polars_expr")
    for bad in [
        "__import__('os').system('id')",
        "pl.scan_csv('x.csv').pipe(print)",
        "pl.scan_csv('x.csv').filter(open('/etc/passwd'))",
        "pl.scan_csv('/etc/passwd')",
    ]:
        r = await rest.post("/api/v1/datasets/query", json={"query_type": "polars_expr", "query": bad, "files": []})
        assert r.json()["error"]["code"] in (4004, 4030), (bad, r.text)
    chart = await post(
        rest,
        "/datasets/query",
        {
            "query_type": "sql",
            "files": ["penguins.csv"],
            "generate_chart": True,
            "chart_type": "bar",
            "chart_format": "both",
            "query": "SELECT species, avg(body_mass_g) AS mass FROM data GROUP BY 1 ORDER BY 1",
        },
    )
    viz = chart["visualization"]
    png = base64.b64decode(viz["base64_image"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and viz["bytes"] == len(png) <= 48_000
    assert viz["vega_lite"]["mark"] == "bar" and len(viz["vega_lite"]["data"]["values"]) == 3
    assert chart["context_tokens_used"] < 2000 and len(chart["data"]) == 3
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool(
            "execute_query",
            {
                "query_type": "sql",
                "files": ["penguins.csv"],
                "return_format": "chart",
                "chart_type": "histogram",
                "query": "SELECT body_mass_g FROM data WHERE body_mass_g IS NOT NULL",
            },
        )
        assert not res.is_error, res.content
        sc = res.structured_content
        assert sc["result_type"] == "chart" and sc["data"] == [] and sc["visualization"]["type"] == "histogram"
        assert base64.b64decode(sc["visualization"]["base64_image"])[:4] == b"\x89PNG"
        images = [c for c in res.content if c.type == "image"]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        assert images[0].data == sc["visualization"]["base64_image"]
        assert sc["visualization"]["base64_image"] not in text_of(res)  # not twice in the context
        err = error_of(
            await mcp.call_tool(
                "execute_query",
                {
                    "query_type": "sql",
                    "files": [],
                    "return_format": "chart",
                    "chart_type": "scatter",
                    "query": "SELECT 'a' AS x",
                },
            )
        )
        assert err["code"] == 4001


@pytest.fixture
def python_enabled(server: RunningServer) -> Iterator[None]:
    """The operator switch on, with small limits, for one test."""
    yield from python_engine_on(server, cpu_seconds=2, memory_mb=768)


async def test_python_engine_when_enabled(
    server: RunningServer, rest: httpx.AsyncClient, data: Path, python_enabled: None
) -> None:
    code = "result = con.sql('SELECT species, count(*) AS n FROM penguins GROUP BY 1 ORDER BY 1')"
    out = await post(
        rest, "/datasets/query", {"query_type": "python", "engine": "pandas", "query": code, "files": ["penguins.csv"]}
    )
    assert out["data"] == [
        {"species": "Adelie", "n": 152},
        {"species": "Chinstrap", "n": 68},
        {"species": "Gentoo", "n": 124},
    ]
    assert out["summary"]["engine_used"] == "python" and out["query_id"].startswith("q_")
    for bad in [
        "import socket\nsocket.create_connection(('127.0.0.1', 80))",
        "open('/etc/passwd').read()",
        "import os\nos.system('id')",
        "import duckdb\nduckdb.connect()",
        "result = con.sql(\"SELECT * FROM read_text('/etc/passwd')\")",
    ]:
        r = await rest.post(
            "/api/v1/datasets/query", json={"query_type": "python", "query": bad, "files": ["penguins.csv"]}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == 4004, (bad, r.text)
    r = await rest.post(
        "/api/v1/datasets/query",
        json={"query_type": "python", "query": "while True: pass", "files": [], "timeout_ms": 6000},
    )
    assert r.json()["error"]["code"] == 5003, r.text
