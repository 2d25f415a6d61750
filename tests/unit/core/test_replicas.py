"""app/core/replicas.py: which reads a replica may serve (read-your-writes, lag bound, failures), the
probe's caught-up times, and the executor's routing on real PostgreSQL: a "replica" here is a second
database whose sessions are read-only (`default_transaction_read_only`), so a write there fails with
SQLSTATE 25006 exactly as on a hot standby (the real standby is in tests/e2e/test_read_replicas.py)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from pydantic import BaseModel
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.config import Settings
from app.core.context import AppState, CallContext, Principal
from app.core.db import Database
from app.core.executor import run_operation
from app.core.models import AuditEntry
from app.core.registry import OperationSet, Registry
from app.core.replicas import Replica, Replicas, parse_lsn, redact
from tests.support.server import PgCluster


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _set(replicas: list[Replica], clock: Clock, max_lag: float = 2.0) -> Replicas:
    return Replicas(cast(Database, None), replicas, max_lag_seconds=max_lag, probe_seconds=0.5, clock=clock)


def test_lsn_and_redacted_urls() -> None:
    assert parse_lsn("0/0") == 0
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn("1/0") > parse_lsn("0/FFFFFFFF")
    assert redact("postgresql+asyncpg://app:s3cret@db-2:5432/cairn") == "postgresql+asyncpg://app@db-2:5432/cairn"
    assert redact("postgresql+asyncpg://postgres@/cairn?host=/tmp") == "postgresql+asyncpg://postgres@/cairn?host=/tmp"


def test_a_key_reads_a_replica_only_once_it_has_caught_up_past_the_keys_last_write() -> None:
    clock = Clock()
    replica = Replica("r1", cast(Database, None))
    replicas = _set([replica], clock)
    assert replicas.choose("k") is None  # never probed: unknown
    replica.caught_up = clock.now
    assert replicas.choose("k") is replica  # no write of k in this process
    clock.now += 0.1
    replicas.note_write("k")
    assert replicas.choose("k") is None  # its write came after what the replica is known to hold
    assert replicas.choose("other") is replica  # other keys are not held back
    replica.caught_up = clock.now  # a probe that began at the same instant proves nothing: strictly after
    assert replicas.choose("k") is None
    clock.now += 0.1
    replica.caught_up = clock.now
    assert replicas.choose("k") is replica


def test_a_lagging_or_failed_replica_serves_nobody_and_reads_spread_over_the_others() -> None:
    clock = Clock()
    fresh, stale = Replica("fresh", cast(Database, None), clock.now), Replica("stale", cast(Database, None), 90.0)
    replicas = _set([fresh, stale], clock, max_lag=2.0)
    assert {id(replicas.choose("k")) for _ in range(50)} == {id(fresh)}  # stale: 10 s behind, beyond 2 s
    stale.caught_up = clock.now - 1.5
    assert {id(replicas.choose("k")) for _ in range(200)} == {id(fresh), id(stale)}
    replicas.fell_back(fresh, RuntimeError("a conflict"), unreachable=False)
    assert fresh.caught_up is not None  # reachable: still serves
    replicas.fell_back(fresh, ConnectionError("gone"), unreachable=True)
    assert fresh.caught_up is None
    assert {id(replicas.choose("k")) for _ in range(50)} == {id(stale)}
    clock.now += 1.0  # stale is now 2.5 s behind
    assert replicas.choose("k") is None


class FakeDb:
    """A database that answers the probe's one query with a set WAL position, or fails."""

    def __init__(self, lsn: str | None) -> None:
        self.lsn: str | None = lsn
        self.error: Exception | None = None

    async def run(self, work: Any, **kw: Any) -> Any:
        if self.error is not None:
            raise self.error
        return self.lsn


