"""Bearer API keys, shared by REST and MCP.

Keys look like `cairn_<random>`; only their SHA-256 is stored. Static keys come from
`CAIRN_API_KEYS` as `token[:scope+scope[:project[:toolset+toolset]]]` entries (no scopes given =
admin; the toolsets are what plain /mcp lists for the key).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken, TokenVerifier
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.context import Principal
from app.core.db import Database
from app.core.errors import CairnError, InvalidInput, Unauthenticated
from app.core.ratelimit import FailureLimiter
from app.core.repository import ApiKeyRepository

log = logging.getLogger("cairn.auth")

SCOPES = ("read", "write", "admin")
KEY_PREFIX = "cairn_"
_TOOLSET_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_CACHE_MAX = 10_000

# The address of the HTTP client being served (set by the HTTP front), so failed key lookups are
# limited per client address even where the MCP SDK verifies the key without handing us the request.
client_address: ContextVar[str | None] = ContextVar("cairn_client_address", default=None)


def hash_key(token: str) -> str:
    """SHA-256 hex digest of a presented token."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def parse_scopes(raw: str | list[str]) -> list[str]:
    """Validate a scope list (`read,write` or `read+write`)."""
    items = raw if isinstance(raw, list) else raw.replace("+", ",").split(",")
    scopes = {s.strip() for s in items if s.strip()}
    bad = sorted(s for s in scopes if s not in SCOPES)
    if bad or not scopes:
        raise InvalidInput(f"invalid scopes {bad or raw!r}; allowed: {', '.join(SCOPES)}")
    return [s for s in SCOPES if s in scopes]


def parse_toolsets(raw: str | list[str] | None) -> list[str] | None:
    """Validate a key's default toolsets (`graph,memory` or `graph+memory`; `all` and `readonly` too).

    Only the form is checked: names the running server does not know are ignored when it serves."""
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else re.split(r"[,+]", raw)
    names = list(dict.fromkeys(s.strip().lower() for s in items if s.strip()))
    bad = [n for n in names if not _TOOLSET_NAME.fullmatch(n)]
    if bad:
        raise InvalidInput(f"invalid toolset names {bad}")
    return names or None


@dataclass(frozen=True)
class StaticKey:
    """A key configured in the environment."""

    token: str
    scopes: frozenset[str]
    project: str | None
    toolsets: tuple[str, ...] | None = None


def parse_static_keys(entries: list[str]) -> list[StaticKey]:
    """Parse `CAIRN_API_KEYS` entries."""
    keys = []
    for entry in entries:
        token, _, rest = entry.partition(":")
        scopes_raw, _, rest = rest.partition(":")
        project, _, toolsets_raw = rest.partition(":")
        scopes = parse_scopes(scopes_raw) if scopes_raw else ["admin"]
        if len(token) < 16:
            raise InvalidInput("static API keys must be at least 16 characters long")
        toolsets = parse_toolsets(toolsets_raw or None)
        keys.append(
            StaticKey(
                token=token,
                scopes=frozenset(scopes),
                project=project or None,
                toolsets=tuple(toolsets) if toolsets else None,
            )
        )
    return keys


class KeyStore:
    """Resolves bearer tokens to principals, with a short cache in front of the database.

    Known keys and unknown ones are cached apart, so a flood of made-up keys cannot evict the valid
    ones. With `failures`, a client address that presented too many unknown keys is refused (4290)
    before any database lookup; a static key or a cached valid key is never refused."""

    def __init__(
        self,
        db: Database,
        static_keys: list[StaticKey],
        cache_seconds: float = 5.0,
        failures: FailureLimiter | None = None,
    ) -> None:
        self.db = db
        self.static = static_keys
        self.cache_seconds = cache_seconds
        self.failures = failures
        self._cache: dict[str, tuple[float, Principal]] = {}
        self._unknown: dict[str, float] = {}

    async def has_any_key(self) -> bool:
        """True when at least one static or stored key exists."""
        if self.static:
            return True
        async with self.db.transaction() as session:
            return await ApiKeyRepository(session).count_active() > 0

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

    def refusal(self, token: str) -> CairnError | None:
        """The 4290 for the current client when it is locked out of key lookups and `token` is not a
        key known without one (a static key, or a valid key in the cache); else None."""
        if self.failures is None:
            return None
        client = client_address.get()
        if client is None or self.failures.retry_after(client) is None:
            return None
        if self._static(token) is not None or self._cached(hash_key(token), time.monotonic()) is not None:
            return None
        return self.failures.refusal(client)

    async def verify(self, token: str) -> Principal | None:
        """The principal for `token`, or None when it is unknown or revoked.

        Raises:
            RateLimited: the client presented too many unknown keys lately (and this one is not known
                without a lookup).
        """
        static = self._static(token)
        if static is not None:
            return static
        digest = hash_key(token)
        now = time.monotonic()
        known = self._cached(digest, now)
        if known is not None:
            return known
        client = client_address.get() if self.failures is not None else None
        if client is not None and self.failures is not None:
            self.failures.check(client)
        seen = self._unknown.get(digest)
        if seen is not None and now - seen < self.cache_seconds:
            self._failed(client)
            return None

        async def lookup(session: AsyncSession) -> Principal | None:
            repo = ApiKeyRepository(session)
            row = await repo.by_hash(digest)
            if row is None:
                return None
            await repo.touch(row.id)
            return Principal(
                key_id=str(row.id),
                name=row.name,
                scopes=frozenset(row.scopes),
                project=row.project,
                toolsets=tuple(row.toolsets) if row.toolsets else None,
            )

        principal = await self.db.run(lookup)  # once more on a fresh connection if the pooled one was dead
        if principal is None:
            if len(self._unknown) > _CACHE_MAX:
                self._unknown.clear()
            self._unknown[digest] = now
            self._failed(client)
            return None
        if len(self._cache) > _CACHE_MAX:
            self._cache.clear()
        self._cache[digest] = (now, principal)
        return principal

    def _failed(self, client: str | None) -> None:
        if client is not None and self.failures is not None:
            self.failures.record(client)


