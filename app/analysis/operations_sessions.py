"""analysis_sessions and analysis_session: what the project's analysis sessions hold (read only)."""

from __future__ import annotations

from app.analysis import service_sessions
from app.analysis.schemas_sessions import SessionIn, SessionOut, SessionsIn, SessionsOut
from app.core.context import CallContext
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
