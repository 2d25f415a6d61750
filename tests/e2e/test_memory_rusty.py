"""Memory, Rusty Memory dialect (seed 001): push, search, summarize, collections, metrics, resources,
over MCP and REST, with the real database and model."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from app.core.embeddings.tokens import count_tokens
from app.memory.config import MemorySettings
from tests.support.memory import NOTES, api, seed_notes
from tests.support.replies import assert_states_its_size, cited, hit_texts
from tests.support.server import BOUND_PROJECT, PROJECT_KEY, RunningServer, error_of, mcp_client, overridden, text_of

DOC = """Cairn keeps long-term memory for agents in PostgreSQL with pgvector.

The push tool splits documents into chunks by tokenizer tokens. Each chunk is embedded and stored once.

Hybrid search fuses vector similarity and full-text rank with reciprocal rank fusion."""


async def test_push_search_over_both_transports(server: RunningServer, rest: httpx.AsyncClient) -> None:
    out = await api(
        rest, "/memory/push", {"text": DOC, "project_id": "docs", "tags": "guide", "source_uri": "file:///guide.md"}
    )
    assert out["status"] == "ok" and out["collection"] == "cairn-memory"
    assert out["chunksIndexed"] == out["inserted"] >= 1 and out["updated"] == 0 and out["skippedDuplicates"] == 0
    assert out["chunkSize"] == 200
    await seed_notes(rest)
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool(
            "search", {"query_text": "why did the database migration fail?", "project": "ops", "k": 3}
        )
        assert not res.is_error, res
        body = res.structured_content
        assert body is not None
        assert body["retrieval_mode"] == "hybrid" and body["limit"] == 3
        # the hybrid default of the local model's calibration (app.memory.thresholds), echoed
        assert body["score_threshold"] == body["scoreThreshold"] == 0.591
        assert body["used_filters"]["project_id"] == "ops"
        ids = [r["id"] for r in body["results"]]
        assert 2 <= len(ids) <= 3
        top = body["results"][0]
        assert "migration" in (hit_texts(body)[0] or "") and top["memory_type"] == "episodic"
        assert "signals" not in top
        explained = await mcp.call_tool(
            "search",
            {"query_text": "why did the database migration fail?", "project": "ops", "k": 3, "explain": True},
        )
        signals = explained.structured_content["results"][0]["signals"]
        assert set(signals) <= {"semantic", "lexical"} and signals
        # memory_type filter applies inside the search: the semantic 'guide' document is not episodic
        res = await mcp.call_tool(
            "search", {"query_text": "chunks tokens", "project_id": "docs", "memory_type": "episodic"}
        )
        assert res.structured_content is not None and res.structured_content["results"] == []
    # tag filter (contains-any) and lexical mode through REST
    body = await api(
        rest,
        "/memory/search",
        {"query_text": "migration", "project": "ops", "tags": ["ops"], "mode": "lexical", "limit": 10},
    )
    assert body["retrieval_mode"] == "lexical"
    texts = hit_texts(body)
    assert len(texts) == 2 and all(t and "migration" in t for t in texts)
    body = await api(
        rest,
        "/memory/search",
        {"query_text": "migration", "project": "ops", "tags": ["ops"], "mode": "lexical", "explain": True},
    )
    assert all(set(r["signals"]) == {"lexical"} for r in body["results"])
    # a query of function words only finds nothing in any mode, and says why
    for mode in ("hybrid", "semantic", "lexical"):
        body = await api(rest, "/memory/search", {"query_text": "the", "project": "ops", "mode": mode})
        assert body["results"] == [] and "only common words" in body["notice"]
    # web-search syntax is honoured as written: a quoted phrase, an excluded word
    body = await api(rest, "/memory/search", {"query_text": '"statement timeout"', "project": "ops", "mode": "lexical"})
    assert hit_texts(body) == [NOTES[1][0]]
    body = await api(
        rest, "/memory/search", {"query_text": "migration -succeeded", "project": "ops", "mode": "lexical"}
    )
    assert hit_texts(body) == [NOTES[0][0]]
    # semantic mode: scores are cosine similarities above the threshold
    body = await api(
        rest,
        "/memory/search",
        {"query_text": "marine animal biology facts", "project": "ops", "mode": "semantic", "score_threshold": 0.2},
    )
    assert body["results"] and "Octopuses" in (hit_texts(body)[0] or "")
    assert all(r["score"] >= 0.2 for r in body["results"])


async def test_search_reply_cites_each_text_once_and_states_its_size(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    await seed_notes(rest)
    checklist = "Deploy checklist: dry-run the migration, then watch the timeout graphs."
    await api(rest, "/memory/push", {"text": checklist, "project": "ops", "source_uri": "notes/checklist.md"})
    args = {"query_text": "deployment migration timeout", "project": "ops", "k": 5, "score_threshold": 0.0}
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool("search", args)
        assert not res.is_error, res
        sent = text_of(res)
        explained = await mcp.call_tool("search", {**args, "explain": True})
        filtered = await mcp.call_tool("search", {**args, "memory_type": "episodic"})
    body = assert_states_its_size(sent)
    assert body == res.structured_content
    # REST sends the same reply
    r = await rest.post("/api/v1/memory/search", json=args)
    assert r.status_code == 200 and assert_states_its_size(r.text) == body
    results = body["results"]
    assert len(results) == 5
    # [n] cites results[n-1], whose id reads back the very text of that line
    lines = cited(body["context"])
    assert sorted(lines) == [1, 2, 3, 4, 5]
    for n, hit in enumerate(results, start=1):
        stored = await api(rest, f"/thoughts/{hit['id']}", method="GET")
        assert lines[n] == " ".join(stored["thought"]["content"].split())
    # no text twice: each note is sent once, in the context; results hold no text
    for text in {*(t for t, _ in NOTES), checklist}:
        assert sent.count(text) <= 1
    assert all(sent.count(line) == 1 for line in lines.values())
    # only what serves: no field the reply states once, nothing empty, null or default
    for hit in results:
        assert {"id", "score", "memory_type", "timestamp"} <= set(hit)
        assert not {"text", "project_id", "collection", "signals", "truncated", "embedding"} & set(hit)
        assert round(hit["score"], 3) == hit["score"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\d(T\d\d:\d\dZ)?", hit["timestamp"]), hit["timestamp"]
        when = datetime.fromisoformat(hit["timestamp"])  # the date alone stands for midnight UTC
        assert abs(when.replace(tzinfo=UTC) - datetime.now(UTC)) < timedelta(minutes=5)
        assert hit.get("tags") != [] and hit.get("source_uri", "left out") is not None
    assert [h.get("source_uri") for h in results].count("notes/checklist.md") == 1
    assert body["used_filters"] == {"project_id": "ops", "collection": "cairn-memory"}
    # the memory type is stated once when the search filters on it
    only = assert_states_its_size(text_of(filtered))
    assert only["results"] and all("memory_type" not in h for h in only["results"])
    assert only["used_filters"]["memory_type"] == "episodic"
    # explain=true brings back why each result was found
    why = assert_states_its_size(text_of(explained))
    assert [h["id"] for h in why["results"]] == [h["id"] for h in results]
    for hit in why["results"]:
        assert hit["signals"] and set(hit["signals"]) <= {"semantic", "lexical"}
        assert all(s["rank"] >= 1 and round(s["score"], 3) == s["score"] for s in hit["signals"].values())
    assert why["tokens"] > body["tokens"]
    # an empty search states its size too
    empty = await rest.post("/api/v1/memory/search", json={"query_text": "the", "project": "ops"})
    assert assert_states_its_size(empty.text)["results"] == []


async def test_results_past_the_context_budget_are_listed_without_text(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    await seed_notes(rest)
    args = {"query_text": "deployment migration timeout", "project": "ops", "k": 5, "score_threshold": 0.0}
    with overridden(server, MemorySettings, memory_context_tokens=60):
        r = await rest.post("/api/v1/memory/search", json=args)
    body = assert_states_its_size(r.text)
    assert count_tokens(body["context"]) <= 60
    lines = cited(body["context"])
    assert len(body["results"]) >= 3 and 1 in lines and len(lines) < len(body["results"])
    for n, hit in enumerate(body["results"], start=1):
        whole = n in lines and not lines[n].endswith("…")
        assert hit.get("truncated") is (None if whole else True), (n, lines.get(n), hit)
        assert "text" not in hit


async def test_filtered_search_still_returns_limit(server: RunningServer, rest: httpx.AsyncClient) -> None:
    # Many memories of another project; a filtered search must still fill its limit from the few that match.
    filler = "\n\n".join(f"Filler note number {i} about weather and clouds and rain." for i in range(60))
    for i in range(6):
        await api(rest, "/memory/push", {"text": filler + f" Batch {i}.", "project": "noise"})
    for i in range(8):
        await api(
            rest,
            "/memory/push",
            {"text": f"Kept note {i}: the weather was sunny and warm.", "project": "target", "tags": ["keep"]},
        )
    body = await api(
        rest,
        "/memory/search",
        {
            "query_text": "weather clouds rain",
            "project": "target",
            "tags": "keep",
            "limit": 8,
            "mode": "semantic",
            "score_threshold": 0.0,
        },
    )
    assert len(body["results"]) == 8
    assert body["used_filters"]["project_id"] == "target"
    assert all(t and t.startswith("Kept note") for t in hit_texts(body))


async def test_push_dedupe_and_source_update(server: RunningServer, rest: httpx.AsyncClient) -> None:
    paragraphs = [f"Paragraph {i}. " + " ".join(f"word{i}x{j}" for j in range(70)) for i in range(6)]
    text = "\n\n".join(paragraphs)
    first = await api(rest, "/memory/push", {"text": text, "project": "dd", "source_uri": "s3://b/doc.txt"})
    assert first["inserted"] >= 3 and first["updated"] == 0
    again = await api(rest, "/memory/push", {"text": text, "project": "dd", "source_uri": "s3://b/doc.txt"})
    assert again["inserted"] == again["updated"] == again["chunksIndexed"] == 0
    assert again["skippedDuplicates"] == first["inserted"] and again["document_id"] == first["document_id"]
    # change one paragraph: that chunk is updated in place, nothing is duplicated
    changed = "\n\n".join([*paragraphs[:2], "Paragraph 2 rewritten entirely with new words.", *paragraphs[3:]])
    upd = await api(rest, "/memory/push", {"text": changed, "project": "dd", "source_uri": "s3://b/doc.txt"})
    assert upd["updated"] + upd["inserted"] >= 1 and upd["skippedDuplicates"] >= 1
    listing = await api(rest, "/thoughts", {"project": "dd", "limit": 100}, method="GET")
    contents = [t["content"] for t in listing["thoughts"]]
    assert len(contents) == len(set(contents))
    assert any("rewritten entirely" in c for c in contents)
    assert not any("word2x5 " in c for c in contents)
    # the same text without a source is a duplicate in the same project, new in another
    dup = await api(rest, "/memory/push", {"text": paragraphs[0], "project": "dd"})
    assert dup["skippedDuplicates"] >= 1 and dup["inserted"] == 0
    other = await api(rest, "/memory/push", {"text": paragraphs[0], "project": "dd2"})
    assert other["inserted"] >= 1
    metrics = await api(rest, "/memory/metrics", {}, method="GET")
    assert metrics["chunksIndexed"] >= first["inserted"] + 2 and metrics["lastChunkSize"] == 200
    assert metrics["documentsIndexed"] == 3


async def test_long_document_is_chunked_by_tokens(server: RunningServer, rest: httpx.AsyncClient) -> None:
    sentences = [f"Sentence number {i} talks about topic {i % 7} in some detail." for i in range(300)]
    out = await api(rest, "/memory/push", {"text": " ".join(sentences), "project": "long"})
    assert out["inserted"] >= 10
    from app.core.embeddings.tokens import count_tokens

    listing = await api(rest, "/thoughts", {"project": "long", "limit": 100}, method="GET")
    for t in listing["thoughts"]:
        assert count_tokens(t["content"]) <= 200
        assert t["content"].rstrip().endswith(".")  # cut at sentence ends


async def test_summarize_extractive_and_rerun_updates(server: RunningServer, rest: httpx.AsyncClient) -> None:
    await seed_notes(rest)
    now = datetime.now(UTC)
    window = {"start": (now - timedelta(hours=1)).isoformat(), "end": (now + timedelta(hours=1)).isoformat()}
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool(
            "summarize", {"project_id": "ops", "time_range": window, "tags": ["deploy"], "max_words": 30}
        )
        assert not res.is_error, res
        body = res.structured_content
        assert body is not None
    assert body["strategy"] == "extractive" and body["provider"] is None
    assert len(body["source_memory_ids"]) == 3
    assert 0 < len(body["summary"].split()) <= 30 + 1
    assert body["used_filters"]["memory_type"] == "episodic"
    again = await api(
        rest, "/memory/summarize", {"project": "ops", "time_range": window, "tags": "deploy", "max_words": 30}
    )
    assert again["upserted_memory_id"] == body["upserted_memory_id"]
    stored = await api(rest, f"/thoughts/{body['upserted_memory_id']}", method="GET")
    assert stored["thought"]["memory_type"] == "semantic" and stored["thought"]["kind"] == "summary"
    full = stored["thought"]["metadata"]["source_memory_ids"]
    assert [i[:8] for i in full] == body["source_memory_ids"]  # the reply cites short ids
    assert body["tokens"] > 0 and again["tokens"] > 0
    # both bounds are required; an empty window is 'not found'
    err = await api(rest, "/memory/summarize", {"project": "ops", "time_range": {"start": window["start"]}}, status=400)
    assert err["error"]["code"] == 4001
    past = {"start": "2001-01-01T00:00:00Z", "end": "2001-01-02T00:00:00Z"}
    err = await api(rest, "/memory/summarize", {"project": "ops", "time_range": past}, status=404)
    assert err["error"]["code"] == 4002
    err = await api(
        rest, "/memory/summarize", {"project": "ops", "time_range": window, "strategy": "abstractive"}, status=400
    )
    assert "provider" in err["error"]["message"]
    # A caller cannot point the server at a provider the operator did not configure.
    err = await api(
        rest, "/memory/summarize", {"project": "ops", "time_range": window, "provider": "openai"}, status=400
    )
    assert "not configured" in err["error"]["message"] and err["error"]["code"] == 4001


async def test_collections_metrics_resources(server: RunningServer, rest: httpx.AsyncClient) -> None:
    assert (await api(rest, "/memory/metrics", {}, method="GET")) == {
        "documentsIndexed": 0,
        "chunksIndexed": 0,
        "lastChunkSize": None,
    }
    created = await api(rest, "/memory/collections", {"name": "notes-2"})
    assert created["status"] == "ok" and created["vectorSize"] == 384 and created["created"]
    resized = await api(rest, "/memory/collections", {"name": "notes-2", "vector_size": 768})
    assert resized["resized"] and resized["vectorSize"] == 768
    # the size is a label: vectors are stored per model, so a mismatch never blocks a write
    labelled = await api(rest, "/memory/push", {"text": "x y z", "collection": "notes-2", "project": "repo-a"})
    assert labelled["embedding"] == "done" and labelled["inserted"] == 1
    await api(rest, "/memory/collections", {"name": "notes-2", "vector_size": 384})
    await api(
        rest,
        "/memory/push",
        {"text": "alpha beta gamma", "collection": "notes-2", "project": "repo-a", "tags": ["alpha", "beta"]},
    )
    await api(rest, "/memory/push", {"text": "delta", "project": "repo-b"})
    cols = await api(rest, "/memory/collections", {}, method="GET")
    assert cols == {"collections": ["cairn-memory", "notes-2"]}
    err = await api(rest, "/memory/search", {"query_text": "x", "collection": "nope"}, status=404)
    assert err["error"]["code"] == 4002
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool("get-collections", {})
        assert res.structured_content == cols
        res = await mcp.call_tool("metrics", {})
        assert res.structured_content is not None and res.structured_content["chunksIndexed"] == 3
        types = json.loads((await mcp.read_resource("mcp://memory-types")).contents[0].text)  # type: ignore[union-attr]
        assert types == {"memory_types": ["episodic", "semantic", "procedural"], "default": "semantic"}
        projects = json.loads((await mcp.read_resource("mcp://projects")).contents[0].text)  # type: ignore[union-attr]
        assert projects == {"projects": ["repo-a", "repo-b"]}
        tags = json.loads((await mcp.read_resource("mcp://repo-a/tags")).contents[0].text)  # type: ignore[union-attr]
        assert tags == {"project_id": "repo-a", "tags": ["alpha", "beta"]}
        usage = json.loads((await mcp.read_resource("mcp://usage")).contents[0].text)  # type: ignore[union-attr]
        assert usage["title"] == "Rusty Memory MCP Usage" and len(usage["policy"]) == 5
        assert usage["flows"][1]["steps"][1].startswith("summarize({ project_id")
    assert (await api(rest, "/memory/projects/repo-a/tags", method="GET"))["tags"] == ["alpha", "beta"]
    assert (await api(rest, "/memory/usage", method="GET"))["flows"][0]["name"] == "Ingest & Retrieve"
    assert (await api(rest, "/memory/memory-types", method="GET"))["default"] == "semantic"


async def test_bad_input(server: RunningServer, rest: httpx.AsyncClient) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/memory/search", {"query_text": "x" * 513}, "query_text"),
        ("/memory/search", {"query_text": "x", "tags": [""]}, "tags.0"),
        ("/memory/search", {"query_text": "x", "tags": [5]}, "tags.0"),
        ("/memory/search", {"query_text": "x", "limit": 51}, "limit"),
        ("/memory/search", {"query_text": "x", "k": 0}, "limit"),
        ("/memory/search", {"query_text": "x", "score_threshold": 1.5}, "score_threshold"),
        ("/memory/search", {"query_text": "x", "memory_type": "dream"}, "memory_type"),
        ("/memory/search", {"query_text": "x", "unknown": 1}, "unknown"),
        (
            "/memory/search",
            {"query_text": "x", "time_range": {"start": "2025-02-01T00:00:00Z", "end": "2025-01-01T00:00:00Z"}},
            "time_range",
        ),
        ("/memory/search", {"query_text": "x", "time_range": {"start": "yesterday"}}, "time_range.start"),
        ("/memory/push", {"text": ""}, "text"),
        ("/memory/push", {"text": "x", "project_id": "bad name!"}, "project_id"),
        ("/memory/push", {"text": "x", "project": "a", "project_id": "b"}, "project"),
        ("/memory/collections", {"name": "ok", "vector_size": 0}, "vector_size"),
    ]
    for path, body, field in cases:
        err = (await api(rest, path, body, status=400))["error"]
        assert err["code"] == 4001, (body, err)
        assert field in err["message"], (field, err["message"])
    async with mcp_client(server.url) as mcp:
        res = await mcp.call_tool("search", {"query_text": "x", "tags": ["ok", ""]})
        err = error_of(res)
        assert err["code"] == 4001 and "tags.1" in err["message"]
    big = "word " * 220_000
    err = await api(rest, "/memory/push", {"text": big}, status=413)
    assert err["error"]["code"] == 4130
    # a project-bound key can only use its project
    headers = {"Authorization": f"Bearer {PROJECT_KEY}"}
    r = await rest.post("/api/v1/memory/push", json={"text": "mine", "project": "elsewhere"}, headers=headers)
    assert r.status_code == 403
    r = await rest.post("/api/v1/memory/push", json={"text": "mine"}, headers=headers)
    assert r.status_code == 200 and r.json()["project_id"] == BOUND_PROJECT
