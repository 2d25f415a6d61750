"""Switching the embedding model end to end: a second server on the same database uses another model
(an OpenAI-compatible HTTP embedder on 127.0.0.1). Writes never fail for the switch; search there sees
only that model's vectors, falls back to full text while it has none, and backfill_embeddings (through
the embedding queue) closes the gap; a text the provider refuses is reported without holding back the
others. A server with queue workers makes the missing vectors by itself (the start-up sweep)."""

from __future__ import annotations

import asyncpg
import httpx

from tests.support.fake_embedder import FakeEmbeddingServer
from tests.support.memory import NOTES, api
from tests.support.server import (
    ADMIN_KEY,
    PgCluster,
    RunningServer,
    mcp_client,
    server_settings,
    start_server,
    stop_server,
)


async def test_model_switch_fallback_then_backfill(
    server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster
) -> None:
    for text, tags in NOTES:
        await api(rest, "/memory/push", {"text": text, "project": "sw", "type": "episodic", "tags": tags})
    await api(
        rest, "/thoughts", {"content": "Remember to renew the TLS certificate of the staging cluster.", "project": "sw"}
    )
    with FakeEmbeddingServer("minilm-http") as fake:
        settings = server_settings(
            pg.url,
            embedding_provider="openai",
            embedding_base_url=fake.base_url,
            embedding_model="minilm-http",
            embedding_dimension=384,
            embedding_queue_workers=0,  # no sweep: the gap stays until backfill_embeddings closes it
        )
        srv, thread, _app = start_server(settings)
        url = f"http://127.0.0.1:{settings.port}"
        try:
            async with httpx.AsyncClient(
                base_url=url, timeout=60, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
            ) as other:
                # no vectors of the new model: every query-based tool falls back to full text
                query = {"query_text": "database migration timeout", "project": "sw", "explain": True}
                body = await api(other, "/memory/search", query)
                assert body["model"] == "minilm-http" and body["retrieval_mode"] == "lexical_fallback"
                assert body["results"] and all(set(r["signals"]) == {"lexical"} for r in body["results"])
                stats = await api(other, "/thoughts/stats", {"project": "sw"}, method="GET")
                assert stats["model"] == "minilm-http" and stats["missing_embeddings"] == 6
                # a capture whose embedding fails is stored anyway, without a vector
                failed = await api(
                    other, "/thoughts", {"content": "FAIL-EMBED this one cannot be embedded", "project": "sw"}
                )
                assert failed["embedded"] is False and "HTTP 500" in failed["embedding"]["provider_error"]
                assert "failing_since" not in failed["embedding"]  # one text refused; the provider answers
                async with mcp_client(url) as mcp:
                    res = await mcp.call_tool("backfill_embeddings", {"project": "sw", "batch_size": 4})
                    report = res.structured_content
                assert report is not None
                assert report["model"] == "minilm-http" and report["scanned"] == 7 and report["queued"] == 7
                assert report["embedded"] == 6 and report["failed"] == 1
                assert report["embedding"]["status"] == "pending" and report["embedding"]["failed"] == 1
                assert report["failures"][0]["id"] == failed["thought"]["id"]
                body = await api(other, "/memory/search", query)
                assert body["retrieval_mode"] == "hybrid"
                assert any("semantic" in r["signals"] for r in body["results"])
                # threshold 0: the ranking is under test; a terse query's cosine (0.43 here) sits under the
                # semantic default (docs/memory.md, default thresholds)
                sem = await api(
                    other,
                    "/thoughts/search",
                    {"query": "certificate renewal", "project": "sw", "mode": "semantic", "threshold": 0},
                )
                assert sem["retrieval_mode"] == "semantic" and "TLS" in sem["results"][0]["content"]
                assert (await api(other, "/thoughts/stats", {"project": "sw"}, method="GET"))["missing_embeddings"] == 1
        finally:
            stop_server(srv, thread)
    # the first server still searches with its own model's vectors, side by side with the new ones
    body = await api(
        rest, "/memory/search", {"query_text": "database migration timeout", "project": "sw", "mode": "semantic"}
    )
    assert body["model"] == "all-MiniLM-L6-v2" and body["retrieval_mode"] == "semantic"
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        rows = await conn.fetch("SELECT model, count(*) AS n FROM memory_embeddings GROUP BY model ORDER BY model")
    finally:
        await conn.close()
    assert {r["model"]: r["n"] for r in rows} == {"all-MiniLM-L6-v2": 6, "minilm-http": 6}


async def test_a_new_model_embeds_every_family_by_itself(
    server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster
) -> None:
    await api(rest, "/memory/push", {"text": "The staging cluster runs PostgreSQL 18.", "project": "sweep"})
    await api(
        rest,
        "/graph/entities",
        {"project": "sweep", "entities": [{"name": "Staging", "entityType": "cluster", "observations": ["PG 18"]}]},
    )
    with FakeEmbeddingServer("minilm-sweep") as fake:
        settings = server_settings(
            pg.url,
            embedding_provider="openai",
            embedding_base_url=fake.base_url,
            embedding_model="minilm-sweep",
            embedding_dimension=384,
        )
        srv, thread, _app = start_server(settings)
        url = f"http://127.0.0.1:{settings.port}"
        try:
            async with httpx.AsyncClient(
                base_url=url, timeout=60, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
            ) as other:
                drained = await api(other, "/embeddings/wait", {"timeout_seconds": 60})
                assert drained["drained"] is True and drained["model"] == "minilm-sweep"
                # every row of every family written under the first model has a vector of the new one
                conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
                try:
                    missing = await conn.fetchval(
                        "SELECT (SELECT count(*) FROM memories m WHERE NOT EXISTS (SELECT 1 FROM memory_embeddings e "
                        "WHERE e.memory_id = m.id AND e.model = 'minilm-sweep')) + (SELECT count(*) FROM "
                        "graph_entities g WHERE NOT EXISTS (SELECT 1 FROM graph_embeddings e WHERE e.owner_id = g.id "
                        "AND e.model = 'minilm-sweep'))"
                    )
                finally:
                    await conn.close()
                assert missing == 0
                hits = await api(
                    other, "/graph/search/semantic", {"project": "sweep", "query": "postgres staging", "explain": True}
                )
                assert hits["results"][0]["name"] == "Staging" and hits["results"][0]["cosine_sim"] > 0
                # writes go on under the new model, and say when their vectors are stored
                pushed = await api(other, "/memory/push", {"text": "A note under the new model.", "project": "sweep"})
                assert pushed["embedding"] == "done"
        finally:
            stop_server(srv, thread)
