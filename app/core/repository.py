"""The repository base every family uses, and the SQL of the core tables.

A repository owns every SQL statement of its tables. It runs them on the call's session (the
executor's transaction: repositories never commit) and returns named rows — ORM objects, a row
class built from the column names (`into=`), or SQLAlchemy `RowMapping`s — never positional tuples.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, overload

from sqlalchemy import CursorResult, Executable, RowMapping, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.models import ApiKey, AuditEntry, EmbeddingModel, Project

if TYPE_CHECKING:
    from app.core.vectors import EmbeddedRows

R = TypeVar("R")
Statement = str | Executable
Params = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


def _statement(sql: Statement) -> Executable:
    return text(sql) if isinstance(sql, str) else sql


class Repository:
    """Base of every repository: the call's session plus typed helpers over one statement.

    `sql` is SQL text with `:name` parameters (bound, never formatted in) or a SQLAlchemy
    statement. `into` builds each row from its columns by name (`into(**row)`), e.g. a dataclass
    or NamedTuple whose fields are the selected column labels."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def execute(self, sql: Statement, params: Params = None) -> CursorResult[Any]:
        """Run a statement; returns the result (use `rowcount` for writes)."""
        result: CursorResult[Any] = await self.session.execute(_statement(sql), params)  # type: ignore[assignment]
        return result

    async def rowcount(self, sql: Statement, params: Params = None) -> int:
        """Run a write and return how many rows it touched."""
        return int((await self.execute(sql, params)).rowcount or 0)

    @overload
    async def rows(self, sql: Statement, params: Params = None) -> list[RowMapping]: ...

    @overload
    async def rows(self, sql: Statement, params: Params = None, *, into: Callable[..., R]) -> list[R]: ...

    async def rows(self, sql: Statement, params: Params = None, *, into: Callable[..., R] | None = None) -> list[Any]:
        """Every row, by column name."""
        found = (await self.execute(sql, params)).mappings().all()
        if into is None:
            return list(found)
        return [into(**row) for row in found]

    @overload
    async def row(self, sql: Statement, params: Params = None) -> RowMapping | None: ...

    @overload
    async def row(self, sql: Statement, params: Params = None, *, into: Callable[..., R]) -> R | None: ...

    async def row(self, sql: Statement, params: Params = None, *, into: Callable[..., R] | None = None) -> Any:
        """The first row, by column name, or None."""
        found = (await self.execute(sql, params)).mappings().first()
        if found is None or into is None:
            return found
        return into(**found)

    async def dicts(self, sql: Statement, params: Params = None) -> list[dict[str, Any]]:
        """Every row as a plain dict keyed by column name (for rows that are reshaped afterwards)."""
        return [dict(row) for row in (await self.execute(sql, params)).mappings().all()]

    async def scalar(self, sql: Statement, params: Params = None) -> Any:
        """The first column of the first row, or None."""
        return (await self.execute(sql, params)).scalar()

    async def scalars(self, sql: Statement, params: Params = None) -> list[Any]:
        """The first column of every row."""
        return list((await self.execute(sql, params)).scalars().all())


class ProjectRepository(Repository):
    """Projects by name."""

    async def list(self, *, only: str | None = None, limit: int = 100, offset: int = 0) -> list[Project]:
        """Projects ordered by name, optionally only the named one."""
        stmt = select(Project).order_by(Project.name).limit(limit).offset(offset)
        if only is not None:
            stmt = stmt.where(Project.name == only)
        return list((await self.session.scalars(stmt)).all())

    async def count(self, *, only: str | None = None) -> int:
        """Number of projects (or 0/1 for `only`)."""
        stmt = select(func.count()).select_from(Project)
        if only is not None:
            stmt = stmt.where(Project.name == only)
        return int(await self.session.scalar(stmt) or 0)

    async def get(self, name: str) -> Project | None:
        """The project called `name`."""
        return await self.session.scalar(select(Project).where(Project.name == name))

    async def by_id(self, project_id: uuid.UUID) -> Project | None:
        """The project with this id."""
        return await self.session.get(Project, project_id)

    async def create(self, name: str, description: str = "") -> Project | None:
        """Insert a project; None when the name is taken."""
        stmt = (
            insert(Project)
            .values(id=uuid.uuid4(), name=name, description=description)
            .on_conflict_do_nothing(index_elements=[Project.name])
            .returning(Project)
        )
        return (await self.session.scalars(stmt)).first()

    async def ensure(self, name: str) -> Project:
        """The project called `name`, created if missing (safe under concurrency)."""
        existing = await self.get(name)
        if existing is not None:  # the common case: one read, no speculative insert
            return existing
        created = await self.create(name)
        if created is not None:
            return created
        existing = await self.get(name)  # created meanwhile by a concurrent call
        assert existing is not None
        return existing

    async def id_of(self, name: str) -> uuid.UUID | None:
        """The id of the project called `name` (a plain column read, no ORM object)."""
        found = await self.scalar("SELECT id FROM projects WHERE name = :name", {"name": name})
        return found if isinstance(found, uuid.UUID) else None

    async def ensure_id(self, name: str) -> uuid.UUID:
        """The id of the project called `name`, created if missing (safe under concurrency)."""
        found = await self.id_of(name)
        return found if found is not None else (await self.ensure(name)).id


