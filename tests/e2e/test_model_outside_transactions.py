"""No transaction is open while a model runs: the calls that read, then run the embedding model, then
write (duplicate detection, extractive summaries) release their reads before the model and write in a
fresh transaction. Checked from PostgreSQL's side while the model runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support.server import PgCluster, RunningServer

HELD = """SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'cairn'
            AND state = 'idle in transaction' AND xact_start < $1"""


@pytest.fixture
def held_during_model(server: RunningServer, pg: PgCluster) -> Iterator[list[int]]:
    """While installed, every `embed` of the server's model first waits 50 ms, then counts the
    server's connections idle in a transaction that began before the model was called."""
    embedder = server.app.state.cairn.embedder
    original: Callable[[Sequence[str]], Awaitable[list[list[float]]]] = embedder.embed
    seen: list[int] = []
    dsn = pg.handle.libpq_uri(pg.database)

    async def probing(texts: Sequence[str]) -> list[list[float]]:
        started = datetime.now(UTC)
        await asyncio.sleep(0.05)
        conn = await asyncpg.connect(dsn)
        try:
            seen.append(int(await conn.fetchval(HELD, started)))
        finally:
            await conn.close()
        return await original(texts)

    embedder.embed = probing
    try:
        yield seen
    finally:
        del embedder.embed  # back to the class's method


async def _ok(rest: httpx.AsyncClient, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await rest.request(method, path, json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_duplicate_scan_embeds_with_no_transaction_open(
    rest: httpx.AsyncClient, held_during_model: list[int]
) -> None:
    await _ok(
        rest,
        "POST",
        "/api/v1/graph/entities",
        {
            "project": "dups",
            "entities": [
                {
                    "name": "Ada",
                    "entityType": "person",
                    "observations": ["Ada writes the compiler in C", "Ada writes the compiler in C language"],
                }
            ],
            "wait_for_embedding": True,
        },
    )
    held_during_model.clear()
    found = await _ok(rest, "POST", "/api/v1/graph/observations/duplicates", {"project": "dups", "threshold": 0.9})
    assert found["flagged"] == 1 and found["pairs"][0]["entity_name"] == "Ada", found
    assert held_during_model and held_during_model == [0] * len(held_during_model)


async def test_extractive_summaries_rank_with_no_transaction_open(
    rest: httpx.AsyncClient, held_during_model: list[int]
) -> None:
    topics = ["backups", "deploys", "alerts", "invoices", "schemas", "queues"]
    for i, topic in enumerate(topics):
        text = f"The team reviewed {topic} on day {i}. " + " ".join(
            f"Sentence {j} explains why {topic} matter for the release and who owns them." for j in range(6)
        )
        await _ok(
            rest,
            "POST",
            "/api/v1/memory/push",
            {"project_id": "sums", "text": text, "memory_type": "episodic", "wait_for_embedding": True},
        )
        await _ok(rest, "POST", "/api/v1/thoughts", {"project": "sums", "content": f"A thought on {topic}."})
    held_during_model.clear()
    now = datetime.now(UTC)
    window = {"start": (now - timedelta(hours=1)).isoformat(), "end": (now + timedelta(hours=1)).isoformat()}
    summary = await _ok(
        rest,
        "POST",
        "/api/v1/memory/summarize",
        {"project_id": "sums", "time_range": window, "strategy": "extractive", "max_words": 40},
    )
    assert summary["strategy"] == "extractive" and summary["upserted_memory_id"], summary
    thoughts = await _ok(
        rest, "POST", "/api/v1/thoughts/summarize", {"project": "sums", "strategy": "extractive", "max_words": 20}
    )
    assert thoughts["summary"], thoughts
    assert len(held_during_model) >= 2, "the summaries did not run the model"
    assert held_during_model == [0] * len(held_during_model)
