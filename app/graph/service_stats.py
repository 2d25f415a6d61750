"""Reporting: search quality per treatment from implicit feedback, and graph statistics."""

from __future__ import annotations

from typing import Any, Literal

from app.core.context import CallContext
from app.graph import scoring
from app.graph.config import GraphSettings
from app.graph.repository import GraphRepository
from app.graph.repository_search import SearchRepository
from app.graph.schemas import (
    GraphStatsOut,
    ImportantEntity,
    ProjectIn,
    QualityReportIn,
    QualityReportOut,
    StatusCount,
    TreatmentQuality,
    TypeCount,
)
from app.graph.service_common import BASELINE, LIMBIC, project_id


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
        by_status=[StatusCount(status=t, count=c) for t, c in s["by_status"]],
        top_entities=[ImportantEntity(name=n, entityType=t, access_count=a, observations=o) for n, t, a, o in s["top"]],
        embedding_model=model,
    )
