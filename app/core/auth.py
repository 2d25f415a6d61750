"""API keys: their form, their hash and their creation. Who is calling is worked out in
`app.core.http.callers`, the only place keys are looked up.

Keys look like `cairn_<random>`; only their SHA-256 is stored. Static keys come from
`CAIRN_API_KEYS` as `token[:scope+scope[:project[:toolset+toolset]]]` entries (no scopes given =
admin; the toolsets are what plain /mcp lists for the key).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass

from app.core.db import Database, outage
from app.core.errors import InvalidInput
from app.core.repository import ApiKeyRepository, SecretRepository
from app.core.schemas import PROJECT_NAME
from app.core.toolsets import key_toolsets

SCOPES = ("read", "write", "admin")
KEY_PREFIX = "cairn_"


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


@dataclass(frozen=True)
class StaticKey:
    """A key configured in the environment."""

    token: str
    scopes: frozenset[str]
    project: str | None
    toolsets: tuple[str, ...] | None = None


def bound_project(raw: str | None) -> str | None:
    """The project a key is bound to (None: any), checked as every project name is (4001 otherwise), so
    that no key carries a name that a request could not use."""
    if not raw:
        return None
    if not re.fullmatch(PROJECT_NAME, raw):
        raise InvalidInput(f"invalid project {raw!r} for a key: letters, digits, '_', '-', '.' (at most 128)")
    return raw


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
        toolsets = key_toolsets(toolsets_raw or None)
        keys.append(
            StaticKey(
                token=token,
                scopes=frozenset(scopes),
                project=bound_project(project),
                toolsets=tuple(toolsets) if toolsets else None,
            )
        )
    return keys


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
            project=bound_project(project),
            toolsets=key_toolsets(toolsets),
        )
        return str(row.id), token


async def shared_secret(db: Database, name: str) -> str:
    """The secret called `name` that every host of the database shares (made by the first to ask).

    Raises:
        Unavailable: the database cannot answer (5030).
    """
    candidate = secrets.token_urlsafe(32)
    try:
        return await db.run(lambda session: SecretRepository(session).ensure(name, candidate))
    except Exception as exc:
        raise (outage(exc) or exc) from None


def request_id() -> str:
    """A short unique id for one call."""
    return uuid.uuid4().hex[:16]
