"""The one search engine of both dialects: vector (pgvector), full text (BM25) and their relevance.

Every hit's `score` is its relevance in [0, 1] (`app.core.embeddings.relevance`): the cosine similarity in
`semantic` mode, the lexical relevance of its BM25 coverage in `lexical` mode (`app.core.embeddings.lexical`,
English stems; queries in web-search syntax go through `websearch_to_tsquery` and `ts_rank_cd`), both
combined in `hybrid` mode, where each ranking brings its candidates and every candidate is scored with
both signals (`app.memory.fusion`). `score_threshold` applies to that relevance in every mode. When the
active model has no vectors in the searched scope (or the embedder is unreachable), semantic and hybrid
searches fall back to full text and say so (`retrieval_mode = "lexical_fallback"`).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from app.core.embeddings.lexical import LexicalQuery
from app.core.embeddings.provider import EmbeddingProvider, EmbeddingUnavailable
from app.core.embeddings.tokens import count_tokens, truncate_to_tokens, words_within
from app.memory import conversation
from app.memory.config import MemorySettings
from app.memory.fusion import Hit, fuse, single
from app.memory.repository import MemoryRepository, Scope
from app.memory.schemas import RetrievalMode, SearchMode
from app.memory.thresholds import Thresholds

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

_WEBSEARCH_SYNTAX = re.compile(r'"|(?:^|\s)-\w')  # quotes or an excluded word; 'or' is any-word BM25 already
_WORD = re.compile(r"\w+", re.UNICODE)
_EXCLUDED = re.compile(r"(?:^|\s)-\S+")


@dataclass
class Retrieval:
    """The ranked hits, the retrieval mode actually used, the threshold applied (a default per mode,
    `app.memory.thresholds`, unless the caller gave one), the candidates left under it (how many, and
    the best relevance among them) and how many hits have no vector yet (found by their words)."""

    hits: list[Hit]
    retrieval_mode: RetrievalMode
    below: int = 0
    best_below: float = 0.0
    threshold: float = 0.0
    pending: int = 0

    def first(self, limit: int) -> Retrieval:
        """The first `limit` hits, with `pending` counted among them."""
        hits = self.hits[:limit]
        pending = sum(_unvectored(h, self.retrieval_mode) for h in hits)
        return replace(self, hits=hits, pending=pending)

    def notice(self, argument: str = "score_threshold") -> str | None:
        """What the caller should know about the hits, or None: why nothing came back (how many
        candidates, the best score, the threshold and the `argument` that changes it, or that nothing
        shares a word or a meaning with the query) and which hits were found by words alone."""
        if not self.hits:
            if self.below:
                return (
                    f"{self.below} candidate(s) scored under the relevance threshold {self.threshold:g} (best "
                    f"{self.best_below:.2f}): nothing matches well; lower {argument} to see them"
                )
            if self.retrieval_mode in ("lexical", "lexical_fallback"):
                return "No memory in the searched scope shares a word with the query: try other words"
            return "Nothing in the searched scope: check the project and the filters"
        if self.retrieval_mode == "lexical_fallback":
            return (
                "Ranked by words only (no vectors of the active model here, or the model is unreachable): "
                f"scores are lexical relevance, not similarity (threshold {self.threshold:g})"
            )
        if self.pending:
            return (
                f"{self.pending} result(s) have no vector yet (embedding pending): found by their words alone, "
                "their score is lexical relevance, not similarity"
            )
        return None


def query_terms(query: str) -> list[str]:
    """Lower-cased distinct content words of a query, in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word not in STOPWORDS and word not in seen:
            seen[word] = None
    return list(seen)


async def lexical_hits(
    repo: MemoryRepository, scope: Scope, query: str, k: int, ef_search: int
) -> tuple[list[tuple[uuid.UUID, float]], LexicalQuery]:
    """Full-text ranking as (id, coverage in [0, 1]), best first, and the BM25 query. Any query is ranked
    by BM25 over English stems (`app.core.embeddings.lexical`), where any stem may match and rare ones weigh more;
    a query with quotes or an excluded word (`-word`) first selects the memories it matches as written
    (`websearch_to_tsquery`), and its excluded words do not count in the ranking. A plain `or` changes
    nothing: any stem matches already."""
    if _WEBSEARCH_SYNTAX.search(query):
        lq = await repo.lexical_query(_EXCLUDED.sub(" ", query))
        return [(mid, lq.coverage(score)) for mid, score in await repo.lexical(scope, query, lq, k)], lq
    lq = await repo.lexical_query(query)
    return [(mid, lq.coverage(score)) for mid, score in await repo.bm25(scope, lq, k, ef_search)], lq


