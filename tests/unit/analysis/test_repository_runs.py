"""app/analysis/repository_runs.py on a database of its own: a run stored with what it did, by whom and
how it went; a session's live runs newest first with their count (expired ones and other sessions left
out); one run read back, and its failed and unknown ids sliced."""

from __future__ import annotations

from datetime import UTC, datetime

from app.analysis.repository import AnalysisRepository
from app.analysis.repository_runs import ActRunRepository, RunRecord
from app.core.db import Database
from tests.support.databases import database_fixture

db = database_fixture(["analysis"])


def record(aid: str, failed: list[str], state: str = "finished") -> RunRecord:
    return RunRecord(
        analysis_id=aid,
        model="parcel",
        action="update",
        where={"status": "lost"},
        attributes={"status": "found"},
        state=state,
        key_id="k1",
        key_name="ops",
        transport="mcp",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        counts={"total": 3 + len(failed), "succeeded": 3, "failed": len(failed), "already_done": 1},
        failed_ids=failed,
        unknown_ids=["u1"],
        errors=[{"record_id": f, "status_code": 409, "message": "locked"} for f in failed[:5]],
    )


async def test_runs_are_stored_listed_newest_first_and_their_ids_sliced(db: Database) -> None:
    async with db.transaction() as s:
        pid = await AnalysisRepository(s).ensure_project("lab")
        repo = ActRunRepository(s)
        first = await repo.insert(pid, record("audit", [f"p{i}" for i in range(30)]), 3600)
        second = await repo.insert(pid, record("audit", [], "interrupted"), 3600)
        await repo.insert(pid, record("other", ["x"]), 3600)
        await repo.insert(pid, record("audit", ["old"]), -1)  # expired
        rows, total = await repo.runs(pid, "audit", 10, 0)
        assert total == 2 and [r["id"] for r in rows] == [second, first]
        assert (rows[1]["failed_ids_total"], rows[1]["unknown_ids_total"], rows[0]["failed_ids_total"]) == (30, 1, 0)
        assert (rows[1]["key_name"], rows[1]["transport"], rows[1]["where"]) == ("ops", "mcp", {"status": "lost"})
        assert (rows[1]["total"], rows[1]["succeeded"], rows[1]["failed"], rows[1]["already_done"]) == (33, 3, 30, 1)
        assert rows[0]["state"] == "interrupted" and rows[1]["errors"][0]["status_code"] == 409
        page, _ = await repo.runs(pid, "audit", 1, 1)
        assert [r["id"] for r in page] == [first]
        assert await repo.run_ids(pid, "audit", first, "failed", 5, 0) == ["p0", "p1", "p2", "p3", "p4"]
        assert await repo.run_ids(pid, "audit", first, "failed", 5, 28) == ["p28", "p29"]
        assert await repo.run_ids(pid, "audit", first, "unknown", 5, 0) == ["u1"]
        assert await repo.run_ids(pid, "other", first, "failed", 5, 0) is None  # another session's run
        one = await repo.run(pid, "audit", first)
        assert one is not None and one["attributes"] == {"status": "found"}
        assert await repo.run(pid, "audit", 10**9) is None
        assert (await AnalysisRepository(s).evict_expired())["analysis_act_runs"] == 1
