"""Use cases of the AMCS thoughts dialect (seed 004) over the same memory store."""

from __future__ import annotations

import json
import uuid
from typing import Any

from app.core import budget
from app.core.context import CallContext
from app.core.embeddings.calls import QueuedVectors, query_vector
from app.core.errors import NotFound, TooLarge
from app.core.repository import ProjectRepository
from app.memory import service_common as common
from app.memory import thresholds
from app.memory.repository import MemoryRepository, Scope
from app.memory.schemas import RetrievalMode, SearchMode, Signal, compact_time, round_score
from app.memory.schemas_thoughts import (
    ArchiveThoughtIn,
    BackfillFailure,
    BackfillIn,
    BackfillOut,
    CaptureThoughtIn,
    CaptureThoughtOut,
    CitedItem,
    CountItem,
    DeleteThoughtOut,
    ListThoughtsIn,
    ListThoughtsOut,
    ProjectContextIn,
    ProjectContextOut,
    RecallContextIn,
    RecallContextOut,
    RelatedThoughtsIn,
    RelatedThoughtsOut,
    SearchThoughtsIn,
    SearchThoughtsOut,
    SummarizeThoughtsIn,
    SummarizeThoughtsOut,
    ThoughtHit,
    ThoughtMetadata,
    ThoughtOut,
    ThoughtResultOut,
    ThoughtStatsIn,
    ThoughtStatsOut,
    UpdateThoughtIn,
    UpdateThoughtOut,
)
from app.memory.service import store_summary, summary_passages
from app.memory.service_backfill import backfill
from app.memory.service_search import Retrieval, build_context, clip, retrieve
from app.memory.summarize import short_ids
from app.memory.summarize import summarize as make_summary

MAX_METADATA_BYTES = 16_384


