"""analysis_query: describe, semantic, aggregate, filter and sample over one session."""

from __future__ import annotations

import json
import logging
import math
import uuid
from dataclasses import dataclass
from dataclasses import field as dc_field
from decimal import Decimal
from typing import Any

from app.analysis.catalog import AttributeCfg
from app.analysis.cuts import Part, bounded_rows, budget_why, call, fitting, joined, shortened_part
from app.analysis.repository import AnalysisRepository
from app.analysis.schemas import GroupOut, QueryIn, QueryOut
from app.analysis.service import catalog, project_for_read, settings, where_warnings, with_tokens
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
DESCRIBE_VALUE_CHARS = 40  # of a value shown inline in describe's table


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
            out = await _aggregate(ctx, repo, pid, args, model)
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


@dataclass
class _Examples:
    """The fields describe's examples are built on (the first of each kind) and values from the data."""

    low_card: str | None = None
    top_value: str | None = None
    numeric: str | None = None
    dates: str | None = None
    long_values: list[str] = dc_field(default_factory=list)  # fields whose values were shortened
    texts: list[str] = dc_field(default_factory=list)  # text fields that may hold ISO dates


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
    ex = _Examples()
    for name, (jtype, present) in fields.items():
        attr = attrs.get(name)
        ftype = attr.type if attr else _TYPE_NAMES.get(jtype, jtype)
        notes = await _field_notes(repo, pid, aid, model, name, jtype, ftype, attr, sampled, ex)
        if ftype in ("date", "datetime"):
            ex.dates = ex.dates or name
        elif jtype == "string" and _plain(name) and ftype == "string":
            ex.texts.append(name)
        elif ftype in ("integer", "number") and not name.endswith("_id") and name != "id":
            ex.numeric = ex.numeric or name
        if present < sampled:
            notes.append(f"in {round(100 * present / max(sampled, 1))}% of rows")
        lines.append(f"| {name} | {ftype} | {'; '.join(notes)} |")
    lines.append("Examples: " + " | ".join(await _examples(repo, pid, aid, model, sampled, ex)))
    if ex.long_values:
        lines.append(
            f"Values longer than {DESCRIBE_VALUE_CHARS} characters are shortened (…) above, of "
            f"{', '.join(ex.long_values)}: aggregate with group_by on the field shows them whole."
        )
    lines.append('where: exact values match; {"$gt"|"$gte"|"$lt"|"$lte": number or ISO date} compare.')
    return "\n".join(lines)


async def _field_notes(
    repo: AnalysisRepository,
    pid: uuid.UUID,
    aid: str,
    model: str,
    name: str,
    jtype: str,
    ftype: str,
    attr: AttributeCfg | None,
    sampled: int,
    ex: _Examples,
) -> list[str]:
    """The notes of one field: its description, its values (few) or how many distinct ones it has."""
    notes: list[str] = []
    if attr and attr.description:
        notes.append(attr.description)
    if attr and attr.enum:
        notes.append("values: " + ", ".join(str(v) for v in attr.enum))
        if not ex.low_card:
            ex.low_card, ex.top_value = name, str(attr.enum[0])
    elif jtype == "string" and ftype not in ("date", "datetime") and _plain(name):
        distinct, top = await repo.top_values(pid, aid, model, name, 6, sampled)
        if 0 < distinct <= 6:
            shown = [_short_value(v) for v in top]
            if shown != top:
                ex.long_values.append(name)
            notes.append("values: " + ", ".join(shown))
            if not ex.low_card:
                ex.low_card, ex.top_value = name, top[0]
        elif distinct:
            notes.append(f"{distinct} distinct")
    return notes


def _short_value(value: str) -> str:
    """A value as describe shows it: at most DESCRIBE_VALUE_CHARS characters, on one line."""
    flat = " ".join(value.split())
    return flat if len(flat) <= DESCRIBE_VALUE_CHARS else flat[: DESCRIBE_VALUE_CHARS - 1] + "…"


async def _examples(
    repo: AnalysisRepository, pid: uuid.UUID, aid: str, model: str, sampled: int, ex: _Examples
) -> list[str]:
    """Query examples built from the data: a value it holds, a number within its range, a date in it."""
    examples = []
    if ex.low_card:
        examples.append(f'aggregate: {{"group_by": "{ex.low_card}"}}')
    cond: dict[str, Any] = {}
    if ex.low_card and ex.top_value is not None and len(ex.top_value) <= DESCRIBE_VALUE_CHARS:
        cond[ex.low_card] = ex.top_value
    if ex.numeric:
        found = await repo.value_range(pid, aid, model, ex.numeric, "numeric", sampled)
        if found is not None:
            middle = (Decimal(found[0]) + Decimal(found[1])) / 2
            cond[ex.numeric] = {"$gte": int(middle) if middle == middle.to_integral_value() else float(middle)}
    if cond:
        examples.append(f'filter: {{"where": {json.dumps(cond, ensure_ascii=False)}}}')
    strat = {"stratify_by": ex.low_card} if ex.low_card else {}
    examples.append("sample: " + json.dumps({"sample_size": 9, **strat}))
    span = await repo.value_range(pid, aid, model, ex.dates, "date", sampled) if ex.dates else None
    for name in ex.texts[:5] if span is None else []:  # ISO dates stored as text, no attribute declared
        span = await repo.value_range(pid, aid, model, name, "date", sampled)
        if span is not None:
            ex.dates = name
            break
    if span is not None:
        lo, hi = span
        origin = (lo + (hi - lo) / 2).date().isoformat()
        days = max(1, min(30, math.ceil((hi - lo).total_seconds() / 86400 / 2)))
        bucket = "1 week" if days >= 14 else "1 day"
        examples.append(
            f'sample: {{"proximity": {{"field": "{ex.dates}", "origin": "{origin}", '
            f'"window": "{days} days", "bucket": "{bucket}"}}}}'
        )
    return examples


