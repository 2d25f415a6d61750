"""Memory tools and resources: the Rusty Memory dialect (/memory/...) and the AMCS thoughts dialect
(/thoughts/...), one store underneath."""

from __future__ import annotations

from app.core.context import CallContext
from app.core.errors import NotFound, UpstreamError
from app.core.registry import OperationSet
from app.core.schemas import Empty
from app.memory import service
from app.memory import service_items as items
from app.memory import service_thoughts as thoughts
from app.memory.schemas import (
    CollectionsOut,
    MemoryTypesOut,
    MetricsOut,
    NewCollectionIn,
    NewCollectionOut,
    ProjectsOut,
    ProjectTagsOut,
    PushIn,
    PushOut,
    SearchIn,
    SearchOut,
    SummarizeIn,
    SummarizeOut,
    UsageOut,
)
from app.memory.schemas_items import (
    DeleteMemoryIn,
    DeleteMemoryOut,
    GetMemoryIn,
    GetMemoryOut,
    ListMemoriesIn,
    ListMemoriesOut,
    UpdateMemoryIn,
    UpdateMemoryOut,
)
from app.memory.schemas_thoughts import (
    ArchiveThoughtIn,
    BackfillIn,
    BackfillOut,
    CaptureThoughtIn,
    CaptureThoughtOut,
    DeleteThoughtOut,
    ListThoughtsIn,
    ListThoughtsOut,
    ProjectContextIn,
    ProjectContextOut,
    RecallContextIn,
    RecallContextOut,
    RelatedThoughtsIn,
    RelatedThoughtsOut,
    SearchThoughtsIn,
    SearchThoughtsOut,
    SummarizeThoughtsIn,
    SummarizeThoughtsOut,
    ThoughtIdIn,
    ThoughtResultOut,
    ThoughtStatsIn,
    ThoughtStatsOut,
    UpdateThoughtIn,
    UpdateThoughtOut,
)

ops = OperationSet(
    "memory",
    "Long-term memory: documents pushed in chunks and searched (hybrid, semantic, full text), summaries, "
    "collections, and AMCS-style thoughts.",
)
ops.toolset(
    "memory",
    "Document memory: push text, search it (hybrid, semantic, lexical), summarize, collections.",
    default=True,
)
ops.toolset(
    "thoughts",
    "Thoughts: capture, search, recall and curate short notes per project, with stats and summaries.",
    includes=("create_project", "list_projects"),
)
# Curating stored memories by id is an operator's task (the web console's memory page), not a step
# of an agent's push/search loop: a toolset of its own keeps the default tool list as it is.
ops.toolset(
    "memory_items",
    "Stored memories by id: read one with its document's chunks and vector status, retag, delete.",
)

# Rusty Memory dialect (seed 001) -------------------------------------------------------------------


@ops.operation(
    name="search",
    title="Search Memories",
    input=SearchIn,
    output=SearchOut,
    path="/memory/search",
    read_only=True,
    errors=(NotFound,),
)
async def search(ctx: CallContext, args: SearchIn) -> SearchOut:
    """Search indexed memories (hybrid vector + full-text by default). Keep query_text short and narrow
    the search with filters (project_id, memory_type, tags, time_range, collection). Returns scored
    results and `context`: their texts, one line `[n] text` per result, n its 1-based position in
    results. explain=true adds the signals that found each result."""
    return await service.search(ctx, args)


@ops.operation(name="push", title="Store Document", input=PushIn, output=PushOut, path="/memory/push", idempotent=True)
async def push(ctx: CallContext, args: PushIn) -> PushOut:
    """Index a document: split it into token-sized chunks (paragraph and sentence boundaries preferred),
    embed them and store them with project_id, memory_type (default semantic), tags and source_uri.
    Chunks already stored in the project and collection are skipped; pushing the same source_uri again
    updates its changed chunks and removes stale ones instead of duplicating."""
    return await service.push(ctx, args)


