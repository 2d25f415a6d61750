"""analysis_query: describe, semantic, aggregate, filter and sample over one session."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from app.analysis.catalog import AttributeCfg
from app.analysis.repository import AnalysisRepository
from app.analysis.schemas import GroupOut, QueryIn, QueryOut
from app.analysis.service import bounded_rows, catalog, project_for_read, settings, where_warnings, with_tokens
from app.analysis.service_semantic import Thresholds, semantic, thresholds_for
from app.analysis.validation import (
    FIELD,
    bucket_interval,
    field_name,
    interval,
    parse_date,
    parse_where,
)
from app.core.context import CallContext
from app.core.embeddings.calls import query_vector
from app.core.errors import InvalidInput, NotFound, SchemaError, invalid_field

log = logging.getLogger("cairn.analysis")

FILTER_DEFAULT, FILTER_CAP = 20, 200
GROUPS_DEFAULT = 50
# describe reads every record of a model up to this many (in ingest order), and says so beyond it.
DESCRIBE_ROWS = 20_000


async def query(ctx: CallContext, args: QueryIn) -> QueryOut:
    """Dispatch on `mode`."""
    # The query's vector first: no transaction is open while the model runs.
    searching = args.mode == "semantic" and bool(args.query)
    vector = await query_vector(ctx, args.query, "analysis semantic query") if searching and args.query else None
    thresholds = await thresholds_for(ctx, args, vector is not None) if searching else Thresholds(0.0, 0.0, False)
    repo = AnalysisRepository(ctx.session)
    pid = await project_for_read(ctx, repo, args.project, args.analysis_id)
    await repo.evict_expired()
    if args.mode == "semantic":
        _check_mode_args(args, {"query", "category"})
        out = await semantic(ctx, repo, pid, args, vector, thresholds)
    elif args.mode == "describe":
        out = await _describe(ctx, repo, pid, args)
    else:
        model = await _model(repo, pid, args)
        if args.mode == "aggregate":
            out = await _aggregate(repo, pid, args, model)
        elif args.mode == "filter":
            out = await _filter(ctx, repo, pid, args, model)
        else:
            out = await _sample(ctx, repo, pid, args, model)
    return with_tokens(out)


async def _model(repo: AnalysisRepository, pid: uuid.UUID, args: QueryIn) -> str:
    models = dict(await repo.session_models(pid, args.analysis_id))
    if not models:
        raise NotFound(
            f"No ingested records in analysis '{args.analysis_id}' (never ingested, cleared or expired)",
            suggestions=["Run analysis_ingest (resume: true rebuilds an expired session)"],
        )
    if args.model is not None:
        if args.model not in models:
            raise NotFound(
                f"Analysis '{args.analysis_id}' holds no '{args.model}' records",
                suggestions=[f"Models in this session: {', '.join(models)}"],
            )
        return args.model
    if len(models) > 1:
        raise invalid_field(
            "model",
            f"Analysis '{args.analysis_id}' holds several models; say which with model",
            suggestions=[f"Models in this session: {', '.join(models)}"],
        )
    return next(iter(models))


def _check_mode_args(args: QueryIn, allowed: set[str]) -> None:
    used = {
        "query": args.query,
        "category": args.category,
        "group_by": args.group_by,
        "where": args.where,
        "stratify_by": args.stratify_by,
        "proximity": args.proximity,
    }
    stray = [name for name, value in used.items() if value is not None and name not in allowed]
    if stray:
        raise invalid_field(stray[0], f"mode '{args.mode}' does not use {', '.join(stray)}")


_TYPE_NAMES = {
    "number": "number",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "object": "object",
    "null": "null",
}


async def _describe(ctx: CallContext, repo: AnalysisRepository, pid: uuid.UUID, args: QueryIn) -> QueryOut:
    _check_mode_args(args, set())
    models = await repo.session_models(pid, args.analysis_id)
    if args.model is not None:
        models = [(m, n) for m, n in models if m == args.model]
    if not models:
        scope = f" for model '{args.model}'" if args.model else ""
        raise NotFound(
            f"No ingested records in analysis '{args.analysis_id}'{scope} (never ingested, cleared or expired)",
            suggestions=["Run analysis_ingest (resume: true rebuilds an expired session)"],
        )
    try:
        upstreams = catalog(ctx)
    except (InvalidInput, SchemaError):
        upstreams = None
    findings = await repo.count_findings(pid, args.analysis_id)
    blocks = []
    for model, count in models:
        attrs: dict[str, AttributeCfg] = upstreams.attributes_of(model) if upstreams else {}
        blocks.append(await _describe_model(repo, pid, args.analysis_id, model, count, attrs))
    text = "\n\n".join(blocks) + f"\n\nFindings stored: {findings} (semantic mode searches them)."
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="describe",
        model=args.model,
        text=text,
        total=sum(n for _, n in models),
        message=f"{len(models)} model(s): " + ", ".join(f"{m} ({n})" for m, n in models),
    )


async def _describe_model(
    repo: AnalysisRepository, pid: uuid.UUID, aid: str, model: str, count: int, attrs: dict[str, AttributeCfg]
) -> str:
    sampled = min(count, DESCRIBE_ROWS)
    observed = await repo.observed_fields(pid, aid, model, sampled)
    fields: dict[str, tuple[str, int]] = {}
    for name, jtype, n in observed:
        if name not in fields or (fields[name][0] == "null" and jtype != "null"):
            prev = fields.get(name, ("", 0))[1]
            fields[name] = (jtype, n + prev)
        else:
            fields[name] = (fields[name][0], fields[name][1] + n)
    scope = "" if sampled == count else f" (fields, types and values from the first {sampled:,} in ingest order)"
    lines = [f"### {model}: {count} records{scope}", "| field | type | notes |", "|---|---|---|"]
    low_card, numeric, dates = None, None, None
    for name, (jtype, present) in fields.items():
        attr = attrs.get(name)
        ftype = attr.type if attr else _TYPE_NAMES.get(jtype, jtype)
        notes: list[str] = []
        if attr and attr.description:
            notes.append(attr.description)
        if attr and attr.enum:
            notes.append("values: " + ", ".join(str(v) for v in attr.enum))
        elif jtype == "string" and ftype not in ("date", "datetime") and _plain(name):
            distinct, top = await repo.top_values(pid, aid, model, name, 6, sampled)
            if 0 < distinct <= 6:
                notes.append("values: " + ", ".join(top))
                low_card = low_card or name
            elif distinct:
                notes.append(f"{distinct} distinct")
        if attr and attr.enum:
            low_card = low_card or name
        if ftype in ("date", "datetime"):
            dates = dates or name
        elif ftype in ("integer", "number") and not name.endswith("_id") and name != "id":
            numeric = numeric or name
        if present < sampled:
            notes.append(f"in {round(100 * present / max(sampled, 1))}% of rows")
        lines.append(f"| {name} | {ftype} | {'; '.join(notes)} |")
    examples = []
    if low_card:
        examples.append(f'aggregate: {{"group_by": "{low_card}"}}')
    cond: dict[str, Any] = {}
    if low_card:
        cond[low_card] = "<value>"
    if numeric:
        cond[numeric] = {"$gte": 1}
    if cond:
        examples.append(f'filter: {{"where": {json.dumps(cond)}}}')
    strat = {"stratify_by": low_card} if low_card else {}
    examples.append("sample: " + json.dumps({"sample_size": 9, **strat}))
    if dates:
        examples.append(
            f'sample: {{"proximity": {{"field": "{dates}", "origin": "2026-01-01", '
            '"window": "30 days", "bucket": "1 week"}}'
        )
    lines.append("Examples: " + " | ".join(examples))
    lines.append('where: exact values match; {"$gt"|"$gte"|"$lt"|"$lte": number or ISO date} compare.')
    return "\n".join(lines)


def _plain(name: str) -> bool:
    """Observed keys come from upstream data: only plain names are queried further."""
    return bool(FIELD.fullmatch(name)) and len(name) <= 64


async def _aggregate(repo: AnalysisRepository, pid: uuid.UUID, args: QueryIn, model: str) -> QueryOut:
    _check_mode_args(args, {"group_by", "where"})
    if not args.group_by:
        raise invalid_field("group_by", "aggregate mode needs group_by")
    field = field_name(args.group_by, "group_by")
    w = parse_where(args.where)
    limit = args.limit or GROUPS_DEFAULT
    total, distinct, groups = await repo.aggregate(pid, args.analysis_id, model, field, w, limit)
    warnings = await where_warnings(repo, pid, args.analysis_id, model, w, {"group_by": (field, "any")})
    out = [GroupOut(value=v, count=c, percent=round(100.0 * c / total, 1) if total else 0.0) for v, c in groups]
    more = f", top {len(out)} of {distinct} shown" if distinct > len(out) else ""
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="aggregate",
        model=model,
        total=total,
        groups=out,
        truncated=distinct > len(out),
        warnings=warnings,
        message=f'Distribution of "{field}" ({total} total, {distinct} distinct{more}).',
    )


async def _filter(ctx: CallContext, repo: AnalysisRepository, pid: uuid.UUID, args: QueryIn, model: str) -> QueryOut:
    _check_mode_args(args, {"where"})
    if not args.where:
        raise invalid_field(
            "where", "filter mode needs where", suggestions=['e.g. {"status": "completed", "rating": {"$lt": 2}}']
        )
    w = parse_where(args.where)
    limit = min(args.limit or FILTER_DEFAULT, FILTER_CAP)
    total, rows = await repo.filter(pid, args.analysis_id, model, w, limit, args.offset)
    warnings = await where_warnings(repo, pid, args.analysis_id, model, w, {}) if total == 0 else None
    kept, cut = bounded_rows(rows, settings(ctx).max_response_tokens)
    shown_to = args.offset + len(kept)
    more = total > shown_to
    msg = f"{total} matching record(s); showing {len(kept)}"
    if more:
        msg += f" (next offset {shown_to})"
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="filter",
        model=model,
        total=total,
        rows=kept,
        truncated=cut or more,
        warnings=warnings,
        message=msg + ".",
    )


async def _sample(ctx: CallContext, repo: AnalysisRepository, pid: uuid.UUID, args: QueryIn, model: str) -> QueryOut:
    _check_mode_args(args, {"where", "stratify_by", "proximity"})
    w = parse_where(args.where)
    stratify = field_name(args.stratify_by, "stratify_by") if args.stratify_by else None
    prox: dict[str, Any] | None = None
    if args.proximity is not None:
        p = args.proximity
        prox = {
            "field": field_name(p.field, "proximity.field"),
            "origin": parse_date(p.origin, "proximity.origin"),
            "window": interval(p.window, "proximity.window"),
        }
        if p.bucket is not None:
            prox["bucket"] = bucket_interval(interval(p.bucket, "proximity.bucket"))
    candidates, strata, rows = await repo.sample(pid, args.analysis_id, model, w, args.sample_size, stratify, prox)
    named = {"stratify_by": (stratify, "any")} if stratify else {}
    if prox is not None:
        named["proximity.field"] = (prox["field"], "date")
    warnings = await where_warnings(repo, pid, args.analysis_id, model, w, named) if candidates == 0 or named else None
    kept, cut = bounded_rows(rows, settings(ctx).max_response_tokens)
    spread = f" across {strata} strata" if (stratify or (prox and prox.get("bucket"))) else ""
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="sample",
        model=model,
        total=candidates,
        rows=kept,
        truncated=cut,
        warnings=warnings,
        message=f"Sampled {len(kept)} of {candidates} candidate record(s){spread}.",
    )
