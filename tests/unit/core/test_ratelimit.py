"""app/core/ratelimit.py: the per-key call rate, the long-job and event-stream slots, and the lockout
after failed authentications. Time is a `Clock` the tests move: no test waits for a window to pass."""

from __future__ import annotations

import limits.storage.memory
import limits.strategies
import pytest

from app.core import ratelimit
from app.core.errors import RateLimited
from app.core.ratelimit import FailureLimiter, JobSlots, RateLimiter, StreamSlots


class Clock:
    """Stands in for the `time` module of the limiter and of the `limits` library it uses."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    for module in (limits.storage.memory, limits.strategies, ratelimit):
        monkeypatch.setattr(module, "time", fake)
    return fake


def _outcomes(limiter: RateLimiter, key: str, n: int) -> list[int]:
    codes = []
    for _ in range(n):
        try:
            limiter.check(key)
            codes.append(200)
        except RateLimited as err:
            codes.append(err.status)
    return codes


def test_burst_then_refused_with_retry_after_per_key(clock: Clock) -> None:
    limiter = RateLimiter(rate=0.5, burst=3)  # 3 calls per 6 s window
    assert _outcomes(limiter, "a", 5) == [200, 200, 200, 429, 429]
    with pytest.raises(RateLimited) as caught:
        limiter.check("a")
    err = caught.value
    assert err.details is not None
    assert err.code == 4290 and err.headers["Retry-After"] == str(err.details["retry_after"])
    assert err.headers["Retry-After"] == "6"  # the window's first call is 6 s from leaving it
    clock.advance(4.5)
    with pytest.raises(RateLimited) as later:
        limiter.check("a")
    assert later.value.headers["Retry-After"] == "2"  # 1.5 s left, rounded up
    assert _outcomes(limiter, "b", 3) == [200, 200, 200]  # another key has its own window


def test_window_frees_a_slot_after_it_passes(clock: Clock) -> None:
    limiter = RateLimiter(rate=2, burst=2)  # 2 calls per 1 s window
    assert _outcomes(limiter, "k", 1) == [200]
    clock.advance(0.5)
    assert _outcomes(limiter, "k", 2) == [200, 429]
    clock.advance(0.49)  # the first call is still inside the window
    assert _outcomes(limiter, "k", 1) == [429]
    clock.advance(0.02)  # it has left: one slot, the second call still holds the other
    assert _outcomes(limiter, "k", 2) == [200, 429]
    clock.advance(1.01)
    assert _outcomes(limiter, "k", 3) == [200, 200, 429]


def test_the_window_is_the_burst_over_the_rate_in_whole_seconds(clock: Clock) -> None:
    limiter = RateLimiter(rate=3, burst=4)  # 4 / 3 s, rounded up: 2 s
    assert _outcomes(limiter, "k", 5) == [200] * 4 + [429]
    clock.advance(1.9)
    assert _outcomes(limiter, "k", 1) == [429]
    clock.advance(0.2)
    assert _outcomes(limiter, "k", 5) == [200] * 4 + [429]
    assert RateLimiter(rate=1, burst=0).burst == 1  # a burst of at least one call


def test_rate_zero_disables_the_limit() -> None:
    limiter = RateLimiter(rate=0, burst=1)
    assert not limiter.enabled
    assert _outcomes(limiter, "k", 50) == [200] * 50


def test_job_slots_cap_concurrent_long_operations_per_key() -> None:
    slots = JobSlots(limit=2)
    slots.acquire("k", "ingest")
    slots.acquire("k", "ingest")
    with pytest.raises(RateLimited) as caught:
        slots.acquire("k", "ingest")
    assert caught.value.headers["Retry-After"] == "5"
    slots.acquire("other", "ingest")
    slots.release("k")
    slots.acquire("k", "ingest")
    JobSlots(limit=0).acquire("k", "x")  # 0: no cap


def test_stream_slots_cap_open_streams_per_key_and_give_them_back() -> None:
    slots = StreamSlots(limit=2)
    slots.acquire("k")
    slots.acquire("k")
    with pytest.raises(RateLimited) as caught:
        slots.acquire("k")
    assert caught.value.code == 4290 and "2 open event stream" in caught.value.message
    slots.acquire("other")
    slots.release("k")
    slots.acquire("k")
    slots.release("k")
    slots.release("k")
    slots.release("other")
    assert slots._open == {}  # nothing held, no empty entries left
    unlimited = StreamSlots(limit=0)
    for _ in range(100):
        unlimited.acquire("k")
    unlimited.release("k")
    assert unlimited._open == {}


def test_failed_authentications_lock_an_address_out_until_the_oldest_leaves_the_window(clock: Clock) -> None:
    failures = FailureLimiter(limit=3, window=60.0)
    for _ in range(2):
        failures.record("10.0.0.1")
        clock.advance(10)
    assert failures.retry_after("10.0.0.1") is None  # two of three
    failures.check("10.0.0.1")
    failures.record("10.0.0.1")  # at 20 s: the third, the first was at 0 s
    assert failures.retry_after("10.0.0.1") == 40
    refusal = failures.refusal("10.0.0.1")
    assert refusal is not None and refusal.code == 4290 and refusal.headers["Retry-After"] == "40"
    with pytest.raises(RateLimited):
        failures.check("10.0.0.1")
    assert failures.retry_after("10.0.0.2") is None  # per address
    clock.advance(39.5)
    assert failures.retry_after("10.0.0.1") == 1  # half a second left, rounded up
    clock.advance(0.5)
    assert failures.retry_after("10.0.0.1") is None and failures.refusal("10.0.0.1") is None
    failures.record("10.0.0.1")  # the window slides: the two later failures and this one
    assert failures.retry_after("10.0.0.1") == 10


def test_failure_limit_zero_records_nothing() -> None:
    off = FailureLimiter(limit=0)
    for _ in range(10):
        off.record("a")
    assert off._failures == {} and off.retry_after("a") is None


def test_a_full_failure_table_forgets_stale_addresses_first_then_everything(clock: Clock) -> None:
    failures = FailureLimiter(limit=2, window=60.0, max_clients=3)
    failures.record("old")
    clock.advance(61)
    failures.record("a")
    failures.record("b")
    failures.record("c")  # the table is full: "old" left the window and is forgotten
    assert set(failures._failures) == {"a", "b", "c"}
    failures.record("d")  # none is stale: a flood from many addresses empties the table
    assert set(failures._failures) == {"d"}


async def test_the_awaitable_interface_counts_as_the_plain_methods(clock: Clock) -> None:
    """What the executor, the MCP endpoint and the key store await (shared with the fleet's limits)."""
    limiter = RateLimiter(rate=0.5, burst=2)
    await limiter.admit("k")
    await limiter.admit("k")
    with pytest.raises(RateLimited) as refused:
        await limiter.admit("k")
    assert refused.value.headers["Retry-After"] == "4" and limiter.exceeded(7).details == {"retry_after": 7}
    jobs, streams = JobSlots(limit=1), StreamSlots(limit=1)
    for slots in (jobs, streams):
        await slots.claim("k", "ingest")
        with pytest.raises(RateLimited):
            await slots.claim("k", "ingest")
        await slots.give_back("k")
        await slots.claim("k", "ingest")
        await slots.close()
    assert "'ingest' must wait" in jobs.full("ingest").message and "event stream" in streams.full().message
    failures = FailureLimiter(limit=2, window=60.0)
    await failures.record_failure("10.0.0.1")
    await failures.verify_allowed("10.0.0.1")  # nothing beyond the check in memory
    await failures.record_failure("10.0.0.1")
    assert failures.retry_after("10.0.0.1") == 60
