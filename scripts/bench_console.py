"""Console pages at scale: how long each main page of `/ui` takes to load in a real browser with
100,000 memories stored (90,000 chunks and 10,000 thoughts), 2,000 graph entities and 20,000 audit rows.

Starts `cairn serve` on an embedded PostgreSQL (`bench_mcp.on_embedded_postgres`), loads the rows
straight through the families' repositories (synthetic clustered vectors and 20-word Zipf texts, as
`bench_memory`, so the load is fast and the figures measure the pages, not the model), signs in with
headless Chromium (Debian's `chromium`, driven by Playwright) and opens each page `RUNS` times.
A page's load time is the browser's navigation timing from the request's start to the end of the
`load` event (server time, transfer, parsing, styles, scripts and images), the server time is the
part up to the last byte of the HTML.

    python scripts/bench_console.py [--quick]   # quick: 5,000 memories
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

RUNS = 15
TIMING = (
    "(() => { const n = performance.getEntriesByType('navigation')[0];"
    " return [n.responseEnd - n.startTime, n.loadEventEnd - n.startTime]; })()"
)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


async def _load(db_url: str, memories: int) -> tuple[str, str]:
    """Store the rows; returns a memory id and an entity name to open."""
    from bench_memory import WORDS, zipf_vocabulary
    from sqlalchemy import text as sa_text

    from app.core.config import Settings
    from app.core.db import Database
    from app.core.models import AuditEntry
    from app.core.repository import AuditRepository, ProjectRepository
    from app.memory.config import MemorySettings
    from app.memory.repository import MemoryRepository
    from app.memory.service_common import EMBEDDING_TARGET

    model = "all-MiniLM-L6-v2"
    settings = Settings(database_url=db_url)
    db = Database(db_url, settings)
    rng = np.random.default_rng(5)
    pick = random.Random(5)
    vocab, vocab_p = zipf_vocabulary()
    centers = rng.normal(size=(64, 384)).astype(np.float32)
    thoughts = memories // 10
    async with db.transaction() as session:
        project = await ProjectRepository(session).ensure("default")
        coll, _ = await MemoryRepository(session).ensure_collection(
            MemorySettings().memory_default_collection, model, 384
        )
    first = ""
    loaded = 0
    while loaded < memories:
        n = min(2000, memories - loaded)
        vecs = centers[rng.integers(0, 64, n)] + rng.normal(scale=0.6, size=(n, 384)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        drawn = rng.choice(len(vocab), size=(n, 20), p=vocab_p)
        rows: list[dict[str, Any]] = []
        for j in range(n):
            thought = loaded + j < thoughts
            meta = {"type": pick.choice(["idea", "task", "decision"]), "topics": [pick.choice(WORDS)]}
            rows.append(
                {
                    "id": uuid.uuid4(),
                    "project_id": project.id,
                    "collection_id": coll.id,
                    "kind": "thought" if thought else "chunk",
                    "memory_type": pick.choice(["episodic", "semantic"]),
                    "content": " ".join(vocab[w] for w in drawn[j]),
                    "content_hash": f"h{loaded + j}",
                    "tags": [] if thought else [pick.choice(WORDS)],
                    "metadata": json.dumps(meta if thought else {}),
                    "source_uri": None,
                    "document_id": None,
                    "chunk_index": None,
                    "summary_key": None,
                }
            )
        async with db.transaction() as session:
            await MemoryRepository(session).insert_memories(rows)
            await EMBEDDING_TARGET.store(
                session, model, [(str(r["id"]), v.tolist()) for r, v in zip(rows, vecs, strict=True)]
            )
        first = first or str(rows[-1]["id"])
        loaded += n
    async with db.transaction() as session:
        audit = AuditRepository(session)
        for i in range(memories // 5):
            await audit.add(
                AuditEntry(
                    key_id="bench",
                    key_name="bench",
                    operation=pick.choice(["push", "capture_thought", "create_entities"]),
                    transport="mcp",
                    project="default",
                    outcome="ok",
                    error_code=None,
                    counts={"chunksIndexed": i % 7},
                    request_id=f"r{i}",
                )
            )
    async with db.engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in ("memories", "memory_embeddings", "audit_log"):
            await auto.execute(sa_text(f"VACUUM ANALYZE {table}"))
    await db.dispose()
    return first, "entity-1"


async def _entities(base: str, key: str, count: int) -> None:
    """Graph entities with observations and a chain of relations, through REST."""
    import httpx

    async with httpx.AsyncClient(base_url=base, timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        for start in range(0, count, 200):
            names = [f"entity-{i}" for i in range(start + 1, min(count, start + 200) + 1)]
            entities = [
                {"name": n, "entityType": "thing", "observations": [f"{n} is observed", f"{n} has a note"]}
                for n in names
            ]
            answer = await client.post("/api/v1/graph/entities", json={"entities": entities})
            answer.raise_for_status()
            relations = [{"from": a, "to": b, "relationType": "links to"} for a, b in itertools.pairwise(names)]
            answer = await client.post("/api/v1/graph/relations", json={"relations": relations})
            answer.raise_for_status()


async def _pages(base: str, key: str, pages: dict[str, str]) -> dict[str, tuple[list[float], list[float]]]:
    from playwright.async_api import async_playwright

    sys.path.insert(0, str(ROOT))
    from tests.support.browser import CHROMIUM_ARGS, chromium_path

    out: dict[str, tuple[list[float], list[float]]] = {}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        page = await (await browser.new_context()).new_page()
        await page.goto(f"{base}/ui/login")
        await page.fill("#key", key)
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{base}/ui/")
        for name, path in pages.items():
            server, total = [], []
            for run in range(RUNS + 1):
                answer = await page.goto(f"{base}{path}")
                assert answer is not None and answer.status == 200, (path, answer and answer.status)
                await page.wait_for_load_state("load")
                got = await page.evaluate(TIMING)
                if run:  # the first opens warm the server's and the browser's caches
                    server.append(float(got[0]))
                    total.append(float(got[1]))
            out[name] = (server, total)
        await browser.close()
    return out


def run(quick: bool = False) -> str:
    """Load a server and time its console pages in Chromium; returns a markdown section."""
    from bench_mcp import KEY, on_embedded_postgres

    memories = 5_000 if quick else 100_000
    with on_embedded_postgres({}, prefix="cairn-bench-console-") as (srv, _dsn):
        started = time.perf_counter()
        memory_id, entity = asyncio.run(_load(srv.extra_env["CAIRN_DATABASE_URL"], memories))
        asyncio.run(_entities(srv.url, KEY, 200 if quick else 2000))
        load_seconds = time.perf_counter() - started
        pages = {
            "home (health)": "/ui/",
            "memory search, hybrid": "/ui/memory?q=kalo+mire+database+index&mode=hybrid",
            "memory search, lexical": "/ui/memory?q=kalo+mire+database+index&mode=lexical",
            "a memory": f"/ui/memory/items/{memory_id}",
            "thoughts, facets": "/ui/thoughts",
            "graph search": "/ui/graph?q=entity+observed",
            "an entity with its neighbourhood": f"/ui/graph/entities/{entity}",
            "audit log": "/ui/admin/audit",
        }
        timings = asyncio.run(_pages(srv.url, KEY, pages))
    lines = [
        "## Console pages",
        "",
        f"Each main page of `/ui` opened {RUNS} times in headless Chromium (after one warm-up) on a server "
        f"holding {memories:,} memories ({memories // 10:,} of them thoughts), {200 if quick else 2000:,} graph "
        f"entities with observations and relations, and {memories // 5:,} audit rows (loaded in "
        f"{load_seconds:.0f} s). Server: the navigation timing up to the last byte of the HTML; load: up to "
        "the end of the `load` event (styles, scripts, images and the graph library included). Goal: < 300 ms.",
        "",
        "| page | server p50 ms | server p95 ms | load p50 ms | load p95 ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, (server, total) in timings.items():
        lines.append(
            f"| {name} | {statistics.median(server):.1f} | {_pct(server, 0.95):.1f} | "
            f"{statistics.median(total):.1f} | {_pct(total, 0.95):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