async def retrieve(
    repo: MemoryRepository,
    embedder: EmbeddingProvider,
    settings: MemorySettings,
    scope: Scope,
    query: str,
    *,
    mode: SearchMode,
    limit: int,
    threshold: float | Thresholds,
    vector: Sequence[float] | None = None,
    exact: bool = False,
    embed_query: bool = True,
    now: datetime | None = None,
) -> Retrieval:
    """Search `scope` for `query` in `mode`: at most `limit` hits whose relevance (`app.core.embeddings.relevance`:
    the cosine in semantic mode, the lexical relevance in lexical mode, both combined in hybrid mode) is
    at least `threshold`, best first. `threshold` is the caller's, or the defaults per mode
    (`app.memory.thresholds.Thresholds`): then a search that ran on words alone, and in hybrid mode a
    hit without a vector, is held to the lexical default.

    `vector` replaces embedding the query; without it and with `embed_query` false (the model was
    unavailable) the search falls back to full text. Hybrid search takes `memory_candidates` from each
    ranking and scores every candidate with both signals. A speaker or relative date the query names
    (`app.memory.conversation`, dates against `now`) raises the hits that match it.
    """
    model = embedder.model
    sem: list[tuple[uuid.UUID, float]] = []
    qvec: list[float] | None = None
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
    if used == "semantic":
        hits = single("semantic", sem)
    else:
        depth = limit if used != "hybrid" else max(limit, settings.memory_candidates)
        lex, lq = await lexical_hits(repo, scope, query, depth, settings.memory_lexical_ef_search)
        if used == "hybrid":
            found = {mid for mid, _ in sem} ^ {mid for mid, _ in lex}
            filled = await repo.signals(sorted(found), lq, model, qvec)
            filled = {mid: (c, lq.coverage(v)) for mid, (c, v) in filled.items()}
            hits = fuse(sem, lex, filled)
        else:
            hits = single("lexical", lex)
    passed = apply_threshold(hits, used, len(hits), threshold)
    if passed.hits and conversation.may_name_cues(query):
        # A speaker or date the query names reorders what passed; the threshold held before the boost.
        turns = await repo.turns([h.id for h in passed.hits])
        passed.hits = conversation.rerank(passed.hits, turns, query, now or conversation.now())
    return passed.first(limit)


def apply_threshold(hits: list[Hit], used: RetrievalMode, limit: int, threshold: float | Thresholds) -> Retrieval:
    """The hits at or over their threshold (at most `limit`), and what was left under it. In hybrid
    mode a hit without a semantic signal has no vector of the model (a stored one always yields a cosine)."""
    level = threshold if isinstance(threshold, float | int) else threshold.of(used)
    words_only = threshold if isinstance(threshold, float | int) else threshold.lexical
    kept: list[Hit] = []
    under: list[float] = []
    for h in hits:
        if h.score >= (words_only if _unvectored(h, used) else level):
            kept.append(h)
        else:
            under.append(h.score)
    return Retrieval(kept, used, len(under), max(under, default=0.0), float(level)).first(limit)


def _unvectored(hit: Hit, used: RetrievalMode) -> bool:
    return used == "hybrid" and "semantic" not in hit.signals


Unit = Literal["chars", "tokens"]


def clip(text: str, cap: int, unit: Unit = "chars") -> tuple[str, bool]:
    """`text` cut to at most `cap` characters or tokens (the embedding tokenizer's, as every budget
    counts them) at a word boundary, with an ellipsis and a flag."""
    size = len(text) if unit == "chars" else count_tokens(text)
    if size <= cap:
        return text, False
    # One unit of the cap is kept for the ellipsis.
    if unit == "tokens" and (end := words_within(text, cap - 1)) is not None and end > 0:
        return text[:end].rstrip() + "…", True
    head = text[: cap - 1] if unit == "chars" else truncate_to_tokens(text, cap - 1)
    cut = head.rfind(" ")
    return head[: cut if cut > len(head) // 2 else len(head)].rstrip() + "…", True


def cite(
    items: Sequence[tuple[str, str, datetime | None]],
    limit: int,
    unit: Unit = "chars",
    per_item: int | None = None,
) -> tuple[str, list[bool]]:
    """A prompt-ready block: one line `[label] text` per item (`[label] (date) text` when the item has a
    date), within `limit` characters or tokens; each text has its whitespace collapsed and is cut to
    `per_item` (default 600 characters or 150 tokens). Items follow in order until the limit runs out:
    the first that does not fit whole is cut to the room left (when that is worth it), later ones are
    left out. Returns the block and, per item, whether its text there is cut short or missing."""
    cap = per_item if per_item is not None else (600 if unit == "chars" else 150)
    measure = len if unit == "chars" else count_tokens
    # A line break between lines: one character, and no token (the tokenizer drops whitespace).
    sep = 1 if unit == "chars" else 0
    parts: list[str] = []
    cut = [True] * len(items)
    used = 0
    for i, (label, content, when) in enumerate(items):
        stamp = f" ({when:%Y-%m-%d})" if when is not None else ""
        body, shortened = clip(" ".join(content.split()), cap, unit)
        line = f"[{label}]{stamp} {body}"
        size = measure(line) + (sep if parts else 0)
        if used + size > limit:
            room = limit - used - (sep if parts else 0)
            if room > (80 if unit == "chars" else 20):
                line, _ = clip(line, room, unit)
                parts.append(line)
            break
        cut[i] = shortened
        parts.append(line)
        used += size
    return "\n".join(parts), cut


def build_context(
    items: Sequence[tuple[str, str, datetime | None]], limit: int, unit: Unit = "chars"
) -> tuple[str, bool]:
    """`cite` with the default per-item cap, and whether any item's text is cut short or missing."""
    block, cut = cite(items, limit, unit)
    return block, any(cut)
