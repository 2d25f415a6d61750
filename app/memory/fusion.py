"""Reciprocal rank fusion of the semantic and lexical rankings (pure functions).

Each memory's fused score is the sum over the rankings it appears in of 1 / (k + rank), rank
1-based. It is then divided by the best score possible, n / (k + 1) for n rankings (first in every
one), so the top of a fusion of two lists scores 1.0 only when it leads both.

Worked example, k = 10: A is first by meaning and third by words, B second by meaning only:
A = 1/11 + 1/13 = 0.167832, B = 1/12 = 0.083333; best = 2/11 = 0.181818, so A scores 0.923077
and B 0.458333.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass
class Hit:
    """One retrieved memory and the signals that found it (per signal: its rank and raw score)."""

    id: uuid.UUID
    score: float
    signals: dict[str, dict[str, float]] = field(default_factory=dict)


def fuse(lists: dict[str, list[tuple[uuid.UUID, float]]], k: int) -> list[Hit]:
    """Fuse rankings `{signal: [(id, raw score), ...]}` best first (formula in the module docstring);
    ties go to the hit with the better single rank."""
    hits: dict[uuid.UUID, Hit] = {}
    for signal, ranked in lists.items():
        for rank, (mid, score) in enumerate(ranked, start=1):
            hit = hits.setdefault(mid, Hit(mid, 0.0))
            hit.score += 1.0 / (k + rank)
            hit.signals[signal] = {"rank": rank, "score": round(score, 6)}
    best = len(lists) / (k + 1) if lists else 1.0
    out = sorted(hits.values(), key=lambda h: (-h.score, min(s["rank"] for s in h.signals.values())))
    for hit in out:
        hit.score = round(hit.score / best, 6)
    return out
