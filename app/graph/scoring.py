"""The limbic score, what counts as an answer, and the search-quality metrics (pure functions, no I/O).

relevance    = cosine_sim + text_weight * text_score                  (the baseline ranking)
importance   = 1 - exp(-access_count / importance_scale)              (0 for never-returned entities)
temporal     = 0.5 ** (days_since_last_access / half_life_days)       (creation time when never accessed)
cooc_boost   = min(1, Σ_{j in top, j != e} co_count(e, j) / (n_top_others * (access_count + cooc_scale)))
limbic_score = relevance * (1 + importance_weight * importance)
                         * ((1 - temporal_weight) + temporal_weight * temporal)
                         * (1 + cooc_weight * cooc_boost)

`text_score` is the BM25 coverage of the query (`app.core.embeddings.lexical`, in [0, 1]).

`cooc_boost` is on a [0, 1] scale: the share of the entity's past returns in which it came back together
with the other top candidates of this search (`n_top_others` of them: the `cooc_top` best by relevance,
itself left out), averaged over those candidates. Every return of an entity in the top counted one access
and one co-occurrence per other top entity, so `co_count(e, j) <= access_count(e)`. `cooc_scale` returns
are added to the denominator as a prior of returns without those candidates, so that one shared search
proves little. A raw count saturated as history grew: one ten-result search gave every top-10 entity the
same boost of 0.835, and five gave ~1.0 whatever else they had been returned with. A share keeps telling an
entity that always comes back with this neighbourhood from one that comes back with everything.

Worked example (cooc_scale 5): the top of a search holds A, B, C. A has been returned 15 times, 9 of them
with B and 6 with C: cooc_boost(A) = (9 + 6) / (2 * (15 + 5)) = 0.375. D, outside the top, has been
returned 45 times (a hub entity, returned with everything), 5 times with each of A, B, C:
(5 + 5 + 5) / (3 * (45 + 5)) = 0.1. A new entity returned once with A, B and C: 3 / (3 * (1 + 5)) = 0.1667.

An answer is a candidate that passes the relevance floor (`Floor`): by meaning, a cosine of at least
`semantic_floor`, or of at least `supported_floor` when its text holds a query word; by words, a text
coverage of at least `min_text_coverage`. Both cosine floors follow the model's calibration
(`app.core.embeddings.calibration`):

semantic_floor  = unrelated + FLOOR_SHARE * (related - unrelated)      (unless set)
supported_floor = semantic_floor - WORD_SUPPORT * (related - unrelated)

For all-MiniLM-L6-v2 (unrelated 0.176, related 0.731): 0.176 + 0.75 * 0.555 = 0.592 and
0.592 - 0.35 * 0.555 = 0.398. The shares were chosen on a judged graph (docs/graph.md): an unrelated
Spanish query reached cosine 0.563 under this English model with no shared word, and an unrelated
English query sharing one ordinary word 0.356.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.embeddings.provider import Calibration
from app.graph.config import GraphSettings

Match = Literal["meaning", "text", "both"]  # the signals that admit an answer
FLOOR_SHARE = 0.75  # of the way from the model's `unrelated` to its `related` cosine (docs/graph.md)
WORD_SUPPORT = 0.35  # of that span, taken off the floor for a candidate sharing a query word


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
    matched_by: Match | None = None


def relevance(cos: float, text_score: float, s: GraphSettings) -> float:
    """The baseline (plain hybrid) score."""
    return cos + s.text_weight * text_score


def importance(access_count: int, s: GraphSettings) -> float:
    """Saturating importance from the access count."""
    return 1.0 - math.exp(-max(access_count, 0) / s.importance_scale)


def temporal(days: float, s: GraphSettings) -> float:
    """Exponential decay with the configured half-life."""
    return float(0.5 ** (max(days, 0.0) / s.half_life_days))


def cooc_boost(co_count: int, others: int, access_count: int, s: GraphSettings) -> float:
    """The share of an entity's returns spent with the `others` other top candidates (`co_count`: its
    co-occurrences with them, summed), shrunk by `cooc_scale` prior returns; in [0, 1]."""
    if others <= 0 or co_count <= 0:
        return 0.0
    return min(1.0, co_count / (others * (max(access_count, 0) + s.cooc_scale)))


@dataclass(frozen=True)
class Floor:
    """The relevance floor of one search: the cosine that admits by meaning alone, the lower cosine that
    admits with at least one query word in the text (both None when the query has no vector), and the
    text coverage that admits by words alone."""

    cosine: float | None
    supported: float | None
    coverage: float

    def admits(self, cos: float, coverage: float) -> Match | None:
        """Which signals admit a candidate: "both", "meaning", "text", or None (no answer)."""
        shares_a_word = coverage > 0
        meaning = self.cosine is not None and (
            cos >= self.cosine or (shares_a_word and self.supported is not None and cos >= self.supported)
        )
        words = shares_a_word and coverage >= self.coverage
        return "both" if meaning and words else "meaning" if meaning else "text" if words else None


def floor_of(
    cal: Calibration | None, s: GraphSettings, cosine: float | None = None, coverage: float | None = None
) -> Floor:
    """The floor of a search: `cosine` and `coverage` when given (a call's arguments), else the settings,
    else the module docstring's rules over the model's calibration; `cal` None: the query has no vector."""
    min_coverage = coverage if coverage is not None else s.min_text_coverage
    if cal is None:
        return Floor(None, None, min_coverage)
    span = cal.related - cal.unrelated
    floor = cosine if cosine is not None else s.semantic_floor
    if floor is None:
        floor = round(cal.at(FLOOR_SHARE), 3)
    return Floor(floor, round(floor - WORD_SUPPORT * span, 3), min_coverage)


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
        others = len(top) - (1 if c.id in top else 0)
        c.cooc_boost = cooc_boost(co_sum.get(c.id, 0), others, c.access_count, s)
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
