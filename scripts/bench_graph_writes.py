"""Graph writes side by side with the reference memory server, and what the embedding queue costs.

The workload of issue 12, one client, sequential calls, the same on both servers: N entities in
`create_entities` calls of 25 (2 observations each), then N - 1 relations in `create_relations` calls
of 25. The reference `@modelcontextprotocol/server-memory` (pinned, run with node over stdio) rewrites
its JSONL file on every call; Cairn runs as deployed, a `cairn serve` process (graph feature, default
`async` write mode) on an embedded PostgreSQL started by this script, and commits text and queue rows
and answers; its queue workers embed after the burst (the default: they give way to calls) or beside
it (`CAIRN_EMBEDDING_QUEUE_DEFER_SECONDS=0`), one fresh server and database for each. Cairn's write
time stops at the last reply; the time until the queue is drained (`wait_for_embeddings`) is reported
separately, as is the total, and so is the server process's CPU per call.

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
from percall_client import BATCH, entities, relations  # noqa: E402


async def _workload(client: Any, n: int, extra: dict[str, Any]) -> dict[str, float]:
    t0 = time.perf_counter()
    for i in range(0, n, BATCH):
        await _ok(client, "create_entities", {"entities": entities(i, min(BATCH, n - i)), **extra})
    entities_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for i in range(0, n - 1, BATCH):
        await _ok(client, "create_relations", {"relations": relations(i, min(BATCH, n - 1 - i)), **extra})
    return {"entities_s": entities_s, "relations_s": time.perf_counter() - t1, "writes_s": time.perf_counter() - t0}


async def _reference(n: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-ref-writes-"))
    try:
        async with reference_session(tmp / "memory.jsonl") as ref:
            return await _workload(ref, n, {})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _cairn(srv: Server, dsn: str, n: int, sample: bool) -> dict[str, float]:
    stop = asyncio.Event()
    # The sampler's query every 5 ms costs the client and PostgreSQL CPU that the writes then lack,
    # so it runs only where it is asked for.
    sampler = asyncio.create_task(longest_idle_in_transaction(dsn, stop, every=0.005)) if sample else None
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
        if sampler is not None:
            cairn["idle_in_transaction_max_ms"] = await sampler * 1000
    return cairn


# Cairn's configurations, each on a fresh server and database: the default, then the queue embedding
# beside the writes from the first row on (what the writes cost when the model shares the cores).
# The second also samples `idle in transaction` (its writes run beside the model: the case to watch).
CONFIGS: list[tuple[str, dict[str, str], bool]] = [
    ("Cairn (default)", {}, False),
    (
        "Cairn, queue not giving way (`CAIRN_EMBEDDING_QUEUE_DEFER_SECONDS=0`)",
        {"CAIRN_EMBEDDING_QUEUE_DEFER_SECONDS": "0"},
        True,
    ),
]


def markdown(r: dict[str, Any], quick: bool) -> str:
    """The figures as a markdown section."""
    ref = r["reference"]
    lines = [
        "## Graph writes side by side with the reference server",
        "",
        f"{r['entities']:,} entities in `create_entities` calls of {BATCH} (2 observations each), then "
        f"{r['entities'] - 1:,} relations in `create_relations` calls of {BATCH}; one client, sequential "
        "calls, in one run. Reference: `@modelcontextprotocol/server-memory` over stdio. Cairn: a `cairn serve` "
        "process on an embedded PostgreSQL, MCP over streamable HTTP, default `async` write mode (writes answer "
        "once text and queue rows are committed); the time until every vector is stored is measured apart "
        "with `wait_for_embeddings`, right after the last write. Each Cairn row is a fresh server and database.",
        "",
        "| | entities (s) | relations (s) | all writes (s) | writes vs reference | queue drained after (s) "
        "| until every vector (s) | server CPU ms per write call | longest idle in transaction (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| reference (JSONL file) | {ref['entities_s']} | {ref['relations_s']} | {ref['writes_s']} | 1.00x | — "
        f"| {ref['writes_s']} | — | — |",
    ]
    for label, _env, _sample in CONFIGS:
        c = r["cairn"][label]
        idle = c.get("idle_in_transaction_max_ms", "not sampled")
        lines.append(
            f"| {label} | {c['entities_s']} | {c['relations_s']} | {c['writes_s']} "
            f"| **{ref['writes_s'] / c['writes_s']:.2f}x** | {c['drain_s']} | {c['writes_s'] + c['drain_s']:.2f} "
            f"| {c['server_cpu_ms_per_call']} | {idle} |"
        )
    lines += [
        "",
        "By default the queue's workers give way while calls keep coming (at most "
        "`CAIRN_EMBEDDING_QUEUE_DEFER_SECONDS`, 10 s, behind the oldest row): the burst is answered first and "
        "embedded right after. With that turned off they embed beside the writes, which on 2 cores slows the "
        "writes whatever the workers' scheduling priority. *Server CPU* is the `cairn serve` process (not "
        "PostgreSQL) during the writes, embedding done meanwhile included. The longest `idle in transaction` "
        "is sampled every 5 ms in the second Cairn run only (the sampling's own queries slow the writes).",
    ]
    if r["settings"]:
        lines += ["", "Settings: " + ", ".join(f"`{k}={v}`" for k, v in sorted(r["settings"].items())) + "."]
    if quick:
        lines += ["", "_Quick run: small sizes._"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, entities: int | None = None, env: dict[str, str] | None = None) -> str:
    """Run the benchmark and return its markdown section; `env` adds Cairn settings (``CAIRN_*``)."""
    n = entities or (2000 if quick else 10_000)
    results: dict[str, Any] = {"entities": n, "reference": asyncio.run(_reference(n)), "cairn": {}}
    for label, extra, sample in CONFIGS:
        settings = {"CAIRN_FEATURES": "graph", "CAIRN_API_KEYS": f"{KEY}:admin", **extra, **(env or {})}
        with on_embedded_postgres(settings, prefix="cairn-bench-writes-") as (srv, dsn):
            results["cairn"][label] = asyncio.run(_cairn(srv, dsn, n, sample))
    results["reference"] = {k: round(v, 2) for k, v in results["reference"].items()}
    results["cairn"] = {label: {k: round(v, 2) for k, v in c.items()} for label, c in results["cairn"].items()}
    results["settings"] = env or {}
    return markdown(results, quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--entities", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="CAIRN_X=V", help="a Cairn setting")
    ns = parser.parse_args()
    print(run(ns.quick, ns.entities, dict(item.split("=", 1) for item in ns.set)))
