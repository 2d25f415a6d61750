"""Hybrid entity search with limbic re-ranking (A/B treatments, access and co-occurrence counters)."""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.budget import measured
from app.core.context import CallContext
from app.core.embeddings.calibration import calibration_of
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
from app.graph.service_common import BASELINE, LIMBIC, project_id


def _treatment(requested: str, ratio: float) -> int:
    if requested == "limbic":
        return LIMBIC
    if requested == "baseline":
        return BASELINE
    return LIMBIC if random.random() < ratio else BASELINE


def _label(treatment: int) -> Literal["limbic", "baseline"]:
    return "limbic" if treatment == LIMBIC else "baseline"


@dataclass
class _Candidates:
    """What the hybrid retrieval found: the engines that answered, every candidate's score inputs, the
    candidates that answer the query (pass the relevance floor), those still waiting for their vector,
    and the floor applied."""

    engine: str
    inputs: list[Any]
    answers: list[scoring.Candidate]
    pending: set[int]
    floor: scoring.Floor = field(default_factory=lambda: scoring.Floor(None, None, 0.0))
    below: list[scoring.Candidate] = field(default_factory=list)  # candidates under the floor (not archived)


async def _floor(ctx: CallContext, args: SearchSemanticIn, qvec: list[float] | None) -> scoring.Floor:
    """The relevance floor of this search: the arguments, else the settings, else the rules over the
    model's calibration (no cosine floor without a query vector). Called before any SQL: measuring a
    model's calibration (once per process) calls the model, which no open transaction may wait for."""
    cal = await calibration_of(ctx.embedder) if qvec is not None else None
    return scoring.floor_of(cal, ctx.feature_settings(GraphSettings), args.semantic_floor, args.min_text_coverage)


async def _candidates(
    ctx: CallContext,
    repo: SearchRepository,
    pid: uuid.UUID,
    args: SearchSemanticIn,
    qvec: list[float] | None,
    floor: scoring.Floor,
) -> _Candidates:
    """Vector and BM25 candidates (`candidate_multiplier` times the limit each), with their score
    inputs, split into answers and the rest; archived entities are left out unless asked for."""
    s = ctx.feature_settings(GraphSettings)
    n = args.limit * s.candidate_multiplier
    model = ctx.embedder.model
    lq = await repo.lexical_query(args.query)
    vec = await repo.vector_candidates(pid, qvec, model, n, args.entity_type) if qvec is not None else []
    txt = await repo.text_candidates(pid, lq, n, args.entity_type)
    engine = "hybrid" if vec and txt else "vector" if vec else "text" if txt else "none"
    ids = list(dict.fromkeys([i for i, _ in vec] + [i for i, _ in txt]))
    inputs = await repo.score_inputs(ids, qvec, ctx.embedder.dimension, model, lq) if ids else []
    archived = set() if args.include_archived else set(s.archived_statuses)
    found = _Candidates(engine, inputs, [], {int(r["id"]) for r in inputs if not r["has_vector"]}, floor)
    for r in inputs:
        if r["status"] in archived:
            continue
        cand = scoring.Candidate(
            id=int(r["id"]),
            name=r["name"],
            entity_type=r["entity_type"],
            status=r["status"],
            cosine_sim=float(r["cos"]),
            text_score=lq.coverage(float(r["bm25"])),
            access_count=int(r["access_count"]),
            days_since_access=float(r["days_since"]),
        )
        cand.matched_by = floor.admits(cand.cosine_sim, cand.text_score)
        (found.answers if cand.matched_by else found.below).append(cand)
    return found


def _components(c: scoring.Candidate) -> dict[str, float]:
    """A result's score and its components, as shown and logged."""
    return {
        "limbic_score": round(c.limbic_score, 6),
        "relevance": round(c.relevance, 6),
        "cosine_sim": round(c.cosine_sim, 6),
        "text_score": round(c.text_score, 6),
        "importance": round(c.importance, 6),
        "temporal": round(c.temporal, 6),
        "cooc_boost": round(c.cooc_boost, 6),
    }


