"""The SQL of the fleet-wide limits (`app.core.fleet_limits`): token buckets, held slots and failed
authentications, in the tables of revision `core_0006`.

Every time is the database's clock, so hosts with skewed clocks still agree. The bucket is leased with
`clock_timestamp()` (the statement's own time): a lease that waited for a row lock then counts the
refill up to when it ran, not up to when its transaction began.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.core.repository import Repository

_LEASE = """
INSERT INTO limit_buckets AS b (key, tokens, granted, updated_at)
VALUES (:key, CAST(:burst AS float8) - least(CAST(:want AS int), CAST(:burst AS int)),
        least(CAST(:want AS int), CAST(:burst AS int)), clock_timestamp())
ON CONFLICT (key) DO UPDATE SET (granted, tokens, updated_at) = (
    SELECT least(CAST(:want AS int), floor(now_.avail))::int,
           now_.avail - least(CAST(:want AS int), floor(now_.avail)),
           now_.at
    FROM (
        SELECT least(CAST(:burst AS float8),
                     b.tokens + CAST(:rate AS float8) * greatest(0, extract(epoch FROM t.at - b.updated_at))) AS avail,
               t.at
        FROM (SELECT clock_timestamp() AS at) t
    ) now_
)
RETURNING granted, tokens
"""

_FAILURE = """
INSERT INTO limit_auth_failures AS f (client, failures, updated_at)
VALUES (:client, ARRAY[now()], now())
ON CONFLICT (client) DO UPDATE SET
    failures = (
        SELECT coalesce(array_agg(recent.t ORDER BY recent.t), '{}')
        FROM (
            SELECT t FROM unnest(f.failures || now()) AS t
            WHERE t > now() - make_interval(secs => CAST(:window AS float8))
            ORDER BY t DESC LIMIT :limit
        ) recent
    ),
    updated_at = now()
RETURNING CASE WHEN cardinality(failures) >= :limit
    THEN extract(epoch FROM failures[1] + make_interval(secs => CAST(:window AS float8)) - now()) END AS wait
"""

_LOCKOUT = """
SELECT extract(epoch FROM failures[1] + make_interval(secs => CAST(:window AS float8)) - now()) AS wait
FROM limit_auth_failures
WHERE client = :client AND cardinality(failures) >= :limit
  AND failures[1] > now() - make_interval(secs => CAST(:window AS float8))
"""


@dataclass(frozen=True)
class Lease:
    """What one lease of a key's bucket gave: `granted` whole tokens, `tokens` left in the bucket."""

    granted: int
    tokens: float


class LimitsRepository(Repository):
    """Token buckets per key, slots per key and kind, failed authentications per client address."""

    async def lease_tokens(self, key: str, want: int, rate: float, burst: int) -> Lease:
        """Take up to `want` whole tokens from `key`'s bucket (refilled at `rate` per second up to
        `burst` since it was last leased; created full); fewer, or none, when fewer are there."""
        found = await self.row(_LEASE, {"key": key, "want": want, "rate": rate, "burst": burst})
        assert found is not None
        return Lease(granted=int(found["granted"]), tokens=float(found["tokens"]))

    async def take_slot(self, slot: uuid.UUID, kind: str, key: str, holder: str, limit: int, ttl: float) -> bool:
        """Hold slot `slot` of `key` for `ttl` seconds when fewer than `limit` live ones are held; the
        key's expired rows are dropped first. One statement (`take_limit_slot`, core_0011): under the
        key's advisory lock, the count sees every claim committed before it."""
        params = {"kind": kind, "key": key, "id": slot, "holder": holder, "limit": limit, "ttl": ttl}
        return bool(await self.scalar("SELECT take_limit_slot(:id, :kind, :key, :holder, :limit, :ttl)", params))

    async def renew_slots(self, slots: list[uuid.UUID], ttl: float) -> int:
        """Extend the leases of `slots` to `ttl` seconds from now; how many were still there."""
        return await self.rowcount(
            "UPDATE limit_slots SET expires_at = now() + make_interval(secs => CAST(:ttl AS float8)) "
            "WHERE id = ANY(:ids)",
            {"ids": slots, "ttl": ttl},
        )

    async def free_slots(self, slots: list[uuid.UUID]) -> int:
        """Give `slots` back; how many were still held."""
        return await self.rowcount("DELETE FROM limit_slots WHERE id = ANY(:ids)", {"ids": slots})

    async def held_slots(self, kind: str, key: str) -> int:
        """How many live slots of `kind` `key` holds."""
        return int(
            await self.scalar(
                "SELECT count(*) FROM limit_slots WHERE kind = :kind AND key = :key AND expires_at > now()",
                {"kind": kind, "key": key},
            )
        )

    async def auth_lockout(self, client: str, limit: int, window: float) -> float | None:
        """Seconds until `client` may present an unknown key again (it failed `limit` times within the
        last `window` seconds), or None when it may now."""
        wait = await self.scalar(_LOCKOUT, {"client": client, "limit": limit, "window": window})
        return None if wait is None else float(wait)

    async def record_auth_failure(self, client: str, limit: int, window: float) -> float | None:
        """Count one failed authentication of `client` (its last `limit` within `window` seconds are
        kept); seconds until it may try again when this failure locks it out, else None."""
        wait = await self.scalar(_FAILURE, {"client": client, "limit": limit, "window": window})
        return None if wait is None else float(wait)

    async def sweep(self, idle: float | None = None, window: float | None = None) -> int:
        """Drop stale rows: expired slots; with `idle`, buckets untouched that many seconds (long enough
        to be full again, so dropping them changes nothing); with `window`, failure records older than
        that many seconds. How many rows went."""
        gone = await self.rowcount("DELETE FROM limit_slots WHERE expires_at <= now()")
        if idle is not None:
            gone += await self.rowcount(
                "DELETE FROM limit_buckets WHERE updated_at < now() - make_interval(secs => CAST(:idle AS float8))",
                {"idle": idle},
            )
        if window is not None:
            gone += await self.rowcount(
                "DELETE FROM limit_auth_failures "
                "WHERE updated_at < now() - make_interval(secs => CAST(:window AS float8))",
                {"window": window},
            )
        return gone
