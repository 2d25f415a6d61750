"""SQL of the lexical mover: the pending list of an index kept in a side table, and the batch that copies
pending rows there (`app.core.embeddings.lexical_mover`, `LexicalIndex.side`)."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.embeddings.lexical import LexicalIndex
from app.core.repository import Repository

# The advisory-lock class of the mover: one host copies an index's rows at a time.
MOVER_LOCK_CLASS = 0x6C78  # "lx"


@dataclass(frozen=True)
class PendingState:
    """An index's pending list: how many rows wait, and the age in seconds of the oldest (None: none waits)."""

    rows: int
    oldest_seconds: float | None


def _names(index: LexicalIndex) -> tuple[str, str]:
    if index.side is None or index.pending is None:
        raise ValueError(f"{index.table}: its lexical index has no side table")
    return index.side, index.pending


class LexicalMoveRepository(Repository):
    """The pending list of a side-table lexical index, and its copy into the side table."""

    async def pending_state(self, index: LexicalIndex) -> PendingState:
        """How many rows wait to be copied, and for how long the oldest has."""
        _, pending = _names(index)
        row = await self.row(f"SELECT count(*) AS n, EXTRACT(EPOCH FROM now() - min(queued_at)) AS age FROM {pending}")
        assert row is not None  # an aggregate always has a row
        return PendingState(int(row["n"]), float(row["age"]) if row["age"] is not None else None)

    async def side_rows(self, index: LexicalIndex) -> float:
        """The side table's row count as the planner knows it (`reltuples`; -1 when never analysed)."""
        side, _ = _names(index)
        return float(await self.scalar("SELECT reltuples FROM pg_class WHERE oid = to_regclass(:t)", {"t": side}) or 0)

    async def analyze(self, index: LexicalIndex) -> None:
        """Refresh the side table's planner statistics (`ANALYZE`: a sample, never a full scan)."""
        side, _ = _names(index)
        await self.execute(f"ANALYZE {side}")

    async def vacuum_pending(self, index: LexicalIndex) -> None:
        """`VACUUM` the pending list: the copies leave it full of dead rows, which every search reads
        through until they are gone. Outside a transaction only (a driver session's single statement)."""
        _, pending = _names(index)
        await self.execute(f"VACUUM {pending}")

    async def take_turn(self, index: LexicalIndex) -> bool:
        """Whether this transaction is the one copying the index's rows now (a transaction-level
        advisory lock, given up at its end; another host holding it means: not now)."""
        return bool(
            await self.scalar(
                "SELECT pg_try_advisory_xact_lock(:cls, hashtext(:side))",
                {"cls": MOVER_LOCK_CLASS, "side": _names(index)[0]},
            )
        )

    async def move(self, index: LexicalIndex, limit: int) -> int:
        """Copy up to `limit` pending rows (lowest keys first) into the side table, as they are now, and
        drop them from the pending list unless they were listed again since this statement's snapshot
        (their version moved on: they stay, to be copied again). A listed row whose source row is gone
        is dropped from the list (the side table's foreign key removed its copy). Returns the rows
        dropped from the list.

        The listings are locked in key order, the order in which the triggers list a statement's rows,
        so a writer and the mover wait for each other without ever waiting in a circle; a listing a
        writer changed meanwhile fails `ver` once its writer commits, and stays."""
        side, pending = _names(index)
        key, vec = index.key, index.vector
        cols = ", ".join((key, *index.copied, vec))
        src = ", ".join(f"t.{c}" for c in (key, *index.copied, vec))
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in (*index.copied, vec))
        rows = await self.rows(
            f"""WITH batch AS MATERIALIZED (SELECT {key}, ver FROM {pending} ORDER BY {key} LIMIT :n),
                   copied AS (INSERT INTO {side} AS s ({cols})
                              SELECT {src} FROM {index.table} t JOIN batch b ON b.{key} = t.{key}
                              ORDER BY t.{key}
                              ON CONFLICT ({key}) DO UPDATE SET {sets})
               DELETE FROM {pending} d WHERE d.{key} IN (
                   SELECT p.{key} FROM {pending} p JOIN batch b ON b.{key} = p.{key} WHERE p.ver = b.ver
                   ORDER BY p.{key} FOR UPDATE OF p)
               RETURNING d.{key}""",
            {"n": limit},
        )
        return len(rows)
