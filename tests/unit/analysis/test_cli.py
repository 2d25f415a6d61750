"""app/analysis/cli.py: `cairn analysis sweep` deletes what expired and says how much; the demo
upstream's sub-command takes its options."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.analysis.catalog import load_catalog
from app.analysis.cli import demo_registry
from app.analysis.config import DEMO_REGISTRY
from app.analysis.repository import AnalysisRepository
from app.cli import build_parser, runtime
from app.core.config import Settings
from app.core.db import Database
from tests.support.databases import migrated_url
from tests.support.server import PgCluster
from tests.support.waiting import eventually_sync


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
        "analysis_records: 2 deleted, analysis_findings: 0 deleted, analysis_ingest_state: 0 deleted, "
        "analysis_act_runs: 0 deleted"
    )
    assert args.fn(args) == 0
    assert "analysis_records: 0 deleted" in capsys.readouterr().out


def test_the_demo_upstream_takes_its_options() -> None:
    args = build_parser().parse_args(["analysis", "demo-upstream", "--port", "8123", "--books", "40", "--token", "t"])
    assert (args.host, args.port, args.books, args.token) == ("127.0.0.1", 8123, 40, "t")
    assert args.fn.__name__ == "cmd_demo_upstream"


def test_the_demo_registry_names_the_port_it_serves_on(tmp_path: Path) -> None:
    assert demo_registry("127.0.0.1", 8100, tmp_path) == DEMO_REGISTRY
    assert list(tmp_path.iterdir()) == []
    other = demo_registry("127.0.0.1", 8203, tmp_path)
    assert other.parent == tmp_path
    assert load_catalog(other).model("book").upstream.base_url == "http://127.0.0.1:8203/api"
    assert load_catalog(DEMO_REGISTRY).model("book").upstream.base_url == "http://127.0.0.1:8100/api"
    wildcard = demo_registry("0.0.0.0", 8204, tmp_path)
    assert load_catalog(wildcard).model("book").upstream.base_url == "http://127.0.0.1:8204/api"


@pytest.mark.slow
def test_cairn_analysis_demo_upstream_prints_a_registry_that_reaches_it(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")} | {"CAIRN_DATA_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "app", "analysis", "demo-upstream", "--port", str(port), "--books", "20"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        registry = Path(lines[1].strip().removeprefix("registry for it: CAIRN_ANALYSIS_UPSTREAMS="))
        url = load_catalog(registry).model("book").upstream.base_url
        assert url == f"http://127.0.0.1:{port}/api"

        def books() -> Any:
            return httpx.get(f"{url}/books", timeout=5).json()

        answer = eventually_sync(books, timeout=60, errors=(httpx.TransportError,), what="the demo upstream")
        assert answer["total"] == 20
    finally:
        proc.terminate()
        proc.wait(timeout=30)
