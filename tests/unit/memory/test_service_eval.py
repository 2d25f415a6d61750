"""app/memory/service_eval.py: retrieval quality of `cairn eval beir` (ir-measures)."""

from __future__ import annotations

import math

from app.memory.service_eval import quality


def test_mean_ndcg_and_recall_count_empty_rankings_as_zero() -> None:
    rankings = {"q1": ["d1", "d3"], "q2": [], "q3": ["x", "d9", "d9"]}
    qrels = {"q1": {"d1": 1, "d2": 1}, "q2": {"d5": 1}, "q3": {"d9": 1}}
    scores = quality(rankings, qrels)
    q1 = 1 / (1 + 1 / math.log2(3))  # d1 at rank 1 of two relevant documents
    q3 = 1 / math.log2(3)  # the one relevant document at rank 2
    assert math.isclose(scores["nDCG@10"], (q1 + 0 + q3) / 3, rel_tol=1e-9)
    assert math.isclose(scores["R@100"], (0.5 + 0 + 1) / 3, rel_tol=1e-9)
