"""analysis_act: apply an update or delete upstream to records matched server-side."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from app.analysis.config import get_analysis_settings
from app.analysis.registry import load_registry
from app.analysis.repository import AnalysisRepository
from app.analysis.schemas import ActError, ActIn, ActOut, ActSummary, IngestedRange
from app.analysis.service import bounded_rows, check_impersonation, project_for_read, with_tokens
from app.analysis.upstream import UpstreamClient, UpstreamFailure, path_segment
from app.analysis.validation import field_name, parse_where
from app.core.context import CallContext
from app.core.errors import NotFound, invalid_field

log = logging.getLogger("cairn.analysis.act")

BATCH = 50
CONCURRENCY = 5
SAMPLE_IDS, SAMPLE_ROWS, SAMPLE_ERRORS = 10, 3, 5


@dataclass
class Outcome:
    """What happened to one record."""

    record_id: str
    ok: bool
    already: bool = False
    status_code: int | None = None
    message: str = ""
    transient: bool = False


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


async def act(ctx: CallContext, args: ActIn) -> ActOut:
    """Dry run (scope and snapshot age) or a live, batched mutation with an aggregate summary."""
    check_impersonation(ctx, args.user_id)
    registry = load_registry()
    rm = registry.model(args.model)
    if not rm.cfg.writable:
        raise invalid_field("model", f"Model '{args.model}' is not writable in the upstream registry")
    action_cfg = rm.cfg.update if args.action == "update" else rm.cfg.delete
    if action_cfg is None:
        raise invalid_field("action", f"Model '{args.model}' has no {args.action} action configured")
    attributes: dict[str, Any] = {}
    if args.action == "update":
        if not args.attributes:
            raise invalid_field("attributes", "action 'update' needs attributes")
        for name in args.attributes:
            field_name(name, f"attributes.{name}")
            allowed = rm.cfg.writable_attributes
            if allowed is not None and name not in allowed:
                raise invalid_field(
                    f"attributes.{name}", f"attributes.{name}: not writable (writable: {', '.join(allowed)})"
                )
        attributes = dict(args.attributes)
    w = parse_where(args.where)
    repo = AnalysisRepository(ctx.session)
    pid = await project_for_read(ctx, repo, args.project, args.analysis_id)
    await repo.evict_expired()
    if await repo.count_records(pid, args.analysis_id, args.model) == 0:
        raise NotFound(
            f"No '{args.model}' records in analysis '{args.analysis_id}': nothing to act on",
            suggestions=[f"Run analysis_ingest(model='{args.model}') in this session first"],
        )
    if args.dry_run:
        info = await repo.dry_run(pid, args.analysis_id, args.model, w)
        rows = [{**data, "ingestedAt": _iso(at)} for _, data, at in info["first"][:SAMPLE_ROWS]]
        sample, _ = bounded_rows(rows, get_analysis_settings().max_response_tokens)
        return with_tokens(
            ActOut(
                analysis_id=args.analysis_id,
                model=args.model,
                dry_run=True,
                matched_count=info["count"],
                sample_ids=[rid for rid, _, _ in info["first"][:SAMPLE_IDS]],
                sample_data=sample,
                ingestedAtRange=IngestedRange(earliest=_iso(info["earliest"]), latest=_iso(info["latest"])),
                message=f"Dry run: {args.action} would apply to {info['count']} {args.model} record(s); "
                "nothing was sent upstream.",
            )
        )
    matched = await repo.matched_ids(pid, args.analysis_id, args.model, w)
    outcomes = await _run(ctx, rm, action_cfg, args, attributes, matched)
    done_ids = [o.record_id for o in outcomes if o.ok]
    if args.action == "update" and done_ids:
        await repo.apply_update(pid, args.analysis_id, args.model, done_ids, attributes)
    elif args.action == "delete" and done_ids:
        await repo.delete_records(pid, args.analysis_id, args.model, done_ids)
    failed = [o for o in outcomes if not o.ok]
    skipped = sum(1 for o in failed if o.status_code is None and o.message.startswith("not attempted"))
    summary = ActSummary(
        total=len(outcomes),
        succeeded=len(done_ids),
        failed=len(failed),
        already_done=sum(1 for o in outcomes if o.already),
        not_attempted=skipped,
        action=args.action,
    )
    errors = [
        ActError(record_id=o.record_id, status_code=o.status_code, message=o.message[:200])
        for o in failed[:SAMPLE_ERRORS]
    ]
    msg = (
        f"{args.action}: {summary.succeeded} of {summary.total} succeeded"
        f" ({summary.already_done} already in the requested state), {summary.failed} failed."
    )
    if skipped:
        msg += f" {skipped} were not attempted because a whole batch failed; retry later."
    return with_tokens(
        ActOut(
            analysis_id=args.analysis_id,
            model=args.model,
            dry_run=False,
            summary=summary,
            sample_errors=errors,
            message=msg + " Per-record outcomes are in the server log.",
        )
    )


def _judged(args: ActIn, record_id: str, data: dict[str, Any], attributes: dict[str, Any], response: Any) -> Outcome:
    """The outcome of one record from the upstream's answer."""
    code = response.status_code
    if 200 <= code < 300:
        same = args.action == "update" and all(data.get(k) == v for k, v in attributes.items())
        return Outcome(record_id, ok=True, already=same, status_code=code)
    if args.action == "delete" and code in (404, 410):
        return Outcome(record_id, ok=True, already=True, status_code=code)
    return Outcome(record_id, ok=False, status_code=code, message=_error_text(response))


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


