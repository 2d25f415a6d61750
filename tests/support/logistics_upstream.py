"""A logistics upstream for the analysis tests, with the traits real APIs have and the demo lacks.

- `GET /api/shipments?offset=&limit=`: offset paging, the limit capped at `SHIPMENT_CAP` without a word,
  the items in an envelope (`result.shipments`) and the total at `paging.total`.
- Records carry hyphenated and spaced keys (`carrier-name`, `delivery status`), epoch times
  (`created_at` in seconds, in 2025), and a `handling` note with a few values, one of them long.
- `GET /api/shipments/{id}/events?page=&per_page=`: each shipment's events, `EVENT_CAP` a page at
  most, the end told by `has_more` alone; the events of `FAILING_EVENTS` answer 500 every time.
- `PATCH /api/shipments/{id}` (`{"shipment": {...}}`): 409 for a locked shipment, 422 for a status
  outside `STATUSES`, 500 (every time) for `BROKEN`; else applied.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

N_SHIPMENTS = 230
SHIPMENT_CAP, EVENT_CAP = 40, 5
STATUSES = ("lost", "delivered", "in transit", "returned")
CARRIERS = ("Nordpost", "Blue Freight", "Kite-Air")
LONG_NOTE = "fragile; " + "keep upright and away from moisture, " * 8 + "signature required"
HANDLING = ("standard", "fragile", LONG_NOTE)
BASE = int(datetime(2025, 4, 1, tzinfo=UTC).timestamp())
DAY = 86_400
FAILING_EVENTS = "SHP-0002"
BROKEN = "SHP-0003"


def shipment_id(i: int) -> str:
    return f"SHP-{i:04d}"


def event_count(i: int) -> int:
    """Events of shipment i: 3 to 13, so that most take several pages."""
    return 3 + (i * 5) % 11


def make_shipments() -> dict[str, dict[str, Any]]:
    """The seeded shipments (every 7th is lost, every 10th locked)."""
    out: dict[str, dict[str, Any]] = {}
    for i in range(1, N_SHIPMENTS + 1):
        sid = shipment_id(i)
        out[sid] = {
            "id": sid,
            "carrier-name": CARRIERS[i % 3],
            "delivery status": "lost" if i % 7 == 0 else STATUSES[1 + i % 3],
            "weight kg": round(0.5 + (i % 40) * 0.75, 2),
            "handling": HANDLING[i % 3],
            "created_at": BASE + (i % 120) * DAY,
            "locked": i % 10 == 0,
        }
    return out


class LogisticsState:
    """What the upstream holds, and the requests it saw."""

    def __init__(self) -> None:
        self.shipments = make_shipments()
        self.patches: list[str] = []


def create_logistics_app() -> tuple[Starlette, LogisticsState]:
    """The upstream application and its state."""
    state = LogisticsState()

    def _int(request: Request, name: str, default: int) -> int:
        try:
            return max(0, int(request.query_params.get(name, default)))
        except ValueError:
            return default

    async def shipments(request: Request) -> Response:
        limit = min(_int(request, "limit", 20) or 20, SHIPMENT_CAP)
        offset = _int(request, "offset", 0)
        rows = list(state.shipments.values())
        return JSONResponse(
            {"result": {"shipments": rows[offset : offset + limit]}, "paging": {"total": len(rows), "offset": offset}}
        )

    async def events(request: Request) -> Response:
        sid = request.path_params["sid"]
        if sid == FAILING_EVENTS:
            return JSONResponse({"error": "event store unavailable"}, status_code=500)
        if sid not in state.shipments:
            return JSONResponse({"error": "no such shipment"}, status_code=404)
        size = min(_int(request, "per_page", 20) or 20, EVENT_CAP)
        page = max(1, _int(request, "page", 1))
        i = int(sid.split("-")[1])
        every = [
            {"id": f"{sid}-E{j:02d}", "kind": ("scan", "handover", "delay")[j % 3], "at": (BASE + j * 3600) * 1000}
            for j in range(event_count(i))
        ]
        chunk = every[(page - 1) * size : page * size]
        return JSONResponse({"result": {"events": chunk}, "has_more": page * size < len(every)})

    async def patch(request: Request) -> Response:
        sid = request.path_params["sid"]
        state.patches.append(sid)
        record = state.shipments.get(sid)
        if record is None:
            return JSONResponse({"error": "no such shipment"}, status_code=404)
        if sid == BROKEN:
            return JSONResponse({"error": "internal error"}, status_code=500)
        if record["locked"]:
            return JSONResponse({"error": "shipment is locked"}, status_code=409)
        body = await request.json()
        changes = body.get("shipment") if isinstance(body, dict) else None
        status = (changes or {}).get("delivery_status")
        if not isinstance(changes, dict) or status not in STATUSES:
            return JSONResponse({"error": f"delivery_status must be one of {', '.join(STATUSES)}"}, status_code=422)
        record["delivery status"] = status
        return JSONResponse({"shipment": record})

    app = Starlette(
        routes=[
            Route("/api/shipments", shipments),
            Route("/api/shipments/{sid}/events", events),
            Route("/api/shipments/{sid}", patch, methods=["PATCH"]),
        ]
    )
    return app, state


REGISTRY = """
upstreams:
  logistics:
    base_url: {base}/api
    timeout_seconds: 2
    max_retries: 1
    backoff_seconds: 0.02
    models:
      shipment:
        list_path: /shipments
        items_path: result.shipments
        pagination: {{style: offset, offset_param: offset, per_page_param: limit, total_path: paging.total}}
        attributes:
          created_at: {{type: datetime, format: epoch_seconds}}
        writable: true
        writable_attributes: [delivery_status]
        update: {{method: PATCH, path: "/shipments/{{id}}", body_key: shipment}}
        children:
          events:
            model: shipment_event
            path: "/shipments/{{parent_id}}/events"
            items_path: result.events
            parent_key: shipment_id
            max_pages_per_parent: 10
            pagination: {{style: page, total_path: null, has_more_path: has_more}}
            attributes:
              at: {{type: datetime, format: epoch_millis}}
"""
