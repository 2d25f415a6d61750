"""app/core/limits_repository.py on a migrated database of its own: a bucket starts full, gives out
whole tokens up to what it holds and refills at its rate up to its burst; slots are taken up to the
limit, expired ones neither count nor stay, renewed ones live on, freed ones go; failed
authentications lock an address out once `limit` fall within the window, and the sweep drops what is
stale. Elapsed time is made by moving the rows' times back, not by waiting."""

from __future__ import annotations

import uuid

import pytest

from app.core.db import Database
from app.core.limits_repository import Lease, LimitsRepository
from tests.support.databases import database_fixture

db = database_fixture([])


async def _lease(db: Database, key: str, want: int, rate: float = 2.0, burst: int = 10) -> Lease:
    return await db.run(lambda s: LimitsRepository(s).lease_tokens(key, want, rate, burst))


async def _age(db: Database, sql: str, params: dict[str, object]) -> None:
    async with db.transaction() as session:
        await LimitsRepository(session).execute(sql, params)


async def test_a_bucket_starts_full_and_gives_whole_tokens_up_to_its_level(db: Database) -> None:
    first = await _lease(db, "k1", 6)
    assert first.granted == 6 and first.tokens == pytest.approx(4, abs=0.01)
    second = await _lease(db, "k1", 6)  # only about 4 left: those, not more
    assert second.granted == 4 and 0 <= second.tokens < 1
    empty = await _lease(db, "k1", 6)
    assert empty.granted == 0 and empty.tokens < 1
    assert (await _lease(db, "k2", 20)).granted == 10  # another key has its own bucket; at most the burst


async def test_a_bucket_refills_at_its_rate_up_to_its_burst(db: Database) -> None:
    assert (await _lease(db, "r1", 10)).granted == 10
    move = "UPDATE limit_buckets SET updated_at = updated_at - make_interval(secs => :s) WHERE key = :key"
    await _age(db, move, {"s": 2.0, "key": "r1"})  # 2 s at 2/s: 4 tokens
    refilled = await _lease(db, "r1", 10)
    assert refilled.granted == 4 and 0 <= refilled.tokens < 1
    await _age(db, move, {"s": 3600.0, "key": "r1"})  # long idle: full, never more than the burst
    assert (await _lease(db, "r1", 50)).granted == 10


async def _take(db: Database, key: str, limit: int = 2, ttl: float = 30.0, kind: str = "job") -> uuid.UUID | None:
    slot = uuid.uuid4()

    async def take(session: object) -> bool:
        return await LimitsRepository(session).take_slot(slot, kind, key, "test-holder", limit, ttl)  # type: ignore[arg-type]

    return slot if await db.run(take, one_statement=True, retry=False) else None


async def _held(db: Database, key: str, kind: str = "job") -> int:
    return await db.run(lambda s: LimitsRepository(s).held_slots(kind, key))


async def test_slots_are_taken_up_to_the_limit_and_freed(db: Database) -> None:
    a, b = await _take(db, "s1"), await _take(db, "s1")
    assert a is not None and b is not None
    assert await _take(db, "s1") is None  # the limit is 2
    assert await _take(db, "s1", kind="stream") is not None  # another kind counts apart
    assert await _held(db, "s1") == 2
    assert await db.run(lambda s: LimitsRepository(s).free_slots([a])) == 1
    assert await _take(db, "s1") is not None


async def test_expired_slots_neither_count_nor_stay_and_renewed_ones_live(db: Database) -> None:
    a, b = await _take(db, "s2"), await _take(db, "s2")
    assert a is not None and b is not None
    expire = "UPDATE limit_slots SET expires_at = now() - interval '1 second' WHERE id = :id"
    await _age(db, expire, {"id": a})  # its process stopped renewing it
    assert await _held(db, "s2") == 1
    assert await db.run(lambda s: LimitsRepository(s).renew_slots([a, b], 30.0)) == 2
    assert await _held(db, "s2") == 2  # renewed: live again
    await _age(db, expire, {"id": a})
    c = await _take(db, "s2")
    assert c is not None
    remaining = await db.run(lambda s: LimitsRepository(s).renew_slots([a, b, c], 30.0))
    assert remaining == 2  # the expired row was dropped by the claim


async def _fail(db: Database, client: str, limit: int = 3, window: float = 60.0) -> float | None:
    return await db.run(lambda s: LimitsRepository(s).record_auth_failure(client, limit, window))


async def _lockout(db: Database, client: str, limit: int = 3, window: float = 60.0) -> float | None:
    return await db.run(lambda s: LimitsRepository(s).auth_lockout(client, limit, window))


async def test_failures_lock_an_address_out_within_the_window(db: Database) -> None:
    assert [await _fail(db, "10.0.0.1") for _ in range(2)] == [None, None]
    assert await _lockout(db, "10.0.0.1") is None
    wait = await _fail(db, "10.0.0.1")
    assert wait is not None and 59 < wait <= 60
    locked = await _lockout(db, "10.0.0.1")
    assert locked is not None and 59 < locked <= 60
    assert await _lockout(db, "10.0.0.2") is None  # per address
    older = "UPDATE limit_auth_failures SET failures = ARRAY[now() - interval '61 s'] || failures[2:] WHERE client = :c"
    await _age(db, older, {"c": "10.0.0.1"})  # the oldest counted failure has left the window
    assert await _lockout(db, "10.0.0.1") is None
    again = await _fail(db, "10.0.0.1")  # the old one is dropped: three within the window again
    assert again is not None and 0 < again <= 60
    rows = await db.run(
        lambda s: LimitsRepository(s).scalar("SELECT cardinality(failures) FROM limit_auth_failures WHERE client = 'x'")
    )
    assert rows is None


async def test_the_sweep_drops_what_is_stale(db: Database) -> None:
    await _lease(db, "old-bucket", 1)
    await _lease(db, "new-bucket", 1)
    slot = await _take(db, "sweep")
    await _fail(db, "10.9.9.9")
    async with db.transaction() as session:
        repo = LimitsRepository(session)
        await repo.execute("UPDATE limit_buckets SET updated_at = now() - interval '2 hours' WHERE key = 'old-bucket'")
        await repo.execute("UPDATE limit_slots SET expires_at = now() - interval '1 s' WHERE id = :id", {"id": slot})
        await repo.execute("UPDATE limit_auth_failures SET updated_at = now() - interval '2 minutes'")
    # as the fleet limits run it: plain SQL on the driver (`Database.run(plain=True)`)
    assert await db.run(lambda s: LimitsRepository(s).sweep(), plain=True) >= 1  # expired slots only
    assert await db.run(lambda s: LimitsRepository(s).sweep(idle=3600.0, window=60.0), plain=True) >= 2
    buckets = await db.run(lambda s: LimitsRepository(s).scalars("SELECT key FROM limit_buckets ORDER BY key"))
    assert "old-bucket" not in buckets and "new-bucket" in buckets
    assert await _lockout(db, "10.9.9.9", limit=1) is None
