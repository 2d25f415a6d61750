"""Use cases of hybrid search with limbic re-ranking, reflections, maintenance and reporting."""

from __future__ import annotations

import hashlib
import random
import time
from collections import defaultdict
from typing import Any, Literal

import numpy as np

from app.core.context import CallContext
from app.core.errors import invalid_field
from app.graph import scoring
from app.graph.config import GraphSettings
from app.graph.repository import GraphRepository
from app.graph.repository_search import SearchRepository
from app.graph.schemas import (
    AddReflectionIn,
    ConsolidateIn,
    ConsolidateOut,
    DuplicatePair,
    FindDuplicatesIn,
    FindDuplicatesOut,
    GraphStatsOut,
    ImportantEntity,
    MergedObservation,
    ObservationBrief,
    ProjectIn,
    QualityReportIn,
    QualityReportOut,
    ReflectionHit,
    ReflectionOut,
    SearchReflectionsIn,
    SearchReflectionsOut,
    SearchSemanticIn,
    SearchSemanticOut,
    SemanticHit,
    TreatmentQuality,
    TypeCount,
)
from app.graph.service import reflection_out
from app.graph.service_common import embed, not_found, project_id, query_words, reembed

LIMBIC, BASELINE = 1, 0


def _treatment(requested: str, ratio: float) -> int:
    if requested == "limbic":
        return LIMBIC
    if requested == "baseline":
        return BASELINE
    return LIMBIC if random.random() < ratio else BASELINE


async def search_semantic(ctx: CallContext, args: SearchSemanticIn) -> SearchSemanticOut:
    """Hybrid candidates re-ranked by the limbic score; logged as a search event with its results."""
    s = ctx.feature_settings(GraphSettings)
    started = time.perf_counter()
    pid = await project_id(ctx, args.project, create=False)
    treatment = _treatment(args.treatment, s.ab_limbic_ratio)
    if pid is None:
        return SearchSemanticOut(
            results=[],
            event_id=0,
            treatment="limbic" if treatment == LIMBIC else "baseline",
            engine="none",
            duration_ms=0.0,
        )
    repo = SearchRepository(ctx.session)
    treatment = _treatment(args.treatment, s.ab_limbic_ratio)
    qvec = (await embed(ctx, [args.query]))[0]
    words = query_words(args.query)
    n = args.limit * s.candidate_multiplier
    model = ctx.embedder.model
    vec = await repo.vector_candidates(pid, qvec, model, n, args.entity_type)
    txt = await repo.text_candidates(pid, words, n, args.entity_type)
    engine = "hybrid" if vec and txt else "vector" if vec else "text" if txt else "none"
    ids = list(dict.fromkeys([i for i, _ in vec] + [i for i, _ in txt]))
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
        for r in (await repo.score_inputs(ids, qvec, model, words) if ids else [])
    ]
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
    return SearchSemanticOut(
        results=hits,
        event_id=event_id,
        treatment="limbic" if treatment == LIMBIC else "baseline",
        engine=engine,
        duration_ms=round(duration, 3),
    )


# ---- reflections ---------------------------------------------------------------------------------


