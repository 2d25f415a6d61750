"""Who is calling: the one place a request's key is read, looked up and judged.

Every transport asks `resolve_caller`: REST routes and `/metrics` (`rest_adapter.authenticate`), the
MCP endpoint on an open server, the MCP SDK's token verifier on a server with keys, a stdio session
and the console's sign-in cookie. The answer depends on how the server started (`Callers`):

- **with keys** (`CAIRN_API_KEYS` or stored keys): every request needs a valid bearer key; a missing
  or unknown one is 4010 with a `WWW-Authenticate` challenge naming the protected-resource metadata;
- **open** (no key at start, loopback only, and a database that never had one): every caller is the
  anonymous admin until a key is created; every process and host of the database is locked from the
  moment the creation commits (each open-server check reads the lock), and behaves as if it had
  started with keys (without the metadata, which such a server does not serve). Creating a key, or
  starting with keys, locks the database for good (`auth_lock`): no later start is open, even once
  every key is revoked;
- **local** (a stdio session of the user who started it): the anonymous admin.

A client address that presented too many unknown keys lately is refused (4290) without a lookup of
the key it presents, but a valid key is never refused: a static key, a cached one, or a stored one
whose hash is among the valid keys' hashes, which the process reads (one statement for all of them)
at most every `VALID_REFRESH_SECONDS` while a locked-out address presents a key it does not know, so a
flood of made-up keys costs a bounded number of statements, and a key created a moment ago still
passes. The failures are counted across every process on the database
(`app.core.fleet_limits.FleetFailures`). The address comes from `client_address`, set by the HTTP
front for each request (uvicorn takes it from `X-Forwarded-For` only from the peers
`FORWARDED_ALLOW_IPS` trusts), because the SDK's verifier is handed the token alone.

A lookup the database cannot answer (down, restarting, no pooled connection free) is 5030 with
`Retry-After` (`db.outage`), never a 500 and never a 401.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

from mcp.server.auth.provider import AccessToken, TokenVerifier
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.auth import SCOPES, StaticKey, hash_key, parse_static_keys
from app.core.config import Settings
from app.core.context import OPEN_PRINCIPAL, Principal
from app.core.db import Database, outage
from app.core.errors import CairnError, RateLimited, Unauthenticated
from app.core.fleet_limits import FleetFailures
from app.core.keyusage import KeyUsage
from app.core.ratelimit import FailureLimiter
from app.core.repository import ApiKeyRepository

log = logging.getLogger("cairn.auth")

_CACHE_MAX = 10_000
# While a locked-out address presents keys this process does not know, the valid keys' hashes are
# read again at most this often (one statement, whatever the flood).
VALID_REFRESH_SECONDS = 0.5
# What a request's `scope["state"]` holds for the MCP handlers: the caller the endpoint resolved.
CALLER_STATE = "caller"

client_address: ContextVar[str | None] = ContextVar("cairn_client_address", default=None)
# A key the MCP endpoint verified ahead of the SDK (so that an outage is a 5030, not the SDK's 401 or
# 500), and its principal (None: unknown or revoked); the SDK's verifier then needs no second lookup.
_verified: ContextVar[tuple[str, Principal | None] | None] = ContextVar("cairn_verified_key", default=None)


def _unavailable(exc: Exception) -> NoReturn:
    """Raise the 5030 for a database outage (`db.outage`), or `exc` itself for any other error."""
    err = outage(exc)
    if err is None:
        raise exc
    log.warning("the database is unavailable for a key lookup: %s", type(exc).__name__)
    raise err from None


def bearer_token(authorization: str) -> str:
    """The key of an `Authorization: Bearer KEY` header value ("" without one)."""
    return authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""


def scope_bearer(scope: Any) -> str:
    """The bearer key of an ASGI request ("" without one)."""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return bearer_token(value.decode("latin-1"))
    return ""


class KeyStore:
    """Resolves bearer tokens to principals, with a short cache in front of the database.

    Known keys and unknown ones are cached apart, so a flood of made-up keys cannot evict the valid
    ones. With `failures`, a client address that presented too many unknown keys is refused (4290)
    without a lookup of the key it presents; a valid key is never refused (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        static_keys: list[StaticKey],
        cache_seconds: float = 5.0,
        failures: FailureLimiter | None = None,
        usage: KeyUsage | None = None,
    ) -> None:
        self.db = db
        self.usage = usage
        self.static = static_keys
        self.cache_seconds = cache_seconds
        self.failures = failures
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._unknown: dict[str, float] = {}
        self._valid: frozenset[str] = frozenset()
        self._valid_read = -float("inf")  # when the last read of `_valid` started (monotonic)
        self._valid_lock = asyncio.Lock()

    async def has_any_key(self) -> bool:
        """True when a static or stored key exists, or the database has had one (its lock).

        Raises:
            Unavailable: the database cannot answer (5030).
        """
        if self.static:
            return True
        try:
            async with self.db.transaction() as session:
                return await ApiKeyRepository(session).keys_required()
        except Exception as exc:
            _unavailable(exc)

    def _static(self, token: str) -> Principal | None:
        for key in self.static:
            if hmac.compare_digest(key.token.encode(), token.encode()):
                return Principal(
                    key_id=f"static:{hash_key(token)[:8]}",
                    name="static",
                    scopes=key.scopes,
                    project=key.project,
                    toolsets=key.toolsets,
                )
        return None

    def _cached(self, digest: str, now: float) -> Principal | None:
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        return None

    async def _valid_since(self, arrived: float) -> frozenset[str]:
        """The valid stored keys' hashes, read after `arrived` (the caller's request began then, so a
        key created before it is in), at most every `VALID_REFRESH_SECONDS`: requests waiting
        meanwhile share the next read.

        Raises:
            Unavailable: the database cannot answer (5030).
        """
        async with self._valid_lock:
            if self._valid_read < arrived:
                pause = self._valid_read + VALID_REFRESH_SECONDS - time.monotonic()
                if pause > 0:
                    await asyncio.sleep(pause)
                self._valid_read = time.monotonic()

                async def read(session: AsyncSession) -> list[str]:
                    return await ApiKeyRepository(session).active_hashes()

                try:
                    self._valid = frozenset(await self.db.run(read))
                except Exception as exc:
                    _unavailable(exc)
        return self._valid

    async def _refused(self, token: str, client: str, arrived: float) -> CairnError | None:
        """The 4290 for a locked-out `client`, unless `token` is a valid key (static, cached or stored)."""
        if self.failures is None or self._static(token) is not None:
            return None
        digest = hash_key(token)
        if self._cached(digest, arrived) is not None or digest in self._valid:  # (a revoked key: its lookup says so)
            return None
        if digest in await self._valid_since(arrived):  # absent: only a read made since `arrived` may refuse it
            return None
        return self.failures.refusal(client)

    async def refusal(self, token: str) -> CairnError | None:
        """The 4290 for the current client when it is locked out of key lookups and `token` is not a
        valid key; else None."""
        client = client_address.get()
        if self.failures is None or client is None or self.failures.retry_after(client) is None:
            return None
        return await self._refused(token, client, time.monotonic())

    async def verify(self, token: str) -> Principal | None:
        """The principal for `token`, or None when it is unknown or revoked.

        Raises:
            RateLimited: the client presented too many unknown keys lately and this one is not a
                valid key.
            Unavailable: the database cannot answer (5030).
        """
        static = self._static(token)
        if static is not None:
            return static
        digest = hash_key(token)
        now = time.monotonic()
        known = self._cached(digest, now)
        if known is not None:
            self._used(known)
            return known
        client = client_address.get() if self.failures is not None else None
        locked = False
        if client is not None and self.failures is not None and self.failures.retry_after(client) is not None:
            refused = await self._refused(token, client, now)
            if refused is not None:
                raise refused
            locked = True  # a valid key: looked up, not counted
        seen = self._unknown.get(digest)
        if seen is not None and now - seen < self.cache_seconds and not locked:
            await self._failed(client)
            return None

        if client is not None and self.failures is not None and not locked:
            try:  # a lockout other processes recorded
                await self.failures.verify_allowed(client)
            except RateLimited:
                refused = await self._refused(token, client, now)
                if refused is not None:
                    raise refused from None

        async def lookup(session: AsyncSession) -> Principal | None:
            repo = ApiKeyRepository(session)
            row = await repo.by_hash(digest)
            if row is None:
                return None
            return Principal(
                key_id=str(row.id),
                name=row.name,
                scopes=frozenset(row.scopes),
                project=row.project,
                toolsets=tuple(row.toolsets) if row.toolsets else None,
            )

        try:
            principal = await self.db.run(lookup)  # once more on a fresh connection if the pooled one was dead
        except Exception as exc:
            _unavailable(exc)
        if principal is None:
            if len(self._unknown) > _CACHE_MAX:
                self._unknown.clear()
            self._unknown[digest] = now
            await self._failed(client)
            return None
        if len(self._cache) > _CACHE_MAX:
            self._cache.clear()
        self._cache[digest] = (now, principal)
        self._used(principal)
        return principal

    def _used(self, principal: Principal) -> None:
        # Noted in memory only: `KeyUsage` writes the times in the background, off the call path.
        if self.usage is not None and principal.key_id:
            self.usage.record(uuid.UUID(principal.key_id))

    async def _failed(self, client: str | None) -> None:
        if client is not None and self.failures is not None:
            await self.failures.record_failure(client)


