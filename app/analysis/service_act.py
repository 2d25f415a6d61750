"""analysis_act: apply an update or delete upstream to records matched server-side.

A live run is bounded: `deadline_seconds` for the whole run and `record_seconds` per record (its
request with retries, never past the deadline). When the deadline passes, the requests in flight are
cancelled (their records are `unknown`: the upstream may have applied them) and the records never
sent are `not attempted`. Cairn's copy follows every record the upstream accepted: in the call's
transaction when it commits, else (the call failed or the client cancelled it) through a rollback
step the executor runs in a transaction of its own (`CallContext.on_rollback`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy.ext.asyncio import AsyncSession

from app.analysis.catalog import ActionCfg, WritableModel
from app.analysis.cuts import Part, bounded_rows, budget_why, call, joined, shortened_part
from app.analysis.repository import AnalysisRepository
from app.analysis.repository_runs import ActRunRepository, RunRecord
from app.analysis.schemas import ActError, ActIn, ActOut, ActSummary, IngestedRange
from app.analysis.service import (
    catalog,
    check_impersonation,
    project_for_read,
    settings,
    upstream_client,
    where_warnings,
    with_tokens,
)
from app.analysis.upstream import UpstreamClient, UpstreamFailure, path_segment
from app.analysis.validation import Where, field_name, parse_where
from app.core.context import CallContext
from app.core.cuts import Cut
from app.core.errors import NotFound, invalid_field

log = logging.getLogger("cairn.analysis.act")

BATCH = 50
CONCURRENCY = 5
SAMPLE_IDS, SAMPLE_ROWS, SAMPLE_ERRORS = 10, 3, 5

State = Literal["succeeded", "failed", "unknown", "not_attempted"]


@dataclass
class Outcome:
    """What happened to one record."""

    record_id: str
    state: State
    already: bool = False
    status_code: int | None = None
    message: str = ""
    transient: bool = False

    @property
    def ok(self) -> bool:
        """The upstream accepted the change (or the record was already in the requested state)."""
        return self.state == "succeeded"


@dataclass
class Run:
    """A live run: each matched record's outcome (in match order) and why it stopped early."""

    outcomes: list[Outcome] = field(default_factory=list)
    deadline_reached: bool = False
    upstream_down: bool = False


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


async def _record(
    repo: AnalysisRepository, pid: uuid.UUID, args: ActIn, record_ids: list[str], attributes: dict[str, Any]
) -> None:
    """Make Cairn's copy follow what the upstream accepted."""
    if args.action == "update":
        await repo.apply_update(pid, args.analysis_id, args.model, record_ids, attributes)
    else:
        await repo.delete_records(pid, args.analysis_id, args.model, record_ids)


