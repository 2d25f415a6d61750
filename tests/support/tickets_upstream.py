"""A second upstream for the analysis tests, shaped like real ticketing APIs rather than the demo.

- `GET /v2/tickets?cursor=&limit=`: cursor pagination, the cursor at `meta.next_cursor`, the items at
  `data.items`; the limit is capped at `TICKET_CAP` without a word.
- `GET /v2/tickets/{id}/comments?page=&per_page=`: page pagination with no total and no next link; the
  page size is capped at `COMMENT_CAP` without a word.
- `GET /v2/agents?page=&per_page=`: page pagination that says `meta.has_more`; capped at `AGENT_CAP`.
- Records have string ids, hyphenated and spaced keys, objects two levels deep and epoch times
  (`created`: seconds, `updated_ms`: milliseconds).
- `PATCH /v2/tickets/{id}` (`{"ticket": {...}}`) and `PATCH /v2/comments/{id}` (`{"comment": {...}}`)
  apply at once; after `hang_after` accepted PATCHes, the next ones hang for `hang_seconds` without
  applying. Every `flaky_every`-th GET of a URL not yet refused answers 503 (its retry gets through).
- `/__control/state` (GET: the records and counters; POST: set `hang_after`, `hang_seconds`,
  `flaky_every`), `/__control/reset`.
"""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOKEN = "tickets-upstream-secret"
N_TICKETS = 40
TICKET_CAP, COMMENT_CAP, AGENT_CAP = 15, 5, 4
N_AGENTS = 10
BASE_TIME = int(datetime(2025, 3, 1, tzinfo=UTC).timestamp())
DAY = 86_400
TIERS = ("gold", "silver", "bronze")
STATUSES = ("open", "pending", "solved")


def comment_count(i: int) -> int:
    """Comments of ticket i: 0 to 11, 226 in all over the 40 tickets."""
    return (i * 7) % 12


def make_data() -> dict[str, Any]:
    """The seeded records."""
    tickets: dict[str, dict[str, Any]] = {}
    comments: dict[str, dict[str, Any]] = {}
    for i in range(1, N_TICKETS + 1):
        tid = f"TCK-{i:03d}"
        created = BASE_TIME + i * DAY
        tickets[tid] = {
            "id": tid,
            "subject": f"Ticket number {i}",
            "status": STATUSES[i % 3],
            "priority": i % 4,
            "created": created,
            "updated_ms": (created + 3600) * 1000,
            "custom_fields": {"sla-tier": TIERS[i % 3], "team name": f"team {i % 2}"},
            "requester": {"name": f"Requester {i}", "org": {"name": f"Org {i % 5}", "tier": TIERS[i % 2]}},
        }
        for j in range(comment_count(i)):
            cid = f"CMT-{i:03d}-{j:02d}"
            comments[cid] = {
                "id": cid,
                "ticket": tid,
                "body": f"comment {j} on {tid}",
                "public": j % 2 == 0,
                "created": created + (j + 1) * 600,
            }
    agents = [{"id": f"AG-{k}", "name": f"Agent {k}", "on-call": k % 2 == 0} for k in range(1, N_AGENTS + 1)]
    return {"tickets": tickets, "comments": comments, "agents": agents}


class TicketsState:
    """What the upstream holds and how it misbehaves."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to the seeded data, no faults."""
        self.data = make_data()
        self.hang_after: int | None = None
        self.hang_seconds = 0.0
        self.flaky_every = 0
        self.failed_once: set[str] = set()
        self.accepted = 0
        self.requests: Counter[str] = Counter()
        self.gets = 0


