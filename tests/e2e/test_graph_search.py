"""search_semantic with limbic re-ranking, logging and feedback; lifecycle tools; reflections; maintenance."""

from __future__ import annotations

import math
from typing import Any

import asyncpg
import httpx
import pytest

from tests.support.graph import API, PEOPLE, call, seed
from tests.support.replies import assert_states_its_size
from tests.support.server import READ_KEY, PgCluster, RunningServer, error_of, mcp_client, text_of

COMPONENTS = {
    "limbic_score",
    "relevance",
    "cosine_sim",
    "text_score",
    "importance",
    "temporal",
    "cooc_boost",
    "rank",
    "baseline_rank",
    "access_count",
}

EXPLAIN = {"explain": True}
AGENT_FIELDS = {"name", "entityType", "status", "observations", "score", "matched_by"}


async def test_a_hit_holds_what_an_agent_reads_and_the_internals_only_when_asked(server: RunningServer) -> None:
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
        query = {"query": "who designed the early mechanical computer", "limit": 3}
        for treatment, ranked_by in (("limbic", "limbic_score"), ("baseline", "relevance")):
            plain = await call(mcp, "search_semantic", {**query, "treatment": treatment})
            explained = await call(mcp, "search_semantic", {**query, "treatment": treatment, **EXPLAIN})
            assert plain["results"] and len(plain["results"]) == len(explained["results"])
            for hit, full in zip(plain["results"], explained["results"], strict=True):
                assert set(hit) == AGENT_FIELDS, hit  # (and `embedding` while a vector is pending)
                assert set(full) == AGENT_FIELDS | COMPONENTS, full
                assert full["score"] == full[ranked_by]
            assert [h["score"] for h in plain["results"]] == sorted(
                (h["score"] for h in plain["results"]), reverse=True
            )
            assert plain["tokens"] < explained["tokens"]