async def act(ctx: CallContext, args: ActIn) -> ActOut:
    """Dry run (scope and snapshot age) or a live, batched, time-bounded mutation with an aggregate
    summary; a top-level or child model the registry declares writable."""
    check_impersonation(ctx, args.user_id)
    wm = catalog(ctx).writable_model(args.model)
    if not wm.cfg.writable:
        raise invalid_field("model", f"Model '{args.model}' is not writable in the upstream registry")
    action_cfg = wm.cfg.update if args.action == "update" else wm.cfg.delete
    if action_cfg is None:
        raise invalid_field("action", f"Model '{args.model}' has no {args.action} action configured")
    attributes: dict[str, Any] = {}
    if args.action == "update":
        if not args.attributes:
            raise invalid_field("attributes", "action 'update' needs attributes")
        for name in args.attributes:
            field_name(name, f"attributes.{name}")
            allowed = wm.cfg.writable_attributes
            if allowed is not None and name not in allowed:
                raise invalid_field(
                    f"attributes.{name}", f"attributes.{name}: not writable (writable: {', '.join(allowed)})"
                )
        attributes = dict(args.attributes)
    w = parse_where(args.where)
    repo = AnalysisRepository(ctx.session)
    pid = await project_for_read(ctx, repo, args.project, args.analysis_id)
    if await repo.count_records(pid, args.analysis_id, args.model) == 0:
        hint = f"analysis_ingest(model='{args.model}')"
        if wm.parent_model is not None:
            hint = f"analysis_ingest(parent_model='{wm.parent_model}', child_resource=...)"
        raise NotFound(
            f"No '{args.model}' records in analysis '{args.analysis_id}': nothing to act on",
            suggestions=[f"Run {hint} in this session first"],
        )
    if args.dry_run:
        return with_tokens(await _dry_run(ctx, repo, pid, args, w))
    matched = await repo.matched_ids(pid, args.analysis_id, args.model, w)
    accepted: list[str] = []  # filled as the upstream accepts records
    log_run = _RunLog(ctx, pid, args, attributes, [rid for rid, _ in matched])

    async def record_accepted(session: AsyncSession) -> None:
        # The call's transaction rolled back (cancelled by the client, or failed): the upstream has
        # still applied these, so the copy must say so, and the run is recorded as interrupted.
        if accepted:
            await _record(AnalysisRepository(session), pid, args, list(accepted), attributes)
            log.info(
                "analysis_act recorded accepted records after a rollback",
                extra={"analysis_id": args.analysis_id, "model": args.model, "records": len(accepted)},
            )
        await log_run.store(session, list(accepted))

    ctx.on_rollback(record_accepted)
    # Nothing is written before the upstream is done (reads see live rows only; expired ones go after),
    # so no transaction or pooled connection is held while it answers.
    run = await ctx.without_transaction(
        lambda: _run(ctx, wm, action_cfg, args, attributes, matched, accepted, log_run.sent)
    )
    log_run.run = run
    await repo.evict_expired()
    if accepted:
        await _record(repo, pid, args, list(accepted), attributes)
    out = _reply(args, run)
    out.run_id = await log_run.store(ctx.session, list(accepted))
    out.message += f" Recorded as act run {out.run_id}: analysis_act_runs lists it with every failed id."
    out.cut = _ids_cut(args, out)
    if not matched:
        out.warnings = await where_warnings(repo, pid, args.analysis_id, args.model, w, {})
    return with_tokens(out)


@dataclass
class _RunLog:
    """Records a live run in `analysis_act_runs`: once it is done, in the call's transaction (opened
    after the upstream answered), or, when that transaction rolls back, in the rollback step's own, as
    interrupted."""

    ctx: CallContext
    pid: uuid.UUID
    args: ActIn
    attributes: dict[str, Any]
    matched: list[str]
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    run: Run | None = None
    sent: set[str] = field(default_factory=set)  # ids whose request was started

    def record(self, accepted: list[str], state: str) -> RunRecord:
        """The run as stored: its outcomes when it finished, else what is known (accepted ids)."""
        principal, args = self.ctx.principal, self.args
        rec = RunRecord(
            analysis_id=args.analysis_id,
            model=args.model,
            action=args.action,
            where=args.where,
            attributes=self.attributes or None,
            state=state,
            key_id=principal.key_id,
            key_name=principal.name,
            transport=self.ctx.transport,
            started_at=self.started_at,
        )
        if self.run is None:  # cut off: accepted ids are known; the others sent may or may not be applied
            done = set(accepted)
            rec.unknown_ids = [rid for rid in self.matched if rid in self.sent and rid not in done]
            rec.counts = {
                "total": len(self.matched),
                "succeeded": len(done),
                "unknown": len(rec.unknown_ids),
                "not_attempted": len(self.matched) - len(done) - len(rec.unknown_ids),
            }
            return rec
        summary = _reply(args, self.run).summary
        assert summary is not None
        rec.counts = summary.model_dump(
            include={"total", "succeeded", "failed", "unknown", "not_attempted", "already_done"}
        )
        rec.deadline_reached = self.run.deadline_reached
        rec.failed_ids = [o.record_id for o in self.run.outcomes if o.state == "failed"]
        rec.unknown_ids = [o.record_id for o in self.run.outcomes if o.state == "unknown"]
        rec.errors = [
            {"record_id": o.record_id, "status_code": o.status_code, "message": o.message[:200]}
            for o in self.run.outcomes
            if o.state == "failed"
        ][:SAMPLE_ERRORS]
        return rec

    async def store(self, session: AsyncSession, accepted: list[str]) -> int:
        """Store the run (finished when called from the call itself, with its transaction still open)."""
        state = "finished" if session is self.ctx.session else "interrupted"
        retention = settings(self.ctx).records_retention_days * 86400
        return await ActRunRepository(session).insert(self.pid, self.record(accepted, state), retention)


