"""Memory benchmarks: push throughput, search latency per mode at scale, HNSW recall against exact search.

`run(quick)` returns a markdown section. Quick: 2,000 memories; full: 10,000 and 100,000 (synthetic
vectors with cluster structure for the scale runs, so that the figures measure the database, not the
model; push throughput uses the real model and chunker).
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


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


async def _bench(quick: bool) -> str:
    from app.core import migrations
    from app.core.config import Settings
    from app.core.context import OPEN_PRINCIPAL, AppState, CallContext
    from app.core.db import Database
    from app.core.embedding import LocalOnnxEmbedder
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
        nprng = np.random.default_rng(11)
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
                for j in range(n):
                    body = " ".join(rng.choice(WORDS) for _ in range(20))
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
            async with db.transaction() as session:
                await session.execute(sa_text("ANALYZE memories"))
                await session.execute(sa_text("ANALYZE memory_embeddings"))
            scope = Scope(project_id=project_id, collection_id=coll_id)
            queries = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(20 if quick else 40)]
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
            "Latency is per call inside the service (embedding the query included, HTTP excluded); "
            "synthetic 20-word texts and clustered random vectors. Retrieval quality on SciFact "
            "(`cairn eval beir`, about 4 minutes) is reported in docs/memory.md.",
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
