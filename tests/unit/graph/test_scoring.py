"""app/graph/scoring.py: the limbic score against its docstring's formula and worked example, the
co-occurrence share that keeps telling entities apart as history grows, what admits an answer, the
semantic floor's rule over a calibration, and the quality metrics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.embeddings.provider import Calibration
from app.graph import scoring
from app.graph.config import GraphSettings

S = GraphSettings()


def _formula(cos: float, text: float, accesses: int, days: float, co: int, s: GraphSettings, others: int = 9) -> float:
    """The module docstring's formula, written out once more."""
    relevance = cos + s.text_weight * text
    importance = 1 - math.exp(-accesses / s.importance_scale)
    temporal = float(0.5 ** (days / s.half_life_days))
    cooc = min(1.0, co / (others * (accesses + s.cooc_scale)))
    return (
        relevance
        * (1 + s.importance_weight * importance)
        * ((1 - s.temporal_weight) + s.temporal_weight * temporal)
        * (1 + s.cooc_weight * cooc)
    )


def _candidate(id: int, cos: float, text: float = 0.0, accesses: int = 0, days: float = 0.0) -> scoring.Candidate:
    return scoring.Candidate(id, f"e{id}", "thing", "active", cos, text, accesses, days)


def test_worked_example_of_docs() -> None:
    """The example of docs/graph.md: three entities, Babbage and Lovelace returned together ten times."""
    cands = [
        scoring.Candidate(1, "Charles Babbage", "person", "activo", 0.62, 0.40, 20, 15.0),
        scoring.Candidate(2, "Difference Engine", "machine", "activo", 0.70, 0.20, 0, 2.0),
        scoring.Candidate(3, "Ada Lovelace", "person", "activo", 0.55, 0.0, 12, 1.0),
    ]
    out = {c.name: c for c in scoring.score(cands, [(1, 3, 10)], GraphSettings())}
    assert [round(out[n].limbic_score, 4) for n in ("Charles Babbage", "Difference Engine", "Ada Lovelace")] == [
        0.874,
        0.7415,
        0.7004,
    ]
    assert [out[n].baseline_rank for n in ("Difference Engine", "Charles Babbage", "Ada Lovelace")] == [1, 2, 3]
    assert round(out["Charles Babbage"].cooc_boost, 4) == 0.2 and round(out["Ada Lovelace"].cooc_boost, 4) == 0.2941
    assert math.isclose(scoring.ndcg([2], 10), 1 / math.log2(3)) and scoring.reciprocal_rank([3, 2]) == 0.5


def test_the_co_occurrence_example_of_the_docstring() -> None:
    """Top A, B, C; A returned 15 times (9 with B, 6 with C); D, a hub returned 45 times, 5 with each;
    a new entity returned once with all three."""
    s = GraphSettings(cooc_scale=5.0)
    assert math.isclose(scoring.cooc_boost(9 + 6, 2, 15, s), 0.375)
    assert math.isclose(scoring.cooc_boost(5 + 5 + 5, 3, 45, s), 0.1)
    assert round(scoring.cooc_boost(3, 3, 1, s), 4) == 0.1667
    cands = [_candidate(1, 0.9, accesses=15), _candidate(2, 0.8, accesses=9), _candidate(3, 0.7, accesses=6)]
    cands.append(_candidate(4, 0.1, accesses=45))
    pairs = [(1, 2, 9), (1, 3, 6), (1, 4, 5), (2, 4, 5), (3, 4, 5)]
    out = {c.id: c for c in scoring.score(cands, pairs, GraphSettings(cooc_top=3))}
    assert math.isclose(out[1].cooc_boost, 0.375) and math.isclose(out[4].cooc_boost, 0.1)


def test_the_co_occurrence_boost_keeps_telling_entities_apart_as_history_grows() -> None:
    """Ten entities returned together once all get a small boost (not 0.835); after many searches the
    one always returned with this top keeps the highest boost, and one returned with this top in a fifth
    of its many returns (a hub) stays far below it (a saturating count gave both about 1.0)."""
    s = GraphSettings()
    once = [_candidate(i, 1.0 - i / 100, accesses=1) for i in range(1, 11)]
    pairs = [(a, b, 1) for a in range(1, 11) for b in range(a + 1, 11)]
    boosts = {round(c.cooc_boost, 4) for c in scoring.score(once, pairs, s)}
    assert boosts == {round(9 / (9 * (1 + s.cooc_scale)), 4)} and max(boosts) < 0.2
    # 50 searches: 1 and 2 always together; 3 returned 250 times, with 1 in 50 of them
    loyal, hub = _candidate(2, 0.8, accesses=50), _candidate(3, 0.7, accesses=250)
    out = {c.id: c for c in scoring.score([_candidate(1, 0.9, accesses=50), loyal, hub], [(1, 2, 50), (1, 3, 50)], s)}
    assert out[2].cooc_boost > 0.45 and out[3].cooc_boost < 0.1
    assert out[2].cooc_boost > 4 * out[3].cooc_boost
    # more of the same history: the loyal one's share grows towards 1 / 2, the hub's stays put
    grown = {
        c.id: c
        for c in scoring.score(
            [_candidate(1, 0.9, accesses=500), _candidate(2, 0.8, accesses=500), _candidate(3, 0.7, accesses=2500)],
            [(1, 2, 500), (1, 3, 500)],
            s,
        )
    }
    assert grown[3].cooc_boost < 0.1 < 0.45 < grown[2].cooc_boost <= 0.5


