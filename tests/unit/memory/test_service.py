"""app/memory/service.py: the push plan (pure), and summaries with a real call context, the local model
and a database of their own: a chunked document quoted in whole sentences only, citations by short
ids, the reply's tokens."""

from __future__ import annotations

import random
import uuid
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import nupunkt
from sqlalchemy import text

from app.core import budget
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.memory import service
from app.memory.config import MemorySettings
from app.memory.schemas import PushIn, SummarizeIn, SummarizeOut, TimeRange
from app.memory.service import plan_push
from tests.support.calls import service_call
from tests.support.databases import database_fixture


def _old(content_hash: str, index: int | None) -> dict[str, Any]:
    return {"id": uuid.uuid4(), "content_hash": content_hash, "chunk_index": index}


def test_a_new_text_inserts_each_chunk_once_and_skips_known_ones() -> None:
    plan = plan_push(["a", "b", "a", "c"], known={"c"}, old=[])
    assert plan.inserts == [(0, "a"), (1, "b")]
    assert (plan.kept, plan.rewrites, plan.removed, plan.skipped) == ([], [], [], 2)


def test_a_source_pushed_again_keeps_its_chunks_and_writes_over_the_leftovers_in_order() -> None:
    same, late, early = _old("b", 1), _old("x", 5), _old("y", 2)
    plan = plan_push(["n1", "b", "n2", "n3"], known={"b", "x", "y"}, old=[same, late, early])
    assert plan.kept == [(same["id"], 1)]
    # The leftovers are reused in their chunk order: index 2, then 5; the third new chunk is a new row.
    assert plan.rewrites == [(early["id"], 0, "n1"), (late["id"], 2, "n2")]
    assert plan.inserts == [(3, "n3")] and plan.removed == [] and plan.skipped == 1


def test_a_shorter_text_removes_what_is_left_over() -> None:
    first, second, third = _old("a", 0), _old("b", 1), _old("c", None)
    plan = plan_push(["a", "z"], known={"a", "b", "c"}, old=[first, second, third])
    assert plan.kept == [(first["id"], 0)]
    # A row without an index sorts as index 0, so it is the one written over.
    assert plan.rewrites == [(third["id"], 1, "z")] and plan.removed == [second["id"]] and plan.inserts == []


# --- summarize, with a real call context, the local model and a database of its own ---------------

db = database_fixture(["memory"])
WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
EMBEDDER = LocalOnnxEmbedder()
WINDOW = TimeRange(start=datetime.now(UTC) - timedelta(days=1), end=datetime.now(UTC) + timedelta(days=1))


def call(db: Database) -> AbstractAsyncContextManager[CallContext]:
    return service_call(db, WRITER, embedder=EMBEDDER, feature_settings={MemorySettings: MemorySettings()})


def _long_sentences(n: int) -> list[str]:
    """Sentences of 5 to 120 words, so chunks of 200 tokens end mid-sentence where no end is near."""
    rnd = random.Random(7)
    words = ["alpha", "beta", "eu-west", "zone", "cache", "v2.3.1", "api.example.com", "*.internal", "3.5 GB"]
    return [
        f"Sentence number {i} talks about the region "
        + " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 120)))
        + "."
        for i in range(n)
    ]


async def _summarize(db: Database, project: str, **args: Any) -> SummarizeOut:
    async with call(db) as ctx:
        return await service.summarize(
            ctx, SummarizeIn(project_id=project, time_range=WINDOW, strategy="extractive", **args)
        )


async def test_a_chunked_document_is_summarised_in_whole_sentences(db: Database) -> None:
    sentences = _long_sentences(30)
    async with call(db) as ctx:
        document = PushIn.model_validate({"text": " ".join(sentences), "project": "long", "type": "episodic"})
        pushed = await service.push(ctx, document)
    assert pushed.inserted >= 20  # chunks overlap and many end mid-sentence
    everything = await _summarize(db, "long", max_words=5000, limit=100)
    # every chunk read: the document's own sentences, each once, in order
    assert everything.summary == " ".join(sentences)
    # a window that reads some chunks only: never a piece of a sentence
    some = await _summarize(db, "long", max_words=5000, limit=9)
    quoted = nupunkt.sent_tokenize(some.summary)
    assert quoted and all(s in sentences for s in quoted), [s for s in quoted if s not in sentences]


async def test_a_summary_cites_short_ids_and_states_its_tokens(db: Database) -> None:
    for i in range(40):
        async with call(db) as ctx:
            note = f"Note {i}: the wildcard cert for *.internal expires every 60 days; v2.3.{i} renews it."
            await service.push(ctx, PushIn.model_validate({"text": note, "project": "cite", "type": "episodic"}))
    out = await _summarize(db, "cite", max_words=60)
    async with call(db) as ctx:
        stored = await ctx.session.scalar(
            text("SELECT metadata -> 'source_memory_ids' FROM memories WHERE id = :id"),
            {"id": uuid.UUID(out.upserted_memory_id)},
        )
    assert len(stored) == len(out.source_memory_ids) == 40
    # each cited id is the start of one stored full id, and tells them apart
    assert all(len(s) == 8 and full.startswith(s) for s, full in zip(out.source_memory_ids, stored, strict=True))
    assert len(set(out.source_memory_ids)) == 40
    sent = budget.tokens_of(out.model_dump(mode="json"))
    assert out.tokens in (sent, sent - 1)  # the budget's own rule for the field counting itself
    full = budget.tokens_of(out.model_copy(update={"source_memory_ids": stored}).model_dump(mode="json"))
    assert sent < full * 0.6, (sent, full)
    assert "*.internal expires every 60 days" in out.summary and " internal expires" not in out.summary