async def add_reflection(ctx: CallContext, args: AddReflectionIn) -> ReflectionOut:
    """Store a reflection (about an entity, a session or the graph) with its embedding."""
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
    await repo.upsert_reflection_embedding(int(row["id"]), (await embed(ctx, [args.content]))[0], ctx.embedder.model)
    return ReflectionOut(
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
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return SearchReflectionsOut(results=[])
    qvec = (await embed(ctx, [args.query]))[0]
    rows = await SearchRepository(ctx.session).search_reflections(
        pid,
        qvec,
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


# ---- maintenance -----------------------------------------------------------------------------------


async def find_duplicate_observations(ctx: CallContext, args: FindDuplicatesIn) -> FindDuplicatesOut:
    """Near-duplicate current observations of the same entity by embedding; flags the later one."""
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return FindDuplicatesOut(pairs=[], flagged=0, scanned_observations=0, truncated=False)
    entity_id = None
    if args.entity_name:
        rows = await GraphRepository(ctx.session).get_entities(pid, [args.entity_name])
        if not rows:
            raise not_found(args.entity_name)
        entity_id = rows[0].id
    repo = SearchRepository(ctx.session)
    scan = await repo.current_observations_for_scan(pid, entity_id, args.max_observations + 1)
    truncated = len(scan) > args.max_observations
    scan = scan[: args.max_observations]
    groups: dict[int, list[Any]] = defaultdict(list)
    for r in scan:
        groups[int(r["entity_id"])].append(r)
    todo = [r for g in groups.values() if len(g) > 1 for r in g]
    vectors: dict[int, list[float]] = {}
    step = 256
    for i in range(0, len(todo), step):
        chunk = todo[i : i + step]
        for r, v in zip(chunk, await embed(ctx, [r["content"] for r in chunk]), strict=True):
            vectors[int(r["id"])] = v
        await ctx.progress(min(i + step, len(todo)), len(todo), "embedding observations")
    pairs: list[DuplicatePair] = []
    flags: list[tuple[int, int]] = []
    for g in groups.values():
        if len(g) < 2:
            continue
        mat = np.array([vectors[int(r["id"])] for r in g], dtype=np.float32)
        sims = mat @ mat.T
        taken: set[int] = set()
        for j in range(1, len(g)):
            best = int(np.argmax(sims[j, :j]))
            if sims[j, best] >= args.threshold and best not in taken:
                taken.add(j)
                flags.append((int(g[j]["id"]), int(g[best]["id"])))
                kept = ObservationBrief(id=g[best]["id"], content=g[best]["content"])
                pairs.append(
                    DuplicatePair(
                        entity_name=g[j]["name"],
                        kept=kept,
                        duplicate=ObservationBrief(id=g[j]["id"], content=g[j]["content"]),
                        similarity=round(float(sims[j, best]), 6),
                    )
                )
    flagged = await repo.flag_duplicates(flags)
    return FindDuplicatesOut(
        pairs=pairs[: args.limit],
        flagged=flagged,
        scanned_observations=len(scan),
        truncated=truncated or len(pairs) > args.limit,
    )


async def consolidate(ctx: CallContext, args: ConsolidateIn) -> ConsolidateOut:
    """Merge flagged duplicates into the observation they repeat and decay stale access counts."""
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return ConsolidateOut(
            dry_run=args.dry_run, merged=[], merged_count=0, decayed_entities=0, reembedded_entities=0
        )
    repo = SearchRepository(ctx.session)
    merged: list[MergedObservation] = []
    removed: set[int] = set()
    flagged = await repo.flagged_duplicates(pid)
    for r in flagged:
        if r["duplicate_of"] in removed:
            continue
        removed.add(int(r["id"]))
        merged.append(
            MergedObservation(
                entity_name=r["name"], kept_id=r["duplicate_of"], removed_id=r["id"], content=r["content"]
            )
        )
    entities = sorted({int(r["entity_id"]) for r in flagged if int(r["id"]) in removed})
    await ctx.progress(1, 3, "duplicates planned")
    if not args.dry_run and removed:
        grepo = GraphRepository(ctx.session)
        await grepo.lock_ids(entities)
        await grepo.mark_superseded(sorted(removed))
        await reembed(ctx, grepo, entities)
    await ctx.progress(2, 3, "duplicates merged")
    decayed = await repo.stale_access(pid, args.decay_after_days, args.decay_factor, apply=not args.dry_run)
    await ctx.progress(3, 3, "access counts decayed")
    return ConsolidateOut(
        dry_run=args.dry_run,
        merged=merged[:200],
        merged_count=len(merged),
        decayed_entities=decayed,
        reembedded_entities=0 if args.dry_run else len(entities),
    )


# ---- reporting ---------------------------------------------------------------------------------------


async def search_quality_report(ctx: CallContext, args: QualityReportIn) -> QualityReportOut:
    """NDCG@k and MRR per treatment from implicit feedback (served order and baseline order)."""
    s = ctx.feature_settings(GraphSettings)
    pid = await project_id(ctx, args.project, create=False)
    rows = await SearchRepository(ctx.session).quality_rows(pid, args.days) if pid else []
    events: dict[int, dict[str, Any]] = {}
    for r in rows:
        ev = events.setdefault(int(r["event_id"]), {"t": int(r["treatment"]), "served": [], "base": []})
        if r["relevant"] and r["rank"] is not None:
            ev["served"].append(int(r["rank"]))
            ev["base"].append(int(r["baseline_rank"] or r["rank"]))
    out = []
    treatments: tuple[tuple[int, Literal["limbic", "baseline"]], ...] = ((LIMBIC, "limbic"), (BASELINE, "baseline"))
    for t, label in treatments:
        evs = [e for e in events.values() if e["t"] == t]
        fb = [e for e in evs if e["served"]]

        def mean(vals: list[float]) -> float | None:
            return round(sum(vals) / len(vals), 6) if vals else None

        out.append(
            TreatmentQuality(
                treatment=label,
                events=len(evs),
                events_with_feedback=len(fb),
                ndcg_at_k=mean([scoring.ndcg(e["served"], args.k) for e in fb]),
                mrr=mean([scoring.reciprocal_rank(e["served"]) for e in fb]),
                ndcg_at_k_baseline_order=mean([scoring.ndcg(e["base"], args.k) for e in fb]),
                mrr_baseline_order=mean([scoring.reciprocal_rank(e["base"]) for e in fb]),
            )
        )
    return QualityReportOut(k=args.k, days=args.days, feedback_window_seconds=s.feedback_window_seconds, treatments=out)


async def graph_stats(ctx: CallContext, args: ProjectIn) -> GraphStatsOut:
    """Counts of entities, observations, relations, reflections, searches and embeddings."""
    pid = await project_id(ctx, args.project, create=False)
    model = ctx.embedder.model
    if pid is None:
        return GraphStatsOut(
            entities=0,
            observations=0,
            superseded_observations=0,
            flagged_observations=0,
            relations=0,
            ended_relations=0,
            reflections=0,
            entities_with_embedding=0,
            search_events=0,
            feedback=0,
            by_type=[],
            by_status=[],
            top_entities=[],
            embedding_model=model,
        )
    repo = GraphRepository(ctx.session)
    s = await repo.summary(pid)
    return GraphStatsOut(
        entities=s["entities"],
        observations=s["observations"],
        superseded_observations=s["superseded_observations"],
        flagged_observations=s["flagged_observations"],
        relations=s["relations"],
        ended_relations=s["ended_relations"],
        reflections=s["reflections"],
        entities_with_embedding=await repo.embedded_count(pid, model),
        search_events=s["search_events"],
        feedback=s["feedback"],
        by_type=[TypeCount(entityType=t, count=c) for t, c in s["by_type"]],
        by_status=[TypeCount(entityType=t, count=c) for t, c in s["by_status"]],
        top_entities=[ImportantEntity(name=n, entityType=t, access_count=a, observations=o) for n, t, a, o in s["top"]],
        embedding_model=model,
    )
