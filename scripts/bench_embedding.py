"""Benchmark the local embedder: sequential calls, concurrent callers (micro-batching), batches.

Three bounded runs over ``n`` short sentences (~12 words) each:

* ``sequential``: one ``embed_one`` call at a time (batch size 1);
* ``concurrent-32``: 32 callers, each calling ``embed_one`` in a loop, coalesced by the batcher;
* ``batch-32``: direct ``embed`` calls of 32 texts (the ceiling the batcher can approach).

Latency is per call (for ``batch-32``: per call of 32 texts). Usage::

    python scripts/bench_embedding.py [--n 300] [--workers 1] [--json out.json]

``run(n)`` returns the figures as a dict, for ``make bench`` to include in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.core.embeddings.local import LocalOnnxEmbedder

_WORDS = (
    "agent memory stores notes about users projects deadlines meetings code reviews database "
    "queries vectors search results summaries preferences errors logs deployments servers"
).split()


def sentences(n: int, seed: int = 7) -> list[str]:
    """``n`` deterministic sentences of about 12 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(10, 14))) + "." for _ in range(n)]


def _stats(name: str, texts: int, wall: float, latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000

    return {
        "mode": name,
        "texts": texts,
        "calls": len(latencies),
        "seconds": round(wall, 3),
        "texts_per_s": round(texts / wall, 1),
        "p50_ms": round(pct(50), 2),
        "p95_ms": round(pct(95), 2),
    }


async def _timed(call: Callable[[], Awaitable[Any]], latencies: list[float]) -> None:
    started = time.perf_counter()
    await call()
    latencies.append(time.perf_counter() - started)


async def _bench(n: int, workers: int, max_batch: int, max_wait_ms: float) -> dict[str, Any]:
    embedder = LocalOnnxEmbedder(workers=workers, max_batch=max_batch, max_wait_ms=max_wait_ms)
    texts = sentences(n)
    await embedder.embed(sentences(64, seed=1))  # load and warm up
    results: list[dict[str, Any]] = []
    try:
        latencies: list[float] = []
        started = time.perf_counter()
        for text in texts:
            await _timed(lambda t=text: embedder.embed_one(t), latencies)  # type: ignore[misc]
        results.append(_stats("sequential (batch 1)", n, time.perf_counter() - started, latencies))

        latencies, queue = [], list(reversed(texts))
        batches_before = embedder.batches_run

        async def caller() -> None:
            while queue:
                text = queue.pop()
                await _timed(lambda t=text: embedder.embed_one(t), latencies)  # type: ignore[misc]

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(32)))
        concurrent = _stats("32 concurrent callers", n, time.perf_counter() - started, latencies)
        concurrent["batches"] = embedder.batches_run - batches_before
        results.append(concurrent)

        latencies = []
        started = time.perf_counter()
        for i in range(0, n, 32):
            chunk = texts[i : i + 32]
            await _timed(lambda c=chunk: embedder.embed(c), latencies)  # type: ignore[misc]
        results.append(_stats("direct batches of 32", n, time.perf_counter() - started, latencies))
    finally:
        await embedder.close()
    return {
        "model": embedder.model,
        "n": n,
        "workers": workers,
        "intra_op_threads": embedder.intra_op_threads,
        "max_batch": max_batch,
        "max_wait_ms": max_wait_ms,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "results": results,
    }


def run(n: int = 300, *, workers: int = 1, max_batch: int = 32, max_wait_ms: float = 5.0) -> dict[str, Any]:
    """Run the three benchmarks with ``n`` texts each and return the figures."""
    return asyncio.run(_bench(n, workers, max_batch, max_wait_ms))


def markdown(report: dict[str, Any]) -> str:
    """Render ``run()``'s figures as a markdown table."""
    lines = [
        f"Local embedder ({report['model']}, int8 ONNX), {report['n']} texts of ~12 words per run, "
        f"{report['workers']} worker(s) x {report['intra_op_threads']} intra-op threads, "
        f"max_batch {report['max_batch']}, max_wait {report['max_wait_ms']} ms, {report['cpus']} CPUs.",
        "",
        "| mode | texts/s | p50 ms/call | p95 ms/call |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in report["results"]:
        mode = r["mode"] + (f" ({r['batches']} batches)" if "batches" in r else "")
        lines.append(f"| {mode} | {r['texts_per_s']} | {r['p50_ms']} | {r['p95_ms']} |")
    return "\n".join(lines)


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Benchmark the local embedder.")
    parser.add_argument("--n", type=int, default=300, help="texts per run")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    report = run(args.n, workers=args.workers, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms)
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
