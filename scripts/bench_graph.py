"""Benchmark the knowledge graph: write throughput, search latency at scale, and the reference server.

Runs a Cairn server in this process (embedded PostgreSQL in a temporary directory, graph feature
only, one admin key) and measures, through real MCP client sessions over streamable HTTP:

* **writes**: `create_entities` (batches of 50, 3 observations each) and `add_observations`;
* **search at scale**: `search_nodes` and `search_semantic` p50/p95 after bulk-loading 10k and 100k
  synthetic entities straight into the tables (random unit vectors instead of model embeddings, so the
  load takes seconds instead of an hour; the query side is unchanged: real query embedding, HNSW,
  full-text, limbic scoring, logging);
* **side by side** with the reference `@modelcontextprotocol/server-memory` (npx, stdio transport),
  same workload on both: create N entities with observations, then search_nodes queries.

Usage::

    python scripts/bench_graph.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "scripts"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_mcp import lexical_index_caught_up  # noqa: E402

KEY = "bench-graph-key-0123456789abcdef"
VOCAB = (
    "agent memory project deadline meeting review database query vector search summary preference error "
    "deployment server network storage backup invoice customer contract release feature ticket budget "
    "design model training report incident alert schedule migration cluster policy"
).split()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sentence(rng: random.Random, n: int = 10) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


class InProcessServer:
    """Embedded PostgreSQL plus a uvicorn thread serving the graph feature."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cairn-bench-graph-"))
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        import uvicorn

        from app.core.config import Settings
        from app.core.pgembedded import start_embedded
        from app.main import create_app

        self.pg = start_embedded(self.root / "pg")
        self.pg.ensure_database("bench")
        self.dsn = self.pg.libpq_uri("bench")
        settings = Settings(
            database_url=self.pg.url("bench"),
            host="127.0.0.1",
            port=self.port,
            api_keys=[f"{KEY}:admin"],
            data_dir=self.root / "data",
            log_level="WARNING",
            features=["graph"],
            rate_limit_per_second=0,
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
        self.thread.join(timeout=30)
        self.pg.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@asynccontextmanager
async def cairn_session(url: str, path: str = "/mcp/graph", timeout: float = 120.0) -> AsyncIterator[Any]:
    """An MCP client session on Cairn's `path` over streamable HTTP."""
    import httpx2
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=httpx2.Timeout(timeout)) as h:
        async with streamable_http_client(f"{url}{path}", http_client=h) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client


