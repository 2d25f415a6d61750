"""Per-key limits held across every process of a fleet (`cairn serve` hosts and their `--workers`),
with PostgreSQL as the only shared part (tables of revision `core_0006`, SQL in
`app.core.limits_repository`).

- **Call rate** (`FleetRateLimiter`): a token bucket per key in the database. A process leases a small
  batch of tokens in one statement, in a short transaction of its own, and spends them in memory; it
  leases the next batch in the background while a few are left, so a call under the limit never waits
  for the database once the key is warm. The cluster never spends more than the bucket gave out:
  tokens a process leased but did not spend within `hold` seconds (10) lapse, and a process holds at
  most one and a half leases, so no process can save tokens up. A refused call says
  Retry-After from the bucket's level, and later ones are refused in memory until then.
- **Long-job and stream slots** (`FleetSlots`): one row per held slot with a lease its process renews
  in the background; a claim counts the key's live rows under a transaction-level advisory lock and
  inserts one (one round trip per job or stream); giving it back deletes it; a crashed process's rows
  expire after `ttl` seconds.
- **Failed authentications** (`FleetFailures`): only a failure writes (an upsert of the address's
  recent failures); the lockout is read right before an uncached key is looked up anyway, so a static
  key or a cached valid key costs nothing.

While the database cannot be reached, each limit counts in this process's memory
(`app.core.ratelimit`) instead of adding an error of its own: the call then fails on its own database
access as it would have without the limiter. The fleet's figure then holds per process only. A call
waits at most `lease_timeout` seconds for a rate lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.db import Database
from app.core.limits_repository import LimitsRepository
from app.core.ratelimit import FailureLimiter, JobSlots, RateLimiter, StreamSlots

log = logging.getLogger("cairn.limits")
T = TypeVar("T")

# How long a process counts in memory after the database failed a limit's statement, before trying it again.
OUTAGE_BACKOFF_SECONDS = 2.0
# How often (at most) a process drops the stale rows of every limit table.
SWEEP_SECONDS = 60.0
# A key that spends half its lease sooner than this leases twice as many next time (up to a quarter of
# its burst): a busy key costs a few leases a second, whatever its call rate.
QUICK_LEASE_SECONDS = 0.25
_MAX_KEYS = 10_000


def holder_name() -> str:
    """This process, as its slot rows name it (host, pid and a random part: pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class _Shared:
    """A limit's way to the database: each statement in a short transaction of its own, a pause in
    memory after a failure, and the periodic sweep of stale rows."""

    def __init__(self, db: Database, name: str, *, idle: float | None = None, window: float | None = None) -> None:
        self.db = db
        self.name = name
        self.idle, self.window = idle, window  # what the sweep drops besides expired slots (`LimitsRepository.sweep`)
        self._offline_until = 0.0
        self._swept = time.monotonic()

    @property
    def offline(self) -> bool:
        """True while the last failure is recent: count in memory, do not wait for the database."""
        return time.monotonic() < self._offline_until

    async def run(self, work: Callable[[LimitsRepository], Awaitable[T]], *, one_statement: bool = False) -> T:
        """`work` in its own transaction (with the sweep when one is due). `one_statement`: `work` is a
        single statement, which then runs as its own transaction, unless the sweep goes with it; it is
        not run again after a lost connection (it may have committed).

        Raises:
            Exception: whatever the database raised; the limit is then offline for a moment.
        """
        sweep = time.monotonic() - self._swept > SWEEP_SECONDS
        if sweep:
            self._swept = time.monotonic()

        async def unit(session: AsyncSession) -> T:
            repo = LimitsRepository(session)
            if sweep:
                await repo.sweep(self.idle, self.window)
            return await work(repo)

        try:
            if one_statement and not sweep:
                return await self.db.run(unit, one_statement=True, retry=False)
            return await self.db.run(unit, plain=True)  # the limits' statements are plain SQL
        except Exception as exc:
            self.pause(str(exc))
            raise

    def pause(self, why: str) -> None:
        """Count in memory for `OUTAGE_BACKOFF_SECONDS` (logged when it starts)."""
        if not self.offline:
            log.warning("%s: the database failed (%s); counting in this process for now", self.name, why)
        self._offline_until = time.monotonic() + OUTAGE_BACKOFF_SECONDS


@dataclass
class _Stock:
    """One key's tokens in this process."""

    tokens: int = 0
    batch: int = 1  # the next lease's size: doubled while calls outrun the leases, reset at the limit
    until: float = 0.0  # the tokens lapse then (monotonic)
    landed: float = 0.0  # when the last lease came back
    refused_until: float = 0.0  # the bucket was empty: refuse in memory until then
    waiting: int = 0  # calls waiting for the lease in flight
    lease: asyncio.Task[None] | None = None


class FleetRateLimiter(RateLimiter):
    """`rate` calls per second per key with bursts of up to `burst`, across every process: a token
    bucket in the database, leased `batch` tokens at a time (see the module docstring); a key whose
    calls outrun its leases (a call waits for one, or half a lease is spent within
    `QUICK_LEASE_SECONDS`) leases twice as many next time, up to a quarter of the burst, and `batch`
    again once the bucket runs short. A rate of 0 turns the limit off."""

    def __init__(
        self,
        rate: float,
        burst: int,
        db: Database,
        *,
        batch: int | None = None,
        hold: float = 10.0,
        lease_timeout: float = 2.0,
    ) -> None:
        super().__init__(rate, burst)
        # A call waits this long for a lease, then counts in memory (the lease goes on): a database that
        # stopped answering must not hold every call up for the driver's connect timeout first.
        self.lease_timeout = lease_timeout
        # A fifth of a second's worth: about five leases a second per busy key, and at most a quarter
        # of the burst held by any one process.
        self.batch = batch or max(1, min(math.ceil(rate / 5), self.burst // 4))
        self.max_batch = max(self.batch, self.burst // 4)
        self.hold = hold
        # A bucket untouched for its refill time is full: the sweep may drop it.
        idle = max(3600.0, self.burst / rate) if rate > 0 else 3600.0
        self.shared = _Shared(db, "rate limit", idle=idle)
        self._stocks: dict[str, _Stock] = {}

    async def admit(self, key: str) -> None:
        """Count one call of `key`, or raise RateLimited with a Retry-After hint."""
        if not self.enabled:
            return
        stock = self._stocks.get(key)
        if stock is None:
            if len(self._stocks) >= _MAX_KEYS:
                self._stocks.clear()
            stock = self._stocks[key] = _Stock(batch=self.batch)
        for _ in range(3):
            now = time.monotonic()
            if stock.until <= now:
                stock.tokens = 0
            if stock.tokens > 0:
                stock.tokens -= 1
                if stock.tokens <= stock.batch // 2 and stock.lease is None:
                    if now - stock.landed < QUICK_LEASE_SECONDS:  # half spent this soon: lease more
                        stock.batch = min(self.max_batch, stock.batch * 2)
                    stock.lease = asyncio.ensure_future(self._lease(key, stock, stock.batch))
                return
            if now < stock.refused_until:
                raise self.exceeded(max(1, math.ceil(stock.refused_until - now)))
            if self.shared.offline or not await self._wait_for_lease(key, stock):
                self.check(key)
                return
        raise self.exceeded(1)

    async def _wait_for_lease(self, key: str, stock: _Stock) -> bool:
        """Wait for the key's lease in flight (started if none is); False when it took too long."""
        stock.waiting += 1
        try:
            if stock.waiting == 1 and stock.until > time.monotonic():  # spent before it lapsed: lease more
                stock.batch = min(self.max_batch, stock.batch * 2)
            if stock.lease is None:
                stock.lease = asyncio.ensure_future(self._lease(key, stock, max(stock.batch, stock.waiting)))
            await asyncio.wait_for(asyncio.shield(stock.lease), self.lease_timeout)
            return True
        except TimeoutError:
            self.shared.pause(f"no lease within {self.lease_timeout:g} s")
            return False
        finally:
            stock.waiting -= 1

    async def _lease(self, key: str, stock: _Stock, want: int) -> None:
        """Lease up to `want` tokens of `key` into `stock` (in memory: nothing, when the database fails)."""
        try:
            lease = await self.shared.run(
                lambda repo: repo.lease_tokens(key, min(want, self.burst), self.rate, self.burst)
            )
        except Exception:
            return
        finally:
            stock.lease = None
        now = time.monotonic()
        if lease.granted < want:  # the bucket runs short: small leases share it fairly
            stock.batch = self.batch
        if lease.granted > 0:
            if stock.until <= now:
                stock.tokens = 0
            stock.tokens += lease.granted
            stock.until, stock.landed = now + self.hold, now
            stock.refused_until = 0.0
        else:
            stock.refused_until = now + max(0.0, 1.0 - lease.tokens) / self.rate


class FleetSlots:
    """At most `limit` slots of `kind` per key at once across every process (`local` holds the limit's
    figure, its refusal, and the count while the database cannot be reached). Each held slot is a row
    whose lease (`ttl` seconds) a background task of this process renews."""

    def __init__(self, local: JobSlots | StreamSlots, db: Database, kind: str, *, ttl: float = 30.0) -> None:
        self.local = local
        self.limit = local.limit
        self.kind = kind
        self.ttl = ttl
        self.holder = holder_name()
        self.shared = _Shared(db, f"{kind} slots")
        self._held: dict[str, list[uuid.UUID | None]] = {}  # None: a slot counted in memory only
        self._heartbeat: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Future[None]] = set()

    async def claim(self, key: str, operation: str = "") -> None:
        """Take a slot of `key` or raise RateLimited."""
        if self.limit <= 0:
            return
        if self.shared.offline:
            self._claim_locally(key, operation)
            return
        slot = uuid.uuid4()

        async def take(repo: LimitsRepository) -> bool:
            return await repo.take_slot(slot, self.kind, key, self.holder, self.limit, self.ttl)

        # Its own task: a caller cancelled mid-claim must not cut the statement holding the lock short.
        claim = asyncio.ensure_future(self.shared.run(take, one_statement=True))
        try:
            taken = await asyncio.shield(claim)
        except asyncio.CancelledError:
            claim.add_done_callback(lambda done: self._abandoned(done, slot))
            raise
        except Exception:
            self._claim_locally(key, operation)
            return
        if not taken:
            raise self.local.full(operation)
        self._held.setdefault(key, []).append(slot)
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.ensure_future(self._renew())

    def _abandoned(self, claim: asyncio.Future[bool], slot: uuid.UUID) -> None:
        """Free the slot a cancelled caller's claim took after all."""
        if not claim.cancelled() and claim.exception() is None and claim.result():
            self._spawn(self._free([slot]))

    def _spawn(self, work: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    def _claim_locally(self, key: str, operation: str) -> None:
        if isinstance(self.local, JobSlots):
            self.local.acquire(key, operation)
        else:
            self.local.acquire(key)
        self._held.setdefault(key, []).append(None)

    async def give_back(self, key: str) -> None:
        """Give one of `key`'s slots back; returns once its row is deleted, so the key's next claim
        anywhere finds the slot free. A cancelled caller leaves the deletion running."""
        slot = self._pop(key)
        if slot is not None:
            await asyncio.shield(self._spawn(self._free([slot])))

    def _pop(self, key: str) -> uuid.UUID | None:
        """Forget one of `key`'s slots: its row's id (None for none, or one counted in memory, which is
        given back here)."""
        held = self._held.get(key)
        if not held:
            return None
        slot = held.pop()
        if not held:
            del self._held[key]
        if slot is None:
            self.local.release(key)
        return slot

    def held(self) -> list[uuid.UUID]:
        """The rows this process holds now."""
        return [slot for slots in self._held.values() for slot in slots if slot is not None]

    async def _free(self, slots: list[uuid.UUID]) -> None:
        with contextlib.suppress(Exception):  # the rows expire on their own
            await self.shared.db.run(lambda session: LimitsRepository(session).free_slots(slots), one_statement=True)

    async def _renew(self) -> None:
        """Renew the held rows' leases every third of `ttl`, while any are held."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            slots = self.held()
            if not slots:
                return
            with contextlib.suppress(Exception):  # logged by `run`; the next beat tries again
                await self.shared.run(functools.partial(LimitsRepository.renew_slots, slots=slots, ttl=self.ttl))

    async def close(self) -> None:
        """Stop renewing and give back every row still held (the process stops)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(BaseException):
                await self._heartbeat
        slots = self.held()
        self._held.clear()
        if slots:
            await self._free(slots)
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)


class FleetFailures(FailureLimiter):
    """At most `limit` failed authentications per client address in any `window` seconds, across every
    process: a failure is recorded in the database (one upsert), and the lockout is read in the key
    lookup's transaction (`verify_allowed`, right before it). What this process learned stays in memory, so `check` and
    `retry_after` answer without the database."""

    def __init__(self, limit: int, db: Database, window: float = 60.0, max_clients: int = 10_000) -> None:
        super().__init__(limit, window, max_clients)
        self.shared = _Shared(db, "failed-authentication limit", window=window)
        self._locked: dict[str, float] = {}  # client -> when its lockout ends (monotonic)

    def retry_after(self, client: str) -> int | None:
        """Seconds until `client` may try a key again, as this process knows, or None when it may now."""
        waits = [w for w in (super().retry_after(client), self._learned(client)) if w is not None]
        return max(waits) if waits else None

    def _learned(self, client: str) -> int | None:
        until = self._locked.get(client)
        if until is None:
            return None
        wait = until - time.monotonic()
        if wait <= 0:
            del self._locked[client]
            return None
        return max(1, math.ceil(wait))

    def _learn(self, client: str, wait: float) -> None:
        if len(self._locked) >= self.max_clients:
            self._locked.clear()
        self._locked[client] = time.monotonic() + wait

    async def verify_allowed(self, client: str) -> None:
        """Raise RateLimited when the shared record locks `client` out (read right before a key lookup,
        in a short transaction of its own on the primary: the lookup itself may be served elsewhere;
        while the database cannot be reached, what this process knows decides)."""
        if self.limit <= 0 or self.shared.offline:
            return
        try:
            wait = await self.shared.run(lambda repo: repo.auth_lockout(client, self.limit, self.window))
        except Exception:
            return
        if wait is not None and wait > 0:
            self._learn(client, wait)
            self.check(client)

    async def record_failure(self, client: str) -> None:
        """Count one failed authentication of `client` in the database (in memory while it cannot be
        reached)."""
        if self.limit <= 0:
            return
        if self.shared.offline:
            self.record(client)
            return
        try:
            wait = await self.shared.run(lambda repo: repo.record_auth_failure(client, self.limit, self.window))
        except Exception:
            self.record(client)
            return
        if wait is not None and wait > 0:
            self._learn(client, wait)