async def test_a_probe_marks_a_replica_caught_up_to_the_latest_primary_position_it_has_replayed() -> None:
    clock = Clock()
    primary, behind_db, ahead_db = FakeDb("0/100"), FakeDb("0/80"), FakeDb("0/100")
    behind, ahead = Replica("behind", cast(Database, behind_db)), Replica("ahead", cast(Database, ahead_db))
    replicas = Replicas(cast(Database, primary), [behind, ahead], max_lag_seconds=5.0, probe_seconds=0.5, clock=clock)
    await replicas.probe()
    assert ahead.caught_up == 100.0 and behind.caught_up is None
    clock.now, primary.lsn, behind_db.lsn, ahead_db.lsn = 101.0, "0/200", "0/150", "0/180"
    await replicas.probe()
    # behind has reached the first sample (0/100 at t=100) but not the second
    assert behind.caught_up == 100.0 and ahead.caught_up == 100.0
    clock.now, primary.error = 102.0, ConnectionError("primary down")
    await replicas.probe()  # no new sample; what was known stays, and ages
    assert behind.caught_up == 100.0
    clock.now, primary.error, primary.lsn, behind_db.lsn = 103.0, None, "0/300", "0/200"
    await replicas.probe()
    assert behind.caught_up == 101.0  # it has reached the t=101 sample (0/200), not the t=103 one (0/300)
    clock.now, behind_db.lsn = 104.0, "0/300"
    await replicas.probe()
    assert behind.caught_up == 104.0  # an idle primary: the position it reports now is replayed
    ahead_db.error = ConnectionError("replica down")
    await replicas.probe()
    assert ahead.caught_up is None
    # a key's write older than the lag bound decides nothing any more (every usable replica is past it)
    replicas.note_write("recent")
    clock.now = 104.0 + 5.0 + 0.1
    replicas.note_write("now")
    await replicas.probe()
    assert set(replicas.writes) == {"now"}


async def test_a_probe_sets_aside_a_server_that_is_not_a_standby_and_one_that_is_unreachable(
    pg: PgCluster, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        database_url=pg.url,
        database_replica_urls=[pg.url, "postgresql+asyncpg://postgres@/nowhere?host=/nonexistent&port=1"],
    )
    primary = Database(pg.url, settings)
    replicas = Replicas.build(primary, settings)
    assert replicas is not None
    try:
        with caplog.at_level(logging.WARNING, logger="cairn.replicas"):
            await replicas.probe()
        assert replicas.samples  # the primary answered
        assert [r.caught_up for r in replicas.replicas] == [None, None]
        assert replicas.replicas[0].not_standby
        assert "is not a standby" in caplog.text
        assert replicas.choose("k") is None
    finally:
        await replicas.stop()
        await primary.dispose()
    assert Replicas.build(primary, Settings(database_url=pg.url)) is None


# ---- the executor's routing ------------------------------------------------------------------------

ops = OperationSet("t")


class Empty(BaseModel):
    pass


class Where(BaseModel):
    database: str
    recorded: int = 0


async def _where(ctx: CallContext) -> Where:
    return Where(database=str(await ctx.session.scalar(text("SELECT current_database()"))))


@ops.operation(name="peek", input=Empty, output=Where, path="/peek", read_only=True, title="Peek")
async def peek(ctx: CallContext, args: Empty) -> Where:
    """Which database served the read."""
    return await _where(ctx)


@ops.operation(name="peek_and_record", input=Empty, output=Where, path="/pr", read_only=True, title="Record")
async def peek_and_record(ctx: CallContext, args: Empty) -> Where:
    """A read with a write part, which runs on the primary."""

    async def record(session: AsyncSession, reply: Where) -> Where:
        value = await session.scalar(text("INSERT INTO seen (at) VALUES (current_database()) RETURNING id"))
        return reply.model_copy(update={"recorded": int(value or 0)})

    ctx.write_after_read(record)
    return await _where(ctx)


@ops.operation(name="sneaky", input=Empty, output=Where, path="/sneaky", read_only=True, title="Sneaky")
async def sneaky(ctx: CallContext, args: Empty) -> Where:
    """Declared read-only, writes anyway."""
    await ctx.session.execute(text("INSERT INTO seen (at) VALUES ('sneaky')"))
    return await _where(ctx)


@ops.operation(name="admin_peek", input=Empty, output=Where, path="/ap", read_only=True, scope="admin", title="AP")
async def admin_peek(ctx: CallContext, args: Empty) -> Where:
    """An audited read."""
    return await _where(ctx)


@ops.operation(name="pinned", input=Empty, output=Where, path="/pinned", read_only=True, primary_only=True, title="P")
async def pinned(ctx: CallContext, args: Empty) -> Where:
    """A read kept on the primary."""
    return await _where(ctx)


@ops.operation(name="write", input=Empty, output=Where, path="/write", title="Write")
async def write(ctx: CallContext, args: Empty) -> Where:
    """A write."""
    await ctx.session.execute(text("INSERT INTO seen (at) VALUES ('write')"))
    return await _where(ctx)


OPS = {op.name: op for op in ops.operations}
ADMIN = Principal(key_id="admin-key", name="admin", scopes=frozenset({"admin"}))
OTHER = Principal(key_id="other-key", name="other", scopes=frozenset({"admin"}))