async def test_search_replies_state_their_size(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
        query = {"query": "who designed the early mechanical computer", "limit": 3}
        semantic = assert_states_its_size(text_of(await mcp.call_tool("search_semantic", query)))
        nodes = assert_states_its_size(text_of(await mcp.call_tool("search_nodes", {"query": "engine"})))
        none = assert_states_its_size(
            text_of(await mcp.call_tool("search_semantic", {**query, "project": "no-such-graph"}))
        )
        opened = await mcp.call_tool("open_nodes", {"names": ["Charles Babbage"]})
    # Ada Lovelace shares no word with the query and sits under the semantic floor: two answers
    assert len(semantic["results"]) == 2 and nodes["entities"] and none["results"] == []
    assert "tokens" not in opened.structured_content  # only the search replies report it
    r = await rest.get(f"{API}/nodes/search", params={"query": "engine"})
    assert assert_states_its_size(r.text) == nodes


async def db(pg: PgCluster) -> asyncpg.Connection:
    return await asyncpg.connect(pg.handle.libpq_uri(pg.database))


async def test_search_semantic_logs_and_counts(server: RunningServer, pg: PgCluster) -> None:
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
        # a floor under Ada Lovelace's cosine (she shares no query word): three answers to count
        floor = {"semantic_floor": 0.3}
        res = await call(
            mcp,
            "search_semantic",
            {
                "query": "who designed the early mechanical computer",
                "treatment": "limbic",
                "limit": 3,
                **floor,
                **EXPLAIN,
            },
        )
        assert res["treatment"] == "limbic" and res["engine"] == "hybrid" and res["event_id"] > 0
        names = [h["name"] for h in res["results"]]
        assert len(names) == 3 and "Sourdough" not in names
        assert names[0] in {"Charles Babbage", "Analytical Engine"}
        for h in res["results"]:
            assert COMPONENTS <= set(h)
            assert h["importance"] == 0 and h["access_count"] == 0 and h["cooc_boost"] == 0
            assert math.isclose(h["relevance"], h["cosine_sim"] + 0.25 * h["text_score"], abs_tol=1e-5)
        again = await call(
            mcp,
            "search_semantic",
            {
                "query": "who designed the early mechanical computer",
                "treatment": "baseline",
                "limit": 3,
                **floor,
                **EXPLAIN,
            },
        )
        assert again["treatment"] == "baseline"
        assert [h["rank"] for h in again["results"]] == [h["baseline_rank"] for h in again["results"]]
        first = again["results"][0]
        assert first["access_count"] == 1 and math.isclose(first["importance"], 1 - math.exp(-0.1), abs_tol=1e-5)
        assert math.isclose(first["cooc_boost"], 2 / (2 * (1 + 5)), abs_tol=1e-5)  # a share of its one return
    conn = await db(pg)
    try:
        events = await conn.fetch(
            "SELECT treatment, k_limit, num_results, engine_used FROM graph_search_events ORDER BY event_id"
        )
        assert [(e["treatment"], e["num_results"]) for e in events] == [(1, 3), (0, 3)]
        rows = await conn.fetch(
            "SELECT rank, baseline_rank, limbic_score, cosine_sim, importance, temporal, "
            "cooc_boost, text_score FROM graph_search_results WHERE event_id = $1 ORDER BY rank",
            res["event_id"],
        )
        assert len(rows) == 3 and all(r["baseline_rank"] is not None and r["limbic_score"] is not None for r in rows)
        assert math.isclose(rows[0]["limbic_score"], res["results"][0]["limbic_score"], abs_tol=1e-6)
        counts = await conn.fetch("SELECT access_count FROM graph_entity_access")
        assert sorted(c["access_count"] for c in counts)[-1] == 2
        log = await conn.fetchval("SELECT sum(access_count) FROM graph_access_log")
        assert log == 6
        pairs = await conn.fetch("SELECT entity_a_id, entity_b_id, co_count FROM graph_cooccurrences")
        assert pairs and all(p["entity_a_id"] < p["entity_b_id"] for p in pairs)
    finally:
        await conn.close()


async def test_a_read_key_or_a_readonly_endpoint_leaves_the_ranking_as_it_is(
    server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster
) -> None:
    """Issue 41 #7: a read key's searches (even through a readonly endpoint) took an entity's access
    count from 2 to 303. They are still logged as search events, but count no access and no
    co-occurrence; nor does any search through a readonly endpoint, whatever its key's scope."""
    query = {"query": "who designed the early mechanical computer", "limit": 3, "semantic_floor": 0.3}
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
    for key, path in (
        (READ_KEY, "/mcp/graph,readonly"),
        (READ_KEY, "/mcp/graph"),
        (None, "/mcp/graph,readonly"),
        (None, "/mcp/graph?readonly=true"),
    ):
        async with mcp_client(server.url, path=path, **({"key": key} if key else {})) as mcp:
            for _ in range(3):
                assert (await call(mcp, "search_semantic", query))["results"]
    read = {"Authorization": f"Bearer {READ_KEY}"}
    r = await rest.post(f"{API}/search/semantic", json=query, headers=read)
    assert r.status_code == 200 and r.json()["results"], r.text
    conn = await db(pg)
    try:
        assert await conn.fetchval("SELECT count(*) FROM graph_search_events") == 13  # every search logged
        assert await conn.fetchval("SELECT count(*) FROM graph_entity_access") == 0
        assert await conn.fetchval("SELECT count(*) FROM graph_cooccurrences") == 0
        async with mcp_client(server.url, path="/mcp/graph") as mcp:  # a write key, a writable endpoint
            await call(mcp, "search_semantic", query)
        counts = await conn.fetch("SELECT access_count FROM graph_entity_access")
        assert sorted(c["access_count"] for c in counts) == [1, 1, 1]
        assert await conn.fetchval("SELECT count(*) FROM graph_cooccurrences") == 3
    finally:
        await conn.close()


async def test_noise_is_no_answer_and_archived_entities_stay_out(server: RunningServer, pg: PgCluster) -> None:
    """A query nothing answers (no entity near it in meaning, no query word in any text) returns nothing,
    with a notice, and counts no entity as accessed; an archived entity comes back only when asked."""
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
        noise = await call(mcp, "search_semantic", {"query": "zzqx qwvb plokm", "treatment": "baseline"})
        assert noise["results"] == [] and "No entity passed the relevance floor: 4 candidate(s)" in noise["notice"]
        conn = await db(pg)
        try:
            assert await conn.fetchval("SELECT count(*) FROM graph_entity_access") == 0
            assert await conn.fetchval("SELECT count(*) FROM graph_cooccurrences") == 0
        finally:
            await conn.close()
        query = {"query": "who designed the early mechanical computer", "treatment": "baseline", "limit": 5, **EXPLAIN}
        found = [h["name"] for h in (await call(mcp, "search_semantic", query))["results"]]
        assert "Charles Babbage" in found
        for h in (await call(mcp, "search_semantic", query))["results"]:  # each answer clears the floor
            assert (
                h["text_score"] >= 0.2 or h["cosine_sim"] >= 0.592 or (h["text_score"] > 0 and h["cosine_sim"] >= 0.398)
            )
            assert h["matched_by"] in {"meaning", "text", "both"}
        await call(mcp, "set_entity_status", {"entity_name": "Charles Babbage", "status": "archivado"})
        kept = [h["name"] for h in (await call(mcp, "search_semantic", query))["results"]]
        assert "Charles Babbage" not in kept and kept
        asked = await call(mcp, "search_semantic", {**query, "include_archived": True})
        assert "Charles Babbage" in [h["name"] for h in asked["results"]]


async def test_one_open_credits_the_latest_search_that_returned_it(server: RunningServer, pg: PgCluster) -> None:
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
        query = {"query": "who designed the early mechanical computer", "treatment": "baseline", "limit": 3}
        events = [(await call(mcp, "search_semantic", query))["event_id"] for _ in range(8)]
        await call(mcp, "open_nodes", {"names": ["Charles Babbage"]})
        await call(mcp, "open_nodes", {"names": ["Charles Babbage"]})  # again: nothing more to credit
    conn = await db(pg)
    try:
        rows = await conn.fetch("SELECT event_id, entity_name FROM graph_implicit_feedback")
    finally:
        await conn.close()
    assert [(r["event_id"], r["entity_name"]) for r in rows] == [(max(events), "Charles Babbage")]


async def test_limbic_reranks_and_quality_report(server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster) -> None:
    ents = [
        {"name": f"Report {c}", "entityType": "doc", "observations": ["quarterly revenue summary for the board"]}
        for c in ("A", "B")
    ]
    assert (await rest.post(f"{API}/entities", json={"entities": ents})).status_code == 200
    q = {"query": "quarterly revenue summary", "limit": 2, **EXPLAIN}
    base = (await rest.post(f"{API}/search/semantic", json={**q, "treatment": "baseline"})).json()
    second = base["results"][1]["name"]
    conn = await db(pg)
    try:
        await conn.execute(
            "UPDATE graph_entity_access SET access_count = 200 FROM graph_entities g "
            "WHERE g.id = entity_id AND g.name = $1",
            second,
        )
    finally:
        await conn.close()
    limbic = (await rest.post(f"{API}/search/semantic", json={**q, "treatment": "limbic"})).json()
    top = limbic["results"][0]
    assert top["name"] == second and top["rank"] == 1 and top["baseline_rank"] == 2
    assert top["importance"] > 0.99 and top["limbic_score"] > limbic["results"][1]["limbic_score"]
    # implicit feedback: opening the result at rank 2 of the limbic event marks it relevant
    other = limbic["results"][1]["name"]
    async with mcp_client(server.url) as mcp:
        await call(mcp, "open_nodes", {"names": [other]})
        report = await call(mcp, "search_quality_report", {"k": 5})
    by = {t["treatment"]: t for t in report["treatments"]}
    assert by["limbic"]["events"] == 1 and by["baseline"]["events"] == 1
    assert by["limbic"]["events_with_feedback"] == 1
    assert math.isclose(by["limbic"]["ndcg_at_k"], 1 / math.log2(3), abs_tol=1e-5)
    assert math.isclose(by["limbic"]["mrr"], 0.5) and math.isclose(by["limbic"]["mrr_baseline_order"], 1.0)
    # the baseline search returned it too, earlier: one open credits the most recent search only
    assert by["baseline"]["events_with_feedback"] == 0 and by["baseline"]["mrr"] is None
    r = await rest.get(f"{API}/search/quality", params={"k": 0})
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["field"] == "k"


async def test_ab_ratio_assignment(
    server: RunningServer, rest: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.core.context import feature_settings_of
    from app.graph.config import GraphSettings

    await rest.post(f"{API}/entities", json={"entities": PEOPLE})
    settings = feature_settings_of(server.app.state.cairn.feature_settings, GraphSettings)
    monkeypatch.setattr(settings, "ab_limbic_ratio", 0.0)
    r = (await rest.post(f"{API}/search/semantic", json={"query": "bread"})).json()
    assert r["treatment"] == "baseline" and r["results"][0]["name"] == "Sourdough"
    monkeypatch.setattr(settings, "ab_limbic_ratio", 1.0)
    assert (await rest.post(f"{API}/search/semantic", json={"query": "bread"})).json()["treatment"] == "limbic"


async def _vector_head(pg: PgCluster, name: str) -> list[float]:
    conn = await db(pg)
    try:
        text = await conn.fetchval(
            "SELECT e.embedding::text FROM graph_embeddings e JOIN graph_entities g "
            "ON g.id = e.owner_id WHERE g.name = $1",
            name,
        )
    finally:
        await conn.close()
    return [float(x) for x in text.strip("[]").split(",")[:8]]


async def _expect_embedding(mcp: Any, pg: PgCluster, name: str, snapshot: str) -> None:
    head = (await call(mcp, "embed", {"text": snapshot}))["head"]
    stored = await _vector_head(pg, name)
    assert all(abs(a - b) < 2e-4 for a, b in zip(head, stored, strict=True)), (head, stored)


async def test_lifecycle_history_and_embedding_snapshots(server: RunningServer, pg: PgCluster) -> None:
    async with mcp_client(server.url) as mcp:
        await seed(mcp)
        await _expect_embedding(
            mcp,
            pg,
            "Ada Lovelace",
            "Ada Lovelace (person): Wrote the first published algorithm for a machine | Worked with Charles Babbage",
        )
        sup = await call(
            mcp,
            "supersede_observation",
            {
                "entity_name": "Ada Lovelace",
                "old_content": "Worked with Charles Babbage",
                "new_content": "Corresponded with Charles Babbage",
                "kind": "milestone",
            },
        )
        assert sup["superseded"]["superseded_at"] is not None
        assert sup["current"]["supersedes"] == sup["superseded"]["id"]
        assert sup["current"]["kind"] == "milestone"
        await _expect_embedding(
            mcp,
            pg,
            "Ada Lovelace",
            "Ada Lovelace (person): Wrote the first published "
            "algorithm for a machine | Corresponded with Charles Babbage",
        )
        err = error_of(
            await mcp.call_tool(
                "supersede_observation",
                {"entity_name": "Ada Lovelace", "observation_id": sup["superseded"]["id"], "new_content": "x"},
            )
        )
        assert err["code"] == 4090
        err = error_of(
            await mcp.call_tool("supersede_observation", {"entity_name": "Ada Lovelace", "new_content": "x"})
        )
        assert err["code"] == 4001
        err = error_of(
            await mcp.call_tool(
                "supersede_observation", {"entity_name": "Nobody", "old_content": "a", "new_content": "x"}
            )
        )
        assert err["code"] == 4002
        opened = await call(mcp, "open_nodes", {"names": ["Ada Lovelace"]})
        assert opened["entities"][0]["observations"] == [
            "Wrote the first published algorithm for a machine",
            "Corresponded with Charles Babbage",
        ]
        ended = await call(
            mcp, "end_relation", {"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"}
        )
        assert ended["relation"]["active"] is False and ended["relation"]["ended_at"]
        assert (
            error_of(
                await mcp.call_tool("end_relation", {"from": "Ada Lovelace", "to": "Sourdough", "relationType": "x"})
            )["code"]
            == 4002
        )
        graph = await call(mcp, "read_graph", {})
        assert (
            graph["relations"] == [{"from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"}]
            and graph["total_relations"] == 1
        )
        status = await call(mcp, "set_entity_status", {"entity_name": "Ada Lovelace", "status": "archivado"})
        # the seed's Spanish status is accepted; replies name it in English
        assert status == {"name": "Ada Lovelace", "status": "archived", "previous_status": "active"}
        refl = await call(
            mcp,
            "add_reflection",
            {
                "target_type": "entity",
                "target_name": "Ada Lovelace",
                "content": "Her notes anticipated general-purpose computing",
                "mood": "admiring",
            },
        )
        assert refl["author"] == "sofia" and refl["target_name"] == "Ada Lovelace"
        await call(mcp, "add_reflection", {"content": "Baking bread is a patient craft", "author": "ops"})
        err = error_of(await mcp.call_tool("add_reflection", {"target_type": "entity", "content": "x"}))
        assert err["code"] == 4001 and err["details"]["errors"][0]["field"] == "target_name"
        hist = await call(mcp, "get_entity_history", {"entity_name": "Ada Lovelace"})
        assert hist["entity"]["status"] == "archived"
        assert [o["superseded_at"] is None for o in hist["observations"]] == [True, False, True]
        assert len(hist["relations"]) == 1 and hist["relations"][0]["active"] is False
        assert hist["reflections"][0]["content"].startswith("Her notes")
        found = await call(mcp, "search_reflections", {"query": "computing pioneers notes"})
        assert found["results"][0]["id"] == refl["id"] and found["results"][0]["cosine_sim"] > 0
        only_ops = await call(mcp, "search_reflections", {"query": "a patient craft", "author": "ops"})
        assert [r["author"] for r in only_ops["results"]] == ["ops"]
        # the ops note is no answer to "computing": the relevance floor keeps it out
        assert (await call(mcp, "search_reflections", {"query": "computing", "author": "ops"}))["results"] == []
        revived = await call(
            mcp,
            "create_relations",
            {"relations": [{"from": "Ada Lovelace", "to": "Charles Babbage", "relationType": "worked with"}]},
        )
        assert len(revived["relations"]) == 1
        stats = await call(mcp, "graph_stats", {})
        assert stats["entities"] == 4 and stats["relations"] == 2 and stats["ended_relations"] == 0
        assert stats["superseded_observations"] == 1 and stats["reflections"] == 2
        assert stats["entities_with_embedding"] == 4
        assert {"status": "archived", "count": 1} in stats["by_status"]


async def test_duplicates_and_consolidate(server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster) -> None:
    await rest.post(
        f"{API}/entities",
        json={
            "entities": [
                {
                    "name": "Server",
                    "entityType": "system",
                    "observations": [
                        "The API server listens on port 8080",
                        "The API server listens on port 8080.",
                        "Backups run nightly at two in the morning",
                    ],
                },
                {"name": "Other", "entityType": "system", "observations": ["The API server listens on port 8080"]},
            ]
        },
    )
    dup = (await rest.post(f"{API}/observations/duplicates", json={})).json()
    assert dup["flagged"] == 1, dup
    assert len(dup["pairs"]) == 1 and dup["scanned_observations"] == 4
    pair = dup["pairs"][0]
    assert pair["entity_name"] == "Server" and pair["duplicate"]["content"].endswith("8080.")
    conn = await db(pg)
    try:
        await conn.execute(
            "INSERT INTO graph_entity_access (entity_id, access_count, last_access) "
            "SELECT id, 10, now() - interval '100 days' FROM graph_entities WHERE name = 'Other'"
        )
        dry = (await rest.post(f"{API}/consolidate", json={})).json()
        assert dry["dry_run"] is True and dry["merged_count"] == 1 and dry["decayed_entities"] == 1
        assert await conn.fetchval("SELECT count(*) FROM graph_observations WHERE superseded_at IS NOT NULL") == 0
        done = (await rest.post(f"{API}/consolidate", json={"dry_run": False})).json()
        assert done["merged_count"] == 1 and done["reembedded_entities"] == 1
        assert await conn.fetchval("SELECT access_count FROM graph_entity_access") == 5
    finally:
        await conn.close()
    opened = (await rest.post(f"{API}/nodes/open", json={"names": ["Server"]})).json()
    assert opened["entities"][0]["observations"] == [
        "The API server listens on port 8080",
        "Backups run nightly at two in the morning",
    ]
    again = (await rest.post(f"{API}/consolidate", json={"dry_run": False})).json()
    assert again["merged_count"] == 0
