"""Core operations and resources: projects, the embedding probe, health and settings."""

from __future__ import annotations

from app import __version__
from app.core import service
from app.core.context import CallContext
from app.core.errors import Forbidden
from app.core.feature import LiveSection
from app.core.registry import OperationSet
from app.core.repository import AuditRepository
from app.core.schemas import (
    AuditEntryOut,
    AuditLogIn,
    AuditLogOut,
    CreateKeyIn,
    CreateKeyOut,
    CreateProjectIn,
    CreateProjectOut,
    DatabaseInfo,
    EmbeddingInfo,
    EmbedIn,
    EmbedOut,
    HealthOut,
    ListKeysIn,
    ListKeysOut,
    ListProjectsIn,
    ListProjectsOut,
    QueueInfo,
    RevokeKeyIn,
    RevokeKeyOut,
    SettingsOut,
    ToolsetInfo,
    ToolsetsOut,
    WaitForEmbeddingsIn,
    WaitForEmbeddingsOut,
)

ops = OperationSet("core", "Projects, server health and settings, the toolsets, the audit log and the embedding probe.")
ops.toolset("projects", "Create and list projects (named scopes for memories, graphs and findings).")
ops.toolset("admin", "Operator tools: the audit log, the embedding probe, search-quality reports.")


def _embedding_info(ctx: CallContext) -> EmbeddingInfo:
    e = ctx.embedder
    return EmbeddingInfo(provider=e.provider, model=e.model, dimension=e.dimension, loaded=e.loaded())


@ops.operation(
    name="create_project",
    title="Create Project",
    toolsets=("projects",),
    input=CreateProjectIn,
    output=CreateProjectOut,
    path="/projects",
    idempotent=True,
)
async def create_project(ctx: CallContext, args: CreateProjectIn) -> CreateProjectOut:
    """Create a project (a named scope for memories, graphs and findings); returns the existing one
    when the name is taken."""
    project, created = await service.create_project(ctx, args.name, args.description)
    return CreateProjectOut(project=project, created=created)


@ops.operation(
    name="list_projects",
    title="List Projects",
    toolsets=("projects",),
    input=ListProjectsIn,
    output=ListProjectsOut,
    path="/projects",
    method="GET",
    read_only=True,
    one_statement=True,
)
async def list_projects(ctx: CallContext, args: ListProjectsIn) -> ListProjectsOut:
    """List projects by name, paginated (a project-bound key sees only its project)."""
    projects, total = await service.list_projects(ctx, args.limit, args.offset)
    nxt = args.offset + len(projects)
    return ListProjectsOut(projects=projects, total=total, next_offset=nxt if nxt < total else None)


@ops.operation(
    name="embed",
    title="Embed Text (debug)",
    toolsets=("admin",),
    input=EmbedIn,
    output=EmbedOut,
    path="/embed",
    read_only=True,
)
async def embed(ctx: CallContext, args: EmbedIn) -> EmbedOut:
    """Debug: embed one text with the active model and return a compact summary of the vector
    (model, dimension, norm, first components), never the whole vector."""
    return EmbedOut.model_validate(await service.embed_summary(ctx, args.text))


@ops.operation(
    name="audit_log",
    title="Audit Log",
    toolsets=("admin",),
    input=AuditLogIn,
    output=AuditLogOut,
    path="/audit",
    method="GET",
    read_only=True,
    scope="admin",
)
async def audit_log(ctx: CallContext, args: AuditLogIn) -> AuditLogOut:
    """Admin: read the audit log of write-scope and destructive calls (who — key id, never the key —,
    what, which project, counts, when), newest first, paginated with `before_id`. A key bound to a
    project reads that project's entries only."""
    # A bound key's filter is its project (naming another one is 4030); an unbound key's is as given.
    project = ctx.project(args.project) if ctx.bound_project is not None else args.project
    rows = await AuditRepository(ctx.session).page(
        key_id=args.key_id,
        operation=args.operation,
        project=project,
        since=args.since,
        before_id=args.before_id,
        limit=args.limit,
    )
    entries = [AuditEntryOut.model_validate(r, from_attributes=True) for r in rows]
    nxt = entries[-1].id if len(entries) == args.limit else None
    return AuditLogOut(entries=entries, next_before_id=nxt)


@ops.operation(
    name="list_keys",
    input=ListKeysIn,
    output=ListKeysOut,
    path="/keys",
    method="GET",
    read_only=True,
    scope="admin",
    mcp=False,
)
async def list_keys(ctx: CallContext, args: ListKeysIn) -> ListKeysOut:
    """Admin: list the stored API keys (id, display prefix, scopes, project, last use), never the keys
    themselves. A key bound to a project lists that project's keys only."""
    return ListKeysOut(keys=await service.list_keys(ctx, args.include_revoked))


