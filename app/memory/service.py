"""Use cases of the Rusty Memory dialect (seed 001): push, search, summarize, collections, metrics, resources."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.core import budget
from app.core.context import CallContext
from app.core.embeddings.calls import query_vector
from app.core.errors import Forbidden, InvalidInput, NotFound, TooLarge, invalid_field
from app.core.repository import ProjectRepository
from app.memory import service_common as common
from app.memory import thresholds
from app.memory.chunking import Chunk, chunk_text
from app.memory.config import MemorySettings
from app.memory.fusion import Hit
from app.memory.models import MEMORY_TYPES
from app.memory.repository import MemoryRepository, Scope
from app.memory.schemas import (
    CollectionsOut,
    MetricsOut,
    NewCollectionIn,
    NewCollectionOut,
    PushIn,
    PushOut,
    SearchHit,
    SearchIn,
    SearchOut,
    Signal,
    SummarizeIn,
    SummarizeOut,
    TimeRange,
    compact_time,
    round_score,
)
from app.memory.service_search import cite, query_terms, retrieve
from app.memory.summarize import Passage, short_ids
from app.memory.summarize import summarize as make_summary


def _bad(field: str, message: str, rule: str = "value_error") -> InvalidInput:
    return invalid_field(field, f"Invalid arguments: {field}: {message}", rule=rule)


def _time_filter(tr: TimeRange | None) -> dict[str, str] | None:
    if tr is None or (tr.start is None and tr.end is None):
        return None
    out = {}
    if tr.start is not None:
        out["start"] = tr.start.isoformat()
    if tr.end is not None:
        out["end"] = tr.end.isoformat()
    return out


@dataclass
class PushPlan:
    """What a push does with each chunk of the text, given the chunks already stored: `kept` (id,
    position) are the source's chunks found again, `rewrites` (id, position, hash) its other chunks
    given new text, `inserts` (position, hash) new rows, `removed` the source's chunks left over;
    `skipped` counts chunks repeated in the text, kept, or already in the collection."""

    kept: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    rewrites: list[tuple[uuid.UUID, int, str]] = field(default_factory=list)
    inserts: list[tuple[int, str]] = field(default_factory=list)
    removed: list[uuid.UUID] = field(default_factory=list)
    skipped: int = 0


def plan_push(hashes: list[str], known: set[str], old: list[dict[str, Any]]) -> PushPlan:
    """Match the text's chunk hashes against what is stored: `known` hashes of the collection and the
    `old` chunks of the same source (id, content_hash, chunk_index). A chunk of the source found again
    keeps its row; the others are written over the source's leftover rows (in their order) before new
    rows are made; leftovers beyond that are removed."""
    by_hash: dict[str, list[dict[str, Any]]] = {}
    for row in old:
        by_hash.setdefault(row["content_hash"], []).append(row)
    plan, seen = PushPlan(), set()
    writes: list[tuple[int, str]] = []  # (position, hash) of the chunks to write
    for pos, h in enumerate(hashes):
        if h in seen:
            plan.skipped += 1
            continue
        seen.add(h)
        if by_hash.get(h):
            plan.kept.append((by_hash[h].pop(0)["id"], pos))
            plan.skipped += 1
        elif h in known:
            plan.skipped += 1
        else:
            writes.append((pos, h))
    leftover = sorted(
        (r for rows in by_hash.values() for r in rows),
        key=lambda r: r["chunk_index"] if r["chunk_index"] is not None else 0,
    )
    plan.rewrites = [(row["id"], pos, h) for row, (pos, h) in zip(leftover, writes, strict=False)]
    plan.inserts = writes[len(leftover) :]
    plan.removed = [row["id"] for row in leftover[len(writes) :]]
    return plan


async def _chunks(cfg: MemorySettings, text: str) -> list[Chunk]:
    """The text's chunks, within the configured limits."""
    if len(text) > cfg.memory_max_content_chars:
        raise TooLarge(
            f"text has {len(text)} characters; the limit is {cfg.memory_max_content_chars}",
            suggestions=["Split the document and push the parts with the same tags"],
        )
    # Chunking (tokenizer, sentence splitter) runs before the first statement, so no transaction is
    # open meanwhile, and in a thread, so other calls' transactions are not kept waiting on the loop.
    chunks = await asyncio.to_thread(chunk_text, text, cfg.memory_chunk_tokens, cfg.memory_chunk_overlap)
    if not chunks:
        raise _bad("text", "the text is empty after trimming", "string_too_short")
    if len(chunks) > cfg.memory_max_chunks:
        raise TooLarge(f"text makes {len(chunks)} chunks; the limit is {cfg.memory_max_chunks}")
    return chunks