async def _dry_run(ctx: CallContext, repo: AnalysisRepository, pid: uuid.UUID, args: ActIn, w: Where) -> ActOut:
    """The scope of an act and the age of its snapshot; nothing is sent upstream."""
    await repo.evict_expired()
    info = await repo.dry_run(pid, args.analysis_id, args.model, w)
    rows = [{**data, "ingestedAt": _iso(at)} for _, data, at in info["first"][:SAMPLE_ROWS]]
    max_tokens = settings(ctx).max_response_tokens
    fit = bounded_rows(rows, max_tokens)
    parts = []
    if fit.dropped:
        left = f"{fit.dropped} of the {len(rows)} sample_data row(s)"
        if args.where:
            scope = {"project": args.project} if args.project else {}
            filtered = call(
                "analysis_query",
                analysis_id=args.analysis_id,
                **scope,
                mode="filter",
                model=args.model,
                where=args.where,
                offset=len(fit.rows),
            )
            parts.append(Part(left, budget_why(max_tokens), filtered))
        else:
            how = "analysis_query mode filter with a where naming the records pages through them"
            parts.append(Part(left, budget_why(max_tokens), how=how))
    if fit.shortened:
        parts.append(shortened_part(fit.shortened))
    return ActOut(
        analysis_id=args.analysis_id,
        model=args.model,
        dry_run=True,
        matched_count=info["count"],
        sample_ids=[rid for rid, _, _ in info["first"][:SAMPLE_IDS]],
        sample_data=fit.rows,
        cut=joined(parts),
        ingestedAtRange=IngestedRange(earliest=_iso(info["earliest"]), latest=_iso(info["latest"])),
        warnings=await where_warnings(repo, pid, args.analysis_id, args.model, w, {}) if info["count"] == 0 else None,
        message=f"Dry run: {args.action} would apply to {info['count']} {args.model} record(s); "
        "nothing was sent upstream.",
    )


def _ids_cut(args: ActIn, out: ActOut) -> Cut | None:
    """What a live reply's first errors and unknown ids left out, and the run that lists them all."""
    s = out.summary
    assert s is not None and out.run_id is not None  # a live reply, its run stored
    parts = []
    if s.failed > len(out.sample_errors or []):
        parts.append(f"{s.failed - len(out.sample_errors or [])} more failed record(s) after the first {SAMPLE_ERRORS}")
    if s.unknown > len(out.unknown_ids or []):
        parts.append(f"{s.unknown - len(out.unknown_ids or [])} more unknown id(s) after the first {SAMPLE_IDS}")
    if not parts:
        return None
    reason = f"a reply shows the first {SAMPLE_ERRORS} errors and {SAMPLE_IDS} unknown ids"
    scope = {"project": args.project} if args.project else {}
    runs = call("analysis_act_runs", analysis_id=args.analysis_id, **scope, run_id=out.run_id, limit=100)
    return Cut(reason=reason, left_out="; ".join(parts), next_call=runs)


