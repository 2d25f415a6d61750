"""Settings of the graph feature (environment variables prefixed CAIRN_GRAPH_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class GraphSettings(BaseSettings):
    """Knobs of the knowledge graph: A/B ratio, limbic weights, feedback window, caps."""

    model_config = SettingsConfigDict(env_prefix="CAIRN_GRAPH_", extra="ignore")

    ab_limbic_ratio: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Share of search_semantic calls served with limbic re-ranking"
    )
    feedback_window_seconds: int = Field(
        default=900, ge=1, description="A result re-opened within this window counts as relevant"
    )
    text_weight: float = Field(default=0.25, ge=0.0, description="Weight of the full-text score in relevance")
    importance_weight: float = Field(default=0.3, ge=0.0)
    importance_scale: float = Field(default=10.0, gt=0.0, description="Accesses that give importance 1-1/e")
    temporal_weight: float = Field(default=0.25, ge=0.0, le=1.0)
    half_life_days: float = Field(default=30.0, gt=0.0)
    cooc_weight: float = Field(default=0.2, ge=0.0)
    cooc_scale: float = Field(
        default=5.0,
        gt=0.0,
        description="Prior returns added to an entity's access count when its co-occurrence share is taken",
    )
    candidate_multiplier: int = Field(default=4, ge=1, le=50)
    semantic_floor: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "search_semantic / search_reflections: the cosine similarity a candidate found by meaning must "
            "reach to be an answer (returned and counted as accessed); default: derived from the model's "
            "calibration (app/graph/scoring.py, docs/graph.md)"
        ),
    )
    min_text_coverage: float = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        description=(
            "The BM25 coverage of the query (share of its words' weight a text holds) a candidate found by "
            "words must reach to be an answer"
        ),
    )
    archived_statuses: list[str] = Field(
        default_factory=lambda: ["archived", "archivado"],
        description="Statuses search_semantic leaves out unless include_archived is set",
    )
    cooc_top: int = Field(default=10, ge=2, le=50, description="Top results whose pairs count as co-occurring")
    reference_reply_tokens: int = Field(
        default=20_000,
        ge=1_000,
        le=200_000,
        description="Token cap of one read_graph / search_nodes reply on the reference-compatible endpoint",
    )
