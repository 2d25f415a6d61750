"""app/memory/fusion.py: hybrid hits scored by relevance, both signals per candidate."""

from __future__ import annotations

import math
import uuid

from app.memory.fusion import fuse, single

A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))


def test_every_candidate_is_scored_with_both_signals() -> None:
    # A: cosine 0.6 (first by meaning), coverage 0.4 (second by words): 1 - 0.4 * 0.5 = 0.8.
    # B: cosine 0.5 by meaning only, its coverage filled in as 0: 0.5.
    # C: coverage 0.6 (first by words), its cosine filled in as 0.2: 1 - 0.8 * 0.25 = 0.8.
    hits = fuse([(A, 0.6), (B, 0.5)], [(C, 0.6), (A, 0.4)], {B: (0.5, 0.0), C: (0.2, 0.6)})
    by_id = {h.id: h for h in hits}
    assert math.isclose(by_id[A].score, 0.8) and math.isclose(by_id[B].score, 0.5)
    assert math.isclose(by_id[C].score, 0.8)
    assert [h.id for h in hits] == [A, C, B]  # A and C tie: A has the better single rank (1 by meaning)
    assert by_id[A].signals == {"semantic": {"score": 0.6, "rank": 1}, "lexical": {"score": 0.4, "rank": 2}}
    assert by_id[C].signals == {"semantic": {"score": 0.2}, "lexical": {"score": 0.6, "rank": 1}}
    assert by_id[B].signals == {"semantic": {"score": 0.5, "rank": 2}}


def test_a_candidate_without_a_vector_scores_by_words_alone() -> None:
    hits = fuse([], [(A, 0.4)], {})
    assert hits[0].score == 0.5 and hits[0].signals == {"lexical": {"score": 0.4, "rank": 1}}
    assert fuse([], [], {}) == []


def test_one_signal_hits_keep_their_order_and_use_the_same_scale() -> None:
    sem = single("semantic", [(A, 0.7), (B, -0.1)])
    assert [(h.id, h.score) for h in sem] == [(A, 0.7), (B, 0.0)]
    lex = single("lexical", [(C, 0.9), (A, 0.4)])
    assert [(h.id, h.score) for h in lex] == [(C, 1.0), (A, 0.5)]
    assert lex[1].signals == {"lexical": {"rank": 2, "score": 0.4}}
