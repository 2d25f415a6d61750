"""The OpenAPI document against the running server: every operation's examples are a real call
recorded here (and stale files fail), and every error code an operation answers here is one its
entry documents.

Regenerate the recorded examples after changing an operation: `CAIRN_RECORD_EXAMPLES=1 .venv/bin/pytest
tests/e2e/test_openapi_contract.py -k example`; they are written to `openapi_examples.json` beside
each family's operations (docs/architecture.md, "One declaration, two transports")."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from playwright.async_api import Browser

from app.core.http.openapi import examples_file, operation_id, recorded
from tests.support import analysis as analysis_helpers
from tests.support.analysis import Upstream
from tests.support.browser import new_page
from tests.support.datasets import penguins_csv, root_of
from tests.support.schema_strategy import from_json_schema
from tests.support.server import READ_KEY, RunningServer
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow  # a real call per operation, then generated ones: seconds

upstream = analysis_helpers.upstream
bookshelf = analysis_helpers.bookshelf
RECORD = os.environ.get("CAIRN_RECORD_EXAMPLES") == "1"
MAX_ITEMS = 2  # arrays in an example keep their first items
MAX_CHARS = 300  # and strings their first characters
DATA_DIR = "/var/lib/cairn"  # the test server's temporary data folder, as examples show it


def compact(value: Any, data_dir: str) -> Any:
    """`value` with its arrays cut to MAX_ITEMS items, its strings to MAX_CHARS characters and the
    test server's data folder shown as DATA_DIR."""
    if isinstance(value, dict):  # a new key's secret (shown once) is not kept, even a revoked test one
        return {k: "cairn_…" if k == "token" else compact(v, data_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(v, data_dir) for v in value[:MAX_ITEMS]]
    if isinstance(value, str):
        value = value.replace(data_dir, DATA_DIR)
        return value[:MAX_CHARS] + "…" if len(value) > MAX_CHARS else value
    return value


def skeleton(value: Any) -> Any:
    """What must not drift in an example: its shape (keys and the types of values; the kinds of
    items in a list, not their number or order). Values change from run to run: ids, times, scores."""
    if isinstance(value, dict):
        return {k: skeleton(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return sorted({json.dumps(skeleton(v), sort_keys=True) for v in value})
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


async def _embedded(rest: httpx.AsyncClient, memory_id: str) -> bool:
    """Whether the memory has a vector of the active model."""
    r = await rest.get(f"/api/v1/memory/items/{memory_id}")
    return r.status_code == 200 and any(e["active"] and e["embedded"] >= 1 for e in r.json()["embeddings"])


class Recorder:
    """Calls operations over REST by name, each answered 200, and keeps the first call of each."""

    def __init__(self, rest: httpx.AsyncClient, doc: dict[str, Any], data_dir: str) -> None:
        self.rest = rest
        self.data_dir = data_dir
        self.routes: dict[str, tuple[str, str]] = {}
        for path, item in doc["paths"].items():
            for method, entry in item.items():
                self.routes[entry["operationId"]] = (method.upper(), path)
        self.calls: dict[str, dict[str, Any]] = {}

    async def __call__(self, name: str, args: dict[str, Any] | None = None, **request: Any) -> Any:
        name = name.replace("-", "_")
        method, path = self.routes[name]
        args = dict(args or {})
        url = re.sub(r"{(\w+)}", lambda m: str(args[m.group(1)]), path)
        if method == "GET":
            r = await self.rest.get(url, params=args)
        elif request:
            r = await self.rest.request(method, url, **request)
        else:
            body = {k: v for k, v in args.items() if f"{{{k}}}" not in path}
            r = await self.rest.request(method, url, json=body)
        assert r.status_code == 200, (name, r.status_code, r.text[:500])
        self.calls.setdefault(
            name, {"request": compact(args, self.data_dir), "response": compact(r.json(), self.data_dir)}
        )
        return r.json()


async def _core(call: Recorder) -> None:
    await call("create_project", {"name": "ops-notes", "description": "What the agents of the team learned"})
    await call("list_projects", {"limit": 10})
    await call("embed", {"text": "PostgreSQL keeps the vectors next to the rows"})
    key = await call("create_key", {"name": "ci-reader", "scopes": ["read"], "project": "ops-notes"})
    await call("list_keys", {"include_revoked": False})
    await call("revoke_key", {"key_id": key["key"]["id"] if "key" in key else key["id"]})
    await call("wait_for_embeddings", {"timeout_seconds": 30})
    await call("audit_log", {"limit": 2})
    for name in ("read_health", "read_settings", "read_toolsets"):
        await call(name)


async def _memory(call: Recorder) -> None:
    project = {"project_id": "ops-notes", "memory_type": "episodic"}
    pushed = await call(
        "push",
        {
            **project,
            "text": "The nightly import job retries three times, then pages the on-call engineer.",
            "tags": ["ops", "imports"],
            "source_uri": "https://wiki.example.com/runbooks/import",
            "wait_for_embedding": True,
        },
    )
    found = await call("search", {**project, "query_text": "how often does the nightly import job retry?", "limit": 3})
    summary = await call(
        "summarize",
        {**project, "time_range": {"start": "2020-01-01T00:00:00Z", "end": "2100-01-01T00:00:00Z"}, "max_words": 40},
    )
    await call("new-collection", {"name": "runbooks"})
    await call("get-collections")
    await call("metrics")
    assert pushed["chunksIndexed"] >= 1
    memory_id = found["results"][0]["id"]
    await call("get_memory", {"id": memory_id})
    await call("list_memories", {"project": "ops-notes", "tags": ["ops"], "limit": 5})
    await call("update_memory", {"id": memory_id, "tags": ["ops", "imports", "on-call"]})
    thought = await call(
        "capture_thought",
        {
            "content": "Decided to keep the embeddings in PostgreSQL: one backup, one transaction.",
            "project": "ops-notes",
            "metadata": {"type": "decision", "topics": ["storage"]},
            "wait_for_embedding": True,
        },
    )
    await call(
        "capture_thought",
        {
            "content": "Anna prefers small pull requests with one change each.",
            "project": "ops-notes",
            "metadata": {"type": "person_note", "people": ["Anna"]},
            "wait_for_embedding": True,
        },
    )
    await call("list_thoughts", {"project": "ops-notes", "limit": 5})
    await call("search_thoughts", {"query": "keep the embeddings in PostgreSQL", "project": "ops-notes", "limit": 3})
    await call("recall_context", {"query": "embeddings in PostgreSQL", "project": "ops-notes", "limit": 3})
    await call("get_project_context", {"project": "ops-notes", "query": "embeddings in PostgreSQL", "limit": 3})
    digest = await call("summarize_thoughts", {"project": "ops-notes", "max_words": 40})
    await call("thought_stats", {"project": "ops-notes"})
    await call("backfill_embeddings", {"project": "ops-notes", "dry_run": True})
    tid = thought["thought"]["id"]
    await call("get_thought", {"id": tid})
    # The summaries are embedded by the queue: related_thoughts finds both only once both have a vector.
    for made in (str(summary["upserted_memory_id"]), str(digest["upserted_memory_id"])):
        await eventually(partial(_embedded, call.rest, made), what="summary vectors")
    await call("related_thoughts", {"id": tid, "limit": 1})  # the nearest only: lower ones come and go with timing
    await call("update_thought", {"id": tid, "metadata": {"type": "decision", "topics": ["storage", "backup"]}})
    await call("archive_thought", {"id": tid, "archived": True})
    await call("delete_thought", {"id": tid})
    for name in ("read_memory_types", "read_projects", "read_usage"):
        await call(name)
    await call("read_project_tags", {"project_id": "ops-notes"})
    await call("delete_memory", {"id": memory_id})


async def _graph(call: Recorder) -> None:
    p = {"project": "ops-notes"}
    await call(
        "create_entities",
        {
            **p,
            "entities": [
                {"name": "Cairn", "entityType": "service", "observations": ["Stores memories in PostgreSQL"]},
                {"name": "PostgreSQL", "entityType": "database", "observations": ["Version 16 with pgvector"]},
            ],
            "wait_for_embedding": True,
        },
    )
    await call("create_relations", {**p, "relations": [{"from": "Cairn", "to": "PostgreSQL", "relationType": "uses"}]})
    await call(
        "add_observations",
        {
            **p,
            "observations": [
                {"entityName": "Cairn", "contents": ["Serves MCP and REST", "Stores its memories in PostgreSQL"]}
            ],
            "wait_for_embedding": True,
        },
    )
    await call("read_graph", {**p, "limit": 5})
    await call("search_nodes", {**p, "query": "PostgreSQL", "limit": 5})
    await call("open_nodes", {**p, "names": ["Cairn"]})
    await call("search_semantic", {**p, "query": "service that stores memories in PostgreSQL", "limit": 3})
    await call(
        "supersede_observation",
        {
            **p,
            "entity_name": "PostgreSQL",
            "old_content": "Version 16 with pgvector",
            "new_content": "Version 17 with pgvector",
        },
    )
    await call("get_entity_history", {**p, "entity_name": "PostgreSQL"})
    await call("set_entity_status", {**p, "entity_name": "PostgreSQL", "status": "archived"})
    await call(
        "add_reflection", {**p, "target_type": "entity", "target_name": "Cairn", "content": "Upgrades went smoothly."}
    )
    await call("search_reflections", {**p, "query": "upgrades", "limit": 3})
    await call("find_duplicate_observations", {**p, "limit": 5})
    await call("consolidate", {**p, "dry_run": True})
    await call("search_quality_report", {**p, "days": 7})
    await call("graph_stats", p)
    await call("end_relation", {**p, "from": "Cairn", "to": "PostgreSQL", "relationType": "uses"})
    await call("delete_relations", {**p, "relations": [{"from": "Cairn", "to": "PostgreSQL", "relationType": "uses"}]})
    await call(
        "delete_observations", {**p, "deletions": [{"entityName": "Cairn", "observations": ["Serves MCP and REST"]}]}
    )
    await call("delete_entities", {**p, "entityNames": ["PostgreSQL"]})


async def _analysis(call: Recorder) -> None:
    aid = {"analysis_id": "library-audit", "project": "ops-notes"}
    await call("analysis_ingest", {**aid, "model": "book", "ingest_all": True, "per_page": 100})
    await call(
        "analysis_store",
        {**aid, "findings": [{"finding": "Most one-star books are unread", "category": "pattern"}]},
    )
    await call("analysis_query", {**aid, "mode": "aggregate", "model": "book", "group_by": "status"})
    await call(
        "analysis_act",
        {
            **aid,
            "model": "book",
            "where": {"status": "completed", "rating": {"$lt": 2}},
            "action": "update",
            "attributes": {"status": "unread"},
            "dry_run": True,
        },
    )
    live = {**aid, "model": "book", "where": {"status": "completed", "rating": {"$lt": 2}}, "action": "update"}
    await call("analysis_act", {**live, "attributes": {"status": "unread"}})  # the dry run above is the example
    await call("analysis_act_runs", {**aid, "limit": 5})
    await call("analysis_sessions", {"project": "ops-notes"})
    await call("analysis_session", aid)
    await call("analysis_clear", aid)


async def _datasets(call: Recorder, root: Path) -> None:
    shutil.copy(penguins_csv(), root / "penguins.csv")
    with (root / "weather.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["day", "city", "rain_mm"])
        w.writerows([[f"2026-11-{d:02d}", city, d % 7] for d in range(1, 29) for city in ("Oslo", "Lima")])
    # The default project's cache is the session server's: what other tests left there would change
    # cache_manager's recorded listing (its totals and paging), so the scenario starts from none.
    dropped = await call.rest.post("/api/v1/datasets/cache/invalidate", json={"pattern": "*"})
    assert dropped.status_code == 200, dropped.text
    await call("profile_dataset", {"file_path": "penguins.csv", "sample_size": 1000})
    query = await call(
        "execute_query",
        {
            "query_type": "sql",
            "files": ["penguins.csv"],
            "query": "SELECT species, count(*) AS n FROM penguins GROUP BY species",
        },
    )
    await call("get_result", {"query_id": query["query_id"], "limit": 2})
    await call("stream_sample", {"file_path": "penguins.csv", "sample_size": 3, "columns": ["species", "island"]})
    await call("export_result", {"query_id": query["query_id"], "destination": "exports", "format": "csv"})
    await call("register_dataset", {"name": "weather", "path": "weather.csv", "description": "Daily rain, two cities"})
    await call("list_datasets", {"limit": 5})
    await call(
        "context_optimizer",
        {"files": ["penguins.csv"], "query": "SELECT species, island FROM penguins", "return_limit": 50},
    )
    await call("cache_manager", {"pattern": "profile:*", "limit": 5})
    await call("cache_invalidate", {"file_path": "penguins.csv"})
    files = {"file": ("rain.csv", b"day,rain_mm\n2026-11-01,3\n2026-11-02,0\n", "text/csv")}
    await call(
        "upload_dataset",
        {"project": "ops-notes"},
        params={"project": "ops-notes"},
        data={"name": "rain"},
        files=files,
    )


def _check_or_write(server: RunningServer, calls: dict[str, dict[str, Any]]) -> list[str]:
    """Compare the recorded calls with the checked-in files (or write them with CAIRN_RECORD_EXAMPLES=1)."""
    registry = server.app.state.cairn.registry
    owners = [*registry.operations, *registry.resources]
    files: dict[Path, dict[str, Any]] = defaultdict(dict)
    for item in owners:
        path = examples_file(item.handler)
        if path is not None and operation_id(item) in calls and "tests" not in path.parts:
            files[path][operation_id(item)] = calls[operation_id(item)]
    stale = []
    for path, made in sorted(files.items()):
        if RECORD:
            path.write_text(json.dumps(made, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
            continue
        kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        if skeleton(kept) != skeleton(made):
            changed = sorted(k for k in {*kept, *made} if skeleton(kept.get(k)) != skeleton(made.get(k)))
            stale.append(f"{path}: {changed}")
    return stale


async def test_every_operation_has_a_recorded_example_that_is_current(
    server: RunningServer, rest: httpx.AsyncClient, bookshelf: Upstream
) -> None:
    doc = (await rest.get("/openapi.json")).json()
    call = Recorder(rest, doc, str(server.settings.data_dir))
    await _core(call)
    await _memory(call)
    await _graph(call)
    await _analysis(call)
    root = root_of(server)
    try:
        await _datasets(call, root)
    finally:  # the shared data root keeps only what the other tests expect
        (root / "weather.csv").unlink(missing_ok=True)
    wanted = {
        entry["operationId"]
        for item in doc["paths"].values()
        for entry in item.values()
        if not entry["operationId"].startswith("test_")
    }
    assert wanted - set(call.calls) == set(), "operations without a recorded call"
    stale = _check_or_write(server, call.calls)
    assert not stale, f"recorded examples are stale; rerun with CAIRN_RECORD_EXAMPLES=1: {stale}"
    if not RECORD:  # the document shows what was recorded
        fresh = {e["operationId"]: e for item in doc["paths"].values() for e in item.values()}
        for name, recorded in call.calls.items():
            shown = fresh[name]["responses"]["200"]["content"]["application/json"].get("example")
            assert skeleton(shown) == skeleton(recorded["response"]), name


GENERATED = 12  # generated argument sets per operation


def _generated(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Argument sets drawn from an input schema, plus arbitrary (mostly invalid) objects."""
    strategy = st.one_of(
        from_json_schema(schema),
        st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=20), st.none()), max_size=3),
    )
    found: list[dict[str, Any]] = []

    @given(strategy)
    @settings(
        max_examples=GENERATED, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    def collect(args: Any) -> None:
        if isinstance(args, dict):
            found.append(args)

    collect()
    return found


def _query(args: dict[str, Any]) -> list[tuple[str, str]]:
    """`args` as a query string: lists repeated, other non-text values as JSON."""
    pairs = []
    for key, value in args.items():
        for item in value if isinstance(value, list) else [value]:
            pairs.append((key, item if isinstance(item, str) else json.dumps(item)))
    return pairs


def _request(method: str, path: str, args: dict[str, Any]) -> dict[str, Any]:
    """httpx request arguments calling `path` with `args`: path parameters filled in (a missing one as
    a nonexistent id), the rest as the query string (GET) or the JSON body."""
    args = dict(args)
    missing = "00000000-0000-4000-8000-000000000000"
    url = re.sub(r"{(\w+)}", lambda m: quote(str(args.pop(m.group(1), missing)) or missing, safe=""), path)
    if method == "GET":
        return {"method": method, "url": url, "params": _query(args)}
    return {"method": method, "url": url, "json": args}


async def _provoke(
    c: httpx.AsyncClient, method: str, path: str, schema: dict[str, Any], example: dict[str, Any], limit: int
) -> list[httpx.Response]:
    """Calls of one route meant to fail in every way a caller can make them fail: no key, a read-only
    key (with the recorded valid arguments), a body past the limit, generated and arbitrary
    arguments, a missing named thing."""
    answers = [
        await c.request(**_request(method, path, {}), headers={"Authorization": ""}),
        await c.request(**_request(method, path, example), headers={"Authorization": f"Bearer {READ_KEY}"}),
    ]
    if method != "GET":
        over = b"[" + b"0," * (limit // 2) + b"0]"
        answers.append(await c.request(method, re.sub(r"{\w+}", "x", path), content=over, headers=JSON))
    for args in [*_generated(schema), {}]:
        answers.append(await c.request(**_request(method, path, args)))
    return answers


JSON = {"Content-Type": "application/json"}
# Calls that fail in a way only a family knows (its declared `errors`), beside the generated ones.
TARGETED: list[tuple[str, dict[str, Any]]] = [
    ("search", {"query_text": "imports", "collection": "no-such-collection"}),
    ("summarize", {"time_range": {"start": "2001-01-01T00:00:00Z", "end": "2001-01-02T00:00:00Z"}}),
    ("add_reflection", {"target_type": "entity", "target_name": "Nobody", "content": "Calm."}),
    ("analysis_ingest", {"analysis_id": "audit", "model": "no_such_model"}),
    ("analysis_act", {"analysis_id": "audit", "model": "no_such_model", "action": "update", "attributes": {}}),
    ("execute_query", {"query_type": "sql", "files": ["penguins.csv"], "query": "SELECT spieces FROM penguins"}),
    ("context_optimizer", {"files": ["penguins.csv"], "query": "SELECT spieces FROM penguins"}),
    ("context_optimizer", {"files": ["nowhere.csv"], "query": "SELECT * FROM nowhere"}),
    ("stream_sample", {"file_path": "penguins.csv", "columns": ["spieces"]}),
    ("profile_dataset", {"file_path": "broken.parquet"}),
    ("profile_dataset", {"file_path": "nowhere.csv"}),
    ("stream_sample", {"file_path": "broken.parquet"}),
    ("stream_sample", {"file_path": "nowhere.csv"}),
    ("execute_query", {"query_type": "sql", "files": ["nowhere.csv"], "query": "SELECT * FROM nowhere"}),
    ("export_result", {"query_id": "q_0000000000000000", "destination": "exports"}),
]
# The same with the upstream registry file broken (analysis reads it per call).
BROKEN_REGISTRY: list[tuple[str, dict[str, Any]]] = [
    ("analysis_ingest", {"analysis_id": "audit", "model": "book"}),
    ("analysis_act", {"analysis_id": "audit", "model": "book", "action": "update", "attributes": {}}),
]
# Declared errors the calls here cannot provoke: engine failures, memory limits and upstream outages
# need the faults that tests/e2e/test_faults.py, test_datasets_limits.py and test_analysis_faults.py make.
NEEDS_A_FAULT = {5001, 5002, 5004, 5020}
# Declared because every engine operation shares the engine's error mapping (`ENGINE_ERRORS` in
# app/datasets/operations.py), but no file found here makes profiling fail on a column.
NOT_PROVOKED_HERE = {"profile_dataset 4003"}


async def test_each_operation_answers_only_the_errors_it_documents(
    server: RunningServer,
    rest: httpx.AsyncClient,
    bookshelf: Upstream,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Every error code an operation answers to calls made to fail (no key, the wrong scope, too
    large, generated and arbitrary arguments, missing things) is one its entry documents under that
    status; the document is the operation's own (a GET documents no 413, only upstream callers 502)."""
    doc = (await rest.get("/openapi.json")).json()
    registry = server.app.state.cairn.registry
    inputs = {operation_id(op): op.input_schema() for op in registry.operations}
    examples = {operation_id(item): recorded(item) or {} for item in [*registry.operations, *registry.resources]}
    observed: dict[str, set[tuple[int, int]]] = defaultdict(set)
    documented: dict[str, dict[str, list[int]]] = {}
    root = root_of(server)
    shutil.copy(penguins_csv(), root / "penguins.csv")
    (root / "broken.parquet").write_bytes(b"PAR1 not really")
    request.addfinalizer(lambda: (root / "broken.parquet").unlink(missing_ok=True))
    routes = {}
    for path, item in doc["paths"].items():
        for method, entry in item.items():
            name = entry["operationId"]
            routes[name] = (method.upper(), path)
            if name.startswith("test_"):
                continue
            documented[name] = {s: r.get("x-cairn-codes", []) for s, r in entry["responses"].items() if s != "200"}
            schema = inputs.get(name, {"type": "object", "properties": {}})
            example = examples.get(name, {}).get("request") or {}
            for r in await _provoke(rest, method.upper(), path, schema, example, server.settings.max_body_bytes):
                assert r.status_code < 500 or r.status_code in (502, 503, 504), (name, r.status_code, r.text[:300])
                if r.status_code >= 400:
                    observed[name].add((r.status_code, r.json()["error"]["code"]))
    for name, args in TARGETED:
        r = await rest.request(**_request(*routes[name], args))
        assert r.status_code >= 400, (name, r.text[:300])
        observed[name].add((r.status_code, r.json()["error"]["code"]))
    broken = tmp_path / "upstreams.yaml"
    broken.write_text("upstreams: [ {name: 1", encoding="utf-8")
    analysis_helpers.analysis_settings(server, monkeypatch, upstreams=broken)
    for name, args in BROKEN_REGISTRY:
        r = await rest.request(**_request(*routes[name], args))
        observed[name].add((r.status_code, r.json()["error"]["code"]))
    undocumented = sorted(
        f"{name}: {status} {code}"
        for name, pairs in observed.items()
        for status, code in pairs
        if code not in documented[name].get(str(status), [])
    )
    assert not undocumented, "errors answered but not documented: " + ", ".join(undocumented)
    # The calls reached every operation: each refused the missing key, each write the read-only key.
    assert all((401, 4010) in observed[name] for name in documented), sorted(
        n for n in documented if (401, 4010) not in observed[n]
    )
    writes = {operation_id(op) for op in registry.operations if op.scope != "read" and operation_id(op) in documented}
    assert all((403, 4030) in observed[name] for name in writes), sorted(
        n for n in writes if (403, 4030) not in observed[n]
    )
    declared = {
        operation_id(op): {cls.code for cls in op.errors}
        for op in registry.operations
        if operation_id(op) in documented
    }
    unseen = sorted(
        f"{name} {code}"
        for name, codes in declared.items()
        for code in codes
        if code not in {c for _, c in observed[name]}
    )
    unexplained = [u for u in unseen if int(u.rsplit(" ", 1)[1]) not in NEEDS_A_FAULT and u not in NOT_PROVOKED_HERE]
    assert not unexplained, "declared errors no call here provoked: " + ", ".join(unexplained)
    health = documented["read_health"]
    assert "413" not in health and "400" not in health and "404" not in health, health
    assert all(
        "413" not in documented[operation_id(op)]
        for op in registry.operations
        if op.method == "GET" and operation_id(op) in documented
    )
    # Only the operations that call an upstream or a summarizing model document 502.
    assert {name for name, codes in documented.items() if "502" in codes} == {
        "analysis_ingest",
        "analysis_act",
        "summarize",
        "summarize_thoughts",
    }


def test_a_changed_shape_makes_the_examples_stale() -> None:
    kept = {"hits": [{"id": "a1", "score": 0.9}], "total": 1}
    assert skeleton(kept) == skeleton({"total": 7, "hits": [{"score": 0.1, "id": "b2"}, {"score": 0.2, "id": "c3"}]})
    assert skeleton(kept) != skeleton({"hits": [{"id": "a1", "relevance": 0.9}], "total": 1})  # a renamed field
    assert skeleton(kept) != skeleton({"hits": [{"id": "a1", "score": "0.9"}], "total": 1})  # another type
    assert skeleton(kept) != skeleton({"hits": [], "total": 1})


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_api_docs_load_nothing_from_elsewhere(server: RunningServer, browser: Browser, page: str) -> None:
    """The docs pages in a real browser: every request they make (scripts, styles, fonts, images,
    the document) goes to this server, and the operations render."""
    async with new_page(browser) as tab:
        requested: list[str] = []
        tab.on("request", lambda request: requested.append(request.url))
        await tab.goto(f"{server.url}{page}")
        await tab.get_by_text("Create a project", exact=False).first.wait_for(state="attached")
        await tab.wait_for_load_state("networkidle")
    assert any(url.endswith("/openapi.json") for url in requested), requested
    elsewhere = [url for url in requested if not url.startswith((server.url, "data:", "blob:"))]
    assert not elsewhere, elsewhere
