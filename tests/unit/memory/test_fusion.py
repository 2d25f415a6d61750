"""app/memory/fusion.py: reciprocal rank fusion, checked against the module's worked example."""

from __future__ import annotations

import math
import uuid

from app.memory.fusion import fuse

A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))


def test_the_documented_example() -> None:
    hits = fuse({"semantic": [(A, 0.9), (B, 0.8)], "lexical": [(C, 7.0), (uuid.UUID(int=9), 5.0), (A, 2.0)]}, k=10)
    by_id = {h.id: h for h in hits}
    assert math.isclose(by_id[A].score, 0.923077, abs_tol=1e-6)
    assert math.isclose(by_id[B].score, 0.458333, abs_tol=1e-6)
    assert by_id[A].signals == {"semantic": {"rank": 1, "score": 0.9}, "lexical": {"rank": 3, "score": 2.0}}
    assert hits[0].id == A


def test_first_in_every_list_scores_one_and_ties_go_to_the_better_rank() -> None:
    hits = fuse({"semantic": [(A, 0.5), (B, 0.4)], "lexical": [(A, 3.0), (C, 1.0)]}, k=60)
    assert hits[0].id == A and hits[0].score == 1.0
    assert [h.id for h in hits[1:]] == [B, C]  # equal fused scores: B and C both rank 2 once
    assert fuse({}, k=10) == []