class OpenModeGuard:
    """A server that started without keys (open, loopback only) locks as soon as a key exists: from
    then on every request needs a valid key, as if it had started with one. While open, every check
    reads the database (one indexed round trip; a server is open only until its first key), so a key
    created through any process or host locks this one before the creation answers; once locked it
    stays locked, and says so in the log."""

    def __init__(self, store: KeyStore) -> None:
        self.store = store
        self._locked = False

    @property
    def known_locked(self) -> bool:
        """Whether a check found a key (no lookup: as of this process's last check)."""
        return self._locked

    async def locked(self) -> bool:
        """True once any static or stored key exists, or the database has had one."""
        if self._locked:
            return True
        if await self.store.has_any_key():
            self._locked = True
            log.warning("an API key now exists: this server, started without keys, requires one from now on")
        return self._locked


@dataclass(frozen=True)
class Callers:
    """How this server knows its callers: `store` on a server with keys, `guard` on an open server,
    neither in a local session. `metadata_url` is the protected-resource metadata 401s point at."""

    store: KeyStore | None = None
    guard: OpenModeGuard | None = None
    metadata_url: str | None = None

    @classmethod
    def build(cls, db: Database, settings: Settings, *, open_mode: bool, local: bool = False) -> Callers:
        """The callers of a server that started with keys, or open (`open_mode`), or of a local
        session (`local`)."""
        if local:
            return cls()
        failures = FleetFailures(settings.auth_failure_limit, db)
        usage = KeyUsage(db, settings.key_usage_flush_seconds)
        if open_mode:
            return cls(guard=OpenModeGuard(KeyStore(db, [], settings.key_cache_seconds, failures, usage)))
        store = KeyStore(db, parse_static_keys(settings.api_keys), settings.key_cache_seconds, failures, usage)
        meta = settings.resource_url().replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
        return cls(store=store, metadata_url=meta)

    @property
    def usage(self) -> KeyUsage | None:
        """Where the stored keys' last uses are noted until written (none in a local session)."""
        store = self.store or (self.guard.store if self.guard is not None else None)
        return store.usage if store is not None else None

    @property
    def keys_known_required(self) -> bool:
        """Whether a key is required, as last known (no lookup: an open server's lock as of its last
        check)."""
        return self.store is not None or (self.guard is not None and self.guard.known_locked)

    async def keys_required(self) -> bool:
        """Whether a request needs a key now (a server with keys, or an open one locked since)."""
        if self.store is not None:
            return True
        return self.guard is not None and await self.guard.locked()

    async def refusal(self, token: str, client: str | None) -> CairnError | None:
        """The 4290 for a client of a server with keys that is locked out of key lookups, unless
        `token` is a valid key; else None (checked before the MCP SDK, which would turn the limit's
        error into a 500).

        Raises:
            Unavailable: the database cannot answer the read of the valid keys (5030).
        """
        store = self.store
        if store is None or store.failures is None or not client or store.failures.retry_after(client) is None:
            return None
        return await store.refusal(token)

    async def ahead_of_sdk(self, token: str) -> Principal | None:
        """The caller of an MCP HTTP request, resolved before the SDK sees it: on an open server,
        `resolve_caller`'s answer; None on a server with keys, whose SDK verifier resolves it.

        On a server with keys the key is looked up here all the same (once: the SDK's verifier reuses
        the answer), so that an outage or a lockout is answered with the error body.

        Raises:
            Unauthenticated / RateLimited / Unavailable: as `resolve_caller`.
        """
        if self.store is not None:
            if token:  # the SDK's verifier finds the answer in `_verified`
                _verified.set((token, await self.store.verify(token)))
            return None
        return await resolve_caller(self, token)


