"""app/core/runtime.py: a coroutine run to the end from any thread (inside a running loop too), a
feature's settings read once, and the configured database opened, upgraded and closed for a command."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy import text

from app.core import migrations
from app.core.config import Settings
from app.core.db import Database
from app.core.runtime import Runtime, run_blocking
from app.memory.config import MemorySettings
from tests.support.server import PgCluster


async def test_run_blocking_runs_on_its_own_loop_even_inside_a_running_one() -> None:
    outer = asyncio.get_running_loop()
    seen: dict[str, object] = {}

    async def work() -> int:
        seen["loop"] = asyncio.get_running_loop()
        seen["thread"] = threading.current_thread().name
        await asyncio.sleep(0)
        return 42

    assert run_blocking(work) == 42
    assert seen["loop"] is not outer and seen["thread"] == "cairn-blocking"


def test_run_blocking_raises_what_the_coroutine_raised() -> None:
    async def failing() -> None:
        raise LookupError("no such thing")

    with pytest.raises(LookupError, match="no such thing"):
        run_blocking(failing)


def test_settings_of_reads_a_features_settings_once(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = Runtime(settings=Settings(), features=["memory"])
    monkeypatch.setenv("CAIRN_MEMORY_CHUNK_TOKENS", "100")
    first = runtime.settings_of(MemorySettings)
    monkeypatch.setenv("CAIRN_MEMORY_CHUNK_TOKENS", "128")
    assert runtime.settings_of(MemorySettings) is first and first.memory_chunk_tokens == 100
    given = MemorySettings(memory_chunk_tokens=300)
    assert Runtime(Settings(), ["memory"], {MemorySettings: given}).settings_of(MemorySettings) is given


def test_run_opens_the_configured_database_upgraded_for_the_enabled_features(pg: PgCluster) -> None:
    url = pg.handle.url(pg.new_database())
    runtime = Runtime(settings=Settings(database_url=url), features=[])

    async def tables(db: Database) -> set[str]:
        async with db.transaction() as session:
            rows = await session.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
            return {str(r[0]) for r in rows}

    assert runtime.run(tables, migrate=False) == set()  # nothing upgraded when told not to
    made = runtime.run(tables)
    assert {"projects", "api_keys"} <= made and not any(t.startswith("memor") for t in made)
    assert run_blocking(lambda: migrations.at_head(url, []))
    with runtime.database_url(migrate=False) as same:
        assert same == url  # a configured database is used as it is: no embedded cluster started
