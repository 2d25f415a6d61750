"""analysis_query mode `semantic`: stored findings and page summaries by meaning, and by words while
their vectors are not made (or the embedding model is unavailable).

Every hit's `score` is on the relevance scale of `app.core.embeddings.relevance`, in [0, 1]:

- a finding with a vector of the active model is ranked by meaning: `score` is its cosine similarity to
  the query;
- a finding matched by its words (`matched_by: "words"`: its vector is not made yet, or the model is
  unavailable) scores its lexical relevance, `min(1, 1.25 · coverage)` with the BM25 coverage of
  `app.core.embeddings.lexical` (query words found in no finding count against it). Such a hit is never
  reported as similar: the reply counts it apart.

A given `threshold` applies to both. Left out, each kind of hit has its default, and the reply states
both (`threshold`, `word_threshold`):

- similarity: the embedding model's default (`default_threshold`), a rule over the model's
  `Calibration` (`app.core.embeddings.calibration`) rather than a fixed cosine, since cosines have no
  common scale across models;
- word relevance: `WORD_THRESHOLD`, the same for every model (BM25 does not depend on it).

When nothing passes, the message says why: how many candidates were seen, the best score among them,
the threshold and the argument that changes it.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

from app.analysis.config import AnalysisSettings
from app.analysis.cuts import budget_why, fitting
from app.analysis.repository import AnalysisRepository
from app.analysis.schemas import FindingHit, QueryIn, QueryOut
from app.core.context import CallContext
from app.core.cuts import Cut
from app.core.embeddings.calibration import LOCAL, calibration_of
from app.core.embeddings.provider import Calibration
from app.core.embeddings.relevance import lexical_relevance
from app.core.errors import NotFound, invalid_field

# Where the default threshold sits between a model's `unrelated` and `related` cosines, and the default
# for hits matched by words: chosen on the judged set of tests/support/judged_analysis.py (docs/analysis.md).
THRESHOLD_SHARE = 0.5
WORD_THRESHOLD = 0.3

Hit = tuple[int, str, str, dict[str, Any], float]


def default_threshold(calibration: Calibration) -> float:
    """The default similarity threshold for a model: `unrelated + THRESHOLD_SHARE · (related - unrelated)`,
    halfway between what a question and an unrelated text reach (95th percentile) and what a text that
    answers it typically reaches (median), rounded to 0.01.

    Worked example: all-MiniLM-L6-v2 declares unrelated 0.176 and related 0.731, so the default is
    0.176 + 0.5 · 0.555 = 0.4535, i.e. 0.45; a model whose unrelated pairs reach 0.65 and related ones
    0.85 gets 0.75."""
    return round(max(calibration.unrelated, calibration.at(THRESHOLD_SHARE)), 2)


@dataclass(frozen=True)
class Thresholds:
    """The thresholds of one semantic query: for similarity, for word relevance, and whether they are
    the defaults (else both are the caller's `threshold`)."""

    similarity: float
    words: float
    default: bool


async def thresholds_for(ctx: CallContext, args: QueryIn, reachable: bool) -> Thresholds:
    """The caller's `threshold` for both kinds of hit, else the defaults: the model's (its calibration;
    the local model's figures while an undeclared model is unreachable, rather than waiting for it
    again) and `WORD_THRESHOLD`. Call it before any SQL: measuring a calibration runs the model."""
    if args.threshold is not None:
        return Thresholds(args.threshold, args.threshold, False)
    if reachable or ctx.embedder.calibration is not None:
        return Thresholds(default_threshold(await calibration_of(ctx.embedder)), WORD_THRESHOLD, True)
    return Thresholds(default_threshold(LOCAL), WORD_THRESHOLD, True)


@dataclass
class _Found:
    """What a semantic query saw: the nearest findings by meaning (cosine) and those matched by words
    (lexical relevance), each best first."""

    nearest: list[Hit]
    by_words: list[Hit]
    thresholds: Thresholds

    @property
    def candidates(self) -> int:
        return len(self.nearest) + len(self.by_words)

    @property
    def best(self) -> float | None:
        scores = [h[4] for h in (*self.nearest[:1], *self.by_words[:1])]
        return max(scores) if scores else None

    def similar(self) -> list[Hit]:
        return [h for h in self.nearest if h[4] >= self.thresholds.similarity]

    def worded(self) -> list[Hit]:
        return [h for h in self.by_words if h[4] >= self.thresholds.words]


async def semantic(
    ctx: CallContext,
    repo: AnalysisRepository,
    pid: uuid.UUID,
    args: QueryIn,
    vector: list[float] | None,
    thresholds: Thresholds,
) -> QueryOut:
    """Findings of the session passing `thresholds`: those with a vector by cosine, the others by their
    words (all of them by words when `vector` is None)."""
    if not args.query:
        raise invalid_field("query", "semantic mode needs query")
    if await repo.count_findings(pid, args.analysis_id) == 0 and not await repo.session_models(pid, args.analysis_id):
        raise NotFound(
            f"No analysis session '{args.analysis_id}' (nothing ingested or stored)",
            suggestions=["Run analysis_ingest or analysis_store first"],
        )
    model = ctx.embedder.model
    nearest = await repo.semantic(pid, args.analysis_id, vector, model, args.top_k, args.category) if vector else []
    terms = await repo.lexical_query(args.query)
    words = await repo.text_hits(
        pid, args.analysis_id, terms, model, args.top_k, args.category, only_pending=vector is not None
    )
    by_words = [(fid, c, t, m, round(lexical_relevance(terms.coverage(s)), 3)) for fid, c, t, m, s in words]
    found = _Found(nearest, by_words, thresholds)
    similar, worded = found.similar(), found.worded()
    hits = ([_hit(h, None) for h in similar] + [_hit(h, vector is not None) for h in worded])[: args.top_k]
    max_tokens = ctx.feature_settings(AnalysisSettings).max_response_tokens
    fit = fitting([h.model_dump(mode="json", exclude_none=True) for h in hits], max_tokens)
    cut = None
    if fit < len(hits):
        cut = Cut(
            reason=budget_why(max_tokens),
            left_out=f"{len(hits) - fit} lower-scoring finding(s) after these {fit}",
            how="a narrower query: mode semantic with a category or a higher threshold "
            "(the findings shown are the best ones)",
        )
    shown = min(len(similar), fit)
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="semantic",
        total=len(hits),
        findings=hits[:fit],
        truncated=cut is not None,
        cut=cut,
        threshold=thresholds.similarity if vector is not None else None,
        word_threshold=thresholds.words,
        candidates=found.candidates,
        best_score=None if found.best is None else round(found.best, 3),
        message=_message(args, found, shown, min(fit, len(hits)) - shown, vector is not None)
        + (f" {cut.left_out.capitalize()} are left out of this reply ({cut.reason})." if cut else ""),
    )


