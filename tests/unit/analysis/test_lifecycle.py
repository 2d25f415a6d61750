"""app/analysis/lifecycle.py on a database of its own: the sweep deletes what expired (in as many
batches as it takes) and nothing live, the background sweeper repeats it, and the feature's start and
stop hooks own that task."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import cast

import pytest
from sqlalchemy import text

from app.analysis import lifecycle
from app.analysis.config import AnalysisSettings
from app.analysis.repository import AnalysisRepository
from app.core.context import AppState
from app.core.db import Database
from tests.support.databases import database_fixture
from tests.support.waiting import eventually

TABLES = ("analysis_records", "analysis_findings", "analysis_ingest_state", "analysis_act_runs")


db = database_fixture(["analysis"], scope="function")


async def _seed(db: Database, aid: str, records: int, findings: int, seconds: float) -> None:
    """`records` records, an ingest state and `findings` ephemeral findings of session `aid` that
    expire `seconds` from now (negative: already expired), and one persistent finding."""
    async with db.transaction() as session:
        repo = AnalysisRepository(session)
        pid = await repo.ensure_project("default")
        rows: list[tuple[str | None, dict[str, object]]] = [(str(i), {"id": i}) for i in range(records)]
        await repo.upsert_records(pid, aid, "book", 1, rows, seconds)
        await repo.save_state(pid, aid, f"{aid}-state", "book", {}, None, 1, False, None, seconds)
        items = [{"category": "note", "finding": f"{aid} finding {i}"} for i in range(findings)]
        await repo.insert_findings(pid, aid, items, False, seconds)
        await repo.insert_findings(pid, aid, [{"category": "note", "finding": f"{aid} kept"}], True, seconds)


async def _counts(db: Database) -> dict[str, int]:
    async with db.transaction() as session:
        return {t: int(await session.scalar(text(f"SELECT count(*) FROM {t}")) or 0) for t in TABLES}


async def test_the_sweep_deletes_only_what_expired_in_as_many_batches_as_needed(db: Database) -> None:
    await _seed(db, "gone", records=7, findings=5, seconds=-1)
    await _seed(db, "live", records=3, findings=2, seconds=3600)
    assert await lifecycle.sweep_expired(db, batch=2) == {
        "analysis_records": 7,
        "analysis_findings": 5,  # the persistent one never expires
        "analysis_ingest_state": 1,
        "analysis_act_runs": 0,
    }
    assert await _counts(db) == {
        "analysis_records": 3,
        "analysis_findings": 2 + 1 + 1,
        "analysis_ingest_state": 1,
        "analysis_act_runs": 0,
    }
    assert await lifecycle.sweep_expired(db) == dict.fromkeys(TABLES, 0)  # nothing left to sweep


async def test_the_background_sweeper_sweeps_until_stopped(db: Database) -> None:
    idle = asyncio.create_task(lifecycle.background_sweeper(db, 0))  # 0: no sweeper at all
    await asyncio.wait_for(idle, 5)
    assert idle.done() and idle.exception() is None
    state = cast(AppState, SimpleNamespace(db=db, extras={}, feature_settings={AnalysisSettings: AnalysisSettings()}))
    await _seed(db, "before-boot", records=2, findings=1, seconds=-1)
    await lifecycle.startup(state)  # the boot sweep, then the sweeper (off unless its interval is set)
    assert await _counts(db) == {
        "analysis_records": 0,
        "analysis_findings": 1,
        "analysis_ingest_state": 0,
        "analysis_act_runs": 0,
    }
    await lifecycle.shutdown(state)
    assert "analysis_sweeper" not in state.extras
    sweeper = asyncio.create_task(lifecycle.background_sweeper(db, 0.05))
    try:
        await _seed(db, "later", records=4, findings=2, seconds=-1)
        await eventually(_swept(db), what="the later expired rows swept by the sweeper")
        assert not sweeper.done()
    finally:
        sweeper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sweeper


def _swept(db: Database) -> Callable[[], Awaitable[bool]]:
    """The later session's expired rows are gone (every session's persistent finding stays)."""

    async def check() -> bool:
        return await _counts(db) == {
            "analysis_records": 0,
            "analysis_findings": 2,
            "analysis_ingest_state": 0,
            "analysis_act_runs": 0,
        }

    return check
