"""app/core/fleet_limits.py: two limiters on one database stand for two processes of a fleet. One key's
calls through both never exceed its bucket, and one limiter alone gets all of it; a warm key's calls
and a refused key's calls do not wait for the database; slots hold across both, come back when freed,
expire when their process stops renewing them and live on while it does; an address locked out
through one is refused by the other's lookup. A database that cannot be reached makes each limit
count in memory instead of failing the call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from app.core import migrations
from app.core.config import Settings
from app.core.db import Database
from app.core.errors import RateLimited
from app.core.fleet_limits import FleetFailures, FleetRateLimiter, FleetSlots, holder_name
from app.core.limits_repository import LimitsRepository
from app.core.ratelimit import JobSlots, StreamSlots
from tests.support.server import PgCluster, free_port
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
async def url(pg: PgCluster) -> str:
    found = pg.handle.url(pg.new_database())
    await migrations.upgrade_async(found, [])
    return found


@pytest.fixture
async def two(url: str) -> AsyncIterator[tuple[Database, Database]]:
    """Two engines on one database: two processes' pools."""
    a, b = Database(url, Settings()), Database(url, Settings())
    try:
        yield a, b
    finally:
        await a.dispose()
        await b.dispose()


@pytest.fixture
async def down() -> AsyncIterator[Database]:
    """A database nobody answers at (connections are refused at once)."""
    db = Database(f"postgresql+asyncpg://cairn:x@127.0.0.1:{free_port()}/none", Settings())
    try:
        yield db
    finally:
        await db.dispose()


def count_runs(limit: Any) -> list[int]:
    """Count the statements `limit` sends to the database from now on (one entry per run)."""
    runs: list[int] = []
    original = limit.shared.run

    async def counted(work: Callable[[LimitsRepository], Awaitable[Any]]) -> Any:
        runs.append(1)
        return await original(work)

    limit.shared.run = counted
    return runs


async def admitted(limiter: FleetRateLimiter, key: str) -> bool:
    try:
        await limiter.admit(key)
        return True
    except RateLimited:
        return False


async def test_two_processes_never_exceed_one_bucket(two: tuple[Database, Database]) -> None:
    # A refill of one token per 100 s: the test's own duration adds nothing to the bucket.
    a, b = (FleetRateLimiter(0.01, 20, db, batch=4, hold=600) for db in two)
    total, refusals = 0, 0
    while refusals < 6:  # both refused, three times in a row each
        for limiter in (a, b):
            ok = await admitted(limiter, "shared-key")
            total += ok
            refusals = 0 if ok else refusals + 1
        await asyncio.sleep(0)  # the background leases run
    assert total == 20
    alone = FleetRateLimiter(0.01, 20, two[0], batch=4, hold=600)
    assert sum([await admitted(alone, "own-key") for _ in range(30)]) == 20  # one process gets the whole burst


async def test_a_refusal_says_when_and_the_next_ones_skip_the_database(two: tuple[Database, Database]) -> None:
    limiter = FleetRateLimiter(0.01, 2, two[0], batch=1, hold=600)
    assert [await admitted(limiter, "k") for _ in range(2)] == [True, True]
    with pytest.raises(RateLimited) as caught:
        for _ in range(3):  # a prefetched lease may still be on its way
            await limiter.admit("k")
    err = caught.value
    assert err.code == 4290 and 1 <= int(err.headers["Retry-After"]) <= 100  # one token at 0.01/s
    runs = count_runs(limiter)
    assert [await admitted(limiter, "k") for _ in range(50)] == [False] * 50
    assert runs == []


async def test_a_warm_key_leases_once_per_batch(two: tuple[Database, Database]) -> None:
    # A bucket far larger than the calls: every call is admitted, and only one in a batch waits.
    limiter = FleetRateLimiter(10_000, 10_000, two[0], batch=100, hold=600)
    runs = count_runs(limiter)
    for _ in range(1000):
        await limiter.admit("busy")
        await asyncio.sleep(0)  # a prefetched lease lands
    assert len(runs) <= 1000 // 100 + 1
    assert FleetRateLimiter(1000, 1000, two[0]).batch == 200  # a fifth of a second's worth
    assert FleetRateLimiter(20, 40, two[0]).batch == 4 and FleetRateLimiter(1, 2, two[0]).batch == 1


