"""app/graph/service_search.py (pure parts), without a server."""

from __future__ import annotations

from app.graph import service_search
from app.graph.config import GraphSettings
from app.graph.scoring import Candidate
from app.graph.service_common import BASELINE, LIMBIC

SETTINGS = GraphSettings()


def _found(inputs: int) -> service_search._Candidates:
    return service_search._Candidates("hybrid", [{}] * inputs, [], set())


def test_a_requested_treatment_is_kept_and_auto_follows_the_ratio() -> None:
    assert service_search._treatment("limbic", 0.0) == LIMBIC
    assert service_search._treatment("baseline", 1.0) == BASELINE
    assert service_search._treatment("auto", 1.0) == LIMBIC and service_search._treatment("auto", 0.0) == BASELINE


def test_an_answer_needs_a_query_word_or_a_close_enough_vector() -> None:
    floor = SETTINGS.semantic_floor
    assert service_search._an_answer(0.0, 0.1, True, SETTINGS)
    assert service_search._an_answer(floor, 0.0, True, SETTINGS)
    assert not service_search._an_answer(floor - 0.01, 0.0, True, SETTINGS)
    assert not service_search._an_answer(1.0, 0.0, False, SETTINGS)  # no query vector: the cosine is no signal


def test_components_are_rounded_for_the_reply_and_the_log() -> None:
    c = Candidate(1, "n", "t", "active", 0.12345678, 0.5, 3, 1.0, relevance=0.3333333333, limbic_score=0.7777777777)
    comp = service_search._components(c)
    assert comp["cosine_sim"] == 0.123457 and comp["relevance"] == 0.333333 and comp["limbic_score"] == 0.777778
    assert set(comp) == {
        "limbic_score",
        "relevance",
        "cosine_sim",
        "text_score",
        "importance",
        "temporal",
        "cooc_boost",
    }


def test_the_notice_says_why_nothing_or_text_alone_was_used() -> None:
    assert "unavailable" in (service_search._notice(None, [], _found(0), SETTINGS) or "")
    assert service_search._notice([0.1], [], _found(0), SETTINGS) is None  # nothing to rank at all
    assert "close enough" in (service_search._notice([0.1], [], _found(2), SETTINGS) or "")
