"""Reflections: notes about an entity, a session or the graph, stored with embeddings and searched hybrid."""

from __future__ import annotations

from app.core.context import CallContext
from app.core.embeddings.calls import enqueue, query_vector
from app.core.errors import invalid_field
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
from app.graph.service_common import not_found, project_id, query_words


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
    """Hybrid (vector + full-text) search over reflections."""
    s = ctx.feature_settings(GraphSettings)
    qvec = await query_vector(ctx, args.query, "graph search")
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return SearchReflectionsOut(results=[])
    rows = await SearchRepository(ctx.session).search_reflections(
        pid,
        qvec,
        ctx.embedder.dimension,
        ctx.embedder.model,
        query_words(args.query),
        args.limit * s.candidate_multiplier,
        args.target_type,
        args.author,
    )
    hits = []
    for r in rows:
        cos, ts = float(r["cos"]), float(r["ts"])
        base = reflection_out(r)
        hits.append(
            ReflectionHit(
                **base.model_dump(),
                score=round(cos + s.text_weight * ts, 6),
                cosine_sim=round(cos, 6),
                text_score=round(ts, 6),
            )
        )
    hits.sort(key=lambda h: (-h.score, h.id))
    return SearchReflectionsOut(results=hits[: args.limit])
