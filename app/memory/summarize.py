"""Summaries: extractive (central, mutually diverse sentences picked by MMR over embeddings; no network)
and abstractive (a configured chat model: Ollama or any OpenAI-compatible API).

Extractive summaries quote whole sentences of the stored text only. The chunks of one pushed document
overlap (`app.memory.chunking`); they are put back together (`assemble`) before the text is split, so
a sentence that straddles a chunk boundary is read whole and once. Where a chunk of the document is not
among the memories read (the window's `limit`, or a chunk deduplicated into another document), the
sentence cut by that gap is skipped rather than quoted in part.

Sentence boundaries come from nupunkt (Punkt, Kiss & Strunk 2006, with its trained English model
shipped in the package): dots inside names, versions, hosts, file globs, decimals and abbreviations
("*.internal", "v2.3.1", "api.example.com", "3.5 GB", "e.g.") do not end a sentence. Blank lines, list
items and a line break before a line that does not start in lower case end one whatever the punctuation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
import numpy as np
import nupunkt

from app.core.embeddings.provider import EmbeddingProvider
from app.core.embeddings.tokens import token_spans
from app.core.errors import UpstreamError, invalid_field
from app.memory.config import MemorySettings

_PARAGRAPHS = re.compile(r"\n\s*\n")
_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+")
MAX_SENTENCES = 400
MMR_LAMBDA = 0.7
NEAR_DUPLICATE = 0.95
PROMPT_CHARS = 16_000
DEFAULT_URLS = {"ollama": "http://127.0.0.1:11434", "openai": "https://api.openai.com/v1"}


@dataclass
class SummaryResult:
    """A summary and how it was made."""

    text: str
    strategy: str
    provider: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class Passage:
    """One memory read for a summary: its text and, for a chunk of a pushed document, which document,
    its position and the document's last position (None when unknown)."""

    text: str
    document: str | None = None
    index: int | None = None
    last: int | None = None


@dataclass(frozen=True)
class Span:
    """A stretch of stored text; `cut_head`/`cut_tail`: it starts/ends where a chunk of its document is
    missing, so its first/last sentence may be a fragment."""

    text: str
    cut_head: bool = False
    cut_tail: bool = False


def _word_ends(text: str) -> list[int]:
    """Offsets just after each whitespace-separated word of `text`, last first."""
    return [m.end() for m in re.finditer(r"\S+", text)][::-1]


def _shared(left: str, right: str, most: int) -> int | None:
    """The length of the longest prefix of `right` of at most `most` characters that `left` ends with,
    on word boundaries (None: there is none)."""
    for k in _word_ends(right[: min(len(left), most)]):
        if left.endswith(right[:k]) and (k == len(left) or left[-k - 1].isspace()):
            return k
    return None


def join_chunks(left: str, right: str, overlap_tokens: int | None = None) -> str:
    """`left` followed by `right`, the text they share (the chunk overlap: a suffix of `left` that is
    a prefix of `right`, on word boundaries) written once; joined by a space when they share none.

    With `overlap_tokens` (the chunker's overlap) the shared text is the longest that fits in that many
    tokens of `right`, as the chunker made it, so a text that repeats itself ("retrying. retrying.")
    is not folded into fewer repeats; only when none fits is a longer one taken."""
    if overlap_tokens is not None:
        if overlap_tokens <= 0:  # chunks made without overlap only touch
            return f"{left} {right}"
        spans = token_spans(right)
        k = _shared(left, right, spans[min(overlap_tokens, len(spans)) - 1][1] if spans else 0)
        if k is not None:
            return left + right[k:]
    k = _shared(left, right, len(right))
    return left + right[k:] if k is not None else f"{left} {right}"


def assemble(passages: Sequence[Passage], overlap_tokens: int | None = None) -> list[Span]:
    """The passages as stretches of stored text: the chunks of one document in order, consecutive ones
    joined over their overlap (`join_chunks`); a stretch is marked cut where a neighbouring chunk is not
    among them. Stretches come in the order their first passage was given."""
    spans: list[Span] = []
    groups: dict[str, list[Passage]] = {}
    order: list[str | Passage] = []
    for p in passages:
        if p.document is None or p.index is None:
            order.append(p)
        else:
            if p.document not in groups:
                order.append(p.document)
            groups.setdefault(p.document, []).append(p)
    for item in order:
        if isinstance(item, Passage):
            spans.append(Span(item.text))
            continue
        chunks = sorted({p.index: p for p in groups[item]}.values(), key=lambda p: p.index or 0)
        run = [chunks[0]]
        for chunk in [*chunks[1:], None]:
            if chunk is not None and chunk.index == (run[-1].index or 0) + 1:
                run.append(chunk)
                continue
            text = run[0].text
            for nxt in run[1:]:
                text = join_chunks(text, nxt.text, overlap_tokens)
            last = run[-1]
            cut_tail = last.last is not None and (last.index or 0) < last.last
            spans.append(Span(text, cut_head=(run[0].index or 0) > 0, cut_tail=cut_tail))
            if chunk is not None:
                run = [chunk]
    return spans