class ApiKeyRepository(Repository):
    """API keys, looked up by the hash of the presented token."""

    async def add(
        self,
        *,
        name: str,
        prefix: str,
        key_hash: str,
        scopes: list[str],
        project: str | None,
        toolsets: list[str] | None = None,
    ) -> ApiKey:
        """Store a new key's hash."""
        key = ApiKey(
            id=uuid.uuid4(),
            name=name,
            prefix=prefix,
            key_hash=key_hash,
            scopes=scopes,
            project=project,
            toolsets=toolsets or None,
        )
        self.session.add(key)
        await self.session.flush()
        return key

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        """The unrevoked key with this hash."""
        stmt = select(ApiKey).where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
        return await self.session.scalar(stmt)

    async def list(self, include_revoked: bool = False, project: str | None = None) -> list[ApiKey]:
        """Keys, newest first (only those bound to `project` when given)."""
        stmt = select(ApiKey).order_by(ApiKey.created_at.desc())
        if not include_revoked:
            stmt = stmt.where(ApiKey.revoked_at.is_(None))
        if project is not None:
            stmt = stmt.where(ApiKey.project == project)
        return list((await self.session.scalars(stmt)).all())

    async def count_active(self) -> int:
        """Number of unrevoked keys."""
        stmt = select(func.count()).select_from(ApiKey).where(ApiKey.revoked_at.is_(None))
        return int(await self.session.scalar(stmt) or 0)

    async def revoke(self, key_id_or_prefix: str, project: str | None = None) -> int:
        """Revoke by id or by display prefix (only a key bound to `project` when given); returns how
        many keys were revoked."""
        cond = ApiKey.prefix == key_id_or_prefix
        try:
            cond = cond | (ApiKey.id == uuid.UUID(key_id_or_prefix))
        except ValueError:
            pass
        stmt = update(ApiKey).where(cond, ApiKey.revoked_at.is_(None)).values(revoked_at=datetime.now(UTC))
        if project is not None:
            stmt = stmt.where(ApiKey.project == project)
        result = await self.session.execute(stmt)
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    async def touch(self, key_id: uuid.UUID) -> None:
        """Record that the key was used."""
        await self.session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=func.now()))


class EmbeddingModelRepository(Repository):
    """Bookkeeping of the models whose vectors are stored."""

    async def register(self, name: str, provider: str, dimension: int) -> None:
        """Record the active model (idempotent)."""
        stmt = insert(EmbeddingModel).values(name=name, provider=provider, dimension=dimension)
        stmt = stmt.on_conflict_do_update(index_elements=[EmbeddingModel.name], set_={"last_active_at": func.now()})
        await self.session.execute(stmt)

    async def list(self) -> list[EmbeddingModel]:
        """Every model seen, newest activity first."""
        stmt = select(EmbeddingModel).order_by(EmbeddingModel.last_active_at.desc())
        return list((await self.session.scalars(stmt)).all())


