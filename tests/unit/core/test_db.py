"""app/core/db.py against the session's embedded PostgreSQL: the transaction boundary, the retries of
`Database.run` (a conflict PostgreSQL broke, a real deadlock between two writers, a pooled connection
found dead), how errors are told apart (an outage among them), `release_reads`, and the binary
`vector` codec."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from pgvector import Vector
from sqlalchemy import JSON, bindparam, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.config import Settings
from app.core.db import (
    CONFLICT_ATTEMPTS,
    Database,
    DriverSession,
    connection_budget,
    encode_vector,
    engine_options,
    is_conflict,
    is_connection_error,
    is_dead_connection,
    outage,
    release_reads,
    sqlstate,
)
from app.core.repository import Repository
from tests.support.server import PgCluster
from tests.support.waiting import eventually


@pytest.fixture
async def db(pg: PgCluster) -> AsyncIterator[Database]:
    database = Database(pg.handle.url(pg.new_database()), Settings(db_pool_size=2, db_max_overflow=0))
    async with database.transaction() as session:
        await session.execute(text("CREATE TABLE notes (id int PRIMARY KEY, body text)"))
    try:
        yield database
    finally:
        await database.dispose()


async def _failure(db: Database, sql: str) -> DBAPIError:
    with pytest.raises(DBAPIError) as caught:
        async with db.transaction() as session:
            await session.execute(text(sql))
    return caught.value


async def _count(db: Database) -> int:
    async with db.transaction() as session:
        return int(await session.scalar(text("SELECT count(*) FROM notes")) or 0)


async def test_a_transaction_commits_when_the_block_succeeds_and_rolls_back_otherwise(db: Database) -> None:
    async with db.transaction() as session:
        await session.execute(text("INSERT INTO notes VALUES (1, 'kept')"))
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO notes VALUES (2, 'dropped')"))
            raise RuntimeError("changed my mind")
    assert await _count(db) == 1
    assert set(db.pool_status()) == {"checked_out", "size"} and db.pool_status()["checked_out"] == 0


async def test_work_of_one_statement_runs_on_the_driver_without_begin_and_commit(db: Database) -> None:
    """With `one_statement` the block gets a `DriverSession`: each statement is a transaction of its
    own (two statements get two transaction ids, which one transaction never does), named parameters
    bind by name however often they appear, rows read by name and position, and a write commits."""
    xids: list[list[object]] = []
    for one in (False, True):
        async with db.transaction(one_statement=one) as session:
            assert isinstance(session, DriverSession) == one
            xids.append([await session.scalar(text("SELECT pg_current_xact_id()::text")) for _ in range(2)])
    assert xids[0][0] == xids[0][1] and xids[1][0] != xids[1][1]
    async with db.transaction(one_statement=True) as session:
        sql = text("SELECT CAST(:a AS int) + CAST(:a AS int) AS twice, CAST(:b AS text) AS b, CAST(:n AS text) AS n")
        result = await session.execute(sql, {"b": "x", "a": 4, "n": None})
        [row] = result.mappings().all()
        assert (row["twice"], row["b"], row["n"]) == (8, "x", None) and result.all()[0][0] == 8
        assert dict(row) == {"twice": 8, "b": "x", "n": None}
        assert (await session.execute(text("SELECT generate_series(1, 3)"))).scalars().all() == [1, 2, 3]
        assert (await session.execute(text("SELECT 1 WHERE false"))).first() is None
        with pytest.raises(TypeError):
            await session.execute(text("SELECT 1"), [{"a": 1}])
        with pytest.raises(TypeError):  # a typed parameter would be converted by SQLAlchemy, not here
            await session.execute(text("SELECT :d").bindparams(bindparam("d", type_=JSON)), {"d": {"a": 1}})
    await db.run(lambda s: s.execute(text("INSERT INTO notes VALUES (40, 'alone')")), one_statement=True)
    assert await _count(db) >= 1
    assert db.pool_status()["checked_out"] == 0
    pooled = Database(db.url, Settings(database_pooler="transaction", db_pool_size=1, db_max_overflow=0))
    try:
        assert not pooled.on_driver  # behind a transaction pooler: ordinary transactions
        async with pooled.transaction(one_statement=True) as session:
            assert not isinstance(session, DriverSession)
    finally:
        await pooled.dispose()


async def test_plain_work_on_the_driver_is_one_transaction_committed_or_rolled_back(db: Database) -> None:
    """With `plain` the statements share one transaction (one transaction id), their writes commit together
    when the block succeeds and go together when it fails; `Repository.rowcount` reads the command's
    status."""
    async with db.transaction(plain=True) as session:
        assert isinstance(session, DriverSession)
        first = await session.scalar(text("SELECT pg_current_xact_id()::text"))
        await session.execute(text("INSERT INTO notes VALUES (50, 'a'), (51, 'b')"))
        assert await session.scalar(text("SELECT pg_current_xact_id()::text")) == first
        assert (
            await Repository(session).rowcount("UPDATE notes SET body = :b WHERE id >= :low", {"b": "c", "low": 50})
            == 2
        )
        swept = await Repository(session).rowcount("DELETE FROM notes WHERE id = 51 AND body = 'never'")
        assert swept == 0  # a statement without parameters reports its count too
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with db.transaction(plain=True) as session:
            assert await Repository(session).rowcount("DELETE FROM notes WHERE id >= :low", {"low": 50}) == 2
            raise RuntimeError("changed my mind")
    async with db.transaction() as session:
        kept = (await session.execute(text("SELECT body FROM notes WHERE id >= 50 ORDER BY id"))).scalars().all()
    assert kept == ["c", "c"] and db.pool_status()["checked_out"] == 0
    with pytest.raises(DBAPIError):  # a failing statement rolls the whole block back
        async with db.transaction(plain=True) as session:
            await session.execute(text("INSERT INTO notes VALUES (52, 'd')"))
            await session.execute(text("INSERT INTO notes VALUES (52, 'again')"))
    assert await db.run(lambda s: s.scalar(text("SELECT count(*) FROM notes WHERE id = 52")), plain=True) == 0


async def test_a_driver_statements_error_is_mapped_as_a_sessions(db: Database) -> None:
    with pytest.raises(DBAPIError) as caught:
        async with db.transaction(one_statement=True) as session:
            await session.execute(text("SELECT 1 / 0"))
    assert sqlstate(caught.value) == "22012" and not is_dead_connection(caught.value)
    with pytest.raises(DBAPIError) as caught:
        async with db.transaction(one_statement=True) as session:
            await session.execute(text("SELECT CAST(:n AS int)"), {"n": "not a number"})
    assert sqlstate(caught.value) == "22000" and not is_connection_error(caught.value)
    assert db.pool_status()["checked_out"] == 0 and await _count(db) >= 0  # the connections went back


async def test_a_cancelled_driver_statement_drops_its_connection_and_the_pool_goes_on(db: Database) -> None:
    async def sleeper(session: AsyncSession) -> None:
        await session.execute(text("SELECT pg_sleep(30)"))

    task = asyncio.ensure_future(db.run(sleeper, one_statement=True))
    probe = await asyncpg.connect(db.url.replace("+asyncpg", ""))
    try:

        async def sleeping() -> bool:
            return bool(
                await probe.fetchval("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'")
            )

        await eventually(sleeping, timeout=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert db.pool_status()["checked_out"] == 0  # dropped (invalidated), not kept mid-statement
        assert await db.run(lambda s: s.scalar(text("SELECT 41 + 1")), one_statement=True) == 42
    finally:
        await probe.close()


async def test_errors_are_told_apart_by_their_sqlstate(db: Database) -> None:
    zero = await _failure(db, "SELECT 1 / 0")
    assert sqlstate(zero) == "22012"
    assert not is_conflict(zero) and not is_dead_connection(zero) and not is_connection_error(zero)
    serialization = await _failure(db, "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")
    deadlock = await _failure(db, "DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$")
    assert is_conflict(serialization) and is_conflict(deadlock)
    shutting_down = await _failure(db, "DO $$ BEGIN RAISE EXCEPTION 'bye' USING ERRCODE = '57P01'; END $$")
    assert is_connection_error(shutting_down) and not is_conflict(shutting_down)
    assert not is_conflict(RuntimeError("40001"))
    assert is_connection_error(ConnectionRefusedError()) and is_connection_error(OSError("unreachable"))
    assert not is_connection_error(ValueError("a wrong query"))


PATHS: tuple[dict[str, bool], ...] = ({}, {"plain": True}, {"one_statement": True})


async def test_an_outage_or_an_exhausted_pool_is_a_5030_and_a_wrong_query_is_not(pg: PgCluster) -> None:
    settings = Settings(db_pool_size=1, db_max_overflow=0, db_pool_timeout=0.2)
    busy = Database(pg.handle.url(pg.new_database()), settings)
    try:
        async with busy.transaction() as held:
            await held.execute(text("SELECT 1"))  # the pool's one connection stays checked out
            with pytest.raises(Exception) as timed_out:
                await busy.run(lambda session: session.execute(text("SELECT 1")))
        err = outage(timed_out.value)
        assert err is not None and err.code == 5030 and "busy" in err.message
        assert err.headers == {"Retry-After": "2"}
        zero = await _failure(busy, "SELECT 1 / 0")
        assert outage(zero) is None and outage(ValueError("no")) is None
    finally:
        await busy.dispose()
    nowhere = Database("postgresql+asyncpg://u:p@127.0.0.1:9/none", Settings())  # nothing listens on port 9
    try:
        # A session, and a driver session (plain or one statement): the same error either way.
        for path in PATHS:
            with pytest.raises(Exception) as refused:
                await nowhere.run(lambda session: session.execute(text("SELECT 1")), **path)
            err = outage(refused.value)
            assert err is not None and err.status == 503 and "unavailable" in err.message, path
    finally:
        await nowhere.dispose()


async def test_a_server_refusing_connections_is_an_outage_on_every_path(
    pg: PgCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL shutting down answers new connections with SQLSTATE 57P03: through a session, and
    through the driver (`plain`, `one_statement`), the call gets the 503 of an outage, not a 500."""

    async def shutting_down(*_: object, **__: object) -> None:
        raise asyncpg.exceptions.CannotConnectNowError("the database system is shutting down")

    closing = Database(pg.handle.url(pg.new_database()), Settings())
    monkeypatch.setattr(asyncpg, "connect", shutting_down)
    try:
        for path in PATHS:
            with pytest.raises(DBAPIError) as refused:
                await closing.run(lambda session: session.execute(text("SELECT 1")), **path)
            err = outage(refused.value)
            assert err is not None and err.status == 503, path
    finally:
        await closing.dispose()