@ops.operation(
    name="summarize",
    errors=(NotFound, UpstreamError),
    example={
        "project_id": "notes",
        "time_range": {"start": "2026-11-01T00:00:00Z", "end": "2026-11-08T00:00:00Z"},
    },
    title="Summarize Memories",
    input=SummarizeIn,
    output=SummarizeOut,
    path="/memory/summarize",
    idempotent=True,
)
async def summarize(ctx: CallContext, args: SummarizeIn) -> SummarizeOut:
    """Consolidate the memories of a time window (memory_type default episodic; time_range start and end
    both required) into one semantic summary memory with provenance (source_memory_ids). strategy:
    extractive (central, diverse sentences; no network), abstractive (configured Ollama or
    OpenAI-compatible model) or auto (abstractive when configured, else extractive). Re-running the same
    window updates the stored summary."""
    return await service.summarize(ctx, args)


@ops.operation(
    name="get-collections",
    title="List Collections",
    input=Empty,
    output=CollectionsOut,
    path="/memory/collections",
    method="GET",
    read_only=True,
)
async def get_collections(ctx: CallContext, args: Empty) -> CollectionsOut:
    """List the memory collections known to the server."""
    return await service.get_collections(ctx)


@ops.operation(
    name="new-collection",
    title="Create Collection",
    input=NewCollectionIn,
    output=NewCollectionOut,
    path="/memory/collections",
    idempotent=True,
)
async def new_collection(ctx: CallContext, args: NewCollectionIn) -> NewCollectionOut:
    """Ensure a collection exists with the desired vector size (default: the active embedding dimension);
    an existing collection with another size is resized."""
    return await service.new_collection(ctx, args)


@ops.operation(
    name="metrics",
    title="Memory Metrics",
    input=Empty,
    output=MetricsOut,
    path="/memory/metrics",
    method="GET",
    read_only=True,
)
async def metrics(ctx: CallContext, args: Empty) -> MetricsOut:
    """Ingestion counters: documents and chunks indexed, and the last chunk size (null before the first push)."""
    return await service.metrics(ctx)


@ops.resource(uri="mcp://memory-types", name="memory-types", output=MemoryTypesOut, path="/memory/memory-types")
async def memory_types(ctx: CallContext) -> MemoryTypesOut:
    """Supported memory_type values and the default."""
    return MemoryTypesOut.model_validate(service.memory_types())


@ops.resource(uri="mcp://projects", name="projects", output=ProjectsOut, path="/memory/projects")
async def projects(ctx: CallContext) -> ProjectsOut:
    """Distinct project_id values that hold memories."""
    return ProjectsOut(projects=await service.projects(ctx))


@ops.resource(uri="mcp://usage", name="usage", output=UsageOut, path="/memory/usage")
async def usage(ctx: CallContext) -> UsageOut:
    """Usage policy and recommended flows of the memory tools."""
    return UsageOut.model_validate(service.USAGE)


@ops.resource(
    uri="mcp://{project_id}/tags", name="project-tags", output=ProjectTagsOut, path="/memory/projects/{project_id}/tags"
)
async def project_tags(ctx: CallContext, project_id: str) -> ProjectTagsOut:
    """Distinct tags used in one project."""
    return ProjectTagsOut(project_id=project_id, tags=await service.project_tags(ctx, project_id))


# One stored memory by id -------------------------------------------------------------------------


@ops.operation(
    name="get_memory",
    title="Get Memory",
    toolsets=("memory_items",),
    input=GetMemoryIn,
    output=GetMemoryOut,
    path="/memory/items/{id}",
    method="GET",
    read_only=True,
)
async def get_memory(ctx: CallContext, args: GetMemoryIn) -> GetMemoryOut:
    """One stored memory by id (a search result's id): its text, kind, tags, metadata, source and times,
    the chunks of its document in order (chunk_offset, chunk_limit) with the models holding a vector of
    each, and per model how many of the document's memories are embedded, missing or queued."""
    return await items.get(ctx, args)


@ops.operation(
    name="list_memories",
    example={"project": "team-notes", "tags": ["standup"], "kind": ["chunk"], "limit": 10},
    title="List Memories",
    toolsets=("memory_items",),
    input=ListMemoriesIn,
    output=ListMemoriesOut,
    path="/memory/items",
    method="GET",
    read_only=True,
)
async def list_memories(ctx: CallContext, args: ListMemoriesIn) -> ListMemoriesOut:
    """Stored memories newest first, filtered by project, memory_type, tags (any of), source_uri prefix
    and kind (chunk, thought, summary); paginated (limit, offset). Each text is a preview: get_memory
    reads one whole."""
    return await items.list_memories(ctx, args)


