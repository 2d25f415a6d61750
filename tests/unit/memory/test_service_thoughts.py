"""app/memory/service_thoughts.py with a real call context and the real local model on a database of its
own: a thought captured with its metadata (size limits with their codes), listed with filters, updated
(a new text loses its vector and is queued again), moved, archived and deleted; searches and recall
cite what they found; project context, stats, related thoughts by vector or by words, summaries stored
once per key, the backfill queueing what lacks a vector, and a bound key seeing nothing elsewhere; with
the embedding provider unreachable, writes and the backfill name its failure in their replies."""

from __future__ import annotations

import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from pydantic_settings import BaseSettings
from sqlalchemy import text

from app.core.config import Settings
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.queue import EmbeddingQueue
from app.core.errors import NotFound, TooLarge
from app.core.executor import run_commit_hooks
from app.memory import service
from app.memory import service_thoughts as thoughts
from app.memory.config import MemorySettings
from app.memory.schemas import PushIn
from app.memory.schemas_thoughts import (
    ArchiveThoughtIn,
    BackfillIn,
    CaptureThoughtIn,
    CaptureThoughtOut,
    ListThoughtsIn,
    ProjectContextIn,
    RecallContextIn,
    RelatedThoughtsIn,
    SearchThoughtsIn,
    SummarizeThoughtsIn,
    ThoughtMetadata,
    ThoughtStatsIn,
    UpdateThoughtIn,
)
from app.memory.service_common import EMBEDDING_TARGET
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
ELSEWHERE = Principal(key_id="k2", name="bound", scopes=frozenset({"write"}), project="elsewhere")
EMBEDDER = LocalOnnxEmbedder()


def test_metadata_json_keeps_what_is_set_and_refuses_too_much() -> None:
    assert thoughts._metadata_json(None) == "{}"
    assert thoughts._metadata_json(ThoughtMetadata(type="idea", topics=["río"])) == (
        '{"type": "idea", "topics": ["río"], "people": [], "action_items": []}'
    )
    huge = ThoughtMetadata(action_items=["x" * 1000] * 20)
    with pytest.raises(TooLarge, match="metadata is larger than 16384 bytes") as err:
        thoughts._metadata_json(huge)
    assert err.value.code == 4130


db = database_fixture(["memory"])


def call(db: Database, principal: Principal = WRITER) -> AbstractAsyncContextManager[CallContext]:
    memory = MemorySettings(memory_max_thought_chars=200)
    return service_call(db, principal, embedder=EMBEDDER, feature_settings={MemorySettings: memory})


async def _capture(db: Database, project: str, content: str, **meta: object) -> uuid.UUID:
    async with call(db) as ctx:
        metadata = ThoughtMetadata.model_validate(meta) if meta else None
        out = await thoughts.capture(ctx, CaptureThoughtIn(content=content, project=project, metadata=metadata))
    return uuid.UUID(out.thought.id)


async def _embed(db: Database, memory_id: uuid.UUID) -> None:
    """Store the thought's vector as the embedding queue would."""
    async with call(db) as ctx:
        content = await ctx.session.scalar(text("SELECT content FROM memories WHERE id = :id"), {"id": memory_id})
        vector = await EMBEDDER.embed_one(str(content))
        await ctx.session.execute(
            text("INSERT INTO memory_embeddings (memory_id, model, dim, embedding) VALUES (:m, :model, :d, :v)"),
            {"m": memory_id, "model": EMBEDDER.model, "d": len(vector), "v": vector},
        )


async def test_a_capture_stores_the_thought_and_queues_its_vector(db: Database) -> None:
    async with call(db) as ctx:
        meta = ThoughtMetadata(type="idea", topics=["gardens"], people=["ana"])
        out = await thoughts.capture(
            ctx, CaptureThoughtIn(content="Plant tomatoes in May", project="cap", metadata=meta)
        )
        t = out.thought
        assert (t.content, t.project, t.kind, t.memory_type, t.archived) == (
            "Plant tomatoes in May",
            "cap",
            "thought",
            "episodic",
            False,
        )
        assert t.metadata["topics"] == ["gardens"] and not t.has_embedding and out.model == EMBEDDER.model
        queued = await ctx.session.scalar(
            text("SELECT count(*) FROM embedding_queue WHERE target = 'memory' AND ref = :r"), {"r": t.id}
        )
        assert queued == 1 and len(ctx.commit_hooks) >= 1
        with pytest.raises(TooLarge, match="the limit for one thought is 200") as err:
            await thoughts.capture(ctx, CaptureThoughtIn(content="x" * 201, project="cap"))
        assert err.value.code == 4130
    reported = await thoughts._report_embedded(out.model_copy(update={"embedding": "done"}))
    assert reported.embedded and reported.thought.has_embedding
    pending = await thoughts._report_embedded(out.model_copy(update={"embedding": "pending"}))
    assert isinstance(pending, CaptureThoughtOut) and not pending.embedded


