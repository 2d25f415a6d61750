"""app/memory/service_search.py (pure parts): cutting texts and context blocks by characters or tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from app.core.embeddings.tokens import count_tokens
from app.memory.schemas import compact_time, round_score
from app.memory.service_search import build_context, cite, clip


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