async def test_run_retries_a_transaction_postgresql_failed_to_break_a_conflict(db: Database) -> None:
    attempts: list[int] = []

    async def work(session: AsyncSession) -> str:
        attempts.append(len(attempts) + 1)
        await session.execute(text(f"INSERT INTO notes VALUES ({len(attempts)}, 'try')"))
        if len(attempts) < CONFLICT_ATTEMPTS:
            await session.execute(text("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40P01'; END $$"))
        return "done"

    assert await db.run(work) == "done"
    assert attempts == list(range(1, CONFLICT_ATTEMPTS + 1))
    assert await _count(db) == 1  # the failed tries left nothing

    always: list[int] = []

    async def hopeless(session: AsyncSession) -> None:
        always.append(1)
        await session.execute(text("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$"))

    with pytest.raises(DBAPIError):
        await db.run(hopeless)
    assert len(always) == CONFLICT_ATTEMPTS
    once: list[int] = []

    async def effects_outside(session: AsyncSession) -> None:
        once.append(1)
        await session.execute(text("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '40001'; END $$"))

    with pytest.raises(DBAPIError):
        await db.run(effects_outside, retry=False)
    assert once == [1]


@pytest.mark.parametrize("one_statement", [False, True])
async def test_run_retries_once_on_a_fresh_connection_when_the_pooled_one_died(
    db: Database, one_statement: bool
) -> None:
    async def backend(session: AsyncSession) -> int:
        return int(await session.scalar(text("SELECT pg_backend_pid()")) or 0)

    first = await db.run(backend, one_statement=one_statement)  # the pool keeps this connection
    other = await asyncpg.connect(db.url.replace("+asyncpg", ""))
    try:  # another client ends the pooled connection's backend, as a restart would
        assert await other.fetchval("SELECT pg_terminate_backend($1)", first)
    finally:
        await other.close()
    errors: list[BaseException] = []

    async def observed(session: AsyncSession) -> int:
        try:
            return await backend(session)
        except DBAPIError as exc:
            errors.append(exc)
            raise

    second = await db.run(observed, one_statement=one_statement)
    assert second != first
    [dead] = errors  # the first try met the dead connection; the retry ran on a fresh one
    assert is_dead_connection(dead) and is_connection_error(dead)


