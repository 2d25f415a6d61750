"""The graph entities' lexical side table (graph_0006): what a search costs while written entities
wait for the mover, and how fast the mover copies them.

On an embedded PostgreSQL started here, N entities of the graph-writes workload (`percall_client`,
calls of 25) are written through `GraphRepository.insert_entities`, so every one of them is listed
as pending. Then: the median of the entity text search (`SearchRepository.text_candidates`, top 10,
the statistics cache emptied first, the table analysed as autovacuum would) for three queries, with
all N pending; the time the mover
(`LexicalMover.drain`) takes to copy them; and the same searches with none pending.

Usage::

    python scripts/bench_lexical_pending.py [--quick] [--entities N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
for p in (ROOT, SCRIPTS):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from percall_client import BATCH, entities  # noqa: E402

QUERIES = ("node group batch", "created for batch 7", "node-4321")
REPEATS = 15


async def _search_ms(db: Any, pid: uuid.UUID) -> float:
    from app.core.embeddings import lexical
    from app.graph.repository_search import SearchRepository

    times: list[float] = []
    for _ in range(REPEATS):
        for q in QUERIES:
            lexical.forget_stats()
            t = time.perf_counter()
            async with db.transaction() as session:
                repo = SearchRepository(session)
                await repo.text_candidates(pid, await repo.lexical_query(q), 10, None)
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


async def _measure(url: str, n: int) -> dict[str, float]:
    from sqlalchemy import text

    from app.core import migrations
    from app.core.config import Settings
    from app.core.db import Database
    from app.core.embeddings.lexical_mover import LexicalMover
    from app.graph.repository import GraphRepository
    from app.graph.repository_search import ENTITY_LEXICAL

    await migrations.upgrade_async(url, ["graph"])
    settings = Settings(database_url=url)
    db = Database(url, settings)
    try:
        pid = uuid.uuid4()
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO projects (id, name) VALUES (:p, 'bench')"), {"p": pid})
        t = time.perf_counter()
        for i in range(0, n, BATCH):
            batch = entities(i, min(BATCH, n - i))
            async with db.transaction() as session:
                await GraphRepository(session).insert_entities(
                    pid,
                    [(e["name"], e["entityType"], "active") for e in batch],
                    [e["observations"] for e in batch],
                )
        write_s = time.perf_counter() - t
        async with db.transaction() as session:  # as autovacuum would, after this many new rows
            await session.execute(text("ANALYZE graph_entities"))
        mover = LexicalMover(db, [ENTITY_LEXICAL], settings)
        pending = (await mover.pending(ENTITY_LEXICAL)).rows
        searching_pending = await _search_ms(db, pid)
        t = time.perf_counter()
        left = await mover.drain(600)
        drain_s = time.perf_counter() - t
        searching_copied = await _search_ms(db, pid)
        return {
            "entities": n,
            "write_s": write_s,
            "pending": pending,
            "search_pending_ms": searching_pending,
            "drain_s": drain_s,
            "left": left,
            "search_copied_ms": searching_copied,
        }
    finally:
        await db.dispose()


def run(quick: bool = False, n: int | None = None) -> str:
    """Run the measurement and return its markdown section."""
    from app.core.pgembedded import start_embedded

    count = n or (2_000 if quick else 10_000)
    place = Path(tempfile.mkdtemp(prefix="cairn-bench-lexical-"))
    pg = start_embedded(place / "pg")
    try:
        pg.ensure_database("bench")
        r = asyncio.run(_measure(pg.url("bench"), count))
    finally:
        pg.stop()
        shutil.rmtree(place, ignore_errors=True)
    return "\n".join(
        [
            "## Graph entity search while the lexical index catches up",
            "",
            f"{r['entities']:,} entities of the graph-writes workload written in statements of {BATCH} "
            f"(`GraphRepository.insert_entities`), every one then listed as pending for the entities' lexical "
            "side table (graph_0006); the entity text search (`text_candidates`, top 10, median of "
            f"{REPEATS} rounds of three queries: `{'`, `'.join(QUERIES)}`) with all of them pending, the mover's "
            "copy of all of them (`LexicalMover.drain`), and the same searches after.",
            "",
            "| entities written (s) | pending | search, all pending (ms) | mover's copy (s) | rows/s | "
            "search, none pending (ms) |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {r['write_s']:.2f} | {r['pending']:,} | {r['search_pending_ms']:.2f} | {r['drain_s']:.2f} | "
            f"{r['pending'] / max(r['drain_s'], 1e-9):,.0f} | {r['search_copied_ms']:.2f} |",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--entities", type=int, default=None)
    args = parser.parse_args()
    print(run(quick=args.quick, n=args.entities))


if __name__ == "__main__":
    main()