def thought_out(row: dict[str, Any]) -> ThoughtOut:
    """API shape of a memory row."""
    return ThoughtOut(
        id=str(row["id"]),
        content=row["content"],
        project=row["project"],
        metadata=row["metadata"],
        memory_type=row["memory_type"],
        kind=row["kind"],
        tags=row["tags"],
        archived=row["archived"],
        has_embedding=bool(row.get("has_embedding")),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _metadata_json(metadata: ThoughtMetadata | None) -> str:
    data = metadata.model_dump(mode="json", exclude_none=True) if metadata is not None else {}
    text = json.dumps(data, ensure_ascii=False)
    if len(text.encode()) > MAX_METADATA_BYTES:
        raise TooLarge(f"metadata is larger than {MAX_METADATA_BYTES} bytes")
    return text


def _check_size(ctx: CallContext, content: str) -> None:
    cap = common.settings(ctx).memory_max_thought_chars
    if len(content) > cap:
        raise TooLarge(
            f"content has {len(content)} characters; the limit for one thought is {cap}",
            suggestions=["Use push for long documents: it chunks them"],
        )


async def _row(ctx: CallContext, memory_id: uuid.UUID) -> dict[str, Any]:
    row = (await MemoryRepository(ctx.session).fetch([memory_id], ctx.embedder.model)).get(memory_id)
    if row is None or not common.visible(ctx, row):
        raise NotFound(
            f"No thought with id {memory_id}", suggestions=["Find ids with list_thoughts or search_thoughts"]
        )
    return row


async def capture(ctx: CallContext, args: CaptureThoughtIn) -> CaptureThoughtOut:
    """Store a thought and queue its vector."""
    _check_size(ctx, args.content)
    project = await common.project_for_write(ctx, args.project)
    coll = await common.collection_for_write(ctx, None)
    repo = MemoryRepository(ctx.session)
    mid = uuid.uuid4()
    await repo.insert_memories(
        [
            {
                "id": mid,
                "project_id": project.id,
                "collection_id": coll.id,
                "kind": "thought",
                "memory_type": "episodic",
                "content": args.content,
                "content_hash": common.content_hash(args.content),
                "tags": [],
                "metadata": _metadata_json(args.metadata),
                "source_uri": None,
                "document_id": None,
                "chunk_index": None,
                "summary_key": None,
            }
        ]
    )
    await common.queue_vectors(ctx, [mid])
    ctx.after_commit(_report_embedded)
    return CaptureThoughtOut(thought=thought_out(await _row(ctx, mid)), embedded=False, model=ctx.embedder.model)


async def _report_embedded(out: Any) -> Any:
    """After the commit (and the wait, if any): whether the thought's vector is stored by now."""
    done = out.embedding == "done"
    return out.model_copy(update={"embedded": done, "thought": out.thought.model_copy(update={"has_embedding": done})})


async def _report_re_embedded(out: Any) -> Any:
    done = out.embedding == "done"
    return out.model_copy(
        update={"re_embedded": done, "thought": out.thought.model_copy(update={"has_embedding": done})}
    )


async def get(ctx: CallContext, memory_id: uuid.UUID) -> ThoughtResultOut:
    """One thought by id."""
    return ThoughtResultOut(thought=thought_out(await _row(ctx, memory_id)))


async def list_thoughts(ctx: CallContext, args: ListThoughtsIn) -> ListThoughtsOut:
    """Thoughts newest first, filtered in SQL."""
    exists, project_id = await common.project_filter(ctx, args.project)
    if not exists:
        return ListThoughtsOut(thoughts=[], total=0)
    scope = Scope(
        project_id=project_id,
        thought_type=args.type,
        topic=args.topic,
        person=args.person,
        days=args.days,
        include_archived=args.include_archived,
    )
    repo = MemoryRepository(ctx.session)
    rows = await repo.list_memories(scope, ctx.embedder.model, args.limit, args.offset)
    total = await repo.count(scope)
    nxt = args.offset + len(rows)
    return ListThoughtsOut(
        thoughts=[thought_out(r) for r in rows], total=total, next_offset=nxt if nxt < total else None
    )


async def update(ctx: CallContext, args: UpdateThoughtIn) -> UpdateThoughtOut:
    """Change content (its vector is queued again), metadata or project of a thought."""
    row = await _row(ctx, args.id)
    repo = MemoryRepository(ctx.session)
    values: dict[str, Any] = {}
    if args.metadata is not None:
        values["metadata"] = _metadata_json(args.metadata)
    if args.project is not None and args.project != row["project"]:
        values["project_id"] = (await common.project_for_write(ctx, args.project)).id
    changed = args.content is not None and args.content != row["content"]
    if changed and args.content is not None:
        _check_size(ctx, args.content)
        values["content"], values["content_hash"] = args.content, common.content_hash(args.content)
    if values:
        await repo.update_memory(args.id, values)
    if changed and args.content is not None:
        await repo.drop_vectors(args.id)
        await common.queue_vectors(ctx, [args.id])
        ctx.after_commit(_report_re_embedded)
    return UpdateThoughtOut(thought=thought_out(await _row(ctx, args.id)), re_embedded=False)


async def archive(ctx: CallContext, args: ArchiveThoughtIn) -> ThoughtResultOut:
    """Archive (hide from searches and listings) or restore a thought."""
    await _row(ctx, args.id)
    await MemoryRepository(ctx.session).update_memory(args.id, {"archived": args.archived})
    return ThoughtResultOut(thought=thought_out(await _row(ctx, args.id)))


async def delete(ctx: CallContext, memory_id: uuid.UUID) -> DeleteThoughtOut:
    """Delete a thought and its vectors."""
    await _row(ctx, memory_id)
    deleted = await MemoryRepository(ctx.session).delete_memories([memory_id])
    return DeleteThoughtOut(id=str(memory_id), deleted=deleted > 0)


def _hits(found: Retrieval, rows: dict[uuid.UUID, dict[str, Any]], cap: int, explain: bool) -> list[ThoughtHit]:
    """The hits as replies show them: empty metadata, a false `truncated` and (unless asked) the signals
    left out."""
    out = []
    for hit in found.hits:
        row = rows.get(hit.id)
        if row is None:
            continue
        body, cut = clip(row["content"], cap, "tokens")
        out.append(
            ThoughtHit(
                id=str(hit.id),
                content=body,
                truncated=True if cut else None,
                similarity=round_score(hit.score),
                embedding=None if row.get("has_embedding") else "pending",
                project=row["project"],
                metadata=row["metadata"] or None,
                created_at=compact_time(row["created_at"]),
                signals=(
                    {
                        k: Signal(rank=int(v["rank"]) if "rank" in v else None, score=round_score(v["score"]))
                        for k, v in hit.signals.items()
                    }
                    if explain
                    else None
                ),
            )
        )
    return out


async def _search(
    ctx: CallContext,
    project: str | None,
    query: str,
    *,
    limit: int,
    threshold: float | None,
    mode: SearchMode = "hybrid",
    include_archived: bool = False,
    exclude: uuid.UUID | None = None,
    kinds: list[str] | None = None,
    days: int | None = None,
) -> tuple[Retrieval, dict[uuid.UUID, dict[str, Any]]]:
    qvec = await query_vector(ctx, query, "memory search") if mode != "lexical" else None
    defaults = await thresholds.defaults(ctx.embedder, common.settings(ctx).search_default_score_threshold)
    thr = defaults if threshold is None else threshold
    exists, project_id = await common.project_filter(ctx, project)
    if not exists:
        return Retrieval([], mode, threshold=defaults.of(mode) if threshold is None else threshold), {}
    scope = Scope(project_id=project_id, include_archived=include_archived, exclude_id=exclude, kinds=kinds, days=days)
    repo = MemoryRepository(ctx.session)
    found = await retrieve(
        repo,
        ctx.embedder,
        common.settings(ctx),
        scope,
        query,
        mode=mode,
        limit=limit,
        threshold=thr,
        vector=qvec,
        embed_query=False,
    )
    return found, await repo.fetch([h.id for h in found.hits], ctx.embedder.model)


async def search(ctx: CallContext, args: SearchThoughtsIn) -> SearchThoughtsOut:
    """Hybrid/semantic/lexical search of thoughts with lexical fallback."""
    found, rows = await _search(
        ctx,
        args.project,
        args.query,
        limit=args.limit,
        threshold=args.threshold,
        mode=args.mode,
        include_archived=args.include_archived,
    )
    out = SearchThoughtsOut(
        results=_hits(found, rows, common.settings(ctx).memory_result_tokens, args.explain),
        retrieval_mode=found.retrieval_mode,
        model=ctx.embedder.model,
        threshold=found.threshold,
        notice=found.notice("threshold"),
    )
    return budget.measured(out, "tokens")


def _cited(found: Retrieval, rows: dict[uuid.UUID, dict[str, Any]]) -> list[CitedItem]:
    return [
        CitedItem(id=str(h.id), score=round_score(h.score), created_at=compact_time(rows[h.id]["created_at"]))
        for h in found.hits
        if h.id in rows
    ]


async def recall(ctx: CallContext, args: RecallContextIn) -> RecallContextOut:
    """A compact context block for a query, citing each thought as [n], its position in `items`."""
    found, rows = await _search(ctx, args.project, args.query, limit=args.limit, threshold=None)
    items = _cited(found, rows)
    context, truncated = build_context(
        [(str(n), rows[uuid.UUID(i.id)]["content"], None) for n, i in enumerate(items, start=1)], args.max_chars
    )
    out = RecallContextOut(
        context=context,
        items=items,
        truncated=truncated,
        retrieval_mode=found.retrieval_mode,
        notice=found.notice("search_thoughts' threshold"),
    )
    return budget.measured(out, "tokens")


async def project_context(ctx: CallContext, args: ProjectContextIn) -> ProjectContextOut:
    """Recent thoughts of one project plus (with a query) the most relevant others."""
    ctx.project(args.project)
    project = await ProjectRepository(ctx.session).get(args.project)
    if project is None:
        raise NotFound(f"No project named '{args.project}'", suggestions=["Create it with create_project"])
    repo = MemoryRepository(ctx.session)
    scope = Scope(project_id=project.id)
    recent_rows = await repo.list_memories(scope, ctx.embedder.model, args.limit)
    recent = [CitedItem(id=str(r["id"]), score=1.0, created_at=compact_time(r["created_at"])) for r in recent_rows]
    texts = {str(r["id"]): r["content"] for r in recent_rows}
    times = {str(r["id"]): r["created_at"] for r in recent_rows}
    relevant: list[CitedItem] = []
    mode: RetrievalMode | None = None
    if args.query:
        found, rows = await _search(ctx, args.project, args.query, limit=args.limit * 2, threshold=None)
        mode = found.retrieval_mode
        relevant = [i for i in _cited(found, rows) if i.id not in texts][: args.limit]
        texts.update({i.id: rows[uuid.UUID(i.id)]["content"] for i in relevant})
        times.update({i.id: rows[uuid.UUID(i.id)]["created_at"] for i in relevant})
    half = args.max_chars // 2 if relevant else args.max_chars
    recent_block, _ = build_context([(i.id, texts[i.id], times[i.id]) for i in recent], half)
    parts = [f"Recent thoughts of {args.project}:\n{recent_block}" if recent_block else ""]
    if relevant:
        rel_block, _ = build_context([(i.id, texts[i.id], times[i.id]) for i in relevant], args.max_chars - half)
        parts.append(f"Relevant to the query:\n{rel_block}")
    return ProjectContextOut(
        project=args.project,
        recent=recent,
        relevant=relevant,
        context="\n\n".join(p for p in parts if p),
        retrieval_mode=mode,
        total_thoughts=await repo.count(scope),
    )


async def summarize(ctx: CallContext, args: SummarizeThoughtsIn) -> SummarizeThoughtsOut:
    """Summarise the thoughts relevant to a query, or the most recent ones; the summary is stored."""
    cfg = common.settings(ctx)
    repo = MemoryRepository(ctx.session)
    mode: RetrievalMode | None = None
    why: str | None = None
    kinds = ["thought", "chunk"]
    if args.query:
        found, rows = await _search(
            ctx, args.project, args.query, limit=args.limit, threshold=None, kinds=kinds, days=args.days
        )
        mode, why = found.retrieval_mode, found.notice("search_thoughts' threshold")
        picked = [rows[h.id] for h in found.hits if h.id in rows]
        # A thought whose metadata names the query as a topic is about it, whatever its words say: those
        # come first, then what retrieval found.
        exists, project_id = await common.project_filter(ctx, args.project)
        scope = Scope(project_id=project_id, kinds=kinds, days=args.days, topic_nocase=args.query.strip())
        tagged = await repo.list_memories(scope, ctx.embedder.model, args.limit) if exists else []
        merged = {r["id"]: r for r in [*tagged, *picked]}
        picked = list(merged.values())[: args.limit]
    else:
        exists, project_id = await common.project_filter(ctx, args.project)
        picked = (
            []
            if not exists
            else list(
                reversed(
                    await repo.list_memories(
                        Scope(project_id=project_id, kinds=kinds, days=args.days), ctx.embedder.model, args.limit
                    )
                )
            )
        )
    if not picked:
        raise NotFound(f"No thoughts match{': ' + why if why else ''}", suggestions=["Drop the query or widen days"])
    # Ranking sentences (the model) or asking an LLM provider runs with no transaction open; the
    # summary is stored in a fresh one.
    passages = await summary_passages(repo, picked)
    result = await ctx.without_transaction(
        lambda: make_summary(
            ctx.embedder,
            cfg,
            passages,
            strategy=args.strategy,
            provider=args.provider,
            model=args.model,
            max_words=args.max_words or cfg.summarization_max_words,
        )
    )
    project = await common.project_for_write(ctx, args.project)
    coll = await common.collection_for_write(ctx, None)
    source_ids = [str(r["id"]) for r in picked]
    key = common.key_of("summarize_thoughts", args.project, args.query, args.days, args.limit)
    summary_id = await store_summary(
        ctx,
        repo,
        project.id,
        coll.id,
        key,
        result.text,
        source_ids,
        [],
        {
            "strategy": result.strategy,
            "provider": result.provider,
            "model": result.model,
            "query": args.query,
            "days": args.days,
        },
    )
    out = SummarizeThoughtsOut(
        summary=result.text,
        source_memory_ids=short_ids(source_ids),
        upserted_memory_id=str(summary_id),
        strategy=result.strategy,
        provider=result.provider,
        model=result.model,
        retrieval_mode=mode,
    )
    return budget.measured(out, "tokens")


async def related(ctx: CallContext, args: RelatedThoughtsIn) -> RelatedThoughtsOut:
    """Nearest thoughts to one thought by its stored vector; full text of its content when it has none."""
    row = await _row(ctx, args.id)
    repo = MemoryRepository(ctx.session)
    scope = Scope(project_id=row["project_id"], include_archived=args.include_archived, exclude_id=args.id)
    vector = await repo.vector_of(args.id, ctx.embedder.model)
    query = " ".join(row["content"].split()[:64])
    cfg = common.settings(ctx)
    if vector is not None:
        found = await retrieve(
            repo, ctx.embedder, cfg, scope, query, mode="semantic", limit=args.limit, threshold=0.0, vector=vector
        )
    else:
        found = await retrieve(repo, ctx.embedder, cfg, scope, query, mode="lexical", limit=args.limit, threshold=0.0)
        found.retrieval_mode = "lexical_fallback"
    rows = await repo.fetch([h.id for h in found.hits], ctx.embedder.model)
    out = RelatedThoughtsOut(
        id=str(args.id),
        results=_hits(found, rows, cfg.memory_result_tokens, args.explain),
        retrieval_mode=found.retrieval_mode,
    )
    return budget.measured(out, "tokens")


def _counts(pairs: list[tuple[str, int]]) -> list[CountItem]:
    return [CountItem(value=v, count=n) for v, n in pairs]


async def stats(ctx: CallContext, args: ThoughtStatsIn) -> ThoughtStatsOut:
    """Counts by type, memory type, topic and person, and the memories missing an active-model vector."""
    exists, project_id = await common.project_filter(ctx, args.project)
    model = ctx.embedder.model
    if not exists:
        return ThoughtStatsOut(
            total=0,
            active=0,
            archived=0,
            by_type=[],
            by_memory_type=[],
            top_topics=[],
            top_people=[],
            missing_embeddings=0,
            model=model,
        )
    repo = MemoryRepository(ctx.session)
    total, live, facets = await repo.facet_counts(Scope(project_id=project_id, include_archived=True))

    return ThoughtStatsOut(
        total=total,
        active=live,
        archived=total - live,
        by_type=_counts(facets["type"]),
        by_memory_type=_counts(facets["memory_type"]),
        top_topics=_counts(facets["topics"]),
        top_people=_counts(facets["people"]),
        missing_embeddings=await repo.count_missing(model, project_id),
        model=model,
    )


async def resolve_project_ref(ctx: CallContext, ref: str | None) -> uuid.UUID | None:
    """A project given by name or id (None: every project, or the bound key's)."""
    ref = ref or ctx.bound_project
    if ref is None:
        return None
    projects = ProjectRepository(ctx.session)
    row = await projects.get(ref)
    if row is None:
        try:
            as_id = uuid.UUID(ref)
        except ValueError:
            as_id = None
        if as_id is not None:
            row = await projects.by_id(as_id)
    if row is None:
        raise NotFound(f"No project '{ref}'", suggestions=["List projects with list_projects"])
    ctx.project(row.name)
    return row.id


async def backfill_embeddings(ctx: CallContext, args: BackfillIn) -> BackfillOut:
    """Queue memories missing a vector of the active model; the embedding queue makes the vectors."""
    project_id = await resolve_project_ref(ctx, args.project)

    async def progress(done: int, total: int) -> None:
        await ctx.progress(done, total, f"{done} scanned")

    report = await backfill(
        ctx.session,
        ctx.embedder.model,
        project_id=project_id,
        limit=args.limit,
        batch_size=args.batch_size,
        include_archived=args.include_archived,
        older_than_days=args.older_than_days,
        dry_run=args.dry_run,
        progress=progress,
    )
    queued = QueuedVectors.of(ctx)
    queued.ids.extend(report.job_ids)

    async def report_embedded(out: Any) -> Any:
        # After the commit (and the wait, if any): the queued rows whose vector is stored by now, and
        # those that failed (refused by the provider, or queued after a failed try while it is down).
        update: dict[str, Any] = {}
        if queued.waited is not None:
            update["embedded"] = len(report.job_ids) - len(queued.waited.remaining)
        if queued.pending is not None and queued.pending.failed_rows:
            failures = queued.pending.failures.values()
            update["failed"] = queued.pending.failed_rows
            update["failures"] = [BackfillFailure(id=ref, error=error[:200]) for _, ref, error in failures][:20]
        return out.model_copy(update=update) if update else out

    if report.job_ids:
        ctx.after_commit(report_embedded)
    return BackfillOut.model_validate(report.public())
