"""Injection attempts in every place a caller's text reaches SQL or a file path, across all families.

Each row of the table names a tool, the arguments carrying the hostile text and what must happen:
refused with a specific error code, or accepted and treated as plain data. Every row runs over MCP and
over REST. A canary table and the list of tables prove that no statement smuggled in the text ever
ran; round trips prove that text taken as data comes back byte for byte and is never a pattern.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest

from app.core.feature import build_registry
from app.core.operations import ops as core_ops
from app.features import FEATURES
from tests.support import analysis as analysis_helpers
from tests.support.analysis import Upstream
from tests.support.datasets import penguins_csv, root_of
from tests.support.replies import hit_texts
from tests.support.server import PgCluster, RunningServer, mcp_client

pytestmark = pytest.mark.asyncio(loop_scope="session")
upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf

CANARY = "injection_canary"
SQLI = [
    f"x'; DROP TABLE {CANARY}; --",
    'x" OR "1"="1',
    f"1) OR 1=1; DELETE FROM {CANARY}; --",
    "' UNION SELECT tablename FROM pg_tables --",
    "$1 :pid %s %(x)s ?",
    "%_\\ ' \\' '' E'\\x27'",
]
SECRET = "top-secret-canary-line"
# Relative to the datasets root (the secret file sits one level up). Each leaves the root and is refused;
# a URL is refused before any path is made of it.
ESCAPES = [
    ("../secret.csv", 4030),
    ("../../../../etc/passwd", 4030),
    ("/etc/passwd", 4030),
    ("sub/../../secret.csv", 4030),
    ("penguins.csv/../../secret.csv", 4030),
    ("file:///etc/passwd", 4030),
]
OK = 0
AID = "inj"


@dataclass
class Case:
    """One tool call with hostile text and the expected outcome (`OK` or an error code)."""

    label: str
    tool: str
    args: dict[str, Any]
    expect: int


def _sqli_cases(p: str) -> list[Case]:
    sample_prox = {"field": "updated_at", "origin": "2026-01-01", "window": "30 days"}
    return [
        # core
        Case("project name", "create_project", {"name": p}, 4001),
        Case("audit filters", "audit_log", {"key_id": p[:64], "operation": p, "project": p}, OK),
        # memory (Rusty dialect)
        Case("memory project", "push", {"text": "hello", "project_id": p}, 4001),
        Case("memory collection", "push", {"text": "hello", "collection": p}, 4001),
        Case(
            "memory text/tags/source",
            "push",
            {"text": f"note {p}", "tags": [p], "source_uri": p, "memory_type": "episodic"},
            OK,
        ),
        Case("memory hybrid search", "search", {"query_text": p, "tags": [p]}, OK),
        Case("memory lexical search", "search", {"query_text": p, "mode": "lexical"}, OK),
        Case("memory semantic search", "search", {"query_text": p, "mode": "semantic"}, OK),
        Case("memory search collection", "search", {"query_text": "x", "collection": p}, 4001),
        Case("memory time window", "search", {"query_text": "x", "time_range": {"start": p}}, 4001),
        Case(
            "memory summarize tags",
            "summarize",
            {"tags": [p], "time_range": {"start": "2020-01-01T00:00:00Z", "end": "2099-01-01T00:00:00Z"}},
            OK,
        ),
        Case("collection name", "new-collection", {"name": p}, 4001),
        # memory (thoughts dialect)
        Case("thought project", "capture_thought", {"content": "hello", "project": p}, 4001),
        Case(
            "thought content/metadata",
            "capture_thought",
            {"content": f"thought {p}", "metadata": {"type": p, "topics": [p], "people": [p], p: p}},
            OK,
        ),
        Case("thought filters", "list_thoughts", {"type": p, "topic": p, "person": p}, OK),
        Case("thought search", "search_thoughts", {"query": p}, OK),
        Case("thought lexical search", "search_thoughts", {"query": p, "mode": "lexical"}, OK),
        Case("thought recall", "recall_context", {"query": p}, OK),
        # graph
        Case("graph project", "create_entities", {"project": p, "entities": [{"name": "a"}]}, 4001),
        Case(
            "graph entity text",
            "create_entities",
            {"entities": [{"name": p, "entityType": p, "observations": [p], "status": p[:32]}]},
            OK,
        ),
        Case(
            "graph relation type",
            "create_relations",
            {"relations": [{"from": p, "to": "plain", "relationType": p}]},
            OK,
        ),
        Case("graph search_nodes", "search_nodes", {"query": p}, OK),
        Case("graph read filter", "read_graph", {"entity_type": p}, OK),
        Case("graph open", "open_nodes", {"names": [p, f"{p} (missing)"]}, OK),
        Case("graph semantic", "search_semantic", {"query": p, "entity_type": p}, OK),
        Case(
            "graph reflection",
            "add_reflection",
            {"target_type": "entity", "target_name": p, "author": p, "mood": p[:64], "content": p},
            OK,
        ),
        Case("graph reflection search", "search_reflections", {"query": p, "author": p}, OK),
        Case("graph history", "get_entity_history", {"entity_name": p}, OK),
        Case("graph delete missing", "delete_entities", {"entityNames": [f"{p} (missing)"]}, OK),
        # analysis
        Case("analysis id", "analysis_query", {"analysis_id": p, "mode": "describe"}, 4001),
        Case("analysis project", "analysis_query", {"analysis_id": AID, "project": p, "mode": "describe"}, 4001),
        Case("analysis model", "analysis_ingest", {"analysis_id": AID, "model": p}, 4001),
        Case("analysis ingest fields", "analysis_ingest", {"analysis_id": AID, "model": "book", "fields": [p]}, 4001),
        Case(
            "analysis upstream filter value",
            "analysis_ingest",
            {"analysis_id": "inj2", "model": "book", "filters": {"genre": p}},
            OK,
        ),
        Case("analysis group_by", "analysis_query", {"analysis_id": AID, "mode": "aggregate", "group_by": p}, 4001),
        Case("analysis where field", "analysis_query", {"analysis_id": AID, "mode": "filter", "where": {p: 1}}, 4001),
        Case(
            "analysis where operator",
            "analysis_query",
            {"analysis_id": AID, "mode": "filter", "where": {"rating": {f"${p}": 1}}},
            4001,
        ),
        Case(
            "analysis where range value",
            "analysis_query",
            {"analysis_id": AID, "mode": "filter", "where": {"updated_at": {"$gt": p}}},
            4001,
        ),
        Case(
            "analysis where value",
            "analysis_query",
            {"analysis_id": AID, "mode": "filter", "where": {"genre": p, "title": [p]}},
            OK,
        ),
        Case("analysis stratify_by", "analysis_query", {"analysis_id": AID, "mode": "sample", "stratify_by": p}, 4001),
        Case(
            "analysis proximity field",
            "analysis_query",
            {"analysis_id": AID, "mode": "sample", "proximity": {**sample_prox, "field": p}},
            4001,
        ),
        Case(
            "analysis proximity origin",
            "analysis_query",
            {"analysis_id": AID, "mode": "sample", "proximity": {**sample_prox, "origin": p[:40]}},
            4001,
        ),
        Case(
            "analysis window",
            "analysis_query",
            {"analysis_id": AID, "mode": "sample", "proximity": {**sample_prox, "window": f"1 day{p}"[:40]}},
            4001,
        ),
        Case(
            "analysis bucket",
            "analysis_query",
            {"analysis_id": AID, "mode": "sample", "proximity": {**sample_prox, "bucket": f"7 days{p}"[:40]}},
            4001,
        ),
        Case(
            "analysis category",
            "analysis_query",
            {"analysis_id": AID, "mode": "semantic", "query": "x", "category": p},
            4001,
        ),
        Case("analysis semantic text", "analysis_query", {"analysis_id": AID, "mode": "semantic", "query": p}, OK),
        Case(
            "analysis finding text",
            "analysis_store",
            {"analysis_id": AID, "findings": [{"finding": p, "metadata": {p: p}}]},
            OK,
        ),
        Case(
            "analysis act where field",
            "analysis_act",
            {"analysis_id": AID, "model": "book", "where": {p: 1}, "action": "delete"},
            4001,
        ),
        Case(
            "analysis act where value",
            "analysis_act",
            {"analysis_id": AID, "model": "book", "where": {"genre": p}, "action": "delete"},
            OK,
        ),
        Case("analysis clear id", "analysis_clear", {"analysis_id": p}, 4001),
        # datasets (names that stay inside the root but do not exist)
        Case("dataset path", "profile_dataset", {"file_path": p}, 4002),
        Case("dataset query files", "execute_query", {"query_type": "sql", "query": "SELECT 1", "files": [p]}, 4002),
        Case(
            "dataset cache label",
            "execute_query",
            {"query_type": "sql", "query": "SELECT count(*) AS n FROM data", "files": ["penguins.csv"], "cache_key": p},
            OK,
        ),
        Case("dataset sample columns", "stream_sample", {"file_path": "penguins.csv", "columns": [p]}, 4003),
        Case(
            "dataset stratify column",
            "stream_sample",
            {"file_path": "penguins.csv", "strategy": "stratified", "stratify_column": p},
            4003,
        ),
        Case("dataset cache pattern", "cache_invalidate", {"pattern": p}, OK),
        Case("dataset name", "register_dataset", {"name": p, "path": "penguins.csv"}, 4001),
        Case("dataset register path", "register_dataset", {"name": "inj", "path": p}, 4002),
        Case("dataset result id", "get_result", {"query_id": p}, 4001),
    ]


def _escape_cases(path: str, code: int) -> list[Case]:
    return [
        Case("profile outside root", "profile_dataset", {"file_path": path}, code),
        Case(
            "query file outside root",
            "execute_query",
            {"query_type": "sql", "query": "SELECT * FROM data", "files": [path]},
            code,
        ),
        Case("sample outside root", "stream_sample", {"file_path": path}, code),
        Case("register outside root", "register_dataset", {"name": "escape", "path": path, "replace": True}, code),
        Case(
            "sql reads outside root",
            "execute_query",
            {"query_type": "sql", "query": f"SELECT * FROM read_csv_auto('{path}')", "files": []},
            4030,
        ),
    ]


def _export_cases(query_id: str, p: str) -> list[Case]:
    base = {"query_id": query_id, "destination": "exports"}
    return [
        Case("export filename", "export_result", {**base, "filename": p}, 4001),
        Case("export partition column", "export_result", {**base, "partition_by": p}, 4001),
        *[
            Case("export destination outside root", "export_result", {**base, "destination": e}, 4030)
            for e in ("..", "../..", "/tmp", "/etc", "exports/../../x")
        ],
    ]


class Transports:
    """Calls a tool over MCP and over REST and returns both outcomes (0 or the error code) and bodies."""

    def __init__(self, mcp: Any, rest: httpx.AsyncClient) -> None:
        self.mcp, self.rest = mcp, rest
        self.routes = {op.name: (op.method, op.path) for op in build_registry(core_ops, FEATURES).operations}

    async def via_mcp(self, tool: str, args: dict[str, Any]) -> tuple[int, str]:
        result = await self.mcp.call_tool(tool, args)
        text = result.content[0].text if result.content else ""
        return (json.loads(text)["error"]["code"] if result.is_error else OK), text

    async def via_rest(self, tool: str, args: dict[str, Any]) -> tuple[int, str]:
        method, path = self.routes[tool]
        args = dict(args)
        for name in [n for n in args if "{" + n + "}" in path]:
            path = path.replace("{" + name + "}", quote(str(args.pop(name)), safe=""))
        if method in ("GET", "DELETE"):
            r = await self.rest.request(method, f"/api/v1{path}", params=args)
        else:
            r = await self.rest.request(method, f"/api/v1{path}", json=args)
        assert r.status_code < 500, (tool, args, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json"), (tool, r.text)
        return (OK if r.status_code == 200 else r.json()["error"]["code"]), r.text

    async def check(self, case: Case) -> list[str]:
        """Mismatches of this case on either transport (empty when both behaved)."""
        wrong = []
        for transport in (self.via_mcp, self.via_rest):
            got, body = await transport(case.tool, case.args)
            if got != case.expect or SECRET in body or "root:x:0:0" in body:
                wrong.append(
                    f"{transport.__name__} {case.label} ({case.tool} {case.args!r}): expected "
                    f"{case.expect}, got {got}: {body[:300]}"
                )
        return wrong


async def _tables(conn: asyncpg.Connection) -> set[str]:
    return {r["tablename"] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


async def _files(root: Path) -> set[Path]:
    """Files under the data dir, except the server's own work area (stored results, cache)."""
    return set(
        await asyncio.to_thread(lambda: [p for p in root.rglob("*") if p.is_file() and "datasets-work" not in p.parts])
    )


