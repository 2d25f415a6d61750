"""app/memory/service_search.py (pure parts): cutting texts and context blocks by characters or tokens,
thresholds applied to hits (defaults per mode, pending vectors) and the notice when nothing passes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

from app.core.embeddings.calibration import LOCAL
from app.core.embeddings.tokens import count_tokens
from app.memory.fusion import Hit
from app.memory.schemas import compact_time, round_score
from app.memory.service_search import Retrieval, apply_threshold, build_context, cite, clip
from app.memory.thresholds import rule


def test_clip_by_tokens_and_by_characters() -> None:
    text = "word " * 400
    short, cut = clip(text, 20, "tokens")
    assert cut and short.endswith("…") and count_tokens(short) <= 20
    assert clip("a short note", 20, "tokens") == ("a short note", False)
    chars, cut = clip("alpha beta gamma delta", 12)
    assert (chars, cut) == ("alpha beta…", True)


def test_context_block_stays_within_its_token_limit() -> None:
    items = [("a", "hello world " * 300, None), ("b", "second note", None)]
    block, truncated = build_context(items, 60, "tokens")
    assert truncated and block.startswith("[a] hello world") and count_tokens(block) <= 60
    whole, truncated = build_context([("b", "second note", None)], 60, "tokens")
    assert (whole, truncated) == ("[b] second note", False)


def test_cite_labels_lines_and_flags_each_item() -> None:
    items = [("1", "first   note\n\nwith a break", None), ("2", "word " * 400, None), ("3", "third note", None)]
    block, cut = cite(items, 1000, "tokens", per_item=50)
    lines = block.split("\n")
    assert lines[0] == "[1] first note with a break" and lines[1].startswith("[2] word word")
    assert lines[2] == "[3] third note" and cut == [False, True, False]
    # the budget runs out in the second item: it is cut to the room left, the third is left out
    block, cut = cite(items, 40, "tokens", per_item=300)
    assert count_tokens(block) <= 40 and block.count("\n") == 1 and cut == [False, True, True]
    # too little room left for a useful part: the item is left out
    block, cut = cite(items[:1] + items[2:], 12, "tokens")
    assert block == "[1] first note with a break" and cut == [False, True]
    dated = cite([("a", "note", datetime(2026, 11, 24, 23, 5, tzinfo=UTC))], 100)[0]
    assert dated == "[a] (2026-11-24) note"


def test_compact_time_and_round_score() -> None:
    assert compact_time(datetime(2026, 11, 24, 23, 5, 59, 999_999, tzinfo=UTC)) == "2026-11-24T23:05Z"
    assert compact_time(datetime(2026, 11, 24, tzinfo=UTC)) == "2026-11-24"
    assert compact_time(datetime(2026, 11, 25, 1, 30, tzinfo=timezone(timedelta(hours=2)))) == "2026-11-24T23:30Z"
    assert compact_time(datetime(2026, 11, 25, 2, 0, tzinfo=timezone(timedelta(hours=2)))) == "2026-11-25"
    assert round_score(0.123456) == 0.123 and round_score(12.3456) == 12.346


def _hit(score: float, *signals: str) -> Hit:
    return Hit(uuid.uuid4(), score, {s: {"score": score} for s in signals})


def test_default_thresholds_hold_each_hit_to_its_evidence() -> None:
    defaults = rule(LOCAL)  # hybrid 0.591, semantic 0.454, lexical 0.25
    hits = [_hit(0.7, "semantic", "lexical"), _hit(0.5, "semantic"), _hit(0.3, "lexical"), _hit(0.2, "lexical")]
    found = apply_threshold(hits, "hybrid", 10, defaults)
    # The hit without a vector (no semantic signal) is held to the lexical default, and said to be pending.
    assert [h.score for h in found.hits] == [0.7, 0.3] and found.pending == 1
    assert (found.below, found.best_below, found.threshold) == (2, 0.5, 0.591)
    assert "1 result(s) have no vector yet" in str(found.notice())
    # The caller's threshold is the same for every hit.
    found = apply_threshold(hits, "hybrid", 10, 0.25)
    assert [h.score for h in found.hits] == [0.7, 0.5, 0.3] and found.threshold == 0.25
    fallback = apply_threshold(hits[2:], "lexical_fallback", 10, defaults)
    assert fallback.threshold == 0.25 and "Ranked by words only" in str(fallback.notice())


def test_nothing_passing_says_why() -> None:
    found = apply_threshold([_hit(0.42, "semantic"), _hit(0.3, "semantic")], "semantic", 5, rule(LOCAL))
    assert found.hits == [] and found.notice("threshold") == (
        "2 candidate(s) scored under the relevance threshold 0.454 (best 0.42): nothing matches well; "
        "lower threshold to see them"
    )
    assert "shares a word" in str(Retrieval([], "lexical").notice())
    assert "check the project" in str(Retrieval([], "hybrid").notice())
    assert Retrieval([_hit(0.9, "semantic")], "hybrid").notice() is None
