"""Reflections: notes about an entity, a session or the graph, stored with embeddings and searched hybrid."""

from __future__ import annotations

from app.core.context import CallContext
from app.core.embeddings.calibration import calibration_of
from app.core.embeddings.calls import enqueue, query_vector
from app.core.errors import invalid_field
from app.graph import scoring
from app.graph.config import GraphSettings
from app.graph.repository import REFLECTION_TARGET, GraphRepository
from app.graph.repository_search import SearchRepository
from app.graph.schemas import (
    AddReflectionIn,
    AddReflectionOut,
    ReflectionHit,
    SearchReflectionsIn,
    SearchReflectionsOut,
)
from app.graph.service import reflection_out
from app.graph.service_common import not_found, project_id


async def add_reflection(ctx: CallContext, args: AddReflectionIn) -> AddReflectionOut:
    """Store a reflection (about an entity, a session or the graph); its vector is queued."""
    pid = await project_id(ctx, args.project, create=True)
    assert pid is not None
    target_id = None
    if args.target_type == "entity":
        if not args.target_name:
            raise invalid_field("target_name", "target_name is required when target_type is 'entity'", rule="missing")
        rows = await GraphRepository(ctx.session).get_entities(pid, [args.target_name])
        if not rows:
            raise not_found(args.target_name)
        target_id = rows[0].id
    repo = SearchRepository(ctx.session)
    row = await repo.insert_reflection(pid, args.target_type, target_id, args.author, args.content, args.mood)
    await enqueue(ctx, REFLECTION_TARGET, [row["id"]])
    return AddReflectionOut(
        id=row["id"],
        target_type=args.target_type,
        target_id=target_id,
        target_name=args.target_name if target_id else None,
        author=args.author,
        content=args.content,
        mood=args.mood,
        created_at=row["created_at"],
    )


async def search_reflections(ctx: CallContext, args: SearchReflectionsIn) -> SearchReflectionsOut:
    """Hybrid (vector + BM25) search over reflections; only those passing the relevance floor of
    search_semantic (`app.graph.scoring.Floor`) are returned."""
    s = ctx.feature_settings(GraphSettings)
    qvec = await query_vector(ctx, args.query, "graph search")
    # before any SQL: a first measurement of the calibration calls the model
    floor = scoring.floor_of(await calibration_of(ctx.embedder) if qvec is not None else None, s)
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return SearchReflectionsOut(results=[])
    repo = SearchRepository(ctx.session)
    lq = await repo.reflection_query(args.query)
    rows = await repo.search_reflections(
        pid,
        qvec,
        ctx.embedder.dimension,
        ctx.embedder.model,
        lq,
        args.limit * s.candidate_multiplier,
        args.target_type,
        args.author,
    )
    hits = []
    for r in rows:
        cos, ts = float(r["cos"]), lq.coverage(float(r["bm25"]))
        if floor.admits(cos, ts) is None:
            continue
        base = reflection_out(r)
        hits.append(
            ReflectionHit(
                **base.model_dump(),
                score=round(scoring.relevance(cos, ts, s), 6),
                cosine_sim=round(cos, 6),
                text_score=round(ts, 6),
            )
        )
    hits.sort(key=lambda h: (-h.score, h.id))
    return SearchReflectionsOut(results=hits[: args.limit])
