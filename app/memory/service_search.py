"""The one search engine of both dialects: vector (pgvector), full text (tsvector) and their fusion.

`hybrid` fuses the cosine ranking and the full-text ranking (BM25 over the `simple` tsvector for plain
queries, `websearch_to_tsquery` + `ts_rank_cd` for queries written in web-search syntax) by reciprocal
rank fusion; `semantic` and `lexical` use one signal. When the active model has no vectors in the searched scope (or the
embedder is unreachable), semantic and hybrid searches fall back to full text and say so
(`retrieval_mode = "lexical_fallback"`).
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from app.core.embedding import EmbeddingProvider, EmbeddingUnavailable
from app.core.tokens import count_tokens, truncate_to_tokens
from app.memory.config import MemorySettings
from app.memory.fusion import Hit, fuse
from app.memory.repository import MemoryRepository, Scope
from app.memory.schemas import RetrievalMode, SearchMode

log = logging.getLogger("cairn.memory")

# Function words carry no topic; dropping them keeps the OR query from matching everything.
STOPWORDS = frozenset(
    """
a an and are as at be been being but by can could did do does for from had has have having he her hers him his
how i if in into is it its itself just me more most my no nor not of off on once only or other our ours out over
own same she should so some such than that the their theirs them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours also
""".split()
)

_WEBSEARCH_SYNTAX = re.compile(r'"|(?:^|\s)-\w|\sor\s', re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)

# Lexical ranking: ts_rank_cd normalisation 1 divides by 1 + log(document length).
TS_NORMALIZATION = 1
# A term in more than this share of the scope (with enough documents) is too common to help ranking.
COMMON_TERM_SHARE = 0.35
COMMON_TERM_MIN_DOCS = 50


@dataclass
class Retrieval:
    """The ranked hits and the retrieval mode actually used."""

    hits: list[Hit]
    retrieval_mode: RetrievalMode


def query_terms(query: str) -> list[str]:
    """Lower-cased distinct content words of a query, in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word not in STOPWORDS and word not in seen:
            seen[word] = None
    return list(seen)


BM25_K1 = 1.2
BM25_B = 0.75


def variants(word: str) -> list[str]:
    """The word with its singular/plural twin (the `simple` config does not stem): `vaccines` <-> `vaccine`."""
    forms = [word]
    if len(word) < 4 or not word.isalpha():
        return forms
    if word.endswith("ies"):
        forms.append(word[:-3] + "y")
    elif word.endswith(("ches", "shes", "xes", "sses")):
        forms.append(word[:-2])
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        forms.append(word[:-1])
    elif word.endswith("y") and word[-2] not in "aeiou":
        forms.append(word[:-1] + "ies")
    elif word.endswith(("ch", "sh", "x", "ss")):
        forms.append(word + "es")
    else:
        forms.append(word + "s")
    return forms


async def bm25_hits(repo: MemoryRepository, scope: Scope, terms: list[str], k: int) -> list[tuple[uuid.UUID, float]]:
    """BM25 ranking of the memories holding any of `terms` (or their singular/plural twins), with idf from
    the scope's document frequencies. Words in more than COMMON_TERM_SHARE of a large enough scope are
    dropped (they rank nothing)."""
    groups: list[list[str]] = []
    seen: set[str] = set()
    for term in terms:
        forms = [f for f in variants(term) if f not in seen]
        if forms:
            seen.update(forms)
            groups.append(forms)
    df = await repo.group_frequencies(scope, groups)
    size = await repo.count(scope)
    weighted = []
    for forms, n in zip(groups, df, strict=True):
        if n == 0 or (size >= COMMON_TERM_MIN_DOCS and n > COMMON_TERM_SHARE * size and len(groups) > 2):
            continue
        weighted.append((forms, math.log(1 + (size - n + 0.5) / (n + 0.5))))
    return await repo.lexical_bm25(scope, weighted, k, BM25_K1, BM25_B)


async def lexical_hits(repo: MemoryRepository, scope: Scope, query: str, k: int) -> list[tuple[uuid.UUID, float]]:
    """Full-text ranking. Web-search syntax (quotes, `-word`, `or`) goes through websearch_to_tsquery and
    ts_rank_cd as written; otherwise any content word may match (OR) and BM25 ranks the matches, so long
    natural-language queries still find documents and rare words weigh more than common ones."""
    if _WEBSEARCH_SYNTAX.search(query):
        return await repo.lexical(scope, query, k, websearch=True, normalization=TS_NORMALIZATION)
    terms = query_terms(query)
    if not terms:
        return await repo.lexical(scope, query, k, websearch=True, normalization=TS_NORMALIZATION)
    return await bm25_hits(repo, scope, terms, k)


