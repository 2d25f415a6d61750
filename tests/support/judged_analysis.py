"""A judged set for analysis_query's semantic mode: a small helpdesk upstream (tickets, agents,
invoices) whose pages give the page summaries ingest writes, the findings an agent stored about it,
queries with the findings that answer them, and off-topic queries that share an ordinary word with the
corpus ("status", "weekend", "phone", "page" ...) but ask about something else.

`load` writes the whole set into one session (with the local model's vectors unless told otherwise);
`ranking` and `reciprocal_rank` read a reply back as the set's keys.
"""

from __future__ import annotations

import random
import uuid
from datetime import date, timedelta
from typing import Any

from app.analysis.demo_upstream import generate
from app.analysis.repository import FINDING_VECTORS, AnalysisRepository
from app.analysis.summaries import summarize
from app.core.db import Database
from app.core.embeddings.provider import EmbeddingProvider
from app.core.embeddings.repository import VectorRepository
from app.core.embeddings.vectors import vector_param

PAGE_SIZE = 25


def _day(rng: random.Random, start: date, span: int) -> str:
    return (start + timedelta(days=rng.randrange(span))).isoformat()


def records() -> dict[str, list[dict[str, Any]]]:
    """The upstream's records per model (deterministic)."""
    rng = random.Random(38)
    tickets = [
        {
            "id": i,
            "status": rng.choices(["solved", "open", "pending", "closed"], [5, 3, 1, 2])[0],
            "priority": rng.choices(["normal", "high", "low", "urgent"], [6, 2, 2, 1])[0],
            "channel": rng.choices(["email", "chat", "phone", "web"], [4, 3, 1, 2])[0],
            "team": rng.choice(["billing", "platform", "mobile"]),
            "first_reply_minutes": rng.randint(2, 480),
            "satisfaction": rng.choice([None, 1, 2, 3, 4, 4, 5, 5]),
            "created_at": _day(rng, date(2026, 1, 1), 90),
        }
        for i in range(1, 51)
    ]
    agents = [
        {
            "id": i,
            "team": rng.choice(["billing", "platform", "mobile"]),
            "shift": rng.choices(["day", "night", "weekend"], [5, 2, 1])[0],
            "tickets_solved": rng.randint(10, 300),
            "hired_at": _day(rng, date(2022, 1, 1), 1500),
        }
        for i in range(1, 26)
    ]
    invoices = [
        {
            "id": i,
            "plan": rng.choices(["pro", "free", "enterprise"], [5, 3, 2])[0],
            "currency": rng.choices(["EUR", "USD", "GBP"], [4, 4, 2])[0],
            "amount": round(rng.uniform(9, 4000), 2),
            "paid": rng.random() < 0.8,
            "issued_at": _day(rng, date(2025, 10, 1), 150),
        }
        for i in range(1, 51)
    ]
    return {"ticket": tickets, "agent": agents, "invoice": invoices}


def page_summaries() -> dict[str, tuple[int, str, str]]:
    """key ("ticket p1") -> (page, model, summary), as ingest writes them for pages of PAGE_SIZE."""
    out: dict[str, tuple[int, str, str]] = {}
    for model, rows in records().items():
        for start in range(0, len(rows), PAGE_SIZE):
            page = start // PAGE_SIZE + 1
            out[f"{model} p{page}"] = (page, model, summarize(model, f"page {page}", rows[start : start + PAGE_SIZE]))
    return out


# key -> (category, finding): what an agent concluded about the data.
FINDINGS: dict[str, tuple[str, str]] = {
    "slow mobile": (
        "pattern",
        "Urgent tickets of the mobile team wait almost three hours for a first reply, far longer than billing",
    ),
    "refunds": ("trend", "Refund requests doubled in January after the price increase of the pro plan"),
    "night shift": ("pattern", "Night shift agents solve fewer tickets but get higher satisfaction scores"),
    "unpaid": ("risk", "Twelve enterprise invoices have been unpaid for more than 60 days: a credit risk"),
    "channels": ("pattern", "Enterprise customers mostly call by phone; free accounts use chat"),
    "outage": ("anomaly", "One outage on March 3 produced 40 duplicate tickets within an hour"),
    "one star": ("quality_issue", "Customers who rate support one star mostly complain about slow replies"),
    "rounding": ("data_issue", "GBP invoice amounts are rounded wrongly, leaving one penny differences"),
    "new agents": ("pattern", "Agents hired this year escalate twice as many tickets to the platform team"),
    "backlog": ("trend", "The weekend backlog grows every Saturday and is cleared by Monday noon"),
}

