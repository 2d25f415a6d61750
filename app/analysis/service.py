"""Shared helpers of the analysis use cases, plus store and clear."""

from __future__ import annotations

import json
import uuid
from typing import Any, TypeVar

from pydantic import BaseModel

from app.analysis.catalog import UpstreamCatalog, UpstreamCfg, load_catalog
from app.analysis.config import AnalysisSettings
from app.analysis.repository import FINDING_TARGET, FINDING_VECTORS, AnalysisRepository
from app.analysis.schemas import ClearIn, ClearOut, StoreIn, StoreOut
from app.analysis.upstream import UpstreamClient
from app.analysis.validation import Where
from app.core import budget
from app.core.context import CallContext
from app.core.embeddings.calls import enqueue
from app.core.embeddings.targets import embedding_target
from app.core.errors import Forbidden, NotFound, invalid_field

M = TypeVar("M", bound=BaseModel)
MAX_METADATA_CHARS = 4000


def settings(ctx: CallContext) -> AnalysisSettings:
    """The analysis settings."""
    return ctx.feature_settings(AnalysisSettings)


def catalog(ctx: CallContext) -> UpstreamCatalog:
    """The upstream catalog of the configured registry file (read at each call: edits apply at once)."""
    return load_catalog(settings(ctx).upstreams)


def upstream_client(ctx: CallContext, name: str, cfg: UpstreamCfg, user_id: str | None) -> UpstreamClient:
    """A client for the upstream `name`, its responses capped by the settings."""
    s = settings(ctx)
    return UpstreamClient(name, cfg, user_id=user_id, max_bytes=s.max_upstream_bytes, max_items=s.max_page_items)


def with_tokens(out: M) -> M:
    """Fill `tokens`: what the response costs the agent (app.core.budget, the field included)."""
    return budget.measured(out, "tokens")


def check_impersonation(ctx: CallContext, user_id: str | None) -> None:
    """Impersonating an upstream user is an administrator's act."""
    if user_id is not None and not ctx.principal.has_scope("admin"):
        raise Forbidden(
            "user_id impersonation needs the 'admin' scope", suggestions=["Omit user_id, or use an admin key"]
        )


async def project_for_write(ctx: CallContext, repo: AnalysisRepository, requested: str | None) -> uuid.UUID:
    """The effective project's id (created if missing)."""
    return await repo.ensure_project(ctx.project(requested))


async def project_for_read(
    ctx: CallContext, repo: AnalysisRepository, requested: str | None, analysis_id: str
) -> uuid.UUID:
    """The effective project's id; a missing project means the session does not exist."""
    pid = await repo.project_id(ctx.project(requested))
    if pid is None:
        raise NotFound(f"No analysis session '{analysis_id}'", suggestions=["Run analysis_ingest first"])
    return pid


async def store(ctx: CallContext, args: StoreIn) -> StoreOut:
    """Store findings (ephemeral for the configured TTL unless persistent) and queue their vectors."""
    ttl = settings(ctx).finding_ttl_seconds
    for i, item in enumerate(args.findings):
        if item.metadata is not None and len(budget.dumps(item.metadata)) > MAX_METADATA_CHARS:
            raise invalid_field(
                f"findings.{i}.metadata", f"findings.{i}.metadata: larger than {MAX_METADATA_CHARS} characters as JSON"
            )
    repo = AnalysisRepository(ctx.session)
    pid = await project_for_write(ctx, repo, args.project)
    await repo.evict_expired()
    items = [{"category": f.category, "finding": f.finding, "metadata": f.metadata} for f in args.findings]
    ids, expires = await repo.insert_findings(pid, args.analysis_id, items, args.persistent, ttl)
    await enqueue(ctx, FINDING_TARGET, ids)
    life = "kept until analysis_clear" if args.persistent else f"expire at {expires:%Y-%m-%dT%H:%M:%SZ}"
    return with_tokens(
        StoreOut(
            analysis_id=args.analysis_id,
            stored=len(ids),
            ids=ids,
            persistent=args.persistent,
            expires_at=None if expires is None else expires.isoformat(),
            message=f"Stored {len(ids)} finding(s) for analysis '{args.analysis_id}' ({life}).",
        )
    )