async def push(ctx: CallContext, args: PushIn) -> PushOut:
    """Chunk by tokens, skip known chunks, write the rest and queue their vectors; a known source_uri is
    updated in place."""
    cfg = common.settings(ctx)
    chunks = await _chunks(cfg, args.text)
    memory_type = args.memory_type or "semantic"
    tags = sorted(set(args.tags or []))
    hashes = [common.content_hash(c.text) for c in chunks]
    project = await common.project_for_write(ctx, args.project_id)
    coll = await common.collection_for_write(ctx, args.collection)
    repo = MemoryRepository(ctx.session)

    await repo.lock_scope(project.id, coll.id)
    known = await repo.existing_hashes(project.id, coll.id, hashes)
    old = await repo.chunks_of_source(project.id, coll.id, args.source_uri) if args.source_uri else []
    document_id = old[0]["document_id"] if old and old[0]["document_id"] else uuid.uuid4()
    plan = plan_push(hashes, known, old)
    for target, pos, h in plan.rewrites:
        await repo.replace_chunk(target, chunks[pos].text, h, memory_type, tags, document_id)
        await repo.update_memory(target, {"chunk_index": pos})
    new_ids = [uuid.uuid4() for _ in plan.inserts]
    await repo.insert_memories(
        [
            {
                "id": new_id,
                "project_id": project.id,
                "collection_id": coll.id,
                "kind": "chunk",
                "memory_type": memory_type,
                "content": chunks[pos].text,
                "content_hash": h,
                "tags": tags,
                "metadata": json.dumps({"tokens": chunks[pos].tokens}),
                "source_uri": args.source_uri,
                "document_id": document_id,
                "chunk_index": pos,
                "summary_key": None,
            }
            for new_id, (pos, h) in zip(new_ids, plan.inserts, strict=True)
        ]
    )
    for mid, pos in plan.kept:
        await repo.update_memory(mid, {"chunk_index": pos})
    await repo.retag_chunks([mid for mid, _ in plan.kept], memory_type, tags, document_id)
    removed = await repo.delete_memories(plan.removed)
    await common.queue_vectors(ctx, [target for target, _, _ in plan.rewrites] + new_ids)
    inserted, updated = len(plan.inserts), len(plan.rewrites)
    indexed = inserted + updated
    await repo.bump_ingest(project.id, 1 if indexed else 0, indexed, cfg.memory_chunk_tokens)
    return PushOut(
        collection=coll.name,
        chunksIndexed=indexed,
        chunkSize=cfg.memory_chunk_tokens,
        inserted=inserted,
        updated=updated,
        skippedDuplicates=plan.skipped,
        removed=removed,
        document_id=str(document_id),
        project_id=project.name,
    )


def _limit(requested: int | None, default: int, cap: int, field: str = "limit") -> int:
    value = default if requested is None else requested
    if value < 1 or value > cap:
        raise _bad(field, f"must be between 1 and {cap} (SEARCH_MAX_LIMIT)", "less_than_equal")
    return value


def _used_filters(args: SearchIn, project: str, collection: str) -> dict[str, Any]:
    """The filters a search applied (the reply names them once instead of in every result)."""
    used: dict[str, Any] = {"project_id": project, "collection": collection}
    if args.memory_type:
        used["memory_type"] = args.memory_type
    if args.tags:
        used["tags"] = args.tags
    if (tf := _time_filter(args.time_range)) is not None:
        used["time_range"] = tf
    return used


