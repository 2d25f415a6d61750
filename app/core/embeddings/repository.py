"""The SQL of the embedding queue and of every family's vectors.

`EmbeddingQueueRepository` owns every statement on the `embedding_queue` table (declared by
`app.core.models.EmbeddingJob`, core migrations `core_0004` and `core_0010_queue_owner`): nothing
outside this package reads or writes it (`tests/unit/test_layout.py`). `VectorRepository` writes the
statements of a family's vectors from its `EmbeddedRows` declaration, and `vector_statements` is what
it writes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.embeddings.vectors import EmbeddedRows
from app.core.repository import Repository

QUEUED_TARGET = "queued_target"  # the target's parameter in `queued_by_model`
_NOT_IN_QUERY = re.compile(r";|--|/\*")


# A row a worker may lease now: due, of a target this server embeds, and held by no live worker.
_DUE = (
    "q.model = :model AND q.target = ANY(:targets) AND q.not_before <= now() "
    "AND (q.leased_until IS NULL OR q.leased_until < now())"
)
_LEASED = "leased_until = now() + make_interval(secs => :lease), attempts = q.attempts + 1"
_JOB = "q.id, q.target, q.ref, q.version, q.attempts, q.owner, q.project"
_GROUP_DUE = f"FROM embedding_queue q WHERE q.owner = g.owner AND q.project = g.project AND {_DUE}"

# The fair lease. Rows are grouped by who queued them (key, then project; '' for the sweep and
# backfills). (1) `grp` walks the distinct groups of the model on the index (one probe per group,
# however many rows each holds); (2) `due` keeps the groups with a due row and the age of their
# oldest; (3) at most `limit` groups take part, each key's first group before any key's second,
# longest waiting first; (4) the batch is split evenly between keys, and a key's share between its
# groups (at least one row each); (5) each group gives half its share from its oldest due rows and
# half from its newest, locked with SKIP LOCKED. So a key's few rows are in the next batch behind any
# backlog of other keys, a key's own backlog does not hold back its rows queued after it, and a large
# backlog still drains at its share of every batch, all of it when it is alone. A batch is short of
# `limit` while a group has fewer due rows than its share.
FAIR_LEASE = (
    "WITH RECURSIVE grp AS ("
    "(SELECT owner, project FROM embedding_queue WHERE model = :model ORDER BY owner, project LIMIT 1) "
    "UNION ALL SELECT n.owner, n.project FROM grp g CROSS JOIN LATERAL ("
    "SELECT q.owner, q.project FROM embedding_queue q WHERE q.model = :model "
    "AND (q.owner, q.project) > (g.owner, g.project) ORDER BY q.owner, q.project LIMIT 1) n), "
    "due AS (SELECT g.owner, g.project, f.first FROM grp g CROSS JOIN LATERAL ("
    f"SELECT q.not_before AS first {_GROUP_DUE} ORDER BY q.not_before, q.id LIMIT 1) f), "
    "turns AS (SELECT owner, project, first, row_number() OVER (PARTITION BY owner ORDER BY first) AS turn FROM due), "
    "chosen AS (SELECT owner, project, count(*) OVER (PARTITION BY owner) AS groups "
    "FROM (SELECT owner, project FROM turns ORDER BY turn, first LIMIT :limit) t), "
    "shares AS (SELECT owner, project, greatest(1, greatest(1, :limit / (SELECT count(DISTINCT owner) FROM chosen)) "
    "/ groups) AS n FROM chosen), "
    "oldest AS (SELECT o.id FROM shares g CROSS JOIN LATERAL ("
    f"SELECT q.id {_GROUP_DUE} ORDER BY q.not_before, q.id LIMIT g.n - g.n / 2 FOR UPDATE SKIP LOCKED) o), "
    "newest AS (SELECT o.id FROM shares g CROSS JOIN LATERAL ("
    f"SELECT q.id {_GROUP_DUE} ORDER BY q.not_before DESC, q.id DESC LIMIT g.n / 2 FOR UPDATE SKIP LOCKED) o) "
    f"UPDATE embedding_queue q SET {_LEASED} "
    "WHERE q.id IN (SELECT id FROM (SELECT id FROM oldest UNION SELECT id FROM newest) b LIMIT :limit) "
    f"RETURNING {_JOB}"
)


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """Rows waiting in the queue for one model: one owner's (`mine`) and everyone else's (`others`),
    each counted up to a bound (`EmbeddingQueueRepository.backlog_of`)."""

    mine: int
    others: int


@dataclass(frozen=True, slots=True)
class LeasedJob:
    """A queue row leased by a worker: which vector to make, and the version it was leased at."""

    id: int
    target: str
    ref: str
    version: int
    attempts: int
    # Who queued it (the caller's key and project; '' for the sweep and backfills)
    owner: str = ""
    project: str = ""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """The queue for one model: rows waiting, the oldest one's age, rows that failed at least once."""

    depth: int
    oldest_seconds: float | None
    retrying: int