@ops.operation(
    name="update_memory",
    title="Retag Memory",
    toolsets=("memory_items",),
    input=UpdateMemoryIn,
    output=UpdateMemoryOut,
    path="/memory/items/{id}",
    method="PATCH",
    idempotent=True,
)
async def update_memory(ctx: CallContext, args: UpdateMemoryIn) -> UpdateMemoryOut:
    """Replace the tags of a stored memory ([] clears them); document=true retags every chunk of its
    document. Text and vectors are unchanged."""
    return await items.update(ctx, args)


@ops.operation(
    name="delete_memory",
    title="Delete Memory",
    toolsets=("memory_items",),
    input=DeleteMemoryIn,
    output=DeleteMemoryOut,
    path="/memory/items/{id}",
    method="DELETE",
    destructive=True,
    idempotent=True,
)
async def delete_memory(ctx: CallContext, args: DeleteMemoryIn) -> DeleteMemoryOut:
    """Delete a stored memory and its vectors permanently; document=true deletes every chunk of its
    document."""
    return await items.delete(ctx, args)


# AMCS thoughts dialect (seed 004) ------------------------------------------------------------------


@ops.operation(
    name="capture_thought",
    title="Capture Thought",
    toolsets=("thoughts",),
    input=CaptureThoughtIn,
    output=CaptureThoughtOut,
    path="/thoughts",
)
async def capture_thought(ctx: CallContext, args: CaptureThoughtIn) -> CaptureThoughtOut:
    """Capture a thought (content, optional project and metadata: type, topics, people, action_items).
    Its vector is queued (embedding: pending) and made shortly; wait_for_embedding waits for it.
    Until then text search finds it."""
    return await thoughts.capture(ctx, args)


@ops.operation(
    name="list_thoughts",
    title="List Thoughts",
    toolsets=("thoughts",),
    input=ListThoughtsIn,
    output=ListThoughtsOut,
    path="/thoughts",
    method="GET",
    read_only=True,
)
async def list_thoughts(ctx: CallContext, args: ListThoughtsIn) -> ListThoughtsOut:
    """List thoughts newest first, filtered by project, type, topic, person, days and archived state; paginated."""
    return await thoughts.list_thoughts(ctx, args)


@ops.operation(
    name="search_thoughts",
    title="Search Thoughts",
    toolsets=("thoughts",),
    input=SearchThoughtsIn,
    output=SearchThoughtsOut,
    path="/thoughts/search",
    read_only=True,
)
async def search_thoughts(ctx: CallContext, args: SearchThoughtsIn) -> SearchThoughtsOut:
    """Search thoughts by meaning and words (hybrid by default). When the active embedding model has no
    vectors in scope the search falls back to full text and reports retrieval_mode=lexical_fallback."""
    return await thoughts.search(ctx, args)


@ops.operation(
    name="recall_context",
    title="Recall Context",
    toolsets=("thoughts",),
    input=RecallContextIn,
    output=RecallContextOut,
    path="/thoughts/recall",
    read_only=True,
)
async def recall_context(ctx: CallContext, args: RecallContextIn) -> RecallContextOut:
    """A compact context block for a query: the most relevant thoughts within max_chars, each cited as [n],
    n its 1-based position in items."""
    return await thoughts.recall(ctx, args)


@ops.operation(
    name="get_project_context",
    errors=(NotFound,),
    title="Project Context",
    toolsets=("thoughts",),
    input=ProjectContextIn,
    output=ProjectContextOut,
    path="/thoughts/project-context",
    read_only=True,
)
async def get_project_context(ctx: CallContext, args: ProjectContextIn) -> ProjectContextOut:
    """The recent thoughts of one project plus, when a query is given, the most relevant other ones, as one
    cited context block."""
    return await thoughts.project_context(ctx, args)


