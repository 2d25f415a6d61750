"""Which path a call's statements take: the driver (`app.core.db.DriverSession`) or SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import event

from app.core.db import Database, DriverSession


@dataclass
class Paths:
    """The statements run on the driver and through SQLAlchemy since the last `clear`."""

    on_driver: list[str] = field(default_factory=list)
    through_sqlalchemy: list[str] = field(default_factory=list)

    def clear(self) -> None:
        self.on_driver.clear()
        self.through_sqlalchemy.clear()


@contextmanager
def statement_paths(db: Database, monkeypatch: pytest.MonkeyPatch) -> Iterator[Paths]:
    """Record, for the block, every statement `db` runs and the path it takes."""
    paths = Paths()
    run_on_driver = DriverSession.execute
    pool = db.engine.sync_engine.pool

    async def counted(self: DriverSession, statement: Any, params: Any = None) -> Any:
        # The patch is on the class: only `db`'s sessions count, not those of other databases' work
        # still running in this process (an embedding queue's poll, a mover's copy).
        if self.pool is pool:
            paths.on_driver.append(str(statement))
        return await run_on_driver(self, statement, params)

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        paths.through_sqlalchemy.append(statement)

    monkeypatch.setattr(DriverSession, "execute", counted)
    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield paths
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
        monkeypatch.setattr(DriverSession, "execute", run_on_driver)
