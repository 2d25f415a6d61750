"""Shared helpers of the analysis use cases, plus store and clear."""

from __future__ import annotations

import json
import uuid
from typing import Any, TypeVar

from pydantic import BaseModel

from app.analysis.config import get_analysis_settings
from app.analysis.repository import AnalysisRepository
from app.analysis.schemas import ClearIn, ClearOut, StoreIn, StoreOut
from app.core.context import CallContext
from app.core.errors import Forbidden, InvalidInput, NotFound
from app.core.tokens import count_tokens

M = TypeVar("M", bound=BaseModel)
MAX_METADATA_CHARS = 4000
MAX_VALUE_CHARS = 300


def compact_json(data: Any) -> str:
    """The JSON text the MCP transport sends (compact separators)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def with_tokens(out: M) -> M:
    """Fill `tokens`: the response's size in embedding-tokenizer tokens (its compact JSON)."""
    data = out.model_dump(mode="json", by_alias=True)
    data.pop("tokens", None)
    out.tokens = count_tokens(compact_json(data))  # type: ignore[attr-defined]
    return out


def trim_row(row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A row with long strings cut to MAX_VALUE_CHARS (and whether anything was cut)."""
    cut = False
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            out[key] = value[:MAX_VALUE_CHARS] + "…"
            cut = True
        elif isinstance(value, list | dict) and len(compact_json(value)) > MAX_VALUE_CHARS:
            out[key] = compact_json(value)[:MAX_VALUE_CHARS] + "…"
            cut = True
        else:
            out[key] = value
    return out, cut


def bounded_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Rows trimmed and cut off once the response would pass the configured character budget."""
    budget = get_analysis_settings().max_response_chars
    kept: list[dict[str, Any]] = []
    truncated = False
    used = 0
    for row in rows:
        trimmed, cut = trim_row(row)
        size = len(compact_json(trimmed))
        if kept and used + size > budget:
            return kept, True
        kept.append(trimmed)
        used += size
        truncated = truncated or cut
    return kept, truncated


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
    """Embed and store findings (ephemeral for the configured TTL unless persistent)."""
    settings = get_analysis_settings()
    for i, item in enumerate(args.findings):
        if item.metadata is not None and len(compact_json(item.metadata)) > MAX_METADATA_CHARS:
            raise InvalidInput(
                f"findings.{i}.metadata: larger than {MAX_METADATA_CHARS} characters as JSON",
                details={"field": f"findings.{i}.metadata"},
            )
    repo = AnalysisRepository(ctx.session)
    pid = await project_for_write(ctx, repo, args.project)
    await repo.evict_expired()
    vectors = await ctx.embedder.embed([f.finding for f in args.findings])
    items = [{"category": f.category, "finding": f.finding, "metadata": f.metadata} for f in args.findings]
    ids, expires = await repo.insert_findings(
        pid, args.analysis_id, items, args.persistent, settings.finding_ttl_seconds, ctx.embedder.model, vectors
    )
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
