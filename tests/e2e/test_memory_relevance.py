"""Memory search scores: one relevance in [0, 1] in every mode, `score_threshold` applied to it in
every mode, nothing (with a notice) when nothing matches well, and English stems in lexical search."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.core.embeddings.relevance import relevance
from tests.support.memory import NOTES, api, seed_notes
from tests.support.replies import hit_texts

PROJECT = "relevance"
MODES = ("hybrid", "semantic", "lexical")


@pytest.fixture
async def notes(rest: httpx.AsyncClient, request: pytest.FixtureRequest) -> str:
    """A project of its own per test, holding NOTES."""
    project = f"{PROJECT}-{request.node.name.removeprefix('test_')[:40]}".replace("_", "-")
    await seed_notes(rest, project)
    return project


async def _search(rest: httpx.AsyncClient, project: str, query: str, **extra: object) -> dict[str, Any]:
    return await api(rest, "/memory/search", {"query_text": query, "project": project, **extra})


async def test_every_mode_reports_relevance_as_its_formula_says(rest: httpx.AsyncClient, notes: str) -> None:
    query = "why did the database migration time out?"
    for mode in MODES:
        body = await _search(rest, notes, query, mode=mode, score_threshold=0, explain=True, k=5)
        results = body["results"]
        assert isinstance(results, list) and results, mode
        for r in results:
            signals = r["signals"]
            cosine = signals.get("semantic", {}).get("score")
            coverage = signals.get("lexical", {}).get("score")
            assert 0.0 <= r["score"] <= 1.0
            assert r["score"] == pytest.approx(relevance(cosine, coverage), abs=2e-3), (mode, r)
        assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    # Meaning and words agree on the migration note: it leads the hybrid search.
    body = await _search(rest, notes, query, k=1)
    assert hit_texts(body) == [NOTES[0][0]]


async def test_the_threshold_holds_in_every_mode(rest: httpx.AsyncClient, notes: str) -> None:
    for mode in MODES:
        loose = await _search(rest, notes, "migration timeout dashboard", mode=mode, score_threshold=0, k=10)
        strict = await _search(rest, notes, "migration timeout dashboard", mode=mode, score_threshold=0.6, k=10)
        scores = [r["score"] for r in loose["results"]]
        assert any(s < 0.6 for s in scores), (mode, scores)
        assert [r["score"] for r in strict["results"]] == [s for s in scores if s >= 0.6], mode


async def test_a_query_matching_nothing_well_returns_nothing_and_says_why(rest: httpx.AsyncClient, notes: str) -> None:
    for mode in ("hybrid", "semantic"):
        body = await _search(rest, notes, "zzqx unrelated gibberish", mode=mode)
        assert body["results"] == [], (mode, body["results"])
        notice = str(body["notice"])
        threshold = body["score_threshold"]  # the mode's default, echoed
        assert f"under the relevance threshold {threshold:g}" in notice and "score_threshold" in notice, notice
    body = await _search(rest, notes, "zzqx unrelated gibberish", mode="lexical")
    assert body["results"] == []  # no stem of the query is in any note: no candidate at all
    assert "shares a word" in body["notice"], body


async def test_lexical_search_matches_word_forms(rest: httpx.AsyncClient, notes: str) -> None:
    body = await _search(rest, notes, "rolling back releases", mode="lexical", score_threshold=0)
    assert hit_texts(body)[:1] == [NOTES[1][0]]  # 'We rolled back the release ...'
    body = await _search(rest, notes, "octopus heart", mode="lexical", score_threshold=0)
    assert hit_texts(body) == [NOTES[4][0]]  # 'Octopuses have three hearts ...'
