"""app/memory/service_search.py (pure parts): cutting texts and context blocks by characters or tokens."""

from __future__ import annotations

from app.core.tokens import count_tokens
from app.memory.service_search import build_context, clip


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
