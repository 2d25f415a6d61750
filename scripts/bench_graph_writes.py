"""Graph writes side by side with the reference memory server, and what the embedding queue costs.

The workload of issue 12, one client, sequential calls, the same on both servers: N entities in
`create_entities` calls of 25 (2 observations each), then N - 1 relations in `create_relations` calls
of 25. The reference `@modelcontextprotocol/server-memory` (pinned, run with node over stdio) rewrites
its JSONL file on every call; Cairn runs as deployed, a `cairn serve` process (graph feature, default
`async` write mode) on an embedded PostgreSQL started by this script, and commits text and queue rows
and answers while its queue workers embed. Cairn's write time stops at the last reply; the time until
the queue is drained (`wait_for_embeddings`) is reported separately, as is the total, and so is the
server process's CPU per call.

While Cairn runs, a sampler reads `pg_stat_activity` every 5 ms and keeps the longest time any
connection stayed `idle in transaction`.

Usage::

    python scripts/bench_graph_writes.py [--quick] [--entities N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
for p in (ROOT, SCRIPTS):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from bench_graph import KEY, _ok, cairn_session  # noqa: E402
from bench_mcp import Server, longest_idle_in_transaction, on_embedded_postgres  # noqa: E402
from bench_toolsets import reference_session  # noqa: E402

BATCH = 25


def _entities(start: int, n: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"node-{i}",
            "entityType": f"kind{i % 7}",
            "observations": [f"node {i} belongs to group {i % 97}", f"created for batch {i // BATCH}"],
        }
        for i in range(start, start + n)
    ]


def _relations(start: int, n: int) -> list[dict[str, str]]:
    return [{"from": f"node-{i}", "to": f"node-{i + 1}", "relationType": "precedes"} for i in range(start, start + n)]


async def _workload(client: Any, n: int, extra: dict[str, Any]) -> dict[str, float]:
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        await _ok(client, "create_entities", {"entities": _entities(i, min(BATCH, n - i)), **extra})
    entities_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for i in range(0, n - 1, BATCH):
        await _ok(client, "create_relations", {"relations": _relations(i, min(BATCH, n - 1 - i)), **extra})
    return {"entities_s": entities_s, "relations_s": time.perf_counter() - t1, "writes_s": time.perf_counter() - t0}


async def _measure(srv: Server, dsn: str, n: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-ref-writes-"))
    try:
        async with reference_session(tmp / "memory.jsonl") as ref:
            reference = await _workload(ref, n, {})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stop = asyncio.Event()
    sampler = asyncio.create_task(longest_idle_in_transaction(dsn, stop, every=0.005))
    try:
        async with cairn_session(srv.url, "/mcp/graph,admin", timeout=600.0) as client:
            cpu0 = srv.cpu_seconds() or 0.0
            cairn = await _workload(client, n, {"project": "writes"})
            calls = len(range(0, n, BATCH)) + len(range(0, n - 1, BATCH))
            cairn["server_cpu_ms_per_call"] = ((srv.cpu_seconds() or 0.0) - cpu0) * 1000 / calls
            t0 = time.perf_counter()
            res = await _ok(client, "wait_for_embeddings", {"timeout_seconds": 3600})
            cairn["drain_s"] = time.perf_counter() - t0
            assert res.structured_content is not None and res.structured_content["drained"], res.structured_content
    finally:
        stop.set()
        idle = await sampler
    return {
        "entities": n,
        "reference": {k: round(v, 2) for k, v in reference.items()},
        "cairn": {k: round(v, 2) for k, v in cairn.items()},
        "speedup_writes": round(reference["writes_s"] / cairn["writes_s"], 2),
        "speedup_with_drain": round(reference["writes_s"] / (cairn["writes_s"] + cairn["drain_s"]), 2),
        "idle_in_transaction_max_ms": round(idle * 1000, 1),
    }


def markdown(r: dict[str, Any], quick: bool) -> str:
    """The figures as a markdown section."""
    ref, cairn = r["reference"], r["cairn"]
    lines = [
        "## Graph writes side by side with the reference server",
        "",
        f"{r['entities']:,} entities in `create_entities` calls of {BATCH} (2 observations each), then "
        f"{r['entities'] - 1:,} relations in `create_relations` calls of {BATCH}; one client, sequential "
        "calls, in one run. Reference: `@modelcontextprotocol/server-memory` over stdio. Cairn: MCP over "
        "streamable HTTP, default `async` write mode (the embedding queue's workers embed while the "
        "writes go on; draining the rest is timed separately with `wait_for_embeddings`).",
        "",
        "| | entities (s) | relations (s) | all writes (s) | queue drained after (s) |",
        "| --- | --- | --- | --- | --- |",
        f"| reference (JSONL file) | {ref['entities_s']} | {ref['relations_s']} | {ref['writes_s']} | — |",
        f"| Cairn | {cairn['entities_s']} | {cairn['relations_s']} | {cairn['writes_s']} | {cairn['drain_s']} |",
        "",
        f"Cairn's writes are **{r['speedup_writes']} times** the reference's speed; counting until every vector "
        f"is stored, **{r['speedup_with_drain']} times**. Longest `idle in transaction` of any Cairn connection "
        f"during the run (sampled every 5 ms): {r['idle_in_transaction_max_ms']} ms. Cairn's server process "
        f"(not PostgreSQL) used {cairn['server_cpu_ms_per_call']} ms of CPU per write call, embedding included.",
    ]
    if r["settings"]:
        lines += ["", "Settings: " + ", ".join(f"`{k}={v}`" for k, v in sorted(r["settings"].items())) + "."]
    if quick:
        lines += ["", "_Quick run: small sizes._"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, entities: int | None = None, env: dict[str, str] | None = None) -> str:
    """Run the benchmark and return its markdown section; `env` adds Cairn settings (``CAIRN_*``)."""
    settings = {"CAIRN_FEATURES": "graph", "CAIRN_API_KEYS": f"{KEY}:admin", **(env or {})}
    with on_embedded_postgres(settings, prefix="cairn-bench-writes-") as (srv, dsn):
        results = asyncio.run(_measure(srv, dsn, entities or (2000 if quick else 10_000)))
    results["settings"] = env or {}
    return markdown(results, quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--entities", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="CAIRN_X=V", help="a Cairn setting")
    ns = parser.parse_args()
    print(run(ns.quick, ns.entities, dict(item.split("=", 1) for item in ns.set)))
