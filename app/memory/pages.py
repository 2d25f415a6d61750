"""The console's memory pages: "Memories" at `/ui/memory` (the newest memories page by page with
filters, or a search with each hit's signals; a memory's page with its chunks and vector status,
retag, delete, summarize a window) and "Thoughts" at
`/ui/thoughts` (list or search with metadata facets, a thought with its related ones, edit, archive,
delete).

Every read and write is an operation call through the executor (`Viewer.call`); this module imports
only the core and the family's schemas. Each page makes one or two calls.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import Response

from app.core.errors import CairnError, InvalidInput, Unauthenticated
from app.core.ui import CONSOLE_PATH, ConsoleSection, Recent, Tally, Viewer, console_router, form_text, viewer
from app.memory.schemas import MAX_TAGS

MEMORY_PATH = CONSOLE_PATH + "/memory"
THOUGHTS_PATH = CONSOLE_PATH + "/thoughts"
TEMPLATES = Path(__file__).parent / "templates"
memory_router = console_router("/memory")
thoughts_router = console_router("/thoughts")

MODES = ("hybrid", "semantic", "lexical")
MEMORY_TYPES = ("episodic", "semantic", "procedural")
STRATEGIES = ("auto", "extractive", "abstractive")
KINDS = ("chunk", "thought", "summary")
# How a memory's kind reads on a page: push stores a document as chunks; a short note is one chunk.
KIND_LABELS = {"chunk": "pushed", "thought": "thought", "summary": "summary"}
CHUNKS_PAGE = 20
THOUGHTS_PAGE = 25
MEMORIES_PAGE = 25
RECENT = 5  # newest items the home page lists per tally
MAX_TEXT = 20_000
# What each signal of a search hit measures, as the page names it.
SIGNAL_NAMES = {"semantic": "cosine", "lexical": "lexical coverage"}
_CITED = re.compile(r"^\[(\d+)\](?: \(\d{4}-\d{2}-\d{2}\))? (.*)$")


# ------------------------------------------------------------------------------------------ helpers


def _text(fields: dict[str, Any], name: str, limit: int = 2000) -> str:
    """One field of a posted form, stripped, at most `limit` characters."""
    return form_text(fields, name, limit)


def _words(value: str) -> list[str]:
    """A comma-separated list (tags, topics, people), trimmed, empty items dropped, order kept."""
    return list(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))


def _query(request: Request, *names: str) -> dict[str, str]:
    """The named query parameters that are not blank, stripped."""
    query = request.query_params
    return {n: query[n].strip()[:2000] for n in names if query.get(n, "").strip()}


def _form(view: Viewer, *names: str) -> dict[str, str]:
    """The named query parameters that are not blank; `project` defaults to the chosen project."""
    form = _query(view.request, *names)
    if "project" in names and "project" not in form and view.project:
        form["project"] = view.project
    return form


async def _attempt(call: Awaitable[dict[str, Any]]) -> dict[str, Any] | CairnError:
    """A call's result, or the error it failed with (so that calls made together all finish)."""
    try:
        return await call
    except CairnError as exc:
        return exc


def _refusal(exc: CairnError) -> dict[str, Any]:
    """A call's error as the page shows it in place (a refused key still goes to the sign-in page)."""
    if isinstance(exc, Unauthenticated):
        raise exc
    error: dict[str, Any] = exc.body()["error"]
    return error


def cited(context: str | None) -> dict[int, str]:
    """The lines of a reply's `context` block by their citation number (`[n] text`)."""
    out: dict[int, str] = {}
    for line in (context or "").splitlines():
        match = _CITED.match(line)
        if match:
            out[int(match.group(1))] = match.group(2)
    return out


def _item_url(memory_id: str) -> str:
    return f"{MEMORY_PATH}/items/{quote(memory_id, safe='')}"


def _stamp(value: datetime) -> str:
    """A `datetime-local` input's value."""
    return value.strftime("%Y-%m-%dT%H:%M")


