"""Memory benchmarks: push throughput, search latency per mode at scale, HNSW recall against exact search.

`run(quick)` returns a markdown section. Quick: 2,000 memories; full: 10,000 and 100,000 (synthetic
vectors with cluster structure for the scale runs, so that the figures measure the database, not the
model; push throughput uses the real model and chunker). The scale texts are 20 words drawn from a
30,000-word vocabulary with Zipf frequencies (exponent 1.07, as in English text), queries 3 to 8
words drawn the same way: common words match much of the table, rare ones a few rows.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text as sa_text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = (
    "river mountain sensor deploy migration timeout cache vector index memory agent project summary "
    "cluster latency kernel thread socket packet router schema column query planner token model "
    "weather rain cloud forest ocean harbour bridge tunnel railway engine battery solar wind"
).split()


SYLLABLES = "ka lo mi nu re ta vi so pe du ga ri ho le zu ba ne fi mo ku sa te wi yo".split()


def zipf_vocabulary(size: int = 30_000, exponent: float = 1.07, seed: int = 3) -> tuple[list[str], np.ndarray]:
    """Distinct pronounceable pseudo-words and their Zipf probabilities (rank r: 1 / r^exponent)."""
    rnd = random.Random(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rnd.choice(SYLLABLES) for _ in range(rnd.randint(2, 4)))] = None
    p = 1.0 / np.arange(1, size + 1) ** exponent
    return list(words), p / p.sum()


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


async def _bench(quick: bool) -> str:
    from app.core import migrations
    from app.core.config import Settings
    from app.core.context import OPEN_PRINCIPAL, AppState, CallContext
    from app.core.db import Database
    from app.core.embeddings.local import LocalOnnxEmbedder
    from app.core.pgembedded import start_embedded
    from app.core.registry import Registry
    from app.core.repository import ProjectRepository
    from app.memory import service
    from app.memory.config import MemorySettings
    from app.memory.repository import MemoryRepository, Scope
    from app.memory.schemas import PushIn
    from app.memory.service_common import EMBEDDING_TARGET
    from app.memory.service_search import retrieve

    root = Path(tempfile.mkdtemp(prefix="cairn-bench-mem-"))
    pg = start_embedded(root)
    url = pg.url()
    lines: list[str] = ["## Memory", ""]
    try:
        await asyncio.to_thread(migrations.upgrade, url, ["memory"])
        settings = Settings(database_url=url, features=["memory"])
        db = Database(url, settings)
        embedder = LocalOnnxEmbedder()
        await embedder.start()
        cfg = MemorySettings()
        state = AppState(settings=settings, db=db, embedder=embedder, registry=Registry())

        # 1. push throughput through the service (chunking, dedupe, embedding, writes)
        docs = 8 if quick else 40
        rng = random.Random(7)
        texts = [
            ". ".join(" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() for _ in range(60)) + "."
            for _ in range(docs)
        ]
        await embedder.embed(["warm up"])
        chunks, started = 0, time.perf_counter()
        for i, text in enumerate(texts):
            async with db.transaction() as session:
                ctx = CallContext(
                    session=session, principal=OPEN_PRINCIPAL, app=state, request_id=f"b{i}", transport="bench"
                )
                out = await service.push(ctx, PushIn.model_validate({"text": text, "project_id": "bench-push"}))
                chunks += out.chunksIndexed
        elapsed = time.perf_counter() - started
        lines += [
            f"Push (real model and chunker, 200-token chunks): {docs} documents, {chunks} chunks in "
            f"{elapsed:.1f} s = **{chunks / elapsed:.0f} chunks/s**.",
            "",
        ]

        # 2. scale: synthetic memories with clustered unit vectors
        sizes = [2000] if quick else [10_000, 100_000]
        lines += ["| memories | mode | p50 ms | p95 ms |", "| --- | --- | --- | --- |"]
        recall_lines = []
        lexical_recall: list[str] = []
        nprng = np.random.default_rng(11)
        vocab, vocab_p = zipf_vocabulary()
        centers = nprng.normal(size=(64, 384)).astype(np.float32)
        loaded = 0
        async with db.transaction() as session:
            project = await ProjectRepository(session).ensure("bench-scale")
            coll, _ = await MemoryRepository(session).ensure_collection("bench", embedder.model, 384)
            project_id, coll_id = project.id, coll.id
        all_vectors: list[np.ndarray] = []
        for size in sizes:
            load_started = time.perf_counter()
            while loaded < size:
                n = min(2000, size - loaded)
                vecs = centers[nprng.integers(0, 64, n)] + nprng.normal(scale=0.6, size=(n, 384)).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                all_vectors.append(vecs)
                rows: list[dict[str, Any]] = []
                drawn = nprng.choice(len(vocab), size=(n, 20), p=vocab_p)
                for j in range(n):
                    body = " ".join(vocab[w] for w in drawn[j])
                    rows.append(
                        {
                            "id": uuid.uuid4(),
                            "project_id": project_id,
                            "collection_id": coll_id,
                            "kind": "chunk",
                            "memory_type": rng.choice(["episodic", "semantic"]),
                            "content": body,
                            "content_hash": f"{loaded + j}",
                            "tags": [rng.choice(WORDS)],
                            "metadata": "{}",
                            "source_uri": None,
                            "document_id": None,
                            "chunk_index": None,
                            "summary_key": None,
                        }
                    )
                async with db.transaction() as session:
                    repo = MemoryRepository(session)
                    await repo.insert_memories(rows)
                    await EMBEDDING_TARGET.store(
                        session, embedder.model, [(str(r["id"]), v.tolist()) for r, v in zip(rows, vecs, strict=True)]
                    )
                loaded += n
            load_seconds = time.perf_counter() - load_started
            # Steady state, as autovacuum leaves a table: measuring while it vacuums a fresh bulk load
            # (HNSW index clean-up included) would time autovacuum's CPU, not the search.
            async with db.engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await auto.execute(sa_text("VACUUM ANALYZE memories"))
                await auto.execute(sa_text("VACUUM ANALYZE memory_embeddings"))
            scope = Scope(project_id=project_id, collection_id=coll_id)
            queries = [
                " ".join(vocab[w] for w in nprng.choice(len(vocab), size=int(nprng.integers(3, 9)), p=vocab_p))
                for _ in range(20 if quick else 40)
            ]
            for mode in ("semantic", "lexical", "hybrid"):
                times = []
                for q in queries:
                    t0 = time.perf_counter()
                    async with db.transaction() as session:
                        await retrieve(
                            MemoryRepository(session), embedder, cfg, scope, q, mode=mode, limit=10, threshold=0.0
                        )
                    times.append((time.perf_counter() - t0) * 1000)
                lines.append(f"| {size:,} | {mode} | {statistics.median(times):.1f} | {_pct(times, 0.95):.1f} |")
            # BM25: the index path's top 10 against an exact scan, by score (ties make ids arbitrary)
            lex_found, lex_total = 0, 0
            for q in queries:
                async with db.transaction() as session:
                    repo = MemoryRepository(session)
                    lq = await repo.lexical_query(q)
                    fast = await repo.bm25(scope, lq, 10, cfg.memory_lexical_ef_search)
                    await session.execute(sa_text("SET LOCAL enable_indexscan = off"))
                    await session.execute(sa_text("SET LOCAL enable_bitmapscan = off"))
                    exact = await repo.bm25(scope, lq, 10, cfg.memory_lexical_ef_search)
                if exact:
                    floor = exact[-1][1] - 1e-6
                    lex_found += sum(1 for _, sc in fast[: len(exact)] if sc >= floor)
                    lex_total += len(exact)
            lexical_recall.append(f"{size:,}: {lex_found / max(lex_total, 1):.3f}")
            # recall@10 of the HNSW path (iterative scan, with a tag filter and without) vs exact search
            stacked = np.concatenate(all_vectors)
            hits_plain, hits_filtered, total, total_filtered = 0, 0, 0, 0
            for k in range(30):
                probe = stacked[nprng.integers(0, len(stacked))] + nprng.normal(scale=0.3 / np.sqrt(384), size=384)
                probe = (probe / np.linalg.norm(probe)).tolist()
                tag = WORDS[k % len(WORDS)]
                for filtered in (False, True):
                    sc = Scope(project_id=project_id, collection_id=coll_id, tags=[tag] if filtered else None)
                    async with db.transaction() as session:
                        approx = await MemoryRepository(session).semantic(
                            sc, embedder.model, probe, 10, cfg.memory_ef_search
                        )
                    async with db.transaction() as session:
                        exact = await MemoryRepository(session).semantic(sc, embedder.model, probe, 10, 10, exact=True)
                    got = len({a for a, _ in approx} & {e for e, _ in exact})
                    if filtered:
                        hits_filtered += got
                        total_filtered += len(exact)
                    else:
                        hits_plain += got
                        total += len(exact)
            plain, filt = hits_plain / max(total, 1), hits_filtered / max(total_filtered, 1)
            recall_lines.append(f"| {size:,} | {plain:.3f} | {filt:.3f} | {load_seconds:.0f} s |")
        lines += [
            "",
            "HNSW (ef_search 100, iterative scans) against exact search, recall@10 over 30 probes:",
            "",
            "| memories | recall@10 | recall@10 with a tag filter (~1/40 of rows) | load time |",
            "| --- | --- | --- | --- |",
            *recall_lines,
            "",
            "BM25 (inner-product HNSW, ef_search 400, plus rare words through the GIN index) against an exact scan, "
            "recall@10 by score over the same queries: " + ", ".join(lexical_recall) + ".",
            "",
            "Latency is per call inside the service (embedding the query included, HTTP excluded); "
            "20-word texts from a 30,000-word Zipf vocabulary, queries of 3 to 8 such words, clustered random "
            "vectors. Retrieval quality on SciFact (`cairn eval beir`) is reported in docs/memory.md.",
        ]
        await embedder.close()
        await db.dispose()
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    return "\n".join(lines)


def run(quick: bool = False) -> str:
    """Run the memory benchmarks and return a markdown section."""
    return asyncio.run(_bench(quick))


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
