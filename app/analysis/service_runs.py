"""analysis_act_runs: the live analysis_act runs of a session, newest first, or one run with its ids.

A run is recorded by `service_act` whatever the transport; this reads them back. A listing shows each
run's first LIST_IDS failed and unknown ids; `run_id` pages through all of one run's ids. The reply
is fitted to `CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS` and names what it left out (`cuts`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import RowMapping

from app.analysis.cuts import Part, budget_why, call, fitting, joined
from app.analysis.repository import AnalysisRepository
from app.analysis.repository_runs import ActRunRepository
from app.analysis.schemas import ActError
from app.analysis.schemas_runs import ActRunRow, ActRunsIn, ActRunsOut
from app.analysis.service import settings, with_tokens
from app.core.context import CallContext
from app.core.errors import NotFound

LIST_IDS = 20  # failed (and unknown) ids shown per run in a listing


def _row(r: RowMapping, failed: list[str], unknown: list[str]) -> ActRunRow:
    return ActRunRow(
        run_id=int(r["id"]),
        model=r["model"],
        action=r["action"],
        where=r["where"],
        attributes=r["attributes"],
        state=r["state"],
        key_name=r["key_name"],
        key_id=r["key_id"],
        transport=r["transport"],
        total=r["total"],
        succeeded=r["succeeded"],
        failed=r["failed"],
        unknown=r["unknown"],
        not_attempted=r["not_attempted"],
        already_done=r["already_done"],
        deadline_reached=r["deadline_reached"],
        failed_ids=failed,
        failed_ids_total=int(r["failed_ids_total"] or 0),
        unknown_ids=unknown,
        unknown_ids_total=int(r["unknown_ids_total"] or 0),
        errors=[ActError(**e) for e in r["errors"] or []],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
    )


async def act_runs(ctx: CallContext, args: ActRunsIn) -> ActRunsOut:
    """A page of the session's runs, or one run (`run_id`) with a page of its failed and unknown ids.

    Raises:
        NotFound: `run_id` names no live run of the session.
    """
    project = ctx.project(args.project)
    pid = await AnalysisRepository(ctx.session).project_id(project)
    repo = ActRunRepository(ctx.session)
    if args.run_id is not None:
        return with_tokens(await _one(ctx, repo, pid, project, args))
    rows, total = await repo.runs(pid, args.analysis_id, args.limit, args.offset) if pid else ([], 0)
    runs = [_row(r, *await _first_ids(repo, pid, args.analysis_id, r)) for r in rows] if pid else []
    max_tokens = settings(ctx).max_response_tokens
    fit = fitting([r.model_dump(mode="json") for r in runs], max_tokens)
    shown_to = args.offset + fit
    parts = []
    if total > shown_to:
        why = budget_why(max_tokens) if fit < len(runs) else f"limit {args.limit}"
        parts.append(Part(f"{total - shown_to} older run(s)", why, call("analysis_act_runs", offset=shown_to)))
    long = [r for r in runs[:fit] if r.failed_ids_total > len(r.failed_ids) or r.unknown_ids_total > len(r.unknown_ids)]
    if long:
        listed = ", ".join(str(r.run_id) for r in long)
        parts.append(
            Part(
                f"failed or unknown ids past the first {LIST_IDS} of run(s) {listed}",
                f"a listing shows {LIST_IDS} ids of each kind per run",
                call("analysis_act_runs", run_id=long[0].run_id, offset=0),
            )
        )
    return with_tokens(
        ActRunsOut(
            analysis_id=args.analysis_id,
            project=project,
            runs=runs[:fit],
            total=total,
            next_offset=shown_to if total > shown_to else None,
            cut=joined(parts),
            message=f"{total} act run(s) in analysis '{args.analysis_id}'; showing {fit}"
            + (f" from offset {args.offset}" if args.offset else "")
            + ".",
        )
    )


async def _first_ids(repo: ActRunRepository, pid: Any, aid: str, r: RowMapping) -> tuple[list[str], list[str]]:
    failed = await repo.run_ids(pid, aid, int(r["id"]), "failed", LIST_IDS, 0) if r["failed_ids_total"] else []
    unknown = await repo.run_ids(pid, aid, int(r["id"]), "unknown", LIST_IDS, 0) if r["unknown_ids_total"] else []
    return failed or [], unknown or []


async def _one(ctx: CallContext, repo: ActRunRepository, pid: Any, project: str, args: ActRunsIn) -> ActRunsOut:
    """One run with `limit` of its failed and of its unknown ids from `offset` on."""
    assert args.run_id is not None
    failed = await repo.run_ids(pid, args.analysis_id, args.run_id, "failed", args.limit, args.offset) if pid else None
    row = await repo.run(pid, args.analysis_id, args.run_id) if failed is not None else None
    if failed is None or row is None:
        raise NotFound(
            f"No act run {args.run_id} in analysis '{args.analysis_id}' of project '{project}' (or it expired)",
            suggestions=["analysis_act_runs without run_id lists the session's runs"],
        )
    unknown = await repo.run_ids(pid, args.analysis_id, args.run_id, "unknown", args.limit, args.offset) or []
    out = _row(row, failed, unknown)
    seen = args.offset + max(len(failed), len(unknown))
    more = max(out.failed_ids_total, out.unknown_ids_total) > seen
    cut = None
    if more:
        cut = joined(
            [
                Part(
                    f"failed or unknown ids of run {args.run_id} after the first {seen}",
                    f"limit {args.limit} ids of each kind",
                    call("analysis_act_runs", offset=seen),
                )
            ]
        )
    return ActRunsOut(
        analysis_id=args.analysis_id,
        project=project,
        runs=[out],
        total=1,
        next_offset=seen if more else None,
        cut=cut,
        message=f"Act run {args.run_id}: {out.action} of {out.total} {out.model} record(s), {out.succeeded} "
        f"succeeded, {out.failed} failed, {out.unknown} unknown, {out.not_attempted} not attempted "
        f"(by key '{out.key_name}' over {out.transport}).",
    )
