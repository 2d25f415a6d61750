"""Read-only operations served by PostgreSQL streaming replicas, with each caller reading its own writes.

Each `cairn serve` process keeps one `Replicas`: an engine per replica (`app.core.db.make_engine`, the
primary's options) and a background probe. Every `probe_seconds` the probe reads the primary's
`pg_current_wal_lsn()` (remembering when it asked: time t), then each replica's
`pg_last_wal_replay_lsn()`. A replica that has replayed up to the primary's position read at t has every
transaction that committed before t: it is "caught up to t".

`choose(key)` picks a replica for a read of `key` (spread at random over those that qualify), or None
for the primary. A replica qualifies when its last probe succeeded, it is caught up to a time within
`max_lag_seconds` of now, and the key's last write in this process (`note_write`, taken after the
write committed) came before that time. A replica found unreachable by a call is set aside until a
probe reaches it again (`fell_back`). No replica, or none that qualifies, means the primary: a replica
never turns into an error. Timestamps come from the monotonic clock of this process only.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter, Gauge
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.config import Settings
from app.core.db import Database
from app.core.repository import WalRepository

log = logging.getLogger("cairn.replicas")

Clock = Callable[[], float]

READS = Counter(
    "cairn_replica_reads_total",
    "Read-only calls that could use a replica, by where they ran (fallback: a replica failed it, the primary ran it)",
    ["target"],
)
CAUGHT_UP_AGE = Gauge(
    "cairn_replica_caught_up_age_seconds",
    "Seconds since the time up to which a replica is known to hold every commit (-1: unknown, down or no standby)",
    ["replica"],
)


def parse_lsn(value: str) -> int:
    """A WAL position as PostgreSQL prints it ("16/B374D848") as one integer."""
    high, low = value.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def redact(url: str) -> str:
    """A database URL without its password, for logs."""
    head, sep, tail = url.rpartition("@")
    if not sep or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    return f"{scheme}://{userinfo.split(':', 1)[0]}@{tail}"


@dataclass
class Replica:
    """One replica: its database handle and what the probes learned of it."""

    name: str
    db: Database
    # Monotonic time up to which the replica is known to hold every commit (None: unknown or failed)
    caught_up: float | None = None
    not_standby: bool = False
    # The probe's own one-connection pool (None: `db`), so that busy call pools never delay a probe
    probe_db: Database | None = None

    def usable(self, now: float, max_lag: float) -> bool:
        """Known to be caught up to a time at most `max_lag` seconds ago."""
        return self.caught_up is not None and now - self.caught_up <= max_lag


class Replicas:
    """The replicas of one process, their probe and each key's last write (see the module doc)."""

    def __init__(
        self,
        primary: Database,
        replicas: list[Replica],
        *,
        max_lag_seconds: float,
        probe_seconds: float,
        clock: Clock = time.monotonic,
        primary_probe: Database | None = None,
    ) -> None:
        self.primary = primary
        self.primary_probe = primary_probe or primary
        self.replicas = replicas
        self.max_lag = max_lag_seconds
        self.probe_seconds = probe_seconds
        self.clock = clock
        self.writes: dict[str, float] = {}
        # (time asked, primary WAL position) of recent probes: a replica behind the latest one may
        # still have reached an earlier one
        self.samples: deque[tuple[float, int]] = deque()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def build(cls, primary: Database, settings: Settings) -> Replicas | None:
        """One engine per `settings.database_replica_urls` (None when there is none)."""
        urls = settings.database_replica_urls
        if not urls:
            return None
        # The probes get one connection each, apart from the calls' pools: when every pooled connection
        # is busy, a probe waiting for one would find the replicas stale and send every read to the
        # primary, the busiest part.
        single = settings.model_copy(update={"db_pool_size": 1, "db_max_overflow": 0})
        replicas = [Replica(redact(url), Database(url, settings), probe_db=Database(url, single)) for url in urls]
        return cls(
            primary,
            replicas,
            max_lag_seconds=settings.database_replica_max_lag_seconds,
            probe_seconds=settings.database_replica_probe_seconds,
            primary_probe=Database(primary.url, single),
        )

    def note_write(self, key: str) -> None:
        """Record that a write of `key` has committed: its reads go to the primary until a replica has
        caught up past now."""
        self.writes[key] = self.clock()

    def choose(self, key: str) -> Replica | None:
        """A replica that may serve a read of `key`, or None for the primary."""
        now = self.clock()
        written = self.writes.get(key)
        fit = [
            r
            for r in self.replicas
            if r.usable(now, self.max_lag) and (written is None or (r.caught_up is not None and written < r.caught_up))
        ]
        READS.labels("replica" if fit else "primary").inc()
        return random.choice(fit) if fit else None

    def fell_back(self, replica: Replica, exc: BaseException, *, unreachable: bool) -> None:
        """Count a read that `replica` failed and the primary now runs; an `unreachable` replica is set
        aside until a probe reaches it again."""
        READS.labels("fallback").inc()
        if unreachable:
            if replica.caught_up is not None:
                log.warning("replica %s set aside after a failed call: %s", replica.name, type(exc).__name__)
            replica.caught_up = None

    async def probe(self) -> None:
        """One round: the primary's WAL position, then each replica's replay position."""
        timeout = max(self.max_lag, self.probe_seconds)
        asked = self.clock()
        try:
            async with asyncio.timeout(timeout):
                lsn = await self.primary_probe.run(_current_lsn)
        except Exception as exc:  # the primary is down: the replicas' positions mean nothing new
            log.debug("replica probe: primary unreachable (%s)", type(exc).__name__)
        else:
            if lsn is not None:
                self.samples.append((asked, parse_lsn(lsn)))
        while self.samples and self.samples[0][0] < self.clock() - self.max_lag - self.probe_seconds:
            self.samples.popleft()
        await asyncio.gather(*(self._probe_one(r, timeout) for r in self.replicas))
        now = self.clock()
        for replica in self.replicas:
            age = -1.0 if replica.caught_up is None else now - replica.caught_up
            CAUGHT_UP_AGE.labels(replica.name).set(age)
        horizon = now - self.max_lag
        for key in [k for k, at in self.writes.items() if at < horizon]:
            # no usable replica is caught up to a time before the horizon: the entry decides nothing
            del self.writes[key]

    async def _probe_one(self, replica: Replica, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                replay = await (replica.probe_db or replica.db).run(_replay_lsn)
        except Exception as exc:
            if replica.caught_up is not None:
                log.warning("replica %s unreachable: reads go elsewhere (%s)", replica.name, type(exc).__name__)
            replica.caught_up = None
            return
        if replay is None:  # not in recovery: no replica, its position cannot be compared
            if not replica.not_standby:
                log.warning("replica %s is not a standby (pg_last_wal_replay_lsn is null): not used", replica.name)
            replica.not_standby = True
            replica.caught_up = None
            return
        replica.not_standby = False
        position = parse_lsn(replay)
        reached = [at for at, lsn in self.samples if position >= lsn]
        if reached:
            replica.caught_up = max(reached[-1], replica.caught_up or reached[-1])

    def start(self) -> None:
        """Start probing in the background (one probe round first, so reads use replicas at once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="cairn-replica-probe")

    async def _loop(self) -> None:
        while True:
            try:
                await self.probe()
            except Exception:  # a probe round must never end the loop
                log.warning("replica probe round failed", exc_info=True)
            await asyncio.sleep(self.probe_seconds)

    async def stop(self) -> None:
        """Stop the probe and close the replicas' connections."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for replica in self.replicas:
            await replica.db.dispose()
            if replica.probe_db is not None:
                await replica.probe_db.dispose()
        if self.primary_probe is not self.primary:
            await self.primary_probe.dispose()


async def _current_lsn(session: AsyncSession) -> str | None:
    return await WalRepository(session).current_lsn()


async def _replay_lsn(session: AsyncSession) -> str | None:
    return await WalRepository(session).replay_lsn()
