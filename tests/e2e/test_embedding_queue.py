"""The embedding queue on a real server: writes answer before their vectors exist (async mode) and
say so, a per-call wait gives read-your-writes, search finds not-yet-embedded rows by text and flags
them, and with the embedding provider down writes never fail and every vector arrives once it is back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import httpx

from tests.support.fake_embedder import FakeEmbeddingServer
from tests.support.instrumentation import ops as test_ops
from tests.support.memory import api
from tests.support.replies import hit_texts
from tests.support.server import ADMIN_KEY, PgCluster, free_port, server_settings, start_server, stop_server
from tests.support.waiting import eventually

ENTITIES = [
    {"name": f"Service {i}", "entityType": "service", "observations": [f"service {i} runs on port {8000 + i}"]}
    for i in range(30)
]


async def _count(pg: PgCluster, sql: str) -> int:
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


async def test_async_writes_answer_pending_and_wait_gives_read_your_writes(pg: PgCluster) -> None:
    settings = server_settings(pg.url, embedding_write_mode="async")
    srv, thread, _app = start_server(settings)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{settings.port}", timeout=60, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            created = await api(c, "/graph/entities", {"project": "q", "entities": ENTITIES})
            assert created["embedding"] == "pending" and len(created["entities"]) == len(ENTITIES)
            pushed = await api(c, "/memory/push", {"text": "Queue me later, please.", "project": "q"})
            assert pushed["embedding"] == "pending"
            # search finds the rows by their text meanwhile
            found = await api(
                c, "/memory/search", {"query_text": "queue later", "project": "q", "mode": "hybrid", "explain": True}
            )
            assert found["results"] and "lexical" in found["results"][0]["signals"]
            assert found["results"][0]["embedding"] == "pending"
            drained = await api(c, "/embeddings/wait", {"timeout_seconds": 60})
            assert drained["drained"] is True and drained["depth"] == 0
            assert await _count(pg, "SELECT count(*) FROM graph_embeddings") == len(ENTITIES)
            assert await _count(pg, "SELECT count(*) FROM embedding_queue") == 0
            hits = await api(
                c, "/graph/search/semantic", {"project": "q", "query": "port 8007", "limit": 3, "explain": True}
            )
            assert all("embedding" not in h for h in hits["results"]) and hits["results"][0]["cosine_sim"] > 0
            # a write that asks to wait answers once its own vectors are stored
            waited = await api(
                c, "/memory/push", {"text": "Read my write at once.", "project": "q", "wait_for_embedding": True}
            )
            assert waited["embedding"] == "done"
            sem = await api(c, "/memory/search", {"query_text": "read my write", "project": "q", "mode": "semantic"})
            assert hit_texts(sem)[0] == "Read my write at once." and "embedding" not in sem["results"][0]
            health = await api(c, "/resources/health", {}, method="GET")
            assert health["embedding_queue"]["depth"] == 0
    finally:
        stop_server(srv, thread)


async def test_provider_down_under_writes_loses_nothing(pg: PgCluster) -> None:
    port = free_port()  # nothing listens here until the provider "comes back"
    settings = server_settings(
        pg.url,
        embedding_provider="openai",
        embedding_base_url=f"http://127.0.0.1:{port}/v1",
        embedding_model="minilm-flaky",
        embedding_dimension=384,
        embedding_write_mode="async",
        embedding_queue_retry_max_seconds=0.5,
        embedding_queue_poll_seconds=0.2,
    )
    srv, thread, _app = start_server(settings)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{settings.port}", timeout=60, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            writes = [
                api(c, "/graph/entities", {"project": "down", "entities": ENTITIES[:10]}),
                api(c, "/memory/push", {"text": "Written while the model is down.", "project": "down"}),
                api(c, "/thoughts", {"content": "A thought while the model is down.", "project": "down"}),
                api(c, "/analysis/store", {"analysis_id": "a1", "project": "down", "findings": [{"finding": "x"}]}),
                api(
                    c,
                    "/memory/push",
                    {"text": "Waiting cannot help now.", "project": "down", "wait_for_embedding": True},
                ),
            ]
            replies = await asyncio.gather(*writes)
            # an async write says "pending", naming the failure once the queue has seen one (a race here);
            # the write that waited saw its own rows fail and names the provider's error
            assert replies[0]["embedding"] == "pending" or replies[0]["embedding"]["status"] == "pending"
            waited = replies[-1]["embedding"]
            assert waited["status"] == "pending" and "ConnectError" in waited["provider_error"], waited
            # searches say they ran on text alone
            found = await api(c, "/memory/search", {"query_text": "model down", "project": "down"})
            assert found["retrieval_mode"] == "lexical_fallback" and found["results"]
            graph = await api(c, "/graph/search/semantic", {"project": "down", "query": "service 3"})
            assert graph["notice"] and graph["results"] and graph["engine"] == "text"
            queued = (await api(c, "/resources/health", {}, method="GET"))["embedding_queue"]
            assert queued["depth"] >= 10 + 4 and queued["retrying"] >= 1  # (+ earlier tests' rows: the sweep)
            with FakeEmbeddingServer("minilm-flaky", port=port):
                drained = await api(c, "/embeddings/wait", {"timeout_seconds": 60})
                assert drained["drained"] is True
            missing = (
                "SELECT (SELECT count(*) FROM graph_entities g WHERE NOT EXISTS (SELECT 1 FROM graph_embeddings e "
                "WHERE e.owner_id = g.id AND e.model = 'minilm-flaky')) + (SELECT count(*) FROM memories m WHERE "
                "NOT EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.memory_id = m.id AND e.model = 'minilm-flaky'))"
                " + (SELECT count(*) FROM analysis_findings f WHERE NOT EXISTS (SELECT 1 FROM "
                "analysis_finding_embeddings e WHERE e.owner_id = f.id AND e.model = 'minilm-flaky'))"
            )
            assert await _count(pg, missing) == 0
            assert await _count(pg, "SELECT count(*) FROM memories WHERE content LIKE '%model is down%'") == 2
    finally:
        stop_server(srv, thread)


async def test_workers_give_way_to_calls_within_the_defer_bound(pg: PgCluster, tmp_path: Path) -> None:
    """While a call is in flight, queued vectors wait (the writes are not slowed by the model), but
    never past `embedding_queue_defer_seconds`; once the calls stop they are made at once.

    The test holds a real call in flight (the instrumentation's `test_progress`, released by a file)
    rather than keeping the server busy with a stream of calls, so no gap between calls on a slow
    machine counts as a quiet moment, and it judges each outcome by what the queue did, not by how
    long the model took."""
    # A database of its own: another server's idle workers on the same queue would (rightly) take the rows.
    db = pg.handle.url(pg.new_database())
    # Far beyond the test's span: in part 1 only the end of the calls can let the workers go.
    settings = server_settings(db, embedding_write_mode="async", embedding_queue_defer_seconds=600.0)
    srv, thread, app = start_server(settings, extra=[test_ops])
    queue = app.state.cairn.queue

    async def depth(c: httpx.AsyncClient) -> int:
        return int((await api(c, "/resources/health", {}, method="GET"))["embedding_queue"]["depth"])

    async def held(c: httpx.AsyncClient, name: str) -> tuple[asyncio.Task[httpx.Response], Path]:
        """A call in flight until the returned file is created."""
        started, release = tmp_path / f"{name}-started", tmp_path / f"{name}-release"
        body = {"steps": 1, "delay_ms": 0, "started": str(started), "release": str(release)}
        call = asyncio.create_task(c.post("/api/v1/testing/progress", json=body))
        await eventually(started.exists, what=f"the held call {name} running")
        return call, release

    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{settings.port}", timeout=120, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ) as c:
            # the workers' first batch loads the model's background session: not part of what is judged
            await api(c, "/graph/entities", {"project": "warm", "entities": ENTITIES[16:17]})
            await eventually(_empty(c, depth), timeout=60, what="the warm-up vector made")
            # 1. while a call is in flight nothing is embedded; once it ends, everything is
            call, release = await held(c, "burst")
            await api(c, "/graph/entities", {"project": "burst", "entities": ENTITIES[:8]})
            samples = []
            watched = time.monotonic()
            while time.monotonic() - watched < 1.5:  # an observation window, judged on every sample
                samples.append(await depth(c))
                await asyncio.sleep(0.05)
            assert not call.done() and set(samples) == {8}, f"vectors made while a call was in flight: {samples}"
            release.touch()
            assert (await call).status_code == 200
            await eventually(_empty(c, depth), timeout=60, what="the vectors made once the calls stopped")
            # 2. a call that never ends: the vectors arrive anyway, once the oldest row is `bound` old
            bound = 2.0
            queue.settings = queue.settings.model_copy(update={"embedding_queue_defer_seconds": bound})
            call, release = await held(c, "steady")
            written = time.monotonic()
            await api(c, "/graph/entities", {"project": "steady", "entities": ENTITIES[8:16]})
            await eventually(_empty(c, depth), timeout=bound + 60, what="the vectors made under a steady load")
            waited = time.monotonic() - written
            assert not call.done(), "the load ended before the vectors came: the bound was not what let them go"
            assert waited >= bound - 0.2, f"made {waited:.2f} s after the write, before the {bound} s bound"
            release.touch()
            assert (await call).status_code == 200
    finally:
        stop_server(srv, thread)


def _empty(c: httpx.AsyncClient, depth: Callable[[httpx.AsyncClient], Awaitable[int]]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await depth(c) == 0

    return check
