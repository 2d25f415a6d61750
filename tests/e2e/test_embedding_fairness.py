"""Fair embedding: one key's bulk writes do not starve another project's search.

Two pushes of 200,000 distinct characters each (about 500 chunks apiece) from one key wait for their
vectors (the embedder at full load), while another project searches. Bulk calls run on the embedder's
low-priority session, and the batcher takes texts round-robin across callers (key + project) in
batches capped in tokens, so the search's one query is embedded at once, whatever is queued."""

from __future__ import annotations

import asyncio
import random
import string
import time

import httpx
from prometheus_client import REGISTRY
from sqlalchemy import text

from app.core.db import Database
from app.core.embeddings.repository import EmbeddingQueueRepository
from tests.support.server import ADMIN_KEY, WRITE_KEY, RunningServer

# Measured on the 2-core test machine: about 20-30 ms per search while both pushes embed (18 ms idle);
# 0.1-0.9 s with the fair batcher alone, and tens of seconds before it. The bound is loose on purpose:
# the figures are in docs/benchmarks.md (bench_hostile), this only catches starvation.
BOUND_SECONDS = 2.0


def _document(seed: int, chars: int = 200_000) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < chars:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10)))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def _embedded() -> float:
    return REGISTRY.get_sample_value("cairn_embedding_texts_total") or 0.0


async def test_a_search_answers_quickly_while_two_huge_pushes_embed(server: RunningServer) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        httpx.AsyncClient(base_url=server.url, headers=admin, timeout=120) as searcher,
        httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {WRITE_KEY}"}, timeout=120) as writer,
    ):
        seeded = await searcher.post(
            "/api/v1/memory/push", json={"text": "The beta roadmap ships the search redesign.", "project": "beta"}
        )
        assert seeded.status_code == 200

        async def search() -> float:
            started = time.perf_counter()
            r = await searcher.post("/api/v1/memory/search", json={"query_text": "beta roadmap", "project": "beta"})
            assert r.status_code == 200 and r.json()["results"], r.text
            return time.perf_counter() - started

        idle = min([await search() for _ in range(3)])
        before = _embedded()
        pushes = [
            asyncio.create_task(
                writer.post(
                    "/api/v1/memory/push",
                    json={"text": _document(seed), "project": "alpha", "wait_for_embedding": True},
                )
            )
            for seed in (1, 2)
        ]
        for _ in range(1200):  # until the pushes' chunks are embedding (at most 60 s)
            if _embedded() - before >= 64:
                break
            await asyncio.sleep(0.05)
        assert _embedded() - before >= 64, "the pushes never started embedding"
        latencies: list[float] = []
        loaded: list[bool] = []
        for _ in range(8):
            latencies.append(await search())
            loaded.append(not any(p.done() for p in pushes))
            await asyncio.sleep(0.3)
        results = await asyncio.gather(*pushes)
    assert all(r.status_code == 200 for r in results), [r.text[:200] for r in results]
    assert sum(r.json()["chunksIndexed"] for r in results) > 800
    under_load = [t for t, busy in zip(latencies, loaded, strict=True) if busy]
    figures = f"idle {idle:.3f} s; under load {[round(t, 3) for t in latencies]}"
    assert len(under_load) >= 3, f"the pushes ended before the searches could be measured: {figures}"
    assert max(latencies) < BOUND_SECONDS, figures
    print(figures)


async def test_the_queue_lease_serves_rows_queued_behind_a_backlog_in_the_next_batch(server: RunningServer) -> None:
    model = "fairness-test-model"  # the server's workers embed another model: these rows are ours
    db = Database(server.settings.database_url or "", server.settings)
    try:
        async with db.transaction() as session:
            await EmbeddingQueueRepository(session).enqueue("memory", [f"bulk-{i}" for i in range(500)], model)
        async with db.transaction() as session:  # a later transaction: queued after the whole backlog
            await session.execute(text("SELECT pg_sleep(0.01)"))
            await EmbeddingQueueRepository(session).enqueue("graph_entity", ["late"], model)
        targets = ["memory", "graph_entity"]
        async with db.transaction() as session:
            first = await EmbeddingQueueRepository(session).lease(model, 64, 60, targets)
        refs = {j.ref for j in first}
        assert len(first) == 64 and "late" in refs and "bulk-0" in refs  # the newcomer and the oldest
        # Two workers leasing at once never share a row, and together they drain the backlog.
        async with db.transaction() as one, db.transaction() as two:
            a = await EmbeddingQueueRepository(one).lease(model, 64, 60, targets)
            b = await EmbeddingQueueRepository(two).lease(model, 64, 60, targets)
        assert len(a) == len(b) == 64 and not {j.id for j in a} & {j.id for j in b}
        seen = refs | {j.ref for j in a + b}
        while True:
            async with db.transaction() as session:
                batch = await EmbeddingQueueRepository(session).lease(model, 64, 60, targets)
            if not batch:
                break
            assert not seen & {j.ref for j in batch}
            seen |= {j.ref for j in batch}
        assert len(seen) == 501
    finally:
        await db.dispose()