async def create_key(
    db: Database, *, scopes: list[str], project: str | None, name: str = "", toolsets: list[str] | None = None
) -> tuple[str, str]:
    """Create and store a key; returns (key id, the token — shown once)."""
    token = new_key()
    async with db.transaction() as session:
        row = await ApiKeyRepository(session).add(
            name=name,
            prefix=token[:12],
            key_hash=hash_key(token),
            scopes=parse_scopes(scopes),
            project=project,
            toolsets=parse_toolsets(toolsets),
        )
        return str(row.id), token


class CairnTokenVerifier(TokenVerifier):
    """The MCP SDK's token verifier, backed by the same key store as REST."""

    def __init__(self, store: KeyStore) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        """Map a bearer token to an AccessToken carrying the principal in its claims.

        A client locked out of key lookups is answered 4290 before the SDK is reached (`refusal`); one
        locked out in between is simply not authenticated here (an exception would become a 500)."""
        try:
            principal = await self.store.verify(token)
        except CairnError:
            return None
        if principal is None:
            return None
        implied = [s for s in SCOPES if principal.has_scope(s)]  # admin implies write implies read
        return AccessToken(
            token=token,
            client_id=principal.key_id or "anonymous",
            scopes=implied,
            claims={"project": principal.project, "name": principal.name, "toolsets": principal.toolsets},
        )


async def bearer_principal(store: KeyStore, authorization: str, metadata_url: str | None) -> Principal:
    """The principal of an `Authorization: Bearer KEY` header value, or `Unauthenticated` (4010) with a
    `WWW-Authenticate` challenge that points at the protected-resource metadata when it is served."""

    def challenge(error: str | None) -> dict[str, str]:
        parts = [f'resource_metadata="{metadata_url}"'] if metadata_url else []
        if error:
            parts.insert(0, f'error="{error}"')
        return {"WWW-Authenticate": "Bearer" + (" " + ", ".join(parts) if parts else "")}

    if not authorization.lower().startswith("bearer ") or not authorization[7:].strip():
        raise Unauthenticated(
            "A bearer API key is required",
            suggestions=["Send 'Authorization: Bearer <key>'", "Create one: cairn keys create"],
            headers=challenge(None),
        )
    principal = await store.verify(authorization[7:].strip())
    if principal is None:
        raise Unauthenticated("The API key is unknown or revoked", headers=challenge("invalid_token"))
    return principal


# The caller a locked open-mode server verified itself (`OpenModeLock`), for the MCP handlers.
open_mode_caller: ContextVar[Principal | None] = ContextVar("cairn_open_mode_caller", default=None)


class OpenModeGuard:
    """A server that started without keys (open, loopback only) locks as soon as a key exists: from
    then on every request needs a valid key, as if it had started with one. Whether a key exists is
    read again at most every `interval` seconds; once locked it stays locked, and says so in the log."""

    def __init__(self, store: KeyStore, interval: float = 2.0) -> None:
        self.store, self.interval = store, interval
        self._locked = False
        self._checked = -float("inf")

    @property
    def known_locked(self) -> bool:
        """Whether the last check found a key (no lookup: at most `interval` seconds behind)."""
        return self._locked

    async def locked(self) -> bool:
        """True once any static or stored key exists."""
        if self._locked:
            return True
        now = time.monotonic()
        if now - self._checked < self.interval:
            return False
        self._checked = now
        if await self.store.has_any_key():
            self._locked = True
            log.warning("an API key now exists: this server, started without keys, requires one from now on")
        return self._locked


def principal_from_access_token(token: AccessToken) -> Principal:
    """Rebuild the principal from the claims `CairnTokenVerifier` put into the token."""
    claims = token.claims or {}
    return Principal(
        key_id=token.client_id,
        name=str(claims.get("name") or ""),
        scopes=frozenset(token.scopes),
        project=claims.get("project"),
        toolsets=tuple(claims["toolsets"]) if claims.get("toolsets") else None,
    )


def request_id() -> str:
    """A short unique id for one call."""
    return uuid.uuid4().hex[:16]
