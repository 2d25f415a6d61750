"""Concurrent `push` callers and idle transactions: only the embedder waits on the model.

Starts `cairn serve` (memory feature, default `async` write mode, embedded PostgreSQL started by this
script) and runs two phases of 8 concurrent MCP clients, sequential calls each:

1. **push**: documents of about 150 words (several chunks each) with `push`;
2. **plain write**: `create_project`, a write that needs no vector.

While each phase runs, a sampler reads `pg_stat_activity` every 2 ms and keeps the longest time any of
the server's connections stayed `idle in transaction` (a transaction open while the server does
something else: the thing the embedding queue removed from writes). The queue's workers embed during
the push phase; its drain is timed apart.

Usage::

    python scripts/bench_push_concurrency.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
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

CLIENTS = 8
WORDS = (
    "the agent keeps notes on releases backups alerts invoices schemas queues budgets and owners so that "
    "later sessions can find what was decided and why it mattered to the team"
).split()


def _document(client: int, i: int) -> str:
    sentences = []
    for s in range(10):
        start = (client * 7 + i * 3 + s) % len(WORDS)
        words = (WORDS[start:] + WORDS[:start])[:15]
        sentences.append(" ".join(words).capitalize() + f" (client {client}, note {i}, part {s}).")
    return " ".join(sentences)


async def _phase(url: str, dsn: str, calls: int, make: Any) -> dict[str, float]:
    """`CLIENTS` sessions, `calls` sequential calls each of `make(client, i) -> (tool, args)`."""
    stop = asyncio.Event()
    sampler = asyncio.create_task(longest_idle_in_transaction(dsn, stop, every=0.002))
    latencies: list[float] = []

    async def client(c: int) -> None:
        async with cairn_session(url, "/mcp/memory,projects,admin", timeout=300.0) as session:
            for i in range(calls):
                tool, args = make(c, i)
                t0 = time.perf_counter()
                await _ok(session, tool, args)
                latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client(c) for c in range(CLIENTS)))
    finally:
        stop.set()
        longest = await sampler
    took = time.perf_counter() - started
    latencies.sort()
    return {
        "calls": len(latencies),
        "seconds": round(took, 2),
        "calls_per_s": round(len(latencies) / took, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))] * 1000, 1),
        "longest_idle_in_transaction_ms": round(longest * 1000, 1),
    }


async def _measure(srv: Server, dsn: str, calls: int) -> dict[str, Any]:
    def push(c: int, i: int) -> tuple[str, dict[str, Any]]:
        return "push", {"text": _document(c, i), "project_id": "push-bench", "tags": [f"client-{c}"]}

    def plain(c: int, i: int) -> tuple[str, dict[str, Any]]:
        return "create_project", {"name": f"plain-{c}-{i}"}

    pushed = await _phase(srv.url, dsn, calls, push)
    async with cairn_session(srv.url, "/mcp/admin", timeout=900.0) as session:
        t0 = time.perf_counter()
        await _ok(session, "wait_for_embeddings", {"timeout_seconds": 900})
        pushed["drain_s"] = round(time.perf_counter() - t0, 2)
    plain_writes = await _phase(srv.url, dsn, calls, plain)
    return {"push": pushed, "plain": plain_writes}


def markdown(r: dict[str, Any], quick: bool) -> str:
    """The figures as a markdown section."""
    push, plain = r["push"], r["plain"]
    lines = [
        "## Concurrent push and idle transactions",
        "",
        f"{CLIENTS} MCP clients at once, sequential calls each: `push` of ~150-word documents (several chunks), "
        "then `create_project` (a plain write with no vector). A sampler reads `pg_stat_activity` every 2 ms "
        "and keeps the longest time any server connection stayed `idle in transaction`.",
        "",
        "| phase | calls | calls/s | p50 (ms) | p95 (ms) | longest idle in transaction (ms) |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| push | {push['calls']} | {push['calls_per_s']} | {push['p50_ms']} | {push['p95_ms']} "
        f"| {push['longest_idle_in_transaction_ms']} |",
        f"| create_project | {plain['calls']} | {plain['calls_per_s']} | {plain['p50_ms']} | {plain['p95_ms']} "
        f"| {plain['longest_idle_in_transaction_ms']} |",
        "",
        f"The queue finished embedding the pushed chunks {push['drain_s']} s after the last push answered.",
    ]
    if quick:
        lines += ["", "_Quick run: small sizes._"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, calls: int | None = None, settings: dict[str, str] | None = None) -> str:
    """Run the benchmark and return its markdown section; `settings` adds Cairn settings (``CAIRN_*``)."""
    env = {"CAIRN_FEATURES": "memory", "CAIRN_API_KEYS": f"{KEY}:admin", **(settings or {})}
    with on_embedded_postgres(env, prefix="cairn-bench-push-") as (srv, dsn):
        results = asyncio.run(_measure(srv, dsn, calls or (5 if quick else 25)))
    return markdown(results, quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, help="calls per client")
    parser.add_argument("--set", action="append", default=[], metavar="CAIRN_X=V", help="a Cairn setting")
    ns = parser.parse_args()
    print(run(ns.quick, ns.calls, dict(item.split("=", 1) for item in ns.set)))