async def test_thoughts_are_listed_newest_first_with_their_filters(db: Database) -> None:
    first = await _capture(db, "lst", "first thought", type="task", topics=["a"], people=["bo"])
    second = await _capture(db, "lst", "second thought", type="idea", topics=["b"])
    third = await _capture(db, "lst", "third thought", type="idea", topics=["a"])
    async with call(db) as ctx:
        await thoughts.archive(ctx, ArchiveThoughtIn(id=third))
        page = await thoughts.list_thoughts(ctx, ListThoughtsIn(project="lst", limit=1))
        assert [t.id for t in page.thoughts] == [str(second)] and page.total == 2 and page.next_offset == 1
        every = await thoughts.list_thoughts(ctx, ListThoughtsIn(project="lst", include_archived=True))
        assert [t.id for t in every.thoughts] == [str(third), str(second), str(first)] and every.next_offset is None
        ideas = await thoughts.list_thoughts(ctx, ListThoughtsIn(project="lst", type="idea", include_archived=True))
        assert {t.id for t in ideas.thoughts} == {str(second), str(third)}
        assert [
            t.id for t in (await thoughts.list_thoughts(ctx, ListThoughtsIn(project="lst", topic="a"))).thoughts
        ] == [str(first)]
        assert (await thoughts.list_thoughts(ctx, ListThoughtsIn(project="lst", person="bo", days=1))).total == 1
        assert (await thoughts.list_thoughts(ctx, ListThoughtsIn(project="no-such"))).total == 0
    async with call(db, ELSEWHERE) as ctx:
        assert (await thoughts.list_thoughts(ctx, ListThoughtsIn(project=None))).thoughts == []


async def test_update_moves_and_re_queues_archive_and_delete(db: Database) -> None:
    mid = await _capture(db, "upd", "the old text")
    await _embed(db, mid)
    async with call(db) as ctx:
        assert (await thoughts.get(ctx, mid)).thought.has_embedding
        same = await thoughts.update(
            ctx, UpdateThoughtIn(id=mid, content="the old text", metadata=ThoughtMetadata(type="x"), project=None)
        )
        assert same.thought.has_embedding and same.thought.metadata["type"] == "x"  # same text: vector kept
        assert ctx.commit_hooks == []
        moved = await thoughts.update(ctx, UpdateThoughtIn(id=mid, content="the new text", project="upd-moved"))
        assert moved.thought.content == "the new text" and moved.thought.project == "upd-moved"
        assert not moved.thought.has_embedding and not moved.re_embedded
        assert thoughts._report_re_embedded in ctx.commit_hooks  # reports the new vector after the commit
        with pytest.raises(TooLarge):
            await thoughts.update(ctx, UpdateThoughtIn(id=mid, content="y" * 500, project=None))
        archived = await thoughts.archive(ctx, ArchiveThoughtIn(id=mid))
        assert archived.thought.archived
        assert not (await thoughts.archive(ctx, ArchiveThoughtIn(id=mid, archived=False))).thought.archived
    async with call(db, ELSEWHERE) as ctx:
        with pytest.raises(NotFound, match=f"No thought with id {mid}") as err:
            await thoughts.get(ctx, mid)
        assert err.value.code == 4002
        with pytest.raises(NotFound):
            await thoughts.delete(ctx, mid)
    async with call(db) as ctx:
        gone = await thoughts.delete(ctx, mid)
        assert gone.deleted and gone.id == str(mid)
        with pytest.raises(NotFound):
            await thoughts.get(ctx, mid)