class Routed:
    """An app whose primary and "replica" are two databases of the test cluster."""

    def __init__(self, app: AppState, primary: str, replica_name: str, clock: Clock) -> None:
        self.app, self.primary, self.replica_name, self.clock = app, primary, replica_name, clock

    async def call(self, name: str, principal: Principal = ADMIN) -> Where:
        out = await run_operation(self.app, OPS[name], {}, principal, transport="rest", request_id=uuid.uuid4().hex)
        return cast(Where, out)

    async def primary_sql(self, sql: str) -> Any:
        async with self.app.db.transaction() as session:
            return await session.scalar(text(sql))


def _read_only_sessions(db: Database) -> None:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.run_async(lambda conn: conn.execute("SET default_transaction_read_only = on"))

    event.listen(db.engine.sync_engine, "connect", on_connect)


@pytest.fixture
async def routed(pg: PgCluster) -> AsyncIterator[Routed]:
    primary_name, replica_name = pg.new_database(), pg.new_database()
    settings = Settings(database_url=pg.handle.url(primary_name), audit_enabled=True)
    primary = Database(pg.handle.url(primary_name), settings)
    for db_name in (primary_name, replica_name):
        setup = Database(pg.handle.url(db_name), settings)
        async with setup.engine.begin() as conn:
            await conn.execute(text("CREATE TABLE seen (id serial PRIMARY KEY, at text)"))
            await conn.run_sync(lambda sync: AuditEntry.__table__.create(sync))  # type: ignore[attr-defined]
        await setup.dispose()
    replica_db = Database(pg.handle.url(replica_name), settings)
    _read_only_sessions(replica_db)
    clock = Clock()
    replica = Replica("replica", replica_db, caught_up=clock.now)
    replicas = Replicas(primary, [replica], max_lag_seconds=5.0, probe_seconds=0.5, clock=clock)
    registry = Registry()
    registry.add(ops)
    app = AppState(settings=settings, db=primary, embedder=cast(Any, None), registry=registry, replicas=replicas)
    try:
        yield Routed(app, primary_name, replica_name, clock)
    finally:
        await replica_db.dispose()
        await primary.dispose()


async def test_reads_go_to_the_replica_writes_to_the_primary_and_a_writer_reads_its_writes(routed: Routed) -> None:
    assert (await routed.call("peek")).database == routed.replica_name
    assert (await routed.call("pinned")).database == routed.primary
    routed.clock.now += 0.1
    assert (await routed.call("write")).database == routed.primary
    assert (await routed.call("peek")).database == routed.primary  # its own write is not on the replica yet
    assert (await routed.call("peek", OTHER)).database == routed.replica_name
    routed.clock.now += 0.1
    routed.app.replicas.replicas[0].caught_up = routed.clock.now  # type: ignore[union-attr]
    assert (await routed.call("peek")).database == routed.replica_name


async def test_the_write_part_and_the_audit_row_of_a_replica_read_go_to_the_primary(routed: Routed) -> None:
    out = await routed.call("peek_and_record")
    assert out.database == routed.replica_name and out.recorded == 1
    assert await routed.primary_sql("SELECT at FROM seen WHERE id = 1") == routed.primary
    assert (await routed.call("admin_peek")).database == routed.replica_name
    assert await routed.primary_sql("SELECT count(*) FROM audit_log WHERE operation = 'admin_peek'") == 1
    # the search-event style write part does not hold the key's next reads on the primary
    assert (await routed.call("peek")).database == routed.replica_name


async def test_a_read_that_writes_on_the_replica_or_finds_it_down_runs_on_the_primary(
    routed: Routed, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="cairn.call"):
        assert (await routed.call("sneaky")).database == routed.primary
    assert "sneaky wrote on a read replica" in caplog.text
    assert await routed.primary_sql("SELECT count(*) FROM seen WHERE at = 'sneaky'") == 1
    replicas = routed.app.replicas
    assert replicas is not None
    replica = replicas.replicas[0]
    replica.caught_up = routed.clock.now
    down = Database("postgresql+asyncpg://postgres@/nowhere?host=/nonexistent&port=1", routed.app.settings)
    replica.db = down
    try:
        assert (await routed.call("peek", OTHER)).database == routed.primary
        assert replica.caught_up is None  # set aside until a probe reaches it again
        assert (await routed.call("peek", OTHER)).database == routed.primary
    finally:
        await down.dispose()
