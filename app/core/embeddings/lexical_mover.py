"""The lexical mover: copies rows listed as pending into the side table of their lexical index.

A lexical index kept in a side table (`LexicalIndex.side`, `app.core.embeddings.lexical`) spares
writes the HNSW insert; the rows they list as pending are copied here, in the background, in batches
of `BATCH` rows (`LexicalMoveRepository.move`: one statement, which leaves listed a row that changed
again meanwhile). Every server runs one mover task for the features' side-table indexes; a
transaction-level advisory lock per index lets one host at a time copy (`take_turn`), so hosts never
copy the same rows twice or wait on each other's row locks.

The mover also keeps the side table's planner statistics current: once it has copied more than a
tenth of the table (at least `ANALYZE_ROWS` rows) since its last look, it runs `ANALYZE` on it when
the list is empty. Without statistics for a fresh bulk of rows the planner guesses that a project
holds a handful of them, and scans and sorts them all instead of walking the HNSW index; autovacuum
would only correct that within its own minute. For the same reason it vacuums the pending list once
it has emptied it of at least `ANALYZE_ROWS` rows: every search reads the list whole, dead rows
included (on the driver only: behind a transaction pooler that is left to autovacuum).

Search never waits for the mover (pending rows are scored exactly), so a mover behind costs only
search time, in proportion to the pending rows. Like the embedding queue's workers, the mover gives
way to the process's calls: while calls are in flight (`app.core.embeddings.load`) it holds back, for
at most `embedding_queue_defer_seconds` counted from the oldest pending row's listing, and not at all
once `HOLD_ROWS` rows wait (then a pending scan would cost every search more than the copy costs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge

from app.core.embeddings.lexical import LexicalIndex
from app.core.embeddings.load import LOAD, Load
from app.core.embeddings.repository_lexical import LexicalMoveRepository, PendingState

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.core.config import Settings
    from app.core.db import Database

log = logging.getLogger("cairn.lexical_mover")

ROWS_MOVED = Counter("cairn_lexical_rows_moved_total", "Rows copied into the side table of their lexical index")
ROWS_PENDING = Gauge(
    "cairn_lexical_rows_pending",
    "Rows waiting to be copied into the side table of their lexical index",
    ["table"],
    multiprocess_mode="livemostrecent",  # every host reads the same shared list
)

BATCH = 256  # rows per copy statement: about a tenth of a second of HNSW inserts
HOLD_ROWS = 20_000  # with this many rows waiting, the mover no longer gives way to calls
POLL_SECONDS = 1.0  # how often an idle mover looks for rows (writes list them by trigger, on any host)
QUIET_SECONDS = 0.05  # as the embedding queue: a shorter gap between calls is one client's think time
ANALYZE_ROWS = 1_000  # the fewest copied rows that make the mover refresh the side table's statistics


class LexicalMover:
    """Copies the pending rows of `indexes` (each with a side table) into their side tables."""

    def __init__(self, db: Database, indexes: Sequence[LexicalIndex], settings: Settings, load: Load = LOAD) -> None:
        for index in indexes:
            if index.side is None:
                raise ValueError(f"{index.table}: its lexical index has no side table to move rows into")
        self.db = db
        self.indexes = list(indexes)
        self.settings = settings
        self.load = load
        self._task: asyncio.Task[None] | None = None
        self._last_warning = 0.0
        self._copied: dict[str, int] = {}  # rows copied per side table since its statistics were refreshed
        self._weighed: dict[str, int] = {}  # the `_copied` last found under a tenth of the table
        self._dropped: dict[str, int] = {}  # rows dropped from each pending list since it was vacuumed

    async def pending(self, index: LexicalIndex) -> PendingState:
        """The index's pending rows (count and oldest age; also set as a metric)."""
        async with self.db.transaction(one_statement=True) as session:
            state = await LexicalMoveRepository(session).pending_state(index)
        ROWS_PENDING.labels(index.table).set(state.rows)
        return state

    async def move_batch(self, index: LexicalIndex, limit: int = BATCH) -> int | None:
        """Copy one batch of the index's pending rows; the rows copied, or None when another host is
        copying this index's rows now."""

        async def work(session: AsyncSession) -> int | None:
            repo = LexicalMoveRepository(session)
            if not await repo.take_turn(index):
                return None
            return await repo.move(index, limit)

        moved = await self.db.run(work, plain=True)
        if moved:
            ROWS_MOVED.inc(moved)
            assert index.side is not None
            self._copied[index.side] = self._copied.get(index.side, 0) + moved
            self._dropped[index.side] = self._dropped.get(index.side, 0) + moved
        if moved is not None and moved < limit:  # the list is empty (or nearly): a moment to tidy up
            await self.refresh_statistics(index)
            await self.vacuum_pending(index)
        return moved

    async def vacuum_pending(self, index: LexicalIndex) -> bool:
        """`VACUUM` the pending list once at least `ANALYZE_ROWS` rows were dropped from it since this
        mover last did (on the driver only, where a statement runs outside a transaction); whether it did."""
        assert index.side is not None
        if self._dropped.get(index.side, 0) < ANALYZE_ROWS or not self.db.on_driver:
            return False
        await self.db.run(lambda session: LexicalMoveRepository(session).vacuum_pending(index), one_statement=True)
        self._dropped[index.side] = 0
        return True

    async def refresh_statistics(self, index: LexicalIndex) -> bool:
        """`ANALYZE` the side table when this mover copied more than a tenth of it (and at least
        `ANALYZE_ROWS` rows) since it last did; whether it did."""
        assert index.side is not None
        copied = self._copied.get(index.side, 0)
        # An idle mover comes here once a second: the table's size is read again only after new copies.
        if copied < ANALYZE_ROWS or copied == self._weighed.get(index.side):
            return False
        async with self.db.transaction() as session:
            repo = LexicalMoveRepository(session)
            if copied < 0.1 * await repo.side_rows(index):
                self._weighed[index.side] = copied
                return False
            await repo.analyze(index)
        self._copied[index.side] = 0
        self._weighed.pop(index.side, None)
        log.info("refreshed the statistics of %s after copying %d rows", index.side, copied)
        return True

    async def give_way(self, index: LexicalIndex) -> float:
        """While the process answers calls, wait for a quiet moment, at most until the oldest pending
        row is `embedding_queue_defer_seconds` old, and not at all once `HOLD_ROWS` rows wait. Returns
        the seconds waited."""
        defer = self.settings.embedding_queue_defer_seconds
        if defer <= 0 or not self.load.busy(QUIET_SECONDS):
            return 0.0
        state = await self.pending(index)
        if state.oldest_seconds is None or state.rows >= HOLD_ROWS:
            return 0.0
        started = time.monotonic()
        until = started + max(0.0, defer - state.oldest_seconds)
        while True:  # polled: "quiet" is the absence of calls for a while, not an event
            left = until - time.monotonic()
            if left <= 0 or not self.load.busy(QUIET_SECONDS):
                break
            await asyncio.sleep(min(QUIET_SECONDS, left))
        return time.monotonic() - started

    async def drain(self, timeout: float) -> int:
        """Copy every pending row of every index now, without giving way, until none waits or `timeout`
        passes; returns the rows still waiting."""
        deadline = time.monotonic() + timeout
        while True:
            waiting = 0
            for index in self.indexes:
                waiting += (await self.pending(index)).rows
            if waiting == 0 or time.monotonic() >= deadline:
                return waiting
            for index in self.indexes:
                if not await self.move_batch(index):
                    await asyncio.sleep(0.05)  # another host holds the turn, or nothing was left

    async def _work(self) -> None:
        failures = 0
        while True:
            moved = 0
            try:
                for index in self.indexes:
                    await self.give_way(index)
                    moved += await self.move_batch(index) or 0
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a database outage: the rows stay listed; try again later
                failures += 1
                self._warn(exc)
                await asyncio.sleep(min(30.0, 0.25 * 2**failures))
                continue
            if not moved:
                with contextlib.suppress(Exception):  # the gauge only; the next round reports a failure
                    for index in self.indexes:
                        await self.pending(index)
                await asyncio.sleep(POLL_SECONDS)

    def start(self) -> None:
        """Start the mover as a task of the running loop (no-op without indexes, or when running)."""
        if self._task is None and self.indexes:
            self._task = asyncio.get_running_loop().create_task(self._work(), name="cairn-lexical-mover")

    async def stop(self) -> None:
        """Cancel the mover; a batch cut off is rolled back and its rows stay listed."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _warn(self, exc: BaseException) -> None:
        now = time.monotonic()  # one line per 30 s while the database is away, not one per try
        if now - self._last_warning >= 30:
            self._last_warning = now
            log.warning(
                "copying rows into a lexical side table failed; retrying later: %s: %s",
                type(exc).__name__,
                str(exc)[:200],
            )