async def _run(
    ctx: CallContext,
    rm: Any,
    action_cfg: Any,
    args: ActIn,
    attributes: dict[str, Any],
    matched: list[tuple[str, dict[str, Any]]],
) -> list[Outcome]:
    sem = asyncio.Semaphore(CONCURRENCY)
    outcomes: list[Outcome] = []
    total = len(matched)
    body = None
    if args.action == "update":
        body = {action_cfg.body_key: attributes} if action_cfg.body_key else attributes

    async with UpstreamClient(rm.upstream_name, rm.upstream, user_id=args.user_id) as client:

        async def one(record_id: str, data: dict[str, Any]) -> Outcome:
            segment = path_segment(record_id)
            async with sem:
                if segment is None:  # e.g. '..': the request would act on another resource
                    outcome = Outcome(record_id, ok=False, message="this id cannot name a record in a URL path")
                else:
                    try:
                        response = await client.request(
                            action_cfg.method,
                            action_cfg.path.replace("{id}", segment),
                            json_body=body,
                            retries=min(2, rm.upstream.max_retries),
                        )
                    except UpstreamFailure as exc:
                        outcome = Outcome(
                            record_id, ok=False, status_code=exc.status_code, message=exc.message, transient=True
                        )
                    else:
                        outcome = _judged(args, record_id, data, attributes, response)
            log.info(
                "analysis_act record",
                extra={
                    "analysis_id": args.analysis_id,
                    "model": args.model,
                    "record_id": record_id,
                    "action": args.action,
                    "outcome": "already" if outcome.already else ("ok" if outcome.ok else "failed"),
                    "status_code": outcome.status_code,
                },
            )
            outcomes.append(outcome)
            await ctx.progress(len(outcomes), total, f"{args.action} {len(outcomes)}/{total}")
            return outcome

        for start in range(0, total, BATCH):
            batch = matched[start : start + BATCH]
            results = await asyncio.gather(*(one(rid, data) for rid, data in batch))
            if all(not o.ok and o.transient for o in results) and start + BATCH < total:
                for rid, _ in matched[start + BATCH :]:
                    outcomes.append(
                        Outcome(
                            rid,
                            ok=False,
                            message="not attempted: the previous batch failed entirely (upstream unavailable)",
                        )
                    )
                    log.info(
                        "analysis_act record",
                        extra={
                            "analysis_id": args.analysis_id,
                            "model": args.model,
                            "record_id": rid,
                            "action": args.action,
                            "outcome": "not_attempted",
                        },
                    )
                break
    return outcomes
