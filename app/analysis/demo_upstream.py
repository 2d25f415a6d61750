"""A small bookshelf REST API used as the demo upstream of the analysis tools and by their tests.

Books, authors and reading sessions (children of a book), generated deterministically with skewed
statuses, ratings and dates. Run it with `cairn analysis demo-upstream --port 8100`.

Endpoints (all JSON, under /api):
- `GET /books` (`page`, `per_page` ≤ 100, filters `status`, `genre`, `author_id`, `min_rating`,
  `max_rating`, `updated_since`) → `{"data": [...], "page", "per_page", "total"}`
- `GET|PATCH|DELETE /books/{id}` (writable: `title`, `status`, `rating`, `genre`; locked books
  answer 409, invalid values 422)
- `GET /books/{id}/sessions` (page/per_page envelope), `PATCH /books/{id}/sessions/{session_id}`
  (writable: `device`, `pages_read`, `duration_minutes`), `GET /authors` (page/per_page envelope)
- `GET /hal/authors` (offset/limit, HAL `_embedded`), `GET /feed/books` (plain list, `Link` header),
  `GET /cursor/sessions` (`cursor` in, `next_cursor` out)

`/__control/faults` injects failures (500, 429 with Retry-After, hangs, malformed JSON, rejections)
and `/__control/stats` counts requests; both exist for tests and demonstrations.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

GENRES = [
    ("sci-fi", 28),
    ("fantasy", 22),
    ("mystery", 18),
    ("literary", 14),
    ("history", 8),
    ("biography", 6),
    ("poetry", 4),
]
STATUSES = ("completed", "reading", "unread")
DEVICES = [("e-reader", 50), ("paper", 35), ("phone", 15)]
_WORDS = (
    "shadow star river glass winter iron silent garden lost empire clock ember harbor north "
    "paper crown salt machine orchard lantern wolf echo tide atlas copper dream hollow signal "
    "meridian ash"
).split()
_FIRST = "Ada Ben Clara Dmitri Elena Farid Grace Hiro Ines Jonas Kira Liam Mara Nils Olga Pedro Quinn Rosa".split()
_LAST = "Abe Brandt Costa Dahl Eze Falk Grimm Holm Ivanova Jansen Kato Lind Moreau Novak Ortiz Price".split()
EPOCH = datetime(2026, 5, 1, tzinfo=UTC)


def _pick(rng: random.Random, weighted: list[tuple[str, int]]) -> str:
    return rng.choices([w for w, _ in weighted], weights=[n for _, n in weighted])[0]


def _iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Fault:
    """One injected failure rule."""

    path: str
    mode: str
    method: str | None = None
    skip: int = 0
    times: int = 1
    retry_after: float | None = None
    hang_seconds: float = 5.0
    ids: list[int] | None = None
    seen: int = 0


@dataclass
class Library:
    """The in-memory data set."""

    books: dict[int, dict[str, Any]] = field(default_factory=dict)
    authors: dict[int, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


def generate(n_books: int = 5000, seed: int = 7) -> Library:
    """Deterministic skewed data: most books completed and rated high, a tail of 1-star reads."""
    rng = random.Random(seed)
    lib = Library()
    n_authors = max(10, n_books // 25)
    for aid in range(1, n_authors + 1):
        lib.authors[aid] = {
            "id": aid,
            "name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
            "born_year": rng.randint(1930, 1995),
        }
    session_id = 0
    author_ids = list(lib.authors)
    author_weights = [1 / (i**0.9) for i in author_ids]  # a few prolific authors, a long tail
    for bid in range(1, n_books + 1):
        genre = _pick(rng, GENRES)
        weights = [50, 36, 14] if genre == "sci-fi" else [60, 23, 17]
        status = rng.choices(STATUSES, weights=weights)[0]
        rating = None
        if status == "completed":
            rating = rng.choices([5, 4, 3, 2, 1], weights=[34, 36, 15, 7, 8])[0]
        elif status == "reading" and rng.random() < 0.2:
            rating = rng.choice([3, 4, 5])
        added = EPOCH - timedelta(days=int(abs(rng.gauss(0, 300))) % 1200, minutes=rng.randint(0, 1439))
        updated = added + (EPOCH - added) * (rng.random() ** 2)
        author_id = rng.choices(author_ids, weights=author_weights)[0]
        book = {
            "id": bid,
            "title": f"The {rng.choice(_WORDS).title()} of {rng.choice(_WORDS).title()}",
            "author": lib.authors[author_id]["name"],
            "author_id": author_id,
            "genre": genre,
            "status": status,
            "rating": rating,
            "pages": max(60, int(rng.lognormvariate(5.7, 0.4))),
            "published_year": 2025 - int(abs(rng.gauss(0, 18))),
            "added_at": _iso(added),
            "updated_at": _iso(updated),
            "finished_at": _iso(updated) if status == "completed" else None,
            "locked": rng.random() < 0.02,
        }
        lib.books[bid] = book
        sessions = []
        if status != "unread":
            for _ in range(rng.randint(1, 6)):
                session_id += 1
                start = added + timedelta(days=rng.randint(0, 120), hours=rng.randint(0, 23))
                sessions.append(
                    {
                        "id": session_id,
                        "book_id": bid,
                        "started_at": _iso(start),
                        "duration_minutes": max(5, int(rng.gauss(45, 25))),
                        "pages_read": max(1, int(rng.gauss(30, 15))),
                        "device": _pick(rng, DEVICES),
                    }
                )
        lib.sessions[bid] = sessions
    return lib


def _page_params(request: Request) -> tuple[int, int]:
    try:
        page = max(1, int(request.query_params.get("page", 1)))
        per_page = min(100, max(1, int(request.query_params.get("per_page", 25))))
    except ValueError:
        page, per_page = 1, 25
    return page, per_page


def _envelope(rows: list[dict[str, Any]], page: int, per_page: int) -> dict[str, Any]:
    start = (page - 1) * per_page
    return {
        "data": rows[start : start + per_page],
        "page": page,
        "per_page": per_page,
        "total": len(rows),
        "total_pages": math.ceil(len(rows) / per_page),
    }


def create_demo_app(n_books: int = 5000, *, seed: int = 7, token: str | None = None) -> FastAPI:
    """The bookshelf API. `token`, when set, is required as `Authorization: Bearer <token>`."""
    app = FastAPI(title="Bookshelf demo upstream", docs_url=None, redoc_url=None, openapi_url=None)
    state: dict[str, Any] = {"lib": generate(n_books, seed), "faults": [], "requests": {}, "headers": {}}

    def lib() -> Library:
        return state["lib"]  # type: ignore[no-any-return]

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        path = request.url.path
        if not path.startswith("/api"):
            return await call_next(request)  # type: ignore[no-any-return]
        state["requests"][path] = state["requests"].get(path, 0) + 1
        state["headers"] = {k: v for k, v in request.headers.items() if k.lower().startswith("x-")}
        if token is not None and request.headers.get("authorization") != f"Bearer {token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        for fault in state["faults"]:
            if not path.startswith(fault.path) or (fault.method and fault.method != request.method):
                continue
            if fault.ids is not None and not any(path.rstrip("/").endswith(f"/{i}") for i in fault.ids):
                continue
            fault.seen += 1
            if fault.seen <= fault.skip or (fault.times >= 0 and fault.seen > fault.skip + fault.times):
                continue
            if fault.mode == "500":
                return JSONResponse({"error": "injected failure"}, status_code=500)
            if fault.mode == "429":
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                return JSONResponse({"error": "slow down"}, status_code=429, headers=headers)
            if fault.mode == "hang":
                await asyncio.sleep(fault.hang_seconds)
                return JSONResponse({"error": "too late"}, status_code=504)
            if fault.mode == "malformed":
                return Response(b'{"data": [ {"id": 1,', media_type="application/json")
            if fault.mode == "reject":
                return JSONResponse({"error": "rejected by policy"}, status_code=422)
        return await call_next(request)  # type: ignore[no-any-return]

    @app.get("/api/books")
    async def list_books(request: Request) -> Any:
        q = request.query_params
        rows = list(lib().books.values())
        if "status" in q:
            rows = [b for b in rows if b["status"] == q["status"]]
        if "genre" in q:
            rows = [b for b in rows if b["genre"] == q["genre"]]
        if "author_id" in q:
            rows = [b for b in rows if str(b["author_id"]) == q["author_id"]]
        if "min_rating" in q:
            rows = [b for b in rows if b["rating"] is not None and b["rating"] >= float(q["min_rating"])]
        if "max_rating" in q:
            rows = [b for b in rows if b["rating"] is not None and b["rating"] <= float(q["max_rating"])]
        if "updated_since" in q:
            rows = [b for b in rows if b["updated_at"] >= q["updated_since"]]
        return _envelope(rows, *_page_params(request))

    @app.get("/api/books/{book_id}")
    async def get_book(book_id: int) -> Any:
        book = lib().books.get(book_id)
        return book if book else JSONResponse({"error": "not found"}, status_code=404)

    @app.patch("/api/books/{book_id}")
    async def patch_book(book_id: int, request: Request) -> Any:
        book = lib().books.get(book_id)
        if book is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "body must be JSON"}, status_code=400)
        if not isinstance(body, dict) or not body:
            return JSONResponse({"error": "body must be a non-empty object"}, status_code=422)
        unknown = set(body) - {"title", "status", "rating", "genre"}
        if unknown:
            return JSONResponse({"error": f"not writable: {sorted(unknown)}"}, status_code=422)
        if "status" in body and body["status"] not in STATUSES:
            return JSONResponse({"error": "invalid status"}, status_code=422)
        rating = body.get("rating")
        if "rating" in body and rating is not None and (not isinstance(rating, int) or not 1 <= rating <= 5):
            return JSONResponse({"error": "rating must be 1-5 or null"}, status_code=422)
        if book["locked"]:
            return JSONResponse({"error": "book is locked"}, status_code=409)
        book.update(body)
        book["updated_at"] = _iso(datetime.now(UTC))
        return book

    @app.delete("/api/books/{book_id}")
    async def delete_book(book_id: int) -> Any:
        book = lib().books.get(book_id)
        if book is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        if book["locked"]:
            return JSONResponse({"error": "book is locked"}, status_code=409)
        del lib().books[book_id]
        lib().sessions.pop(book_id, None)
        return Response(status_code=204)

    @app.get("/api/books/{book_id}/sessions")
    async def book_sessions(book_id: int, request: Request) -> Any:
        if book_id not in lib().books:
            return JSONResponse({"error": "not found"}, status_code=404)
        return _envelope(lib().sessions.get(book_id, []), *_page_params(request))

    @app.patch("/api/books/{book_id}/sessions/{session_id}")
    async def patch_session(book_id: int, session_id: int, request: Request) -> Any:
        found = [s for s in lib().sessions.get(book_id, []) if s["id"] == session_id]
        if not found:
            return JSONResponse({"error": "not found"}, status_code=404)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "body must be JSON"}, status_code=400)
        if not isinstance(body, dict) or not body or set(body) - {"device", "pages_read", "duration_minutes"}:
            return JSONResponse({"error": "writable: device, pages_read, duration_minutes"}, status_code=422)
        found[0].update(body)
        return found[0]

    @app.get("/api/authors")
    async def list_authors(request: Request) -> Any:
        return _envelope(list(lib().authors.values()), *_page_params(request))

    @app.get("/api/hal/authors")
    async def hal_authors(request: Request) -> Any:
        offset = max(0, int(request.query_params.get("offset", 0)))
        limit = min(100, max(1, int(request.query_params.get("limit", 20))))
        counts: dict[int, int] = {}
        for b in lib().books.values():
            counts[b["author_id"]] = counts.get(b["author_id"], 0) + 1
        rows = [
            {**a, "stats": {"books": counts.get(a["id"], 0)}, "_links": {"self": {"href": f"/api/authors/{a['id']}"}}}
            for a in list(lib().authors.values())[offset : offset + limit]
        ]
        body: dict[str, Any] = {"total": len(lib().authors), "_links": {}}
        if rows:
            body["_embedded"] = {"authors": rows}
        if offset + limit < len(lib().authors):
            body["_links"]["next"] = {"href": f"/api/hal/authors?offset={offset + limit}&limit={limit}"}
        return body

    @app.get("/api/feed/books")
    async def feed_books(request: Request) -> Any:
        after = int(request.query_params.get("after", 0))
        limit = min(100, max(1, int(request.query_params.get("limit", 25))))
        rows = [b for b in lib().books.values() if b["id"] > after][:limit]
        headers = {}
        if rows and rows[-1]["id"] < max(lib().books):
            headers["Link"] = f'<{request.url.path}?after={rows[-1]["id"]}&limit={limit}>; rel="next"'
        return JSONResponse(rows, headers=headers)

    @app.get("/api/cursor/sessions")
    async def cursor_sessions(request: Request) -> Any:
        cursor = int(request.query_params.get("cursor", 0) or 0)
        limit = min(100, max(1, int(request.query_params.get("limit", 25))))
        every = [s for rows in lib().sessions.values() for s in rows]
        chunk = every[cursor : cursor + limit]
        nxt = str(cursor + limit) if cursor + limit < len(every) else None
        return {"items": chunk, "next_cursor": nxt}

    @app.post("/__control/faults")
    async def set_faults(request: Request) -> Any:
        rules = await request.json()
        state["faults"] = [Fault(**r) for r in (rules if isinstance(rules, list) else [rules])]
        return {"faults": len(state["faults"])}

    @app.post("/__control/reset")
    async def reset() -> Any:
        state.update(lib=generate(n_books, seed), faults=[], requests={}, headers={})
        return {"books": len(lib().books)}

    @app.get("/__control/stats")
    async def stats() -> Any:
        return {"requests": state["requests"], "headers": state["headers"], "books": len(lib().books)}

    return app


def serve(host: str = "127.0.0.1", port: int = 8100, n_books: int = 5000, token: str | None = None) -> None:
    """Run the demo upstream in the foreground."""
    import uvicorn

    uvicorn.run(create_demo_app(n_books, token=token), host=host, port=port, log_level="warning")
