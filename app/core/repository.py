"""The repository base every family uses, and the SQL of the core tables.

A repository owns every SQL statement of its tables. It runs them on the call's session (the
executor's transaction: repositories never commit) and returns named rows — ORM objects, a row
class built from the column names (`into=`), or SQLAlchemy `RowMapping`s — never positional tuples.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, TypeVar, overload

from sqlalchemy import CursorResult, Executable, RowMapping, TextClause, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.db import DriverSession
from app.core.models import ApiKey, AuditEntry, AuthLock, EmbeddingModel, Project

R = TypeVar("R")
Statement = str | Executable
Params = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


@lru_cache(maxsize=4096)
def _text(sql: str) -> TextClause:
    """The `text()` construct of `sql`, built once: parsing its `:name` parameters on every call was a
    measurable share of a statement. A `TextClause` is not changed by executing it, so it is shared."""
    return text(sql)


def _statement(sql: Statement) -> Executable:
    return _text(sql) if isinstance(sql, str) else sql


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
        if isinstance(self.session, DriverSession):
            return await self.session.rowcount(_statement(sql), params)
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


@dataclass(frozen=True)
class ProjectRow:
    """A project as `ProjectRepository.page` reads it."""

    id: uuid.UUID
    name: str
    description: str
    created_at: datetime


class ProjectRepository(Repository):
    """Projects by name."""

    async def page(self, *, only: str | None = None, limit: int = 100, offset: int = 0) -> tuple[list[ProjectRow], int]:
        """Projects ordered by name (optionally only the named one) and how many there are in all, in one
        plain statement: the trivial call's whole read, without the ORM's loading."""
        found = await self.rows(
            """WITH total AS (SELECT count(*) AS total FROM projects
                              WHERE CAST(:only AS text) IS NULL OR name = CAST(:only AS text))
               SELECT total.total, p.id, p.name, p.description, p.created_at
               FROM total LEFT JOIN LATERAL (
                   SELECT id, name, description, created_at FROM projects
                   WHERE CAST(:only AS text) IS NULL OR name = CAST(:only AS text)
                   ORDER BY name LIMIT :limit OFFSET :offset) p ON true""",
            {"only": only, "limit": limit, "offset": offset},
        )
        rows = [ProjectRow(r["id"], r["name"], r["description"], r["created_at"]) for r in found if r["id"] is not None]
        return rows, int(found[0]["total"]) if found else 0

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
        """The id of the project called `name`, created if missing (safe under concurrency). Plain text
        statements only, so a `plain` operation may call it (`app.core.registry.Operation.plain`)."""
        found = await self.id_of(name)
        if found is not None:
            return found
        created = await self.scalar(
            "INSERT INTO projects (id, name, description) VALUES (:id, :name, '') "
            "ON CONFLICT (name) DO NOTHING RETURNING id",
            {"id": uuid.uuid4(), "name": name},
        )
        if isinstance(created, uuid.UUID):
            return created
        found = await self.id_of(name)  # created meanwhile by a concurrent call
        assert found is not None
        return found


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
        """Store a new key's hash, and lock the database in the same transaction (`lock`). Call
        `serialize_creation` first when the caller's right to create depends on the lock."""
        await self.lock("a key was created")
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

    async def serialize_creation(self) -> bool:
        """Wait for any other key creation of the database to commit (a transaction-level advisory
        lock), then tell whether the database is locked (`lock`): two callers of an open server that
        create keys at once cannot both find it open."""
        await self.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('cairn-key-creation', 0))"))
        return await self.locked()

    async def by_hash(self, key_hash: str) -> ApiKey | None:
        """The unrevoked key with this hash."""
        stmt = select(ApiKey).where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None))
        return await self.session.scalar(stmt)

    async def active_hashes(self) -> list[str]:
        """The hashes of the unrevoked keys (what a locked-out address may still present)."""
        stmt = select(ApiKey.key_hash).where(ApiKey.revoked_at.is_(None))
        return list((await self.session.scalars(stmt)).all())

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

    async def touch_many(self, used: Mapping[uuid.UUID, datetime]) -> int:
        """Record when keys were last used, in one statement (a time never moves back); returns how many
        keys were updated."""
        if not used:
            return 0
        return await self.rowcount(
            "UPDATE api_keys AS k SET last_used_at = GREATEST(k.last_used_at, u.at) "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:ats AS timestamptz[])) AS u(id, at) WHERE k.id = u.id",
            {"ids": list(used), "ats": list(used.values())},
        )

    async def lock(self, reason: str) -> None:
        """Record that the database has had a key: no host of it starts open from then on (idempotent)."""
        await self.session.execute(insert(AuthLock).values(id=1, reason=reason[:200]).on_conflict_do_nothing())

    async def locked(self) -> bool:
        """Whether the database has had a key (`lock`)."""
        return bool(await self.session.scalar(select(func.count()).select_from(AuthLock)))

    async def keys_required(self) -> bool:
        """Whether an unrevoked key exists or the database has had one (one round trip)."""
        active = select(ApiKey.id).where(ApiKey.revoked_at.is_(None)).exists()
        return bool(await self.session.scalar(select(active | select(AuthLock.id).exists())))


class SecretRepository(Repository):
    """Secrets every host of the database shares (`server_secrets`)."""

    async def ensure(self, name: str, candidate: str) -> str:
        """The secret called `name`: the stored one, else `candidate`, stored now (the first process
        to store one wins; every other reads it)."""
        await self.execute(
            text("INSERT INTO server_secrets (name, value) VALUES (:name, :value) ON CONFLICT (name) DO NOTHING"),
            {"name": name, "value": candidate},
        )
        return str(await self.scalar(text("SELECT value FROM server_secrets WHERE name = :name"), {"name": name}))


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


class WalRepository(Repository):
    """WAL positions, as text ("16/B374D848"), for routing reads to replicas (`app.core.replicas`)."""

    async def current_lsn(self) -> str | None:
        """The primary's current WAL write position."""
        value = await self.scalar("SELECT pg_current_wal_lsn()::text")
        return None if value is None else str(value)

    async def replay_lsn(self) -> str | None:
        """How far a standby has replayed the WAL (None on a server that is not in recovery)."""
        value = await self.scalar("SELECT pg_last_wal_replay_lsn()::text")
        return None if value is None else str(value)