async def test_calls_that_outrun_their_leases_lease_more_at_a_time(two: tuple[Database, Database]) -> None:
    limiter = FleetRateLimiter(0.01, 64, two[0], batch=2, hold=600)
    runs = count_runs(limiter)
    outcomes = [await admitted(limiter, "fast") for _ in range(80)]  # no pause: every lease is waited for
    assert sum(outcomes) == 64 and outcomes[:64] == [True] * 64
    assert len(runs) <= 12  # 2, 4, 8, then 16 (a quarter of the burst) at a time: not 32 leases of 2


async def test_lapsed_tokens_are_not_spent(two: tuple[Database, Database]) -> None:
    limiter = FleetRateLimiter(0.01, 10, two[0], batch=5, hold=0.05)
    assert await admitted(limiter, "lapse")  # leased 5, spent 1
    start = time.monotonic()
    await eventually(lambda: time.monotonic() - start > 0.1, what="the lease's hold passed")
    assert sum([await admitted(limiter, "lapse") for _ in range(20)]) == 5  # the 4 held ones lapsed


async def test_rate_zero_is_off(two: tuple[Database, Database]) -> None:
    limiter = FleetRateLimiter(0, 1, two[0])
    runs = count_runs(limiter)
    for _ in range(10):
        await limiter.admit("k")
    assert runs == []


async def test_without_the_database_each_limit_counts_in_memory(down: Database) -> None:
    limiter = FleetRateLimiter(0.001, 3, down)
    assert [await admitted(limiter, "k") for _ in range(4)] == [True, True, True, False]
    slots = FleetSlots(JobSlots(1), down, "job")
    await slots.claim("k", "ingest")
    with pytest.raises(RateLimited):
        await slots.claim("k", "ingest")
    await slots.give_back("k")
    await slots.claim("k", "ingest")
    failures = FleetFailures(2, down)
    await FleetFailures(2, down).verify_allowed("10.1.1.1")  # nothing known: the lookup goes ahead
    for _ in range(2):
        await failures.record_failure("10.1.1.1")
    assert failures.retry_after("10.1.1.1") is not None


async def test_a_database_that_stops_answering_holds_no_call_up_for_long() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accepts, never answers

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    db = Database(f"postgresql+asyncpg://cairn:x@127.0.0.1:{port}/none", Settings())
    try:
        limiter = FleetRateLimiter(0.001, 2, db, lease_timeout=0.2)
        start = time.monotonic()
        assert await admitted(limiter, "k")  # waited 0.2 s for a lease, then counted in memory
        assert [await admitted(limiter, "k") for _ in range(2)] == [True, False]  # in memory at once
        assert time.monotonic() - start < 2  # not the driver's 10 s connect timeout
    finally:
        server.close()
        await db.dispose()


async def test_slots_hold_across_processes_and_come_back(two: tuple[Database, Database]) -> None:
    a, b = (FleetSlots(JobSlots(1), db, "job") for db in two)
    await a.claim("key", "ingest")
    with pytest.raises(RateLimited) as caught:
        await b.claim("key", "ingest")
    assert caught.value.code == 4290 and "ingest" in caught.value.message
    streams = FleetSlots(StreamSlots(1), two[1], "stream")
    await streams.claim("key")  # streams count apart from jobs
    await a.give_back("key")

    async def b_claims() -> bool:
        try:
            await b.claim("key", "ingest")
            return True
        except RateLimited:
            return False

    assert await b_claims()  # given back before `give_back` returned: free for every process at once
    await b.close()
    await streams.close()
    assert await two[0].run(lambda s: LimitsRepository(s).held_slots("job", "key")) == 0  # close gave it back
    unlimited = FleetSlots(JobSlots(0), two[0], "job")
    for _ in range(5):
        await unlimited.claim("key", "x")
    assert unlimited.held() == []