@asynccontextmanager
async def reference_session(memory_file: Path) -> AsyncIterator[Any]:
    """An MCP client session on the reference memory server (npx, stdio)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command="npx",
        args=["-y", "@modelcontextprotocol/server-memory"],
        env={**os.environ, "MEMORY_FILE_PATH": str(memory_file)},
    )
    with open(os.devnull, "w") as devnull:  # noqa: ASYNC230 - opening /dev/null does not block
        async with stdio_client(params, errlog=devnull) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            yield client


async def _ok(client: Any, tool: str, args: dict[str, Any]) -> Any:
    res = await client.call_tool(tool, args)
    if res.is_error:
        raise RuntimeError(f"{tool} failed: {res.content[0].text[:300]}")
    return res


def _entities(rng: random.Random, start: int, n: int, obs: int = 3) -> list[dict[str, Any]]:
    return [
        {"name": f"entity-{i}", "entityType": f"type{i % 10}", "observations": [_sentence(rng) for _ in range(obs)]}
        for i in range(start, start + n)
    ]


async def writes(client: Any, n: int, project: str) -> dict[str, Any]:
    """create_entities throughput (batches of 50) and add_observations throughput (batches of 20)."""
    rng = random.Random(1)
    t0 = time.perf_counter()
    for i in range(0, n, 50):
        await _ok(client, "create_entities", {"project": project, "entities": _entities(rng, i, min(50, n - i))})
    create_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    adds = n // 2
    for i in range(0, adds, 20):
        await _ok(
            client,
            "add_observations",
            {
                "project": project,
                "observations": [
                    {"entityName": f"entity-{j}", "contents": [_sentence(rng)]} for j in range(i, min(adds, i + 20))
                ],
            },
        )
    add_s = time.perf_counter() - t0
    return {
        "entities": n,
        "create_s": round(create_s, 2),
        "entities_per_s": round(n / create_s, 1),
        "observations_per_s_create": round(3 * n / create_s, 1),
        "add_observations_per_s": round(adds / add_s, 1),
    }


async def settled(conn: Any, timeout: float = 900.0) -> None:
    """Wait until no autovacuum worker runs: a bulk load sets them off, and their scans of the
    tables and indexes (an HNSW index's vacuum reads the whole graph) would be measured as search."""
    t0 = time.perf_counter()
    while await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"):
        if time.perf_counter() - t0 > timeout:
            return
        await asyncio.sleep(0.5)


async def bulk_load(dsn: str, project: str, total: int) -> tuple[float, float]:
    """Grow `project` to `total` synthetic entities (one observation, a random unit vector each)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        t0 = time.perf_counter()
        await conn.execute(
            "INSERT INTO projects (id, name) VALUES (gen_random_uuid(), $1) ON CONFLICT DO NOTHING", project
        )
        pid = await conn.fetchval("SELECT id FROM projects WHERE name = $1", project)
        have = await conn.fetchval("SELECT count(*) FROM graph_entities WHERE project_id = $1", pid)
        if have >= total:
            return 0.0, 0.0
        await conn.execute("SET maintenance_work_mem = '256MB'")
        await conn.execute("DROP INDEX IF EXISTS ix_graph_embeddings_hnsw")
        await conn.execute(
            """
            INSERT INTO graph_entities (project_id, name, entity_type, obs_text)
            SELECT $1, 'bulk-' || i, 'type' || (i % 20),
                   (SELECT string_agg(($3::text[])[1 + floor(random() * cardinality($3::text[]))::int], ' ')
                    FROM generate_series(1, 12) WHERE i > 0)
            FROM generate_series($2::int + 1, $4::int) AS i""",
            pid,
            have,
            list(VOCAB),
            total,
        )
        await conn.execute(
            """
            INSERT INTO graph_observations (entity_id, content)
            SELECT id, obs_text FROM graph_entities g WHERE project_id = $1
              AND NOT EXISTS (SELECT 1 FROM graph_observations o WHERE o.entity_id = g.id)""",
            pid,
        )
        await conn.execute(
            """
            INSERT INTO graph_embeddings (owner_id, model, dim, embedding)
            SELECT g.id, 'all-MiniLM-L6-v2', 384,
                   (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384) WHERE g.id > 0)::vector
            FROM graph_entities g WHERE g.project_id = $1
              AND NOT EXISTS (SELECT 1 FROM graph_embeddings e WHERE e.owner_id = g.id)""",
            pid,
        )
        await conn.execute("""CREATE INDEX ix_graph_embeddings_hnsw ON graph_embeddings
            USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE model = 'all-MiniLM-L6-v2'""")
        await conn.execute("ANALYZE")
        load_s = time.perf_counter() - t0
        index_s = await lexical_index_caught_up(conn)
        await settled(conn)
        return load_s, index_s
    finally:
        await conn.close()


async def _latencies(calls: int, fn: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    lat = []
    for i in range(calls):
        t0 = time.perf_counter()
        await fn(i)
        lat.append(time.perf_counter() - t0)
    return {"p50_ms": round(_pct(lat, 50), 1), "p95_ms": round(_pct(lat, 95), 1)}


async def searches(client: Any, project: str, calls: int) -> dict[str, Any]:
    """search_nodes and search_semantic latency on the project."""
    rng = random.Random(5)
    words = [rng.choice(VOCAB) for _ in range(calls)]
    queries = [_sentence(rng, 4) for _ in range(calls)]
    await _ok(client, "search_semantic", {"project": project, "query": "warm up"})
    nodes = await _latencies(calls, lambda i: _ok(client, "search_nodes", {"project": project, "query": words[i]}))
    sem = await _latencies(calls, lambda i: _ok(client, "search_semantic", {"project": project, "query": queries[i]}))
    return {"search_nodes": nodes, "search_semantic": sem}


async def side_by_side(url: str, n: int, queries: int) -> dict[str, Any]:
    """The same workload on the reference server and on Cairn; Cairn time / reference time."""
    rng = random.Random(9)
    batches = [_entities(rng, i, min(10, n - i)) for i in range(0, n, 10)]
    words = [rng.choice(VOCAB) for _ in range(queries)]
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-ref-"))
    out: dict[str, Any] = {"entities": n, "batch": 10, "queries": queries}
    try:
        for label in ("reference", "cairn"):
            session = reference_session(tmp / "memory.jsonl") if label == "reference" else cairn_session(url)
            async with session as client:
                extra = {"project": "side-by-side"} if label == "cairn" else {}
                t0 = time.perf_counter()
                for b in batches:
                    await _ok(client, "create_entities", {"entities": b, **extra})
                create_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                for w in words:
                    await _ok(client, "search_nodes", {"query": w, **extra})
                search_ms = (time.perf_counter() - t0) * 1000 / queries
                out[label] = {"create_s": round(create_s, 3), "search_ms": round(search_ms, 2)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["create_ratio"] = round(out["cairn"]["create_s"] / out["reference"]["create_s"], 2)
    out["search_ratio"] = round(out["cairn"]["search_ms"] / out["reference"]["search_ms"], 2)
    return out


async def _all(srv: InProcessServer, quick: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with cairn_session(srv.url) as client:
        results["writes"] = await writes(client, 200 if quick else 600, "writes")
        scales = [2000] if quick else [10_000, 100_000]
        results["scale"] = []
        for total in scales:
            load_s, index_s = await bulk_load(srv.dsn, "scale", total)
            row = {
                "entities": total,
                "bulk_load_s": round(load_s, 1),
                "lexical_index_s": round(index_s, 1),
                **(await searches(client, "scale", 20 if quick else 100)),
            }
            results["scale"].append(row)
    try:
        results["side_by_side"] = await side_by_side(srv.url, 100 if quick else 500, 20 if quick else 100)
    except Exception as exc:  # npx or the network may be unavailable
        results["side_by_side"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return results


def markdown(r: dict[str, Any], quick: bool) -> str:
    """The figures as a markdown section."""
    w = r["writes"]
    lines = [
        "## Knowledge graph",
        "",
        f"Writes through MCP (`create_entities` in batches of 50 with 3 observations each, embeddings "
        f"included): {w['entities']} entities in {w['create_s']} s = **{w['entities_per_s']} entities/s** "
        f"({w['observations_per_s_create']} observations/s); `add_observations` (batches of 20, re-embedding "
        f"each entity): **{w['add_observations_per_s']} observations/s**.",
        "",
        "Search latency through MCP (bulk-loaded synthetic entities with random vectors; one call at a time), "
        "measured once the lexical mover has copied the loaded entities into the side table of their "
        "lexical index (graph_0006; the time it took after the load in the last column):",
        "",
        "| entities | search_nodes p50 | p95 | search_semantic p50 | p95 | bulk load s | lexical index caught up s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in r["scale"]:
        nodes, sem = s["search_nodes"], s["search_semantic"]
        lines.append(
            f"| {s['entities']:,} | {nodes['p50_ms']} ms | {nodes['p95_ms']} ms | "
            f"{sem['p50_ms']} ms | {sem['p95_ms']} ms | {s['bulk_load_s']} | {s.get('lexical_index_s', 0.0)} |"
        )
    sbs = r["side_by_side"]
    lines.append("")
    if "error" in sbs:
        lines.append(f"Side by side with `@modelcontextprotocol/server-memory`: not run ({sbs['error']}).")
    else:
        lines += [
            f"Side by side with `@modelcontextprotocol/server-memory` (npx, stdio) on the same workload: "
            f"{sbs['entities']} entities created in batches of {sbs['batch']} (3 observations each), then "
            f"{sbs['queries']} `search_nodes` calls.",
            "",
            "| | create all (s) | per search_nodes (ms) |",
            "| --- | --- | --- |",
            f"| reference (JSONL file) | {sbs['reference']['create_s']} | {sbs['reference']['search_ms']} |",
            f"| Cairn (PostgreSQL, embeddings) | {sbs['cairn']['create_s']} | {sbs['cairn']['search_ms']} |",
            f"| ratio Cairn / reference | {sbs['create_ratio']} | {sbs['search_ratio']} |",
            "",
            "Cairn's writes include computing one embedding per entity and run in durable transactions; "
            "the reference server rewrites its whole file on every write and scans it on every search.",
        ]
    if quick:
        lines += ["", "_Quick run: small sizes._"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False) -> str:
    """Run the benchmark and return its markdown section."""
    srv = InProcessServer()
    srv.start()
    try:
        results = asyncio.run(_all(srv, quick))
    finally:
        srv.stop()
    return markdown(results, quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(run(quick=parser.parse_args().quick))
