"""SciFact through a real server: nDCG@10 and the MCP round trip of `search` (hybrid, k = 10).

Starts `cairn serve` on an embedded PostgreSQL (see `bench_mcp.on_embedded_postgres`), indexes the
BEIR dataset in `../shared/eval/scifact` into it with `cairn eval beir`'s indexer (one memory per
document, `title + " " + text`, the real model), then sends every judged query of the test split to
the MCP `search` tool over streamable HTTP (`project_id: beir-eval`, `collection: beir-scifact`,
`limit: 10`, `score_threshold: 0`), one after another, and scores the ranked `source_uri`s with the
same nDCG@10 as `cairn eval beir`. Latency is the client's round trip (query embedding, search,
serialisation and HTTP included).

    python scripts/bench_beir.py [--quick]   # quick: the first 60 queries
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

DATASET = ROOT.parent / "shared" / "eval" / "scifact"


async def _index(url: str) -> tuple[Any, float]:
    from sqlalchemy import text

    from app.core.config import Settings
    from app.core.db import Database
    from app.core.embedding import LocalOnnxEmbedder
    from app.memory import service_eval

    data = service_eval.load(DATASET, "test")
    db = Database(url, Settings(database_url=url, features=["memory"]))
    embedder = LocalOnnxEmbedder()
    await embedder.start()
    try:
        _, _, seconds = await service_eval.index(db, embedder, data, fresh=True)
        async with db.transaction() as session:
            await session.execute(text("ANALYZE memories"))
    finally:
        await embedder.close()
        await db.dispose()
    return data, seconds


async def _queries(base: str, data: Any, quick: bool) -> tuple[dict[str, list[str]], list[float], list[int]]:
    from bench_mcp import session

    from app.memory import service_eval

    qids = sorted(data.qrels)[: 60 if quick else None]
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    sizes: list[int] = []
    async with session(base) as client:
        await client.call_tool("search", {"query_text": "warm up", "project_id": service_eval.EVAL_PROJECT})
        for qid in qids:
            args = {
                "query_text": data.queries[qid][:512],
                "project_id": service_eval.EVAL_PROJECT,
                "collection": service_eval.collection_name(data.name),
                "limit": 10,
                "score_threshold": 0,
            }
            started = time.perf_counter()
            answer = await client.call_tool("search", args)
            latencies.append((time.perf_counter() - started) * 1000)
            if answer.is_error:
                raise RuntimeError(f"search failed: {answer.content}")
            body = answer.structured_content or json.loads(answer.content[0].text)  # type: ignore[union-attr]
            sizes.append(int(body.get("tokens", 0)))
            rankings[qid] = [str(r.get("source_uri") or "").removeprefix("beir:") for r in body["results"]]
    return rankings, latencies, sizes


def run(quick: bool = False) -> str:
    """Index SciFact into a fresh server, query it over MCP and return a markdown section."""
    from bench_mcp import on_embedded_postgres

    from app.memory import service_eval

    if not (DATASET / "queries.jsonl").exists():
        return "## SciFact over MCP\n\nSkipped: no dataset at ../shared/eval/scifact."
    with on_embedded_postgres({"CAIRN_FEATURES": "memory"}, prefix="cairn-bench-beir-") as (srv, _dsn):
        url = srv.extra_env["CAIRN_DATABASE_URL"]
        data, seconds = asyncio.run(_index(url))
        rankings, latencies, sizes = asyncio.run(_queries(srv.url, data, quick))
    scores = service_eval.quality(rankings, data.qrels)
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
    return "\n".join(
        [
            "## SciFact over MCP",
            "",
            f"`search` (hybrid, k = 10) through a real server, {len(rankings)} test queries, "
            f"{len(data.corpus):,} documents indexed in {seconds:.0f} s:",
            "",
            "| nDCG@10 | p50 ms | p95 ms | reply tokens (median) |",
            "| --- | --- | --- | --- |",
            f"| {scores['nDCG@10']:.3f} | {statistics.median(latencies):.1f} | {p95:.1f} | "
            f"{statistics.median(sizes):.0f} |",
            "",
            "Round trips are the MCP client's (query embedding, search, reply and HTTP included), one "
            "query at a time. In-service figures for every mode are in docs/memory.md (`cairn eval beir`).",
        ]
    )


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
