"""app/analysis/service_runs.py with a real call context on a database of its own: a session's act
runs newest first, cut to the reply budget with the cut named (older runs by offset, ids past the first
20 by run_id), one run with its ids paged, and a run that is not there refused."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime

import pytest

from app.analysis.config import AnalysisSettings
from app.analysis.repository import AnalysisRepository
from app.analysis.repository_runs import ActRunRepository, RunRecord
from app.analysis.schemas_runs import ActRunsIn
from app.analysis.service_runs import LIST_IDS, act_runs
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.errors import NotFound
from tests.support.calls import service_call
from tests.support.databases import database_fixture

READER = Principal(key_id="r", name="reader", scopes=frozenset({"read"}))
db = database_fixture(["analysis"])


def call(db: Database, max_tokens: int = 6000) -> AbstractAsyncContextManager[CallContext]:
    settings = AnalysisSettings(max_response_tokens=max_tokens)
    return service_call(db, READER, feature_settings={AnalysisSettings: settings})


async def seed(db: Database, aid: str, runs: int, failed: int) -> None:
    async with db.transaction() as s:
        pid = await AnalysisRepository(s).ensure_project("lab")
        for n in range(runs):
            ids = [f"r{n}-{i}" for i in range(failed)]
            rec = RunRecord(
                analysis_id=aid,
                model="parcel",
                action="delete",
                where=None,
                attributes=None,
                state="finished",
                key_id="k",
                key_name="ops",
                transport="rest",
                started_at=datetime(2026, 1, 1, tzinfo=UTC),
                counts={"total": failed + 1, "succeeded": 1, "failed": failed},
                failed_ids=ids,
            )
            await ActRunRepository(s).insert(pid, rec, 3600)


async def test_runs_are_listed_and_every_cut_is_named(db: Database) -> None:
    await seed(db, "audit", 3, 25)
    async with call(db) as ctx:
        out = await act_runs(ctx, ActRunsIn(project="lab", analysis_id="audit", limit=2))
    assert out.total == 3 and len(out.runs) == 2 and out.next_offset == 2
    assert all(len(r.failed_ids) == LIST_IDS and r.failed_ids_total == 25 for r in out.runs)
    assert out.cut is not None and out.cut.next_call is not None
    assert out.cut.next_call.tool == "analysis_act_runs" and out.cut.next_call.args == {"offset": 2}
    assert out.cut.left_out.startswith("1 older run(s); failed or unknown ids past the first 20 of run(s)")
    assert out.cut.how == f"analysis_act_runs with run_id {out.runs[0].run_id}, offset 0"
    async with call(db, 200) as ctx:  # the smallest budget: one run shown, the rest named
        tight = await act_runs(ctx, ActRunsIn(project="lab", analysis_id="audit"))
    assert len(tight.runs) == 1 and tight.cut is not None and "(CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS)" in tight.cut.reason
    async with call(db) as ctx:
        empty = await act_runs(ctx, ActRunsIn(project="nowhere", analysis_id="audit"))
    assert empty.total == 0 and empty.runs == [] and empty.cut is None


async def test_one_run_pages_through_its_ids(db: Database) -> None:
    await seed(db, "single", 1, 25)
    async with call(db) as ctx:
        (first,) = (await act_runs(ctx, ActRunsIn(project="lab", analysis_id="single", limit=100))).runs
        one = await act_runs(ctx, ActRunsIn(project="lab", analysis_id="single", run_id=first.run_id, limit=10))
        assert [r.failed_ids for r in one.runs] == [[f"r0-{i}" for i in range(10)]]
        assert one.next_offset == 10 and one.cut is not None and one.cut.next_call is not None
        assert one.cut.next_call.tool == "analysis_act_runs" and one.cut.next_call.args == {"offset": 10}
        assert "by key 'ops' over rest" in one.message
        last = await act_runs(
            ctx, ActRunsIn(project="lab", analysis_id="single", run_id=first.run_id, limit=10, offset=20)
        )
        assert len(last.runs[0].failed_ids) == 5 and last.next_offset is None and last.cut is None
        with pytest.raises(NotFound, match="No act run"):
            await act_runs(ctx, ActRunsIn(project="lab", analysis_id="single", run_id=10**9))
