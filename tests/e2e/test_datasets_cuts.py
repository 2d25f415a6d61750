"""Every cut says what it cut (issue 39, item 1): every datasets tool is walked with tiny budgets over MCP
and REST, and no reply reports `truncated`, `columns_omitted`, `files_truncated` or a degradation without
a `cut` naming what it left out, why, and the call (or the way) that gets it; that call is then made and
brings what was left out. Then the cases the audit found: a 100-row, 12-column sample, a stratified sample of 16
over 16 carriers, a profile at the seed's 350 tokens and by default, and a 7-partition export."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import httpx
import pytest

from app.core.embeddings.tokens import count_tokens
from app.core.feature import build_registry
from app.core.operations import ops as core_ops
from app.features import FEATURES
from tests.support.datasets import OK, Both, callers, root_of
from tests.support.server import ADMIN_KEY, RunningServer

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

OPERATIONS = [op for op in build_registry(core_ops, FEATURES).operations if op.feature == "datasets"]
# Tools with a JSON reply on both transports; upload_dataset is a REST multipart route (walked on its own)
# and download_export streams a file (no reply to cut).
TOOLS = sorted(op.name for op in OPERATIONS if op.mcp and op.rest)
CARRIERS = [f"C{i:02d}" for i in range(16)]
COLUMNS = ["id", "carrier", "origin", "dest", "dep_time", "arr_time", "distance", "delay", "price", "seats", "tail"]
COLUMNS += ["note"]


@pytest.fixture
def flights(server: RunningServer) -> str:
    """cuts_flights.csv: 100 rows of 12 columns, 16 carriers of 3 to 10 rows each."""
    rng = random.Random(39)
    carriers = [c for i, c in enumerate(CARRIERS) for _ in range(3 + i % 8)][:100]
    carriers += [CARRIERS[0]] * (100 - len(carriers))
    rng.shuffle(carriers)
    lines = [",".join(COLUMNS)]
    for i, carrier in enumerate(carriers):
        cells = [str(i), carrier, f"AP{rng.randint(0, 40)}", f"AP{rng.randint(0, 40)}"]
        cells += [f"2025-03-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:00", f"2025-03-{1 + i % 28:02d} 23:59:00"]
        cells += [str(rng.randint(100, 5000)), str(rng.randint(-20, 300)), f"{rng.uniform(40, 900):.2f}"]
        cells += [str(rng.randint(50, 300)), f"N{rng.randint(100, 999)}XY", f"note {rng.randint(0, 10**6)} " * 2]
        lines.append(",".join(cells))
    (root_of(server) / "cuts_flights.csv").write_text("\n".join(lines) + "\n")
    return "cuts_flights.csv"


def reports_a_cut(body: Any) -> list[str]:
    """Where `body` says it left something out: truthy `truncated`, `files_truncated` or
    `columns_omitted` at any depth, a degradation other than none."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("truncated", "files_truncated", "columns_omitted") and value:
                    found.append(f"{path}.{key}")
                if key == "degradation" and value not in (None, "none"):
                    found.append(f"{path}.degradation={value}")
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, path)

    walk(body, "")
    return found


def checked_cut(tool: str, args: dict[str, Any], body: dict[str, Any]) -> dict[str, Any] | None:
    """The reply's cut, checked: present whenever the reply reports one, with its reason, what it left
    out and how to get it: a next call of a datasets tool, or a `how` sentence for a way that is no
    single call (the core's one shape, `app.core.cuts.Cut`)."""
    flags = reports_a_cut(body)
    cut = body.get("cut")
    assert not flags or cut, (tool, args, flags, body)
    if cut is None:
        return None
    assert cut["reason"] and cut["left_out"] and (cut.get("next_call") or cut.get("how")), (tool, cut)
    assert set(cut) <= {"reason", "left_out", "next_call", "how"}, cut
    if cut.get("next_call") is not None:
        assert cut["next_call"]["tool"] in TOOLS and isinstance(cut["next_call"]["args"], dict), cut
    return cut  # type: ignore[no-any-return]


