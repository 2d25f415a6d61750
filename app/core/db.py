"""The async engine, the session factory and the transaction boundary."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import anyio
from pgvector import SparseVector, Vector
from sqlalchemy import Connection, Dialect, MetaData, TextClause, event, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.pool import Pool, PoolProxiedConnection
from sqlalchemy.types import NullType
from sqlalchemy.util import greenlet_spawn

from app.core.config import Settings
from app.core.errors import Unavailable
from app.core.metrics import DB_POOL_CHECKED_OUT, DB_POOL_SIZE

log = logging.getLogger("cairn.db")
T = TypeVar("T")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base shared by every feature's models."""

    metadata = MetaData(naming_convention=NAMING)


def engine_options(settings: Settings) -> dict[str, Any]:
    """The `create_async_engine` keyword arguments of every engine of the server: the configured pool
    and, per connection, asyncpg's options.

    Directly on PostgreSQL (`database_pooler` "none") statements are prepared once per connection and
    cached, and `statement_timeout` is a startup parameter. Behind a pooler in transaction mode
    ("transaction") a client connection's statements may run on any server connection, so nothing may
    outlive a transaction: asyncpg's and SQLAlchemy's statement caches are off, each statement is
    prepared under a name of its own (two clients sharing a server connection cannot collide), and no
    startup parameter but `application_name` is sent (PgBouncer refuses others):
    `statement_timeout` is then set per transaction (`session_factory`)."""
    server_settings = {"application_name": "cairn"}
    connect_args: dict[str, Any] = {"server_settings": server_settings, "timeout": 10}
    if settings.database_pooler == "transaction":
        connect_args |= {
            "statement_cache_size": 0,
            "prepared_statement_cache_size": 0,
            "prepared_statement_name_func": unique_statement_name,
        }
    else:
        server_settings["statement_timeout"] = str(settings.db_statement_timeout_ms)
    return {
        "pool_size": settings.db_pool_size,
        "max_overflow": settings.db_max_overflow,
        "pool_timeout": settings.db_pool_timeout,
        "pool_recycle": settings.db_pool_recycle_seconds,
        "connect_args": connect_args,
    }


def connection_budget(settings: Settings, processes: int = 1) -> int:
    """The most connections `processes` server processes open to the database URL at once: each its
    pool plus its overflow (the embedding queue's workers and background sweeps draw from the same
    pool). Migrations and `/readyz` open one more, briefly, on the direct URL."""
    return processes * (settings.db_pool_size + settings.db_max_overflow)


def unique_statement_name() -> str:
    """A prepared statement's name no other client of a shared server connection uses."""
    return f"__cairn_{uuid.uuid4().hex}__"


def make_engine(url: str, settings: Settings) -> AsyncEngine:
    """Create the async engine with `engine_options` (the pool, asyncpg's options per pooler mode).

    No pre-ping on checkout (it cost three round trips per call): connections are replaced after
    `db_pool_recycle_seconds`, and a call that finds its pooled connection dead (PostgreSQL restarted)
    is retried once on a fresh one (`Database.run`, `executor.run_operation`). Each new connection gets
    the binary codec of pgvector's `vector` type (`register_vector_codec`)."""
    engine = create_async_engine(url, **engine_options(settings))
    event.listen(engine.sync_engine, "connect", _on_connect)
    return engine


def session_factory(engine: AsyncEngine, settings: Settings) -> async_sessionmaker[AsyncSession]:
    """Sessions on `engine`. Behind a transaction pooler each transaction begins with
    `SET LOCAL statement_timeout` (a session-level setting would stay on a server connection other
    clients then share); directly on PostgreSQL the connection's startup parameter set it already."""
    if settings.database_pooler != "transaction" or not settings.db_statement_timeout_ms:
        return async_sessionmaker(engine, expire_on_commit=False, class_=AsyncSession)
    statement = text(f"SET LOCAL statement_timeout = {int(settings.db_statement_timeout_ms)}")

    class TimedSession(Session):
        """A session whose transactions set their statement timeout first."""

    def set_timeout(_session: Session, _transaction: Any, connection: Connection) -> None:
        connection.execute(statement)

    event.listen(TimedSession, "after_begin", set_timeout)
    return async_sessionmaker(engine, expire_on_commit=False, class_=AsyncSession, sync_session_class=TimedSession)


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.run_async(register_vector_codec)