def _hit(h: Hit, pending: bool | None) -> FindingHit:
    """A hit for the reply; `pending` None = found by meaning, else matched by words (with the vector
    not made yet when True)."""
    fid, category, text, metadata, score = h
    meta = None if category == "page_summary" or not metadata else metadata
    # Whole: a finding holds at most 4000 characters and its metadata 4000 as JSON; the reply budget
    # cuts the list of hits, never a hit.
    return FindingHit(
        id=fid,
        category=category,
        score=round(score, 3),
        metadata=meta,
        finding=text,
        matched_by=None if pending is None else "words",
        embedding="pending" if pending else None,
    )


def _message(args: QueryIn, found: _Found, similar: int, worded: int, embedded: bool) -> str:
    """What was found and how, and when nothing passed, why: candidates, best score, threshold, and the
    argument that changes it."""
    scope = f" in category '{args.category}'" if args.category else ""
    default = " (default)" if found.thresholds.default else ""
    if embedded and found.nearest:
        sim = f"{found.thresholds.similarity:g}{default}"
        text = f"{similar} finding(s){scope} with similarity >= {sim} (of {len(found.nearest)} nearest)."
        default = ""
    elif embedded:
        text = f"No finding{scope} has a vector yet."
    else:
        text = "The embedding model is unavailable: nothing was compared by similarity."
    if worded:
        more = "more " if similar else ""
        why = ": their vectors are not made yet" if embedded else ""
        text += (
            f" {worded} {more}finding(s){scope} matched by their words (word relevance >= "
            f"{found.thresholds.words:g}{default}), not by similarity{why}."
        )
    if similar or worded:
        return text
    if found.best is None:
        return f"{text} Nothing to rank: no finding{scope} shares a word with the query."
    bars = [f"similarity {found.thresholds.similarity:g}"] if found.nearest else []
    bars += [f"word relevance {found.thresholds.words:g}"] if found.by_words else []
    lower = max(0.0, math.floor(found.best * 100) / 100)
    return (
        f"{text} Nothing reached {' or '.join(bars)}: the best of {found.candidates} candidate(s) scored "
        f"{found.best:.3f}; pass threshold {lower:g}{' (or lower)' if lower > 0 else ''} to see them."
    )
