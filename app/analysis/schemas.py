"""Inputs and outputs of the five analysis tools."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from app.core.cuts import Cut
from app.core.schemas import (
    EMBEDDING_STATE_DESCRIPTION,
    PROJECT_NAME,
    EmbeddingState,
    StrictModel,
    wait_for_embedding_field,
)

ANALYSIS_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
MODEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$"
CATEGORY = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
# user_id travels as an HTTP header value: printable ASCII, no space at either end.
USER_ID = r"^[\x21-\x7E]([\x20-\x7E]*[\x21-\x7E])?$"

Scalar = str | int | float | bool | None


class _Session(StrictModel):
    analysis_id: str = Field(pattern=ANALYSIS_ID, description="Session key shared by every analysis tool")
    project: str | None = Field(
        default=None, pattern=PROJECT_NAME, description="Project scope (default: the key's project or 'default')"
    )


class IngestIn(_Session):
    """Arguments of analysis_ingest."""

    model: str | None = Field(default=None, pattern=MODEL_NAME, description="Top-level mode: the model to list")
    parent_model: str | None = Field(
        default=None, pattern=MODEL_NAME, description="Nested mode: a model already ingested in this session"
    )
    child_resource: str | None = Field(
        default=None, pattern=MODEL_NAME, description="Nested mode: the child resource to fetch for each parent"
    )
    parent_ids: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None,
        min_length=1,
        max_length=25,
        description="Nested mode: these parent ids instead of the ingested parents",
    )
    filters: dict[str, Scalar | list[Scalar]] | None = Field(
        default=None, description="Upstream filters (names declared for the model in the registry)"
    )
    page: int = Field(default=1, ge=1, le=100_000, description="Page to fetch when not ingesting all")
    per_page: int = Field(default=50, ge=1, le=200, description="Records per upstream page (capped by the upstream)")
    fields: list[str] | None = Field(
        default=None, min_length=1, max_length=100, description="Keep only these fields ({assoc}_id keys are kept too)"
    )
    ingest_all: bool = Field(default=False, description="Follow pagination, up to 50 pages per call")
    resume: bool = Field(default=False, description="Continue where the previous identical ingest stopped")
    user_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=USER_ID,
        description="Impersonate this upstream user (admin scope only; printable ASCII, sent as a header)",
    )

    @model_validator(mode="after")
    def _one_mode(self) -> IngestIn:
        nested = self.parent_model is not None or self.child_resource is not None
        if nested and (self.parent_model is None or self.child_resource is None):
            raise ValueError("nested mode needs both parent_model and child_resource")
        if nested == (self.model is not None):
            raise ValueError("give either model (top-level) or parent_model + child_resource (nested)")
        if self.parent_ids is not None and not nested:
            raise ValueError("parent_ids belongs to nested mode (parent_model + child_resource)")
        if self.parent_ids is not None and self.resume:
            raise ValueError("resume continues over the session's parents; with parent_ids, list the ones left")
        return self


class IngestOut(BaseModel):
    """Status of an ingest: counts only, never the rows."""

    analysis_id: str
    model: str
    mode: Literal["top_level", "nested"]
    stored: int = Field(description="Records stored or refreshed by this call")
    pages: int = Field(description="Upstream pages fetched by this call")
    fields_per_record: int
    session_records: int = Field(description="Records of this model now held for the session")
    total_available: int | None = Field(default=None, description="Upstream total, when it reports one")
    complete: bool = Field(description="True when the listing reached its end")
    capped: bool = Field(default=False, description="Stopped at the 50-page (or 25-parent) cap")
    next_page: int | None = Field(default=None, description="Page number a resume would start at")
    pages_remaining: int | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Pages still to fetch, from the upstream's total at the page size it sends",
    )
    page_size: int | None = Field(
        default=None, description="Records per page as the upstream sent them, when it capped below per_page"
    )
    renamed: dict[str, str] | None = Field(
        default=None, description="Upstream key paths stored under another name (first 20)"
    )
    warnings: list[str] | None = Field(default=None, description="Things this call could not do as asked")
    cut: Cut | None = Field(
        default=None, exclude_if=lambda v: v is None, description="What renamed left out, and where to read it"
    )
    parents_processed: int | None = Field(default=None, description="Nested: parents whose children were listed")
    parents_failed: int | None = Field(
        default=None, exclude_if=lambda v: v is None, description="Nested: parents whose children could not be listed"
    )
    failed_parents: list[str] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="Nested: the ids of those parents"
    )
    parents_remaining: int | None = Field(
        default=None, description="Nested: parents a resume walks (from the first failure on, else those not reached)"
    )
    page_summaries: int = Field(description="page_summary findings stored (searchable at once)")
    error: str | None = Field(default=None, description="Upstream failure that stopped the ingest early")
    message: str
    tokens: int = Field(default=0, description="Size of this response in embedding-tokenizer tokens")


class FindingIn(StrictModel):
    """One finding to store."""

    finding: str = Field(min_length=1, max_length=4000)
    category: str = Field(default="general", pattern=CATEGORY)
    metadata: dict[str, Any] | None = None


class StoreIn(_Session):
    """Arguments of analysis_store."""

    findings: list[FindingIn] = Field(min_length=1, max_length=25)
    persistent: bool = Field(default=False, description="Keep beyond the 1-hour lifetime of ephemeral findings")
    wait_for_embedding: bool | None = wait_for_embedding_field()


class StoreOut(BaseModel):
    """Result of analysis_store."""

    analysis_id: str
    stored: int
    ids: list[int]
    persistent: bool
    expires_at: str | None
    message: str
    embedding: EmbeddingState = Field(default="done", description=EMBEDDING_STATE_DESCRIPTION)
    tokens: int = 0


class ProximityIn(StrictModel):
    """Date window around an origin, optionally bucketed."""

    field: str = Field(max_length=64)
    origin: str = Field(max_length=40, description="ISO date or timestamp")
    window: str = Field(max_length=40, description="e.g. '7 days' (origin ± window)")
    bucket: str | None = Field(default=None, max_length=40, description="e.g. '1 day' (date_bin buckets)")


class QueryIn(_Session):
    """Arguments of analysis_query."""

    mode: Literal["describe", "semantic", "aggregate", "filter", "sample"]
    model: str | None = Field(
        default=None, pattern=MODEL_NAME, description="Model to query when the session holds several"
    )
    query: str | None = Field(default=None, min_length=1, max_length=2000, description="semantic: the text")
    top_k: int = Field(default=50, ge=1, le=100, description="semantic: most results")
    threshold: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="semantic: minimum score, cosine similarity or (findings matched by words) word relevance; "
        "default: the embedding model's similarity threshold and 0.3 for words (the reply states both)",
    )
    category: str | None = Field(default=None, pattern=CATEGORY, description="semantic: only this category")
    group_by: str | None = Field(default=None, max_length=64, description="aggregate: the field")
    where: dict[str, Any] | None = Field(default=None, description="filter/sample/aggregate: conditions")
    limit: int | None = Field(
        default=None, ge=1, le=200, description="filter: rows (default 20, cap 200); aggregate: groups (default 50)"
    )
    offset: int = Field(default=0, ge=0, le=1_000_000, description="filter: rows to skip; aggregate: groups to skip")
    sample_size: int = Field(default=5, ge=1, le=50, description="sample: rows (cap 50)")
    stratify_by: str | None = Field(default=None, max_length=64, description="sample: spread over this field")
    proximity: ProximityIn | None = None


class GroupOut(BaseModel):
    """One group of an aggregate."""

    value: Any
    count: int
    percent: float


class FindingHit(BaseModel):
    """A finding returned by semantic mode."""

    id: int
    category: str
    finding: str
    score: float
    metadata: dict[str, Any] | None = None
    matched_by: Literal["words"] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="words: matched by its words (score = word relevance), not compared by similarity",
    )
    embedding: Literal["pending"] | None = Field(
        default=None, exclude_if=lambda v: v is None, description="pending: its vector is not made yet"
    )


class QueryOut(BaseModel):
    """Result of analysis_query (the fields used depend on the mode)."""

    analysis_id: str
    mode: str
    model: str | None = None
    message: str
    text: str | None = Field(default=None, description="describe: markdown")
    total: int | None = Field(default=None, description="Matching records (or findings)")
    groups: list[GroupOut] | None = None
    rows: list[dict[str, Any]] | None = None
    findings: list[FindingHit] | None = None
    threshold: float | None = Field(
        default=None, exclude_if=lambda v: v is None, description="semantic: the similarity threshold applied"
    )
    word_threshold: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="semantic: the word relevance threshold applied to findings matched by words",
    )
    candidates: int | None = Field(
        default=None, exclude_if=lambda v: v is None, description="semantic: findings scored (nearest and by words)"
    )
    best_score: float | None = Field(
        default=None, exclude_if=lambda v: v is None, description="semantic: the best score among the candidates"
    )
    truncated: bool = Field(default=False, description="Something was left out: `cut` says what, why and how")
    cut: Cut | None = Field(
        default=None, exclude_if=lambda v: v is None, description="What was left out, why, and the call that gets it"
    )
    warnings: list[str] | None = Field(
        default=None,
        description="Conditions or fields that cannot match as written (unknown field, other type, other case)",
    )
    tokens: int = 0


class ActIn(_Session):
    """Arguments of analysis_act."""

    model: str = Field(pattern=MODEL_NAME)
    where: dict[str, Any] | None = Field(default=None, description="Same vocabulary as filter mode; omit for all")
    action: Literal["update", "delete"]
    attributes: dict[str, Any] | None = Field(default=None, description="update: applied to every match")
    dry_run: bool = Field(default=False, description="Report the scope without calling the upstream")
    user_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=USER_ID,
        description="Impersonate this upstream user (admin scope only; printable ASCII, sent as a header)",
    )
    deadline_seconds: float = Field(default=60, ge=1, le=600, description="Live run: time limit")
    record_seconds: float = Field(
        default=30, ge=1, le=600, description="Live run: time limit per record, retries included"
    )


class ActSummary(BaseModel):
    """Outcome counts of a live act: total = succeeded + failed + unknown + not_attempted."""

    total: int
    succeeded: int = Field(description="Accepted upstream, including already_done")
    failed: int = Field(description="Refused or failed upstream")
    unknown: int = Field(default=0, description="Cut off in flight (deadline or record budget): may have been applied")
    not_attempted: int = Field(default=0, description="Never sent: the deadline passed or the upstream was down")
    already_done: int = Field(description="Already in the requested state (e.g. already deleted)")
    deadline_reached: bool = Field(default=False, description="The run stopped at deadline_seconds")
    action: str


class ActError(BaseModel):
    """One failed record."""

    record_id: str
    status_code: int | None
    message: str


class IngestedRange(BaseModel):
    """Age of the snapshot the act is based on."""

    earliest: str | None
    latest: str | None


class ActOut(BaseModel):
    """Result of analysis_act: a dry-run scope or a live summary."""

    analysis_id: str
    model: str
    dry_run: bool
    matched_count: int | None = None
    sample_ids: list[str] | None = None
    sample_data: list[dict[str, Any]] | None = None
    ingestedAtRange: IngestedRange | None = None
    summary: ActSummary | None = None
    sample_errors: list[ActError] | None = None
    unknown_ids: list[str] | None = Field(default=None, description="First 10 records whose outcome is unknown")
    warnings: list[str] | None = Field(
        default=None, description="Why `where` matched nothing, when it cannot match as written"
    )
    cut: Cut | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="What sample_data (dry run) or the first errors and ids (live) left out, and how to see it",
    )
    run_id: int | None = Field(
        default=None, exclude_if=lambda v: v is None, description="Live run: its record, listed by analysis_act_runs"
    )
    message: str
    tokens: int = 0


class ClearIn(_Session):
    """Arguments of analysis_clear."""


class ClearOut(BaseModel):
    """Result of analysis_clear."""

    analysis_id: str
    records_deleted: int
    findings_deleted: int
    message: str
    tokens: int = 0