class AuditRepository(Repository):
    """The audit log of write-scope and destructive calls."""

    async def add(self, entry: AuditEntry) -> None:
        """Append one entry (in the caller's transaction), as one plain INSERT: it runs on every write
        call, and the ORM's insert construct cost more than the statement itself."""
        await self.execute(
            "INSERT INTO audit_log (key_id, key_name, operation, transport, project, outcome, error_code, counts, "
            "request_id) VALUES (:key_id, :key_name, :operation, :transport, :project, :outcome, :error_code, "
            "CAST(:counts AS jsonb), :request_id)",
            {
                "key_id": entry.key_id,
                "key_name": entry.key_name,
                "operation": entry.operation,
                "transport": entry.transport,
                "project": entry.project,
                "outcome": entry.outcome,
                "error_code": entry.error_code,
                "counts": json.dumps(entry.counts or {}),
                "request_id": entry.request_id,
            },
        )

    async def page(
        self,
        *,
        key_id: str | None,
        operation: str | None,
        project: str | None,
        since: datetime | None,
        before_id: int | None,
        limit: int,
    ) -> list[AuditEntry]:
        """Newest entries first, filtered; `before_id` pages backwards."""
        stmt = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if key_id is not None:
            stmt = stmt.where(AuditEntry.key_id == key_id)
        if operation is not None:
            stmt = stmt.where(AuditEntry.operation == operation)
        if project is not None:
            stmt = stmt.where(AuditEntry.project == project)
        if since is not None:
            stmt = stmt.where(AuditEntry.at >= since)
        if before_id is not None:
            stmt = stmt.where(AuditEntry.id < before_id)
        return list((await self.session.scalars(stmt)).all())


@dataclass(frozen=True, slots=True)
class LeasedJob:
    """A queue row leased by a worker: which vector to make, and the version it was leased at."""

    id: int
    target: str
    ref: str
    version: int
    attempts: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """The queue for one model: rows waiting, the oldest one's age, rows that failed at least once."""

    depth: int
    oldest_seconds: float | None
    retrying: int


class EmbeddingQueueRepository(Repository):
    """The SQL of the embedding queue (see `app.core.models.EmbeddingJob`)."""

    async def enqueue(self, target: str, refs: Sequence[str], model: str, *, bump: bool = True) -> list[int]:
        """Queue `refs` of `target` for `model`; returns their job ids.

        A ref already queued gets its version bumped (`bump`, for writes: the text changed, a worker
        holding the old version must not store its vector) or is left as it is (backfills)."""
        if not refs:
            return []
        conflict = (
            "DO UPDATE SET version = embedding_queue.version + 1, not_before = now(), attempts = 0, last_error = NULL"
            if bump
            else "DO UPDATE SET version = embedding_queue.version"  # a no-op that still returns the id
        )
        return [
            int(i)
            for i in await self.scalars(
                "INSERT INTO embedding_queue (target, ref, model) "
                # One order for every writer: two calls queueing the same refs in different orders
                # would each lock one row and wait for the other's (a deadlock).
                'SELECT :target, r, :model FROM unnest(CAST(:refs AS text[])) AS r ORDER BY r COLLATE "C" '
                f"ON CONFLICT (target, ref, model) {conflict} RETURNING id",
                {"target": target, "refs": list(dict.fromkeys(refs)), "model": model},
            )
        ]

    async def lease(
        self, model: str, limit: int, lease_seconds: float, targets: Sequence[str], ids: Sequence[int] | None = None
    ) -> list[LeasedJob]:
        """Lease up to `limit` due jobs of `model` and `targets` (only `ids` when given) that no live
        worker holds.

        Half of the batch is the oldest due rows and the rest the newest, so a large backlog (one
        project's bulk load) neither holds back rows queued after it, which are in the next batch,
        nor is starved by a stream of new rows: it still drains at half the rate or more. Rows
        locked by another transaction are skipped, and a lease that ran out (its worker died) makes
        the row claimable again."""
        only = "AND id = ANY(:ids)" if ids is not None else ""
        due = (
            "SELECT id FROM embedding_queue WHERE model = :model AND target = ANY(:targets) AND not_before <= now() "
            f"AND (leased_until IS NULL OR leased_until < now()) {only} "
        )
        return await self.rows(
            f"WITH oldest AS ({due} ORDER BY not_before, id LIMIT :old FOR UPDATE SKIP LOCKED), "
            f"newest AS ({due} ORDER BY not_before DESC, id DESC LIMIT :new FOR UPDATE SKIP LOCKED) "
            "UPDATE embedding_queue q SET leased_until = now() + make_interval(secs => :lease), "
            "attempts = q.attempts + 1 "
            "WHERE q.id IN (SELECT id FROM oldest UNION SELECT id FROM newest) "
            "RETURNING q.id, q.target, q.ref, q.version, q.attempts",
            {
                "model": model,
                "old": limit - limit // 2,
                "new": limit // 2,
                "lease": lease_seconds,
                "targets": list(targets),
                "ids": list(ids or []),
            },
            into=LeasedJob,
        )

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
        `vectors` are `app.core.vectors.vector_param` values."""
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
