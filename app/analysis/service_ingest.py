"""analysis_ingest: copy upstream records into the session, page by page, with page summaries."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from app.analysis.config import get_analysis_settings
from app.analysis.registry import ChildCfg, ModelCfg, load_registry
from app.analysis.repository import FINDING_TARGET, AnalysisRepository
from app.analysis.schemas import IngestIn, IngestOut
from app.analysis.service import check_impersonation, project_for_write, with_tokens
from app.analysis.summaries import summarize
from app.analysis.upstream import (
    Shaper,
    UpstreamClient,
    UpstreamFailure,
    fetch_page,
    first_token,
    path_segment,
    stored_name,
    token_for_page,
)
from app.analysis.validation import field_name
from app.core.context import CallContext
from app.core.embeddings.calls import enqueue
from app.core.errors import NotFound, invalid_field

log = logging.getLogger("cairn.analysis.ingest")

MAX_INGEST_PAGES = 50
MAX_PARENTS = 25
NESTED_CONCURRENCY = 5
MAX_RENAMED = 20


def state_key(**parts: Any) -> str:
    """A stable key for 'the same ingest' (model, filters, page size…)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:40]


def upstream_params(cfg: ModelCfg, filters: dict[str, Any] | None) -> dict[str, Any]:
    """Caller filters mapped to the upstream's query parameters (unknown names refused)."""
    params: dict[str, Any] = {}
    for name, value in (filters or {}).items():
        if name not in cfg.filters:
            allowed = ", ".join(sorted(cfg.filters)) or "(none)"
            raise invalid_field(
                f"filters.{name}",
                f"Unknown filter '{name}' for this model",
                suggestions=[f"Filters of this model: {allowed}"],
            )
        if value is None:
            continue
        conv = (
            [str(v).lower() if isinstance(v, bool) else v for v in value]
            if isinstance(value, list)
            else (str(value).lower() if isinstance(value, bool) else value)
        )
        params[cfg.filters[name]] = conv
    return params


def project_fields(row: dict[str, Any], fields: list[str] | None, keep: set[str]) -> dict[str, Any]:
    """Keep the requested fields, the id and any `{assoc}_id` of a requested `{assoc}...` field."""
    if not fields:
        return row
    wanted = set(fields) | keep
    for f in fields:
        parts = f.split("_")
        for i in range(1, len(parts) + 1):
            candidate = "_".join(parts[:i]) + "_id"
            if candidate in row:
                wanted.add(candidate)
    return {k: v for k, v in row.items() if k in wanted}


def _record_id(row: dict[str, Any], id_field: str) -> str | None:
    value = row.get(id_field)
    return None if value is None or isinstance(value, dict | list) else str(value)


def _id_key(cfg: Any) -> str:
    """The stored name of a model's id field (its rename, else the naming rule)."""
    return str(cfg.rename.get(cfg.id_field) or stored_name(cfg.id_field))


def _missing_fields(fields: list[str] | None, seen: set[str], rows_seen: int) -> list[str]:
    """A warning for requested fields that no record of this call had."""
    missing = [f for f in fields or [] if f not in seen]
    if not missing or not rows_seen:
        return []
    known = ", ".join(sorted(seen)[:15]) + (" ..." if len(seen) > 15 else "")
    return [f"fields not found in any record: {', '.join(missing)} (fields seen: {known})"]


def _renamed(shaper: Shaper) -> dict[str, str] | None:
    return dict(list(shaper.names.items())[:MAX_RENAMED]) or None


async def ingest(ctx: CallContext, args: IngestIn) -> IngestOut:
    """Top-level or nested ingest (see IngestIn)."""
    check_impersonation(ctx, args.user_id)
    fields = [field_name(f, f"fields.{i}") for i, f in enumerate(args.fields or [])] or None
    registry = load_registry()
    repo = AnalysisRepository(ctx.session)
    pid = await project_for_write(ctx, repo, args.project)
    await repo.evict_expired()
    if args.model is not None:
        return with_tokens(await _top_level(ctx, repo, pid, args, fields, registry))
    return with_tokens(await _nested(ctx, repo, pid, args, fields, registry))