def _segments(text: str) -> list[str]:
    """Stretches no sentence crosses: paragraphs, list items, and lines after a line break that is
    not a soft wrap (the next line starts with something other than a lower-case letter)."""
    out: list[str] = []
    for paragraph in _PARAGRAPHS.split(text):
        current: list[str] = []
        for line in paragraph.split("\n"):
            stripped = line.strip()
            if not stripped:
                continue
            if current and (stripped[0].islower() and not _LIST_ITEM.match(line)):
                current.append(stripped)
                continue
            if current:
                out.append(" ".join(current))
            current = [stripped]
        if current:
            out.append(" ".join(current))
    return out


def span_sentences(span: Span) -> list[str]:
    """The whole sentences of a stretch, whitespace-normalised, list markers dropped; the sentence at a
    missing chunk is left out (it may be a fragment)."""
    sentences: list[str] = []
    for segment in _segments(span.text):
        sentences.extend(str(s) for s in nupunkt.sent_tokenize(segment))
    if span.cut_head and sentences:
        sentences = sentences[1:]
    if span.cut_tail:  # even one ending in a dot: the chunk may stop after "e.g." or "v2."
        sentences = sentences[:-1]
    out = []
    for s in sentences:
        sentence = _LIST_ITEM.sub("", " ".join(s.split()), count=1).strip()
        if sentence:
            out.append(sentence)
    return out


