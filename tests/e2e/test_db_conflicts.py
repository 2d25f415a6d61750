"""A call's transaction that PostgreSQL fails to break a deadlock runs again (`Database.run`), so two
writers locking the same rows in opposite orders both succeed; work with outside effects does not."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.db import Database, sqlstate
from tests.support.server import PgCluster, server_settings

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _deadlocking_pair(db: Database, retry: bool) -> tuple[list[BaseException | None], Counter[str]]:
    """Two transactions: each updates one row, waits until the other has updated its row, then updates
    the other's row. On their first run this is a deadlock, which PostgreSQL breaks by failing one."""
    runs: Counter[str] = Counter()
    first = {"a": asyncio.Event(), "b": asyncio.Event()}

    def writer(mine: str, theirs: str) -> Callable[[AsyncSession], Awaitable[None]]:
        async def work(session: AsyncSession) -> None:
            runs[mine] += 1
            await session.execute(text("UPDATE conflict_rows SET n = n + 1 WHERE k = :k"), {"k": mine})
            if runs[mine] == 1:
                first[mine].set()
                await first[theirs].wait()
            await session.execute(text("UPDATE conflict_rows SET n = n + 1 WHERE k = :k"), {"k": theirs})

        return work

    outcomes = await asyncio.gather(
        db.run(writer("a", "b"), retry=retry), db.run(writer("b", "a"), retry=retry), return_exceptions=True
    )
    return [o if isinstance(o, BaseException) else None for o in outcomes], runs


async def test_a_deadlocked_transaction_runs_again_and_both_writers_succeed(pg: PgCluster) -> None:
    url = pg.handle.url(pg.new_database())
    db = Database(url, server_settings(url))
    try:
        async with db.transaction() as session:
            await session.execute(text("CREATE TABLE conflict_rows (k text PRIMARY KEY, n int NOT NULL)"))
            await session.execute(text("INSERT INTO conflict_rows VALUES ('a', 0), ('b', 0)"))

        errors, runs = await _deadlocking_pair(db, retry=True)
        assert errors == [None, None]
        assert sorted(runs.values()) == [1, 2]  # the one PostgreSQL failed ran again
        async with db.transaction() as session:
            rows = (await session.execute(text("SELECT k, n FROM conflict_rows"))).all()
        counts = {str(k): int(n) for k, n in rows}
        assert counts == {"a": 2, "b": 2}  # each writer's two updates, once: nothing of the failed run

        # Work with effects outside the database is not run again: the deadlock reaches the caller.
        errors, runs = await _deadlocking_pair(db, retry=False)
        failed = [e for e in errors if e is not None]
        assert len(failed) == 1 and isinstance(failed[0], DBAPIError) and sqlstate(failed[0]) == "40P01"
        assert sorted(runs.values()) == [1, 1]
    finally:
        await db.dispose()