class EmbeddingQueueRepository(Repository):
    """The SQL of the embedding queue (see `app.core.models.EmbeddingJob`)."""

    async def enqueue(
        self,
        target: str,
        refs: Sequence[str],
        model: str,
        *,
        bump: bool = True,
        owner: str = "",
        project: str = "",
    ) -> list[int]:
        """Queue `refs` of `target` for `model`; returns their job ids.

        A ref already queued gets its version bumped (`bump`, for writes: the text changed, a worker
        holding the old version must not store its vector) or is left as it is (backfills). `owner`
        (the caller's key) and `project` name who queued the rows, for the fair lease; a bumped row
        becomes the bumping caller's."""
        if not refs:
            return []
        conflict = (
            "DO UPDATE SET version = embedding_queue.version + 1, not_before = now(), attempts = 0, last_error = NULL, "
            "owner = EXCLUDED.owner, project = EXCLUDED.project"
            if bump
            else "DO UPDATE SET version = embedding_queue.version"  # a no-op that still returns the id
        )
        return [
            int(i)
            for i in await self.scalars(
                "INSERT INTO embedding_queue (target, ref, model, owner, project) "
                # One order for every writer: two calls queueing the same refs in different orders
                # would each lock one row and wait for the other's (a deadlock).
                "SELECT :target, r, :model, :owner, :project FROM unnest(CAST(:refs AS text[])) AS r "
                'ORDER BY r COLLATE "C" '
                f"ON CONFLICT (target, ref, model) {conflict} RETURNING id",
                {
                    "target": target,
                    "refs": list(dict.fromkeys(refs)),
                    "model": model,
                    "owner": owner,
                    "project": project,
                },
            )
        ]

    async def backlog_of(self, model: str, owner: str, cap: int, light: int) -> QueueBacklog:
        """The rows of `model` waiting: `owner`'s (counted up to `cap`) and, only when those are at most
        `light`, everyone else's (counted up to `light`), in one statement. Other owners' rows are read
        only for a light owner: its own rows are then few, so skipping them past its index range is
        cheap."""
        found = await self.row(
            "SELECT c.mine, CASE WHEN c.mine <= :light THEN (SELECT count(*) FROM (SELECT 1 FROM embedding_queue "
            "WHERE model = :model AND owner <> :owner LIMIT :light) o) ELSE 0 END AS others "
            "FROM (SELECT count(*) AS mine FROM (SELECT 1 FROM embedding_queue WHERE model = :model "
            "AND owner = :owner LIMIT :cap) m) c",
            {"model": model, "owner": owner, "cap": cap, "light": light},
            into=QueueBacklog,
        )
        return found or QueueBacklog(0, 0)

    async def lease(
        self, model: str, limit: int, lease_seconds: float, targets: Sequence[str], ids: Sequence[int] | None = None
    ) -> list[LeasedJob]:
        """Lease up to `limit` due jobs of `model` and `targets` (only `ids` when given) that no live
        worker holds, fairly across the callers that queued them (`FAIR_LEASE`).

        Rows locked by another transaction are skipped, and a lease that ran out (its worker died)
        makes the row claimable again."""
        params = {"model": model, "limit": limit, "lease": lease_seconds, "targets": list(targets)}
        if ids is not None:  # a call's own rows, which it waits for
            return await self.rows(
                f"WITH mine AS (SELECT id FROM embedding_queue q WHERE id = ANY(:ids) AND {_DUE} "
                "ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED) "
                f"UPDATE embedding_queue q SET {_LEASED} WHERE q.id IN (SELECT id FROM mine) RETURNING {_JOB}",
                {**params, "ids": list(ids)},
                into=LeasedJob,
            )
        return await self.rows(FAIR_LEASE, params, into=LeasedJob)

    async def complete(self, jobs: Sequence[LeasedJob]) -> set[int]:
        """Delete the jobs still at their leased version; returns their ids (the others were re-queued
        by a newer write and stay, released, for the next lease)."""
        if not jobs:
            return set()
        done = {
            int(i)
            for i in await self.scalars(
                "DELETE FROM embedding_queue q USING unnest(CAST(:ids AS bigint[]), CAST(:versions AS int[])) "
                "AS c(id, version) WHERE q.id = c.id AND q.version = c.version RETURNING q.id",
                {"ids": [j.id for j in jobs], "versions": [j.version for j in jobs]},
            )
        }
        stale = [j.id for j in jobs if j.id not in done]
        if stale:
            await self.execute("UPDATE embedding_queue SET leased_until = NULL WHERE id = ANY(:ids)", {"ids": stale})
        return done

    async def release(self, jobs: Sequence[LeasedJob]) -> None:
        """Give leased jobs back untouched (their batch was cancelled, not failed): due at once, with
        no error recorded."""
        await self.execute(
            "UPDATE embedding_queue SET leased_until = NULL WHERE id = ANY(:ids)", {"ids": [j.id for j in jobs]}
        )

    async def retry_later(self, jobs: Sequence[LeasedJob], error: str, max_delay_seconds: float) -> None:
        """Release failed jobs with an exponential delay by attempt (capped), keeping the error."""
        await self.execute(
            "UPDATE embedding_queue SET leased_until = NULL, last_error = :error, "
            "not_before = now() + make_interval(secs => least(:cap, 0.5 * power(2, least(attempts, 20)))) "
            "WHERE id = ANY(:ids)",
            {"ids": [j.id for j in jobs], "error": error[:500], "cap": max_delay_seconds},
        )

    async def remaining(self, ids: Sequence[int]) -> list[int]:
        """Which of `ids` are still queued."""
        return [
            int(i)
            for i in await self.scalars("SELECT id FROM embedding_queue WHERE id = ANY(:ids)", {"ids": list(ids)})
        ]

    async def failures(self, ids: Sequence[int], limit: int) -> tuple[int, dict[int, tuple[str, str, str]]]:
        """How many of `ids` are queued after a failed try, and up to `limit` of them (lowest ids first)
        as job id -> (target, ref, last error)."""
        if not ids:
            return 0, {}
        rows = await self.rows(
            "SELECT id, target, ref, last_error, count(*) OVER () AS n FROM embedding_queue "
            "WHERE id = ANY(:ids) AND last_error IS NOT NULL ORDER BY id LIMIT :limit",
            {"ids": list(ids), "limit": limit},
        )
        total = int(rows[0]["n"]) if rows else 0
        return total, {int(r["id"]): (str(r["target"]), str(r["ref"]), str(r["last_error"])) for r in rows}

    async def queued_by_model(self, target: str, refs: str, params: Mapping[str, Any]) -> dict[str, int]:
        """Per model: how many of the refs of `target` that the query `refs` selects wait in the queue.

        `refs` is one SELECT of a single text column (a family's query over its own table, with `:name`
        parameters in `params`), written in code: it may hold no `;` or comment."""
        if _NOT_IN_QUERY.search(refs) or QUEUED_TARGET in params:
            raise ValueError(f"not a single parameterised query of refs: {refs!r}")
        rows = await self.rows(
            f"SELECT q.model, count(*) AS n FROM embedding_queue q WHERE q.target = :{QUEUED_TARGET} "
            f"AND q.ref IN ({refs}) GROUP BY q.model",
            {**params, QUEUED_TARGET: target},
        )
        return {str(r["model"]): int(r["n"]) for r in rows}

    async def oldest_due_seconds(self, model: str) -> float | None:
        """Age of the oldest row of `model` that a worker could lease now (None: none is due)."""
        age = await self.scalar(
            "SELECT extract(epoch FROM now() - min(enqueued_at)) FROM ("
            "SELECT enqueued_at FROM embedding_queue WHERE model = :model AND not_before <= now() "
            "AND (leased_until IS NULL OR leased_until < now()) ORDER BY not_before LIMIT 256) due",
            {"model": model},
        )
        return None if age is None else float(age)

    async def stats(self, model: str) -> QueueStats:
        """Depth, oldest age and retrying rows for `model`."""
        row = await self.row(
            "SELECT count(*) AS depth, extract(epoch FROM now() - min(enqueued_at)) AS oldest_seconds, "
            "count(*) FILTER (WHERE last_error IS NOT NULL) AS retrying FROM embedding_queue WHERE model = :model",
            {"model": model},
        )
        assert row is not None
        oldest = row["oldest_seconds"]
        return QueueStats(
            depth=int(row["depth"]),
            oldest_seconds=None if oldest is None else round(float(oldest), 3),
            retrying=int(row["retrying"]),
        )


