"""Memory's ranking of hybrid search: every candidate of either ranking scored by calibrated relevance.

The semantic ranking (cosine, nearest first) and the lexical one (BM25 coverage in [0, 1], best first)
each bring their candidates; a candidate found by one ranking gets the other signal's value too (the
repository's `signals`), and every candidate is scored by `app.core.embeddings.relevance.relevance` of its two
values. Hits come best first; ties go to the hit with the better single rank. A hit's `signals` say,
per signal, its value and, when that ranking found it, its rank there.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from app.core.embeddings.relevance import lexical_relevance, relevance


@dataclass
class Hit:
    """One retrieved memory, its relevance in [0, 1] and the signals that scored it (per signal: its
    value, and its rank when that ranking found it)."""

    id: uuid.UUID
    score: float
    signals: dict[str, dict[str, float]] = field(default_factory=dict)


def single(signal: str, ranked: list[tuple[uuid.UUID, float]]) -> list[Hit]:
    """Hits of one ranking: relevance is the cosine (`semantic`) or the lexical relevance of the
    coverage (`lexical`), in the ranking's order."""
    score = (lambda v: relevance(v, None)) if signal == "semantic" else lexical_relevance
    return [
        Hit(mid, round(score(v), 6), {signal: {"rank": i, "score": round(v, 6)}})
        for i, (mid, v) in enumerate(ranked, start=1)
    ]


def fuse(
    semantic: list[tuple[uuid.UUID, float]],
    lexical: list[tuple[uuid.UUID, float]],
    filled: dict[uuid.UUID, tuple[float | None, float]] | None = None,
) -> list[Hit]:
    """Hits of both rankings (`[(id, cosine)]`, `[(id, coverage)]`, best first) by relevance, best
    first. `filled` holds, for candidates missing from one ranking, (cosine or None, coverage)."""
    filled = filled or {}
    cosine = {mid: c for mid, c in semantic}
    coverage = {mid: v for mid, v in lexical}
    ranks = {"semantic": {mid: i for i, (mid, _) in enumerate(semantic, 1)}}
    ranks["lexical"] = {mid: i for i, (mid, _) in enumerate(lexical, 1)}
    hits: list[tuple[Hit, int]] = []
    for mid in dict.fromkeys([*cosine, *coverage]):
        c, v = filled.get(mid, (None, 0.0))
        c = cosine.get(mid, c)
        v = coverage.get(mid, v)
        signals: dict[str, dict[str, float]] = {}
        for name, value in (("semantic", c), ("lexical", v)):
            if value is None or (name == "lexical" and value <= 0 and mid not in ranks["lexical"]):
                continue
            signals[name] = {"score": round(value, 6)}
            if mid in ranks[name]:
                signals[name]["rank"] = ranks[name][mid]
        best = min(r[mid] for r in ranks.values() if mid in r)
        hits.append((Hit(mid, round(relevance(c, v), 6), signals), best))
    hits.sort(key=lambda h: (-h[0].score, h[1]))
    return [h for h, _ in hits]
