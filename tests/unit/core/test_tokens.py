"""app/core/tokens.py: `count_tokens` counts what the tokenizer library counts, on its ASCII path (its
own splitting and a table of word counts) as on the library's, for any text."""

from __future__ import annotations

import json
import random
import string

import pytest

from app.core import tokens
from app.core.tokens import count_tokens, get_tokenizer


def library_count(text: str) -> int:
    return len(get_tokenizer().encode(text, add_special_tokens=False).ids)


def test_ascii_counts_equal_the_librarys_on_random_printable_text() -> None:
    rng = random.Random(11)
    for _ in range(4000):
        text = "".join(rng.choice(string.printable) for _ in range(rng.choice([1, 2, 5, 30, 300])))
        assert count_tokens(text) == library_count(text), repr(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"data":[{"category":"books","total":123456.789,"orders":42}],"context_tokens_used":0}',
        "Embeddings, re-ranking & BM25: ~42% of [queries] {cost} <= 1.5x; `code` | pipes ^ carets",
        "x" * 100,  # the longest word WordPiece splits
        "x" * 101,  # past it: one [UNK]
        "a\x00b c\x07d",  # control characters are deleted, joining their neighbours (the library's path)
        "tab\there\nnew line\r\nCRLF",
        "MiXeD CaSe UPPER lower 0123456789 3.14159e-10",
        "naïve café 中文 emoji 🙂 mixed with ascii",  # not ASCII: the library's path
    ],
)
def test_counts_equal_the_librarys_on_chosen_texts(text: str) -> None:
    assert count_tokens(text) == library_count(text)


def test_json_replies_count_alike_and_long_texts_too() -> None:
    rng = random.Random(5)
    rows = [{"id": i, "name": f"item-{rng.randint(0, 10**6)}", "v": rng.random() * 1e6} for i in range(500)]
    text = json.dumps({"rows": rows}, separators=(",", ":"))
    assert len(text) > 8192  # past one segment of the library's path
    assert count_tokens(text) == library_count(text)
    spaced = " ".join(f"word{i} {rng.random()}" for i in range(3000))
    assert count_tokens(spaced) == library_count(spaced)


def test_the_word_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_WORDS_KEPT", 50)
    tokens._word_counts.clear()
    text = " ".join(f"w{i}x" for i in range(400))
    assert count_tokens(text) == library_count(text)
    assert all(len(table) <= 50 for table in tokens._word_counts.values())
