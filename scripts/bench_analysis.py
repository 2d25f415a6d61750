"""Benchmark the analysis tools: ingest throughput from the demo upstream over loopback, query latency
at 100k ingested records, act throughput, and the token cost of the library-audit walkthrough.

Runs against a throw-away embedded PostgreSQL and the bookshelf demo upstream (uvicorn in a process of
its own), calling the operations through the real executor (validation, scope, one transaction per
call). The ingest runs with the embedding queue's workers as `cairn serve` has them, so its page
summaries are really embedded (after the calls: the workers give way while calls keep coming). ::

    python scripts/bench_analysis.py [--quick] [--ingest-only]

``run(quick)`` returns a markdown section for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from app.analysis.config import DEMO_REGISTRY
from app.analysis.demo_upstream import generate
from app.analysis.repository import AnalysisRepository
from app.core import budget, migrations
from app.core.config import Settings
from app.core.context import AppState, Principal
from app.core.db import Database
from app.core.embeddings.queue import EmbeddingQueue
from app.core.executor import run_operation
from app.core.feature import build_registry
from app.core.operations import ops as core_ops
from app.core.pgembedded import start_embedded
from app.core.runtime import make_embedder
from app.features import enabled
from tests.support.analysis_walkthrough import markdown_table, run_walkthrough

ROOT = Path(__file__).resolve().parent.parent
PRINCIPAL = Principal(key_id=None, name="bench", scopes=frozenset({"admin"}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DemoUpstream:
    """The bookshelf API on a free loopback port, in its own process (as a real upstream would be)."""

    def __init__(self, books: int) -> None:
        self.port = _free_port()
        self.books = books
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> DemoUpstream:
        code = f"from app.analysis.demo_upstream import serve; serve(port={self.port}, n_books={self.books})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=str(ROOT))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("demo upstream did not start")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _registry(path: Path, port: int) -> None:
    doc = yaml.safe_load(DEMO_REGISTRY.read_text())
    doc["upstreams"]["bookshelf"]["base_url"] = f"http://127.0.0.1:{port}/api"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


async def _call(state: AppState, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    op = state.registry.get(tool)
    assert op is not None
    result = await run_operation(state, op, args, PRINCIPAL, transport="bench", request_id="bench")
    return result.model_dump(mode="json", by_alias=True)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def _latency(state: AppState, args: dict[str, Any], repeat: int) -> tuple[float, float]:
    await _call(state, "analysis_query", args)  # warm-up (plans, caches)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        await _call(state, "analysis_query", args)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), _pct(times, 95)


@contextlib.asynccontextmanager
async def _queue(state: AppState) -> AsyncIterator[EmbeddingQueue]:
    """The embedding queue's workers running for the block, as `cairn serve` has them."""
    queue = state.queue = EmbeddingQueue(
        state.db, state.embedder, [t for f in enabled(["analysis"]) for t in f.embedding_targets], state.settings
    )
    queue.start()
    try:
        yield queue
    finally:
        await queue.stop()
        state.queue = None


async def _ingest_once(state: AppState, aid: str) -> tuple[int, int, int, float]:
    """One whole ingest of the small upstream: (records, pages, calls, seconds)."""
    started = time.perf_counter()
    stored = pages = calls = 0
    while True:
        res = await _call(
            state,
            "analysis_ingest",
            {"analysis_id": aid, "model": "book", "ingest_all": True, "per_page": 100, "resume": calls > 0},
        )
        stored, pages, calls = stored + res["stored"], pages + res["pages"], calls + 1
        if res["complete"]:
            return stored, pages, calls, time.perf_counter() - started


