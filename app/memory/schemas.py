"""Input and output models of the Rusty Memory dialect (seed 001) and the shared pieces."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, StringConstraints, WithJsonSchema, model_validator

from app.core.schemas import (
    EMBEDDING_STATE_DESCRIPTION,
    PROJECT_NAME,
    EmbeddingState,
    StrictModel,
    wait_for_embedding_field,
)

MemoryType = Literal["episodic", "semantic", "procedural"]
SearchMode = Literal["hybrid", "semantic", "lexical"]
RetrievalMode = Literal["hybrid", "semantic", "lexical", "lexical_fallback"]
Strategy = Literal["auto", "extractive", "abstractive"]
Provider = Literal["ollama", "openai"]

COLLECTION_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"
MAX_TAGS = 32

Tag = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]


def _coerce_tags(value: Any) -> Any:
    """A scalar tag becomes a one-element list (seed 001 compatibility)."""
    if isinstance(value, str):
        return [value]
    return value


_TAGS_SCHEMA = {
    "anyOf": [
        {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 128}, "maxItems": MAX_TAGS},
        {"type": "string", "minLength": 1, "maxLength": 128},
        {"type": "null"},
    ],
    "default": None,
    "description": "Tags (contains-any when filtering); a single string is accepted as a one-element list",
}

Tags = Annotated[
    list[Tag] | None,
    BeforeValidator(_coerce_tags),
    Field(default=None, max_length=MAX_TAGS),
    WithJsonSchema(_TAGS_SCHEMA),
]

ProjectName = Annotated[str | None, Field(default=None, pattern=PROJECT_NAME)]
CollectionName = Annotated[
    str | None,
    Field(default=None, pattern=COLLECTION_NAME, description="Collection override (default collection when omitted)"),
]


def utc(value: datetime | None) -> datetime | None:
    """A timestamp with a timezone (naive ones are taken as UTC)."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


class TimeRange(StrictModel):
    """A time window on memory timestamps (RFC 3339, e.g. 2025-01-01T00:00:00Z)."""

    start: datetime | None = None
    end: datetime | None = None

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        self.start, self.end = utc(self.start), utc(self.end)
        if self.start is not None and self.end is not None and self.start > self.end:
            raise ValueError("time_range.start must be <= time_range.end")
        return self