async def resolve_caller(callers: Callers, token: str) -> Principal:
    """The caller presenting `token` (a bearer key, "" for none): the anonymous admin when no key is
    required, else the key's principal.

    Raises:
        Unauthenticated: a key is required and `token` is empty (4010, "required") or unknown or
            revoked (4010, `error="invalid_token"`), with a `WWW-Authenticate` challenge.
        RateLimited: the client presented too many unknown keys lately (4290).
        Unavailable: the database cannot answer the lookup (5030, with `Retry-After`).
    """
    store = callers.store
    if store is None:
        if callers.guard is None or not await callers.guard.locked():
            return OPEN_PRINCIPAL
        store = callers.guard.store
    if not token:
        raise Unauthenticated(
            "A bearer API key is required",
            suggestions=["Send 'Authorization: Bearer <key>'", "Create one: cairn keys create"],
            headers=_challenge(None, callers.metadata_url),
        )
    principal = await store.verify(token)
    if principal is None:
        raise Unauthenticated(
            "The API key is unknown or revoked", headers=_challenge("invalid_token", callers.metadata_url)
        )
    return principal


def _challenge(error: str | None, metadata_url: str | None) -> dict[str, str]:
    parts = [f'resource_metadata="{metadata_url}"'] if metadata_url else []
    if error:
        parts.insert(0, f'error="{error}"')
    return {"WWW-Authenticate": "Bearer" + (" " + ", ".join(parts) if parts else "")}


