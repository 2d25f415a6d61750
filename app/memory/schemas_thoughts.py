"""Input and output models of the AMCS thoughts dialect (seed 004)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from app.core.schemas import (
    EMBEDDING_STATE_DESCRIPTION,
    PROJECT_NAME,
    EmbeddingState,
    StrictModel,
    wait_for_embedding_field,
)
from app.memory.schemas import (
    COMPACT_TIME_DESCRIPTION,
    REPLY_TOKENS_DESCRIPTION,
    SOURCE_IDS_DESCRIPTION,
    Provider,
    RetrievalMode,
    SearchMode,
    Signal,
    Strategy,
    move_aliases,
)

Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
# What a missing project means differs by tool: reads cover every project (a project-bound key: its
# own), a new thought goes to 'default', an updated one stays where it is.
ProjectRef = Annotated[
    str | None, Field(default=None, pattern=PROJECT_NAME, description="Project name (default: every project)")
]
ProjectForNew = Annotated[
    str | None, Field(default=None, pattern=PROJECT_NAME, description="Project name (default 'default')")
]
ProjectMove = Annotated[
    str | None, Field(default=None, pattern=PROJECT_NAME, description="Move it to this project (default: it stays)")
]
ProjectSummarized = Annotated[
    str | None,
    Field(
        default=None,
        pattern=PROJECT_NAME,
        description="Project whose thoughts are summarized and where the summary is kept (default: every "
        "project; kept in 'default')",
    ),
]


class ThoughtMetadata(BaseModel):
    """Client-supplied metadata of a thought; other keys are kept as given."""

    model_config = ConfigDict(extra="allow")

    type: Label | None = Field(default=None, description="e.g. observation, task, idea, reference, person_note")
    topics: list[Label] = Field(default_factory=list, max_length=50)
    people: list[Label] = Field(default_factory=list, max_length=50)
    action_items: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)]] = Field(
        default_factory=list, max_length=50
    )
    source: Label | None = None


class ThoughtOut(BaseModel):
    """A thought (any memory of the store, seen through the thoughts dialect)."""

    id: str
    content: str
    project: str
    metadata: dict[str, Any]
    memory_type: str
    kind: str
    tags: list[str]
    archived: bool
    has_embedding: bool = Field(description="Whether a vector of the active model exists")
    created_at: datetime
    updated_at: datetime


class CaptureThoughtIn(StrictModel):
    """Arguments of capture_thought."""

    content: str = Field(min_length=1, description="The thought's text")
    project: ProjectForNew
    metadata: ThoughtMetadata | None = None
    wait_for_embedding: bool | None = wait_for_embedding_field()


class CaptureThoughtOut(BaseModel):
    """Result of capture_thought."""

    thought: ThoughtOut
    embedded: bool = Field(description="False when the embedding failed: backfill_embeddings will add it")
    model: str
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class ThoughtIdIn(StrictModel):
    """Arguments naming one thought."""

    id: uuid.UUID


class ListThoughtsIn(StrictModel):
    """Arguments of list_thoughts."""

    project: ProjectRef
    type: Label | None = Field(default=None, description="metadata.type equals this")
    topic: Label | None = Field(default=None, description="metadata.topics contains this")
    person: Label | None = Field(default=None, description="metadata.people contains this")
    days: int | None = Field(default=None, ge=1, le=36500, description="Only thoughts of the last N days")
    include_archived: bool = Field(default=False, description="Include archived thoughts")
    limit: int = Field(default=20, ge=1, le=100)
    offset: int = Field(default=0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return move_aliases(data, {"archived": "include_archived"})


class ListThoughtsOut(BaseModel):
    """A page of thoughts, newest first."""

    thoughts: list[ThoughtOut]
    total: int
    next_offset: int | None = None


class UpdateThoughtIn(StrictModel):
    """Arguments of update_thought."""

    id: uuid.UUID
    content: str | None = Field(default=None, min_length=1)
    metadata: ThoughtMetadata | None = Field(default=None, description="Replaces the metadata")
    project: ProjectMove
    wait_for_embedding: bool | None = wait_for_embedding_field()


class UpdateThoughtOut(BaseModel):
    """Result of update_thought."""

    thought: ThoughtOut
    re_embedded: bool
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)


class ArchiveThoughtIn(StrictModel):
    """Arguments of archive_thought."""

    id: uuid.UUID
    archived: bool = Field(default=True, description="False restores an archived thought")


class ThoughtResultOut(BaseModel):
    """One thought."""

    thought: ThoughtOut


class DeleteThoughtOut(BaseModel):
    """Result of delete_thought."""

    id: str
    deleted: bool


class SearchThoughtsIn(StrictModel):
    """Arguments of search_thoughts."""

    query: str = Field(min_length=1, max_length=2000)
    project: ProjectRef
    limit: int = Field(default=10, ge=1, le=50)
    threshold: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Minimum relevance (similarity), every mode"
    )
    mode: SearchMode = "hybrid"
    include_archived: bool = False
    explain: bool = Field(default=False, description="Add each result's signals: which searches found it, rank, score")


def _absent(value: Any) -> bool:
    return value is None


class ThoughtHit(BaseModel):
    """One matching thought."""

    id: str
    content: str
    truncated: bool | None = Field(
        default=None, exclude_if=_absent, description="true: content is cut (CAIRN_MEMORY_RESULT_TOKENS)"
    )
    similarity: float = Field(description="Relevance in [0, 1], one scale in every mode")
    embedding: Literal["pending"] | None = Field(
        default=None,
        exclude_if=_absent,
        description="pending: found by its words; its vector is not made yet, so its score is lexical relevance",
    )
    project: str
    metadata: dict[str, Any] | None = Field(default=None, exclude_if=_absent, description="Left out when empty")
    created_at: str = Field(description=COMPACT_TIME_DESCRIPTION)
    signals: dict[str, Signal] | None = Field(
        default=None, exclude_if=_absent, description="With explain: the searches that found it, rank and score"
    )


class SearchThoughtsOut(BaseModel):
    """Result of search_thoughts."""

    results: list[ThoughtHit]
    retrieval_mode: RetrievalMode
    model: str
    threshold: float = Field(description="The minimum relevance applied: the caller's, or the default of the mode")
    notice: str | None = Field(
        default=None,
        exclude_if=_absent,
        description="Why nothing came back, or which results were found by words alone",
    )
    tokens: int = Field(default=0, description=REPLY_TOKENS_DESCRIPTION)


class RecallContextIn(StrictModel):
    """Arguments of recall_context."""

    query: str = Field(min_length=1, max_length=2000)
    project: ProjectRef
    limit: int = Field(default=5, ge=1, le=20)
    max_chars: int = Field(default=2000, ge=200, le=20_000)


class CitedItem(BaseModel):
    """A cited thought of a context block."""

    id: str
    score: float
    created_at: str = Field(description=COMPACT_TIME_DESCRIPTION)


class RecallContextOut(BaseModel):
    """A compact context block citing each thought as [n], n its 1-based position in items."""

    context: str = Field(description="One line '[n] text' per item, n its 1-based position in items")
    items: list[CitedItem]
    retrieval_mode: RetrievalMode
    truncated: bool
    notice: str | None = Field(
        default=None, exclude_if=_absent, description="Why nothing came back, or which items were found by words alone"
    )
    tokens: int = Field(default=0, description=REPLY_TOKENS_DESCRIPTION)


class ProjectContextIn(StrictModel):
    """Arguments of get_project_context."""

    project: str = Field(pattern=PROJECT_NAME)
    query: str | None = Field(default=None, min_length=1, max_length=2000)
    limit: int = Field(default=5, ge=1, le=20, description="Recent thoughts, and as many query-relevant ones")
    max_chars: int = Field(default=3000, ge=200, le=20_000)


class ProjectContextOut(BaseModel):
    """Recent plus query-relevant thoughts of one project."""

    project: str
    recent: list[CitedItem]
    relevant: list[CitedItem]
    context: str
    retrieval_mode: RetrievalMode | None = Field(description="None when no query was given")
    total_thoughts: int


class SummarizeThoughtsIn(StrictModel):
    """Arguments of summarize_thoughts."""

    project: ProjectSummarized
    query: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="Summarise the thoughts relevant to this (else the most recent)",
    )
    days: int | None = Field(default=None, ge=1, le=36500)
    limit: int = Field(default=20, ge=1, le=100)
    strategy: Strategy = "auto"
    provider: Provider | None = Field(default=None, description="Must be the configured summary provider")
    model: str | None = Field(default=None, max_length=200)
    max_words: int | None = Field(default=None, gt=0, le=5000)
    wait_for_embedding: bool | None = wait_for_embedding_field()


class SummarizeThoughtsOut(BaseModel):
    """Result of summarize_thoughts."""

    summary: str
    source_memory_ids: list[str] = Field(description=SOURCE_IDS_DESCRIPTION)
    upserted_memory_id: str
    strategy: str
    provider: str | None = None
    model: str | None = None
    retrieval_mode: RetrievalMode | None = None
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)
    tokens: int = Field(default=0, description=REPLY_TOKENS_DESCRIPTION)


class RelatedThoughtsIn(StrictModel):
    """Arguments of related_thoughts."""

    id: uuid.UUID
    limit: int = Field(default=5, ge=1, le=50)
    include_archived: bool = False
    explain: bool = Field(default=False, description="Add each result's signals: which search found it, rank, score")


class RelatedThoughtsOut(BaseModel):
    """Semantic neighbours of one thought."""

    id: str
    results: list[ThoughtHit]
    retrieval_mode: RetrievalMode
    tokens: int = Field(default=0, description=REPLY_TOKENS_DESCRIPTION)


class ThoughtStatsIn(StrictModel):
    """Arguments of thought_stats."""

    project: ProjectRef


class CountItem(BaseModel):
    """A value and how often it occurs."""

    value: str
    count: int


class ThoughtStatsOut(BaseModel):
    """Counts of the store."""

    total: int
    active: int
    archived: int
    by_type: list[CountItem]
    by_memory_type: list[CountItem]
    top_topics: list[CountItem]
    top_people: list[CountItem]
    missing_embeddings: int
    model: str


class BackfillIn(StrictModel):
    """Arguments of backfill_embeddings (seed 004)."""

    project: str | None = Field(default=None, max_length=128, description="Project name or id")
    limit: int = Field(default=100, ge=1, le=10_000, description="Most thoughts processed in this call")
    batch_size: int = Field(default=20, ge=1, le=256)
    include_archived: bool = False
    older_than_days: int = Field(default=0, ge=0, le=36500)
    dry_run: bool = False
    wait_for_embedding: bool | None = wait_for_embedding_field()


class BackfillFailure(BaseModel):
    """One thought that could not be embedded."""

    id: str
    error: str


class BackfillOut(BaseModel):
    """Result of backfill_embeddings (seed 004)."""

    model: str
    scanned: int
    queued: int = Field(default=0, description="Rows queued for the embedding workers")
    embedded: int = Field(description="Queued rows whose vector is stored by the time of this reply")
    skipped: int
    failed: int
    dry_run: bool
    failures: list[BackfillFailure]
    sample_ids: list[str] = Field(default_factory=list, description="Dry run: some of the ids that would be embedded")
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)
