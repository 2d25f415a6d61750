"""Conversations: chat turns stored one per memory (`tests/support/judged_chats.py`: 150 turns of
three speakers over six sessions, 26 judged questions) are found by speaker, by relative date and by
paraphrase. Real PostgreSQL, the real local model, hybrid search through REST, the questions asked at
the set's `NOW`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.core.embeddings.relevance import relevance
from app.memory import conversation
from app.memory.conversation import boost
from tests.support.databases import own_server
from tests.support.judged_chats import NOW, QUESTIONS, recall_at, store_chats
from tests.support.memory import api
from tests.support.server import PgCluster

pytestmark = pytest.mark.slow  # 150 captures with their vectors

PROJECT = "chats"
# Measured on this set (docs/memory.md, "Conversations"): 0.558 without the speaker and date cues,
# 0.750 with them. The bars leave room for a different build of the model's runtime.
RECALL_AT_5 = 0.70
GAIN_OVER_NO_CUES = 0.12


@pytest.fixture
async def own(pg: PgCluster) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A server on a database of its own: lexical scores depend on the whole table's statistics, which
    the rest of the suite's memories would move."""
    async with own_server(pg) as pair:
        yield pair


async def _search(rest: httpx.AsyncClient, query: str, **extra: object) -> dict[str, Any]:
    return await api(rest, "/memory/search", {"query_text": query, "project": PROJECT, "k": 5, **extra})


async def test_speakers_and_relative_dates_raise_recall_at_5(
    own: tuple[httpx.AsyncClient, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rest, dsn = own
    monkeypatch.setattr(conversation, "now", lambda: NOW)  # the questions are asked on 2026-04-16
    refs = await store_chats(rest, dsn, PROJECT)

    async def search(query: str) -> list[str]:
        return [r["id"] for r in (await _search(rest, query, score_threshold=0))["results"]]

    recall, per = await recall_at(search, refs)
    missed = {q: r for q, r in per.items() if r < 1}
    with monkeypatch.context() as plain:
        plain.setattr(conversation, "rerank", lambda hits, *_: hits)  # the same search without the cues
        before, _ = await recall_at(search, refs)
    assert recall >= RECALL_AT_5 and recall - before >= GAIN_OVER_NO_CUES, (recall, before, len(QUESTIONS), missed)

    # Explained: each hit's speaker and date matches are signals beside the cosine and the coverage,
    # its score is their boost of its relevance, and the threshold held for the relevance before it.
    body = await _search(rest, "What did Tom say last week about cooking?", explain=True, k=10)
    first = body["results"][0]
    assert refs[first["id"]] == ("s5", 16), body["context"]
    assert first["signals"]["speaker"]["score"] == 1.0 and first["signals"]["date"]["score"] == 1.0, first
    assert {"semantic", "lexical"} <= set(first["signals"]), first
    for r in body["results"]:
        s = r["signals"]
        before = relevance(s.get("semantic", {}).get("score"), s.get("lexical", {}).get("score"))
        match = (s.get("speaker", {}).get("score", 0.0) + s.get("date", {}).get("score", 0.0)) / 2
        assert before >= body["score_threshold"] and r["score"] == pytest.approx(boost(before, match), abs=2e-3), r
    # A query naming no speaker and no date keeps its relevance and signals as they were.
    body = await _search(rest, "the camping stove", explain=True)
    assert body["results"] and all(set(r["signals"]) <= {"semantic", "lexical"} for r in body["results"]), body
