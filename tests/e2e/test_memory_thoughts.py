"""Memory, AMCS thoughts dialect (seed 004) over MCP and REST: capture, list, update, archive, delete,
search with lexical fallback, recall, project context, summaries, related thoughts, stats, backfill."""

from __future__ import annotations

from collections import Counter
from typing import Any

import asyncpg
import httpx

from tests.support.memory import api
from tests.support.replies import assert_states_its_size, cited
from tests.support.server import BOUND_PROJECT, PROJECT_KEY, PgCluster, RunningServer, error_of, mcp_client, text_of

THOUGHTS: list[tuple[str, dict[str, Any]]] = [
    (
        "Alice suggested caching the embedding model in the container image to speed up cold starts.",
        {"type": "idea", "topics": ["deploy", "performance"], "people": ["Alice"]},
    ),
    (
        "Bob will rotate the API keys on Friday.",
        {"type": "task", "topics": ["security"], "people": ["Bob"], "action_items": ["rotate keys"]},
    ),
    (
        "Cold starts take twelve seconds because the model is downloaded at boot.",
        {"type": "observation", "topics": ["performance"]},
    ),
    (
        "The quarterly planning meeting moved to Thursday afternoon.",
        {"type": "observation", "topics": ["planning"], "people": ["Carol"]},
    ),
]


async def capture_all(mcp: Any, project: str = "amcs") -> list[str]:
    ids = []
    for content, meta in THOUGHTS:
        res = await mcp.call_tool("capture_thought", {"content": content, "project": project, "metadata": meta})
        assert not res.is_error, res
        body = res.structured_content
        assert body["embedded"] is True and body["thought"]["has_embedding"] is True
        ids.append(body["thought"]["id"])
    return ids