def _hit(args: SearchIn, hit: Hit, row: dict[str, Any], shortened: bool) -> SearchHit:
    """One result; its text is in the context block. Project and collection are the same for every
    result (used_filters names them), and so is the memory type when the search filtered on it."""
    signals = None
    if args.explain:
        signals = {
            k: Signal(rank=int(v["rank"]) if "rank" in v else None, score=round_score(v["score"]))
            for k, v in hit.signals.items()
        }
    return SearchHit(
        id=str(hit.id),
        score=round_score(hit.score),
        memory_type=None if args.memory_type else row["memory_type"],
        tags=row["tags"] or None,
        timestamp=compact_time(row["created_at"]),
        source_uri=row["source_uri"],
        truncated=True if shortened else None,
        embedding=None if row.get("has_embedding") else "pending",
        signals=signals,
    )


async def search(ctx: CallContext, args: SearchIn) -> SearchOut:
    """Hybrid (default), semantic or lexical search with every filter applied in SQL. The results' texts
    are the lines of one context block citing each result by its position; a result states only what
    the reply does not already state once, and the reply states its own size in tokens."""
    cfg = common.settings(ctx)
    limit = _limit(args.limit, cfg.search_default_limit, cfg.search_max_limit)
    qvec = await query_vector(ctx, args.query_text, "memory search") if args.mode != "lexical" else None
    defaults = await thresholds.defaults(ctx.embedder, cfg.search_default_score_threshold)
    threshold = defaults.of(args.mode) if args.score_threshold is None else args.score_threshold
    name, project = await common.project_for_read(ctx, args.project_id)
    coll = await common.collection_for_read(ctx, args.collection)
    coll_name = coll.name if coll is not None else cfg.memory_default_collection
    out = SearchOut(
        results=[],
        context=None,
        collection=coll_name,
        limit=limit,
        score_threshold=threshold,
        scoreThreshold=threshold,
        used_filters=_used_filters(args, name, coll_name),
        mode=args.mode,
        retrieval_mode=args.mode,
        model=ctx.embedder.model,
    )
    if not query_terms(args.query_text):
        # Nearest neighbours of "the" are arbitrary notes, and no text search finds a function word.
        out.notice = "The query holds only common words (such as 'the' or 'what'): name what to find"
        return budget.measured(out, "tokens")
    if project is None or coll is None:
        return budget.measured(out, "tokens")
    tr = args.time_range or TimeRange()
    scope = Scope(
        project_id=project.id,
        collection_id=coll.id,
        memory_type=args.memory_type,
        tags=args.tags,
        start=tr.start,
        end=tr.end,
    )
    repo = MemoryRepository(ctx.session)
    found = await retrieve(
        repo,
        ctx.embedder,
        cfg,
        scope,
        args.query_text,
        mode=args.mode,
        limit=limit,
        threshold=defaults if args.score_threshold is None else args.score_threshold,
        vector=qvec,
        embed_query=False,
    )
    rows = await repo.fetch([h.id for h in found.hits], ctx.embedder.model)
    hits = [(hit, rows[hit.id]) for hit in found.hits if hit.id in rows]
    # Result n is cited [n]: its text is in the context block once, not again in the result.
    context, cut = cite(
        [(str(n), row["content"], None) for n, (_, row) in enumerate(hits, start=1)],
        cfg.memory_context_tokens,
        "tokens",
        cfg.memory_result_tokens,
    )
    out.results = [_hit(args, hit, row, shortened) for (hit, row), shortened in zip(hits, cut, strict=True)]
    out.context, out.retrieval_mode = context or None, found.retrieval_mode
    out.score_threshold = out.scoreThreshold = found.threshold
    out.notice = found.notice("score_threshold")
    return budget.measured(out, "tokens")