def kind_label(kind: str, chunk_index: int | None = None) -> str:
    """A memory's kind as a page names it: "pushed" (a note or document stored with push; "pushed, part
    N" for a later chunk of a document), "thought" or "summary"."""
    label = KIND_LABELS.get(kind, kind)
    return f"{label}, part {chunk_index + 1}" if kind == "chunk" and chunk_index else label


def _headline(memory: dict[str, Any], chars: int = 80) -> str:
    """A short title of a memory: its source, else the start of its text."""
    text = str(memory.get("source_uri") or " ".join(str(memory.get("content", "")).split()))
    return text if len(text) <= chars else text[: chars - 1] + "…"


async def overview(view: Viewer, project: str) -> list[Tally]:
    """The home page's memory tallies of `project`: pushed memories and summaries, and thoughts, each
    with its newest items, and how many of them wait for a vector (two list_memories calls)."""
    memories, thoughts = await asyncio.gather(
        view.call("list_memories", {"project": project, "kind": ["chunk", "summary"], "limit": RECENT}),
        view.call("list_memories", {"project": project, "kind": ["thought"], "limit": RECENT}),
    )
    where = urlencode({"project": project})
    return [
        Tally(
            title="Memories",
            count=memories["total"],
            href=f"{MEMORY_PATH}?{where}",
            note="pushed notes, document chunks and summaries",
            recent=[
                Recent(_headline(m), _item_url(m["id"]), m["created_at"], kind_label(m["kind"], m.get("chunk_index")))
                for m in memories["memories"]
            ],
        ),
        Tally(
            title="Thoughts",
            count=thoughts["total"],
            href=f"{THOUGHTS_PATH}?{where}",
            note="captured with capture_thought",
            recent=[
                Recent(_headline(t), f"{THOUGHTS_PATH}/{quote(t['id'], safe='')}", t["created_at"])
                for t in thoughts["memories"]
            ],
        ),
        Tally(
            title="Waiting for a vector",
            count=memories["queued"] + thoughts["queued"],
            href="",
            note="this project's memories and thoughts in the embedding queue",
        ),
    ]


SECTIONS = (
    ConsoleSection(title="Memories", path=MEMORY_PATH, router=memory_router, templates=TEMPLATES, overview=overview),
    ConsoleSection(title="Thoughts", path=THOUGHTS_PATH, router=thoughts_router, templates=TEMPLATES),
)


# ------------------------------------------------------------------------------------------ memories


@memory_router.get("")
async def search_page(request: Request) -> Response:
    """The chosen project's memories newest first, page by page, filtered by type, tags, source and
    kind; or, with a query, a search (hybrid, semantic or lexical) with each hit's signals."""
    view = await viewer(request)
    form = _form(view, "q", "mode", "project", "collection", "tags", "memory_type", "limit", "source", "kind")
    if form.get("mode") not in MODES:
        form["mode"] = "hybrid"
    if not form.get("q"):
        return await _browse(view, request, form)
    reply: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    hits: list[dict[str, Any]] = []
    args: dict[str, Any] = {"query_text": form["q"][:512], "mode": form["mode"], "explain": True}
    for field, name in (("project_id", "project"), ("collection", "collection"), ("memory_type", "memory_type")):
        if name in form:
            args[field] = form[name]
    if "tags" in form:
        args["tags"] = _words(form["tags"])[:MAX_TAGS]
    if "limit" in form:
        args["limit"] = form["limit"]
    try:
        reply = await view.call("search", args)
    except CairnError as exc:
        error = _refusal(exc)
    if reply is not None:
        texts = cited(reply.get("context"))
        hits = [
            {**hit, "text": texts.get(n), "signals": _signals(hit.get("signals"))}
            for n, hit in enumerate(reply["results"], start=1)
        ]
    return view.render(
        "memory/search.html",
        form=form,
        modes=MODES,
        memory_types=MEMORY_TYPES,
        kinds=KINDS,
        reply=reply,
        hits=hits,
        error=error,
        listed=None,
    )


