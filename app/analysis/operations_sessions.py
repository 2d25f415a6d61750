"""analysis_sessions, analysis_session and analysis_act_runs: what the project's analysis sessions hold and
the acts run on them (read only)."""

from __future__ import annotations

from app.analysis import service_runs, service_sessions
from app.analysis.schemas_runs import ActRunsIn, ActRunsOut
from app.analysis.schemas_sessions import SessionIn, SessionOut, SessionsIn, SessionsOut
from app.core.context import CallContext
from app.core.errors import NotFound
from app.core.registry import OperationSet

__all__ = ["ops"]

ops = OperationSet("analysis")  # included by app/analysis/operations.py


@ops.operation(
    name="analysis_sessions",
    input=SessionsIn,
    output=SessionsOut,
    path="/analysis/sessions",
    method="GET",
    read_only=True,
    title="List Analysis Sessions",
)
async def analysis_sessions(ctx: CallContext, args: SessionsIn) -> SessionsOut:
    """List the project's analysis sessions, most recently active first (`limit` default 20, `offset`):
    per session its models with record counts and the upstream pages they came from, the findings and
    page summaries stored and the last activity. Only live data counts (records
    expire after 7 days, ephemeral findings after 1 hour)."""
    return await service_sessions.sessions(ctx, args)


@ops.operation(
    name="analysis_session",
    input=SessionIn,
    output=SessionOut,
    path="/analysis/sessions/{analysis_id}",
    method="GET",
    read_only=True,
    title="Show Analysis Session",
)
async def analysis_session(ctx: CallContext, args: SessionIn) -> SessionOut:
    """Show one analysis session: its models with record counts and page ranges, where each ingest
    stands (filters, last page reached, complete, upstream total), the newest findings (`findings_limit`,
    default 50) and the page summaries by model and page (`summaries_limit`, default 20), each with the
    total held. Use analysis_query to search or aggregate the records."""
    return await service_sessions.session(ctx, args)


@ops.operation(
    name="analysis_act_runs",
    errors=(NotFound,),
    input=ActRunsIn,
    output=ActRunsOut,
    path="/analysis/act-runs",
    method="GET",
    read_only=True,
    title="List Act Runs",
)
async def analysis_act_runs(ctx: CallContext, args: ActRunsIn) -> ActRunsOut:
    """List the live analysis_act runs of a session, newest first, whatever called them (MCP, REST,
    console): model, action, where, attributes, when, the key, outcome counts and the first 20 failed
    and unknown ids with the first errors. `run_id` shows one run and pages all its ids (`limit`,
    `offset`). Runs are kept as long as the session's records (7 days), past analysis_clear."""
    return await service_runs.act_runs(ctx, args)
