"""Benchmark the datasets tools on a generated 10M-row CSV (over 1 GB) and its Parquet copy.

Runs a Cairn server in this process (embedded PostgreSQL in a temporary directory, datasets feature
only, one admin key, the data root in /tmp) and measures through real MCP client sessions:

* a group-by and a filtered count through `execute_query`, against the same SQL in plain DuckDB in
  the same run (same memory limit and threads) — the overhead ratio;
* `profile_dataset` time per GB (streaming, within the DuckDB memory limit);
* `stream_sample` latency per strategy;
* the cache: a repeated query answered from the cache.

Each server timing is a cold run (the cache is invalidated first), after one unmeasured run of the
same query on each side. Files are generated under
/tmp/cairn-bench-datasets and removed afterwards. Usage::

    python scripts/bench_datasets.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEY = "bench-datasets-key-0123456789abcdef"
DATA = Path("/tmp/cairn-bench-datasets")
MEMORY_LIMIT = "2GB"
THREADS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def generate(rows: int) -> tuple[Path, Path, float]:
    """sales.csv (about 125 bytes a row) and sales.parquet with `rows` rows; returns their paths and the
    seconds taken."""
    import duckdb

    DATA.mkdir(parents=True, exist_ok=True)
    csv_path, pq_path = DATA / "sales.csv", DATA / "sales.parquet"
    started = time.perf_counter()
    con = duckdb.connect(config={"memory_limit": MEMORY_LIMIT, "threads": THREADS})
    con.execute(f"""
        CREATE VIEW gen AS SELECT
            i AS order_id,
            DATE '2020-01-01' + CAST(i % 1826 AS INTEGER) AS order_date,
            ['books','games','garden','music','toys','tools','food','sport','baby','beauty',
             'auto','home','office','pets','shoes','bags','watch','phone','tv','audio'][1 + (hash(i) % 20)::INT]
                AS category,
            ['north','south','east','west','central','islands','coast','mountain'][1 + (hash(i * 7) % 8)::INT]
                AS region,
            round((hash(i * 13) % 100000) / 100.0, 2) AS revenue,
            1 + (hash(i * 17) % 9)::INT AS quantity,
            'customer-' || (hash(i * 19) % 250000)::VARCHAR AS customer,
            'order note ' || (hash(i * 23) % 1000000)::VARCHAR
                || ' shipped in standard packaging via ground freight' AS note
        FROM range({rows}) t(i)""")
    con.execute(f"COPY gen TO '{csv_path}' (HEADER true)")
    con.execute(f"COPY (SELECT * FROM read_csv_auto('{csv_path}')) TO '{pq_path}' (FORMAT parquet, COMPRESSION zstd)")
    con.close()
    return csv_path, pq_path, time.perf_counter() - started


class InProcessServer:
    """Embedded PostgreSQL plus a uvicorn thread serving the datasets feature."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cairn-bench-ds-"))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        import uvicorn

        from app.core.config import Settings
        from app.core.pgembedded import start_embedded
        from app.datasets.config import get_dataset_settings
        from app.main import create_app

        os.environ.update(
            {
                "CAIRN_DATA_ROOTS": str(DATA),
                "CAIRN_DATASETS_MEMORY_LIMIT": MEMORY_LIMIT,
                "CAIRN_DATASETS_THREADS": str(THREADS),
                "CAIRN_DATASETS_QUERY_TIMEOUT_MS": "600000",
                "CAIRN_DATASETS_WORK_DIR": str(self.root / "work"),
            }
        )
        get_dataset_settings.cache_clear()
        self.pg = start_embedded(self.root / "pg")
        self.pg.ensure_database("bench")
        settings = Settings(
            database_url=self.pg.url("bench"),
            host="127.0.0.1",
            port=self.port,
            api_keys=[f"{KEY}:admin"],
            data_dir=self.root / "data",
            log_level="WARNING",
            features=["datasets"],
        )
        app = create_app(settings)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("bench server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.pg.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@asynccontextmanager
async def session(url: str) -> AsyncIterator[Any]:
    """An MCP client session over streamable HTTP."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=httpx2.Timeout(900.0)) as h:
        async with streamable_http_client(f"{url}/mcp/datasets", http_client=h) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client


async def call(client: Any, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    res = await client.call_tool(tool, args)
    elapsed = time.perf_counter() - started
    if res.is_error:
        raise RuntimeError(f"{tool} failed: {res.content[0].text[:300]}")
    return res.structured_content, elapsed


def plain(sql: str) -> float:
    """The same SQL in plain DuckDB (same limits), seconds."""
    import duckdb

    con = duckdb.connect(config={"memory_limit": MEMORY_LIMIT, "threads": THREADS})
    started = time.perf_counter()
    con.execute(sql).fetchall()
    elapsed = time.perf_counter() - started
    con.close()
    return elapsed


QUERIES = {
    "group-by": "SELECT category, region, sum(revenue) AS total, count(*) AS orders, avg(quantity) AS q "
    "FROM {src} GROUP BY ALL ORDER BY total DESC",
    "filtered count": "SELECT count(*) AS n FROM {src} WHERE revenue > 500 AND region = 'north'",
}


async def measure(url: str, csv_path: Path, pq_path: Path, reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"queries": [], "profile": [], "samples": []}
    async with session(url) as client:
        for fmt, path, fn in (("csv", csv_path, "read_csv_auto"), ("parquet", pq_path, "read_parquet")):
            src = f"{fn}('{path}')"
            for name, template in QUERIES.items():
                sql = template.format(src=src)
                server_t, plain_t = [], []
                rows = tokens = 0
                args = {"query_type": "sql", "query": sql, "files": [], "return_limit": 200}
                # Once unmeasured, each side: the first call on a file also sniffs it and opens a database.
                await call(client, "execute_query", args)
                await asyncio.to_thread(plain, sql)
                for rep in range(reps):
                    await call(client, "cache_invalidate", {"pattern": "*"})
                    if rep % 2:  # alternate which side goes first
                        plain_t.append(await asyncio.to_thread(plain, sql))
                    res, t = await call(client, "execute_query", args)
                    server_t.append(t)
                    rows, tokens = res["rows_total"], res["context_tokens_used"]
                    if not rep % 2:
                        plain_t.append(await asyncio.to_thread(plain, sql))
                s, p = statistics.median(server_t), statistics.median(plain_t)
                out["queries"].append(
                    {
                        "file": fmt,
                        "query": name,
                        "server s": f"{s:.2f}",
                        "plain DuckDB s": f"{p:.2f}",
                        "overhead": f"{s / p:.2f}x",
                        "result rows": rows,
                        "tokens": tokens,
                    }
                )
            again = {
                "query_type": "sql",
                "files": [],
                "return_limit": 200,
                "query": QUERIES["group-by"].format(src=src),
            }
            await call(client, "execute_query", again)
            hit, cached = await call(client, "execute_query", again)
            label = "group-by, cached" if hit["summary"]["cache_hit"] else "group-by, cache MISSED"
            out["queries"].append(
                {
                    "file": fmt,
                    "query": label,
                    "server s": f"{cached:.3f}",
                    "plain DuckDB s": "",
                    "overhead": "",
                    "result rows": "",
                    "tokens": "",
                }
            )
            size = path.stat().st_size
            await call(client, "cache_invalidate", {"pattern": "*"})
            prof, t = await call(client, "profile_dataset", {"file_path": path.name, "compute_stats": True})
            out["profile"].append(
                {
                    "file": fmt,
                    "size": f"{size / 1e9:.2f} GB",
                    "rows": prof["statistics"]["row_count"],
                    "seconds": f"{t:.1f}",
                    "s per GB": f"{t / (size / 1e9):.1f}",
                    "tokens": prof["context_tokens_used"],
                }
            )
            for strategy in ("head", "random", "systematic", "stratified"):
                args = {"file_path": path.name, "strategy": strategy, "sample_size": 20}
                if strategy == "stratified":
                    args["stratify_column"] = "category"
                res, t = await call(client, "stream_sample", args)
                out["samples"].append(
                    {
                        "file": fmt,
                        "strategy": strategy,
                        "ms": f"{t * 1000:.0f}",
                        "rows": res["sampling_info"]["rows_sampled"],
                        "tokens": res["context_tokens_used"],
                    }
                )
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def run(quick: bool = False) -> str:
    """Generate the files, serve, measure; returns a markdown section."""
    rows = 300_000 if quick else 10_000_000
    reps = 1 if quick else 5
    csv_path, pq_path, gen_s = generate(rows)
    server = InProcessServer()
    server.start()
    try:
        figures = asyncio.run(measure(server.url, csv_path, pq_path, reps))
    finally:
        server.stop()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    csv_gb, pq_gb = csv_path.stat().st_size / 1e9, pq_path.stat().st_size / 1e9
    shutil.rmtree(DATA, ignore_errors=True)
    return "\n".join(
        [
            f"Generated {rows:,} rows: CSV {csv_gb:.2f} GB, Parquet {pq_gb:.2f} GB ({gen_s:.0f} s). "
            f"DuckDB memory limit {MEMORY_LIMIT}, {THREADS} threads, for the server and the plain-DuckDB "
            f"baseline alike. Server timings are MCP `tools/call` round trips on a cold cache (median of {reps}, "
            "after one unmeasured call per query on each side, the two sides alternating which goes first); "
            "they include checking the SQL, writing the "
            "full result to the Parquet result store and fitting the answer to the token budget.",
            "",
            "**Queries** (through the server vs plain DuckDB, same SQL, same run)",
            "",
            _table(figures["queries"]),
            "",
            "**profile_dataset** (one streaming SUMMARIZE pass plus category histograms)",
            "",
            _table(figures["profile"]),
            "",
            "**stream_sample** latency (20 rows)",
            "",
            _table(figures["samples"]),
            "",
            f"Peak resident memory of the whole process (server, PostgreSQL client, DuckDB): {rss_mb:.0f} MB.",
            "",
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    print(run(quick=parser.parse_args().quick))