async def test_search_and_recall_cite_what_they_found(db: Database) -> None:
    ids = [
        await _capture(db, "find", "The harbour crane broke during the storm", type="incident"),
        await _capture(db, "find", "Recipe: lentil soup with cumin and lemon"),
        await _capture(db, "find", "Storm warnings close the harbour every winter"),
    ]
    for mid in ids:
        await _embed(db, mid)
    async with call(db) as ctx:
        words = await thoughts.search(
            ctx, SearchThoughtsIn(query="harbour storm", project="find", mode="lexical", explain=True)
        )
        assert {h.id for h in words.results} == {str(ids[0]), str(ids[2])} and words.retrieval_mode == "lexical"
        assert words.tokens > 0 and all(h.signals for h in words.results)
        by_id = {h.id: h for h in words.results}
        assert (by_id[str(ids[0])].metadata or {}).get("type") == "incident"
        assert by_id[str(ids[2])].metadata is None  # empty metadata is left out of a hit
        meaning = await thoughts.search(ctx, SearchThoughtsIn(query="soup for dinner", project="find", mode="semantic"))
        assert meaning.results[0].id == str(ids[1]) and meaning.results[0].signals is None
        assert (await thoughts.search(ctx, SearchThoughtsIn(query="harbour", project="nowhere"))).results == []
        recalled = await thoughts.recall(ctx, RecallContextIn(query="storm in the harbour", project="find", limit=2))
        assert len(recalled.items) == 2 and recalled.context.startswith("[1] ")
        first_cited = uuid.UUID(recalled.items[0].id)
        assert first_cited in (ids[0], ids[2]) and "[2] " in recalled.context
        context = await thoughts.project_context(ctx, ProjectContextIn(project="find", query="lentils", limit=1))
        assert [i.id for i in context.recent] == [str(ids[2])] and context.total_thoughts == 3
        assert context.relevant and context.relevant[0].id == str(ids[1])
        assert context.context.startswith("Recent thoughts of find:") and "Relevant to the query:" in context.context
        with pytest.raises(NotFound, match="No project named 'ghost'"):
            await thoughts.project_context(ctx, ProjectContextIn(project="ghost"))


async def test_related_by_vector_or_by_words_and_stats(db: Database) -> None:
    a = await _capture(db, "rel", "Bees pollinate the apple trees in spring", type="note", topics=["bees"])
    b = await _capture(db, "rel", "Honey bees swarm when the hive is crowded", type="note", people=["eva"])
    c = await _capture(db, "rel", "Quarterly tax forms are due in April")
    await _embed(db, a)
    await _embed(db, b)
    await _embed(db, c)
    lone = await _capture(db, "rel", "bees without a vector")
    async with call(db) as ctx:
        near = await thoughts.related(ctx, RelatedThoughtsIn(id=a, limit=2))
        assert near.retrieval_mode == "semantic" and near.results[0].id == str(b)
        assert str(a) not in {h.id for h in near.results}
        fallback = await thoughts.related(ctx, RelatedThoughtsIn(id=lone))
        assert fallback.retrieval_mode == "lexical_fallback" and str(lone) not in {h.id for h in fallback.results}
        await thoughts.archive(ctx, ArchiveThoughtIn(id=c))
        stats = await thoughts.stats(ctx, ThoughtStatsIn(project="rel"))
        assert (stats.total, stats.active, stats.archived, stats.missing_embeddings) == (4, 3, 1, 1)
        assert [(i.value, i.count) for i in stats.by_type] == [("note", 2)]
        assert [(i.value, i.count) for i in stats.top_topics] == [("bees", 1)] and stats.top_people[0].value == "eva"
        empty = await thoughts.stats(ctx, ThoughtStatsIn(project="no-such"))
        assert empty.total == 0 and empty.model == EMBEDDER.model


async def test_summaries_are_stored_once_per_key(db: Database) -> None:
    for i in range(3):
        await _capture(db, "sum", f"Meeting note {i}: the river project needs more funding and volunteers.")
    await _capture(db, "sum", "Unrelated: buy milk", topics=["River"])
    async with call(db) as ctx:
        first = await thoughts.summarize(ctx, SummarizeThoughtsIn(project="sum", strategy="extractive", limit=3))
    assert first.summary and len(first.source_memory_ids) == 3 and first.strategy == "extractive"
    assert first.retrieval_mode is None
    async with call(db) as ctx:
        again = await thoughts.summarize(ctx, SummarizeThoughtsIn(project="sum", strategy="extractive", limit=3))
        assert again.upserted_memory_id == first.upserted_memory_id  # the same key: one summary row
        kinds = await ctx.session.scalar(
            text("SELECT count(*) FROM memories WHERE kind = 'summary' AND id = :id"),
            {"id": uuid.UUID(first.upserted_memory_id)},
        )
        assert kinds == 1
    async with call(db) as ctx:
        topical = await thoughts.summarize(
            ctx, SummarizeThoughtsIn(project="sum", query="river", strategy="extractive")
        )
        # the reply cites short ids; the stored summary keeps the full ones
        contents = await ctx.session.scalars(
            text(
                "SELECT content FROM memories WHERE id::text IN (SELECT jsonb_array_elements_text("
                "metadata -> 'source_memory_ids') FROM memories WHERE id = :id)"
            ),
            {"id": uuid.UUID(topical.upserted_memory_id)},
        )
        picked = list(contents)
        assert "Unrelated: buy milk" in picked  # its topic names the query
        assert topical.upserted_memory_id != first.upserted_memory_id
    async with call(db) as ctx:
        with pytest.raises(NotFound, match="No thoughts match"):
            await thoughts.summarize(ctx, SummarizeThoughtsIn(project="sum-empty", strategy="extractive"))