@pytest.fixture
def dataset_root(server: RunningServer) -> Path:
    root = root_of(server)
    shutil.copy(penguins_csv(), root / "penguins.csv")
    (root.parent / "secret.csv").write_text(f"a,b\n{SECRET},1\n")
    return root


async def test_injection_attempts_are_refused_or_taken_as_data(
    server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster, bookshelf: Upstream, dataset_root: Path
) -> None:
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        await conn.execute(f"CREATE TABLE {CANARY} (id int PRIMARY KEY)")
        await conn.execute(f"INSERT INTO {CANARY} VALUES (1)")
        before = await _tables(conn)
        files_before = await _files(dataset_root.parent)
        assert (
            await rest.post("/api/v1/analysis/ingest", json={"analysis_id": AID, "model": "book", "per_page": 50})
        ).status_code == 200
        assert (await rest.post("/api/v1/graph/entities", json={"entities": [{"name": "plain"}]})).status_code == 200
        stored = await rest.post(
            "/api/v1/datasets/query",
            json={"query_type": "sql", "query": "SELECT species, island FROM data", "files": ["penguins.csv"]},
        )
        query_id = stored.json()["query_id"]
        async with mcp_client(server.url) as mcp:
            calls = Transports(mcp, rest)
            cases = [c for p in SQLI for c in _sqli_cases(p) + _export_cases(query_id, p)]
            cases += [c for e, code in ESCAPES for c in _escape_cases(e, code)]
            covered = {c.tool for c in cases}
            wrong = [w for case in cases for w in await calls.check(case)]
        assert not wrong, "\n".join(wrong)
        assert len(covered) >= 30, sorted(covered)
        assert await _tables(conn) == before
        assert [r["id"] for r in await conn.fetch(f"SELECT id FROM {CANARY}")] == [1]
        assert await _files(dataset_root.parent) == files_before  # every export in the table was refused
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {CANARY}")
        await conn.close()


