"""Backfill outside the tools: `cairn backfill` (a real subprocess), the background runner and its
settings; and abstractive summaries through an OpenAI-compatible chat API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx

from app.core.config import Settings
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.memory.config import MemorySettings
from app.memory.lifecycle import BackfillRunner
from tests.support.fake_embedder import FakeEmbeddingServer
from tests.support.memory import NOTES, api, seed_notes
from tests.support.server import PgCluster, RunningServer, overridden

ROOT = Path(__file__).resolve().parents[2]


async def _drop_vectors(pg: PgCluster) -> None:
    conn = await asyncpg.connect(pg.handle.libpq_uri(pg.database))
    try:
        await conn.execute("DELETE FROM memory_embeddings")
    finally:
        await conn.close()


async def test_cli_backfill(server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster) -> None:
    await seed_notes(rest, project="cli")
    await _drop_vectors(pg)
    env = {**os.environ, "CAIRN_DATABASE_URL": pg.url, "CAIRN_LOG_LEVEL": "WARNING"}
    cmd = [sys.executable, "-m", "app", "backfill", "--project", "cli", "--batch-size", "2"]
    dry = await asyncio.to_thread(
        subprocess.run, [*cmd, "--dry-run"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout.strip().splitlines()[-1])["scanned"] == len(NOTES)
    done = await asyncio.to_thread(subprocess.run, cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["queued"] == out["embedded"] == len(NOTES) and out["waiting"] == 0
    assert out["model"] == "all-MiniLM-L6-v2"
    assert "embed all-MiniLM-L6-v2" in done.stderr  # the progress bar's last line
    stats = await api(rest, "/thoughts/stats", {"project": "cli"}, method="GET")
    assert stats["missing_embeddings"] == 0


async def test_cli_backfill_names_the_provider_failure(
    server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster
) -> None:
    await seed_notes(rest, project="cli-down")
    with FakeEmbeddingServer("minilm-gone") as fake:
        url = fake.base_url  # the provider answered once; it is stopped before the backfill runs
    env = {
        **os.environ,
        "CAIRN_DATABASE_URL": pg.url,
        "CAIRN_LOG_LEVEL": "WARNING",
        "CAIRN_EMBEDDING_PROVIDER": "openai",
        "CAIRN_EMBEDDING_BASE_URL": url,
        "CAIRN_EMBEDDING_MODEL": "minilm-gone",
        "CAIRN_EMBEDDING_DIMENSION": "384",
        "CAIRN_EMBEDDING_TIMEOUT": "2",
    }
    cmd = [sys.executable, "-m", "app", "backfill", "--project", "cli-down"]
    done = await asyncio.to_thread(subprocess.run, cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr  # vectors still wait
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["queued"] == out["waiting"] == out["failed"] == len(NOTES) and out["embedded"] == 0, out
    failing = out["embedding"]
    assert failing["status"] == "pending" and "ConnectError" in failing["provider_error"], failing
    assert failing["failing_since"] and failing["waiting"] == failing["failed"] == len(NOTES)


async def test_background_runner(server: RunningServer, rest: httpx.AsyncClient, pg: PgCluster) -> None:
    await seed_notes(rest, project="runner")
    await _drop_vectors(pg)
    settings = Settings(database_url=pg.url)
    db = Database(pg.url, settings)
    embedder = LocalOnnxEmbedder()
    cfg = MemorySettings(
        backfill_enabled=True,
        backfill_run_on_startup=True,
        backfill_interval="0.2s",
        backfill_batch_size=2,
        backfill_max_per_run=3,
    )
    runner = BackfillRunner(db, embedder.model, cfg)  # it queues; the server's queue workers embed
    try:
        runner.start()
        for _ in range(100):
            await asyncio.sleep(0.1)
            stats = await api(rest, "/thoughts/stats", {"project": "runner"}, method="GET")
            if stats["missing_embeddings"] == 0:
                break
        assert stats["missing_embeddings"] == 0
        assert runner.runs >= 2  # 5 memories, at most 3 per run
    finally:
        await runner.stop()
        await embedder.close()
        await db.dispose()
    disabled = BackfillRunner(db, embedder.model, MemorySettings())
    disabled.start()
    assert disabled._task is None


async def test_abstractive_summary_through_openai_compatible_chat(
    server: RunningServer, rest: httpx.AsyncClient
) -> None:
    await seed_notes(rest, project="abs")
    now = datetime.now(UTC)
    window = {"start": (now - timedelta(hours=1)).isoformat(), "end": (now + timedelta(hours=1)).isoformat()}
    with FakeEmbeddingServer() as fake:
        with overridden(
            server, MemorySettings, summary_provider="openai", summary_base_url=fake.base_url, summary_model="tiny-chat"
        ):
            auto = await api(rest, "/memory/summarize", {"project": "abs", "time_range": window})
            assert auto["strategy"] == "abstractive" and auto["provider"] == "openai" and auto["model"] == "tiny-chat"
            assert auto["summary"] == "Abstract summary by tiny-chat."
            assert "database migration timed out" in fake.prompts[-1]
            thoughts = await api(
                rest, "/thoughts/summarize", {"project": "abs", "strategy": "abstractive", "model": "other-chat"}
            )
            assert thoughts["summary"] == "Abstract summary by other-chat."
        # Nothing listens on port 9.
        with overridden(
            server,
            MemorySettings,
            summary_provider="openai",
            summary_base_url="http://127.0.0.1:9/v1",
            summary_model="tiny-chat",
        ):
            fallback = await api(rest, "/memory/summarize", {"project": "abs", "time_range": window})
            assert fallback["strategy"] == "extractive"  # auto falls back when the provider fails
            err = await api(
                rest,
                "/memory/summarize",
                {"project": "abs", "time_range": window, "strategy": "abstractive"},
                status=502,
            )
            assert err["error"]["code"] == 5020
