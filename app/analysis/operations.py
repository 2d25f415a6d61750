"""The five analysis tools (MCP) and their REST twins under /api/v1/analysis/..."""

from __future__ import annotations

from app.analysis import operations_sessions, service, service_act, service_ingest, service_query
from app.analysis.schemas import (
    ActIn,
    ActOut,
    ClearIn,
    ClearOut,
    IngestIn,
    IngestOut,
    QueryIn,
    QueryOut,
    StoreIn,
    StoreOut,
)
from app.core.context import CallContext
from app.core.errors import NotFound, SchemaError
from app.core.registry import OperationSet

ops = OperationSet(
    "analysis",
    "Analysis sessions over a paginated upstream API: ingest, store findings, query them, act upstream.",
)
ops.toolset(
    "analysis", "Analysis sessions: ingest a paginated upstream API, query it offline, store findings, act upstream."
)


@ops.operation(
    name="analysis_ingest",
    errors=(NotFound, SchemaError),
    example={"analysis_id": "books-2026", "model": "books", "ingest_all": True},
    input=IngestIn,
    output=IngestOut,
    path="/analysis/ingest",
    long_running=True,
    open_world=True,
    title="Ingest Upstream Records",
)
async def analysis_ingest(ctx: CallContext, args: IngestIn) -> IngestOut:
    """Download records of a configured upstream model into the analysis session's offline storage; only
    a status summary comes back, never the rows.

    Top-level mode: `model` (+ optional `filters`, `page`/`per_page` (default 50), `fields` projection that
    also keeps `{assoc}_id` keys). `ingest_all: true` follows pagination up to 50 pages per call with
    progress per page; `resume: true` continues where the same ingest stopped (after the cap or an
    upstream failure). Nested mode: `parent_model` + `child_resource` fetches the child list of up to 25
    already-ingested parents per call (5 at a time; `resume: true` for the next ones), or of the given
    `parent_ids` (at most 25). Keys are stored under queryable names (`sla-tier` -> `sla_tier`).
    Every page also stores a `page_summary` finding (value distributions, numeric min/max/avg/median, date
    ranges) that semantic queries find at once. Re-ingesting replaces records by id (no duplicates).
    Records are kept 7 days; call analysis_clear when done."""
    return await service_ingest.ingest(ctx, args)


@ops.operation(name="analysis_store", input=StoreIn, output=StoreOut, path="/analysis/store", title="Store Findings")
async def analysis_store(ctx: CallContext, args: StoreIn) -> StoreOut:
    """Store up to 25 of your own findings (patterns, anomalies, conclusions) for an analysis session as
    semantic embeddings, with an optional `category` (a grouping key such as quality_issue) and JSON
    `metadata` (e.g. counts or example ids). Findings expire after 1 hour unless `persistent: true`.
    Not for raw records: analysis_ingest already holds those."""
    return await service.store(ctx, args)


@ops.operation(
    name="analysis_query",
    errors=(NotFound,),
    input=QueryIn,
    output=QueryOut,
    path="/analysis/query",
    read_only=True,
    primary_only=True,  # deletes expired records before it reads (AnalysisRepository.evict_expired)
    title="Query Analysis",
)
async def analysis_query(ctx: CallContext, args: QueryIn) -> QueryOut:
    """Query an analysis session without pulling the whole data set into context. Modes:
    `describe` (fields, types, values and query examples), `semantic` (`query`; findings and page
    summaries by meaning, those without a vector yet by their words; `top_k` default 50, `threshold`
    default the model's (0.45 with the local model; 0.3 for word matches), optional `category`), `aggregate`
    (`group_by`: value counts and percentages), `filter` (`where`; rows, default 20, cap 200, `offset`),
    `sample` (`sample_size` default 5, cap 50, composing `stratify_by` (even spread over a field's values),
    `where` and `proximity` {field, origin, window, bucket?} such as window '7 days', bucket '1 day').
    `where`: {"status": "active"} matches exactly; {"rating": {"$gte": 2, "$lt": 4}} or
    {"updated_at": {"$gte": "2026-01-01"}} compare as number or date. Pass `model` when the session
    holds several models."""
    return await service_query.query(ctx, args)


@ops.operation(
    name="analysis_act",
    errors=(NotFound, SchemaError),
    input=ActIn,
    output=ActOut,
    path="/analysis/act",
    destructive=True,
    long_running=True,
    open_world=True,
    title="Act Upstream",
)
async def analysis_act(ctx: CallContext, args: ActIn) -> ActOut:
    """Apply `action` "update" (with `attributes`) or "delete" upstream to every ingested record of `model`
    (top-level, or a child model with write paths) matching `where` (same vocabulary as filter mode; omit
    for all). Ids are resolved server-side. `dry_run: true` reports matched_count, sample_ids,
    sample_data with ingestedAt and ingestedAtRange (snapshot age) without calling the upstream: use it
    first. Live runs send 5 requests at a time within `deadline_seconds` and return a summary
    (succeeded, failed, unknown, not_attempted) and the first 5 errors. The session's copy follows every
    change the upstream accepted, even if the call is cancelled. Run again to finish an act that stopped
    early (acts are idempotent per record)."""
    return await service_act.act(ctx, args)


@ops.operation(
    name="analysis_clear",
    input=ClearIn,
    output=ClearOut,
    path="/analysis/clear",
    destructive=True,
    idempotent=True,
    title="Clear Analysis",
)
async def analysis_clear(ctx: CallContext, args: ClearIn) -> ClearOut:
    """Delete an analysis session: its ingested records and all its findings (persistent ones too), and
    report the counts. Call it once the synthesis is done."""
    return await service.clear(ctx, args)


# The analysis operations: those above, then the session listing's.
ops.include(operations_sessions.ops)
