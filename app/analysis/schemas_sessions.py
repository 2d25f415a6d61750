"""Inputs and outputs of analysis_sessions and analysis_session: what a project's sessions hold."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from app.analysis.schemas import ANALYSIS_ID
from app.core.cuts import Cut
from app.core.schemas import PROJECT_NAME, StrictModel


class SessionsIn(StrictModel):
    """Arguments of analysis_sessions."""

    project: str | None = Field(
        default=None, pattern=PROJECT_NAME, description="Project scope (default: the key's project or 'default')"
    )
    limit: int = Field(default=20, ge=1, le=100, description="Sessions per page, most recently active first")
    offset: int = Field(default=0, ge=0, le=100_000, description="Sessions to skip")


class ModelHeld(BaseModel):
    """The records one model holds in a session, and the upstream pages (or nested batches) they came from."""

    model: str
    records: int
    pages: int = Field(description="Distinct upstream pages (or nested batches) the records came from")
    first_page: int | None = None
    last_page: int | None = None


class SessionSummary(BaseModel):
    """One analysis session of the project."""

    analysis_id: str
    models: list[ModelHeld]
    records: int = Field(description="Live ingested records")
    findings: int = Field(description="Live findings stored with analysis_store")
    page_summaries: int = Field(description="Live page_summary findings written by analysis_ingest")
    pages_held: int = Field(description="Upstream pages (or nested batches) its records came from, over its models")
    last_activity: datetime = Field(description="Latest ingest, finding or ingest-state change")


class SessionsOut(BaseModel):
    """A page of the project's analysis sessions."""

    project: str
    sessions: list[SessionSummary]
    total: int
    next_offset: int | None = None
    tokens: int = 0


class SessionIn(StrictModel):
    """Arguments of analysis_session."""

    analysis_id: str = Field(pattern=ANALYSIS_ID, description="The session to show")
    project: str | None = Field(
        default=None, pattern=PROJECT_NAME, description="Project scope (default: the key's project or 'default')"
    )
    findings_limit: int = Field(default=50, ge=0, le=200, description="Newest findings listed (0: counts only)")
    summaries_limit: int = Field(default=20, ge=0, le=200, description="Page summaries listed, by model and page")


class IngestRange(BaseModel):
    """Where one ingest of the session stands (a model + filters + page size, or a nested child list)."""

    model: str
    mode: Literal["top_level", "nested"]
    params: dict[str, Any] = Field(description="filters and per_page (top level) or the parent model (nested)")
    last_page: int = Field(description="The last page (or parent batch) this ingest reached; a resume goes on after it")
    complete: bool = Field(description="The listing reached its end")
    total_available: int | None = Field(default=None, description="Upstream total, when it reports one")
    updated_at: datetime
    expires_at: datetime


class FindingRow(BaseModel):
    """A stored finding or page summary."""

    id: int
    category: str
    finding: str
    metadata: dict[str, Any] | None = None
    source_model: str | None = None
    persistent: bool
    created_at: datetime
    expires_at: datetime | None = None


class SessionOut(BaseModel):
    """One session: its models and pages, its ingests, its newest findings and its page summaries."""

    analysis_id: str
    project: str
    models: list[ModelHeld]
    records: int
    ingests: list[IngestRange]
    findings: list[FindingRow]
    findings_total: int
    page_summaries: list[FindingRow]
    page_summaries_total: int
    last_activity: datetime | None = None
    cut: Cut | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="What the listing left out, why, and the call that gets it",
    )
    message: str
    tokens: int = 0