async def summarize(ctx: CallContext, args: SummarizeIn) -> SummarizeOut:
    """Consolidate a time window of memories into one semantic summary memory with provenance."""
    cfg = common.settings(ctx)
    limit = min(args.limit, cfg.search_max_limit)
    max_words = args.max_words or cfg.summarization_max_words
    memory_type = args.memory_type or "episodic"
    name, project = await common.project_for_read(ctx, args.project_id)
    coll = await common.collection_for_read(ctx, args.collection)
    used: dict[str, Any] = {
        "project_id": name,
        "memory_type": memory_type,
        "collection": coll.name if coll else cfg.memory_default_collection,
        "time_range": _time_filter(args.time_range),
        "limit": limit,
    }
    if args.tags:
        used["tags"] = args.tags
    if project is None or coll is None:
        raise NotFound(f"No memories in project '{name}' to summarise", suggestions=["push memories first"])
    repo = MemoryRepository(ctx.session)
    scope = Scope(
        project_id=project.id,
        collection_id=coll.id,
        memory_type=memory_type,
        tags=args.tags,
        start=args.time_range.start,
        end=args.time_range.end,
        kinds=["chunk", "thought"],
    )
    rows = list(reversed(await repo.list_memories(scope, ctx.embedder.model, limit)))  # newest N, told in time order
    if not rows:
        raise NotFound(
            "No memories match the filters and time range",
            suggestions=["Widen time_range, drop tags, or check memory_type (default episodic)"],
        )
    # Ranking sentences (the model) or asking an LLM provider runs with no transaction open; the
    # summary is stored in a fresh one.
    passages = await summary_passages(repo, rows)
    result = await ctx.without_transaction(
        lambda: make_summary(
            ctx.embedder,
            cfg,
            passages,
            strategy=args.strategy,
            provider=args.provider,
            model=args.model,
            max_words=max_words,
        )
    )
    source_ids = [str(r["id"]) for r in rows]
    key = common.key_of("summarize", memory_type, sorted(args.tags or []), used["time_range"], limit)
    summary_id = await store_summary(
        ctx,
        repo,
        project.id,
        coll.id,
        key,
        result.text,
        source_ids,
        args.tags or [],
        {
            "strategy": result.strategy,
            "provider": result.provider,
            "model": result.model,
            "time_range": used["time_range"],
            "summarized_type": memory_type,
        },
    )
    out = SummarizeOut(
        summary=result.text,
        source_memory_ids=short_ids(source_ids),
        upserted_memory_id=str(summary_id),
        strategy=result.strategy,  # type: ignore[arg-type]
        provider=result.provider,
        model=result.model,
        used_filters=used,
    )
    return budget.measured(out, "tokens")


async def summary_passages(repo: MemoryRepository, rows: list[dict[str, Any]]) -> list[Passage]:
    """The memories to summarise as passages: a chunk knows its document, position and the document's
    last position, so the summary can join a document's chunks and skip what a missing chunk cut."""
    documents = {r["document_id"] for r in rows if r.get("kind") == "chunk" and r.get("document_id")}
    last = await repo.last_chunks(sorted(documents, key=str))
    out = []
    for r in rows:
        doc = r.get("document_id") if r.get("kind") == "chunk" else None
        index = r.get("chunk_index")
        if doc is None or index is None:
            out.append(Passage(r["content"]))
        else:
            out.append(Passage(r["content"], str(doc), int(index), last.get(doc)))
    return out


async def store_summary(
    ctx: CallContext,
    repo: MemoryRepository,
    project_id: uuid.UUID,
    collection_id: uuid.UUID,
    key: str,
    text: str,
    source_ids: list[str],
    tags: list[str],
    extra: dict[str, Any],
) -> uuid.UUID:
    """Upsert the summary memory for `key` and (best effort) its vector."""
    body = text or "(empty summary)"
    summary_id = await repo.upsert_summary(
        {
            "id": uuid.uuid4(),
            "project_id": project_id,
            "collection_id": collection_id,
            "content": body,
            "content_hash": common.content_hash(body),
            "tags": sorted(set(tags)),
            "summary_key": key,
            "metadata": json.dumps({"source_memory_ids": source_ids, **extra}),
        }
    )
    await repo.drop_vectors(summary_id)
    await common.queue_vectors(ctx, [summary_id])
    return summary_id


async def get_collections(ctx: CallContext) -> CollectionsOut:
    """Collection names (the default one is always listed). Collections are server-wide: a
    project-bound key sees those that hold memories of its project."""
    repo = MemoryRepository(ctx.session)
    if ctx.bound_project is None:
        names = set(await repo.collection_names())
    else:
        project = await ProjectRepository(ctx.session).get(ctx.bound_project)
        names = set(await repo.collection_names(project.id)) if project is not None else set()
    names.add(common.settings(ctx).memory_default_collection)
    return CollectionsOut(collections=sorted(names))