def _reply(args: ActIn, run: Run) -> ActOut:
    """The summary, the first errors and the message of a live run."""
    by_state: dict[str, list[Outcome]] = {"succeeded": [], "failed": [], "unknown": [], "not_attempted": []}
    for o in run.outcomes:
        by_state[o.state].append(o)
    summary = ActSummary(
        total=len(run.outcomes),
        succeeded=len(by_state["succeeded"]),
        failed=len(by_state["failed"]),
        unknown=len(by_state["unknown"]),
        not_attempted=len(by_state["not_attempted"]),
        already_done=sum(1 for o in run.outcomes if o.already),
        deadline_reached=run.deadline_reached,
        action=args.action,
    )
    errors = [
        ActError(record_id=o.record_id, status_code=o.status_code, message=o.message[:200])
        for o in by_state["failed"][:SAMPLE_ERRORS]
    ]
    msg = (
        f"{args.action}: {summary.succeeded} of {summary.total} succeeded"
        f" ({summary.already_done} already in the requested state), {summary.failed} failed"
    )
    if summary.unknown:
        msg += f", {summary.unknown} unknown"
    if summary.not_attempted:
        msg += f", {summary.not_attempted} not attempted"
    msg += ". "
    if run.deadline_reached:
        msg += (
            f"The deadline ({args.deadline_seconds:g}s) was reached: requests in flight were cancelled (unknown: "
            "the upstream may or may not have applied them) and the rest were not sent. "
        )
    elif run.upstream_down:
        msg += "The rest were not attempted because a whole batch failed (upstream unavailable); retry later. "
    elif summary.unknown:
        msg += "Unknown records ran out of their time (record_seconds) in flight: the upstream may have applied them. "
    if summary.unknown or summary.not_attempted:
        msg += (
            "Cairn's copy holds every change the upstream accepted. To finish, run the same act again (acts "
            "are idempotent per record; dry_run first shows what still matches), or re-ingest the model to "
            "see the unknown records' upstream state"
        )
        msg += "; a larger deadline_seconds allows more time. " if run.deadline_reached else ". "
    return ActOut(
        analysis_id=args.analysis_id,
        model=args.model,
        dry_run=False,
        summary=summary,
        sample_errors=errors,
        unknown_ids=[o.record_id for o in by_state["unknown"][:SAMPLE_IDS]] or None,
        message=msg + "Per-record outcomes are in the server log.",
    )


def _judged(args: ActIn, record_id: str, data: dict[str, Any], attributes: dict[str, Any], response: Any) -> Outcome:
    """The outcome of one record from the upstream's answer."""
    code = response.status_code
    if 200 <= code < 300:
        same = args.action == "update" and all(data.get(k) == v for k, v in attributes.items())
        return Outcome(record_id, "succeeded", already=same, status_code=code)
    if args.action == "delete" and code in (404, 410):
        return Outcome(record_id, "succeeded", already=True, status_code=code)
    return Outcome(record_id, "failed", status_code=code, message=_error_text(response))