def encode_vector(value: Any) -> bytes:
    """The `vector` codec's encoder: bytes (from `app.core.embeddings.vectors.vector_param`) as they are,
    a `pgvector.Vector` or what it takes (a list or numpy array of floats) converted."""
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, Vector) else Vector(value)).to_binary()


def encode_sparse_vector(value: Any) -> bytes:
    """The `sparsevec` codec's encoder: a `pgvector.SparseVector` (or what it takes) in binary form."""
    return (value if isinstance(value, SparseVector) else SparseVector(value)).to_binary()


async def register_vector_codec(connection: Any) -> None:
    """Exchange `vector` and `sparsevec` values with `connection` (asyncpg) in pgvector's binary form: a
    parameter is sent without formatting or parsing text (`app.core.embeddings.vectors.vector_param`,
    `app.core.embeddings.lexical.LexicalQuery.vector`), a value read comes back as a `pgvector.Vector`
    or `pgvector.SparseVector`. Nothing is registered while the extension is missing (before the first
    migration), as no statement then has a vector to bind."""
    schema = await connection.fetchval(
        "SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE t.oid = to_regtype('vector')"
    )
    if schema is not None:
        await connection.set_type_codec(
            "vector", schema=schema, encoder=encode_vector, decoder=Vector.from_binary, format="binary"
        )
        await connection.set_type_codec(
            "sparsevec", schema=schema, encoder=encode_sparse_vector, decoder=SparseVector.from_binary, format="binary"
        )


# Compiled forms of text statements kept per `Database` (cleared when full: the statements are the code's own)
POSITIONAL_KEPT = 4096


