"""app/graph/scoring.py: the limbic score against its docstring's formula, and the quality metrics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.graph import scoring
from app.graph.config import GraphSettings

S = GraphSettings()


def _formula(cos: float, text: float, accesses: int, days: float, co: int, s: GraphSettings) -> float:
    """The module docstring's formula, written out once more."""
    relevance = cos + s.text_weight * text
    importance = 1 - math.exp(-accesses / s.importance_scale)
    temporal = float(0.5 ** (days / s.half_life_days))
    cooc = 1 - math.exp(-co / s.cooc_scale)
    return (
        relevance
        * (1 + s.importance_weight * importance)
        * ((1 - s.temporal_weight) + s.temporal_weight * temporal)
        * (1 + s.cooc_weight * cooc)
    )


def _candidate(id: int, cos: float, text: float = 0.0, accesses: int = 0, days: float = 0.0) -> scoring.Candidate:
    return scoring.Candidate(id, f"e{id}", "thing", "active", cos, text, accesses, days)


def test_worked_example_of_docs() -> None:
    """The example of docs/: three entities, Babbage and Lovelace co-occurring three times."""
    cands = [
        scoring.Candidate(1, "Charles Babbage", "person", "activo", 0.62, 0.10, 5, 15.0),
        scoring.Candidate(2, "Difference Engine", "machine", "activo", 0.70, 0.05, 0, 2.0),
        scoring.Candidate(3, "Ada Lovelace", "person", "activo", 0.55, 0.0, 2, 1.0),
    ]
    out = {c.name: c for c in scoring.score(cands, [(1, 3, 3)], GraphSettings())}
    assert [round(out[n].limbic_score, 4) for n in ("Charles Babbage", "Difference Engine", "Ada Lovelace")] == [
        0.7286,
        0.7045,
        0.6286,
    ]
    assert [out[n].baseline_rank for n in ("Difference Engine", "Charles Babbage", "Ada Lovelace")] == [1, 2, 3]
    assert round(out["Charles Babbage"].cooc_boost, 4) == 0.4512
    assert math.isclose(scoring.ndcg([2], 10), 1 / math.log2(3)) and scoring.reciprocal_rank([3, 2]) == 0.5


@given(
    cos=st.floats(-1, 1),
    text=st.floats(0, 1),
    accesses=st.integers(0, 500),
    days=st.floats(0, 3650),
    co=st.integers(0, 100),
)
def test_the_components_compose_as_the_docstring_says(
    cos: float, text: float, accesses: int, days: float, co: int
) -> None:
    rel = scoring.relevance(cos, text, S)
    got = scoring.limbic(rel, scoring.importance(accesses, S), scoring.temporal(days, S), scoring.cooc_boost(co, S), S)
    assert math.isclose(got, _formula(cos, text, accesses, days, co, S), rel_tol=1e-12, abs_tol=1e-12)


def test_the_components_at_their_landmarks() -> None:
    s = GraphSettings(importance_scale=4.0, half_life_days=10.0, cooc_scale=2.0)
    assert scoring.importance(0, s) == 0.0  # never returned: no importance
    assert math.isclose(scoring.importance(4, s), 1 - 1 / math.e)  # the scale gives 1 - 1/e
    assert scoring.importance(-3, s) == 0.0  # a negative count counts as none
    assert scoring.temporal(0.0, s) == 1.0
    assert math.isclose(scoring.temporal(10.0, s), 0.5) and math.isclose(scoring.temporal(20.0, s), 0.25)
    assert scoring.temporal(-5.0, s) == 1.0  # a clock skew into the future is "just now"
    assert scoring.cooc_boost(0, s) == 0.0 and math.isclose(scoring.cooc_boost(2, s), 1 - 1 / math.e)
    assert scoring.relevance(0.5, 0.4, GraphSettings(text_weight=0.5)) == 0.7