# (query, keys of the findings or page summaries that answer it)
JUDGED: tuple[tuple[str, frozenset[str]], ...] = (
    ("how long do urgent mobile tickets wait for a first reply", frozenset({"slow mobile"})),
    ("did refund requests go up after the pro plan price change", frozenset({"refunds"})),
    ("do night shift agents get better satisfaction scores", frozenset({"night shift"})),
    ("unpaid enterprise invoices and credit risk", frozenset({"unpaid"})),
    ("which channel do enterprise customers use, phone or chat", frozenset({"channels"})),
    ("an outage that caused duplicate tickets", frozenset({"outage"})),
    ("why do customers rate support one star", frozenset({"one star"})),
    ("rounding errors in GBP invoice amounts", frozenset({"rounding"})),
    ("agents hired this year escalating tickets", frozenset({"new agents"})),
    ("weekend backlog of tickets", frozenset({"backlog"})),
    ("ticket status, priority and channel distribution", frozenset({"ticket p1", "ticket p2"})),
    ("invoice currency, plan and paid amounts", frozenset({"invoice p1", "invoice p2"})),
    ("agent shifts, teams and tickets solved", frozenset({"agent p1"})),
)

# Queries about something else, each sharing an ordinary word with the corpus.
OFF_TOPIC: tuple[str, ...] = (
    "yoga class schedule for the weekend",
    "status of my passport renewal",
    "best phone camera for bird photos",
    "piano lessons on Saturday for kids",
    "banana bread recipe with walnuts for a new oven",
    "history of the roman empire on one page",
)

# Queries a page summary answers: it must pass the default threshold.
SUMMARY_QUERIES = tuple((q, keys) for q, keys in JUDGED if all(" p" in k for k in keys))


async def load(db: Database, project: str, analysis_id: str, embedder: EmbeddingProvider | None) -> dict[int, str]:
    """Write every page summary and finding into one session (with `embedder`'s vectors unless None);
    returns finding id -> key."""
    items = [
        (key, {"category": "page_summary", "finding": text, "metadata": {"page": page}, "source_model": model})
        for key, (page, model, text) in page_summaries().items()
    ]
    items += [(key, {"category": c, "finding": t}) for key, (c, t) in FINDINGS.items()]
    return await store_findings(db, project, analysis_id, items, embedder)


async def store_findings(
    db: Database,
    project: str,
    analysis_id: str,
    items: list[tuple[str, dict[str, Any]]],
    embedder: EmbeddingProvider | None,
) -> dict[int, str]:
    """Write (key, finding row) items as persistent findings of one session, with `embedder`'s vectors
    unless None; returns finding id -> key."""
    async with db.transaction() as s:
        repo = AnalysisRepository(s)
        pid = await repo.ensure_project(project)
        ids, _ = await repo.insert_findings(pid, analysis_id, [row for _, row in items], True, 3600)
    keys = dict(zip(ids, (key for key, _ in items), strict=True))
    if embedder is not None:
        vectors = await embedder.embed([row["finding"] for _, row in items])
        async with db.transaction() as s:
            await VectorRepository(s).store(FINDING_VECTORS, embedder.model, ids, [vector_param(v) for v in vectors])
    return keys


def demo_page_summaries(books: int = 300, per_page: int = 100) -> list[tuple[str, dict[str, Any]]]:
    """The page summaries ingest writes for the demo upstream's first `books` books (and its authors),
    as (key, finding row) items: keys "book p1"… and "author p1"."""
    data = generate(books)
    pages = [("book", list(data.books.values())), ("author", list(data.authors.values()))]
    out: list[tuple[str, dict[str, Any]]] = []
    for model, rows in pages:
        for start in range(0, len(rows), per_page):
            page = start // per_page + 1
            text = summarize(model, f"page {page}", rows[start : start + per_page])
            out.append((f"{model} p{page}", {"category": "page_summary", "finding": text, "metadata": {"page": page}}))
    return out


# Questions the demo's book page summaries answer (the reference design's own data).
DEMO_SUMMARY_QUERIES = (
    "reading status and ratings of the books",
    "how many books are completed, reading or unread",
    "which genres are on the shelf",
)


def ranking(findings: list[Any], keys: dict[int, str]) -> list[str]:
    """The keys of a reply's findings, in order."""
    return [keys[f.id] for f in findings]


def reciprocal_rank(ranked: list[str], relevant: frozenset[str]) -> float:
    """1 / the rank of the first relevant key (0 when none is there)."""
    return next((1.0 / (i + 1) for i, key in enumerate(ranked) if key in relevant), 0.0)


def fresh_project() -> str:
    """A project name of its own for one test's session."""
    return f"judged-{uuid.uuid4().hex[:8]}"
