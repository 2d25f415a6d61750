"""Inputs and outputs of analysis_act_runs: the live analysis_act runs recorded per session."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from app.analysis.schemas import ANALYSIS_ID, ActError
from app.core.cuts import Cut
from app.core.schemas import PROJECT_NAME, StrictModel


class ActRunsIn(StrictModel):
    """Arguments of analysis_act_runs."""

    analysis_id: str = Field(pattern=ANALYSIS_ID, description="The session")
    project: str | None = Field(
        default=None, pattern=PROJECT_NAME, description="Project scope (default: the key's project or 'default')"
    )
    run_id: int | None = Field(default=None, ge=1, description="One run, with its failed and unknown ids paged")
    limit: int = Field(default=10, ge=1, le=100, description="Runs per page, newest first (ids per page with run_id)")
    offset: int = Field(default=0, ge=0, le=100_000, description="Runs to skip (ids to skip with run_id)")


class ActRunRow(BaseModel):
    """One live act: what, when, by which key, how it went."""

    run_id: int
    model: str
    action: str
    where: dict[str, Any] | None = None
    attributes: dict[str, Any] | None = None
    state: str = Field(description="finished, or interrupted (the call was cancelled or failed after it started)")
    key_name: str = Field(description="The API key that ran it")
    key_id: str | None = None
    transport: str = Field(description="mcp, rest or console")
    total: int
    succeeded: int
    failed: int
    unknown: int
    not_attempted: int
    already_done: int
    deadline_reached: bool
    failed_ids: list[str] = Field(description="Ids the upstream refused (the first ones; failed_ids_total counts all)")
    failed_ids_total: int
    unknown_ids: list[str] = Field(description="Ids whose outcome is unknown (the first ones)")
    unknown_ids_total: int
    errors: list[ActError] = Field(description="The first failures with status code and message")
    started_at: datetime
    finished_at: datetime


class ActRunsOut(BaseModel):
    """A page of a session's act runs (or one run and a page of its ids)."""

    analysis_id: str
    project: str
    runs: list[ActRunRow]
    total: int = Field(description="Runs the session holds (with run_id: 1)")
    next_offset: int | None = None
    cut: Cut | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="What this reply left out, why, and the call that gets it",
    )
    message: str
    tokens: int = 0
