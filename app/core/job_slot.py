"""A long-running call's job slot (`Slots`: per key, in memory or shared by the fleet), taken while the
call's first steps run rather than before them.

A fleet-wide claim is a database round trip. The executor starts it (`JobSlot.start`) and runs the
handler beside it (`JobSlot.run`): the handler's first steps (reading its inputs, finding files) overlap
the claim, and the long part of the work waits for it where it starts (`job_slot_taken`, which the
datasets engine awaits before it hands a query to a worker). A refused claim ends the call: the handler
is cancelled and the caller gets the refusal (429), as when the claim came first. A handler that does
not wait for the claim and finishes first still ends refused, with its transaction rolled back.

The slot goes back once the handler is done (`JobSlot.done`), while the call's transaction commits,
instead of after the commit: the work the slot bounds has ended by then.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TypeVar

from app.core.ratelimit import Slots

T = TypeVar("T")

# The claim of the call whose handler this task runs (None outside a long-running call).
_CLAIM: ContextVar[asyncio.Future[None] | None] = ContextVar("cairn_job_slot_claim", default=None)
# Give-backs started from a callback (a call that ended before its claim did): kept until they end.
_LATE: set[asyncio.Future[None]] = set()


async def job_slot_taken() -> None:
    """Wait until the current call's job slot is taken; raises its refusal (RateLimited). Returns at
    once outside a long-running call."""
    claim = _CLAIM.get()
    if claim is not None:
        await asyncio.shield(claim)


class JobSlot:
    """One call's slot of `key` in `slots`."""

    def __init__(self, slots: Slots, key: str, claim: asyncio.Future[None]) -> None:
        self.slots = slots
        self.key = key
        self.claim = claim
        self.release: asyncio.Future[None] | None = None

    @classmethod
    def start(cls, slots: Slots, key: str, operation: str) -> JobSlot:
        """Start claiming a slot of `key` for `operation`."""
        return cls(slots, key, asyncio.ensure_future(slots.claim(key, operation)))

    async def run(self, handler: Callable[[], Awaitable[T]]) -> T:
        """`handler()` beside the claim: its value once the claim has succeeded too. A refused claim
        cancels the handler (and waits for it to end) and raises the refusal; a cancelled call cancels
        the handler too."""
        token = _CLAIM.set(self.claim)
        try:
            task = asyncio.ensure_future(handler())
        finally:
            _CLAIM.reset(token)
        try:
            await asyncio.wait((task, self.claim), return_when=asyncio.FIRST_COMPLETED)
            if self.claim.done() and not self.claim.cancelled() and self.claim.exception() is not None:
                task.cancel()
            await asyncio.shield(self.claim)
            value = await task
        except BaseException:
            if not task.done():
                task.cancel()
                # The handler's statements must end before its transaction is rolled back.
                with contextlib.suppress(BaseException):
                    await task
            elif not task.cancelled():
                task.exception()  # read: a failure the refusal replaced is not reported as unread
            raise
        self.done()
        return value

    def done(self) -> None:
        """The work is over: give the slot back (once; only a slot that was taken)."""
        if self.release is None and _taken(self.claim):
            self.release = asyncio.ensure_future(self.slots.give_back(self.key))

    async def end(self) -> None:
        """The call is over: the slot is given back, or will be once a claim still under way takes it.
        Awaits the give-back when it is under way."""
        if not self.claim.done():
            self.claim.add_done_callback(self._late)
            return
        self.done()
        if self.release is not None:
            await self.release

    def _late(self, claim: asyncio.Future[None]) -> None:
        if _taken(claim):
            release = asyncio.ensure_future(self.slots.give_back(self.key))
            _LATE.add(release)
            release.add_done_callback(_LATE.discard)


def _taken(claim: asyncio.Future[None]) -> bool:
    """The claim ended with the slot taken (reading its refusal, if any)."""
    return claim.done() and not claim.cancelled() and claim.exception() is None