def _plain(name: str) -> bool:
    """Observed keys come from upstream data: only plain names are queried further."""
    return bool(FIELD.fullmatch(name)) and len(name) <= 64


async def _aggregate(ctx: CallContext, repo: AnalysisRepository, pid: uuid.UUID, args: QueryIn, model: str) -> QueryOut:
    _check_mode_args(args, {"group_by", "where"})
    if not args.group_by:
        raise invalid_field("group_by", "aggregate mode needs group_by")
    field = field_name(args.group_by, "group_by")
    w = parse_where(args.where)
    limit = args.limit or GROUPS_DEFAULT
    total, distinct, groups = await repo.aggregate(pid, args.analysis_id, model, field, w, limit, args.offset)
    warnings = await where_warnings(repo, pid, args.analysis_id, model, w, {"group_by": (field, "any")}, total == 0)
    out = [GroupOut(value=v, count=c, percent=round(100.0 * c / total, 1) if total else 0.0) for v, c in groups]
    max_tokens = settings(ctx).max_response_tokens
    fit = fitting([g.model_dump(mode="json") for g in out], max_tokens)
    shown_to = args.offset + fit
    cut = None
    if distinct > shown_to:
        why = budget_why(max_tokens) if fit < len(out) else f"limit {limit} (default {GROUPS_DEFAULT}, cap 200)"
        cut = joined(
            [
                Part(
                    f"{distinct - shown_to} smaller group(s) after these {fit}",
                    why,
                    call("analysis_query", offset=shown_to),
                )
            ]
        )
    span = f"groups {args.offset + 1}-{shown_to}" if args.offset else f"top {fit}"
    more = f", {span} of {distinct} shown" if cut or args.offset else ""
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="aggregate",
        model=model,
        total=total,
        groups=out[:fit],
        truncated=cut is not None,
        cut=cut,
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
    max_tokens = settings(ctx).max_response_tokens
    fit = bounded_rows(rows, max_tokens)
    shown_to = args.offset + len(fit.rows)
    parts = []
    if total > shown_to:
        why = budget_why(max_tokens) if fit.dropped else f"limit {limit} (default {FILTER_DEFAULT}, cap {FILTER_CAP})"
        more = f"{total - shown_to} more matching record(s) after these {len(fit.rows)}"
        parts.append(Part(more, why, call("analysis_query", offset=shown_to)))
    if fit.shortened:
        parts.append(shortened_part(fit.shortened))
    cut = joined(parts)
    msg = f"{total} matching record(s); showing {len(fit.rows)}"
    if total > shown_to:
        msg += f" (next offset {shown_to})"
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="filter",
        model=model,
        total=total,
        rows=fit.rows,
        truncated=cut is not None,
        cut=cut,
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
    warnings = (
        await where_warnings(repo, pid, args.analysis_id, model, w, named, candidates == 0)
        if candidates == 0 or named
        else None
    )
    max_tokens = settings(ctx).max_response_tokens
    fit = bounded_rows(rows, max_tokens)
    spread = ""
    if stratify and not (prox and prox.get("bucket")):
        shown = len({json.dumps(r.get(stratify), default=str) for r in fit.rows})
        spread = f" across {shown} of {strata} strata" if shown < strata else f" across {strata} strata"
    elif stratify or (prox and prox.get("bucket")):
        spread = f" across {strata} strata"
    parts = []
    if fit.dropped:
        parts.append(
            Part(
                f"{fit.dropped} of the {len(rows)} sampled record(s) (one per stratum is kept first)",
                budget_why(max_tokens),
                how=f"a sample is drawn anew: sample again with sample_size {len(fit.rows)} and a where or "
                "stratify_by that narrows it, or page through every candidate with mode filter and offset",
            )
        )
    if fit.shortened:
        parts.append(shortened_part(fit.shortened))
    cut = joined(parts)
    return QueryOut(
        analysis_id=args.analysis_id,
        mode="sample",
        model=model,
        total=candidates,
        rows=fit.rows,
        truncated=cut is not None,
        cut=cut,
        warnings=warnings,
        message=f"Sampled {len(fit.rows)} of {candidates} candidate record(s){spread}.",
    )