async def _ingest(state: AppState, runs: int) -> str:
    """Ingest throughput (HTTP from the demo upstream, one upsert statement per page, page summaries
    queued for embedding), `runs` times into fresh sessions, with the embedding queue's workers running;
    then the time until they have embedded every page summary."""
    async with _queue(state) as queue:
        results = [await _ingest_once(state, f"bench-ingest-{i}") for i in range(runs)]
        last = time.perf_counter()
        await queue.drain(timeout=600)
        drained_s = time.perf_counter() - last
    for i in range(runs):
        await _call(state, "analysis_clear", {"analysis_id": f"bench-ingest-{i}"})
    rates = sorted(stored / s for stored, _, _, s in results)
    stored, pages, calls, ingest_s = sorted(results, key=lambda r: r[0] / r[3])[runs // 2]
    return (
        f"- **Ingest**: {stored} records in {pages} pages of 100 ({calls} `analysis_ingest` call(s), "
        f"resume between them) in {ingest_s:.2f} s = **{stored / ingest_s:,.0f} records/s** "
        f"(median of {runs} runs into fresh sessions, {rates[0]:,.0f}-{rates[-1]:,.0f}; upstream over loopback in a "
        "process of its own, one upsert statement per page, one page summary per page queued for embedding); "
        f"the queue's workers had embedded all {runs * pages} page summaries {drained_s:.1f} s after the last call"
    )


async def _bench(state: AppState, port_small: int, port_big: int, quick: bool) -> str:
    out: list[str] = []
    # 1. ingest throughput
    out.append(await _ingest(state, 5))
    # 2. query latency at N records (inserted directly: the latency does not depend on how they came)
    n_query = 20_000 if quick else 100_000
    lib = generate(n_query, seed=11)
    t0 = time.perf_counter()
    async with state.db.transaction() as session:
        repo = AnalysisRepository(session)
        pid = await repo.ensure_project("default")
        rows: list[tuple[str | None, dict[str, Any]]] = [(str(b["id"]), b) for b in lib.books.values()]
        for i in range(0, len(rows), 5000):
            await repo.upsert_records(pid, "bench-query", "book", i // 5000 + 1, rows[i : i + 5000], 86400)
    load_s = time.perf_counter() - t0
    async with state.db.transaction() as session:
        from sqlalchemy import text

        await session.execute(text("ANALYZE analysis_records"))
    repeat = 5 if quick else 15
    cases: list[tuple[str, dict[str, Any]]] = [
        ("aggregate group_by status", {"mode": "aggregate", "group_by": "status"}),
        (
            "aggregate group_by genre + where rating >= 4",
            {"mode": "aggregate", "group_by": "genre", "where": {"rating": {"$gte": 4}}},
        ),
        (
            "filter status=completed, rating < 2 (20 rows)",
            {"mode": "filter", "where": {"status": "completed", "rating": {"$lt": 2}}},
        ),
        ("filter updated_at >= date (20 rows)", {"mode": "filter", "where": {"updated_at": {"$gte": "2026-04-01"}}}),
        ("sample 9, stratify_by status", {"mode": "sample", "sample_size": 9, "stratify_by": "status"}),
        (
            "sample 12, stratify + where + proximity/bucket",
            {
                "mode": "sample",
                "sample_size": 12,
                "stratify_by": "status",
                "where": {"pages": {"$gte": 200}},
                "proximity": {"field": "updated_at", "origin": "2026-03-15", "window": "30 days", "bucket": "1 week"},
            },
        ),
        ("describe", {"mode": "describe"}),
    ]
    out += [
        "",
        f"Query latency over **{n_query:,} ingested records** in one session (loaded in {load_s:.1f} s; "
        f"{repeat} runs after a warm-up, through the executor):",
        "",
        "| query | p50 ms | p95 ms |",
        "| --- | ---: | ---: |",
    ]
    for label, args in cases:
        p50, p95 = await _latency(state, {"analysis_id": "bench-query", **args}, repeat)
        out.append(f"| {label} | {p50:.1f} | {p95:.1f} |")
    await _call(state, "analysis_clear", {"analysis_id": "bench-query"})
    # 3. act throughput
    n_act = 500 if quick else 2000
    await _call(
        state,
        "analysis_ingest",
        {"analysis_id": "bench-act", "model": "book", "ingest_all": True, "per_page": 100, "page": 1},
    )
    started = time.perf_counter()
    res = await _call(
        state,
        "analysis_act",
        {
            "analysis_id": "bench-act",
            "model": "book",
            "action": "update",
            "attributes": {"genre": "poetry"},
            "where": {"id": {"$lte": n_act}},
        },
    )
    act_s = time.perf_counter() - started
    s = res["summary"]
    out += [
        "",
        f"- **Act** (update, batches of 50, 5 concurrent requests): {s['total']} records "
        f"({s['succeeded']} succeeded, {s['failed']} refused by the upstream: locked books) in {act_s:.2f} s = "
        f"**{s['total'] / act_s:,.0f} records/s**",
    ]
    return "\n".join(out)


async def _walkthrough(state: AppState) -> str:
    async with _queue(state) as queue:

        async def call(tool: str, args: dict[str, Any]) -> str:
            # The workers embed what the last step queued while the agent reads its reply.
            await queue.drain(timeout=600)
            return budget.dumps(await _call(state, tool, args))

        steps = await run_walkthrough(call)
    total = sum(r.tokens for r in steps)
    return (
        f"Library-audit walkthrough (docs/analysis.md) on 5,000 demo books: **{total:,} tokens** of tool output "
        "in total (budget 6,000), counted with the embedding model's WordPiece tokenizer on the compact "
        "JSON each tool returns (the queue's workers embed what a step queued before the next one, as they "
        "do while an agent reads a reply):\n\n" + markdown_table(steps)
    )


def run(quick: bool = False, ingest_only: bool = False) -> str:
    """Run everything (or only the ingest figure) and return the markdown section."""
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-analysis-"))
    pg = start_embedded(root)
    saved = os.environ.get("CAIRN_ANALYSIS_UPSTREAMS")
    try:
        url = pg.url()
        migrations.upgrade(url, ["analysis"])
        settings = Settings(database_url=url, features=["analysis"], log_level="WARNING", data_dir=root)
        n_ingest = 2000 if quick else 12000
        with DemoUpstream(n_ingest) as small, DemoUpstream(5000) as big:

            async def main() -> str:
                db = Database(url, settings)
                embedder = make_embedder(settings)
                await embedder.start()
                state = AppState(
                    settings=settings,
                    db=db,
                    embedder=embedder,
                    registry=build_registry(core_ops, enabled(["analysis"])),
                )
                try:
                    _registry(root / "small.yaml", small.port)
                    os.environ["CAIRN_ANALYSIS_UPSTREAMS"] = str(root / "small.yaml")
                    if ingest_only:
                        return await _ingest(state, 5)
                    figures = await _bench(state, small.port, big.port, quick)
                    _registry(root / "big.yaml", big.port)
                    os.environ["CAIRN_ANALYSIS_UPSTREAMS"] = str(root / "big.yaml")
                    walk = await _walkthrough(state)
                finally:
                    await embedder.close()
                    await db.dispose()
                return figures + "\n\n" + walk

            body = asyncio.run(main())
    finally:
        if saved is None:
            os.environ.pop("CAIRN_ANALYSIS_UPSTREAMS", None)
        else:
            os.environ["CAIRN_ANALYSIS_UPSTREAMS"] = saved
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    return "## Analysis sessions\n\n" + body + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ingest-only", action="store_true", help="only the ingest figure (5 runs)")
    cli = parser.parse_args()
    print(run(quick=cli.quick, ingest_only=cli.ingest_only))
