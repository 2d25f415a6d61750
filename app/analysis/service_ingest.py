"""analysis_ingest: copy upstream records into the session, page by page, with page summaries."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.analysis.catalog import ChildCfg, ModelCfg, PaginationCfg, UpstreamCatalog
from app.analysis.repository import FINDING_TARGET, AnalysisRepository
from app.analysis.schemas import IngestIn, IngestOut
from app.analysis.service import catalog, check_impersonation, project_for_write, settings, upstream_client, with_tokens
from app.analysis.summaries import summarize
from app.analysis.upstream import (
    Page,
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
from app.core.cuts import Cut, NextCall
from app.core.embeddings.calls import enqueue
from app.core.errors import NotFound, invalid_field

log = logging.getLogger("cairn.analysis.ingest")

MAX_INGEST_PAGES = 50
MAX_PARENTS = 25
NESTED_CONCURRENCY = 5
MAX_RENAMED = 20
NO_PROJECT = uuid.UUID(int=0)


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


@dataclass
class _Records:
    """Turns upstream items into stored records: shaped (flattened, renamed), keyed by id and cut to
    the requested fields; remembers every field seen."""

    shaper: Shaper
    id_key: str
    fields: list[str] | None
    keep: set[str]  # kept whatever the requested fields (the id, the parent key)
    seen: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, cfg: ModelCfg | ChildCfg, fields: list[str] | None, *keep: str) -> _Records:
        """The records of a model or child resource."""
        id_key = _id_key(cfg)
        return cls(Shaper.of(cfg), id_key, fields, {id_key, *keep})

    def record(self, item: dict[str, Any], defaults: dict[str, Any] | None = None) -> tuple[str | None, dict[str, Any]]:
        """One item as (record id, stored data); `defaults` fills fields the item lacks."""
        row = self.shaper(item)
        for name, value in (defaults or {}).items():
            row.setdefault(name, value)
        self.seen.update(row)
        return _record_id(row, self.id_key), project_fields(row, self.fields, self.keep)

    def summary(self, model: str, label: str, keyed: list[tuple[str | None, dict[str, Any]]]) -> str:
        """The page summary of stored records."""
        return summarize(model, label, [d for _, d in keyed], self.id_key)

    def warnings(self) -> list[str]:
        """A warning for requested fields that no record of this call had."""
        return _missing_fields(self.fields, self.seen, len(self.seen))

    def renamed(self) -> dict[str, str] | None:
        """The first keys renamed to stored names (the reply shows them)."""
        return dict(list(self.shaper.names.items())[:MAX_RENAMED]) or None

    def cut(self, analysis_id: str, project: str | None, model: str | None) -> Cut | None:
        """What the reply's `renamed` left out, when more keys were renamed than it lists, and the describe
        call (of the session's `model`) that lists every stored field name."""
        left = len(self.shaper.names) - MAX_RENAMED
        if left <= 0:
            return None
        scope = {"project": project} if project else {}
        return Cut(
            reason=f"a reply lists {MAX_RENAMED} renamed keys",
            left_out=f"{left} more renamed key(s) after the first {MAX_RENAMED} in renamed",
            next_call=NextCall(
                tool="analysis_query",
                args={"analysis_id": analysis_id, **scope, "mode": "describe", "model": model},
            ),
        )


@dataclass(frozen=True)
class _Store:
    """Where one ingest stores: one model of a session, its records kept for `retention` seconds."""

    repo: AnalysisRepository
    pid: uuid.UUID
    analysis_id: str
    model: str
    retention: float

    async def records(self, page: int, keyed: list[tuple[str | None, dict[str, Any]]]) -> int:
        """Upsert one page (or batch) of records; returns how many were stored."""
        return await self.repo.upsert_records(self.pid, self.analysis_id, self.model, page, keyed, self.retention)

    async def held(self) -> int:
        """The records of the model the session holds."""
        return await self.repo.count_records(self.pid, self.analysis_id, self.model)

    async def save_state(
        self, key: str, params: dict[str, Any], token: Any, done: int, complete: bool, total: int | None
    ) -> None:
        """Where the ingest `key` stands, for `resume`."""
        await self.repo.save_state(
            self.pid, self.analysis_id, key, self.model, params, token, done, complete, total, self.retention
        )

    async def summaries(self, ctx: CallContext, summaries: list[tuple[int, int, str]]) -> None:
        """Replace the page summaries of these pages (page, records, text) and queue their vectors."""
        if not summaries:
            return
        await self.repo.delete_page_summaries(self.pid, self.analysis_id, self.model, [p for p, _, _ in summaries])
        items = [
            {
                "category": "page_summary",
                "finding": t,
                "source_model": self.model,
                "metadata": {"model": self.model, "page": p, "records": n},
            }
            for p, n, t in summaries
        ]
        ttl = settings(ctx).finding_ttl_seconds
        ids, _ = await self.repo.insert_findings(self.pid, self.analysis_id, items, False, ttl)
        await enqueue(ctx, FINDING_TARGET, ids)


async def ingest(ctx: CallContext, args: IngestIn) -> IngestOut:
    """Top-level or nested ingest (see IngestIn).

    The call reads what it needs (saved state, parents), then waits on the upstream with no
    transaction open and no pooled connection held (`ctx.without_transaction`), and writes
    everything it fetched afterwards: a slow upstream never holds a database connection."""
    check_impersonation(ctx, args.user_id)
    fields = [field_name(f, f"fields.{i}") for i, f in enumerate(args.fields or [])] or None
    upstreams = catalog(ctx)
    repo = AnalysisRepository(ctx.session)
    # A project not created yet holds nothing: its reads find nothing under the nil id.
    pid = await repo.project_id(ctx.project(args.project)) or NO_PROJECT
    if args.model is not None:
        return with_tokens(await _top_level(ctx, repo, pid, args, fields, upstreams))
    return with_tokens(await _nested(ctx, repo, pid, args, fields, upstreams))


async def _store_for(ctx: CallContext, repo: AnalysisRepository, args: IngestIn, model: str) -> _Store:
    """Where the fetched records go: the project (created if missing), once expired rows are evicted."""
    pid = await project_for_write(ctx, repo, args.project)
    await repo.evict_expired()
    return _Store(repo, pid, args.analysis_id, model, settings(ctx).records_retention_days * 86400)


def _deadline(ctx: CallContext) -> float:
    """When this call's fetching must end (loop time): CAIRN_ANALYSIS_INGEST_DEADLINE_SECONDS from now."""
    return asyncio.get_running_loop().time() + settings(ctx).ingest_deadline_seconds


def _past_deadline(ctx: CallContext) -> UpstreamFailure:
    return UpstreamFailure(
        f"the call's deadline of {settings(ctx).ingest_deadline_seconds:g}s "
        "(CAIRN_ANALYSIS_INGEST_DEADLINE_SECONDS) passed before the upstream answered"
    )


# Top-level ingest --------------------------------------------------------------------------------


@dataclass
class _Walk:
    """Where a top-level ingest stands as it walks the upstream's pages, and what this call stored."""

    token: Any  # of the next page to fetch
    pages_done: int  # pages of this ingest stored, by this call and the earlier ones it resumes
    total: int | None  # records the upstream says it holds
    pages: int = 0  # fetched by this call
    stored: int = 0
    width: int = 0  # the most fields one record has
    largest: int = 0  # the most items one page held
    items: int = 0  # items fetched by this call
    capped_size: bool = False  # the upstream sends fewer items per page than asked for
    complete: bool = False
    error: str | None = None  # why the walk stopped early
    summaries: list[tuple[int, int, str]] = field(default_factory=list)

    @classmethod
    def start(cls, state: dict[str, Any] | None, args: IngestIn, per_page: int, pagination: PaginationCfg) -> _Walk:
        """Where the saved state left off, else at the requested page."""
        if state is not None:
            return cls(state["next_token"], state["pages_done"], state["total_available"])
        if args.ingest_all and args.page == 1:
            return cls(first_token(pagination), 0, None)
        return cls(token_for_page(pagination, args.page, per_page), args.page - 1, None)

    def took(self, page: Page, keyed: list[tuple[str | None, dict[str, Any]]], per_page: int) -> None:
        """Count a fetched page and move to the next one."""
        self.pages += 1
        self.pages_done += 1
        self.largest = max(self.largest, len(page.items))
        # A page shorter than asked for that is not the last: the upstream caps its page size.
        self.capped_size = self.capped_size or (0 < len(page.items) < per_page and page.next_token is not None)
        self.width = max(self.width, *(len(d) for _, d in keyed), 0)
        self.total = page.total if page.total is not None else self.total
        self.token = page.next_token
        self.items += len(page.items)

    def pages_left(self, per_page: int, pagination: PaginationCfg) -> int | None:
        """Pages still to fetch after this one, reckoned from the upstream's total at the page size it
        actually sends (an upstream may cap it below `per_page` without saying so); None without a total."""
        if self.token is None:
            return 0
        if self.total is None:
            return None
        size = self.largest if self.capped_size else per_page
        # Offset paging names the records already passed; otherwise count the pages done at that size.
        passed = self.token if pagination.style == "offset" and isinstance(self.token, int) else None
        if passed is None:
            passed = self.items if self.pages == self.pages_done else self.pages_done * size
        return max(1, -(-(self.total - passed) // max(size, 1)))


async def _top_level(
    ctx: CallContext,
    repo: AnalysisRepository,
    pid: uuid.UUID,
    args: IngestIn,
    fields: list[str] | None,
    upstreams: UpstreamCatalog,
) -> IngestOut:
    assert args.model is not None
    rm = upstreams.model(args.model)
    cfg: ModelCfg = rm.cfg
    params = upstream_params(cfg, args.filters)
    per_page = min(args.per_page, cfg.pagination.max_per_page)
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
    walk = _Walk.start(state, args, per_page, cfg.pagination)
    records = _Records.of(cfg, fields)

    async def fetch() -> list[tuple[int, list[tuple[str | None, dict[str, Any]]]]]:
        async with upstream_client(ctx, rm.upstream_name, rm.upstream, args.user_id) as client:
            return await _walk_pages(ctx, client, cfg, records, walk, params, per_page, args.ingest_all)

    fetched = await ctx.without_transaction(fetch)
    store = await _store_for(ctx, repo, args, args.model)
    for page_no, keyed in fetched:
        walk.stored += await store.records(page_no, keyed)
        if keyed:
            walk.summaries.append((page_no, len(keyed), records.summary(store.model, f"page {page_no}", keyed)))
    asked = {"filters": args.filters, "per_page": per_page}
    await store.save_state(key, asked, walk.token, walk.pages_done, walk.complete, walk.total)
    await store.summaries(ctx, walk.summaries)
    left = walk.pages_left(per_page, cfg.pagination)
    return _top_level_out(args, walk, records, per_page, await store.held(), left)


async def _walk_pages(
    ctx: CallContext,
    client: UpstreamClient,
    cfg: ModelCfg,
    records: _Records,
    walk: _Walk,
    params: dict[str, Any],
    per_page: int,
    ingest_all: bool,
) -> list[tuple[int, list[tuple[str | None, dict[str, Any]]]]]:
    """Fetch pages from `walk.token` on: one page, or with `ingest_all` up to MAX_INGEST_PAGES until
    the last, as (page number, records). The pages are held until the call stores them, so fetching
    also stops once they hold CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES (the call is then capped: resume
    continues), or when the call's deadline passes. A failure stops the walk (`walk.error`), and is
    raised when it hits the first page."""
    limit = MAX_INGEST_PAGES if ingest_all else 1
    deadline, held = _deadline(ctx), 0
    fetched: list[tuple[int, list[tuple[str | None, dict[str, Any]]]]] = []
    while walk.pages < limit and held < client.max_bytes:
        try:
            async with asyncio.timeout_at(deadline):
                page = await fetch_page(
                    client, cfg.list_path, cfg.pagination, cfg.items_path, walk.token, per_page, params
                )
        except (UpstreamFailure, TimeoutError) as exc:
            message = exc.message if isinstance(exc, UpstreamFailure) else _past_deadline(ctx).message
            if walk.pages == 0:
                raise UpstreamFailure(
                    f"{message}; nothing was stored by this call", getattr(exc, "status_code", None)
                ) from None
            walk.error = message
            log.warning("ingest stopped early", extra={"path": cfg.list_path, "page": walk.pages_done + 1})
            break
        keyed = [records.record(item) for item in page.items]
        walk.took(page, keyed, per_page)
        held += page.size
        fetched.append((walk.pages_done, keyed))
        if walk.token is None:
            walk.complete = True
        left = walk.pages_left(per_page, cfg.pagination)
        expected = None if left is None else min(limit, walk.pages + left)
        await ctx.progress(walk.pages, expected, f"page {walk.pages_done}: {len(keyed)} record(s)")
        if walk.complete:
            break
    return fetched


def _top_level_out(
    args: IngestIn, walk: _Walk, records: _Records, per_page: int, held: int, left: int | None
) -> IngestOut:
    """The reply of a top-level ingest (`left`: the pages still to fetch, when the upstream's total tells)."""
    assert args.model is not None
    capped = args.ingest_all and not walk.complete and walk.error is None
    msg = (
        f"Stored {walk.stored} record(s) ({walk.width} fields per record) across {walk.pages} page(s). "
        f"Analysis: {args.analysis_id}"
    )
    if walk.capped_size:
        msg += f". The upstream sends at most {walk.largest} records per page (asked for {per_page})"
    if capped and walk.pages < MAX_INGEST_PAGES:
        msg += " (capped: one call holds CAIRN_ANALYSIS_MAX_UPSTREAM_BYTES of pages; call again with resume: true)"
    elif capped:
        msg += f" (capped at {MAX_INGEST_PAGES} pages; call again with resume: true to continue)"
    elif walk.error:
        msg += f". Stopped early: {walk.error}. Stored pages are kept; retry with resume: true"
    elif not walk.complete:
        msg += f". More pages remain (next page {walk.pages_done + 1})"
    if left:
        msg += f"; {left} page(s) left at {walk.largest if walk.capped_size else per_page} records per page"
    return IngestOut(
        analysis_id=args.analysis_id,
        model=args.model,
        mode="top_level",
        stored=walk.stored,
        pages=walk.pages,
        fields_per_record=walk.width,
        session_records=held,
        total_available=walk.total,
        complete=walk.complete,
        capped=capped,
        next_page=None if walk.complete else walk.pages_done + 1,
        pages_remaining=left,
        page_size=walk.largest if walk.capped_size else None,
        renamed=records.renamed(),
        cut=records.cut(args.analysis_id, args.project, args.model),
        warnings=records.warnings() or None,
        page_summaries=len(walk.summaries),
        error=walk.error,
        message=msg,
    )


# Nested ingest -----------------------------------------------------------------------------------


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


@dataclass
class _Batch:
    """The parents one nested ingest call walks, and what their children gave."""

    parents: list[tuple[int, str]]  # (the parent record's row id, its record id)
    cursor: int  # the row id after which the session's parents are walked (resume)
    following: int  # parents from the cursor on, this batch's included
    batches_done: int
    processed: int = 0  # parents done before the first failure (the resume cursor follows them)
    fetched: int = 0  # parents whose children were listed, before or after a failure
    failed: list[str] = field(default_factory=list)  # parents whose children could not be listed
    error: str | None = None  # the first failure
    truncated: list[str] = field(default_factory=list)  # parents with more pages than were fetched
    keyed: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)

    def collect(
        self, results: list[_Children | UpstreamFailure], records: _Records, parent_key: str, label: str
    ) -> None:
        """Take each parent's children, in the parents' order: the cursor stops at the first failure
        (the children of later parents are still stored)."""
        for (row_id, rid), result in zip(self.parents, results, strict=True):
            if isinstance(result, UpstreamFailure):
                self.error = self.error or f"{label} {rid}: {result.message}"
                self.failed.append(rid)
                continue
            self.fetched += 1
            if result.truncated:
                self.truncated.append(rid)
            self.keyed += [records.record(item, {parent_key: rid}) for item in result.rows]
            if self.error is None:
                self.cursor, self.processed = row_id, self.processed + 1


async def _batch(repo: AnalysisRepository, pid: uuid.UUID, args: IngestIn, model: str, key: str) -> _Batch:
    """The caller's parents (no session state is read or moved: resume walks the session's parents),
    else the session's next MAX_PARENTS parents after where the last call stopped."""
    assert args.parent_model is not None
    if args.parent_ids is not None:
        parents: list[tuple[int, str]] = [(0, rid) for rid in dict.fromkeys(args.parent_ids)]
        return _Batch(parents, 0, len(parents), await repo.last_page(pid, args.analysis_id, model))
    if await repo.count_records(pid, args.analysis_id, args.parent_model) == 0:
        raise NotFound(
            f"No '{args.parent_model}' records in analysis '{args.analysis_id}'",
            suggestions=[f"Ingest the parents first: analysis_ingest(model='{args.parent_model}'), or pass parent_ids"],
        )
    state = await repo.get_state(pid, args.analysis_id, key) if args.resume else None
    after = int(state["next_token"] or 0) if state else 0
    parents, following = await repo.parents_after(pid, args.analysis_id, args.parent_model, after, MAX_PARENTS)
    return _Batch(parents, after, following, state["pages_done"] if state else 0)


async def _children_of(
    ctx: CallContext, client: UpstreamClient, child: ChildCfg, parents: list[tuple[int, str]], per_page: int, label: str
) -> list[_Children | UpstreamFailure]:
    """Each parent's children (or why they could not be listed), NESTED_CONCURRENCY parents at a time,
    until the call's deadline."""
    sem = asyncio.Semaphore(NESTED_CONCURRENCY)
    done, deadline = 0, _deadline(ctx)

    async def one(parent_id: str) -> _Children | UpstreamFailure:
        nonlocal done
        async with sem:
            try:
                async with asyncio.timeout_at(deadline):
                    result: _Children | UpstreamFailure = await _fetch_children(client, child, parent_id, per_page, {})
            except UpstreamFailure as exc:
                result = exc
            except TimeoutError:
                result = _past_deadline(ctx)
        done += 1
        await ctx.progress(done, len(parents), f"{label} {parent_id}")
        return result

    return list(await asyncio.gather(*(one(rid) for _, rid in parents)))


def _child_of(upstreams: UpstreamCatalog, args: IngestIn) -> ChildCfg:
    """The child resource to ingest (NotFound naming the declared ones)."""
    assert args.parent_model is not None and args.child_resource is not None
    parent = upstreams.model(args.parent_model)
    child = parent.cfg.children.get(args.child_resource)
    if child is None:
        known = ", ".join(sorted(parent.cfg.children)) or "(none)"
        raise NotFound(
            f"Model '{args.parent_model}' has no child resource '{args.child_resource}'",
            suggestions=[f"Child resources of {args.parent_model}: {known}"],
        )
    if args.filters:
        raise invalid_field("filters", "filters are not supported in nested mode")
    return child


async def _nested(
    ctx: CallContext,
    repo: AnalysisRepository,
    pid: uuid.UUID,
    args: IngestIn,
    fields: list[str] | None,
    upstreams: UpstreamCatalog,
) -> IngestOut:
    assert args.parent_model is not None and args.child_resource is not None
    child = _child_of(upstreams, args)
    parent = upstreams.model(args.parent_model)
    model = child.model or args.child_resource
    parent_key = child.parent_key or f"{args.parent_model}_id"
    per_page = min(args.per_page, child.pagination.max_per_page)
    key = state_key(mode="nested", parent=args.parent_model, child=args.child_resource)
    batch = await _batch(repo, pid, args, model, key)
    label = args.parent_model

    async def fetch() -> list[_Children | UpstreamFailure]:
        async with upstream_client(ctx, parent.upstream_name, parent.upstream, args.user_id) as client:
            return await _children_of(ctx, client, child, batch.parents, per_page, label)

    results = await ctx.without_transaction(fetch)
    store = await _store_for(ctx, repo, args, model)
    records = _Records.of(child, fields, parent_key)
    batch.collect(results, records, parent_key, args.parent_model)
    stored = await store.records(batch.batches_done + 1, batch.keyed) if batch.keyed else 0
    remaining = batch.following - batch.processed
    complete = remaining == 0 and batch.error is None
    if batch.processed or complete:
        batch.batches_done += 1
    if args.parent_ids is None:
        params = {"parent": args.parent_model}
        await store.save_state(key, params, batch.cursor, batch.batches_done, complete, None)
    summaries = []
    if batch.keyed:
        label = f"batch {batch.batches_done} ({batch.fetched} {args.parent_model} parents)"
        summaries.append((batch.batches_done, len(batch.keyed), records.summary(model, label, batch.keyed)))
    await store.summaries(ctx, summaries)
    return _nested_out(args, child, model, batch, records, stored, await store.held(), len(summaries))


def _nested_out(
    args: IngestIn, child: ChildCfg, model: str, batch: _Batch, records: _Records, stored: int, held: int, pages: int
) -> IngestOut:
    """The reply of a nested ingest (`pages`: the page summaries stored)."""
    warnings = records.warnings()
    if batch.truncated:
        warnings.append(
            f"{len(batch.truncated)} {args.parent_model} parent(s) have more than {child.max_pages_per_parent} pages "
            f"of {model} (e.g. {', '.join(batch.truncated[:3])}): only those pages were stored; raise "
            "max_pages_per_parent in the registry"
        )
    remaining = batch.following - batch.processed
    width = max((len(d) for _, d in batch.keyed), default=0)
    of = f" of {len(batch.parents)}" if batch.fetched != len(batch.parents) else ""
    msg = (
        f"Stored {stored} {model} record(s) ({width} fields per record) for {batch.fetched}{of} "
        f"{args.parent_model} parent(s). Analysis: {args.analysis_id}"
    )
    if batch.failed:
        shown = ", ".join(batch.failed[:5]) + (" ..." if len(batch.failed) > 5 else "")
        msg += f". {len(batch.failed)} parent(s) failed ({shown})"
    if batch.error and args.parent_ids is not None:
        msg += f". First failure: {batch.error}; call again with the parent_ids that failed"
    elif batch.error:
        msg += f". Stopped at a failure: {batch.error}; resume: true retries from there"
    elif remaining:
        msg += f". {remaining} parent(s) remain: call again with resume: true"
    return IngestOut(
        analysis_id=args.analysis_id,
        model=model,
        mode="nested",
        stored=stored,
        pages=len(batch.parents),
        fields_per_record=width,
        session_records=held,
        complete=remaining == 0 and batch.error is None,
        capped=remaining > 0 and batch.error is None,
        parents_processed=batch.fetched,
        parents_failed=len(batch.failed),
        failed_parents=batch.failed[:MAX_PARENTS] or None,
        parents_remaining=remaining,
        renamed=records.renamed(),
        cut=records.cut(args.analysis_id, args.project, model),
        warnings=warnings or None,
        page_summaries=pages,
        error=batch.error,
        message=msg,
    )
