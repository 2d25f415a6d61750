"""Core use cases: projects, API keys and the embedding probe."""

from __future__ import annotations

import time

from app.core.auth import hash_key, new_key
from app.core.context import CallContext
from app.core.embeddings.tokens import count_tokens
from app.core.errors import NotFound, Unauthenticated, Unavailable
from app.core.models import ApiKey, Project
from app.core.repository import ApiKeyRepository, ProjectRepository, ProjectRow
from app.core.schemas import CreateKeyIn, CreateKeyOut, KeyOut, ProjectOut
from app.core.toolsets import key_toolsets

# Transports whose anonymous caller is the local user (a stdio session, the CLI), never an open server's.
LOCAL_TRANSPORTS = frozenset({"stdio", "cli"})


def project_out(p: Project | ProjectRow) -> ProjectOut:
    """API shape of a project row."""
    return ProjectOut(id=str(p.id), name=p.name, description=p.description, created_at=p.created_at)


async def create_project(ctx: CallContext, name: str, description: str) -> tuple[ProjectOut, bool]:
    """Create a project (a bound key may only create its own)."""
    ctx.project(name)
    repo = ProjectRepository(ctx.session)
    created = await repo.create(name, description)
    if created is not None:
        return project_out(created), True
    existing = await repo.get(name)
    assert existing is not None
    return project_out(existing), False


async def list_projects(ctx: CallContext, limit: int, offset: int) -> tuple[list[ProjectOut], int]:
    """Projects visible to the caller."""
    repo = ProjectRepository(ctx.session)
    only = ctx.bound_project
    rows, total = await repo.page(only=only, limit=limit, offset=offset)
    return [project_out(p) for p in rows], total


async def embed_summary(ctx: CallContext, text: str) -> dict[str, object]:
    """Embed one text and summarise the vector."""
    vector = await ctx.embedder.embed_one(text)
    norm = sum(v * v for v in vector) ** 0.5
    tokens = count_tokens(text)
    return {
        "model": ctx.embedder.model,
        "provider": ctx.embedder.provider,
        "dimension": len(vector),
        "norm": round(norm, 6),
        "head": [round(v, 5) for v in vector[:8]],
        "tokens": tokens,
        "truncated": tokens + 2 > ctx.settings.embedding_max_length,
    }


async def wait_for_embeddings(ctx: CallContext, timeout: float) -> dict[str, object]:
    """Help the queue workers until no row waits for a vector of the active model, or `timeout`."""
    started = time.perf_counter()
    queue = ctx.app.queue
    if queue is None:
        raise Unavailable("This process runs no embedding queue")
    stats = await queue.drain(timeout)
    return {
        "model": queue.model,
        "drained": stats.depth == 0,
        "depth": stats.depth,
        "waited_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def key_out(k: ApiKey) -> KeyOut:
    """API shape of a key row (its hash stays in the database)."""
    return KeyOut(
        id=str(k.id),
        name=k.name,
        prefix=k.prefix,
        scopes=list(k.scopes),
        project=k.project,
        toolsets=list(k.toolsets) if k.toolsets else None,
        created_at=k.created_at,
        last_used_at=k.last_used_at,
        revoked_at=k.revoked_at,
    )


async def list_keys(ctx: CallContext, include_revoked: bool) -> list[KeyOut]:
    """Stored keys, newest first; a key bound to a project sees that project's keys only."""
    rows = await ApiKeyRepository(ctx.session).list(include_revoked, project=ctx.bound_project)
    return [key_out(k) for k in rows]


async def create_key(ctx: CallContext, args: CreateKeyIn) -> CreateKeyOut:
    """Store a new key's hash and return the key once. A caller bound to a project creates keys
    bound to it (naming another project is 4030).

    Creations are serialized across every process of the database, and the anonymous caller of an
    open server (no key id, over HTTP) may create a key only while the database is not locked: of
    several racing unauthenticated creations, one succeeds.

    Raises:
        Unauthenticated: the caller is an open server's anonymous one and a key exists now (4010).
    """
    project = ctx.project(args.project) if ctx.bound_project is not None else args.project
    repo = ApiKeyRepository(ctx.session)
    locked = await repo.serialize_creation()
    if locked and ctx.principal.key_id is None and ctx.transport not in LOCAL_TRANSPORTS:
        raise Unauthenticated(
            "A bearer API key is required: this server has had a key since the call began",
            suggestions=["Send 'Authorization: Bearer <key>'"],
        )
    token = new_key()
    row = await repo.add(
        name=args.name,
        prefix=token[:12],
        key_hash=hash_key(token),
        scopes=[s for s in ("read", "write", "admin") if s in args.scopes],
        project=project,
        toolsets=key_toolsets(args.toolsets),
    )
    await ctx.session.refresh(row)
    return CreateKeyOut(key=key_out(row), token=token)


async def revoke_key(ctx: CallContext, key_id: str) -> int:
    """Revoke a stored key by id or prefix (a bound caller: only its project's keys).

    Raises:
        NotFound: no active key of that id or prefix that the caller may see.
    """
    revoked = await ApiKeyRepository(ctx.session).revoke(key_id, project=ctx.bound_project)
    if revoked == 0:
        raise NotFound(
            f"No active key {key_id[:64]!r} to revoke",
            suggestions=["list_keys shows the ids and prefixes (static keys from CAIRN_API_KEYS cannot be revoked)"],
        )
    return revoked