def move_aliases(data: Any, aliases: dict[str, str]) -> Any:
    """Move alias keys (e.g. `project`) onto their canonical field (e.g. `project_id`) before validation."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for alias, canonical in aliases.items():
        if alias in data:
            value = data.pop(alias)
            if canonical in data and data[canonical] is not None and value is not None and data[canonical] != value:
                raise ValueError(f"'{alias}' and '{canonical}' are the same argument but differ")
            if data.get(canonical) is None:
                data[canonical] = value
    return data


class _ProjectTypeAliases(StrictModel):
    """Project and memory type; the seed's aliases (`project`, `type`, `k`) are accepted by the
    `move_aliases` validators of the subclasses but not advertised in the schema."""

    project_id: str | None = Field(default=None, pattern=PROJECT_NAME, description="Project label (default 'default')")
    memory_type: MemoryType | None = None


class SearchIn(_ProjectTypeAliases):
    """Arguments of search."""

    query_text: str = Field(min_length=1, max_length=512, description="Text to search for (<= 512 chars)")
    tags: Tags
    time_range: TimeRange | None = Field(default=None, description="{start?, end?}; start <= end")
    limit: int | None = Field(default=None, ge=1, description="1..SEARCH_MAX_LIMIT (default SEARCH_DEFAULT_LIMIT)")
    score_threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="0..1 minimum relevance (score), every mode"
    )
    collection: CollectionName
    mode: SearchMode = Field(default="hybrid", description="hybrid (meaning + words) | semantic | lexical (BM25)")
    explain: bool = Field(default=False, description="Add each result's signals: which searches found it, rank, score")

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return move_aliases(data, {"project": "project_id", "type": "memory_type", "k": "limit"})


class Signal(BaseModel):
    """One signal of a result: its value (cosine, or lexical coverage in [0, 1]) and, when that ranking
    found the result, its rank there."""

    rank: int | None = Field(default=None, exclude_if=lambda v: v is None)
    score: float


def compact_time(value: datetime) -> str:
    """A timestamp as short ISO 8601 in UTC: to the minute (`2026-11-24T23:05Z`), or the date alone at
    midnight (`2026-11-24`)."""
    t = value.astimezone(UTC) if value.tzinfo is not None else value
    if t.hour == 0 and t.minute == 0:
        return t.date().isoformat()
    return t.strftime("%Y-%m-%dT%H:%MZ")


def round_score(value: float) -> float:
    """A score as replies show it: three decimals."""
    return round(value, 3)


COMPACT_TIME_DESCRIPTION = "ISO 8601, UTC, to the minute (the date alone at midnight)"
REPLY_TOKENS_DESCRIPTION = (
    "Tokens of this reply as sent: its compact JSON, this field included (the embedding model's tokenizer)"
)
SOURCE_IDS_DESCRIPTION = (
    "The memories summarised, as the first 8 characters of their ids (longer where two would clash); "
    "the stored summary (upserted_memory_id) lists the full ids in metadata.source_memory_ids"
)


def _absent(value: Any) -> bool:
    return value is None


class SearchHit(BaseModel):
    """One search result. Its text is the line of `context` cited with its position in `results`."""

    id: str
    score: float = Field(description="Relevance in [0, 1], one scale in every mode")
    memory_type: str | None = Field(
        default=None, exclude_if=_absent, description="Left out when used_filters names the memory type"
    )
    tags: list[str] | None = Field(default=None, exclude_if=_absent, description="Left out when it has none")
    timestamp: str = Field(description=COMPACT_TIME_DESCRIPTION)
    source_uri: str | None = Field(default=None, exclude_if=_absent)
    truncated: bool | None = Field(
        default=None,
        exclude_if=_absent,
        description="true: its line in context is cut short or missing (budget spent); get_thought reads it whole",
    )
    embedding: Literal["pending"] | None = Field(
        default=None, exclude_if=_absent, description="pending: found by text; its vector is not made yet"
    )
    signals: dict[str, Signal] | None = Field(
        default=None, exclude_if=_absent, description="With explain: the searches that found it, rank and score"
    )


class SearchOut(BaseModel):
    """Result of search."""

    results: list[SearchHit]
    context: str | None = Field(
        default=None,
        description="Prompt-ready text: one line '[n] text' per result, n its 1-based position in results",
    )
    collection: str
    limit: int
    score_threshold: float
    scoreThreshold: float
    used_filters: dict[str, Any] = Field(description="Applied filters; they hold for every result")
    mode: SearchMode
    retrieval_mode: RetrievalMode
    model: str
    notice: str | None = Field(default=None, exclude_if=_absent, description="Why nothing came back")
    tokens: int = Field(default=0, description=REPLY_TOKENS_DESCRIPTION)


class PushIn(_ProjectTypeAliases):
    """Arguments of push."""

    text: str = Field(min_length=1, description="Document contents to index")
    collection: CollectionName
    tags: Tags
    source_uri: str | None = Field(
        default=None,
        max_length=2048,
        description="File path or URL (provenance); pushing the same source_uri again updates its chunks",
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return move_aliases(data, {"project": "project_id", "type": "memory_type"})

    wait_for_embedding: bool | None = wait_for_embedding_field()


class PushOut(BaseModel):
    """Result of push."""

    status: str = "ok"
    collection: str
    chunksIndexed: int
    chunkSize: int
    inserted: int
    updated: int
    skippedDuplicates: int
    removed: int = Field(default=0, description="Stale chunks of the same source_uri deleted")
    document_id: str
    project_id: str
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class SummarizeIn(_ProjectTypeAliases):
    """Arguments of summarize."""

    tags: Tags
    time_range: TimeRange = Field(description="{start, end}: both required")
    limit: int = Field(default=50, ge=1, description="Most memories read (capped by SEARCH_MAX_LIMIT)")
    strategy: Strategy = "auto"
    provider: Provider | None = Field(
        default=None,
        description="Abstractive provider; must be the one the server is configured with (default: that one)",
    )
    model: str | None = Field(default=None, max_length=200, description="Provider model when abstractive")
    max_words: int | None = Field(default=None, gt=0, le=5000, description="Default SUMMARIZATION_MAX_WORDS")
    collection: CollectionName

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return move_aliases(data, {"project": "project_id", "type": "memory_type", "k": "limit"})

    @model_validator(mode="after")
    def _both_bounds(self) -> SummarizeIn:
        if self.time_range.start is None or self.time_range.end is None:
            raise ValueError("time_range needs both start and end")
        return self

    wait_for_embedding: bool | None = wait_for_embedding_field()


class SummarizeOut(BaseModel):
    """Result of summarize."""

    summary: str
    source_memory_ids: list[str] = Field(description=SOURCE_IDS_DESCRIPTION)
    upserted_memory_id: str
    strategy: Literal["extractive", "abstractive"]
    provider: str | None = None
    model: str | None = None
    used_filters: dict[str, Any]
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)
    tokens: int = Field(default=0, description=REPLY_TOKENS_DESCRIPTION)


class CollectionsOut(BaseModel):
    """Result of get-collections."""

    collections: list[str]


class NewCollectionIn(StrictModel):
    """Arguments of new-collection."""

    name: str = Field(pattern=COLLECTION_NAME, description="Collection name")
    vector_size: int | None = Field(
        default=None, ge=1, le=16000, description="Vector dimension (default: the active embedding dimension)"
    )


class NewCollectionOut(BaseModel):
    """Result of new-collection."""

    status: str = "ok"
    vectorSize: int
    name: str
    created: bool
    resized: bool


class MetricsOut(BaseModel):
    """Result of metrics."""

    documentsIndexed: int
    chunksIndexed: int
    lastChunkSize: int | None


class MemoryTypesOut(BaseModel):
    """The mcp://memory-types resource."""

    memory_types: list[str]
    default: str


class ProjectsOut(BaseModel):
    """The mcp://projects resource."""

    projects: list[str]


class UsageFlow(BaseModel):
    """A recommended sequence of calls."""

    name: str
    steps: list[str]


class UsageOut(BaseModel):
    """The mcp://usage resource."""

    title: str
    policy: list[str]
    flows: list[UsageFlow]


class ProjectTagsOut(BaseModel):
    """The mcp://{project_id}/tags resource."""

    project_id: str
    tags: list[str]


class SearchDefaults(BaseModel):
    """Effective search defaults (the `search` section of mcp://settings)."""

    default_limit: int
    max_limit: int
    default_score_threshold: float = Field(description="The default of the default mode, hybrid")
    default_score_thresholds: dict[str, float] = Field(description="Per search mode, its default threshold")
    score_threshold_source: str = Field(
        description="'setting' (CAIRN_SEARCH_DEFAULT_SCORE_THRESHOLD) or 'calibration (...)': the rule over the "
        "active model's calibration"
    )