async def test_thought_lifecycle(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async with mcp_client(server.url) as mcp:
        ids = await capture_all(mcp)
        got = (await mcp.call_tool("get_thought", {"id": ids[1]})).structured_content
        assert got["thought"]["metadata"]["people"] == ["Bob"] and got["thought"]["project"] == "amcs"
        listed = (await mcp.call_tool("list_thoughts", {"project": "amcs", "topic": "performance"})).structured_content
        assert {t["id"] for t in listed["thoughts"]} == {ids[0], ids[2]} and listed["total"] == 2
        listed = (await mcp.call_tool("list_thoughts", {"person": "Carol"})).structured_content
        assert [t["id"] for t in listed["thoughts"]] == [ids[3]]
        listed = (await mcp.call_tool("list_thoughts", {"type": "observation", "days": 1})).structured_content
        assert listed["total"] == 2
        upd = await mcp.call_tool("update_thought", {"id": ids[1], "content": "Bob rotated the API keys."})
        assert upd.structured_content["re_embedded"] is True
        arch = (await mcp.call_tool("archive_thought", {"id": ids[3]})).structured_content
        assert arch["thought"]["archived"] is True
        err = error_of(await mcp.call_tool("get_thought", {"id": "not-a-uuid"}))
        assert err["code"] == 4001 and "id" in err["message"]
    page = await api(rest, "/thoughts", {"project": "amcs", "limit": 2}, method="GET")
    assert page["total"] == 3 and page["next_offset"] == 2 and len(page["thoughts"]) == 2
    page = await api(rest, "/thoughts", {"project": "amcs", "archived": "true"}, method="GET")
    assert page["total"] == 4
    restored = await api(rest, f"/thoughts/{ids[3]}/archive", {"archived": False})
    assert restored["thought"]["archived"] is False
    patched = await api(
        rest, f"/thoughts/{ids[0]}", {"metadata": {"type": "decision", "topics": ["deploy"]}}, method="PATCH"
    )
    assert patched["thought"]["metadata"]["type"] == "decision" and patched["re_embedded"] is False
    gone = await api(rest, f"/thoughts/{ids[2]}", method="DELETE")
    assert gone == {"id": ids[2], "deleted": True}
    err = await api(rest, f"/thoughts/{ids[2]}", method="GET", status=404)
    assert err["error"]["code"] == 4002
    err = await api(rest, "/thoughts/xyz", method="GET", status=400)
    assert err["error"]["code"] == 4001 and "id" in err["error"]["message"]
    err = await api(rest, "/thoughts", {"content": "x" * 20_001}, status=413)
    assert err["error"]["code"] == 4130
    err = await api(rest, "/thoughts", {"content": "x", "metadata": {"topics": ["", 3]}}, status=400)
    assert "metadata.topics" in err["error"]["message"]


async def test_search_recall_context_related_stats(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async with mcp_client(server.url) as mcp:
        ids = await capture_all(mcp)
        res = (
            await mcp.call_tool(
                "search_thoughts", {"query": "why are cold starts slow?", "project": "amcs", "limit": 2}
            )
        ).structured_content
        assert res["retrieval_mode"] == "hybrid" and res["model"] == "all-MiniLM-L6-v2"
        assert {r["id"] for r in res["results"]} == {ids[0], ids[2]}
        recall = (await mcp.call_tool("recall_context", {"query": "key rotation", "limit": 2})).structured_content
        assert recall["items"][0]["id"] == ids[1] and cited(recall["context"])[1] == THOUGHTS[1][0]
        ctx = (
            await mcp.call_tool("get_project_context", {"project": "amcs", "query": "cold start speed", "limit": 1})
        ).structured_content
        assert ctx["recent"][0]["id"] == ids[3] and ctx["total_thoughts"] == 4
        assert ctx["relevant"] and ctx["relevant"][0]["id"] != ids[3] and ctx["retrieval_mode"] == "hybrid"
        rel = (await mcp.call_tool("related_thoughts", {"id": ids[2], "limit": 2})).structured_content
        assert rel["retrieval_mode"] == "semantic" and rel["results"][0]["id"] == ids[0]
        assert ids[2] not in {r["id"] for r in rel["results"]}
        stats = (await mcp.call_tool("thought_stats", {"project": "amcs"})).structured_content
        assert stats["total"] == 4 and stats["missing_embeddings"] == 0
        assert {"value": "observation", "count": 2} in stats["by_type"]
        assert stats["top_topics"][0] == {"value": "performance", "count": 2}
        summ = (
            await mcp.call_tool(
                "summarize_thoughts",
                {"project": "amcs", "query": "cold start performance", "limit": 2, "max_words": 40},
            )
        ).structured_content
        # sources are cited by the first 8 characters of their ids
        assert summ["strategy"] == "extractive" and set(summ["source_memory_ids"]) == {ids[0][:8], ids[2][:8]}
        assert summ["tokens"] > 0
        again = (
            await mcp.call_tool(
                "summarize_thoughts",
                {"project": "amcs", "query": "cold start performance", "limit": 2, "max_words": 40},
            )
        ).structured_content
        assert again["upserted_memory_id"] == summ["upserted_memory_id"]
        # A query naming a topic brings the thoughts tagged with it, whatever their words (case aside):
        # "security" is in no thought's text, only in Bob's topics.
        topical = (
            await mcp.call_tool("summarize_thoughts", {"project": "amcs", "query": "Security", "limit": 3})
        ).structured_content
        assert topical["source_memory_ids"][0] == ids[1][:8]
    err = await api(rest, "/thoughts/project-context", {"project": "missing-proj"}, status=404)
    assert err["error"]["code"] == 4002
    # search through REST with an unknown project: empty, not an error
    empty = await api(rest, "/thoughts/search", {"query": "anything", "project": "nobody"})
    assert empty["results"] == []


async def test_thought_search_replies_are_compact_and_state_their_size(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    async with mcp_client(server.url) as mcp:
        ids = await capture_all(mcp)
        plain = "Cold starts got faster after the cache change."
        extra = (await mcp.call_tool("capture_thought", {"content": plain, "project": "amcs"})).structured_content
        args = {"query": "why are cold starts slow?", "project": "amcs", "limit": 3}
        found = assert_states_its_size(text_of(await mcp.call_tool("search_thoughts", args)))
        explained = assert_states_its_size(text_of(await mcp.call_tool("search_thoughts", {**args, "explain": True})))
        recall = assert_states_its_size(
            text_of(await mcp.call_tool("recall_context", {"query": "cold starts", "limit": 3}))
        )
        related = assert_states_its_size(text_of(await mcp.call_tool("related_thoughts", {"id": ids[2]})))
    contents = {t: c for t, (c, _) in zip(ids, THOUGHTS, strict=True)} | {extra["thought"]["id"]: plain}
    assert len(found["results"]) == 3
    for hit in found["results"]:
        assert hit["content"] == contents[hit["id"]] and hit["project"] == "amcs"
        # metadata is left out when there is none
        assert ("metadata" in hit) is (hit["id"] != extra["thought"]["id"])
        assert not {"signals", "truncated"} & set(hit) and round(hit["similarity"], 3) == hit["similarity"]
        assert len(hit["created_at"]) in (10, 17)
    assert [h["id"] for h in explained["results"]] == [h["id"] for h in found["results"]]
    assert all(h["signals"] for h in explained["results"])
    # recall cites [n], the n-th item; the texts are in the context once, the items hold none
    lines = cited(recall["context"])
    assert sorted(lines) == list(range(1, len(recall["items"]) + 1)) and len(lines) == 3
    for n, item in enumerate(recall["items"], start=1):
        stored = await api(rest, f"/thoughts/{item['id']}", method="GET")
        assert lines[n] == stored["thought"]["content"] and set(item) == {"id", "score", "created_at"}
    assert related["results"] and all("signals" not in h for h in related["results"])
    rest_found = await rest.post("/api/v1/thoughts/search", json=args)
    assert assert_states_its_size(rest_found.text) == found


async def test_lexical_fallback_and_backfill(server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster) -> None:
    # Thoughts whose vectors are missing (as after a failed embedding or an import): search falls back to
    # full text, stats count them, backfill restores semantic search.
    async with mcp_client(server.url) as mcp:
        ids = await capture_all(mcp, project="fb")
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        await conn.execute("DELETE FROM memory_embeddings")
    finally:
        await conn.close()
    stats = await api(rest, "/thoughts/stats", {"project": "fb"}, method="GET")
    assert stats["missing_embeddings"] == 4
    res = await api(rest, "/thoughts/search", {"query": "cold starts", "project": "fb"})
    assert res["retrieval_mode"] == "lexical_fallback"
    assert {r["id"] for r in res["results"]} == {ids[0], ids[2]}
    rel = await api(rest, f"/thoughts/{ids[2]}/related", method="GET")
    assert rel["retrieval_mode"] == "lexical_fallback" and rel["results"][0]["id"] == ids[0]
    recall = await api(rest, "/thoughts/recall", {"query": "API keys"})
    assert recall["retrieval_mode"] == "lexical_fallback" and recall["items"][0]["id"] == ids[1]
    body = await api(rest, "/memory/search", {"query_text": "cold starts", "project": "fb", "mode": "semantic"})
    assert body["retrieval_mode"] == "lexical_fallback" and body["results"]
    dry = await api(rest, "/thoughts/backfill", {"project": "fb", "dry_run": True})
    assert dry == {
        "model": "all-MiniLM-L6-v2",
        "scanned": 4,
        "queued": 0,
        "embedded": 0,
        "skipped": 0,
        "failed": 0,
        "dry_run": True,
        "failures": [],
        "sample_ids": ids,
        "embedding": "done",
    }
    async with mcp_client(server.url) as mcp:
        call = await mcp.call_tool("backfill_embeddings", {"project": "fb", "limit": 3, "batch_size": 2})
        first = call.structured_content
        assert first is not None
        assert first["scanned"] == 3 and first["embedded"] == 3 and first["failed"] == 0
        assert first["queued"] == 3 and first["embedding"] == "done"
        assert set(first) == {
            "model",
            "scanned",
            "queued",
            "embedded",
            "skipped",
            "failed",
            "dry_run",
            "failures",
            "sample_ids",
            "embedding",
        }
    rest_run = await api(rest, "/thoughts/backfill", {"project": "fb"})
    assert rest_run["scanned"] == 1 and rest_run["embedded"] == 1
    assert (await api(rest, "/thoughts/backfill", {}))["scanned"] == 0
    assert (await api(rest, "/thoughts/stats", {"project": "fb"}, method="GET"))["missing_embeddings"] == 0
    res = await api(rest, "/thoughts/search", {"query": "cold starts", "project": "fb", "mode": "semantic"})
    assert res["retrieval_mode"] == "semantic"
    err = await api(rest, "/thoughts/backfill", {"project": "no-such-project"}, status=404)
    assert err["error"]["code"] == 4002
    err = await api(rest, "/thoughts/backfill", {"batch_size": 0}, status=400)
    assert "batch_size" in err["error"]["message"]


async def test_project_bound_key_sees_only_its_project(server: RunningServer, rest: httpx.AsyncClient) -> None:
    other = await api(rest, "/thoughts", {"content": "Secret plan of another team.", "project": "other-team"})
    headers = {"Authorization": f"Bearer {PROJECT_KEY}"}
    r = await rest.post("/api/v1/thoughts", json={"content": "Our own note about the plan."}, headers=headers)
    assert r.status_code == 200 and r.json()["thought"]["project"] == BOUND_PROJECT
    r = await rest.get(f"/api/v1/thoughts/{other['thought']['id']}", headers=headers)
    assert r.status_code == 404
    listed = (await rest.get("/api/v1/thoughts", headers=headers)).json()
    assert [t["project"] for t in listed["thoughts"]] == [BOUND_PROJECT]
    found = (await rest.post("/api/v1/thoughts/search", json={"query": "plan"}, headers=headers)).json()
    assert [t["project"] for t in found["results"]] == [BOUND_PROJECT]
    r = await rest.post("/api/v1/thoughts/search", json={"query": "plan", "project": "other-team"}, headers=headers)
    assert r.status_code == 403
    r = await rest.get("/api/v1/memory/projects", headers=headers)
    assert r.json() == {"projects": [BOUND_PROJECT]}


async def test_stats_count_archived_apart_and_every_facet(server: RunningServer, rest: httpx.AsyncClient) -> None:
    """thought_stats reads the table once: totals with archived thoughts and pushed chunks, and each
    facet over the live ones only, in count order."""
    async with mcp_client(server.url) as mcp:
        ids = await capture_all(mcp)
        await mcp.call_tool("archive_thought", {"id": ids[0]})  # Alice's idea: deploy, performance
    pushed = await rest.post(
        "/api/v1/memory/push", json={"text": "A plain note with no metadata.", "project_id": "amcs"}
    )
    assert pushed.status_code == 200, pushed.text
    stats = (await rest.get("/api/v1/thoughts/stats", params={"project": "amcs"})).json()
    live = THOUGHTS[1:]
    assert (stats["total"], stats["active"], stats["archived"]) == (len(THOUGHTS) + 1, len(live) + 1, 1)
    types = Counter(meta["type"] for _, meta in live)
    assert stats["by_type"] == [{"value": v, "count": n} for v, n in sorted(types.items(), key=lambda x: (-x[1], x[0]))]
    topics = Counter(t for _, meta in live for t in meta.get("topics", []))
    assert stats["top_topics"] == [
        {"value": v, "count": n} for v, n in sorted(topics.items(), key=lambda x: (-x[1], x[0]))
    ]
    people = Counter(p for _, meta in live for p in meta.get("people", []))
    assert "Alice" not in people and people
    assert stats["top_people"] == [
        {"value": v, "count": n} for v, n in sorted(people.items(), key=lambda x: (-x[1], x[0]))
    ]
    assert sum(row["count"] for row in stats["by_memory_type"]) == len(live) + 1
    other = (await rest.get("/api/v1/thoughts/stats", params={"project": "nobody-here"})).json()
    assert other["total"] == 0 and other["by_type"] == []