async def retrieve(
    repo: MemoryRepository,
    embedder: EmbeddingProvider,
    settings: MemorySettings,
    scope: Scope,
    query: str,
    *,
    mode: SearchMode,
    limit: int,
    threshold: float,
    vector: Sequence[float] | None = None,
    exact: bool = False,
    embed_query: bool = True,
) -> Retrieval:
    """Search `scope` for `query` in `mode`, returning at most `limit` hits.

    `threshold` is the minimum cosine similarity of semantic matches (full-text matches are not
    thresholded: their scores are not similarities). `vector` replaces embedding the query; without
    it and with `embed_query` false (the model was unavailable) the search falls back to full text.
    """
    model = embedder.model
    sem: list[tuple[uuid.UUID, float]] = []
    used: RetrievalMode = mode
    if mode in ("hybrid", "semantic"):
        if not await repo.has_vectors(scope, model):
            used = "lexical_fallback"
        else:
            try:
                if vector is None and not embed_query:
                    raise EmbeddingUnavailable("the query could not be embedded")
                qvec = list(vector) if vector is not None else await embedder.embed_one(query)
            except EmbeddingUnavailable as exc:
                log.warning("query embedding failed, using full text: %s", exc)
                used = "lexical_fallback"
            else:
                depth = limit if mode == "semantic" else max(limit, settings.memory_candidates)
                sem = await repo.semantic(scope, model, qvec, depth, settings.memory_ef_search, exact=exact)
                sem = [(mid, s) for mid, s in sem if s >= threshold]
    if used == "semantic":
        return Retrieval(
            [
                Hit(mid, round(s, 6), {"semantic": {"rank": i, "score": round(s, 6)}})
                for i, (mid, s) in enumerate(sem[:limit], start=1)
            ],
            used,
        )
    depth = limit if used != "hybrid" else max(limit, settings.memory_candidates)
    lex = await lexical_hits(repo, scope, query, depth)
    if used == "hybrid":
        return Retrieval(fuse({"semantic": sem, "lexical": lex}, settings.memory_rrf_k)[:limit], used)
    return Retrieval(
        [
            Hit(mid, round(s, 6), {"lexical": {"rank": i, "score": round(s, 6)}})
            for i, (mid, s) in enumerate(lex[:limit], start=1)
        ],
        used,
    )


Unit = Literal["chars", "tokens"]


def clip(text: str, cap: int, unit: Unit = "chars") -> tuple[str, bool]:
    """`text` cut to at most `cap` characters or tokens (the embedding tokenizer's, as every budget
    counts them) at a word boundary, with an ellipsis and a flag."""
    size = len(text) if unit == "chars" else count_tokens(text)
    if size <= cap:
        return text, False
    # One unit of the cap is kept for the ellipsis.
    head = text[: cap - 1] if unit == "chars" else truncate_to_tokens(text, cap - 1)
    cut = head.rfind(" ")
    return head[: cut if cut > len(head) // 2 else len(head)].rstrip() + "…", True


def build_context(
    items: Sequence[tuple[str, str, datetime | None]], limit: int, unit: Unit = "chars"
) -> tuple[str, bool]:
    """A prompt-ready block: one `[id] text` paragraph per item, within `limit` characters or tokens;
    each item's text is cut to at most 600 characters (150 tokens)."""
    per_item = 600 if unit == "chars" else 150
    measure = len if unit == "chars" else count_tokens
    parts: list[str] = []
    used = 0
    truncated = False
    for mid, content, when in items:
        stamp = f" ({when:%Y-%m-%d})" if when is not None else ""
        body, cut = clip(" ".join(content.split()), per_item, unit)
        line = f"[{mid}]{stamp} {body}"
        size = measure(line) + 2
        if used + size > limit:
            room = limit - used - 2
            if room > (80 if unit == "chars" else 20):
                line, _ = clip(line, room, unit)
                parts.append(line)
            truncated = True
            break
        truncated = truncated or cut
        parts.append(line)
        used += size
    return "\n\n".join(parts), truncated


def row_time(row: dict[str, Any]) -> datetime | None:
    """The timestamp shown for a memory."""
    value = row.get("created_at")
    return value if isinstance(value, datetime) else None
