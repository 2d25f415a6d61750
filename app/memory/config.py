"""Settings of the memory feature (environment variables prefixed CAIRN_)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytimeparse
from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.context import CallContext
from app.memory.schemas import SearchDefaults
from app.memory.thresholds import defaults


def parse_duration(value: str) -> float:
    """Seconds in a duration: a bare number of seconds (``"90"``) or what pytimeparse reads
    (``"30s"``, ``"15m"``, ``"1h"``, ``"1h30m"``, ``"2 days"``)."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    seconds = pytimeparse.parse(text)  # type: ignore[attr-defined]
    if seconds is None:
        raise ValueError(f"cannot parse duration {value!r} (use e.g. 90, 30s, 15m, 1h)")
    return float(seconds)


class MemorySettings(BaseSettings):
    """Knobs of the memory store: chunking, caps, search fusion, summaries and the backfill runner."""

    model_config = SettingsConfigDict(env_prefix="CAIRN_", env_file=".env", extra="ignore")

    # Store and push
    memory_default_collection: str = Field(default="cairn-memory", min_length=1, max_length=128)
    memory_chunk_tokens: int = Field(default=200, ge=16, le=512, description="Chunk size in tokenizer tokens")
    memory_chunk_overlap: int = Field(default=32, ge=0, le=256, description="Tokens shared by adjacent chunks")
    memory_max_content_chars: int = Field(default=1_000_000, ge=1000, description="Largest pushed document")
    memory_max_thought_chars: int = Field(default=20_000, ge=100, description="Largest single thought")
    memory_max_chunks: int = Field(default=5000, ge=1, description="Most chunks one push may produce")

    # Search defaults (seed 001; published in mcp://settings)
    search_default_limit: int = Field(default=5, ge=1, le=50)
    search_max_limit: int = Field(default=50, ge=1, le=1000)
    search_default_score_threshold: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Default minimum relevance in every mode; unset: per mode, from the model's calibration "
        "(app.memory.thresholds)",
    )

    # Search
    memory_candidates: int = Field(default=50, ge=10, le=1000, description="Candidates per ranking in hybrid search")
    memory_ef_search: int = Field(default=100, ge=10, le=1000, description="HNSW ef_search of vector scans")
    memory_lexical_ef_search: int = Field(
        default=400, ge=10, le=1000, description="HNSW ef_search of BM25 scans (sparse vectors need a wider beam)"
    )
    memory_context_tokens: int = Field(
        default=1200,
        ge=50,
        le=12_000,
        description="Cap of a search reply's context block (the results' texts), in tokens",
    )
    memory_result_tokens: int = Field(default=300, ge=25, le=5000, description="Cap of one result's text, in tokens")

    # Summaries (seed 001: SUMMARIZATION_MAX_WORDS)
    summarization_max_words: int = Field(default=200, ge=10, le=5000)
    summary_provider: Literal["none", "ollama", "openai"] = "none"
    summary_base_url: str | None = None
    summary_model: str | None = None
    summary_api_key: str | None = None
    summary_timeout: float = Field(default=60.0, gt=0)

    # Backfill (seed 004: backfill.enabled, run_on_startup, interval, batch_size, max_per_run, include_archived)
    backfill_enabled: bool = False
    backfill_run_on_startup: bool = False
    backfill_interval: str | None = "15m"
    backfill_batch_size: int = 20
    backfill_max_per_run: int = 100
    backfill_include_archived: bool = False

    @field_validator("backfill_interval")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            if parse_duration(value) <= 0:
                raise ValueError("backfill interval must be positive")
            return value.strip()
        return None

    @model_validator(mode="after")
    def _backfill_rules(self) -> MemorySettings:
        if self.backfill_batch_size <= 0:
            raise ValueError("backfill batch_size must be > 0")
        if self.backfill_max_per_run < self.backfill_batch_size:
            raise ValueError("backfill max_per_run must be >= batch_size")
        if self.memory_chunk_overlap >= self.memory_chunk_tokens // 2:
            raise ValueError("memory_chunk_overlap must be less than half of memory_chunk_tokens")
        return self

    def interval_seconds(self) -> float | None:
        """The runner's period in seconds, or None when it only runs on start-up."""
        return parse_duration(self.backfill_interval) if self.backfill_interval else None


@dataclass(frozen=True)
class SearchSection:
    """The `search` section of mcp://settings: its thresholds follow the active model's calibration, so
    the section is resolved when it is read."""

    settings: MemorySettings

    async def resolved(self, ctx: CallContext) -> SearchDefaults:
        """The section with the thresholds in force for `ctx`'s model."""
        found = await defaults(ctx.embedder, self.settings.search_default_score_threshold)
        return SearchDefaults(
            default_limit=self.settings.search_default_limit,
            max_limit=self.settings.search_max_limit,
            default_score_threshold=found.hybrid,
            default_score_thresholds=found.as_dict(),
            score_threshold_source=found.source,
        )


def public_settings(settings: MemorySettings) -> dict[str, Any]:
    """The `search` section of mcp://settings."""
    return {"search": SearchSection(settings)}
