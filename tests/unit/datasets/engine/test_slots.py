"""app/datasets/engine/slots.py: one key holds at most its share of the engine slots, waits without a
thread, and a wait that is cancelled gives no slot away."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.core.errors import RateLimited
from app.datasets.engine.slots import FairSlots
from tests.support.engine import until


async def test_a_key_holds_at_most_its_share_and_another_key_goes_first() -> None:
    slots = FairSlots(2, 1, 8)
    await slots.acquire("hostile")
    second = asyncio.create_task(slots.acquire("hostile"))
    await until(lambda: slots.waiting() == 1)
    assert not second.done() and slots.held("hostile") == 1  # one slot is free, but not for this key
    await asyncio.wait_for(slots.acquire("other"), 1)  # the other key takes it at once
    third = asyncio.create_task(slots.acquire("third"))
    await until(lambda: slots.waiting() == 2)
    assert not third.done()
    slots.release("hostile")  # the hostile key's waiting call was first in line and is under its cap again
    await asyncio.wait_for(second, 1)
    assert not third.done()
    slots.release("other")
    await asyncio.wait_for(third, 1)
    slots.release("hostile")
    slots.release("third")
    assert slots.held("hostile") == slots.held("third") == slots.waiting() == 0


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