async def test_after_a_restart_every_pooled_driver_connection_is_replaced_not_only_the_first(pg: PgCluster) -> None:
    """Every pooled connection dies in a restart: the first driver statement to find its connection
    gone marks the pool's older connections for replacement (as SQLAlchemy does for a session), so the
    retry, and every later call, gets a fresh one instead of the next dead one."""
    db = Database(pg.handle.url(pg.new_database()), Settings(db_pool_size=3, db_max_overflow=0))
    try:
        pids: list[int] = []
        gate = asyncio.Event()

        async def hold(session: AsyncSession) -> None:  # three connections at once: the pool keeps three
            pids.append(int(await session.scalar(text("SELECT pg_backend_pid()")) or 0))
            if len(pids) == 3:
                gate.set()
            await gate.wait()

        await asyncio.gather(*(db.run(hold, one_statement=True) for _ in range(3)))
        other = await asyncpg.connect(db.url.replace("+asyncpg", ""))
        try:
            for pid in pids:
                assert await other.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await other.close()
        attempts: list[str] = []

        async def backend(session: AsyncSession) -> int:
            attempts.append("try")
            return int(await session.scalar(text("SELECT pg_backend_pid()")) or 0)

        fresh = await db.run(backend, one_statement=True)
        assert fresh not in pids and len(attempts) <= 2  # the first try, then one retry at most
        for _ in range(3):
            assert await db.run(backend, one_statement=True) not in pids
    finally:
        await db.dispose()