def _error_text(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or f"HTTP {response.status_code}"
    if isinstance(body, dict):
        for key in ("error", "message", "detail"):
            if key in body:
                return str(body[key])[:200]
    return str(body)[:200]


def _record_path(wm: WritableModel, action_cfg: ActionCfg, record_id: str, data: dict[str, Any]) -> str | None:
    """The action path of one record (`{id}`, and `{parent_id}` from the stored parent key), or None
    when a value cannot be one URL path segment (e.g. '..': the request would act on another resource)."""
    segment = path_segment(record_id)
    if segment is None:
        return None
    path = action_cfg.path
    if "{parent_id}" in path:
        parent = data.get(wm.parent_key) if wm.parent_key else None
        parent_segment = None if parent is None or isinstance(parent, dict | list) else path_segment(str(parent))
        if parent_segment is None:
            return None
        path = path.replace("{parent_id}", parent_segment)
    return path.replace("{id}", segment)


def _log(args: ActIn, outcome: Outcome) -> None:
    log.info(
        "analysis_act record",
        extra={
            "analysis_id": args.analysis_id,
            "model": args.model,
            "record_id": outcome.record_id,
            "action": args.action,
            "outcome": "already" if outcome.already else ("ok" if outcome.ok else outcome.state),
            "status_code": outcome.status_code,
        },
    )


@dataclass
class _Sender:
    """Sends one record's request upstream within its time budget and judges the answer."""

    client: UpstreamClient
    wm: WritableModel
    action_cfg: ActionCfg
    args: ActIn
    attributes: dict[str, Any]
    ends_at: float  # the run's deadline on the loop's clock

    async def send(self, record_id: str, data: dict[str, Any]) -> Outcome:
        """The outcome of one record: its request gets `record_seconds`, never past the deadline."""
        args, action_cfg = self.args, self.action_cfg
        path = _record_path(self.wm, action_cfg, record_id, data)
        if path is None:
            whose = "this id (or its parent's)" if "{parent_id}" in action_cfg.path else "this id"
            return Outcome(record_id, "failed", message=f"{whose} cannot name a record in a URL path")
        body = None
        if args.action == "update":
            body = {action_cfg.body_key: self.attributes} if action_cfg.body_key else self.attributes
        left = self.ends_at - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(min(args.record_seconds, left)):
                response = await self.client.request(
                    action_cfg.method, path, json_body=body, retries=min(2, self.wm.upstream.max_retries)
                )
        except TimeoutError:
            why = "the deadline" if left <= args.record_seconds else f"its budget ({args.record_seconds:g}s)"
            return Outcome(
                record_id, "unknown", message=f"no answer before {why}: the upstream may or may not have applied it"
            )
        except UpstreamFailure as exc:
            return Outcome(record_id, "failed", status_code=exc.status_code, message=exc.message, transient=True)
        return _judged(args, record_id, data, self.attributes, response)


def _unsent(args: ActIn, record_id: str, in_flight: bool, deadline_reached: bool) -> Outcome:
    """The outcome of a record the run did not finish (logged)."""
    if in_flight:
        outcome = Outcome(
            record_id,
            "unknown",
            message="in flight when the deadline passed: the upstream may or may not have applied it",
        )
    elif deadline_reached:
        outcome = Outcome(record_id, "not_attempted", message="not attempted: the deadline passed first")
    else:
        outcome = Outcome(
            record_id,
            "not_attempted",
            message="not attempted: the previous batch failed entirely (upstream unavailable)",
        )
    _log(args, outcome)
    return outcome


async def _run(
    ctx: CallContext,
    wm: WritableModel,
    action_cfg: ActionCfg,
    args: ActIn,
    attributes: dict[str, Any],
    matched: list[tuple[str, dict[str, Any]]],
    accepted: list[str],
    started: set[str],
) -> Run:
    """Send the matched records upstream in batches of BATCH, CONCURRENCY at a time, until done, the
    upstream is down (a whole batch failed) or the deadline passes. Accepted ids go to `accepted` as
    they come, and the ids sent to `started`."""
    ends_at = asyncio.get_running_loop().time() + args.deadline_seconds
    sem = asyncio.Semaphore(CONCURRENCY)
    done: dict[str, Outcome] = {}
    total = len(matched)
    run = Run()

    async with upstream_client(ctx, wm.upstream_name, wm.upstream, args.user_id) as client:
        sender = _Sender(client, wm, action_cfg, args, attributes, ends_at)

        async def one(record_id: str, data: dict[str, Any]) -> Outcome:
            async with sem:
                started.add(record_id)
                outcome = await sender.send(record_id, data)
            if outcome.ok:
                accepted.append(record_id)
            done[record_id] = outcome
            _log(args, outcome)
            await ctx.progress(len(done), total, f"{args.action} {len(done)}/{total}")
            return outcome

        deadline = asyncio.timeout_at(ends_at)
        try:
            async with deadline:
                for start in range(0, total, BATCH):
                    results = await asyncio.gather(*(one(rid, data) for rid, data in matched[start : start + BATCH]))
                    if all(o.state == "failed" and o.transient for o in results) and start + BATCH < total:
                        run.upstream_down = True
                        break
        except TimeoutError:
            if not deadline.expired():
                raise
            run.deadline_reached = True
    run.outcomes = [
        done[rid] if rid in done else _unsent(args, rid, rid in started, run.deadline_reached) for rid, _ in matched
    ]
    return run
