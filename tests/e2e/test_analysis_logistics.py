"""Issue 39's analysis findings against a hand-written logistics upstream (offset paging capped silently
at 40, an envelope, hyphenated and spaced keys, epoch times, events paged by `has_more`, 409/422/500
faults), each checked through MCP and REST: progress and pages left reckoned at the page size the
upstream sends; a nested reply that counts the parents it listed; describe with short values and
examples from the data; a case-mismatch hint; act runs recorded whatever the transport (MCP, REST,
console) and read back by a tool and the console; and every reply cut to a tiny budget naming what it
cut, why and how to get it."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client.session import ClientSession

from tests.support.analysis import analysis_settings, structured
from tests.support.console import signed_in
from tests.support.logistics_upstream import (
    BROKEN,
    CARRIERS,
    FAILING_EVENTS,
    LONG_NOTE,
    N_SHIPMENTS,
    REGISTRY,
    SHIPMENT_CAP,
    LogisticsState,
    create_logistics_app,
    event_count,
    make_shipments,
    shipment_id,
)
from tests.support.server import ADMIN_KEY, WRITE_KEY, RunningServer, free_port, mcp_client, serve_app

pytestmark = pytest.mark.slow  # a real upstream and server, several hundred records per scenario

REST_PATHS = {
    "analysis_ingest": ("POST", "/api/v1/analysis/ingest"),
    "analysis_store": ("POST", "/api/v1/analysis/store"),
    "analysis_query": ("POST", "/api/v1/analysis/query"),
    "analysis_act": ("POST", "/api/v1/analysis/act"),
    "analysis_clear": ("POST", "/api/v1/analysis/clear"),
    "analysis_sessions": ("GET", "/api/v1/analysis/sessions"),
    "analysis_session": ("GET", "/api/v1/analysis/sessions/{analysis_id}"),
    "analysis_act_runs": ("GET", "/api/v1/analysis/act-runs"),
}


@dataclass
class Logistics:
    url: str
    state: LogisticsState
    registry: Path


@pytest.fixture(scope="module")
def logistics_server() -> Iterator[Logistics]:
    app, state = create_logistics_app()
    port = free_port()
    server, thread = serve_app(app, port, "logistics")
    url = f"http://127.0.0.1:{port}"
    registry = Path(tempfile.mkdtemp(prefix="cairn-logistics-")) / "upstreams.yaml"
    registry.write_text(REGISTRY.format(base=url))
    try:
        yield Logistics(url, state, registry)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def logistics(logistics_server: Logistics, server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Logistics:
    logistics_server.state.shipments = make_shipments()
    logistics_server.state.patches.clear()
    analysis_settings(server, monkeypatch, upstreams=logistics_server.registry)
    return logistics_server


class Caller:
    """Calls an analysis tool through one transport and returns its reply."""

    def __init__(self, mcp: ClientSession | None = None, rest: httpx.AsyncClient | None = None) -> None:
        self.mcp, self.rest = mcp, rest
        self.name = "mcp" if mcp is not None else "rest"

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        if self.mcp is not None:
            return structured(await self.mcp.call_tool(tool, args))
        assert self.rest is not None
        method, path = REST_PATHS[tool]
        if "{analysis_id}" in path:
            path = path.replace("{analysis_id}", args.pop("analysis_id"))
        if method == "GET":
            r = await self.rest.get(path, params=args)
        else:
            r = await self.rest.post(path, json=args)
        assert r.status_code == 200, (tool, r.text)
        out: dict[str, Any] = r.json()
        return out


@pytest.fixture(params=["mcp", "rest"])
def via(request: pytest.FixtureRequest) -> str:
    """The same scenario through MCP and through REST."""
    return str(request.param)


@asynccontextmanager
async def opened(via: str, server: RunningServer, rest: httpx.AsyncClient) -> AsyncIterator[Caller]:
    """A caller through `via` (an MCP session opened and closed in the test's own task)."""
    if via == "rest":
        yield Caller(rest=rest)
        return
    async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
        yield Caller(mcp=mcp)


async def test_progress_and_pages_left_follow_the_page_size_the_upstream_sends(
    server: RunningServer, rest: httpx.AsyncClient, logistics: Logistics
) -> None:
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    pages = -(-N_SHIPMENTS // SHIPMENT_CAP)
    async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
        args = {"analysis_id": "progress-mcp", "model": "shipment", "ingest_all": True, "per_page": 50}
        out = structured(await mcp.call_tool("analysis_ingest", args, progress_callback=on_progress))
    assert out["stored"] == N_SHIPMENTS and out["complete"] and out["pages"] == pages
    assert out["page_size"] == SHIPMENT_CAP and out["total_available"] == N_SHIPMENTS
    assert len(seen) == pages and seen[-1] == (pages, pages), seen
    assert all(total is not None and done <= total for done, total in seen), seen

    one = await Caller(rest=rest)("analysis_ingest", analysis_id="progress-rest", model="shipment", per_page=50)
    left = -(-(N_SHIPMENTS - SHIPMENT_CAP) // SHIPMENT_CAP)
    assert one["stored"] == SHIPMENT_CAP and one["pages_remaining"] == left and one["next_page"] == 2
    assert f"{left} page(s) left at {SHIPMENT_CAP} records per page" in one["message"]


async def test_a_nested_reply_counts_the_parents_it_listed(
    via: str, server: RunningServer, rest: httpx.AsyncClient, logistics: Logistics
) -> None:
    async with opened(via, server, rest) as call:
        aid = f"nested-{call.name}"
        parents = [shipment_id(1), FAILING_EVENTS, shipment_id(4)]
        out = await call(
            "analysis_ingest", analysis_id=aid, parent_model="shipment", child_resource="events", parent_ids=parents
        )
        assert out["stored"] == event_count(1) + event_count(4)  # every page, paged by has_more alone
        assert (out["parents_processed"], out["parents_failed"], out["failed_parents"]) == (2, 1, [FAILING_EVENTS])
        assert "for 2 of 3 shipment parent(s)" in out["message"] and FAILING_EVENTS in out["message"]
        events = await call(
            "analysis_query", analysis_id=aid, mode="filter", where={"shipment_id": shipment_id(4)}, limit=50
        )
        assert events["total"] == event_count(4) and all(r["at"].endswith("Z") for r in events["rows"])


async def test_describe_shows_short_values_and_examples_from_the_data(
    via: str, server: RunningServer, rest: httpx.AsyncClient, logistics: Logistics
) -> None:
    async with opened(via, server, rest) as call:
        aid = f"describe-{call.name}"
        await call("analysis_ingest", analysis_id=aid, model="shipment", ingest_all=True, per_page=50)
        text = (await call("analysis_query", analysis_id=aid, mode="describe"))["text"]
        (handling,) = [line for line in text.splitlines() if line.startswith("| handling |")]
        values = handling.split("values: ")[1].rstrip(" |").split(", ")
        assert LONG_NOTE not in text and all(len(v) <= 40 for v in values), handling
        assert "Values longer than 40 characters are shortened (…) above, of handling" in text
        origin = re.search(r'"proximity": \{"field": "created_at", "origin": "([0-9-]+)"', text)
        assert origin is not None and "2025-04-01" <= origin.group(1) <= "2025-07-30", text
        example = re.search(r'filter: \{"where": (\{.*?\}\})', text)
        assert example is not None and "<value>" not in text
        where = json.loads(example.group(1))
        found = await call("analysis_query", analysis_id=aid, mode="filter", where=where)
        assert found["total"] > 0  # the example matches records of the data


async def test_an_exact_filter_in_another_case_says_so(
    via: str, server: RunningServer, rest: httpx.AsyncClient, logistics: Logistics
) -> None:
    async with opened(via, server, rest) as call:
        aid = f"case-{call.name}"
        await call("analysis_ingest", analysis_id=aid, model="shipment", ingest_all=True, per_page=50)
        lost = sum(1 for i in range(1, N_SHIPMENTS + 1) if i % 7 == 0)
        out = await call("analysis_query", analysis_id=aid, mode="filter", where={"delivery_status": "Lost"})
        assert out["total"] == 0 and out["warnings"] == [
            f'where.delivery_status: no shipment record has "Lost" exactly, but "lost" ({lost} record(s)) differ only '
            "in case (exact values match case-sensitively): use the stored spelling"
        ]
        fine = await call("analysis_query", analysis_id=aid, mode="filter", where={"delivery_status": "lost"})
        assert fine["total"] == lost and fine["warnings"] is None


def _nordpost_failures() -> set[str]:
    return {
        shipment_id(i)
        for i in range(1, N_SHIPMENTS + 1)
        if CARRIERS[i % 3] == "Nordpost" and (i % 10 == 0 or shipment_id(i) == BROKEN)
    }


async def test_act_runs_are_recorded_whatever_the_transport(
    server: RunningServer, rest: httpx.AsyncClient, logistics: Logistics
) -> None:
    aid = "act-runs"
    by_rest = Caller(rest=rest)
    await by_rest("analysis_ingest", analysis_id=aid, model="shipment", ingest_all=True, per_page=50)
    async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
        live = await Caller(mcp=mcp)(
            "analysis_act",
            analysis_id=aid,
            model="shipment",
            action="update",
            where={"carrier_name": "Nordpost"},
            attributes={"delivery_status": "returned"},
        )
    assert live["summary"]["failed"] == len(_nordpost_failures()) and live["run_id"] is not None
    assert {e["status_code"] for e in live["sample_errors"]} == {409, 500}
    assert live["cut"]["left_out"] == f"{len(_nordpost_failures()) - 5} more failed record(s) after the first 5"
    assert live["cut"]["next_call"] == {
        "tool": "analysis_act_runs",
        "args": {"analysis_id": aid, "run_id": live["run_id"], "limit": 100},
    }
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {WRITE_KEY}"}) as writer:
        refused = await Caller(rest=writer)(
            "analysis_act",
            analysis_id=aid,
            model="shipment",
            action="update",
            where={"carrier_name": "Kite-Air"},
            attributes={"delivery_status": "misplaced"},
        )
    kite = sum(1 for i in range(1, N_SHIPMENTS + 1) if CARRIERS[i % 3] == "Kite-Air")
    assert refused["summary"]["failed"] == kite and refused["summary"]["succeeded"] == 0
    async with signed_in(server.url, ADMIN_KEY) as console:
        posted = await console.post(
            f"/ui/analysis/sessions/{aid}/act",
            {
                "model": "shipment",
                "action": "update",
                "where": '{"id": "SHP-0001"}',
                "attributes": '{"delivery_status": "delivered"}',
            },
        )
        assert posted.status_code == 200 and "Recorded as act run" in posted.text

        for caller in (by_rest, None):
            if caller is None:
                async with mcp_client(server.url, key=ADMIN_KEY) as mcp:
                    runs = await Caller(mcp=mcp)("analysis_act_runs", analysis_id=aid)
            else:
                runs = await caller("analysis_act_runs", analysis_id=aid)
            assert runs["total"] == 3 and [r["transport"] for r in runs["runs"]] == ["console", "rest", "mcp"]
            console_run, rest_run, mcp_run = runs["runs"]
            assert rest_run["key_id"] != mcp_run["key_id"] == console_run["key_id"]  # the writer's key, the admin's
            assert mcp_run["key_id"].startswith("static:") and mcp_run["key_name"] == "static"
            assert (mcp_run["action"], mcp_run["where"], mcp_run["attributes"]) == (
                "update",
                {"carrier_name": "Nordpost"},
                {"delivery_status": "returned"},
            )
            assert set(mcp_run["failed_ids"]) == _nordpost_failures() and mcp_run["state"] == "finished"
            assert rest_run["failed_ids_total"] == kite and len(rest_run["failed_ids"]) == 20
            assert len(rest_run["errors"]) == 5 and {e["status_code"] for e in rest_run["errors"]} == {422}
            assert (console_run["total"], console_run["succeeded"]) == (1, 1)
            assert runs["cut"]["next_call"] == {
                "tool": "analysis_act_runs",
                "args": {"run_id": rest_run["run_id"], "offset": 0},
            }

        every: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = await by_rest(
                "analysis_act_runs", analysis_id=aid, run_id=rest_run["run_id"], limit=25, offset=offset
            )
            every += page["runs"][0]["failed_ids"]
            offset = page["next_offset"]
        assert len(every) == kite == len(set(every))

        html = await console.page(f"/ui/analysis/sessions/{aid}")
        assert 'id="act-runs-table"' in html and all(f">{r['run_id']}</a>" in html for r in runs["runs"])
        run_page = await console.page(f"/ui/analysis/sessions/{aid}/act-runs/{mcp_run['run_id']}")
        assert all(rid in run_page for rid in _nordpost_failures()) and "over mcp" in run_page


def _flags(node: Any, path: str = "") -> list[str]:
    """Where a reply says it left something out: `truncated: true`, a `*_omitted` count, a value marked …
    (a cut's own text aside)."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "cut":
                continue
            if (key == "truncated" and value is True) or (key.endswith("_omitted") and value):
                found.append(f"{path}.{key}")
            found += _flags(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _flags(value, f"{path}[{i}]")
    elif isinstance(node, str) and "…" in node:
        found.append(path)
    return found


def _named(tool: str, reply: dict[str, Any]) -> dict[str, Any] | None:
    """A reply that left something out names what (`left_out`), why (`reason`) and how (a `next_call` of
    an analysis tool, or a `how` sentence); its cut, if any, checked alike."""
    flags = _flags(reply)
    if flags and reply.get("mode") == "describe":  # describe's text says it itself
        assert "characters are shortened (…) above, of " in reply["text"], (tool, reply["text"])
        return None
    cut = reply.get("cut")
    assert cut or not flags, (tool, flags, reply)
    if cut is None:
        return None
    assert cut["reason"] and cut["left_out"] and (cut.get("next_call") or cut.get("how")), (tool, cut)
    assert set(cut) <= {"reason", "left_out", "next_call", "how"}, (tool, cut)
    if cut.get("next_call"):
        assert cut["next_call"]["tool"] in REST_PATHS and isinstance(cut["next_call"]["args"], dict), (tool, cut)
    return cut  # type: ignore[no-any-return]


async def test_every_cut_names_what_why_and_how(
    via: str,
    server: RunningServer,
    rest: httpx.AsyncClient,
    logistics: Logistics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with opened(via, server, rest) as call:
        analysis_settings(server, monkeypatch, upstreams=logistics.registry, max_response_tokens=200)
        aid = f"cuts-{call.name}"
        replies: dict[str, dict[str, Any]] = {}
        followed: dict[str, dict[str, Any]] = {}

        async def ask(label: str, tool: str, **args: Any) -> dict[str, Any]:
            reply = await call(tool, analysis_id=aid, **args) if tool != "analysis_sessions" else await call(tool)
            cut = _named(label, reply)
            replies[label] = reply
            if cut and cut.get("next_call"):  # the next call is made, and answers (its own cuts named alike)
                nxt = cut["next_call"]
                same = {"analysis_id": aid, **args, **nxt["args"]} if nxt["tool"] == tool else dict(nxt["args"])
                followed[label] = await call(nxt["tool"], **same)
                _named(f"{label} (next call)", followed[label])
            return reply

        await ask("ingest", "analysis_ingest", model="shipment", ingest_all=True, per_page=50)
        findings = [
            {"finding": f"finding {n}: fragile parcels " + "delayed again " * 150, "category": "delay"}
            for n in range(12)
        ]
        await ask("store", "analysis_store", findings=findings)
        await ask("describe", "analysis_query", mode="describe")
        await ask("semantic", "analysis_query", mode="semantic", query="fragile parcels delayed", threshold=0.0)
        await ask("aggregate", "analysis_query", mode="aggregate", group_by="weight_kg")
        await ask("filter", "analysis_query", mode="filter", where={"handling": LONG_NOTE}, limit=50)
        await ask("sample", "analysis_query", mode="sample", sample_size=50, stratify_by="carrier_name")
        await ask(
            "dry run",
            "analysis_act",
            model="shipment",
            action="update",
            attributes={"delivery_status": "lost"},
            where={"handling": LONG_NOTE},
            dry_run=True,
        )
        await ask(
            "act",
            "analysis_act",
            model="shipment",
            action="update",
            attributes={"delivery_status": "returned"},
            where={"carrier_name": "Blue Freight"},
        )
        await ask("act runs", "analysis_act_runs")
        await ask("sessions", "analysis_sessions")
        await ask("session", "analysis_session")
        # The budget did cut: rows, groups, hits, sample rows and long values, each named with the way on.
        filtered = replies["filter"]
        assert filtered["cut"]["next_call"] == {"tool": "analysis_query", "args": {"offset": len(filtered["rows"])}}
        assert "(CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS)" in filtered["cut"]["reason"]
        assert "values of handling" in filtered["cut"]["left_out"] and "group_by 'handling'" in filtered["cut"]["how"]
        after = followed["filter"]  # the next call brings the records after those shown
        assert after["total"] == filtered["total"] and after["rows"][0]["id"] not in {r["id"] for r in filtered["rows"]}
        groups = replies["aggregate"]
        assert groups["cut"]["next_call"] == {"tool": "analysis_query", "args": {"offset": len(groups["groups"])}}
        assert followed["aggregate"]["groups"][0]["value"] not in {g["value"] for g in groups["groups"]}
        assert replies["semantic"]["truncated"] and "category" in replies["semantic"]["cut"]["how"]
        sample = replies["sample"]
        assert sample["truncated"] and "one per stratum is kept first" in sample["cut"]["left_out"]
        assert "sample_size" in sample["cut"]["how"] and "next_call" not in sample["cut"]
        assert len({r["carrier_name"] for r in sample["rows"]}) == min(len(sample["rows"]), len(CARRIERS))
        if "dry run" in followed:  # sample_data was cut to the budget: the filter pages through every match
            assert followed["dry run"]["mode"] == "filter"
            assert followed["dry run"]["total"] == replies["dry run"]["matched_count"]
        assert replies["session"]["cut"] is not None and "semantic" in replies["session"]["cut"]["how"]
        await ask("clear", "analysis_clear")
