"""A ticketing upstream unlike the demo: silent page-size caps, cursor and has_more pagination, an
`{"data": {"items": [...]}}` envelope, string ids, hyphenated and nested keys, epoch times, 503s.
Nothing may be lost, every key must be queryable, and wrong-looking questions get a warning."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.support.analysis import analysis_settings
from tests.support.server import RunningServer, free_port
from tests.support.tickets_upstream import (
    BASE_TIME,
    DAY,
    N_AGENTS,
    N_TICKETS,
    REGISTRY,
    TOKEN,
    TicketsState,
    comment_count,
    create_tickets_app,
)

AID = "helpdesk-audit"
N_COMMENTS = sum(comment_count(i) for i in range(1, N_TICKETS + 1))


@dataclass
class Tickets:
    """The running upstream, its state and its registry file."""

    url: str
    state: TicketsState
    registry: Path


@pytest.fixture(scope="module")
def tickets_server() -> Iterator[Tickets]:
    app, state = create_tickets_app()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, log_level="warning"))
    thread = threading.Thread(target=server.run, name="tickets-upstream", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the tickets upstream did not start"
        time.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    registry = Path(tempfile.mkdtemp(prefix="cairn-tickets-")) / "upstreams.yaml"
    registry.write_text(REGISTRY.format(base=url))
    try:
        yield Tickets(url=url, state=state, registry=registry)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def tickets(tickets_server: Tickets, server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Tickets:
    tickets_server.state.reset()
    tickets_server.registry.write_text(REGISTRY.format(base=tickets_server.url))
    analysis_settings(server, monkeypatch, upstreams=tickets_server.registry)
    monkeypatch.setenv("CAIRN_TEST_TICKETS_TOKEN", TOKEN)
    return tickets_server


async def _call(rest: httpx.AsyncClient, op: str, **body: Any) -> dict[str, Any]:
    r = await rest.post(f"/api/v1/analysis/{op}", json={"analysis_id": AID, **body})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


async def _fresh(rest: httpx.AsyncClient) -> None:
    await rest.post("/api/v1/analysis/clear", json={"analysis_id": AID})


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")


async def test_capped_pages_lose_nothing_and_are_reported(
    server: RunningServer, rest: httpx.AsyncClient, tickets: Tickets
) -> None:
    await _fresh(rest)
    tickets.state.flaky_every = 9  # every 9th GET answers 503 once: retried, nothing skipped
    top = await _call(rest, "ingest", model="ticket", ingest_all=True, per_page=50)
    assert top["stored"] == N_TICKETS and top["complete"] is True and top["error"] is None
    assert top["page_size"] == 15 and "at most 15 records per page (asked for 50)" in top["message"]

    first = await _call(rest, "ingest", parent_model="ticket", child_resource="comments", per_page=50)
    assert first["parents_processed"] == 25 and first["parents_remaining"] == N_TICKETS - 25
    second = await _call(rest, "ingest", parent_model="ticket", child_resource="comments", per_page=50, resume=True)
    assert second["complete"] is True and second["warnings"] is None
    assert second["session_records"] == N_COMMENTS  # every comment of every ticket, 5 per page
    stored = await _call(rest, "query", mode="aggregate", model="ticket_comment", group_by="ticket_id", limit=200)
    per_ticket = {g["value"]: g["count"] for g in stored["groups"]}
    assert per_ticket == {f"TCK-{i:03d}": comment_count(i) for i in range(1, N_TICKETS + 1) if comment_count(i)}

    tickets.state.flaky_every = 0
    agents = await _call(rest, "ingest", model="agent", ingest_all=True, per_page=50)
    assert agents["stored"] == N_AGENTS and agents["complete"] is True
    # has_more said when to stop: no request for an empty page after the last one.
    assert tickets.state.requests["/v2/agents"] == -(-N_AGENTS // 4)


async def test_parent_ids_fetch_exactly_those_parents(
    server: RunningServer, rest: httpx.AsyncClient, tickets: Tickets
) -> None:
    await _fresh(rest)
    out = await _call(
        rest, "ingest", parent_model="ticket", child_resource="comments", parent_ids=["TCK-005", "TCK-011", "TCK-005"]
    )
    assert out["parents_processed"] == 2 and out["complete"] is True
    assert out["stored"] == comment_count(5) + comment_count(11)
    many = await rest.post(
        "/api/v1/analysis/ingest",
        json={
            "analysis_id": AID,
            "parent_model": "ticket",
            "child_resource": "comments",
            "parent_ids": [f"TCK-{i:03d}" for i in range(1, 27)],
        },
    )
    assert many.status_code == 400 and many.json()["error"]["code"] == 4001
    assert "parent_ids" in many.json()["error"]["message"]
    missing = await _call(rest, "ingest", parent_model="ticket", child_resource="comments", parent_ids=["TCK-999"])
    assert missing["parents_processed"] == 0 and "TCK-999" in missing["error"]


async def test_every_key_is_queryable_and_epochs_compare_as_dates(
    server: RunningServer, rest: httpx.AsyncClient, tickets: Tickets
) -> None:
    await _fresh(rest)
    top = await _call(rest, "ingest", model="ticket", ingest_all=True, per_page=50)
    assert top["renamed"]["custom_fields.sla-tier"] == "custom_fields_sla_tier"
    assert top["renamed"]["custom_fields.team name"] == "team"
    assert "requester.org.tier" not in top["renamed"]  # plain flattening: requester_org_tier

    tiers = await _call(rest, "query", mode="aggregate", group_by="custom_fields_sla_tier")
    assert {g["value"]: g["count"] for g in tiers["groups"]} == {
        t: sum(1 for i in range(1, N_TICKETS + 1) if ("gold", "silver", "bronze")[i % 3] == t)
        for t in ("gold", "silver", "bronze")
    }
    assert tiers["warnings"] is None
    orgs = await _call(rest, "query", mode="aggregate", group_by="requester_org_tier")
    assert sum(g["count"] for g in orgs["groups"]) == N_TICKETS
    teams = await _call(rest, "query", mode="filter", where={"team": "team 1"}, limit=200)
    assert teams["total"] == N_TICKETS // 2

    cutoff = BASE_TIME + 20 * DAY  # ticket i was created at BASE_TIME + i days
    later = await _call(rest, "query", mode="filter", where={"created": {"$gte": _iso(cutoff)[:10]}}, limit=200)
    assert later["total"] == N_TICKETS - 19 and later["warnings"] is None
    assert all(r["created"].endswith("Z") for r in later["rows"])
    updated = await _call(rest, "query", mode="filter", where={"updated_ms": {"$lt": _iso(BASE_TIME + 3 * DAY)}})
    assert updated["total"] == 2
    near = await _call(
        rest,
        "query",
        mode="sample",
        sample_size=50,
        proximity={"field": "created", "origin": _iso(cutoff), "window": "3 days"},
    )
    assert near["total"] == 7 and near["warnings"] is None

    described = (await _call(rest, "query", mode="describe"))["text"]
    assert f"ticket: {N_TICKETS} records\n" in described  # all of them, not a sample
    assert "| custom_fields_sla_tier | string | values: " in described
    assert "| created | datetime |" in described


async def test_warnings_for_questions_that_cannot_match(
    server: RunningServer, rest: httpx.AsyncClient, tickets: Tickets
) -> None:
    await _fresh(rest)
    out = await _call(rest, "ingest", model="ticket", ingest_all=True, per_page=50, fields=["subject", "stauts"])
    assert out["warnings"] and "stauts" in out["warnings"][0] and "subject" in out["warnings"][0]

    await _fresh(rest)
    tickets.registry.write_text(REGISTRY.format(base=tickets.url).replace("format: epoch_seconds, ", ""))
    await _call(rest, "ingest", model="ticket", ingest_all=True, per_page=50)
    epoch = await _call(rest, "query", mode="filter", where={"created": {"$gte": "2025-03-10"}})
    assert epoch["total"] == 0 and "holds no ISO dates" in epoch["warnings"][0]
    assert "format epoch_seconds" in epoch["warnings"][0]
    typo = await _call(rest, "query", mode="filter", where={"stauts": "open"})
    assert typo["total"] == 0 and "no ticket record has a field 'stauts'" in typo["warnings"][0]
    as_text = await _call(rest, "query", mode="filter", where={"priority": "2"})
    assert as_text["total"] == 0 and "holds no string values" in as_text["warnings"][0]
    numeric = await _call(rest, "query", mode="filter", where={"subject": {"$gt": 3}})
    assert "holds no numbers" in numeric["warnings"][0]
    grouped = await _call(rest, "query", mode="aggregate", group_by="stauts")
    assert "group_by" in grouped["warnings"][0]
    dry = await _call(
        rest, "act", model="ticket", action="update", attributes={"status": "open"}, where={"stauts": 1}, dry_run=True
    )
    assert dry["matched_count"] == 0 and "no ticket record has a field 'stauts'" in dry["warnings"][0]
    fine = await _call(rest, "query", mode="filter", where={"status": "open"})
    assert fine["total"] > 0 and fine["warnings"] is None


async def test_act_on_a_hanging_upstream_ends_by_its_deadline_with_a_true_copy(
    server: RunningServer, rest: httpx.AsyncClient, tickets: Tickets
) -> None:
    await _fresh(rest)
    await _call(rest, "ingest", model="ticket", ingest_all=True, per_page=50)
    tickets.state.hang_after, tickets.state.hang_seconds = 12, 10.0  # 12 PATCHes go through, then none
    started = time.monotonic()
    out = await _call(
        rest,
        "act",
        model="ticket",
        action="update",
        attributes={"status": "solved"},
        deadline_seconds=4,
        record_seconds=2,
    )
    elapsed = time.monotonic() - started
    assert elapsed < 8, elapsed  # not 28 records x the upstream timeout x attempts
    s = out["summary"]
    assert s["deadline_reached"] is True and s["total"] == N_TICKETS
    assert s["total"] == s["succeeded"] + s["failed"] + s["unknown"] + s["not_attempted"]
    upstream = tickets.state.data["tickets"]
    accepted = {tid for tid, t in upstream.items() if t["status"] == "solved"}
    was_solved = {f"TCK-{i:03d}" for i in range(1, N_TICKETS + 1) if i % 3 == 2}
    assert tickets.state.accepted == 12 and s["succeeded"] == 12
    copy = await _call(rest, "query", mode="filter", where={"status": "solved"}, limit=200)
    assert {r["id"] for r in copy["rows"]} == accepted | was_solved  # Cairn's copy is the upstream's

    tickets.state.hang_after = None
    await _call(rest, "ingest", parent_model="ticket", child_resource="comments", parent_ids=["TCK-005"])
    child = await _call(
        rest, "act", model="ticket_comment", action="update", attributes={"public": False}, where={"public": True}
    )
    assert child["summary"]["succeeded"] == (comment_count(5) + 1) // 2
    assert not any(c["public"] for c in tickets.state.data["comments"].values() if c["id"].startswith("CMT-005"))
    left = await _call(rest, "query", mode="filter", model="ticket_comment", where={"public": True})
    assert left["total"] == 0
