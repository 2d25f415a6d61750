"""The limbic score and the search-quality metrics (pure functions, no I/O).

relevance    = cosine_sim + text_weight * text_score                  (the baseline ranking)
importance   = 1 - exp(-access_count / importance_scale)              (0 for never-returned entities)
temporal     = 0.5 ** (days_since_last_access / half_life_days)       (creation time when never accessed)
cooc_boost   = 1 - exp(-co_count_with_top_candidates / cooc_scale)
limbic_score = relevance * (1 + importance_weight * importance)
                         * ((1 - temporal_weight) + temporal_weight * temporal)
                         * (1 + cooc_weight * cooc_boost)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.graph.config import GraphSettings


@dataclass
class Candidate:
    """One entity with the inputs and components of its score."""

    id: int
    name: str
    entity_type: str
    status: str
    cosine_sim: float
    text_score: float
    access_count: int
    days_since_access: float
    relevance: float = 0.0
    importance: float = 0.0
    temporal: float = 0.0
    cooc_boost: float = 0.0
    limbic_score: float = 0.0
    baseline_rank: int = 0


def relevance(cos: float, text_score: float, s: GraphSettings) -> float:
    """The baseline (plain hybrid) score."""
    return cos + s.text_weight * text_score


def importance(access_count: int, s: GraphSettings) -> float:
    """Saturating importance from the access count."""
    return 1.0 - math.exp(-max(access_count, 0) / s.importance_scale)


def temporal(days: float, s: GraphSettings) -> float:
    """Exponential decay with the configured half-life."""
    return float(0.5 ** (max(days, 0.0) / s.half_life_days))


def cooc_boost(co_count: int, s: GraphSettings) -> float:
    """Saturating boost from co-occurrences with the other top candidates."""
    return 1.0 - math.exp(-max(co_count, 0) / s.cooc_scale)


def limbic(rel: float, imp: float, tmp: float, cooc: float, s: GraphSettings) -> float:
    """The limbic score: relevance modulated by importance, recency and co-occurrence."""
    return (
        rel
        * (1 + s.importance_weight * imp)
        * ((1 - s.temporal_weight) + s.temporal_weight * tmp)
        * (1 + s.cooc_weight * cooc)
    )


def score(cands: list[Candidate], cooc: Sequence[tuple[int, int, int]], s: GraphSettings) -> list[Candidate]:
    """Fill every component; returns the candidates in baseline order with `baseline_rank` set."""
    for c in cands:
        c.relevance = relevance(c.cosine_sim, c.text_score, s)
    baseline = sorted(cands, key=lambda c: (-c.relevance, c.id))
    for i, c in enumerate(baseline, 1):
        c.baseline_rank = i
    top = {c.id for c in baseline[: s.cooc_top]}
    co_sum: dict[int, int] = {}
    for a, b, n in cooc:
        if b in top:
            co_sum[a] = co_sum.get(a, 0) + n
        if a in top:
            co_sum[b] = co_sum.get(b, 0) + n
    for c in baseline:
        c.importance = importance(c.access_count, s)
        c.temporal = temporal(c.days_since_access, s)
        c.cooc_boost = cooc_boost(co_sum.get(c.id, 0), s)
        c.limbic_score = limbic(c.relevance, c.importance, c.temporal, c.cooc_boost, s)
    return baseline


def dcg(relevant_ranks: Sequence[int], k: int) -> float:
    """Discounted cumulative gain of binary relevance at the given 1-based ranks."""
    return sum(1.0 / math.log2(r + 1) for r in relevant_ranks if r <= k)


def ndcg(relevant_ranks: Sequence[int], k: int) -> float:
    """NDCG@k of binary relevance (the ideal puts every relevant result first)."""
    ideal = dcg(list(range(1, len(relevant_ranks) + 1)), k)
    return dcg(relevant_ranks, k) / ideal if ideal > 0 else 0.0


def reciprocal_rank(relevant_ranks: Sequence[int]) -> float:
    """1 / rank of the first relevant result."""
    return 1.0 / min(relevant_ranks) if relevant_ranks else 0.0
