"""app/analysis/cli.py: `cairn analysis sweep` deletes what expired and says how much; the demo
upstream's sub-command takes its options."""

from __future__ import annotations

import pytest

from app.analysis.repository import AnalysisRepository
from app.cli import build_parser, runtime
from app.core.config import Settings
from app.core.db import Database
from tests.support.databases import migrated_url
from tests.support.server import PgCluster


def test_sweep_deletes_the_expired_rows_and_reports_them(pg: PgCluster, capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(database_url=migrated_url(pg, ["analysis"]), features=["analysis"])
    rt = runtime(settings, light=False)

    async def seed(db: Database) -> None:
        async with db.transaction() as session:
            repo = AnalysisRepository(session)
            pid = await repo.ensure_project("default")
            await repo.upsert_records(pid, "old", "book", 1, [("1", {"id": 1}), ("2", {"id": 2})], -1)
            await repo.upsert_records(pid, "new", "book", 1, [("3", {"id": 3})], 3600)

    rt.run(seed)  # upgrades first: a migrated clone is already at head
    args = build_parser().parse_args(["analysis", "sweep"])
    args.runtime = rt
    assert args.fn(args) == 0
    assert capsys.readouterr().out.strip() == (
        "analysis_records: 2 deleted, analysis_findings: 0 deleted, analysis_ingest_state: 0 deleted"
    )
    assert args.fn(args) == 0
    assert "analysis_records: 0 deleted" in capsys.readouterr().out


def test_the_demo_upstream_takes_its_options() -> None:
    args = build_parser().parse_args(["analysis", "demo-upstream", "--port", "8123", "--books", "40", "--token", "t"])
    assert (args.host, args.port, args.books, args.token) == ("127.0.0.1", 8123, 40, "t")
    assert args.fn.__name__ == "cmd_demo_upstream"