def test_what_admits_an_answer() -> None:
    floor = scoring.Floor(cosine=0.5, supported=0.3, coverage=0.2)
    assert floor.admits(0.6, 0.0) == "meaning"
    assert floor.admits(0.6, 0.3) == "both"
    assert floor.admits(0.35, 0.1) == "meaning"  # one shared word: the lower floor
    assert floor.admits(0.45, 0.0) is None  # no shared word: the full floor
    assert floor.admits(0.25, 0.3) == "text"
    assert floor.admits(0.25, 0.1) is None  # one ordinary word of a longer query, and a far meaning
    blind = scoring.Floor(None, None, 0.2)  # no query vector: the cosine is no signal
    assert blind.admits(0.9, 0.1) is None and blind.admits(0.9, 0.2) == "text"
    assert scoring.Floor(0.5, 0.3, 0.0).admits(0.1, 0.0) is None  # no shared word is no text match


def test_the_floors_follow_the_calibration_unless_set() -> None:
    local = Calibration(unrelated=0.176, related=0.731)
    assert scoring.floor_of(local, GraphSettings()) == scoring.Floor(0.592, 0.398, 0.2)  # the docstring's figures
    wide = Calibration(unrelated=0.65, related=0.85, source="measured")
    assert scoring.floor_of(wide, GraphSettings()) == scoring.Floor(0.8, 0.73, 0.2)  # above its unrelated 0.65
    assert scoring.floor_of(wide, GraphSettings(semantic_floor=0.9, min_text_coverage=0.4)) == scoring.Floor(
        0.9, 0.83, 0.4
    )
    assert scoring.floor_of(wide, GraphSettings(semantic_floor=0.9), cosine=0.7, coverage=0.1) == scoring.Floor(
        0.7, 0.63, 0.1
    )  # a call's arguments first
    assert scoring.floor_of(None, GraphSettings()) == scoring.Floor(None, None, 0.2)


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
    cooc = scoring.cooc_boost(co, 9, accesses, S)
    got = scoring.limbic(rel, scoring.importance(accesses, S), scoring.temporal(days, S), cooc, S)
    assert math.isclose(got, _formula(cos, text, accesses, days, co, S), rel_tol=1e-12, abs_tol=1e-12)


def test_the_components_at_their_landmarks() -> None:
    s = GraphSettings(importance_scale=4.0, half_life_days=10.0, cooc_scale=2.0)
    assert scoring.importance(0, s) == 0.0  # never returned: no importance
    assert math.isclose(scoring.importance(4, s), 1 - 1 / math.e)  # the scale gives 1 - 1/e
    assert scoring.importance(-3, s) == 0.0  # a negative count counts as none
    assert scoring.temporal(0.0, s) == 1.0
    assert math.isclose(scoring.temporal(10.0, s), 0.5) and math.isclose(scoring.temporal(20.0, s), 0.25)
    assert scoring.temporal(-5.0, s) == 1.0  # a clock skew into the future is "just now"
    assert scoring.cooc_boost(0, 3, 4, s) == 0.0 and scoring.cooc_boost(5, 0, 4, s) == 0.0  # nothing, or alone
    assert math.isclose(scoring.cooc_boost(6, 3, 4, s), 6 / (3 * (4 + 2)))  # a third of its returns
    assert scoring.cooc_boost(50, 1, 1, s) == 1.0  # counts decayed under their pairs: capped at 1
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
    cands = [_candidate(i, 1.0 - i / 10, accesses=10) for i in (1, 2, 3, 4)]
    # A candidate counts its co-occurrences with the top two (1 and 2), whatever its own rank:
    # (3, 4) pairs two others (no boost for either), (1, 3) and (3, 2) add up for 3, (4, 2) boosts 4,
    # (1, 2) boosts both top ones, and 1 and 2 get nothing from pairs with 3 or 4.
    pairs = [(3, 4, 50), (1, 3, 2), (4, 2, 1), (3, 2, 3), (1, 2, 4)]
    out = {c.id: c for c in scoring.score(cands, pairs, s)}
    assert math.isclose(out[3].cooc_boost, scoring.cooc_boost(2 + 3, 2, 10, s))
    assert math.isclose(out[4].cooc_boost, scoring.cooc_boost(1, 2, 10, s))
    assert math.isclose(out[1].cooc_boost, scoring.cooc_boost(4, 1, 10, s))  # the top one has one other
    assert math.isclose(out[2].cooc_boost, scoring.cooc_boost(4, 1, 10, s))


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