async def clear(ctx: CallContext, args: ClearIn) -> ClearOut:
    """Delete both layers (records and findings) of one session."""
    repo = AnalysisRepository(ctx.session)
    pid = await repo.project_id(ctx.project(args.project))
    records = findings = 0
    if pid is not None:
        records, findings = await repo.clear(pid, args.analysis_id)
    return with_tokens(
        ClearOut(
            analysis_id=args.analysis_id,
            records_deleted=records,
            findings_deleted=findings,
            message=f"Cleared {records} ingested record(s) and {findings} finding(s) for analysis "
            f"'{args.analysis_id}'.",
        )
    )


EMBEDDING_TARGET = embedding_target(FINDING_VECTORS)


_RANGE_KINDS = {"numeric": "numeric", "timestamptz": "date"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else "any"


async def where_warnings(
    repo: AnalysisRepository,
    pid: uuid.UUID,
    aid: str,
    model: str,
    w: Where,
    named: dict[str, tuple[str, str]],
    nothing_matched: bool = True,
) -> list[str] | None:
    """Conditions that cannot match as written: a field no record has, or a comparison with values of
    another type (a date range on epoch numbers, "5" against the number 5), and, when the call matched
    nothing, an exact text value stored in another case ("Lost" where the data says "lost"). `named`:
    other arguments that name a field, {argument: (field, kind)}."""
    hints = await _case_hints(repo, pid, aid, model, w) if nothing_matched else []
    found = await _type_warnings(repo, pid, aid, model, w, named)
    return list(dict.fromkeys([*hints, *(found or [])])) or None


async def _case_hints(repo: AnalysisRepository, pid: uuid.UUID, aid: str, model: str, w: Where) -> list[str]:
    """For each exact text condition, the spellings the data holds in another case."""
    out: list[str] = []
    for name, value in w.exact.items():
        if not isinstance(value, str):
            continue
        variants = await repo.case_variants(pid, aid, model, name, value)
        if variants:
            held = ", ".join(f"{json.dumps(v, ensure_ascii=False)} ({n} record(s))" for v, n in variants)
            out.append(
                f"where.{name}: no {model} record has {json.dumps(value, ensure_ascii=False)} exactly, but "
                f"{held} differ only in case (exact values match case-sensitively): use the stored spelling"
            )
    return out


async def _type_warnings(
    repo: AnalysisRepository, pid: uuid.UUID, aid: str, model: str, w: Where, named: dict[str, tuple[str, str]]
) -> list[str] | None:
    """Conditions on a field no record has, or on values of another type."""
    checks: list[tuple[str, str, str]] = [(f"where.{k}", k, _json_type(v)) for k, v in w.exact.items()]
    checks += [(f"where.{c.field}.{c.op}", c.field, _RANGE_KINDS[c.kind]) for c in w.ranges]
    checks += [(arg, f, kind) for arg, (f, kind) in named.items()]
    if not checks:
        return None
    found = await repo.field_checks(pid, aid, model, [(f, kind) for _, f, kind in checks])
    out: list[str] = []
    for (arg, f, kind), (present, compatible) in zip(checks, found, strict=True):
        if not present:
            out.append(f"{arg}: no {model} record has a field '{f}' (mode describe lists the fields)")
        elif not compatible and kind == "date":
            out.append(
                f"{arg}: '{f}' holds no ISO dates, so a date comparison matches nothing (epoch numbers: declare "
                "the attribute with format epoch_seconds or epoch_millis in the registry and ingest again)"
            )
        elif not compatible and kind == "numeric":
            out.append(f"{arg}: '{f}' holds no numbers, so a numeric comparison matches nothing")
        elif not compatible and kind != "any":
            out.append(f"{arg}: '{f}' holds no {kind} values, so this exact match finds nothing")
    return list(dict.fromkeys(out)) or None