class DriverResult:
    """The rows of one statement run by a `DriverSession`, read as repositories read a SQLAlchemy
    result: `mappings().all()` / `.first()`, `all()`, `first()`, `scalar()`, `scalars().all()`. The rows
    are the driver's records: by column name (`row["name"]`, `row.get`, `**row`, `dict(row)`) and by
    position."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def mappings(self) -> DriverResult:
        """The rows by column name (the records are both)."""
        return self

    def all(self) -> list[Any]:
        """Every row."""
        return self._rows

    def first(self) -> Any:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        return self._rows[0][0] if self._rows else None

    def scalars(self) -> DriverResult:
        """The first column of every row."""
        return DriverResult([row[0] for row in self._rows])


class DriverSession:
    """Plain SQL on a pooled connection's driver (asyncpg) itself, without SQLAlchemy's session,
    connection and result objects around it: their CPU was most of a trivial call's database work.
    Only text statements with `:name` parameters run here (a repository's plain SQL), compiled once to
    the driver's `$n` form by SQLAlchemy's own dialect. Unless `transactional` (then the first statement
    begins a transaction, which `close` commits or rolls back), nothing begins a transaction: PostgreSQL
    runs each statement as one of its own.

    A failing statement comes out as SQLAlchemy's `DBAPIError` around the driver's error, as through a
    session, so callers map it alike (SQLSTATE, outage); a connection found dead, or left mid-statement
    by a cancellation, is invalidated rather than pooled again, and the error says so
    (`connection_invalidated`: `Database.run` retries once on a fresh connection)."""

    def __init__(
        self,
        raw: PoolProxiedConnection,
        dialect: Dialect,
        positional: dict[str, tuple[str, tuple[str, ...]]],
        transactional: bool = False,
        pool: Pool | None = None,
    ) -> None:
        self.raw = raw
        self.pool = pool
        self.driver: Any = raw.driver_connection
        self.dialect = dialect
        self.positional = positional
        self.transactional = transactional
        self.began: Any = None  # the driver's transaction, once begun
        self.broken = False
        self.lost: BaseException | None = None  # the error that found the connection itself failed

    def _compiled(self, statement: TextClause) -> tuple[str, tuple[str, ...]]:
        found = self.positional.get(statement.text)
        if found is None:
            compiled = statement.compile(dialect=self.dialect)
            # Values go to the driver as they are: a parameter SQLAlchemy would expand or convert (a
            # typed bind) has no place here.
            if any(bind.expanding or not isinstance(bind.type, NullType) for bind in compiled.binds.values()):
                raise TypeError("a DriverSession runs no statement with an expanding or typed parameter")
            found = (compiled.string, tuple(compiled.positiontup or ()))
            if len(self.positional) >= POSITIONAL_KEPT:
                self.positional.clear()
            self.positional[statement.text] = found
        return found

    async def execute(self, statement: Any, params: Any = None) -> DriverResult:
        """Run a text statement with its named parameters (a mapping) and return its rows.

        Raises:
            TypeError: `statement` is not a text statement, or `params` a list of parameter sets.
            DBAPIError: the statement failed (`orig`: the driver's error).
        """
        return DriverResult(await self._run(statement, params, counted=False))

    async def rowcount(self, statement: Any, params: Any = None) -> int:
        """Run a text statement that returns no rows (a write) and return how many rows it touched."""
        status: str = await self._run(statement, params, counted=True)
        last = status.rpartition(" ")[2]
        return int(last) if last.isdigit() else 0

    async def _run(self, statement: Any, params: Any, counted: bool) -> Any:
        if not isinstance(statement, TextClause) or not (params is None or isinstance(params, dict)):
            raise TypeError("a DriverSession runs one text statement with one mapping of parameters")
        sql, names = self._compiled(statement)
        args = [(params or {})[name] for name in names]
        try:
            if self.transactional and self.began is None:
                began = self.driver.transaction()
                await began.start()
                self.began = began
            # `execute` answers the command's status ("DELETE 3"); with arguments it is prepared and
            # cached as `fetch` is.
            return await (self.driver.execute(sql, *args) if counted else self.driver.fetch(sql, *args))
        except BaseException as exc:
            raise self._failed(sql, params, exc) from exc

    def _failed(self, sql: str, params: Any, exc: BaseException) -> BaseException:
        """What a failure of the driver raises: `DBAPIError` around it (`connection_invalidated` when
        the connection itself failed, or was left mid-statement by a cancellation)."""
        lost = isinstance(exc, Exception) and _connection_lost(exc)
        dead = not isinstance(exc, Exception) or lost
        self.broken = self.broken or dead
        if lost and self.lost is None:
            self.lost = exc
        if isinstance(exc, Exception):
            return DBAPIError(sql, params, exc, connection_invalidated=dead)
        return exc

    async def scalar(self, statement: Any, params: Any = None) -> Any:
        """The first column of the first row of a text statement, or None (as `AsyncSession.scalar`)."""
        return (await self.execute(statement, params)).scalar()

    async def finish(self, commit: bool) -> None:
        """End the transaction begun (if any): commit it, or roll it back.

        Raises:
            DBAPIError: the commit failed (the transaction is then rolled back by PostgreSQL).
        """
        began, self.began = self.began, None
        if began is None or self.broken:
            return
        try:
            await (began.commit() if commit else began.rollback())
        except BaseException as exc:
            raise self._failed("COMMIT" if commit else "ROLLBACK", None, exc) from exc

    async def close(self) -> None:
        """Give the connection back to the pool, or drop it when it was found dead, interrupted or left
        in a transaction; to the end even while the call is being cancelled (the pool would lose the
        connection)."""
        with anyio.CancelScope(shield=True):
            if self.lost is not None and self.pool is not None:
                # As SQLAlchemy does for a session that finds its connection gone: every connection of
                # the pool as old as this one is replaced at its next checkout (after a restart they are
                # all dead), so `Database.run`'s one retry meets a fresh connection.
                await greenlet_spawn(self.pool._invalidate, self.raw, self.lost)
            elif self.broken or self.began is not None:
                await greenlet_spawn(self.raw.invalidate)
            else:
                await greenlet_spawn(self.raw.close)


def _connection_lost(exc: BaseException) -> bool:
    """Whether the driver's error means the connection itself failed (closed, reset, refused, the
    server shutting down, or the driver's own state broken, as when the server ended the session while
    it was idle) rather than the statement."""
    code = str(getattr(exc, "sqlstate", "") or "")
    return is_connection_error(exc) or code.startswith(("08", "57P")) or type(exc).__name__ == "InternalClientError"


class Database:
    """Owns the engine and hands out sessions; one per process."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.engine = make_engine(url, settings)
        self.sessionmaker = session_factory(self.engine, settings)
        # Plain work (one statement, or `plain`) runs on the driver (`DriverSession`); not behind a
        # transaction pooler, where the statement timeout is set per transaction.
        self.on_driver = settings.database_pooler != "transaction"
        self._positional: dict[str, tuple[str, tuple[str, ...]]] = {}
        # Each `--workers` process keeps its own figures current: /metrics, answered by any one of them,
        # adds up all of theirs (app.core.metrics).
        event.listen(self.engine.sync_engine, "checkout", lambda *_: DB_POOL_CHECKED_OUT.inc())
        event.listen(self.engine.sync_engine, "checkin", lambda *_: DB_POOL_CHECKED_OUT.dec())
        DB_POOL_SIZE.set(self.pool_status()["size"])

    @asynccontextmanager
    async def transaction(self, one_statement: bool = False, plain: bool = False) -> AsyncIterator[AsyncSession]:
        """One unit of work: commits when the block succeeds, rolls back on any exception.

        The transaction begins with the first statement (so work done before any SQL, such as
        embedding a query, holds no connection), and `release_reads` may end a read-only one early.
        With `one_statement` (work that runs a single text statement) the block gets a `DriverSession`
        instead: the statement runs on a pooled connection's driver itself, with no BEGIN or COMMIT
        (PostgreSQL runs it as a transaction of its own, with one snapshot, as it would inside BEGIN /
        COMMIT). With `plain` (work of text statements only, several) it gets a `DriverSession` that
        begins a transaction with its first statement and commits it when the block succeeds. Not behind
        a transaction pooler (the statement timeout is set per transaction there): then either is an
        ordinary session."""
        if (one_statement or plain) and self.on_driver:
            driver = DriverSession(
                await self._raw_connection(),
                self.engine.dialect,
                self._positional,
                transactional=plain,
                pool=self.engine.sync_engine.pool,
            )
            try:
                try:
                    # A stand-in that runs text statements only (`execute`, `scalar`, `Repository.rowcount`):
                    # what a repository's plain SQL needs.
                    yield cast(AsyncSession, driver)
                except BaseException:
                    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await driver.finish(commit=False)  # a failed rollback drops the connection
                    raise
                await driver.finish(commit=True)
            finally:
                await driver.close()
            return
        async with self.sessionmaker() as session:
            try:
                yield session
            except BaseException:
                await session.rollback()
                raise
            await session.commit()

    async def _raw_connection(self) -> PoolProxiedConnection:
        """A pooled connection for a `DriverSession`. A failure to connect comes out as the session path
        raises it, SQLAlchemy's `DBAPIError` around the driver's error (`connection_invalidated` when
        the dialect calls it a disconnect), so it maps alike (an outage answers 503)."""
        try:
            return await self.engine.raw_connection()
        except Exception as exc:
            dialect = self.engine.dialect
            if isinstance(exc, DBAPIError) or not isinstance(exc, dialect.loaded_dbapi.Error):
                raise
            raise DBAPIError.instance(
                None,
                None,
                exc,
                dialect.loaded_dbapi.Error,
                connection_invalidated=dialect.is_disconnect(exc, None, None),
                dialect=dialect,
            ) from exc

    async def run(
        self,
        work: Callable[[AsyncSession], Awaitable[T]],
        *,
        retry: bool = True,
        one_statement: bool = False,
        plain: bool = False,
    ) -> T:
        """`work(session)` in one transaction (see `transaction`, its `one_statement` and `plain`). Unless
        `retry` is false (work with effects outside the database), it runs again when it failed before
        its commit because its pooled connection was dead (once, on a fresh connection), or because
        PostgreSQL broke a deadlock or a serialization conflict by failing it (up to `CONFLICT_ATTEMPTS`
        times in all)."""
        attempt = 1
        while True:
            committing = False
            try:
                async with self.transaction(one_statement, plain) as session:
                    out = await work(session)
                    committing = True
                return out
            except Exception as exc:
                if not retry or committing:
                    raise
                if attempt == 1 and is_dead_connection(exc):
                    log.warning("retrying on a fresh connection: the pooled one was dead (%s)", type(exc).__name__)
                elif attempt < CONFLICT_ATTEMPTS and is_conflict(exc):
                    log.info("retrying after a transaction conflict (SQLSTATE %s)", sqlstate(exc))  # type: ignore[arg-type]
                    await asyncio.sleep(random.uniform(0.005, 0.05) * attempt)  # the other side finishes first
                else:
                    raise
                attempt += 1

    async def ping(self) -> bool:
        """True when the database answers a trivial query (a dead pooled connection is replaced first)."""

        async def select_one(session: AsyncSession) -> None:
            await session.execute(text("SELECT 1"))

        try:
            await self.run(select_one)
            return True
        except Exception:
            return False

    def pool_status(self) -> dict[str, int]:
        """Checked-out and idle connections of the pool, for /metrics."""
        pool = self.engine.pool
        checked_out = getattr(pool, "checkedout", lambda: 0)()
        size = getattr(pool, "size", lambda: 0)()
        return {"checked_out": int(checked_out), "size": int(size)}

    async def dispose(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()


_CONNECTION_ERRORS = {
    "ConnectionDoesNotExistError",
    "CannotConnectNowError",
    "ConnectionFailureError",
    "AdminShutdownError",
    "CrashShutdownError",
    "InterfaceError",
}


def _driver_errors(exc: DBAPIError) -> tuple[Any, ...]:
    """The driver's exception and its cause (asyncpg's error sits behind SQLAlchemy's adapter)."""
    return exc.orig, getattr(exc.orig, "__cause__", None)


def sqlstate(exc: DBAPIError) -> str:
    """The SQLSTATE of a database error, or "" when the driver gave none."""
    for candidate in _driver_errors(exc):
        code = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if code:
            return str(code)
    return "22000" if any(type(c).__name__ == "DataError" for c in _driver_errors(exc)) else ""


# Runs of a call's transaction when PostgreSQL fails it to break a deadlock or a serialization conflict.
CONFLICT_ATTEMPTS = 3


def is_conflict(exc: BaseException) -> bool:
    """True when PostgreSQL failed the transaction to break a deadlock (40P01) or a serialization
    conflict (40001): running it again is the remedy."""
    return isinstance(exc, DBAPIError) and sqlstate(exc) in ("40P01", "40001")


def is_dead_connection(exc: BaseException) -> bool:
    """True when `exc` says the connection a statement ran on was found dead (e.g. PostgreSQL restarted
    since it was pooled). SQLAlchemy has then invalidated it, and the pool replaces every connection
    older than it at checkout, so one retry gets a fresh connection."""
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def is_connection_error(exc: BaseException) -> bool:
    """True when `exc` means the database is unreachable rather than the query being wrong."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        # A refused or dropped connection can arrive wrapped as a plain DBAPIError (e.g. "the database
        # system is shutting down" while connecting); its driver error says what it is.
        if sqlstate(exc).startswith(("08", "57P")) or any(
            type(candidate).__name__ in _CONNECTION_ERRORS for candidate in _driver_errors(exc)
        ):
            return True
    if isinstance(exc, (ConnectionError, OSError)):
        return True
    return type(exc).__name__ in _CONNECTION_ERRORS


# What an outage's 5030 asks clients to wait before retrying (PostgreSQL restarting, a failover).
RETRY_AFTER_SECONDS = 2


def outage(exc: BaseException) -> Unavailable | None:
    """The 5030 a caller gets when `exc` says the database cannot serve right now (unreachable, not
    accepting connections while it starts or shuts down, or no pooled connection free within
    `db_pool_timeout`); None for any other error. Every path that reaches the database maps its
    errors through this: the executor, key lookups, the open-mode lock, the probes."""
    if isinstance(exc, PoolTimeout):  # "QueuePool limit of size … reached"
        message = "The database is busy: no connection became free in time; no change was made"
    elif is_connection_error(exc):
        message = "The database is unavailable; no change was made"
    else:
        return None
    return Unavailable(message, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


async def release_reads(session: AsyncSession) -> None:
    """End the session's transaction and give its connection back to the pool, before slow work
    that needs no database (running a model). The next statement begins a fresh transaction.

    Only for a transaction that has read and not written: PostgreSQL assigns a transaction id on the
    first write, so one being assigned (or ORM changes waiting to be flushed) raises instead. The
    read-only transaction is committed rather than rolled back, which changes nothing in the database
    and keeps the objects it loaded usable (a rollback would expire them)."""
    if not session.in_transaction():
        return
    if session.new or session.dirty or session.deleted:
        raise RuntimeError("release_reads with unflushed changes: it would write them")
    if await session.scalar(text("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")):
        raise RuntimeError("release_reads after a write: it would commit the write early")
    await session.commit()
