"""context_optimizer: what an execute_query call would cost the context before it is made. The query
is checked and looked up in the cache as execute_query does; a cached result is read (exact figures),
else a DuckDB worker binds it, reads its first rows and counts it under short time limits
(`engine.estimate`). The reply execute_query would build is then measured with those rows, and with
more rows extrapolated from them."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from pathlib import Path
from typing import Any

from app.core import budget
from app.core.context import CallContext
from app.core.errors import CairnError, NotFound
from app.datasets import engine
from app.datasets import service_engines as engines
from app.datasets.config import DatasetSettings
from app.datasets.engine import estimate, polars_expr
from app.datasets.engine.cache import COUNT_HITS
from app.datasets.engine.sandbox import context_in
from app.datasets.repository import QueryRepository
from app.datasets.schemas import QueryIn
from app.datasets.schemas_cache import EstimateIn, EstimateOut
from app.datasets.service_answer import Reply, Stored
from app.datasets.service_common import (
    QUERY_ID,
    budget_of,
    cache_of,
    engine_config,
    name_caller,
    registered,
    space_of,
)
from app.datasets.service_query import _prepare, _prepared_beside_epoch
from app.datasets.service_results import settled

SAMPLE_ROWS = 100  # rows read to measure a row's tokens (all of them when the result is smaller)
MAX_COLUMNS = 50  # column names in the reply
# The query_id of the measured reply: hex of the median token count of real (random) ones.
PLACEHOLDER_ID = "q_4501aeb6218849a5"
# A stand-in value of each kind of column, for a row's tokens when no row could be read in time.
TYPICAL: dict[str, Any] = {
    "int": 123456,
    "float": 1234.56,
    "bool": True,
    "date": "2025-01-31",
    "time": "2025-01-31T12:00:00",
}


@dataclasses.dataclass(frozen=True)
class Found:
    """What the estimate knows of the result before measuring its reply."""

    columns: list[str]
    types: list[str]
    rows: int | None
    rows_exact: bool
    head: list[dict[str, Any]] | None
    cache_hit: bool
    normalized: str
    views: list[str]
    query_id: str = PLACEHOLDER_ID  # a cached result's own, else one drawn as real ones are
    elapsed_ms: int = 0
    files: int = 1  # the files the query reads (an `auto` reply names how many)


async def context_optimizer(ctx: CallContext, args: EstimateIn) -> EstimateOut:
    """Estimate the reply of execute_query with the same arguments (errors as execute_query's)."""
    try:
        found = await _find(ctx, args)
    except CairnError as exc:
        if exc.query_context is None:
            exc.query_context = context_in(args.query, exc.message)
        raise
    cfg = ctx.feature_settings(DatasetSettings)
    limit, cap = budget_of(cfg, args.max_tokens), cfg.datasets_max_tokens_cap
    return await asyncio.to_thread(measure, found, _query_args(args), limit, cap)


def _query_args(args: EstimateIn) -> QueryIn:
    """The execute_query arguments the estimate prices."""
    return QueryIn.model_validate(args.model_dump(exclude={"project"}, exclude_none=True))


async def _find(ctx: CallContext, args: EstimateIn) -> Found:
    """The result's columns, row count and first rows: from the cache, else from a worker."""
    cfg = ctx.feature_settings(DatasetSettings)
    sql = polars_expr.compile_expr(args.query) if args.query_type == "polars_expr" else args.query
    space = await space_of(ctx, args.project)
    name_caller(ctx)
    refs = list(args.files)
    known = await registered(ctx, space, [r for r in refs if not QUERY_ID.fullmatch(r)])
    ids = list(dict.fromkeys([r for r in refs if QUERY_ID.fullmatch(r)] + QUERY_ID.findall(sql)))
    named = await QueryRepository(ctx.session, space.project).get_many(ids)
    for q in named.values():
        await settled(space, q.query_id, q.result_path, q.created_at)
    look = functools.partial(
        _prepare, sql, refs, known, space, named, cache_of(ctx, space), cfg.datasets_result_max_rows
    )
    counting = COUNT_HITS.set(False)  # looking the result up answers no call from the cache
    try:
        _, p = await _prepared_beside_epoch(ctx, space, look)
    finally:
        COUNT_HITS.reset(counting)
    gone = [q for q in p.result_ids if q not in p.result_views]
    if gone:
        raise NotFound(f"Unknown or expired query_id {gone[0]}", suggestions=["Run execute_query to get a query_id"])
    want = min(args.return_limit, SAMPLE_ROWS)
    ecfg = engine_config(cfg, space)
    views = sorted(p.taken)
    if p.hit is not None:
        meta = p.hit["meta"]
        rows = await engine.offload(engine.read_rows, ecfg, Path(meta["result_path"]), 0, args.return_limit)
        return Found(
            meta["columns"],
            meta["types"],
            meta["rows_total"],
            True,
            rows,
            True,
            p.normalized,
            views,
            meta["query_id"],
            int(meta.get("elapsed_ms") or 0),
            len(p.fingerprints),
        )
    # The sample and the count have a short limit each; the whole call, a little more than both.
    limit_s = min(ecfg.timeout_s, 3 * estimate.STEP_S + 2)
    ecfg = dataclasses.replace(ecfg, timeout_s=limit_s)
    est = await engine.offload(estimate.estimate_query, ecfg, p.checked, p.sources, p.result_views, want)
    return Found(
        est.columns,
        est.types,
        est.rows,
        est.rows_exact,
        est.head,
        False,
        p.normalized,
        views,
        files=len(p.fingerprints),
    )


def measure(found: Found, args: QueryIn, limit: int, cap: int = 20_000) -> EstimateOut:
    """The estimate's reply: the tokens of execute_query's reply with `found`'s rows (counted on the
    reply itself up to the rows in hand, extrapolated past them) against the budget `limit`."""
    total = found.rows
    shown = args.return_limit if total is None else min(args.return_limit, total)
    meta = {
        "query_id": found.query_id,
        "columns": found.columns,
        "types": found.types,
        "rows_total": total or 0,
        "rows_stored": total or 0,
        "elapsed_ms": found.elapsed_ms,
        # The engine `auto` names in the reply, as execute_query would (its size only matters for python).
        "engine_reason": engines.with_inputs(engines.choose(args, python_enabled=False), found.files, 0),
    }
    used = "polars_expr→duckdb" if args.query_type == "polars_expr" else "duckdb"
    reply = Reply(args, Stored(meta, found.cache_hit, used, found.normalized, found.views))
    head = found.head if found.head else [typical_row(found.columns, found.types)]
    head = head[:shown] if shown else head[:1]

    def cost(k: int) -> int:
        return int(budget.finalize(reply(head[:k], None, "none"))["context_tokens_used"])

    base = cost(0)
    per_row = (cost(len(head)) - base) / len(head) if head else 0.0

    def tokens(k: int) -> int:
        return cost(k) if k <= len(head) and found.head else base + round(per_row * k)

    needed = tokens(shown)
    within = budget.largest_fitting(shown, lambda k: tokens(k) <= limit)
    out = EstimateOut(
        columns=found.columns[:MAX_COLUMNS],
        column_count=len(found.columns),
        rows_total=total,
        rows_exact=found.rows_exact,
        rows_returned=shown,
        tokens_per_row=round(per_row, 1),
        estimated_tokens=needed,
        budget=limit,
        fits=needed <= limit,
        rows_within_budget=within,
        cache_hit=found.cache_hit,
        basis=basis(found, len(head)),
        advice=advice(needed, limit, shown, within, cap),
        context_tokens_used=0,
    )
    return EstimateOut.model_validate(budget.finalize(out.model_dump(mode="json")))


def typical_row(columns: list[str], types: list[str]) -> dict[str, Any]:
    """A row of stand-in values of the columns' types (a text as twelve letters)."""
    return {
        name: TYPICAL.get(_kind(ctype.upper()), "abcdefghijkl") for name, ctype in zip(columns, types, strict=False)
    }


def _kind(t: str) -> str:
    """The `TYPICAL` kind of a DuckDB type ('' for a text or any other)."""
    if t.startswith("TIMESTAMP"):
        return "time"
    if t == "DATE":
        return "date"
    if t == "BOOLEAN":
        return "bool"
    if t in ("DOUBLE", "FLOAT", "REAL") or t.startswith("DECIMAL"):
        return "float"
    return "int" if t.endswith("INT") or t in ("INTEGER", "BIGINT") else ""


def basis(found: Found, sampled: int) -> str:
    """How the figures were found, in a few words."""
    if found.cache_hit:
        return "cached result: exact"
    rows = (
        "rows counted" if found.rows_exact else "rows: planner estimate" if found.rows is not None else "rows unknown"
    )
    tokens = f"{sampled} rows read" if found.head else "no row read in time: tokens from column types"
    return f"{rows}; {tokens}"


def advice(needed: int, limit: int, shown: int, within: int, cap: int) -> str | None:
    """What to change when the reply would not fit its budget (None when it fits): the budget that
    shows every row, when the cap of budgets (`cap`) allows it, and the narrower calls."""
    if needed <= limit:
        return None
    fit = f"{within} of {shown} rows fit max_tokens {limit}"
    more = (
        f"max_tokens {needed} shows them all; or "
        if needed <= cap
        else f"all of them need about {needed} tokens, past the cap of {cap}: "
    )
    return f"{fit}; {more}aggregate, lower return_limit, or page the rest with get_result"