async def test_claims_racing_from_two_processes_take_exactly_the_limit(two: tuple[Database, Database]) -> None:
    hosts = [FleetSlots(JobSlots(3), db, "job") for db in two]

    async def claim(slots: FleetSlots) -> bool:
        try:
            await slots.claim("racing", "ingest")
            return True
        except RateLimited:
            return False

    taken = await asyncio.gather(*(claim(hosts[i % 2]) for i in range(24)))
    assert sum(taken) == 3  # each claim counts under the key's lock, after every claim committed before it
    assert await two[0].run(lambda s: LimitsRepository(s).held_slots("job", "racing")) == 3
    for slots in hosts:
        await slots.close()


async def test_a_claim_whose_caller_is_cancelled_gives_its_slot_back(two: tuple[Database, Database]) -> None:
    slots = FleetSlots(JobSlots(1), two[0], "job", ttl=600)  # freed, not expired
    entered, finished = asyncio.Event(), asyncio.Event()
    took: list[object] = []
    original = slots.shared.run

    async def watched(work: Callable[[LimitsRepository], Awaitable[Any]], **how: Any) -> Any:
        entered.set()
        took.append(await original(work, **how))
        finished.set()
        return took[-1]

    slots.shared.run = watched  # type: ignore[method-assign]
    caller = asyncio.ensure_future(slots.claim("cancelled", "ingest"))
    await asyncio.wait_for(entered.wait(), 30)  # the claim's statement is under way
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(finished.wait(), 30)
    assert took == [True]  # it took the slot after all, for a caller that is gone

    async def free() -> bool:
        return await two[1].run(lambda s: LimitsRepository(s).held_slots("job", "cancelled")) == 0

    await eventually(free, what="the cancelled claim's slot given back", timeout=10)
    await slots.claim("cancelled", "ingest")  # and the lock it took is gone with its transaction
    await slots.close()


async def test_a_stopped_process_slots_expire_and_a_live_ones_are_renewed(two: tuple[Database, Database]) -> None:
    crashed = FleetSlots(JobSlots(1), two[0], "job", ttl=0.6)
    await crashed.claim("gone", "ingest")
    assert crashed._heartbeat is not None
    crashed._heartbeat.cancel()  # the process died: nobody renews its row
    other = FleetSlots(JobSlots(1), two[1], "job", ttl=0.6)

    async def other_claims(key: str) -> bool:
        try:
            await other.claim(key, "ingest")
            return True
        except RateLimited:
            return False

    assert await eventually(lambda: other_claims("gone"), what="the dead process's slot expired")
    live = FleetSlots(JobSlots(1), two[0], "job", ttl=0.6)
    await live.claim("kept", "ingest")
    (slot,) = live.held()

    async def expiry() -> Any:
        return await two[0].run(
            lambda s: LimitsRepository(s).scalar("SELECT expires_at FROM limit_slots WHERE id = :id", {"id": slot})
        )

    first = await expiry()
    await eventually(lambda: _later(expiry, first), what="the lease renewed")
    await eventually(lambda: _later(expiry, first, by=1.0), what="renewed past its first ttl", timeout=30)
    assert not await other_claims("kept")  # still held: the heartbeat outlived the ttl
    await live.close()
    await other.close()


async def _later(expiry: Callable[[], Awaitable[Any]], first: Any, by: float = 0.0) -> bool:
    now = await expiry()
    return now is not None and (now - first).total_seconds() > by


async def test_a_lockout_recorded_by_one_process_refuses_the_others_lookup(two: tuple[Database, Database]) -> None:
    a, b = FleetFailures(3, two[0]), FleetFailures(3, two[1])
    for _ in range(3):
        await a.record_failure("10.2.2.2")
    wait = a.retry_after("10.2.2.2")
    assert wait is not None and 50 < wait <= 60  # the writer learned it at once
    assert b.retry_after("10.2.2.2") is None  # the other has not looked yet

    async def lookup(client: str) -> None:
        await b.verify_allowed(client)

    with pytest.raises(RateLimited) as caught:
        await lookup("10.2.2.2")
    assert caught.value.code == 4290 and int(caught.value.headers["Retry-After"]) > 50
    assert b.retry_after("10.2.2.2") is not None  # now known without the database
    await lookup("10.3.3.3")  # another address is not locked out
    off = FleetFailures(0, two[0])
    await off.record_failure("10.4.4.4")
    await off.verify_allowed("10.4.4.4")


def test_holders_are_told_apart() -> None:
    assert holder_name() != holder_name()
