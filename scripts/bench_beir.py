"""SciFact through a real server: nDCG@10 and the MCP round trip of `search` (hybrid, k = 10).

Starts `cairn serve` on an embedded PostgreSQL (see `bench_mcp.on_embedded_postgres`; chunks of up
to 512 tokens, so that most abstracts stay one memory), pushes every document of the BEIR dataset in
`../shared/eval/scifact` through the MCP `push` tool (`title + " " + text`, `source_uri: beir:<id>`,
four clients at once), waits until the embedding queue is empty, then sends every judged query of
the test split to the MCP `search` tool (`limit: 10`, `score_threshold: 0`), one after another. A
document split into several chunks counts once, at its best chunk; the ranked `source_uri`s are
scored with the same nDCG@10 as `cairn eval beir`. Latency is the client's round trip (query
embedding, search, serialisation and HTTP included).

    python scripts/bench_beir.py [--quick]   # quick: 300 documents pushed, the first 60 queries
    python scripts/bench_beir.py [--quick] --compare ../other-checkout [--rounds 3] [--other-first]

`--compare` runs the other checkout (with its own `.venv`) side by side: both servers are loaded, then
the queries run in `--rounds` rounds, the two servers alternating within each round, so that both
see the same machine; the section gives each one's nDCG@10 and the medians over rounds of p50 and p95.
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
PROJECT = "scifact"


async def _push(base: str, dsn: str, quick: bool) -> tuple[Any, int, float]:
    import asyncpg
    from bench_mcp import session

    from app.memory import service_eval

    data = service_eval.load(DATASET, "test")
    docs = list(data.corpus.items())[: 300 if quick else None]
    started = time.perf_counter()

    async def client(part: list[tuple[str, str]]) -> None:
        async with session(base) as mcp:
            for doc_id, body in part:
                args = {
                    "text": body,
                    "project_id": PROJECT,
                    "source_uri": f"beir:{doc_id}",
                    "wait_for_embedding": False,
                }
                answer = await mcp.call_tool("push", args)
                if answer.is_error:
                    raise RuntimeError(f"push failed: {answer.content}")

    await asyncio.gather(*(client(docs[i::4]) for i in range(4)))
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(3600):  # the queue drains at the model's pace: 20 to 25 abstracts a second here
            if not await conn.fetchval("SELECT count(*) FROM embedding_queue"):
                break
            await asyncio.sleep(1)
        await conn.execute("ANALYZE memories")
    finally:
        await conn.close()
    return data, len(docs), time.perf_counter() - started


async def _queries(base: str, data: Any, quick: bool) -> tuple[dict[str, list[str]], list[float], list[int]]:
    from bench_mcp import session

    qids = sorted(data.qrels)[: 60 if quick else None]
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    sizes: list[int] = []
    async with session(base) as client:
        await client.call_tool("search", {"query_text": "warm up", "project_id": PROJECT})
        for qid in qids:
            args = {
                "query_text": data.queries[qid][:512],
                "project_id": PROJECT,
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
            ranked = [str(r.get("source_uri") or "").removeprefix("beir:") for r in body["results"]]
            rankings[qid] = list(dict.fromkeys(ranked))  # a document's best chunk only
    return rankings, latencies, sizes


def run(quick: bool = False) -> str:
    """Index SciFact into a fresh server, query it over MCP and return a markdown section."""
    from bench_mcp import on_embedded_postgres

    from app.memory import service_eval

    if not (DATASET / "queries.jsonl").exists():
        return "## SciFact over MCP\n\nSkipped: no dataset at ../shared/eval/scifact."
    env = {"CAIRN_FEATURES": "memory", "CAIRN_MEMORY_CHUNK_TOKENS": "512"}
    with on_embedded_postgres(env, prefix="cairn-bench-beir-") as (srv, dsn):
        data, pushed, seconds = asyncio.run(_push(srv.url, dsn, quick))
        rankings, latencies, sizes = asyncio.run(_queries(srv.url, data, quick))
    scores = service_eval.quality(rankings, data.qrels)
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
    return "\n".join(
        [
            "## SciFact over MCP",
            "",
            f"`push` then `search` (hybrid, k = 10) through a real server over MCP: {len(rankings)} test "
            f"queries; {pushed:,} documents pushed and embedded in {seconds:.0f} s:",
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


def compare(other: Path, quick: bool = False, rounds: int = 3, other_first: bool = False) -> str:
    """This checkout and `other`, side by side on one machine (module docstring): a markdown section.
    `other_first` loads the other checkout first (the load order is the one thing rounds do not alternate)."""
    from bench_mcp import on_embedded_postgres

    from app.memory import service_eval

    env = {"CAIRN_FEATURES": "memory", "CAIRN_MEMORY_CHUNK_TOKENS": "512"}
    names = {"this": ROOT, "other": other.resolve()}
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    quality: dict[str, float] = {}
    with (
        on_embedded_postgres(env, prefix="cairn-bench-beir-", root=names["this"]) as (this_srv, this_dsn),
        on_embedded_postgres(env, prefix="cairn-bench-beir-", root=names["other"]) as (other_srv, other_dsn),
    ):
        servers = {"this": (this_srv, this_dsn), "other": (other_srv, other_dsn)}
        order = ["other", "this"] if other_first else ["this", "other"]
        loaded = {n: asyncio.run(_push(servers[n][0].url, servers[n][1], quick)) for n in order}
        for r in range(rounds):
            for n in list(names) if r % 2 == 0 else list(reversed(names)):
                rankings, latencies, _ = asyncio.run(_queries(servers[n][0].url, loaded[n][0], quick))
                quality[n] = service_eval.quality(rankings, loaded[n][0].qrels)["nDCG@10"]
                latencies.sort()
                p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
                runs[n].append((statistics.median(latencies), p95))
    rows = []
    for n, root in names.items():
        p50 = statistics.median(x for x, _ in runs[n])
        p95 = statistics.median(y for _, y in runs[n])
        rows.append(f"| {n} ({root.name}) | {quality[n]:.3f} | {p50:.1f} | {p95:.1f} |")
    ratio = statistics.median(y for _, y in runs["this"]) / statistics.median(y for _, y in runs["other"])
    return "\n".join(
        [
            "## SciFact over MCP, side by side",
            "",
            f"Both checkouts loaded with the same documents ({' first, then '.join(order)}), then {rounds} rounds "
            "of every test query, the two servers alternating; medians over rounds:",
            "",
            "| checkout | nDCG@10 | p50 ms | p95 ms |",
            "| --- | --- | --- | --- |",
            *rows,
            "",
            f"p95 of this checkout over the other's: {ratio:.2f}x.",
        ]
    )


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if "--compare" in sys.argv:
        other = Path(sys.argv[sys.argv.index("--compare") + 1])
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 3
        print(compare(other, quick, rounds, other_first="--other-first" in sys.argv))
    else:
        print(run(quick=quick))
