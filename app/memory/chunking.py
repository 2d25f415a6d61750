"""Split text into chunks of at most N embedding-tokenizer tokens, preferring paragraph and sentence ends."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.core.embeddings.tokens import token_spans

_SENTENCE_END = re.compile(r"[.!?;:]['\")\]]*$")


@dataclass(frozen=True)
class Chunk:
    """One chunk: its text, position and token count."""

    index: int
    text: str
    tokens: int


def _boundary_score(text: str, spans: list[tuple[int, int]], i: int) -> int:
    """How good a cut is just before token ``i``: 2 paragraph break, 1 sentence end, 0 other."""
    gap = text[spans[i - 1][1] : spans[i][0]]
    if "\n\n" in gap or re.search(r"\n\s*\n", gap):
        return 2
    piece = text[spans[i - 1][0] : spans[i - 1][1]]
    if gap and (_SENTENCE_END.search(piece) or "\n" in gap):
        return 1
    return 0


def _word_start(text: str, spans: list[tuple[int, int]], i: int) -> bool:
    return i == 0 or spans[i][0] > spans[i - 1][1]


def _best_cut(text: str, spans: list[tuple[int, int]], start: int, end: int, size: int) -> int:
    """The token index to cut before: the latest paragraph break, else sentence end, else word start,
    searched back to half a chunk from ``start``."""
    floor = start + max(size // 2, 1)
    sentence = word = None
    for i in range(end, floor, -1):
        score = _boundary_score(text, spans, i)
        if score == 2:
            return i
        if score == 1 and sentence is None:
            sentence = i
        if word is None and _word_start(text, spans, i):
            word = i
    return sentence or word or end


def _overlap_start(text: str, spans: list[tuple[int, int]], lo: int, end: int) -> int:
    """Where the next chunk starts: the first sentence start in ``[lo, end)``, else the first word start."""
    if lo >= end:
        return end
    for i in range(lo, end):
        if _boundary_score(text, spans, i) >= 1:
            return i
    i = lo
    while i < end and not _word_start(text, spans, i):
        i += 1
    return i


def chunk_text(text: str, size: int, overlap: int) -> list[Chunk]:
    """Chunks of at most ``size`` tokens overlapping by about ``overlap`` tokens.

    A cut is moved back (no further than half a chunk) to the last paragraph break, else the last
    sentence end, else the last word start, so chunks rarely stop mid-sentence.
    """
    text = text.strip()
    if not text:
        return []
    spans = token_spans(text)
    n = len(spans)
    if n <= size:
        return [Chunk(0, text, n)]
    chunks: list[Chunk] = []
    start = 0
    while start < n:
        end = min(start + size, n)
        if end < n:
            end = _best_cut(text, spans, start, end, size)
        piece = text[spans[start][0] : spans[end - 1][1]].strip()
        if piece:
            chunks.append(Chunk(len(chunks), piece, end - start))
        if end >= n:
            break
        start = _overlap_start(text, spans, max(end - overlap, start + 1), end)
    return chunks