def starts_open(settings: Settings, has_keys: bool) -> bool:
    """Whether a server starts open: no key exists and it listens on loopback only.

    Raises:
        RuntimeError: no key exists and the server would listen beyond loopback.
    """
    if has_keys:
        return False
    if not settings.is_loopback():
        raise RuntimeError(
            f"Refusing to serve on {settings.host} without API keys: create one with "
            "`cairn keys create --scopes read,write` or set CAIRN_API_KEYS"
        )
    log.warning("no API keys configured: serving WITHOUT authentication (loopback only)")
    return True


async def keys_exist(db: Database, static: list[StaticKey]) -> bool:
    """Whether keys are required (start-up decides open mode on it): a static or stored key exists,
    or the database has had one. A key existing locks the database for good (`auth_lock`), so no
    later start of it is open, even once every key is revoked. With static keys the answer needs no
    database: failing to record the lock then (a schema not migrated yet) is only logged.

    Raises:
        Unavailable: the database cannot answer (5030) and no static key is configured.
    """

    async def decide(session: AsyncSession) -> tuple[bool, bool]:
        repo = ApiKeyRepository(session)
        active, locked = await repo.count_active() > 0, await repo.locked()
        if (static or active) and not locked:
            await repo.lock("a host started with configured keys" if static else "stored keys exist")
        return active, locked

    try:
        active, locked = await db.run(decide)
    except Exception as exc:
        if not static:
            _unavailable(exc)
        log.warning("could not record that this database has had keys: %s", str(exc)[:200])
        return True
    if locked and not active and not static:
        log.warning(
            "this database has had API keys and has no valid one now: every request needs a key (401); "
            "create one with `cairn keys create --scopes read,write`"
        )
    return bool(static or active or locked)


class CairnTokenVerifier(TokenVerifier):
    """The MCP SDK's token verifier on a server with keys, for the SDK app's own routes (its
    protected-resource metadata): `resolve_caller`. MCP requests never reach it: the endpoint resolves
    their caller and hands them to the SDK's transport (`app.core.http.mcp_endpoint`)."""

    def __init__(self, callers: Callers) -> None:
        self.callers = callers

    async def verify_token(self, token: str) -> AccessToken | None:
        """Map a bearer token to an AccessToken with the key's scopes.

        A client locked out of key lookups is answered 4290 before the SDK is reached
        (`Callers.refusal`); one locked out in between is simply not authenticated here (an exception
        would become a 500). The endpoint has usually looked the key up already (`_verified`)."""
        verified = _verified.get()
        try:
            if verified is not None and verified[0] == token and self.callers.store is not None:
                principal = verified[1]
                if principal is None:
                    return None
            else:
                principal = await resolve_caller(self.callers, token)
        except CairnError:
            return None
        implied = [s for s in SCOPES if principal.has_scope(s)]  # admin implies write implies read
        return AccessToken(
            token=token,
            client_id=principal.key_id or "anonymous",
            scopes=implied,
        )


async def mcp_caller(callers: Callers, request: Any) -> Principal:
    """The caller of an MCP message: the one the endpoint resolved (in the request's state: every HTTP
    request, whatever the server's kind), `resolve_caller` without one (a stdio session).

    Raises:
        Unauthenticated: a key is required and none was resolved.
    """
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        found = (scope.get("state") or {}).get(CALLER_STATE)
        if isinstance(found, Principal):
            return found
    return await resolve_caller(callers, "")