@dataclass(frozen=True, slots=True)
class VectorStatements:
    """The statements of one `EmbeddedRows` declaration (see `VectorRepository`)."""

    texts: str
    store: str
    missing: str


@functools.cache
def vector_statements(rows: EmbeddedRows) -> VectorStatements:
    """The SQL that reads the texts of `rows`, stores their vectors and finds those lacking one.

    Table and column names come from the declaration, whose identifiers and fragments were checked
    when it was made; values are bound parameters."""
    t, key, owner = rows.table, rows.key, rows.owner
    live = f" AND ({rows.live})" if rows.live else ""
    if rows.compose is not None:
        text_columns = ", ".join(f"t.{c}" for c in rows.columns)
    else:
        text_columns = f"t.{rows.text_column} AS text" if rows.text_column else f"({rows.text}) AS text"
    restamp = ", created_at = now()" if rows.stamped else ""
    return VectorStatements(
        texts=f"SELECT t.{key} AS ref, {text_columns} FROM {t} t "
        f"WHERE t.{key} = ANY(CAST(:keys AS {rows.key_type}[])){live}",
        # Owners deleted since their text was read are skipped (the key-share lock waits for a
        # delete in flight, then drops its row), and rows are locked in owner order.
        store=f"INSERT INTO {rows.vectors} ({owner}, model, dim, embedding) "
        "SELECT u.owner, :model, vector_dims(u.embedding), u.embedding "
        f"FROM unnest(CAST(:owners AS {rows.key_type}[]), CAST(:vectors AS vector[])) AS u(owner, embedding) "
        f"JOIN {t} t ON t.{key} = u.owner ORDER BY u.owner FOR KEY SHARE OF t "
        f"ON CONFLICT ({owner}, model) DO UPDATE SET embedding = EXCLUDED.embedding, dim = EXCLUDED.dim{restamp}",
        missing=f"SELECT t.{key} AS ref FROM {t} t WHERE TRUE{live} "
        f"AND NOT EXISTS (SELECT 1 FROM {rows.vectors} v WHERE v.{owner} = t.{key} AND v.model = :model) "
        "AND NOT EXISTS (SELECT 1 FROM embedding_queue q "
        f"WHERE q.target = :target AND q.ref = t.{key}::text AND q.model = :model) ORDER BY t.{key} LIMIT :limit",
    )


