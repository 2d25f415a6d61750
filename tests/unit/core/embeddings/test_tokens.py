"""app/core/embeddings/tokens.py: `count_tokens` counts what the tokenizer library counts, on its ASCII path (its
own splitting and a table of word counts) as on the library's, for any text."""

from __future__ import annotations

import json
import random
import string

import pytest

from app.core.embeddings import tokens
from app.core.embeddings.tokens import count_tokens, get_tokenizer


def library_count(text: str) -> int:
    return len(get_tokenizer().encode(text, add_special_tokens=False).ids)


def test_ascii_counts_equal_the_librarys_on_random_printable_text() -> None:
    rng = random.Random(11)
    for _ in range(4000):
        text = "".join(rng.choice(string.printable) for _ in range(rng.choice([1, 2, 5, 30, 300])))
        assert count_tokens(text) == library_count(text), repr(text)


# Letters with accents and combining marks, Greek, Cyrillic, CJK, symbols, emoji, typographic
# punctuation, and the characters the library path must keep (no-break and zero-width spaces, C1).
UNICODE = "éèçñüßøÅ\u0301αβγΔμ±≤≥°µ×→∞ЖжЩ中文字日本語한국😀🙂‘’“”–—…•"  # noqa: RUF001
INVISIBLE = "\u00a0\u200b\u2028\u0085\ufeff"


@pytest.mark.parametrize("invisible", [False, True])
def test_counts_equal_the_librarys_on_random_mixed_text(invisible: bool) -> None:
    rng = random.Random(12)
    alphabet = string.printable.replace("\x0b", "").replace("\x0c", "") + UNICODE * 3
    alphabet += INVISIBLE if invisible else ""
    pieces = 0
    for _ in range(4000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 2, 5, 30, 300])))
        assert count_tokens(text) == library_count(text), repr(text)
        pieces += not text.isascii() and tokens._UNICODE_SPACE.search(text) is None
    assert invisible or pieces > 2000  # most texts took the piece-by-piece path


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
        "naïve café 中文 emoji 🙂 mixed with ascii",  # not ASCII: pieces at whitespace
        "IL-1β and TNF-α (p < 0.05; n = 12 ± 3) in µg/ml — “quoted” …",  # noqa: RUF001
        "no\u00a0break and zero\u200bwidth",  # such spaces: the library's path
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


def test_words_within_is_the_longest_whole_word_prefix_that_fits() -> None:
    rng = random.Random(13)
    words = ["cell", "rotation", "IL-1β", "naïve", "中文", "x" * 40, "3.14", "(p<0.05)", "embeddings,"]
    for _ in range(500):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
        cap = rng.randint(0, 60)
        end = tokens.words_within(text, cap)
        assert end is not None
        assert library_count(text[:end]) <= cap and (end == 0 or not text[end : end + 1].strip())
        following = text.find(" ", end + 1)
        longer = len(text) if following < 0 else following
        if end < len(text):
            assert library_count(text[:longer]) > cap  # the next word does not fit
    assert tokens.words_within("a\x00b", 5) is None and tokens.words_within("no\u00a0break", 5) is None


def test_tokenizer_is_shared_and_untruncated() -> None:
    assert tokens.get_tokenizer() is tokens.get_tokenizer()
    assert tokens.get_tokenizer(str(tokens.default_tokenizer_path())) is not None
    long_text = "word " * 1000
    assert tokens.count_tokens(long_text) == 1000  # the shipped tokenizer.json truncates at 128


def test_count_and_spans() -> None:
    assert tokens.count_tokens("") == 0 and tokens.token_spans("") == []
    assert tokens.count_tokens("Hello world") == 2  # no [CLS]/[SEP]
    text = "Embeddings in Zürich: 北京!"
    spans = tokens.token_spans(text)
    assert len(spans) == tokens.count_tokens(text)
    assert text[spans[0][0] : spans[0][1]].lower() == "em"
    assert all(a < b for a, b in spans) and spans == sorted(spans)


def test_long_text_segments_match_single_encoding() -> None:
    words = ["alpha", "βeta", "北京", "emb3ddings", "x**2;", "🚀", "\n\n", "naïve", "ok."]
    text = " ".join(words[(i * 7) % len(words)] for i in range(12000))  # > segment size
    whole = tokens.get_tokenizer().encode(text, add_special_tokens=False)
    assert tokens.token_spans(text) == [tuple(o) for o in whole.offsets]
    assert tokens.count_tokens(text) == len(whole.ids)


def test_truncate_to_tokens() -> None:
    text = "one two three four five six"
    assert tokens.truncate_to_tokens(text, 3) == "one two three"
    assert tokens.truncate_to_tokens(text, 100) == text
    assert tokens.truncate_to_tokens(text, 0) == ""
    assert tokens.truncate_to_tokens("embeddings", 2) == "embed"  # cut between sub-word pieces
    long_text = "lorem ipsum dolor sit amet " * 5000
    cut = tokens.truncate_to_tokens(long_text, 1000)
    assert tokens.count_tokens(cut) == 1000 and long_text.startswith(cut)
