"""Summaries: extractive (central, mutually diverse sentences picked by MMR over embeddings; no network)
and abstractive (a configured chat model: Ollama or any OpenAI-compatible API)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import numpy as np
import pysbd

from app.core.embeddings.provider import EmbeddingProvider
from app.core.errors import UpstreamError, invalid_field
from app.memory.config import MemorySettings

# Blank lines and list items end a sentence whatever their punctuation; within a block, pysbd finds
# the sentence boundaries (abbreviations, decimals and initials included).
_BLOCKS = re.compile(r"\n\s*\n|\n(?=\s*[-*•]\s)")
_SEGMENTER = pysbd.Segmenter(language="en", clean=False)
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


def split_sentences(texts: list[str]) -> list[str]:
    """Sentences of the texts in order, whitespace-normalised, without exact repeats; capped."""
    out: list[str] = []
    seen: set[str] = set()
    per_text = max(3, MAX_SENTENCES // max(len(texts), 1))
    for text in texts:
        count = 0
        for piece in (s for block in _BLOCKS.split(text) for s in _SEGMENTER.segment(block)):
            sentence = " ".join(piece.split()).lstrip("-*• ").strip()
            if len(sentence) < 3 or sentence.lower() in seen:
                continue
            seen.add(sentence.lower())
            out.append(sentence)
            count += 1
            if count >= per_text:
                break
    return out[:MAX_SENTENCES]


def _words(text: str) -> int:
    return len(text.split())


def _fit(sentence: str, budget: int) -> str:
    words = sentence.split()
    return sentence if len(words) <= budget else " ".join(words[:budget]) + " …"


async def extractive(embedder: EmbeddingProvider, texts: list[str], max_words: int) -> str:
    """The most central, mutually diverse sentences (MMR) within `max_words`, in their original order."""
    sentences = split_sentences(texts)
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
    candidates = set(range(len(sentences)))
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
        elif not chosen:  # the first pick alone is too long: keep its beginning
            sentences[best] = _fit(sentences[best], budget)
            chosen.append(best)
            budget = 0
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
    texts: list[str],
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
        try:
            text = await abstractive(
                chosen, base, chosen_model, settings.summary_api_key, texts, max_words, settings.summary_timeout
            )
            return SummaryResult(text, "abstractive", chosen, chosen_model)
        except UpstreamError:
            if strategy == "abstractive":
                raise
    return SummaryResult(await extractive(embedder, texts, max_words), "extractive")
