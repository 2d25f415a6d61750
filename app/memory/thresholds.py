"""The default relevance thresholds of memory search: a rule over the model's calibration, per mode.

Relevance (`app.core.embeddings.relevance`) is one scale, but what noise reaches on it depends on the
signal: a note about something else that shares an ordinary word with the query ("weekly yoga class
schedule" against "Load tests run weekly ...") gets a cosine well above the model's `unrelated`
figure and a little lexical coverage, and hybrid mode combines both. So when the operator sets no
`CAIRN_SEARCH_DEFAULT_SCORE_THRESHOLD`, each mode has its own default, from the model's
`Calibration` (`unrelated`: 95th percentile cosine of unrelated pairs; `related`: median cosine of
a question and its answer):

- semantic: the midpoint `(unrelated + related) / 2`: a hit must be nearer to a typical answer
  than to typical noise;
- lexical: `LEXICAL`, 0.25 (the seed's default; BM25 coverage does not depend on the model): the
  lexical relevance of a note holding about a fifth of the query's idf weight, such as one rare
  word of a three-word query;
- hybrid: `1 - (1 - semantic) · (1 - lexical)`, the relevance of a hit at the semantic threshold
  whose words also reach the lexical one; so one shared ordinary word cannot lift a near miss of
  meaning over it.

A search that ran on words alone (`lexical_fallback`) and, in hybrid mode, a hit whose vector is
pending (scored by its words only) are held to the lexical threshold.

Worked example, all-MiniLM-L6-v2 (declared calibration 0.176 / 0.731): semantic 0.454, lexical
0.25, hybrid 1 - 0.546 · 0.75 = 0.591. Under a model whose calibration is 0.65 / 0.85: semantic 0.75,
hybrid 0.813. The figures behind the rule, measured on tests/support/judged_notes.py, are in
docs/memory.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.embeddings.calibration import calibration_of
from app.core.embeddings.provider import Calibration, EmbeddingProvider

LEXICAL = 0.25


@dataclass(frozen=True)
class Thresholds:
    """The default threshold of each mode and where it comes from: `calibration` (the rule over the
    model's calibration, whose `source` is declared, measured or assumed) or `setting` (the operator's
    CAIRN_SEARCH_DEFAULT_SCORE_THRESHOLD, the same in every mode)."""

    semantic: float
    lexical: float
    hybrid: float
    source: str

    def of(self, mode: str) -> float:
        """The default of a retrieval mode (`lexical_fallback` ran on words: the lexical one)."""
        if mode == "semantic":
            return self.semantic
        if mode == "hybrid":
            return self.hybrid
        return self.lexical

    def as_dict(self) -> dict[str, float]:
        """Per search mode, its default."""
        return {"hybrid": self.hybrid, "semantic": self.semantic, "lexical": self.lexical}


def rule(cal: Calibration, lexical: float = LEXICAL) -> Thresholds:
    """The defaults of the module docstring for a model's calibration."""
    semantic = round(cal.at(0.5), 3)
    hybrid = round(1.0 - (1.0 - semantic) * (1.0 - lexical), 3)
    return Thresholds(semantic=semantic, lexical=lexical, hybrid=hybrid, source=f"calibration ({cal.source})")


def fixed(value: float) -> Thresholds:
    """The operator's setting, the same in every mode."""
    return Thresholds(semantic=value, lexical=value, hybrid=value, source="setting")


async def defaults(embedder: EmbeddingProvider, setting: float | None) -> Thresholds:
    """The operator's setting when there is one, else the rule over the model's calibration."""
    if setting is not None:
        return fixed(setting)
    return rule(await calibration_of(embedder))