@ops.operation(
    name="create_key",
    input=CreateKeyIn,
    output=CreateKeyOut,
    path="/keys",
    scope="admin",
    mcp=False,
)
async def create_key(ctx: CallContext, args: CreateKeyIn) -> CreateKeyOut:
    """Admin: create an API key; the reply holds the key this once (only its hash is stored). A key
    bound to a project creates keys bound to that project. On an open server, the first key locks it."""
    return await service.create_key(ctx, args)


@ops.operation(
    name="revoke_key",
    input=RevokeKeyIn,
    output=RevokeKeyOut,
    path="/keys/{key_id}/revoke",
    scope="admin",
    destructive=True,
    idempotent=True,
    mcp=False,
)
async def revoke_key(ctx: CallContext, args: RevokeKeyIn) -> RevokeKeyOut:
    """Admin: revoke a stored API key by id or display prefix; it stops working within the key cache's
    seconds (CAIRN_KEY_CACHE_SECONDS). A key bound to a project revokes that project's keys only."""
    return RevokeKeyOut(revoked=await service.revoke_key(ctx, args.key_id))


@ops.operation(
    name="wait_for_embeddings",
    title="Wait For Embeddings",
    toolsets=("admin",),
    input=WaitForEmbeddingsIn,
    output=WaitForEmbeddingsOut,
    path="/embeddings/wait",
    read_only=True,
    long_running=True,
)
async def wait_for_embeddings(ctx: CallContext, args: WaitForEmbeddingsIn) -> WaitForEmbeddingsOut:
    """Wait until the embedding queue is empty (every written row has its vector) or the timeout
    passes, helping the workers meanwhile; for bulk loaders and benchmarks. The queue is the whole
    server's: a key bound to a project waits for its own writes with their `wait_for_embedding`."""
    if ctx.bound_project is not None:
        raise Forbidden(
            f"wait_for_embeddings drains every project's embedding queue, and this API key is bound to "
            f"project '{ctx.bound_project}'",
            suggestions=["Pass wait_for_embedding: true to the writes whose vectors you need"],
        )
    return WaitForEmbeddingsOut.model_validate(await service.wait_for_embeddings(ctx, args.timeout_seconds))


async def _queue_info(ctx: CallContext) -> QueueInfo | None:
    if ctx.app.queue is None or ctx.bound_project is not None:  # the depth counts every project's writes
        return None
    try:
        stats = await ctx.app.queue.stats()
    except Exception:  # health must answer even when the database does not
        return None
    return QueueInfo(depth=stats.depth, oldest_seconds=stats.oldest_seconds, retrying=stats.retrying)


@ops.resource(uri="mcp://health", name="health", output=HealthOut, path="/resources/health")
async def health(ctx: CallContext) -> HealthOut:
    """Embedding provider, model and dimension, database reachability, and the embedding queue's depth
    (server-wide, so not shown to a key bound to a project)."""
    reachable = await ctx.app.db.ping()
    at_head = ctx.app.extras.get("migrations_at_head")
    return HealthOut(
        status="ok" if reachable else "degraded",
        version=__version__,
        embedding=_embedding_info(ctx),
        database=DatabaseInfo(
            reachable=reachable, embedded=ctx.app.extras.get("embedded_pg") is not None, migrations_at_head=at_head
        ),
        features=ctx.app.features,
        embedding_queue=await _queue_info(ctx),
    )


@ops.resource(uri="mcp://settings", name="settings", output=SettingsOut, path="/resources/settings")
async def settings(ctx: CallContext) -> SettingsOut:
    """Enabled features, the embedding configuration and the defaults each enabled feature publishes
    (such as search limits)."""
    sections = {
        name: await section.resolved(ctx) if isinstance(section, LiveSection) else section
        for name, section in ctx.app.public_settings.items()
    }
    return SettingsOut(features=ctx.app.features, embedding=_embedding_info(ctx), **sections)


@ops.resource(uri="mcp://toolsets", name="toolsets", output=ToolsetsOut, path="/resources/toolsets")
async def toolsets(ctx: CallContext) -> ToolsetsOut:
    """The MCP toolsets: each one's endpoint, description and tools (REST serves every operation)."""
    catalog = ctx.app.catalog
    items = [ToolsetInfo.model_validate(t) for t in catalog.summary()] if catalog is not None else []
    if ctx.transport == "stdio":  # a stdio session's toolsets are chosen when it starts
        hint = (
            "Start cairn stdio --toolsets a,b to combine toolsets; add readonly for read-only tools; "
            "all lists everything."
        )
    else:
        hint = "Combine toolsets as /mcp/a,b; add readonly for read-only tools; /mcp/all lists everything."
    return ToolsetsOut(toolsets=items, hint=hint)
