"""app/core/job_slot.py: a long-running call's slot claimed beside its handler, the handler ended by a
refusal, the long part waiting for the claim, and the slot given back once (or once taken, late)."""

from __future__ import annotations

import asyncio

import pytest

from app.core.errors import RateLimited
from app.core.job_slot import JobSlot, job_slot_taken
from tests.support.waiting import UntilCancelled, eventually

DEADLINE = 10.0


class GatedSlots:
    """`Slots` whose claims wait for `open` and then take a slot, or raise when `refuse` is set."""

    limit = 1

    def __init__(self, refuse: bool = False) -> None:
        self.open = asyncio.Event()
        self.refuse = refuse
        self.held: dict[str, int] = {}
        self.given_back: list[str] = []

    async def claim(self, key: str, operation: str = "") -> None:
        await self.open.wait()
        if self.refuse:
            raise RateLimited(f"'{operation}' must wait")
        self.held[key] = self.held.get(key, 0) + 1

    async def give_back(self, key: str) -> None:
        self.held[key] -= 1
        self.given_back.append(key)

    async def close(self) -> None:
        """Nothing held outside this object."""


async def test_the_handler_runs_while_the_claim_is_under_way_and_the_slot_goes_back_once() -> None:
    slots = GatedSlots()
    slot = JobSlot.start(slots, "k", "execute_query")
    started = asyncio.Event()

    async def handler() -> str:
        started.set()
        return "done"

    run = asyncio.ensure_future(slot.run(handler))
    async with asyncio.timeout(DEADLINE):
        await started.wait()  # the claim has not returned yet
    assert not run.done() and slots.held == {}
    slots.open.set()
    assert await asyncio.wait_for(run, DEADLINE) == "done"
    await slot.end()
    slot.done()
    await slot.end()
    assert slots.held == {"k": 0} and slots.given_back == ["k"]


async def test_a_refused_claim_cancels_the_handler_and_answers_the_refusal() -> None:
    slots = GatedSlots(refuse=True)
    slot = JobSlot.start(slots, "k", "execute_query")
    work = UntilCancelled()  # a long part that never ends by itself
    run = asyncio.ensure_future(slot.run(work.run))
    async with asyncio.timeout(DEADLINE):
        await work.running.wait()
    slots.open.set()
    with pytest.raises(RateLimited):
        await asyncio.wait_for(run, DEADLINE)
    assert work.cancelled.is_set()
    await slot.end()
    assert slots.given_back == []  # nothing was taken


async def test_a_handler_done_before_its_claim_is_refused_still_ends_refused() -> None:
    slots = GatedSlots(refuse=True)
    slot = JobSlot.start(slots, "k", "profile_dataset")

    async def handler() -> str:
        return "work done before the refusal"

    run = asyncio.ensure_future(slot.run(handler))
    await asyncio.sleep(0)
    slots.open.set()
    with pytest.raises(RateLimited):
        await asyncio.wait_for(run, DEADLINE)


async def test_the_long_part_waits_for_the_claim() -> None:
    slots = GatedSlots()
    slot = JobSlot.start(slots, "k", "execute_query")
    steps: list[str] = []

    async def handler() -> None:
        steps.append("first steps")
        await job_slot_taken()
        steps.append(f"long part, slots held: {slots.held.get('k', 0)}")

    run = asyncio.ensure_future(slot.run(handler))
    await eventually(lambda: steps == ["first steps"], DEADLINE, 0.001, "the handler's first steps ran")
    assert not run.done()
    slots.open.set()
    await asyncio.wait_for(run, DEADLINE)
    assert steps == ["first steps", "long part, slots held: 1"]
    await job_slot_taken()  # outside a long-running call it returns at once


async def test_a_call_that_ends_before_its_claim_returns_gives_the_slot_back_once_taken() -> None:
    slots = GatedSlots()
    slot = JobSlot.start(slots, "k", "execute_query")
    await slot.end()  # the call failed early (bad arguments) while the claim was under way
    slots.open.set()
    await eventually(lambda: slots.given_back == ["k"], DEADLINE, 0.001, "the late slot was given back")
    assert slots.held == {"k": 0}


async def test_a_cancelled_call_cancels_its_handler() -> None:
    slots = GatedSlots()
    slots.open.set()
    slot = JobSlot.start(slots, "k", "execute_query")
    work = UntilCancelled()
    run = asyncio.ensure_future(slot.run(work.run))
    async with asyncio.timeout(DEADLINE):
        await work.running.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert work.cancelled.is_set()
    await slot.end()
    assert slots.given_back == ["k"]
