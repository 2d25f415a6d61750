"""app/datasets/engine/slots.py: one key holds at most its share of the engine slots, waits without a
thread, and a wait that is cancelled gives no slot away."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.core.errors import RateLimited
from app.datasets.engine.slots import FairSlots
from tests.support.engine import until


async def test_a_key_holds_at_most_its_share_and_the_least_recently_served_goes_first() -> None:
    slots = FairSlots(2, 1, 8)
    await slots.acquire("hostile")
    second = asyncio.create_task(slots.acquire("hostile"))
    await until(lambda: slots.waiting() == 1)
    assert not second.done() and slots.held("hostile") == 1  # one slot is free, but not for this key
    await asyncio.wait_for(slots.acquire("other"), 1)  # the other key takes it at once
    third = asyncio.create_task(slots.acquire("third"))
    await until(lambda: slots.waiting() == 2)
    assert not third.done()
    # The hostile key's waiting call came first, but that key was just served: the third key goes first.
    slots.release("hostile")
    await asyncio.wait_for(third, 1)
    assert not second.done()
    slots.release("other")
    await asyncio.wait_for(second, 1)
    slots.release("hostile")
    slots.release("third")
    assert slots.held("hostile") == slots.held("third") == slots.waiting() == 0


async def test_freed_slots_go_round_robin_across_callers_not_in_arrival_order() -> None:
    slots = FairSlots(1, 1, 8)
    await slots.acquire("flood")
    flood = [asyncio.create_task(slots.acquire("flood")) for _ in range(3)]
    await until(lambda: slots.waiting() == 3)
    victim = asyncio.create_task(slots.acquire("victim"))
    await until(lambda: slots.waiting() == 4)
    slots.release("flood")  # the victim's one call goes next, not behind the flood's three earlier ones
    await asyncio.wait_for(victim, 1)
    assert not any(task.done() for task in flood)
    slots.release("victim")
    for task in flood:  # then the flood's, one at a time
        await asyncio.wait_for(task, 1)
        assert slots.held("flood") == 1
        slots.release("flood")
    assert slots.waiting() == 0 and slots.held("flood") == slots.held("victim") == 0


async def test_the_caller_holding_fewest_slots_goes_first() -> None:
    slots = FairSlots(4, 3, 8)
    for _ in range(3):
        await slots.acquire("big")
    await slots.acquire("small")
    big = asyncio.create_task(slots.acquire("big"))  # first in line, and served before "small"
    await until(lambda: slots.waiting() == 1)
    small = asyncio.create_task(slots.acquire("small"))
    await until(lambda: slots.waiting() == 2)
    slots.release("big")  # "big" holds 2 and is under its cap again, "small" holds 1: "small" goes first
    await asyncio.wait_for(small, 1)
    assert not big.done() and slots.held("small") == 2
    slots.release("small")
    await asyncio.wait_for(big, 1)
    for key, n in (("big", 3), ("small", 1)):
        for _ in range(n):
            slots.release(key)
    assert slots.waiting() == 0 and slots.held("big") == slots.held("small") == 0


async def test_a_caller_holding_nothing_takes_a_burst_slot_unless_it_ran_long_lately() -> None:
    slots = FairSlots(2, 1, 8, burst=1, may_burst=lambda key: key != "long")
    await slots.acquire("a")
    await slots.acquire("b")
    second = asyncio.create_task(slots.acquire("a"))  # "a" holds a slot: no burst for it
    await until(lambda: slots.waiting() == 1)
    await asyncio.wait_for(slots.acquire("short"), 1)  # both slots taken: a burst one, at once
    assert slots.bursting() == 1 and slots.held("short") == 1
    late = asyncio.create_task(slots.acquire("late"))  # the only burst slot is taken
    long = asyncio.create_task(slots.acquire("long"))  # ran long lately: waits for a regular slot
    await until(lambda: slots.waiting() == 3)
    slots.release("short")  # the burst slot goes to "late", not to "long" nor to "a"
    await asyncio.wait_for(late, 1)
    assert not long.done() and not second.done() and slots.bursting() == 1
    slots.release("b")  # a regular slot: "long" holds none, "a" holds one
    await asyncio.wait_for(long, 1)
    assert not second.done()
    slots.release("a")
    await asyncio.wait_for(second, 1)
    for key in ("a", "long", "late"):
        slots.release(key)
    assert slots.waiting() == slots.bursting() == 0
    assert all(slots.held(k) == 0 for k in ("a", "b", "short", "late", "long"))


async def test_a_burst_slot_holder_moves_to_a_regular_slot_nobody_waits_for() -> None:
    slots = FairSlots(1, 1, 8, burst=1)
    await slots.acquire("a")
    await slots.acquire("b")  # a burst slot
    assert slots.bursting() == 1
    slots.release("a")  # nobody waits: "b" now counts in the regular slot, the burst one is free again
    assert slots.bursting() == 0
    await asyncio.wait_for(slots.acquire("c"), 1)
    assert slots.bursting() == 1
    waiting = asyncio.create_task(slots.acquire("d"))
    await until(lambda: slots.waiting() == 1)
    slots.release("b")  # the regular slot goes to the waiting call; "c" stays in its burst slot
    await asyncio.wait_for(waiting, 1)
    assert slots.bursting() == 1
    slots.release("c")
    slots.release("d")
    assert slots.waiting() == slots.bursting() == 0


async def test_a_key_with_too_many_waiting_calls_is_refused() -> None:
    slots = FairSlots(2, 1, 2)
    await slots.acquire("k")
    waiting = [asyncio.create_task(slots.acquire("k")) for _ in range(2)]
    await until(lambda: slots.waiting() == 2)
    with pytest.raises(RateLimited) as refused:
        await slots.acquire("k")
    assert refused.value.code == 4290 and refused.value.headers["Retry-After"] == "1"
    for task in waiting:  # each release lets the next waiting call in
        slots.release("k")
        await asyncio.wait_for(task, 1)
    slots.release("k")
    assert slots.held("k") == slots.waiting() == 0


async def test_a_cancelled_wait_gives_no_slot_away() -> None:
    slots = FairSlots(1, 1, 8)
    await slots.acquire("a")
    waiter = asyncio.create_task(slots.acquire("b"))
    await until(lambda: slots.waiting() == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.waiting() == 0
    # Granted and cancelled in the same turn: the slot comes back.
    late = asyncio.create_task(slots.acquire("b"))
    await until(lambda: slots.waiting() == 1)
    slots.release("a")
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await late
    assert slots.held("b") == 0
    await asyncio.wait_for(slots.acquire("c"), 1)


def test_threads_wait_their_turn_too() -> None:
    slots = FairSlots(2, 2, 8)
    held, peak, lock = [0], [0], threading.Lock()
    meet = threading.Barrier(2, timeout=10)

    def use() -> None:
        slots.acquire_sync("k")
        with lock:
            held[0] += 1
            peak[0] = max(peak[0], held[0])
        meet.wait()  # two calls hold a slot at once
        with lock:
            held[0] -= 1
        slots.release("k")

    threads = [threading.Thread(target=use) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert peak[0] == 2 and slots.held("k") == 0