def split_sentences(texts: Sequence[str | Passage], overlap_tokens: int | None = None) -> list[str]:
    """Whole sentences of the texts (or passages, reassembled first) in order, whitespace-normalised,
    without exact repeats; capped."""
    spans = assemble([t if isinstance(t, Passage) else Passage(t) for t in texts], overlap_tokens)
    out: list[str] = []
    seen: set[str] = set()
    per_span = max(3, MAX_SENTENCES // max(len(spans), 1))
    for span in spans:
        count = 0
        for sentence in span_sentences(span):
            if len(sentence) < 3 or sentence.lower() in seen:
                continue
            seen.add(sentence.lower())
            out.append(sentence)
            count += 1
            if count >= per_span:
                break
    return out[:MAX_SENTENCES]


SHORT_ID = 8


def short_ids(ids: Sequence[str]) -> list[str]:
    """Each id cut to its first `SHORT_ID` characters, longer where two of `ids` would share a prefix
    (the full ids stay in the stored summary's metadata)."""
    n = SHORT_ID
    while n < max((len(i) for i in ids), default=0) and len({i[:n] for i in ids}) < len(set(ids)):
        n += 1
    return [i[:n] for i in ids]


def _words(text: str) -> int:
    return len(text.split())


def _fit(sentence: str, budget: int) -> str:
    words = sentence.split()
    return sentence if len(words) <= budget else " ".join(words[:budget]) + " …"


async def extractive(
    embedder: EmbeddingProvider, texts: Sequence[str | Passage], max_words: int, overlap_tokens: int | None = None
) -> str:
    """The most central, mutually diverse whole sentences (MMR) within `max_words`, in their original
    order. Only when no sentence fits at all is the most central one shortened, marked with "…"."""
    sentences = split_sentences(texts, overlap_tokens)
    if not sentences:
        return ""
    if sum(_words(s) for s in sentences) <= max_words:
        return " ".join(sentences)
    vectors = np.asarray(await embedder.embed(sentences), dtype=np.float32)
    centroid = vectors.mean(axis=0)
    centroid /= max(float(np.linalg.norm(centroid)), 1e-9)
    relevance = vectors @ centroid
    chosen: list[int] = []
    budget = max_words
    candidates = {i for i, s in enumerate(sentences) if _words(s) <= budget}
    while candidates and budget > 0:
        if chosen:
            redundancy = (vectors[list(candidates)] @ vectors[chosen].T).max(axis=1)
        else:
            redundancy = np.zeros(len(candidates), dtype=np.float32)
        order = list(candidates)
        scores = MMR_LAMBDA * relevance[order] - (1 - MMR_LAMBDA) * redundancy
        best = order[int(np.argmax(scores))]
        candidates.discard(best)
        if chosen and float((vectors[chosen] @ vectors[best]).max()) > NEAR_DUPLICATE:
            continue
        size = _words(sentences[best])
        if size <= budget:
            chosen.append(best)
            budget -= size
    if not chosen:
        return _fit(sentences[int(np.argmax(relevance))], max_words)
    return " ".join(sentences[i] for i in sorted(chosen))


def _prompt(texts: list[str], max_words: int) -> str:
    notes, used = [], 0
    for i, text in enumerate(texts, start=1):
        line = f"{i}. {' '.join(text.split())}"
        if used + len(line) > PROMPT_CHARS:
            break
        notes.append(line)
        used += len(line)
    return (
        f"Write a faithful summary of these notes in at most {max_words} words. Keep names, numbers and "
        "decisions; add nothing that is not in the notes. Answer with the summary only.\n\n" + "\n".join(notes)
    )


async def abstractive(
    provider: str, base_url: str, model: str, api_key: str | None, texts: list[str], max_words: int, timeout: float
) -> str:
    """Ask a chat model for the summary; failures raise UpstreamError (5020)."""
    messages = [{"role": "user", "content": _prompt(texts, max_words)}]
    base = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if provider == "ollama":
        url, payload = f"{base}/api/chat", {"model": model, "messages": messages, "stream": False}
    else:
        url, payload = f"{base}/chat/completions", {"model": model, "messages": messages, "temperature": 0.2}
    try:
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
            response = await client.post(url, json=payload)
    except httpx.HTTPError as exc:
        raise UpstreamError(f"summary provider {provider} at {url}: {type(exc).__name__}") from exc
    if not response.is_success:
        raise UpstreamError(f"summary provider {provider} at {url}: HTTP {response.status_code}")
    try:
        body = response.json()
        text = body["message"]["content"] if provider == "ollama" else body["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise UpstreamError(f"summary provider {provider} at {url}: unexpected response") from exc
    text = str(text).strip()
    if not text:
        raise UpstreamError(f"summary provider {provider} returned an empty summary")
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words]) + " …"


async def summarize(
    embedder: EmbeddingProvider,
    settings: MemorySettings,
    texts: Sequence[str | Passage],
    *,
    strategy: str,
    provider: str | None,
    model: str | None,
    max_words: int,
) -> SummaryResult:
    """Summarise `texts` with the requested strategy (`auto` = abstractive when configured, else extractive)."""
    configured = settings.summary_provider if settings.summary_provider != "none" else None
    if provider is not None and provider != configured:
        # Callers pick among what the operator set up; they cannot make the server call other endpoints.
        raise invalid_field(
            "provider",
            f"Summary provider '{provider}' is not configured on this server"
            + (f" (configured: '{configured}')" if configured else " (none is configured)"),
            rule="not_configured",
            suggestions=["Omit provider to use the configured one, or use strategy 'extractive'"],
        )
    chosen = configured
    chosen_model = model or settings.summary_model
    if strategy == "abstractive" and (chosen is None or not chosen_model):
        raise invalid_field(
            "strategy",
            "strategy 'abstractive' needs a summary provider and model",
            rule="provider_required",
            suggestions=[
                "Set CAIRN_SUMMARY_PROVIDER and CAIRN_SUMMARY_MODEL, or pass provider and model",
                "Or use strategy 'extractive'",
            ],
        )
    if strategy in ("auto", "abstractive") and chosen is not None and chosen_model:
        base = settings.summary_base_url or DEFAULT_URLS[chosen]
        passages = [t if isinstance(t, Passage) else Passage(t) for t in texts]
        whole = [span.text for span in assemble(passages, settings.memory_chunk_overlap)]
        try:
            text = await abstractive(
                chosen, base, chosen_model, settings.summary_api_key, whole, max_words, settings.summary_timeout
            )
            return SummaryResult(text, "abstractive", chosen, chosen_model)
        except UpstreamError:
            if strategy == "abstractive":
                raise
    return SummaryResult(await extractive(embedder, texts, max_words, settings.memory_chunk_overlap), "extractive")