class VectorRepository(Repository):
    """The SQL of every family's vectors, made from its `EmbeddedRows` declaration."""

    async def texts(self, rows: EmbeddedRows, keys: Sequence[Any]) -> dict[str, str]:
        """The text to embed of each of `keys` whose row exists (and is live), by ref."""
        found = await self.rows(vector_statements(rows).texts, {"keys": list(keys)})
        if rows.compose is not None:
            compose, columns = rows.compose, rows.columns
            return {str(r["ref"]): compose(**{c: r[c] for c in columns}) for r in found}
        return {str(r["ref"]): str(r["text"]) for r in found if r["text"] is not None}

    async def store(self, rows: EmbeddedRows, model: str, owners: Sequence[Any], vectors: Sequence[bytes]) -> None:
        """Upsert the vectors of `model` of `owners` (distinct keys), one statement for the batch;
        `vectors` are `app.core.embeddings.vectors.vector_param` values."""
        if owners:
            await self.execute(
                vector_statements(rows).store, {"model": model, "owners": list(owners), "vectors": list(vectors)}
            )

    async def missing(self, rows: EmbeddedRows, model: str, limit: int) -> list[str]:
        """Up to `limit` refs of live rows with no vector of `model` and not queued for one, lowest first."""
        found = await self.scalars(
            vector_statements(rows).missing, {"model": model, "target": rows.target, "limit": limit}
        )
        return [str(i) for i in found]