async def _browse(view: Viewer, request: Request, form: dict[str, str]) -> Response:
    """The memories of the filters in `form`, newest first (list_memories), a page at a time."""
    try:
        offset = max(0, int(request.query_params.get("offset", "0")))
    except ValueError:
        raise InvalidInput("offset must be a whole number") from None
    args: dict[str, Any] = {"limit": MEMORIES_PAGE, "offset": offset}
    for name in ("project", "memory_type", "source"):
        if name in form:
            args[name] = form[name]
    if "tags" in form:
        args["tags"] = _words(form["tags"])[:MAX_TAGS]
    if form.get("kind") in KINDS:
        args["kind"] = [form["kind"]]
    listed: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    try:
        listed = await view.call("list_memories", args)
    except CairnError as exc:
        error = _refusal(exc)
    filters: dict[str, Any] = {k: form[k] for k in ("project", "memory_type", "tags", "source", "kind") if k in form}
    pages: dict[str, str] = {}
    if listed is not None and listed["next_offset"] is not None:
        pages["older"] = f"{MEMORY_PATH}?{urlencode({**filters, 'offset': listed['next_offset']})}"
    if offset:
        pages["newer"] = f"{MEMORY_PATH}?{urlencode({**filters, 'offset': max(0, offset - MEMORIES_PAGE)})}"
    return view.render(
        "memory/search.html",
        form=form,
        modes=MODES,
        memory_types=MEMORY_TYPES,
        kinds=KINDS,
        reply=None,
        hits=[],
        error=error,
        listed=listed,
        offset=offset,
        pages=pages,
        kind_label=kind_label,
    )


