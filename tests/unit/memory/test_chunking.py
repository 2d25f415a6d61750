"""app/memory/chunking.py: chunks of at most N tokens, cut at paragraph and sentence ends, overlapping."""

from __future__ import annotations

from app.core.embeddings.tokens import count_tokens
from app.memory.chunking import chunk_text

TEXT = (
    "First paragraph has a few words here.\n\n"
    "Second paragraph is a little longer, with more words to count. It ends here.\n\nThird."
)


def test_fixed_text_chunks() -> None:
    chunks = chunk_text(TEXT, 16, 4)
    assert [c.text for c in chunks] == [
        "First paragraph has a few words here.\n\nSecond paragraph is a little longer, with",
        "little longer, with more words to count. It ends here.\n\nThird.",
    ]
    assert [c.index for c in chunks] == [0, 1]
    assert all(c.tokens == count_tokens(c.text) <= 16 for c in chunks)


def test_short_and_empty_texts() -> None:
    assert [c.text for c in chunk_text("Just one line.", 16, 4)] == ["Just one line."]
    assert chunk_text("", 16, 4) == []
    assert chunk_text("   \n\n ", 16, 4) == []