async def both_ok(caller: Both, tool: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool's reply over MCP and REST (each must succeed)."""
    out = []
    for code, body in await caller.both(tool, args):
        assert code == OK, (tool, args, body)
        out.append(body)
    return out


async def follow(caller: Both, tool: str, args: dict[str, Any], cut: dict[str, Any]) -> dict[str, Any]:
    """Make a cut's next call (its args changed in the cut call's when it is the same tool)."""
    nxt = cut["next_call"]
    called = {**args, **nxt["args"]} if nxt["tool"] == tool else dict(nxt["args"])
    got = await both_ok(caller, nxt["tool"], called)
    assert got[0] == got[1] or nxt["tool"] != "stream_sample", (got[0], got[1])
    return got[1]


async def test_every_tool_with_a_tiny_budget_says_what_it_cut(server: RunningServer, flights: str) -> None:
    walked: set[str] = set()
    async with callers(server) as (admin, _):
        q = await admin.ok("execute_query", {"query": "SELECT * FROM data", "files": [flights], "return_limit": 5})
        qid = q["query_id"]
        calls: list[tuple[str, dict[str, Any]]] = [
            ("list_datasets", {"limit": 1}),
            ("register_dataset", {"name": "cuts_flights", "path": flights, "replace": True}),
            ("cache_invalidate", {"pattern": "no-such-label-*"}),
            ("cache_manager", {"limit": 1}),
        ]
        for budget in (50, 200):
            calls += [
                ("profile_dataset", {"file_path": flights, "max_tokens": max(budget, 300)}),
                ("profile_dataset", {"file_path": flights, "detail": "full", "max_tokens": max(budget, 300)}),
                ("execute_query", {"query": "SELECT * FROM data", "files": [flights], "max_tokens": budget}),
                (
                    "execute_query",
                    {"query": "SELECT * FROM data", "files": [flights], "return_format": "csv", "max_tokens": budget},
                ),
                (
                    "execute_query",
                    {
                        "query": "SELECT * FROM data",
                        "files": [flights],
                        "return_format": "summary",
                        "max_tokens": budget,
                    },
                ),
                ("get_result", {"query_id": qid, "offset": 3, "limit": 50, "max_tokens": budget}),
                ("context_optimizer", {"query": "SELECT * FROM data", "files": [flights], "max_tokens": budget}),
                ("stream_sample", {"file_path": flights, "sample_size": 100, "max_tokens": budget}),
                (
                    "stream_sample",
                    {
                        "file_path": flights,
                        "strategy": "stratified",
                        "stratify_column": "carrier",
                        "sample_size": 16,
                        "max_tokens": budget,
                    },
                ),
            ]
        # An export writes a folder once: one per transport.
        exports = [
            {"query_id": qid, "destination": "cuts_walk", "partition_by": "carrier", "filename": f"t{i}"}
            for i in (1, 2)
        ]
        exported = [
            (await admin.mcp_call("export_result", exports[0])),
            (await admin.rest_call("export_result", exports[1])),
        ]
        for args, (code, body) in zip(exports, exported, strict=True):
            walked.add("export_result")
            # Its pattern names every file: nothing is left out, so nothing is cut.
            assert code == OK and checked_cut("export_result", args, body) is None and body["files_total"] == 16, body
            listed = (await both_ok(admin, "list_datasets", {"files_under": body["output_path"]}))[1]
            assert len(listed["files"]) == 16 and checked_cut("list_datasets", {}, listed) is None
        for tool, args in calls:
            walked.add(tool)
            for body in await both_ok(admin, tool, args):
                cut = checked_cut(tool, args, body)
                if cut is not None and cut.get("next_call") is not None:
                    checked_cut(cut["next_call"]["tool"], args, await follow(admin, tool, args, cut))
        # The upload route (REST only) cuts nothing either.
        async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as rest:
            r = await rest.post(
                "/api/v1/datasets/upload",
                data={"name": "cuts_upload", "replace": "true"},
                files={"file": ("u.csv", io.BytesIO(b"a,b\n1,2\n"), "text/csv")},
            )
            assert r.status_code == 200, r.text
            assert not reports_a_cut(r.json()) and "cut" not in r.json()
    assert walked == set(TOOLS), set(TOOLS) - walked
    # A new datasets tool joins this walk: the list is the registry's.
    assert TOOLS == [
        "cache_invalidate",
        "cache_manager",
        "context_optimizer",
        "execute_query",
        "export_result",
        "get_result",
        "list_datasets",
        "profile_dataset",
        "register_dataset",
        "stream_sample",
    ]


async def test_a_cut_sample_pages_through_the_rest(server: RunningServer, flights: str) -> None:
    args = {"file_path": flights, "strategy": "random", "sample_size": 100, "seed": 7}
    async with callers(server) as (admin, _):
        whole = await admin.ok("stream_sample", {**args, "max_tokens": 20_000})
        assert len(whole["sample"]) == 100 and "cut" not in whole
        seen: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = (await both_ok(admin, "stream_sample", {**args, "offset": offset, "max_tokens": 1200}))[1]
            shown = len(page["sample"])
            assert 0 < shown and page["sampling_info"]["rows_sampled"] == shown
            seen += page["sample"]
            if "cut" not in page:
                assert page["truncated"] is False
                break
            assert page["truncated"] is True and page["cut"]["reason"] == "max_tokens 1200"
            assert page["cut"]["left_out"] == f"sampled rows {offset + shown + 1}-100 of 100"
            assert page["cut"]["next_call"] == {"tool": "stream_sample", "args": {"offset": offset + shown}}
            offset += shown
        assert seen == whole["sample"]


async def test_a_cut_stratified_sample_keeps_one_row_per_group_first(server: RunningServer, flights: str) -> None:
    args = {"file_path": flights, "strategy": "stratified", "stratify_column": "carrier", "sample_size": 16}
    async with callers(server) as (admin, _):
        for body in await both_ok(admin, "stream_sample", {**args, "max_tokens": 700}):
            shown = [row["carrier"] for row in body["sample"]]
            details = body["sampling_info"]["details"]
            assert 0 < len(shown) < 16 and len(set(shown)) == len(shown)  # one row per group first
            assert details["groups_represented"] == len(shown) and details["groups_total"] == 16
            assert details["allocation"] == dict.fromkeys(shown, 1)
            missing = [c for c in CARRIERS if c not in shown]
            # The groups left out are counted and named (the first of them).
            named = body["cut"]["left_out"].split(f"; {len(missing)} groups: ")[1].split(" (+")[0].split(", ")
            assert set(named) <= set(missing) and len(named) == min(8, len(missing)), body["cut"]
        whole = await admin.ok("stream_sample", {**args, "max_tokens": 20_000})
        assert {row["carrier"] for row in whole["sample"]} == set(CARRIERS)
        assert whole["sampling_info"]["details"]["groups_represented"] == 16


async def test_profile_names_the_columns_it_left_out(server: RunningServer, flights: str) -> None:
    async with callers(server) as (admin, _):
        whole = await admin.ok("profile_dataset", {"file_path": flights, "max_tokens": 20_000})
        assert "cut" not in whole and whole["truncated"] is False
        for body in await both_ok(admin, "profile_dataset", {"file_path": flights, "max_tokens": 350}):
            assert body["context_tokens_used"] <= 350 and body["truncated"] is True
            omitted = body["schema"].get("columns_omitted", 0)
            if omitted:
                assert f"columns {', '.join(COLUMNS[12 - omitted :][:8])}" in body["cut"]["left_out"], body["cut"]
            assert body["cut"]["next_call"] == {
                "tool": "profile_dataset",
                "args": {"max_tokens": whole["context_tokens_used"]},
            }
        # The columns argument brings back columns a cut left out, and only them.
        some = await admin.ok("profile_dataset", {"file_path": flights, "columns": ["tail", "note"]})
        assert [line.split(",", 1)[0] for line in some["schema"]["columns"]] == ["name", "tail", "note"]
        # The default reply meets the seed's budget of a profile (about 200-400 tokens).
        for body in await both_ok(admin, "profile_dataset", {"file_path": flights}):
            assert 200 <= body["context_tokens_used"] <= 400, body["context_tokens_used"]
            sent = count_tokens(json.dumps(body, ensure_ascii=False, separators=(",", ":")))
            assert sent - 1 <= body["context_tokens_used"] <= sent


async def test_a_partitioned_export_is_compact_whatever_its_files(server: RunningServer, flights: str) -> None:
    async with callers(server) as (admin, _):
        q = await admin.ok("execute_query", {"query": "SELECT * FROM data WHERE carrier < 'C07'", "files": [flights]})
        out = await admin.ok(
            "export_result",
            {"query_id": q["query_id"], "destination": "cuts_exports", "partition_by": "carrier", "overwrite": True},
        )
        assert out["files_total"] == 7 and out["files_created"] == [] and "files" not in out and "cut" not in out
        assert out["output_path"] == f"cuts_exports/{q['query_id']}.parquet"
        assert out["files_pattern"] == f"{out['output_path']}/carrier=*/*.parquet"
        text = json.dumps(out, separators=(",", ":"))
        # About half the reply with host paths and a cut (223 tokens); the query_id, named twice, is 26 of them.
        assert count_tokens(text) <= 130 and text.count("carrier=") == 1, (count_tokens(text), text)
        back = await admin.ok(
            "execute_query", {"query": "SELECT count(*) AS n FROM data", "files": [out["files_pattern"]]}
        )
        assert back["data"] == [{"n": q["rows_total"]}]
        # list_files names each file (relative, usable as a file_path), whole: no cut.
        listed = await admin.ok(
            "export_result",
            {
                "query_id": q["query_id"],
                "destination": "cuts_exports",
                "partition_by": "carrier",
                "filename": "each",
                "overwrite": True,
                "list_files": True,
            },
        )
        assert len(listed["files"]) == 7 and "cut" not in listed
        assert [f["path"] for f in listed["files"]] == listed["files_created"]
        assert all(p.startswith("cuts_exports/each/carrier=C0") for p in listed["files_created"])
        one = await admin.ok("profile_dataset", {"file_path": listed["files_created"][0]})
        assert one["format"] == "parquet" and one["statistics"]["row_count"] > 0