def _signals(signals: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A hit's signals as (name, what it measures, value, rank) rows, semantic first."""
    rows = []
    for key in sorted((signals or {}), key=lambda k: (k != "semantic", k)):
        value = signals[key] if signals else {}
        rows.append(
            {"key": key, "name": SIGNAL_NAMES.get(key, key), "score": value.get("score"), "rank": value.get("rank")}
        )
    return rows


@memory_router.get("/items/{memory_id}")
async def item_page(request: Request, memory_id: str) -> Response:
    """One memory: text, tags, source and metadata, its document's chunks, vector status per model."""
    view = await viewer(request)
    try:
        offset = max(0, int(request.query_params.get("offset", "0")))
    except ValueError:
        raise InvalidInput("offset must be a whole number") from None
    item = await view.call("get_memory", {"id": memory_id, "chunk_offset": offset, "chunk_limit": CHUNKS_PAGE})
    return view.render(
        "memory/item.html", item=item, memory=item["memory"], offset=offset, page=CHUNKS_PAGE, kind_label=kind_label
    )


@memory_router.post("/items/{memory_id}/tags")
async def retag(request: Request, memory_id: str) -> Response:
    """Replace the tags of a memory (or of every chunk of its document)."""
    view = await viewer(request)
    fields = await view.form()
    tags = _words(_text(fields, "tags", 8000))
    out = await view.call("update_memory", {"id": memory_id, "tags": tags, "document": fields.get("document") == "1"})
    shown = ", ".join(out["tags"]) or "no tags"
    return view.redirect(_item_url(memory_id), flash=f"Tags saved on {out['updated']} memory(ies): {shown}")


@memory_router.post("/items/{memory_id}/delete")
async def delete(request: Request, memory_id: str) -> Response:
    """Delete a memory (or every chunk of its document) and its vectors."""
    view = await viewer(request)
    fields = await view.form()
    out = await view.call("delete_memory", {"id": memory_id, "document": fields.get("document") == "1"})
    return view.redirect(MEMORY_PATH, flash=f"Deleted {out['deleted']} memory(ies)")


def _summarize_form(request_form: dict[str, str]) -> dict[str, str]:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    defaults = {
        "memory_type": "episodic",
        "strategy": "auto",
        "start": _stamp(now - timedelta(days=7)),
        "end": _stamp(now + timedelta(minutes=1)),
        "limit": "50",
    }
    return {**defaults, **request_form}


@memory_router.get("/summarize")
async def summarize_page(request: Request) -> Response:
    """The form that summarizes a window of memories (no call until it is sent)."""
    view = await viewer(request)
    form = _summarize_form(_query(request, "project", "collection", "tags", "memory_type", "start", "end"))
    return view.render("memory/summarize.html", form=form, result=None, error=None, **_choices())


def _choices() -> dict[str, Any]:
    return {"memory_types": MEMORY_TYPES, "strategies": STRATEGIES}


@memory_router.post("/summarize")
async def summarize(request: Request) -> Response:
    """Summarize a window of memories into one stored summary memory; shows it and its sources."""
    view = await viewer(request)
    fields = await view.form()
    names = ("project", "collection", "tags", "memory_type", "start", "end", "strategy", "max_words", "limit")
    form = _summarize_form({n: v for n in names if (v := _text(fields, n, 2000))})
    args: dict[str, Any] = {
        "time_range": {"start": form["start"], "end": form["end"]},
        "memory_type": form["memory_type"],
        "strategy": form["strategy"],
        "limit": form["limit"],
    }
    for field, name in (("project_id", "project"), ("collection", "collection"), ("max_words", "max_words")):
        if name in form:
            args[field] = form[name]
    if "tags" in form:
        args["tags"] = _words(form["tags"])[:MAX_TAGS]
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    try:
        result = await view.call("summarize", args)
        # The reply cites short ids; the stored summary keeps the full ones the links need.
        stored = await view.call("get_memory", {"id": result["upserted_memory_id"], "chunk_limit": 0})
        result["source_memory_ids"] = stored["memory"]["metadata"].get("source_memory_ids", [])
    except CairnError as exc:
        error = _refusal(exc)
    return view.render("memory/summarize.html", form=form, result=result, error=error, **_choices())


# ------------------------------------------------------------------------------------------ thoughts

THOUGHT_FILTERS = ("project", "type", "topic", "person")


def _thoughts_url(filters: dict[str, str], **change: str | None) -> str:
    """The thoughts page with `filters` changed (a None value drops the filter)."""
    merged = {**filters, **change}
    params = {k: v for k, v in merged.items() if v}
    return THOUGHTS_PATH + (f"?{urlencode(params)}" if params else "")


@thoughts_router.get("")
async def thoughts_page(request: Request) -> Response:
    """Thoughts newest first (or found by a query), filtered by the metadata facets beside them."""
    view = await viewer(request)
    form = _form(view, "q", "mode", *THOUGHT_FILTERS, "archived", "offset")
    form["mode"] = form["mode"] if form.get("mode") in MODES else "hybrid"
    archived = form.get("archived") == "1"
    error: dict[str, Any] | None = None
    listed: dict[str, Any] | None = None
    found: dict[str, Any] | None = None
    project = {"project": form["project"]} if "project" in form else {}
    if form.get("q"):
        name = "search_thoughts"
        args: dict[str, Any] = {
            **project,
            "query": form["q"],
            "mode": form["mode"],
            "include_archived": archived,
            "explain": True,
        }
    else:
        name = "list_thoughts"
        args = {k: form[k] for k in THOUGHT_FILTERS if k in form}
        args.update(include_archived=archived, limit=THOUGHTS_PAGE, offset=form.get("offset", "0"))
    # Two calls, two transactions: the facets are counted while the page of thoughts is read.
    listing, counted = await asyncio.gather(
        _attempt(view.call(name, args)), _attempt(view.call("thought_stats", project))
    )
    stats: dict[str, Any] | None = None
    failure = next((r for r in (listing, counted) if isinstance(r, CairnError)), None)
    if failure is not None:
        error = _refusal(failure)
    elif isinstance(listing, dict) and isinstance(counted, dict):
        stats = counted
        if name == "search_thoughts":
            found = listing
        else:
            listed = listing
    filters = {k: form[k] for k in (*THOUGHT_FILTERS, "archived") if k in form}
    facets = []
    if stats is not None:
        for key, label, rows in (
            ("type", "Type", stats["by_type"]),
            ("topic", "Topics", stats["top_topics"]),
            ("person", "People", stats["top_people"]),
        ):
            facets.append(
                {
                    "key": key,
                    "label": label,
                    "values": [
                        {
                            **row,
                            "current": filters.get(key) == row["value"],
                            "href": _thoughts_url(
                                filters, **{key: None if filters.get(key) == row["value"] else row["value"]}
                            ),
                        }
                        for row in rows
                    ],
                }
            )
    hits = [{**hit, "signals": _signals(hit.get("signals"))} for hit in (found or {}).get("results", [])]
    next_url = None
    if listed is not None and listed.get("next_offset") is not None:
        next_url = _thoughts_url(filters, offset=str(listed["next_offset"]))
    return view.render(
        "thoughts/list.html",
        form=form,
        modes=MODES,
        filters=filters,
        clear_url=_thoughts_url({k: v for k, v in filters.items() if k == "project"}),
        listed=listed,
        found=found,
        hits=hits,
        stats=stats,
        facets=facets,
        next_url=next_url,
        error=error,
        kind_label=kind_label,
    )


@thoughts_router.get("/{thought_id}")
async def thought_page(request: Request, thought_id: str) -> Response:
    """One thought: content, metadata, vector status, its related thoughts, and the forms that change it."""
    view = await viewer(request)
    got = await view.call("get_thought", {"id": thought_id})
    related = await view.call("related_thoughts", {"id": thought_id, "limit": 5, "explain": True})
    hits = [{**hit, "signals": _signals(hit.get("signals"))} for hit in related["results"]]
    return view.render(
        "thoughts/thought.html", thought=got["thought"], related=related, hits=hits, kind_label=kind_label
    )


@thoughts_router.post("/{thought_id}/edit")
async def edit_thought(request: Request, thought_id: str) -> Response:
    """Change a thought's content and its type, topics and people (other metadata is kept)."""
    view = await viewer(request)
    fields = await view.form()
    content = _text(fields, "content", MAX_TEXT)
    current = (await view.call("get_thought", {"id": thought_id}))["thought"]
    metadata = dict(current.get("metadata") or {})
    kind = _text(fields, "type", 200)
    if kind:
        metadata["type"] = kind
    else:
        metadata.pop("type", None)
    metadata["topics"] = _words(_text(fields, "topics", 8000))
    metadata["people"] = _words(_text(fields, "people", 8000))
    args: dict[str, Any] = {"id": thought_id, "metadata": metadata}
    if content and content != current["content"]:
        args["content"] = content
    await view.call("update_thought", args)
    return view.redirect(f"{THOUGHTS_PATH}/{quote(thought_id, safe='')}", flash="Thought saved")


@thoughts_router.post("/{thought_id}/archive")
async def archive_thought(request: Request, thought_id: str) -> Response:
    """Archive a thought, or restore it (`archived=0`)."""
    view = await viewer(request)
    fields = await view.form()
    archived = fields.get("archived", "1") != "0"
    await view.call("archive_thought", {"id": thought_id, "archived": archived})
    return view.redirect(
        f"{THOUGHTS_PATH}/{quote(thought_id, safe='')}", flash="Thought archived" if archived else "Thought restored"
    )


@thoughts_router.post("/{thought_id}/delete")
async def delete_thought(request: Request, thought_id: str) -> Response:
    """Delete a thought and its vectors."""
    view = await viewer(request)
    await view.form()
    await view.call("delete_thought", {"id": thought_id})
    return view.redirect(THOUGHTS_PATH, flash="Thought deleted")
