"""Relevance in [0, 1] from a semantic and a lexical signal (pure functions).

A hit's relevance is the chance that either signal holds, as if they were independent:

    relevance = 1 - (1 - c) · (1 - min(1, w · v))

with `c` the cosine similarity of the query's and the hit's vectors (below 0 counts as 0), `v` the
lexical coverage (the BM25 score over the best score the query allows, `app.core.embeddings.lexical`) and
`w` = `LEXICAL_WEIGHT`, 1.25. A hit found by meaning alone keeps its cosine, one found by words alone
scores `min(1, w · v)`, and agreement of both raises it towards 1. The weight was chosen on SciFact's
train split, the best hybrid ranking of 1, 1.25 and 1.5 (docs/memory.md); a search for one signal is
the same formula with the other at 0, so one `score_threshold` means the same in every mode.

Worked example, w = 1.25: cosine 0.6 and coverage 0.4 give 1 - 0.4 · (1 - 0.5) = 0.8; cosine 0.6
alone gives 0.6; coverage 0.4 alone gives 0.5; cosine -0.1 and coverage 0 give 0.
"""

from __future__ import annotations

LEXICAL_WEIGHT = 1.25


def lexical_relevance(coverage: float, weight: float = LEXICAL_WEIGHT) -> float:
    """The lexical signal on the relevance scale: `min(1, weight · coverage)`, at least 0."""
    return min(1.0, max(0.0, weight * coverage))


def relevance(cosine: float | None, coverage: float | None, weight: float = LEXICAL_WEIGHT) -> float:
    """`1 - (1 - c) · (1 - min(1, w · v))` (module docstring); a missing signal counts as 0."""
    c = min(1.0, max(0.0, cosine or 0.0))
    return 1.0 - (1.0 - c) * (1.0 - lexical_relevance(coverage or 0.0, weight))
