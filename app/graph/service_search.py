"""Hybrid entity search with limbic re-ranking (A/B treatments, access and co-occurrence counters)."""

from __future__ import annotations

import hashlib
import random
import time

from app.core.budget import measured
from app.core.context import CallContext
from app.core.embeddings.calls import query_vector
from app.graph import scoring
from app.graph.config import GraphSettings
from app.graph.repository import GraphRepository
from app.graph.repository_search import SearchRepository
from app.graph.schemas import (
    SearchSemanticIn,
    SearchSemanticOut,
    SemanticHit,
)
from app.graph.service_common import BASELINE, LIMBIC, project_id, query_words


def _treatment(requested: str, ratio: float) -> int:
    if requested == "limbic":
        return LIMBIC
    if requested == "baseline":
        return BASELINE
    return LIMBIC if random.random() < ratio else BASELINE


def _an_answer(cosine: float, text_score: float, by_meaning: bool, s: GraphSettings) -> bool:
    """Whether a candidate answers the query at all: a query word in its text, or (when the query was
    embedded) a cosine similarity of at least `semantic_floor`. Vector search always finds nearest
    neighbours, relevant or not; counting noise as accessed would make it rank higher next time."""
    return text_score > 0 or (by_meaning and cosine >= s.semantic_floor)


async def search_semantic(ctx: CallContext, args: SearchSemanticIn) -> SearchSemanticOut:
    """Hybrid candidates re-ranked by the limbic score; logged as a search event with its results."""
    s = ctx.feature_settings(GraphSettings)
    started = time.perf_counter()
    qvec = await query_vector(ctx, args.query, "graph search")
    pid = await project_id(ctx, args.project, create=False)
    treatment = _treatment(args.treatment, s.ab_limbic_ratio)
    if pid is None:
        empty = SearchSemanticOut(
            results=[],
            event_id=0,
            treatment="limbic" if treatment == LIMBIC else "baseline",
            engine="none",
            duration_ms=0.0,
        )
        return measured(empty, "tokens")
    repo = SearchRepository(ctx.session)
    treatment = _treatment(args.treatment, s.ab_limbic_ratio)
    words = query_words(args.query)
    n = args.limit * s.candidate_multiplier
    model = ctx.embedder.model
    vec = await repo.vector_candidates(pid, qvec, model, n, args.entity_type) if qvec is not None else []
    txt = await repo.text_candidates(pid, words, n, args.entity_type)
    engine = "hybrid" if vec and txt else "vector" if vec else "text" if txt else "none"
    ids = list(dict.fromkeys([i for i, _ in vec] + [i for i, _ in txt]))
    inputs = await repo.score_inputs(ids, qvec, ctx.embedder.dimension, model, words) if ids else []
    pending = {int(r["id"]) for r in inputs if not r["has_vector"]}
    archived = set() if args.include_archived else set(s.archived_statuses)
    cands = [
        scoring.Candidate(
            id=int(r["id"]),
            name=r["name"],
            entity_type=r["entity_type"],
            status=r["status"],
            cosine_sim=float(r["cos"]),
            text_score=float(r["ts"]),
            access_count=int(r["access_count"]),
            days_since_access=float(r["days_since"]),
        )
        for r in inputs
        if r["status"] not in archived and _an_answer(float(r["cos"]), float(r["ts"]), qvec is not None, s)
    ]
    ids = [c.id for c in cands]
    baseline = scoring.score(cands, await repo.cooccurrences(ids) if ids else [], s)
    served = (sorted(baseline, key=lambda c: (-c.limbic_score, c.baseline_rank)) if treatment == LIMBIC else baseline)[
        : args.limit
    ]
    obs = await GraphRepository(ctx.session).current_observations([c.id for c in served], args.include_observations)
    duration = (time.perf_counter() - started) * 1000
    event_id = await repo.log_event(
        pid,
        args.query,
        hashlib.sha256(args.query.encode()).hexdigest()[:32],
        treatment,
        args.limit,
        len(served),
        duration,
        engine,
    )
    hits, logged = [], []
    for rank, c in enumerate(served, 1):
        comp = {
            "limbic_score": round(c.limbic_score, 6),
            "relevance": round(c.relevance, 6),
            "cosine_sim": round(c.cosine_sim, 6),
            "text_score": round(c.text_score, 6),
            "importance": round(c.importance, 6),
            "temporal": round(c.temporal, 6),
            "cooc_boost": round(c.cooc_boost, 6),
        }
        hits.append(
            SemanticHit(
                name=c.name,
                entityType=c.entity_type,
                status=c.status,
                observations=obs[c.id][0],
                rank=rank,
                baseline_rank=c.baseline_rank,
                access_count=c.access_count,
                embedding="pending" if c.id in pending else None,
                **comp,
            )
        )
        logged.append(
            {
                "entity_id": c.id,
                "entity_name": c.name,
                "rank": rank,
                "baseline_rank": c.baseline_rank,
                **{k: v for k, v in comp.items() if k != "relevance"},
            }
        )
    await repo.log_results(event_id, logged)
    top = [c.id for c in served[: s.cooc_top]]
    await repo.record_access([c.id for c in served], [(a, b) for i, a in enumerate(top) for b in top[i + 1 :]])
    out = SearchSemanticOut(
        results=hits,
        event_id=event_id,
        treatment="limbic" if treatment == LIMBIC else "baseline",
        engine=engine,
        duration_ms=round(duration, 3),
        notice=(
            "The embedding model is unavailable: ranked by text alone"
            if qvec is None
            else None
            if hits or not inputs
            else f"No entity is close enough to the query (cosine similarity {s.semantic_floor} or a query "
            "word in its text): try other words"
        ),
    )
    return measured(out, "tokens")