async def _store_summaries(
    ctx: CallContext,
    repo: AnalysisRepository,
    pid: uuid.UUID,
    aid: str,
    model: str,
    summaries: list[tuple[int, int, str]],
) -> None:
    if not summaries:
        return
    await repo.delete_page_summaries(pid, aid, model, [p for p, _, _ in summaries])
    items = [
        {
            "category": "page_summary",
            "finding": t,
            "source_model": model,
            "metadata": {"model": model, "page": p, "records": n},
        }
        for p, n, t in summaries
    ]
    ids, _ = await repo.insert_findings(pid, aid, items, False, get_analysis_settings().finding_ttl_seconds)
    await enqueue(ctx, FINDING_TARGET, ids)


async def _top_level(
    ctx: CallContext, repo: AnalysisRepository, pid: uuid.UUID, args: IngestIn, fields: list[str] | None, registry: Any
) -> IngestOut:
    settings = get_analysis_settings()
    retention = settings.records_retention_days * 86400
    assert args.model is not None
    rm = registry.model(args.model)
    cfg: ModelCfg = rm.cfg
    pag = cfg.pagination
    params = upstream_params(cfg, args.filters)
    per_page = min(args.per_page, pag.max_per_page)
    key = state_key(mode="top", model=args.model, filters=args.filters or {}, per_page=per_page)
    state = await repo.get_state(pid, args.analysis_id, key) if args.resume else None
    if state is not None and state["complete"]:
        held = await repo.count_records(pid, args.analysis_id, args.model)
        return IngestOut(
            analysis_id=args.analysis_id,
            model=args.model,
            mode="top_level",
            stored=0,
            pages=0,
            fields_per_record=0,
            session_records=held,
            total_available=state["total_available"],
            complete=True,
            page_summaries=0,
            message=f"Nothing to resume: this ingest already completed ({held} record(s) held).",
        )
    if state is not None:
        token, pages_done, total = state["next_token"], state["pages_done"], state["total_available"]
    elif args.ingest_all and args.page == 1:
        token, pages_done, total = first_token(pag), 0, None
    else:
        token, pages_done, total = token_for_page(pag, args.page, per_page), args.page - 1, None
    limit = MAX_INGEST_PAGES if args.ingest_all else 1
    stored = pages = width = 0
    complete, error = False, None
    summaries: list[tuple[int, int, str]] = []
    shaper, id_key = Shaper.of(cfg), _id_key(cfg)
    seen: set[str] = set()
    largest, capped_size = 0, False
    async with UpstreamClient(rm.upstream_name, rm.upstream, user_id=args.user_id) as client:
        while pages < limit:
            try:
                page = await fetch_page(client, cfg.list_path, pag, cfg.items_path, token, per_page, params)
            except UpstreamFailure as exc:
                if pages == 0:
                    raise UpstreamFailure(f"{exc.message}; nothing was stored by this call", exc.status_code) from None
                error = exc.message
                log.warning("ingest stopped early", extra={"model": args.model, "page": pages_done + 1})
                break
            rows = [shaper(r) for r in page.items]
            for r in rows:
                seen.update(r)
            keyed = [(_record_id(r, id_key), project_fields(r, fields, {id_key})) for r in rows]
            largest = max(largest, len(page.items))
            # A page shorter than asked for that is not the last: the upstream caps its page size.
            capped_size = capped_size or (0 < len(page.items) < per_page and page.next_token is not None)
            pages += 1
            pages_done += 1
            stored += await repo.upsert_records(pid, args.analysis_id, args.model, pages_done, keyed, retention)
            if keyed:
                width = max(width, max(len(d) for _, d in keyed))
                summaries.append(
                    (
                        pages_done,
                        len(keyed),
                        summarize(args.model, f"page {pages_done}", [d for _, d in keyed], id_key),
                    )
                )
            total = page.total if page.total is not None else total
            token = page.next_token
            expected = -(-total // per_page) if total else None
            await ctx.progress(
                pages, min(limit, expected) if expected else None, f"page {pages_done}: {len(keyed)} record(s)"
            )
            if token is None:
                complete = True
                break
    await repo.save_state(
        pid,
        args.analysis_id,
        key,
        args.model,
        {"filters": args.filters, "per_page": per_page},
        token,
        pages_done,
        complete,
        total,
        retention,
    )
    await _store_summaries(ctx, repo, pid, args.analysis_id, args.model, summaries)
    held = await repo.count_records(pid, args.analysis_id, args.model)
    capped = args.ingest_all and not complete and error is None
    warnings = _missing_fields(fields, seen, len(seen))
    msg = f"Stored {stored} record(s) ({width} fields per record) across {pages} page(s). Analysis: {args.analysis_id}"
    if capped_size:
        msg += f". The upstream sends at most {largest} records per page (asked for {per_page})"
    if capped:
        msg += f" (capped at {MAX_INGEST_PAGES} pages; call again with resume: true to continue)"
    elif error:
        msg += f". Stopped early: {error}. Stored pages are kept; retry with resume: true"
    elif not complete:
        msg += f". More pages remain (next page {pages_done + 1})"
    return IngestOut(
        analysis_id=args.analysis_id,
        model=args.model,
        mode="top_level",
        stored=stored,
        pages=pages,
        fields_per_record=width,
        session_records=held,
        total_available=total,
        complete=complete,
        capped=capped,
        next_page=None if complete else pages_done + 1,
        page_size=largest if capped_size else None,
        renamed=_renamed(shaper),
        warnings=warnings or None,
        page_summaries=len(summaries),
        error=error,
        message=msg,
    )


@dataclass
class _Children:
    """One parent's child items, and whether pages were left (max_pages_per_parent reached)."""

    rows: list[dict[str, Any]]
    truncated: bool


async def _fetch_children(
    client: UpstreamClient, child: ChildCfg, parent_id: str, per_page: int, params: dict[str, Any]
) -> _Children:
    segment = path_segment(parent_id)
    if segment is None:  # e.g. '..': the request would list another resource
        raise UpstreamFailure(f"Parent id {parent_id!r} cannot name a record in a URL path: skipped")
    path = child.path.replace("{parent_id}", segment)
    token = first_token(child.pagination)
    rows: list[dict[str, Any]] = []
    for _ in range(child.max_pages_per_parent):
        page = await fetch_page(client, path, child.pagination, child.items_path, token, per_page, params)
        rows.extend(page.items)
        if len(rows) > client.max_items:  # every parent's rows are held until the batch is stored
            raise UpstreamFailure(
                f"Upstream '{client.name}' listed more than {client.max_items} {child.model or 'child'} items for "
                f"one parent (CAIRN_ANALYSIS_MAX_PAGE_ITEMS): refused"
            )
        token = page.next_token
        if token is None:
            break
    return _Children(rows, token is not None)


async def _nested(
    ctx: CallContext, repo: AnalysisRepository, pid: uuid.UUID, args: IngestIn, fields: list[str] | None, registry: Any
) -> IngestOut:
    settings = get_analysis_settings()
    retention = settings.records_retention_days * 86400
    assert args.parent_model is not None and args.child_resource is not None
    parent = registry.model(args.parent_model)
    child = parent.cfg.children.get(args.child_resource)
    if child is None:
        known = ", ".join(sorted(parent.cfg.children)) or "(none)"
        raise NotFound(
            f"Model '{args.parent_model}' has no child resource '{args.child_resource}'",
            suggestions=[f"Child resources of {args.parent_model}: {known}"],
        )
    if args.filters:
        raise invalid_field("filters", "filters are not supported in nested mode")
    model = child.model or args.child_resource
    parent_key = child.parent_key or f"{args.parent_model}_id"
    per_page = min(args.per_page, child.pagination.max_per_page)
    key = state_key(mode="nested", parent=args.parent_model, child=args.child_resource)
    if args.parent_ids is not None:
        # The caller's parents: no session state is read or moved (resume walks the session's parents).
        parents: list[tuple[int, str]] = [(0, rid) for rid in dict.fromkeys(args.parent_ids)]
        after, following = 0, len(parents)
        batches_done = await repo.last_page(pid, args.analysis_id, model)
    else:
        if await repo.count_records(pid, args.analysis_id, args.parent_model) == 0:
            raise NotFound(
                f"No '{args.parent_model}' records in analysis '{args.analysis_id}'",
                suggestions=[
                    f"Ingest the parents first: analysis_ingest(model='{args.parent_model}'), or pass parent_ids"
                ],
            )
        state = await repo.get_state(pid, args.analysis_id, key) if args.resume else None
        after = int(state["next_token"] or 0) if state else 0
        batches_done = state["pages_done"] if state else 0
        parents, following = await repo.parents_after(pid, args.analysis_id, args.parent_model, after, MAX_PARENTS)
    sem = asyncio.Semaphore(NESTED_CONCURRENCY)
    done = 0

    async with UpstreamClient(parent.upstream_name, parent.upstream, user_id=args.user_id) as client:

        async def one(parent_id: str) -> _Children | UpstreamFailure:
            nonlocal done
            async with sem:
                try:
                    result: _Children | UpstreamFailure = await _fetch_children(client, child, parent_id, per_page, {})
                except UpstreamFailure as exc:
                    result = exc
            done += 1
            await ctx.progress(done, len(parents), f"{args.parent_model} {parent_id}")
            return result

        results = await asyncio.gather(*(one(rid) for _, rid in parents))
    keyed: list[tuple[str | None, dict[str, Any]]] = []
    cursor, error, processed = after, None, 0
    shaper, id_key = Shaper.of(child), _id_key(child)
    seen: set[str] = set()
    truncated: list[str] = []
    for (row_id, rid), result in zip(parents, results, strict=True):
        if isinstance(result, UpstreamFailure):
            error = error or f"{args.parent_model} {rid}: {result.message}"
            continue
        if result.truncated:
            truncated.append(rid)
        for item in result.rows:
            row = shaper(item)
            row.setdefault(parent_key, rid)
            seen.update(row)
            keyed.append((_record_id(row, id_key), project_fields(row, fields, {id_key, parent_key})))
        if error is None:
            cursor, processed = row_id, processed + 1
    warnings = _missing_fields(fields, seen, len(seen))
    if truncated:
        warnings.append(
            f"{len(truncated)} {args.parent_model} parent(s) have more than {child.max_pages_per_parent} pages of "
            f"{model} (e.g. {', '.join(truncated[:3])}): only those pages were stored; raise "
            "max_pages_per_parent in the registry"
        )
    stored = 0
    if keyed:
        stored = await repo.upsert_records(pid, args.analysis_id, model, batches_done + 1, keyed, retention)
    remaining = following - processed
    complete = remaining == 0 and error is None
    if processed or complete:
        batches_done += 1
    if args.parent_ids is None:
        await repo.save_state(
            pid,
            args.analysis_id,
            key,
            model,
            {"parent": args.parent_model},
            cursor,
            batches_done,
            complete,
            None,
            retention,
        )
    summaries = []
    if keyed:
        label = f"batch {batches_done} ({len(parents)} {args.parent_model} parents)"
        summaries.append((batches_done, len(keyed), summarize(model, label, [d for _, d in keyed], id_key)))
    await _store_summaries(ctx, repo, pid, args.analysis_id, model, summaries)
    held = await repo.count_records(pid, args.analysis_id, model)
    width = max((len(d) for _, d in keyed), default=0)
    msg = (
        f"Stored {stored} {model} record(s) ({width} fields per record) for {len(parents)} "
        f"{args.parent_model} parent(s). Analysis: {args.analysis_id}"
    )
    if error and args.parent_ids is not None:
        msg += f". Failed for some parents: {error}; call again with the parent_ids that failed"
    elif error:
        msg += f". Stopped at a failure: {error}; resume: true retries from there"
    elif remaining:
        msg += f". {remaining} parent(s) remain: call again with resume: true"
    return IngestOut(
        analysis_id=args.analysis_id,
        model=model,
        mode="nested",
        stored=stored,
        pages=len(parents),
        fields_per_record=width,
        session_records=held,
        complete=complete,
        capped=remaining > 0 and error is None,
        parents_processed=processed,
        parents_remaining=remaining,
        renamed=_renamed(shaper),
        warnings=warnings or None,
        page_summaries=len(summaries),
        error=error,
        message=msg,
    )