def _server_wide(ctx: CallContext, what: str) -> None:
    """Refuse (4030) a change of server-wide state unless the key is an admin key bound to no project."""
    bound = ctx.bound_project
    if bound is not None or not ctx.principal.has_scope("admin"):
        why = f"this API key is bound to project '{bound}'" if bound else "it needs the 'admin' scope"
        raise Forbidden(
            f"{what} would change a collection that every project shares, and {why}",
            suggestions=[
                "Omit vector_size (the active model's dimension) to make sure a collection exists",
                "Use an admin key that is not bound to a project",
            ],
        )


async def new_collection(ctx: CallContext, args: NewCollectionIn) -> NewCollectionOut:
    """Create a collection, or resize an existing one, for the wanted vector size.

    Collections are shared by every project, and their size is a label (vectors are stored per
    model, so it never blocks a write): any key that may write can make sure one exists with the
    active model's dimension, as a push does, but giving it another size, or resizing it, takes an
    admin key bound to no project."""
    size = args.vector_size or ctx.embedder.dimension
    repo = MemoryRepository(ctx.session)
    coll = await repo.get_collection(args.name)
    created = False
    if coll is None:
        if size != ctx.embedder.dimension:
            _server_wide(ctx, f"Creating collection '{args.name}' with vector size {size}")
        coll, created = await repo.ensure_collection(args.name, ctx.embedder.model, size)
    resized = False
    if not created and coll.vector_size != size:
        _server_wide(ctx, f"Resizing collection '{args.name}' from {coll.vector_size} to {size}")
        await repo.resize_collection(coll.id, ctx.embedder.model, size)
        resized = True
    return NewCollectionOut(vectorSize=size, name=args.name, created=created, resized=resized)


async def metrics(ctx: CallContext) -> MetricsOut:
    """Ingestion counters: of the key's project for a project-bound key, else of every project."""
    repo = MemoryRepository(ctx.session)
    row: dict[str, Any] = {"documents_indexed": 0, "chunks_indexed": 0, "last_chunk_size": None}
    if ctx.bound_project is None:
        row = await repo.ingest_stats()
    elif (project := await ProjectRepository(ctx.session).get(ctx.bound_project)) is not None:
        row = await repo.ingest_stats(project.id)
    return MetricsOut(
        documentsIndexed=int(row["documents_indexed"]),
        chunksIndexed=int(row["chunks_indexed"]),
        lastChunkSize=row["last_chunk_size"],
    )


def memory_types() -> dict[str, Any]:
    """The mcp://memory-types payload."""
    return {"memory_types": list(MEMORY_TYPES), "default": "semantic"}


async def projects(ctx: CallContext) -> list[str]:
    """Projects that hold memories (a bound key sees its own only)."""
    return await MemoryRepository(ctx.session).project_names(ctx.bound_project)


async def project_tags(ctx: CallContext, project_id: str) -> list[str]:
    """Distinct tags of one project."""
    _, project = await common.project_for_read(ctx, project_id)
    if project is None:
        return []
    return await MemoryRepository(ctx.session).project_tags(project.id)


USAGE: dict[str, Any] = {
    "title": "Rusty Memory MCP Usage",
    "policy": [
        "Do not paste or concatenate large documents in prompts.",
        "Index text with `push` first; use `search` to retrieve.",
        "Prefer filters: project_id, memory_type, tags, time_range.",
        "Keep query_text concise (<= 512 chars).",
        "Use summarize to consolidate episodic → semantic summaries.",
    ],
    "flows": [
        {
            "name": "Ingest & Retrieve",
            "steps": [
                "push({ text, project_id?, memory_type?, tags? })",
                "search({ query_text, project_id?, memory_type?, tags?, time_range? })",
            ],
        },
        {
            "name": "Summarize",
            "steps": [
                "search episodic within time_range",
                "summarize({ project_id, time_range, tags?, limit?, max_words? })",
            ],
        },
    ],
}