async def test_release_reads_ends_a_read_only_transaction_and_refuses_after_a_write(db: Database) -> None:
    async with db.transaction() as session:
        await release_reads(session)  # nothing begun: nothing to do
        await session.execute(text("SELECT count(*) FROM notes"))
        assert session.in_transaction()
        await release_reads(session)
        assert not session.in_transaction()
        await session.execute(text("INSERT INTO notes VALUES (7, 'after the release')"))  # a fresh transaction
    assert await _count(db) == 1
    with pytest.raises(RuntimeError, match="after a write"):
        async with db.transaction() as session:
            await session.execute(text("INSERT INTO notes VALUES (8, 'written')"))
            await release_reads(session)
    assert await _count(db) == 1  # the refused release committed nothing


async def test_vectors_travel_in_pgvectors_binary_form(db: Database) -> None:
    assert encode_vector(b"\x00\x01") == b"\x00\x01"  # already encoded: as it is
    assert encode_vector([1.0, 2.0]) == Vector([1.0, 2.0]).to_binary() == encode_vector(Vector([1.0, 2.0]))
    async with db.transaction() as session:
        await session.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    await db.dispose()  # the codec is registered on connect, once the type exists
    async with db.transaction() as session:
        back = await session.scalar(text("SELECT CAST(:v AS vector)"), {"v": [0.5, -1.0, 3.0]})
    assert isinstance(back, Vector) and back.to_list() == [0.5, -1.0, 3.0]


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
    db = Database(url, Settings())
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


def test_engine_options_keep_prepared_statements_directly_and_drop_them_behind_a_transaction_pooler() -> None:
    direct = engine_options(Settings(db_pool_size=4, db_max_overflow=2, db_statement_timeout_ms=1234))
    assert (direct["pool_size"], direct["max_overflow"]) == (4, 2)
    assert direct["connect_args"]["server_settings"] == {"application_name": "cairn", "statement_timeout": "1234"}
    assert "statement_cache_size" not in direct["connect_args"]
    pooled = engine_options(Settings(database_pooler="transaction"))["connect_args"]
    assert pooled["server_settings"] == {"application_name": "cairn"}  # PgBouncer refuses other startup parameters
    assert pooled["statement_cache_size"] == 0 and pooled["prepared_statement_cache_size"] == 0
    names = {pooled["prepared_statement_name_func"]() for _ in range(100)}
    assert len(names) == 100


async def test_a_pooler_session_sets_its_statement_timeout_in_every_transaction(pg: PgCluster) -> None:
    settings = Settings(database_pooler="transaction", db_statement_timeout_ms=250, db_pool_size=1, db_max_overflow=0)
    database = Database(pg.url, settings)
    try:
        for _ in range(2):
            async with database.transaction() as session:
                assert await session.scalar(text("SHOW statement_timeout")) == "250ms"
                await release_reads(session)
                assert await session.scalar(text("SHOW statement_timeout")) == "250ms"  # the next transaction too
        async with database.engine.connect() as conn:  # outside a session: the server's default, not a leftover
            assert await conn.scalar(text("SHOW statement_timeout")) == "0"
    finally:
        await database.dispose()


def test_the_connection_budget_is_pool_plus_overflow_per_process() -> None:
    settings = Settings(db_pool_size=10, db_max_overflow=10)
    assert connection_budget(settings) == 20
    assert connection_budget(settings, processes=2) == 40
    assert connection_budget(Settings(db_pool_size=5, db_max_overflow=0), processes=3) == 15
