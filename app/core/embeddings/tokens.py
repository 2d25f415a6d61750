"""Shared WordPiece tokenizer of all-MiniLM-L6-v2, for counting, chunking and truncating text.

The tokenizer is the model's ``tokenizer.json``, shipped inside this package
(``app/core/assets/all-MiniLM-L6-v2.tokenizer.json``) and loaded lazily once per path with the
``tokenizers`` library. Nothing is downloaded. Counts and spans never include the special tokens
(``[CLS]``/``[SEP]``); the embedding model adds two of those on top of the text's tokens.

Long texts are cut at whitespace into segments that are tokenised in parallel with
``encode_batch``. That gives the same tokens as one call, because BERT pre-tokenisation
splits on whitespace first and its normaliser works character by character.

Counting ASCII text (what compact JSON replies mostly are) skips the library's per-call work: the
text is lowercased and split as BERT's normaliser and pre-tokeniser would (words of letters and
digits, each punctuation mark on its own), and each distinct word's WordPiece count is asked of the
model once and remembered. Text with other characters is cut at whitespace (BERT never joins across
it, and its normaliser works character by character): ASCII pieces are counted so, each other piece
by the library once and remembered. ``tests/unit/core/embeddings/test_tokens.py`` holds the ways equal.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from tokenizers import Tokenizer

__all__ = [
    "count_tokens",
    "default_tokenizer_path",
    "get_tokenizer",
    "load_tokenizer",
    "token_spans",
    "truncate_to_tokens",
    "words_within",
]

TOKENIZER_FILE = Path(__file__).resolve().parents[1] / "assets" / "all-MiniLM-L6-v2.tokenizer.json"

# Texts longer than this (in characters) are split into segments tokenised in parallel.
_SEGMENT_CHARS = 8192

_lock = threading.Lock()
_cache: dict[str, Tokenizer] = {}


def default_tokenizer_path() -> Path:
    """Path of the packaged ``tokenizer.json`` of all-MiniLM-L6-v2.

    Raises:
        FileNotFoundError: the package was installed without its data files.
    """
    if not TOKENIZER_FILE.is_file():
        raise FileNotFoundError(f"tokenizer not found at {TOKENIZER_FILE}: reinstall the package with its data")
    return TOKENIZER_FILE


def load_tokenizer(path: str | Path | None = None) -> Tokenizer:
    """Load a fresh, uncached tokenizer with truncation and padding switched off.

    Use this when the instance will be reconfigured (as the embedder does for truncation
    and padding); :func:`get_tokenizer` returns a shared instance that must stay as it is.
    """
    resolved = Path(path) if path is not None else default_tokenizer_path()
    tokenizer = Tokenizer.from_file(str(resolved))
    # The shipped tokenizer.json truncates and pads to 128: neither suits counting.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def get_tokenizer(path: str | None = None) -> Tokenizer:
    """Return the shared tokenizer for ``path`` (default: the packaged one), loading it once.

    The instance is cached per path and thread-safe to use; do not change its truncation or
    padding settings (use :func:`load_tokenizer` for a private copy).
    """
    key = str(Path(path).resolve()) if path is not None else ""
    tokenizer = _cache.get(key)
    if tokenizer is None:
        with _lock:
            tokenizer = _cache.get(key)
            if tokenizer is None:
                tokenizer = load_tokenizer(path)
                _cache[key] = tokenizer
    return tokenizer


def _segments(text: str) -> list[tuple[int, int]]:
    """Cut ``text`` into ``(start, end)`` pieces of about ``_SEGMENT_CHARS``, at whitespace."""
    pieces: list[tuple[int, int]] = []
    start, n = 0, len(text)
    while n - start > _SEGMENT_CHARS:
        cut = start + _SEGMENT_CHARS
        # Walk back to a whitespace so no word is split; a piece with none is cut further on.
        back = cut
        while back > start and not text[back].isspace():
            back -= 1
        if back == start:
            while cut < n and not text[cut].isspace():
                cut += 1
        else:
            cut = back
        pieces.append((start, cut))
        start = cut
    pieces.append((start, n))
    return pieces


def _spans(text: str, tokenizer: Tokenizer) -> list[tuple[int, int]]:
    if len(text) <= _SEGMENT_CHARS:
        enc = tokenizer.encode(text, add_special_tokens=False)
        return [(int(a), int(b)) for a, b in enc.offsets]
    segments = _segments(text)
    encodings = tokenizer.encode_batch([text[a:b] for a, b in segments], add_special_tokens=False)
    spans: list[tuple[int, int]] = []
    for (base, _), enc in zip(segments, encodings, strict=True):
        spans.extend((base + int(a), base + int(b)) for a, b in enc.offsets)
    return spans


# BERT's pre-tokeniser on lowercased ASCII: runs of letters and digits, and every other printable
# character (all of them are punctuation to BERT) on its own; whitespace separates and is dropped.
_ASCII_WORDS = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
# Control characters other than tab and line breaks: BERT's normaliser deletes them, joining their
# neighbours into one word; such texts take the library's path.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Whitespace and invisible characters outside ASCII (C1 controls, no-break and other spaces, zero-width
# characters, line and paragraph separators, BOM): where BERT splits or deletes differs from
# `str.split`, so such texts take the library's path.
_UNICODE_SPACE = re.compile(r"[\x80-\xa0\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff]")
# Distinct words remembered per tokenizer (the table is emptied when it is full).
_WORDS_KEPT = 200_000
_word_counts: dict[int, dict[str, int]] = {}


def _table(tokenizer: Tokenizer) -> dict[str, int]:
    counts = _word_counts.get(id(tokenizer))
    if counts is None:
        counts = _word_counts.setdefault(id(tokenizer), {})
    return counts


# The two counters below are written out in full: they run on every reply, and a call per word
# (a shared "remember this count" helper) made a large JSON reply markedly slower to count.
def _ascii_count(text: str, tokenizer: Tokenizer) -> int:
    counts = _table(tokenizer)
    total = 0
    for word in _ASCII_WORDS.findall(text.lower()):
        n = counts.get(word)
        if n is None:
            # The model's own WordPiece (its longest-match pieces, [UNK] past 100 characters).
            n = len(tokenizer.model.tokenize(word)) if len(word) > 1 else 1
            if len(counts) >= _WORDS_KEPT:
                counts.clear()
            counts[word] = n
        total += n
    return total


def _mixed_count(text: str, tokenizer: Tokenizer) -> int:
    counts = _table(tokenizer)
    total = 0
    for piece in text.split():
        if piece.isascii():
            total += _ascii_count(piece, tokenizer)
            continue
        n = counts.get(piece)
        if n is None:
            n = len(tokenizer.encode(piece, add_special_tokens=False).ids)
            if len(counts) >= _WORDS_KEPT:
                counts.clear()
            counts[piece] = n
        total += n
    return total


def _fast_path(text: str) -> bool:
    """Whether `text` is counted without the library's call on all of it: no control characters, and
    ASCII or free of whitespace and invisible characters outside ASCII."""
    return _CONTROL.search(text) is None and (text.isascii() or _UNICODE_SPACE.search(text) is None)


def count_tokens(text: str, *, path: str | None = None) -> int:
    """Number of WordPiece tokens in ``text``, without special tokens."""
    if not text:
        return 0
    tokenizer = get_tokenizer(path)
    if _fast_path(text):
        return _ascii_count(text, tokenizer) if text.isascii() else _mixed_count(text, tokenizer)
    if len(text) <= _SEGMENT_CHARS:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)
    segments = _segments(text)
    encodings = tokenizer.encode_batch([text[a:b] for a, b in segments], add_special_tokens=False)
    return sum(len(enc.ids) for enc in encodings)


_PIECE = re.compile(r"\S+")


def words_within(text: str, max_tokens: int, *, path: str | None = None) -> int | None:
    """End of the longest prefix of ``text`` that ends a whitespace-separated word and holds at most
    ``max_tokens`` tokens (0 when even the first word does not fit); None for a text the counting
    fast paths do not take (control characters, spaces outside ASCII), whose cut needs
    `truncate_to_tokens`. Counts add up across whitespace, so no prefix is tokenised again."""
    if not _fast_path(text):
        return None
    tokenizer = get_tokenizer(path)
    end, used = 0, 0
    for match in _PIECE.finditer(text):
        used += _mixed_count(match.group(), tokenizer)
        if used > max_tokens:
            break
        end = match.end()
    return end


def token_spans(text: str, *, path: str | None = None) -> list[tuple[int, int]]:
    """Character offsets ``(start, end)`` in ``text`` of each token, without special tokens.

    Sub-word pieces of one word get adjacent spans (``"embeddings"`` -> ``em``, ``##bed``,
    ``##ding``, ``##s``); a word the vocabulary cannot represent is one ``[UNK]`` span.
    ``text[spans[i][0]:spans[j][1]]`` is the text of tokens ``i..j``, which makes these
    spans the basis for chunking by token count.
    """
    if not text:
        return []
    return _spans(text, get_tokenizer(path))


def truncate_to_tokens(text: str, max_tokens: int, *, path: str | None = None) -> str:
    """Longest prefix of ``text`` holding at most ``max_tokens`` tokens (no special tokens).

    The cut falls at the end of a token, so it can split a word between two of its
    sub-word pieces. Only as much of a long text as needed is tokenised.
    """
    if max_tokens <= 0 or not text:
        return ""
    tokenizer = get_tokenizer(path)
    # Tokenise a growing prefix (cut at whitespace) until it holds more than max_tokens.
    limit = max(256, max_tokens * 8)
    while True:
        if limit >= len(text):
            spans = _spans(text, tokenizer)
            break
        cut = limit
        while cut < len(text) and not text[cut].isspace():
            cut += 1
        spans = _spans(text[:cut], tokenizer)
        if len(spans) > max_tokens:
            break
        limit *= 4
    if len(spans) <= max_tokens:
        return text
    return text[: spans[max_tokens - 1][1]]