def test_with_no_modulation_the_limbic_score_is_the_relevance() -> None:
    plain = GraphSettings(importance_weight=0.0, temporal_weight=0.0, cooc_weight=0.0)
    assert scoring.limbic(0.8, 1.0, 0.0, 1.0, plain) == 0.8
    # at full strength each factor is bounded: at most (1 + w) for importance and co-occurrence,
    # and down to (1 - temporal_weight) for an entity untouched for ages
    assert math.isclose(scoring.limbic(1.0, 1.0, 1.0, 0.0, S), 1 + S.importance_weight)
    assert math.isclose(scoring.limbic(1.0, 0.0, 0.0, 0.0, S), 1 - S.temporal_weight)
    assert math.isclose(scoring.limbic(1.0, 0.0, 1.0, 1.0, S), 1 + S.cooc_weight)


def test_score_orders_by_relevance_with_ties_broken_by_id_and_fills_every_component() -> None:
    cands = [_candidate(7, 0.5), _candidate(3, 0.5), _candidate(9, 0.9), _candidate(1, 0.1, text=0.4)]
    out = scoring.score(cands, [], S)
    assert [c.id for c in out] == [9, 3, 7, 1]  # 0.9, then the two 0.5 by id, then 0.1 + 0.25 * 0.4
    assert [c.baseline_rank for c in out] == [1, 2, 3, 4]
    for c in out:
        expected = _formula(c.cosine_sim, c.text_score, c.access_count, c.days_since_access, 0, S)
        assert math.isclose(c.limbic_score, expected)
        assert c.cooc_boost == 0.0 and c.importance == 0.0 and c.temporal == 1.0


def test_only_co_occurrences_with_the_top_candidates_boost() -> None:
    s = GraphSettings(cooc_top=2)
    cands = [_candidate(1, 0.9), _candidate(2, 0.8), _candidate(3, 0.7), _candidate(4, 0.6)]
    # A candidate counts its co-occurrences with the top two (1 and 2), whatever its own rank:
    # (3, 4) pairs two others (no boost for either), (1, 3) and (3, 2) add up for 3, (4, 2) boosts 4,
    # (1, 2) boosts both top ones, and 1 and 2 get nothing from pairs with 3 or 4.
    pairs = [(3, 4, 50), (1, 3, 2), (4, 2, 1), (3, 2, 3), (1, 2, 4)]
    out = {c.id: c for c in scoring.score(cands, pairs, s)}
    assert math.isclose(out[3].cooc_boost, scoring.cooc_boost(2 + 3, s))
    assert math.isclose(out[4].cooc_boost, scoring.cooc_boost(1, s))
    assert math.isclose(out[1].cooc_boost, scoring.cooc_boost(4, s))
    assert math.isclose(out[2].cooc_boost, scoring.cooc_boost(4, s))


def test_limbic_can_lift_a_well_used_recent_entity_past_a_slightly_closer_one() -> None:
    closer = _candidate(1, 0.70, accesses=0, days=365.0)
    used = _candidate(2, 0.66, accesses=30, days=0.5)
    out = scoring.score([closer, used], [], S)
    assert [c.id for c in out] == [1, 2]  # baseline order
    assert used.limbic_score > closer.limbic_score


@pytest.mark.parametrize(
    ("ranks", "k", "expected"),
    [
        ([1, 2, 3], 10, 1.0),  # every relevant result first: the ideal
        ([], 10, 0.0),
        ([11], 10, 0.0),  # past the cut
        ([2], 10, 1 / math.log2(3)),
        ([1, 3], 10, (1 + 1 / 2) / (1 + 1 / math.log2(3))),
        ([1, 12], 10, 1 / (1 + 1 / math.log2(3))),  # the ideal puts both in the top k
    ],
)
def test_ndcg(ranks: list[int], k: int, expected: float) -> None:
    assert math.isclose(scoring.ndcg(ranks, k), expected)


def test_dcg_counts_only_ranks_within_k() -> None:
    assert math.isclose(scoring.dcg([1, 3, 5], 3), 1 + 1 / 2)
    assert scoring.dcg([4], 3) == 0.0


def test_reciprocal_rank_is_that_of_the_first_relevant_result() -> None:
    assert scoring.reciprocal_rank([4, 2, 9]) == 0.5
    assert scoring.reciprocal_rank([1]) == 1.0
    assert scoring.reciprocal_rank([]) == 0.0