def _notice(qvec: list[float] | None, hits: list[SemanticHit], found: _Candidates, s: GraphSettings) -> str | None:
    """Why the reply holds what it holds: ranked by words alone, results matched by words while their
    vectors are pending, or why nothing passed (best scores seen, candidates, floors, what to change)."""
    parts = []
    if qvec is None:
        parts.append("The embedding model is unavailable: ranked by text alone")
    pending = sum(1 for h in hits if h.embedding == "pending")
    if pending:
        parts.append(
            f"{pending} result(s) matched by text only while their vectors are pending: their cosine "
            "similarity is not known yet and passed no semantic floor"
        )
    if not hits and found.below:
        best = max(found.below, key=lambda c: scoring.relevance(c.cosine_sim, c.text_score, s))
        cos = max(c.cosine_sim for c in found.below)
        cov = max(c.text_score for c in found.below)
        f = found.floor
        floor = (
            f"cosine similarity {f.cosine:g} (semantic_floor; {f.supported:g} with a query word in the text)"
            if f.cosine is not None and f.supported is not None
            else "no cosine (the query has no vector)"
        )
        parts.append(
            f"No entity passed the relevance floor: {len(found.below)} candidate(s), the best relevance "
            f"{scoring.relevance(best.cosine_sim, best.text_score, s):.3f} ({best.name}); best cosine similarity "
            f"{cos:.3f}, best text coverage {cov:.3f}, against a floor of {floor} or text coverage "
            f"{f.coverage:g} (min_text_coverage). Nothing matches well: try other words, or pass a lower "
            "semantic_floor / min_text_coverage (server defaults: CAIRN_GRAPH_SEMANTIC_FLOOR, "
            "CAIRN_GRAPH_MIN_TEXT_COVERAGE) to see them"
        )
    return ". ".join(parts) or None


async def search_semantic(ctx: CallContext, args: SearchSemanticIn) -> SearchSemanticOut:
    """Hybrid candidates re-ranked by the limbic score; logged as a search event with its results."""
    s = ctx.feature_settings(GraphSettings)
    started = time.perf_counter()
    qvec = await query_vector(ctx, args.query, "graph search")
    floor = await _floor(ctx, args, qvec)
    pid = await project_id(ctx, args.project, create=False)
    treatment = _treatment(args.treatment, s.ab_limbic_ratio)
    if pid is None:
        empty = SearchSemanticOut(results=[], event_id=0, treatment=_label(treatment), engine="none", duration_ms=0.0)
        return measured(empty, "tokens")
    repo = SearchRepository(ctx.session)
    found = await _candidates(ctx, repo, pid, args, qvec, floor)
    ids = [c.id for c in found.answers]
    baseline = scoring.score(found.answers, await repo.cooccurrences(ids) if ids else [], s)
    ranked = sorted(baseline, key=lambda c: (-c.limbic_score, c.baseline_rank)) if treatment == LIMBIC else baseline
    served = ranked[: args.limit]
    obs = await GraphRepository(ctx.session).current_observations([c.id for c in served], args.include_observations)
    duration = (time.perf_counter() - started) * 1000
    hits, logged = [], []
    for rank, c in enumerate(served, 1):
        comp = _components(c)
        internals: dict[str, Any] = {
            "rank": rank,
            "baseline_rank": c.baseline_rank,
            "access_count": c.access_count,
            **comp,
        }
        hits.append(
            SemanticHit(
                name=c.name,
                entityType=c.entity_type,
                status=c.status,
                observations=obs[c.id][0],
                score=comp["limbic_score"] if treatment == LIMBIC else comp["relevance"],
                embedding="pending" if c.id in found.pending else None,
                matched_by=c.matched_by,
                **(internals if args.explain else {}),
            )
        )
        shown = {k: v for k, v in comp.items() if k != "relevance"}
        logged.append(
            {"entity_id": c.id, "entity_name": c.name, "rank": rank, "baseline_rank": c.baseline_rank, **shown}
        )
    top = [c.id for c in served[: s.cooc_top]]
    pairs = [(a, b) for i, a in enumerate(top) for b in top[i + 1 :]]
    query_hash = hashlib.sha256(args.query.encode()).hexdigest()[:32]
    records_use = ctx.records_use

    async def record(session: AsyncSession, out: SearchSemanticOut) -> SearchSemanticOut:
        # The write part, on the primary (also when a read replica served the search: CallContext.write_after_read)
        writer = SearchRepository(session)
        event_id = await writer.log_event(
            pid, args.query, query_hash, treatment, args.limit, len(served), duration, found.engine
        )
        await writer.log_results(event_id, logged)
        if records_use:  # a read key or a read-only endpoint leaves the ranking as it is (docs/graph.md)
            await writer.record_access([c.id for c in served], pairs)
        return measured(out.model_copy(update={"event_id": event_id}), "tokens")

    ctx.write_after_read(record)
    out = SearchSemanticOut(
        results=hits,
        event_id=0,
        treatment=_label(treatment),
        engine=found.engine,
        duration_ms=round(duration, 3),
        notice=_notice(qvec, hits, found, s),
    )
    return measured(out, "tokens")