def create_tickets_app() -> tuple[Starlette, TicketsState]:
    """The upstream application and its state."""
    state = TicketsState()

    def _authorized(request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {TOKEN}"

    def _int(request: Request, name: str, default: int) -> int:
        try:
            return max(0, int(request.query_params.get(name, default)))
        except ValueError:
            return default

    async def _guard(request: Request) -> Response | None:
        state.requests[request.url.path] += 1
        if not _authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        if request.method == "GET" and str(request.url) not in state.failed_once:
            state.gets += 1
            if state.flaky_every and state.gets % state.flaky_every == 0:
                state.failed_once.add(str(request.url))  # its retry gets through
                return JSONResponse({"error": "try again"}, status_code=503)
        return None

    async def tickets(request: Request) -> Response:
        if (refused := await _guard(request)) is not None:
            return refused
        limit = min(_int(request, "limit", 10) or 10, TICKET_CAP)
        start = int(request.query_params.get("cursor", "c0")[1:] or 0)
        rows = list(state.data["tickets"].values())
        page = rows[start : start + limit]
        more = start + limit < len(rows)
        return JSONResponse({"data": {"items": page}, "meta": {"next_cursor": f"c{start + limit}" if more else None}})

    async def ticket_comments(request: Request) -> Response:
        if (refused := await _guard(request)) is not None:
            return refused
        tid = request.path_params["tid"]
        if tid not in state.data["tickets"]:
            return JSONResponse({"error": "no such ticket"}, status_code=404)
        size = min(_int(request, "per_page", 20) or 20, COMMENT_CAP)
        page = max(1, _int(request, "page", 1))
        rows = [
            {k: v for k, v in c.items() if k != "ticket"} for c in state.data["comments"].values() if c["ticket"] == tid
        ]
        return JSONResponse({"data": {"items": rows[(page - 1) * size : page * size]}})

    async def agents(request: Request) -> Response:
        if (refused := await _guard(request)) is not None:
            return refused
        size = min(_int(request, "per_page", 20) or 20, AGENT_CAP)
        page = max(1, _int(request, "page", 1))
        rows = state.data["agents"]
        return JSONResponse(
            {"data": {"items": rows[(page - 1) * size : page * size]}, "meta": {"has_more": page * size < len(rows)}}
        )

    async def _patch(request: Request, table: str, key: str, rid: str) -> Response:
        if (refused := await _guard(request)) is not None:
            return refused
        record = state.data[table].get(rid)
        if record is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        body = await request.json()
        changes = body.get(key) if isinstance(body, dict) else None
        if not isinstance(changes, dict):
            return JSONResponse({"error": f"send {{'{key}': {{...}}}}"}, status_code=422)
        if state.hang_after is not None and state.accepted >= state.hang_after:
            await asyncio.sleep(state.hang_seconds)
            return JSONResponse({"error": "gave up"}, status_code=504)
        record.update(changes)
        state.accepted += 1
        return JSONResponse({key: record})

    async def patch_ticket(request: Request) -> Response:
        return await _patch(request, "tickets", "ticket", request.path_params["tid"])

    async def patch_comment(request: Request) -> Response:
        return await _patch(request, "comments", "comment", request.path_params["cid"])

    async def control_state(request: Request) -> Response:
        if request.method == "POST":
            body = await request.json()
            state.hang_after = body.get("hang_after", state.hang_after)
            state.hang_seconds = float(body.get("hang_seconds", state.hang_seconds))
            state.flaky_every = int(body.get("flaky_every", state.flaky_every))
        return JSONResponse(
            {
                "tickets": copy.deepcopy(state.data["tickets"]),
                "comments": copy.deepcopy(state.data["comments"]),
                "accepted": state.accepted,
                "requests": dict(state.requests),
            }
        )

    async def control_reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"ok": True})

    app = Starlette(
        routes=[
            Route("/v2/tickets", tickets),
            Route("/v2/tickets/{tid}/comments", ticket_comments),
            Route("/v2/tickets/{tid}", patch_ticket, methods=["PATCH"]),
            Route("/v2/comments/{cid}", patch_comment, methods=["PATCH"]),
            Route("/v2/agents", agents),
            Route("/__control/state", control_state, methods=["GET", "POST"]),
            Route("/__control/reset", control_reset, methods=["POST"]),
        ]
    )
    return app, state


REGISTRY = """
upstreams:
  helpdesk:
    base_url: {base}/v2
    timeout_seconds: 2
    max_retries: 2
    backoff_seconds: 0.02
    auth: {{header: Authorization, scheme: Bearer, value_env: CAIRN_TEST_TICKETS_TOKEN}}
    models:
      ticket:
        list_path: /tickets
        items_path: data.items
        pagination: {{style: cursor, cursor_param: cursor, per_page_param: limit, next_path: meta.next_cursor,
                      total_path: null}}
        flatten_depth: 2
        rename: {{"custom_fields.team name": team}}
        attributes:
          created: {{type: datetime, format: epoch_seconds, description: Opened}}
          updated_ms: {{type: datetime, format: epoch_millis}}
        writable: true
        writable_attributes: [status, priority]
        update: {{method: PATCH, path: "/tickets/{{id}}", body_key: ticket}}
        children:
          comments:
            model: ticket_comment
            path: "/tickets/{{parent_id}}/comments"
            items_path: data.items
            parent_key: ticket_id
            max_pages_per_parent: 50
            pagination: {{style: page, total_path: null}}
            writable: true
            writable_attributes: [public]
            update: {{method: PATCH, path: "/comments/{{id}}", body_key: comment}}
            attributes:
              created: {{type: datetime, format: epoch_seconds}}
      agent:
        list_path: /agents
        items_path: data.items
        pagination: {{style: page, total_path: null, has_more_path: meta.has_more}}
"""
