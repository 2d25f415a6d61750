"""Expiry housekeeping: the boot-time sweep and the optional background sweep.

Expired rows are also evicted on access by every analysis tool; these functions clean up sessions
nobody touches any more. The server calls `startup` (a sweep at boot, then the optional background
sweeper) and `shutdown` as the feature's lifespan hooks (`FEATURE` in `app/analysis/__init__.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.analysis.config import AnalysisSettings
from app.analysis.repository import AnalysisRepository
from app.core.context import AppState, feature_settings_of
from app.core.db import Database

log = logging.getLogger("cairn.analysis.lifecycle")


async def sweep_expired(db: Database, batch: int = 10_000) -> dict[str, int]:
    """Delete every expired record, ephemeral finding, ingest state and act run; returns counts per table."""
    totals = {"analysis_records": 0, "analysis_findings": 0, "analysis_ingest_state": 0, "analysis_act_runs": 0}
    while True:
        async with db.transaction() as session:
            counts = await AnalysisRepository(session).evict_expired(batch)
        for table, n in counts.items():
            totals[table] += n
        if all(n < batch for n in counts.values()):
            break
    if any(totals.values()):
        log.info("analysis sweep", extra={"deleted": totals})
    return totals


async def background_sweeper(db: Database, interval: float) -> None:
    """Sweep every `interval` seconds (CAIRN_ANALYSIS_SWEEP_INTERVAL_SECONDS; 0 disables)."""
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        try:
            await sweep_expired(db)
        except Exception:  # keep sweeping after a transient database error
            log.warning("analysis sweep failed", exc_info=True)


async def startup(state: AppState) -> None:
    """Boot sweep, then the background sweeper (a no-op unless its interval is set)."""
    try:
        await sweep_expired(state.db)
    except Exception:  # a failed sweep must not keep the server from starting
        log.warning("analysis boot sweep failed", exc_info=True)
    interval = feature_settings_of(state.feature_settings, AnalysisSettings).sweep_interval_seconds
    state.extras["analysis_sweeper"] = asyncio.create_task(background_sweeper(state.db, interval))


async def shutdown(state: AppState) -> None:
    """Stop the background sweeper."""
    task = state.extras.pop("analysis_sweeper", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
