"""analysis_sessions and analysis_session: list a project's sessions and show what one holds."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from app.analysis.cuts import MAX_VALUE_CHARS, Part, call, joined, text_cut, trim_row
from app.analysis.repository import AnalysisRepository
from app.analysis.repository_sessions import SessionRepository
from app.analysis.schemas_sessions import (
    FindingRow,
    IngestRange,
    ModelHeld,
    SessionIn,
    SessionOut,
    SessionsIn,
    SessionsOut,
    SessionSummary,
)
from app.analysis.service import with_tokens
from app.core.context import CallContext
from app.core.cuts import Cut
from app.core.errors import NotFound

FINDING_CHARS = 1000  # of a finding's text in a listing


def _model(row: Any) -> ModelHeld:
    return ModelHeld(
        model=row["model"],
        records=int(row["records"]),
        pages=int(row["pages"]),
        first_page=row["first_page"],
        last_page=row["last_page"],
    )


async def sessions(ctx: CallContext, args: SessionsIn) -> SessionsOut:
    """A page of the project's sessions (a bound key sees its own project only)."""
    project = ctx.project(args.project)
    pid = await AnalysisRepository(ctx.session).project_id(project)
    if pid is None:
        return with_tokens(SessionsOut(project=project, sessions=[], total=0))
    repo = SessionRepository(ctx.session)
    rows = await repo.sessions(pid, args.limit, args.offset)
    total = int(rows[0]["total"]) if rows else 0
    if not rows and args.offset:  # past the end: the total still tells where it is
        total = await repo.count_sessions(pid)
    held: dict[str, list[ModelHeld]] = defaultdict(list)
    for row in await repo.models(pid, [r["analysis_id"] for r in rows]):
        held[row["analysis_id"]].append(_model(row))
    out = [
        SessionSummary(
            analysis_id=r["analysis_id"],
            models=held.get(r["analysis_id"], []),
            records=int(r["records"]),
            findings=int(r["findings"]),
            page_summaries=int(r["page_summaries"]),
            pages_held=int(r["pages_held"]),
            last_activity=r["last_activity"],
        )
        for r in rows
    ]
    nxt = args.offset + len(out) if args.offset + len(out) < total else None
    return with_tokens(SessionsOut(project=project, sessions=out, total=total, next_offset=nxt))


def _finding(row: dict[str, Any], shortened: list[int]) -> FindingRow:
    """A listed finding, its text and metadata values shortened (its id then added to `shortened`)."""
    text, cut_text = text_cut(row["finding"], FINDING_CHARS)
    metadata, cut_meta = trim_row(row["metadata"]) if row["metadata"] else (None, [])
    if cut_text or cut_meta:
        shortened.append(int(row["id"]))
    return FindingRow(
        id=int(row["id"]),
        category=row["category"],
        finding=text,
        metadata=metadata or None,
        source_model=row["source_model"],
        persistent=bool(row["persistent"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )


def _cut(args: SessionIn, findings_left: int, summaries_left: int, shortened: list[int]) -> Cut | None:
    """What the session's listing left out: older findings, later page summaries, long texts."""
    parts = []
    if findings_left:
        more = min(200, args.findings_limit + findings_left)
        parts.append(
            Part(
                f"{findings_left} older finding(s)",
                f"findings_limit {args.findings_limit}",
                call("analysis_session", findings_limit=more) if more > args.findings_limit else None,
                how="analysis_query mode semantic finds findings by meaning (with a category)",
            )
        )
    if summaries_left:
        more = min(200, args.summaries_limit + summaries_left)
        parts.append(
            Part(
                f"{summaries_left} later page summar{'y' if summaries_left == 1 else 'ies'}",
                f"summaries_limit {args.summaries_limit}",
                call("analysis_session", summaries_limit=more) if more > args.summaries_limit else None,
                how="analysis_query mode semantic with category page_summary",
            )
        )
    if shortened:
        ids = ", ".join(map(str, shortened[:10])) + (" ..." if len(shortened) > 10 else "")
        parts.append(
            Part(
                f"the rest of the text or metadata of finding(s) {ids} (marked …)",
                f"texts are listed up to {FINDING_CHARS} characters and metadata values up to {MAX_VALUE_CHARS}",
                how="analysis_query mode semantic returns a finding whole (query with its words)",
            )
        )
    return joined(parts)


async def session(ctx: CallContext, args: SessionIn) -> SessionOut:
    """One session: models and pages, ingest states, newest findings, page summaries.

    Raises:
        NotFound: the project holds no live row of this session.
    """
    project = ctx.project(args.project)
    pid = await AnalysisRepository(ctx.session).project_id(project)
    missing = NotFound(
        f"No analysis session '{args.analysis_id}' in project '{project}' (never used, cleared or expired)",
        suggestions=["analysis_sessions lists the project's sessions"],
    )
    if pid is None:
        raise missing
    repo = SessionRepository(ctx.session)
    held = await repo.models(pid, [args.analysis_id])
    models = [_model(r) for r in held]
    states = await repo.ingests(pid, args.analysis_id)
    findings, findings_total = await repo.findings(pid, args.analysis_id, args.findings_limit)
    summaries, summaries_total = await repo.page_summaries(pid, args.analysis_id, args.summaries_limit)
    if not models and not states and not findings_total and not summaries_total:
        raise missing
    ingests = [
        IngestRange(
            model=s["model"],
            mode="nested" if "parent" in (s["params"] or {}) else "top_level",
            params={k: v for k, v in (s["params"] or {}).items() if v is not None},
            last_page=int(s["pages_done"]),
            complete=bool(s["complete"]),
            total_available=s["total_available"],
            updated_at=s["updated_at"],
            expires_at=s["expires_at"],
        )
        for s in states
    ]
    shortened: list[int] = []
    listed = [_finding(f, shortened) for f in findings]
    listed_summaries = [_finding(f, shortened) for f in summaries]
    times = [s.updated_at for s in ingests] + [f["created_at"] for f in findings + summaries]
    times += [r["last_at"] for r in held]
    records = sum(m.records for m in models)
    return with_tokens(
        SessionOut(
            analysis_id=args.analysis_id,
            project=project,
            models=models,
            records=records,
            ingests=ingests,
            findings=listed,
            findings_total=findings_total,
            page_summaries=listed_summaries,
            page_summaries_total=summaries_total,
            cut=_cut(args, findings_total - len(listed), summaries_total - len(listed_summaries), shortened),
            last_activity=max(times) if times else None,
            message=f"Analysis '{args.analysis_id}': {records} record(s) of {len(models)} model(s), "
            f"{findings_total} finding(s), {summaries_total} page summar{'y' if summaries_total == 1 else 'ies'}, "
            f"{len(ingests)} ingest(s).",
        )
    )