async def test_text_taken_as_data_round_trips_exactly(server: RunningServer, rest: httpx.AsyncClient) -> None:
    async def ok(path: str, body: dict[str, Any], method: str = "POST") -> dict[str, Any]:
        if method == "GET":
            r = await rest.request(method, f"/api/v1{path}", params=body)
        else:
            r = await rest.request(method, f"/api/v1{path}", json=body)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    hostile = SQLI[0]
    await ok("/memory/push", {"text": f"quarterly budget {hostile}", "tags": [hostile, "plain"]})
    await ok("/memory/push", {"text": "an unrelated note about rivers", "tags": ["plain"]})
    found = await ok("/memory/search", {"query_text": "budget", "tags": [hostile], "mode": "lexical"})
    hits = found["results"]
    assert len(hits) == 1 and hostile in (hit_texts(found)[0] or "") and hostile in hits[0]["tags"]
    # Wildcards in a tag or a search are characters, not patterns.
    assert (await ok("/memory/search", {"query_text": "note", "tags": ["%"], "mode": "lexical"}))["results"] == []

    await ok(
        "/graph/entities",
        {
            "entities": [
                {"name": "alpha", "observations": ["first"]},
                {"name": "beta", "observations": ["second"]},
                {"name": hostile, "entityType": hostile, "observations": [hostile]},
            ]
        },
    )
    for pattern in ("%", "%%", "a_p", "b%a"):  # as wildcards they would match alpha and beta
        found = await ok("/graph/nodes/search", {"query": pattern}, method="GET")
        assert found["entities"] == [], (pattern, found)
    opened = await ok("/graph/nodes/open", {"names": [hostile]})
    entity = opened["entities"][0]
    assert entity["name"] == hostile and entity["entityType"] == hostile and entity["observations"] == [hostile]

    meta = {"topics": [hostile], "type": "idea"}
    captured = await ok("/thoughts", {"content": f"plan {hostile}", "metadata": meta})
    listed = await ok("/thoughts", {"topic": hostile}, method="GET")
    assert [t["id"] for t in listed["thoughts"]] == [captured["thought"]["id"]]
    assert listed["thoughts"][0]["metadata"]["topics"] == [hostile]
    assert (await ok("/thoughts", {"topic": "%"}, method="GET"))["thoughts"] == []
