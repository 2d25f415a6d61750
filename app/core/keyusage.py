"""When stored API keys were last used, kept off the call path: a key lookup only notes the time in
memory (`KeyUsage.record`), and a background task of the process writes every noted time in one
statement every `interval` seconds and once more when the server stops (`KeyUsage.running`).

`keys list` therefore shows a key's last use at most `interval` seconds late (plus the flush itself);
a process killed with SIGKILL loses at most its last interval of notes, and a failed write keeps them
for the next try."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.db import Database
from app.core.repository import ApiKeyRepository

log = logging.getLogger("cairn.auth")


class KeyUsage:
    """Last-use times of stored keys noted since the last flush."""

    def __init__(self, db: Database, interval: float = 30.0) -> None:
        self.db, self.interval = db, interval
        self._pending: dict[uuid.UUID, datetime] = {}

    def record(self, key_id: uuid.UUID, at: datetime | None = None) -> None:
        """Note that the key was used (now, or `at`); no I/O."""
        when = at or datetime.now(UTC)
        known = self._pending.get(key_id)
        if known is None or when > known:
            self._pending[key_id] = when

    @property
    def pending(self) -> int:
        """How many keys have a use not yet written."""
        return len(self._pending)

    async def flush(self) -> int:
        """Write every noted time in one statement; returns how many keys were written. On failure the
        notes are kept (merged with newer ones) and the error is raised."""
        if not self._pending:
            return 0
        batch, self._pending = self._pending, {}

        async def write(session: AsyncSession) -> int:
            return await ApiKeyRepository(session).touch_many(batch)

        try:
            return await self.db.run(write)
        except BaseException:
            for key_id, at in batch.items():
                self.record(key_id, at)
            raise

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.flush()
            except Exception as exc:
                log.warning("could not record API key use (kept for the next try): %s", type(exc).__name__)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Flush every `interval` seconds while the block runs, and once more after it."""
        task = asyncio.create_task(self._loop(), name="cairn-key-usage")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            try:
                await self.flush()
            except Exception as exc:
                log.warning("could not record API key use at shutdown: %s", type(exc).__name__)