@ops.operation(
    name="summarize_thoughts",
    errors=(NotFound, UpstreamError),
    title="Summarize Thoughts",
    toolsets=("thoughts",),
    input=SummarizeThoughtsIn,
    output=SummarizeThoughtsOut,
    path="/thoughts/summarize",
    idempotent=True,
)
async def summarize_thoughts(ctx: CallContext, args: SummarizeThoughtsIn) -> SummarizeThoughtsOut:
    """Summarise the thoughts relevant to a query (or the most recent ones, optionally within days); the
    summary is stored as a semantic memory citing its sources, and re-running updates it."""
    return await thoughts.summarize(ctx, args)


@ops.operation(
    name="thought_stats",
    title="Thought Stats",
    toolsets=("thoughts",),
    input=ThoughtStatsIn,
    output=ThoughtStatsOut,
    path="/thoughts/stats",
    method="GET",
    read_only=True,
)
async def thought_stats(ctx: CallContext, args: ThoughtStatsIn) -> ThoughtStatsOut:
    """Counts of thoughts: total, archived, by type and memory type, top topics and people, and how many
    lack a vector of the active model (missing_embeddings)."""
    return await thoughts.stats(ctx, args)


@ops.operation(
    name="backfill_embeddings",
    errors=(NotFound,),
    title="Backfill Embeddings",
    toolsets=("thoughts",),
    input=BackfillIn,
    output=BackfillOut,
    path="/thoughts/backfill",
    idempotent=True,
    long_running=True,
)
async def backfill_embeddings(ctx: CallContext, args: BackfillIn) -> BackfillOut:
    """Queue missing embeddings of stored thoughts for the active model, oldest first; the embedding
    queue makes them (wait_for_embedding waits); dry_run only counts and samples ids."""
    return await thoughts.backfill_embeddings(ctx, args)


@ops.operation(
    name="get_thought",
    title="Get Thought",
    toolsets=("thoughts",),
    input=ThoughtIdIn,
    output=ThoughtResultOut,
    path="/thoughts/{id}",
    method="GET",
    read_only=True,
)
async def get_thought(ctx: CallContext, args: ThoughtIdIn) -> ThoughtResultOut:
    """One thought by id, with its metadata and whether it has a vector of the active model."""
    return await thoughts.get(ctx, args.id)


@ops.operation(
    name="related_thoughts",
    title="Related Thoughts",
    toolsets=("thoughts",),
    input=RelatedThoughtsIn,
    output=RelatedThoughtsOut,
    path="/thoughts/{id}/related",
    method="GET",
    read_only=True,
)
async def related_thoughts(ctx: CallContext, args: RelatedThoughtsIn) -> RelatedThoughtsOut:
    """Semantic neighbours of one thought in its project (by its stored vector); full-text neighbours when
    it has no vector of the active model (retrieval_mode=lexical_fallback)."""
    return await thoughts.related(ctx, args)


@ops.operation(
    name="update_thought",
    title="Update Thought",
    toolsets=("thoughts",),
    input=UpdateThoughtIn,
    output=UpdateThoughtOut,
    path="/thoughts/{id}",
    method="PATCH",
    idempotent=True,
)
async def update_thought(ctx: CallContext, args: UpdateThoughtIn) -> UpdateThoughtOut:
    """Change a thought's content (re-embedded), metadata (replaced) or project."""
    return await thoughts.update(ctx, args)


@ops.operation(
    name="archive_thought",
    title="Archive Thought",
    toolsets=("thoughts",),
    input=ArchiveThoughtIn,
    output=ThoughtResultOut,
    path="/thoughts/{id}/archive",
    idempotent=True,
)
async def archive_thought(ctx: CallContext, args: ArchiveThoughtIn) -> ThoughtResultOut:
    """Archive a thought (hidden from listings and searches unless asked) or restore it with archived=false."""
    return await thoughts.archive(ctx, args)


@ops.operation(
    name="delete_thought",
    title="Delete Thought",
    toolsets=("thoughts",),
    input=ThoughtIdIn,
    output=DeleteThoughtOut,
    path="/thoughts/{id}",
    method="DELETE",
    destructive=True,
    idempotent=True,
)
async def delete_thought(ctx: CallContext, args: ThoughtIdIn) -> DeleteThoughtOut:
    """Delete a thought and its vectors permanently."""
    return await thoughts.delete(ctx, args.id)