async def test_backfill_queues_what_lacks_a_vector_in_the_named_project(db: Database) -> None:
    kept = await _capture(db, "fill", "one with a vector")
    await _embed(db, kept)
    missing = await _capture(db, "fill", "one without")
    async with call(db) as ctx:
        pid = await ctx.session.scalar(text("SELECT id FROM projects WHERE name = 'fill'"))
        assert await thoughts.resolve_project_ref(ctx, "fill") == pid
        assert await thoughts.resolve_project_ref(ctx, str(pid)) == pid
        assert await thoughts.resolve_project_ref(ctx, None) is None
        with pytest.raises(NotFound, match="No project 'nope'"):
            await thoughts.resolve_project_ref(ctx, "nope")
        dry = await thoughts.backfill_embeddings(ctx, BackfillIn(project="fill", dry_run=True))
        assert dry.dry_run and dry.sample_ids == [str(missing)] and dry.queued == 0
        await ctx.session.execute(text("DELETE FROM embedding_queue"))
        out = await thoughts.backfill_embeddings(ctx, BackfillIn(project="fill"))
        refs = await ctx.session.scalars(text("SELECT ref FROM embedding_queue WHERE target = 'memory'"))
        assert set(refs) == {str(missing)} and out.queued == 1 and not out.dry_run


async def _reply(ctx: CallContext, out: Any) -> dict[str, Any]:
    """The reply as the executor sends it: after the commit, through the call's after-commit hooks."""
    sent: dict[str, Any] = (await run_commit_hooks(ctx, out)).model_dump(mode="json")
    return sent


async def test_writes_and_the_backfill_name_the_provider_failure_while_it_is_down(db: Database) -> None:
    down = unreachable_embedder()  # a closed port: every request fails to connect
    settings = Settings(embedding_wait_seconds=5.0)
    queue = EmbeddingQueue(db, down, [EMBEDDING_TARGET], settings)
    memory: dict[type[BaseSettings], BaseSettings] = {MemorySettings: MemorySettings()}

    def call_down(args: Any) -> AbstractAsyncContextManager[CallContext]:
        return service_call(db, WRITER, embedder=down, settings=settings, feature_settings=memory, args=args)

    # a write that waits for its vector learns at once why it has none
    waits = CaptureThoughtIn(content="kept until the provider answers", project="down", wait_for_embedding=True)
    async with call_down(waits) as ctx:
        ctx.app.queue = queue
        out: Any = await thoughts.capture(ctx, waits)
    captured = await _reply(ctx, out)  # after the commit, as the executor runs the hooks
    state = captured["embedding"]
    assert isinstance(state, dict) and state["status"] == "pending" and captured["embedded"] is False, state
    assert "ConnectError" in state["provider_error"] and state["failing_since"]
    assert state["waiting"] >= 1 and state["failed"] >= 1
    # a write that does not wait: the queue knows the provider is down
    pushed = PushIn.model_validate({"text": "a document pushed during the outage", "project": "down"})
    async with call_down(pushed) as ctx:
        ctx.app.queue = queue
        out = await service.push(ctx, pushed)
    later = (await _reply(ctx, out))["embedding"]
    assert isinstance(later, dict) and later["failing_since"] == state["failing_since"]
    assert later["waiting"] >= 2 and "ConnectError" in later["provider_error"]
    # the backfill names the failure, counts what failed and samples it
    fill = BackfillIn(project="down")
    async with call_down(fill) as ctx:
        ctx.app.queue = queue
        out = await thoughts.backfill_embeddings(ctx, fill)
    report = await _reply(ctx, out)
    assert report["queued"] == 2 and report["failed"] >= 1 and report["failures"], report
    assert report["failures"][0]["id"] == captured["thought"]["id"]
    assert "ConnectError" in report["failures"][0]["error"]
    assert report["embedding"]["waiting"] >= 2 and "ConnectError" in report["embedding"]["provider_error"]
    # with the provider answering again the reply says "pending" and nothing more (a field only on failure)
    queue.outage = None
    another = PushIn.model_validate({"text": "another document", "project": "down"})
    async with call_down(another) as ctx:
        ctx.app.queue = queue
        out = await service.push(ctx, another)
    assert (await _reply(ctx, out))["embedding"] == "pending"
