"""Input and output of cache_manager (what the result cache holds) and context_optimizer (what a query's
reply would cost before it runs): the seed's `cache_manager` and `context_optimizer` roles."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from app.core.schemas import StrictModel
from app.datasets.schemas import ProjectField


def _unset(value: Any) -> bool:
    return value is None


# ------------------------------------------------------------------------------------------------ cache


class CacheListIn(StrictModel):
    """Arguments of cache_manager."""

    pattern: str | None = Field(default=None, max_length=200, description="Key, cache_key or query_id pattern (* ?)")
    limit: int = Field(default=20, ge=1, le=100)
    offset: int = Field(default=0, ge=0)
    project: str | None = ProjectField


class CacheEntryOut(BaseModel):
    """One live cache entry."""

    name: str = Field(description="'q_… <cache_key or query text>', or 'profile <file_path>'")
    kind: Literal["query", "python", "profile"]
    bytes: int = Field(description="The entry plus its stored result")
    age_s: int
    expires_in_s: int
    hits: int = Field(description="Calls this server process answered from it")
    rows: int | None = Field(default=None, exclude_if=_unset, description="Rows of the stored result")


class CacheListOut(BaseModel):
    """Result of cache_manager."""

    project: str
    entries: list[CacheEntryOut] = Field(description="Newest first")
    entries_total: int
    bytes_total: int
    next_offset: int | None
    ttl_s: int = Field(description="Lifetime of an entry")
    max_bytes: int = Field(description="Cap of the stored results (oldest swept first)")
    local_copies_bytes: int | None = Field(
        default=None, exclude_if=_unset, description="Objects of the shared store copied to this host's disk"
    )
    context_tokens_used: int


# ------------------------------------------------------------------------------------------------ estimate


class EstimateIn(StrictModel):
    """Arguments of context_optimizer: those of the execute_query call it prices."""

    query: str = Field(min_length=1, max_length=100_000)
    query_type: Literal["sql", "polars_expr"] = "sql"
    files: list[str] = Field(default_factory=list, max_length=50)
    return_limit: int = Field(default=100, ge=1, le=1000)
    return_format: Literal["json", "csv"] = "json"
    max_tokens: int | None = Field(
        default=None, ge=50, le=20_000, description="The priced call's budget (default: the server's)"
    )
    project: str | None = ProjectField


class EstimateOut(BaseModel):
    """Result of context_optimizer."""

    columns: list[str] = Field(description="The result's columns (the first 50)")
    column_count: int
    rows_total: int | None = Field(description="Rows of the result (null: unknown)")
    rows_exact: bool = Field(description="False: the planner's estimate (counting took too long)")
    rows_returned: int = Field(description="Rows the reply would carry without a budget: min(rows, return_limit)")
    tokens_per_row: float
    estimated_tokens: int = Field(description="Tokens of that reply")
    budget: int = Field(description="The token budget execute_query would answer within (max_tokens or default)")
    fits: bool
    rows_within_budget: int = Field(description="Rows that budget shows before it summarizes the rest")
    cache_hit: bool = Field(description="execute_query would answer from the cache")
    basis: str = Field(description="How the figures were found")
    advice: str | None = Field(default=None, exclude_if=_unset)
    context_tokens_used: int
