"""The graph tools: the reference memory server's nine tools plus search, history, reflections and
maintenance. Each is an MCP tool and a REST route under /api/v1/graph."""

from __future__ import annotations

from app.core.budget import measured
from app.core.context import CallContext
from app.core.errors import NotFound
from app.core.registry import OperationSet
from app.graph import (
    operations_reference,
    service,
    service_maintenance,
    service_reflections,
    service_search,
    service_stats,
)
from app.graph.schemas import (
    AddObservationsIn,
    AddObservationsOut,
    AddReflectionIn,
    AddReflectionOut,
    ConsolidateIn,
    ConsolidateOut,
    CreateEntitiesIn,
    CreateEntitiesOut,
    CreateRelationsIn,
    CreateRelationsOut,
    DeleteEntitiesIn,
    DeleteObservationsIn,
    DeleteRelationsIn,
    EndRelationOut,
    EntityHistoryIn,
    EntityHistoryOut,
    FindDuplicatesIn,
    FindDuplicatesOut,
    GraphOut,
    GraphStatsOut,
    OpenNodesIn,
    ProjectIn,
    QualityReportIn,
    QualityReportOut,
    ReadGraphIn,
    ReadGraphOut,
    RelationRefIn,
    SearchNodesIn,
    SearchNodesOut,
    SearchReflectionsIn,
    SearchReflectionsOut,
    SearchSemanticIn,
    SearchSemanticOut,
    SetEntityStatusIn,
    SetEntityStatusOut,
    SuccessOut,
    SupersedeObservationIn,
    SupersedeObservationOut,
)

ops = OperationSet(
    "graph",
    "A knowledge graph of entities, observations and relations, with semantic search, limbic re-ranking, "
    "history and maintenance; a drop-in for the reference memory server.",
)
ops.toolset("graph", "Knowledge graph: entities, relations, observations, semantic search, history, reflections.")


@ops.operation(
    name="create_entities",
    input=CreateEntitiesIn,
    output=CreateEntitiesOut,
    path="/graph/entities",
    title="Create Entities",
    plain=True,
)
async def create_entities(ctx: CallContext, args: CreateEntitiesIn) -> CreateEntitiesOut:
    """Create multiple new entities in the knowledge graph.

    Each entity is {name, entityType, observations}. Names already present are not changed; they are
    listed in `skipped`. Returns the entities that were created."""
    return await service.create_entities(ctx, args)


@ops.operation(
    name="create_relations",
    errors=(NotFound,),
    input=CreateRelationsIn,
    output=CreateRelationsOut,
    path="/graph/relations",
    title="Create Relations",
    plain=True,
)
async def create_relations(ctx: CallContext, args: CreateRelationsIn) -> CreateRelationsOut:
    """Create multiple new relations between entities in the knowledge graph. Relations should be in
    active voice.

    Each relation is {from, to, relationType} with entity names; both entities must exist (error 4002
    otherwise, nothing is written). Existing relations are listed in `skipped`."""
    return await service.create_relations(ctx, args)


@ops.operation(
    name="add_observations",
    errors=(NotFound,),
    input=AddObservationsIn,
    output=AddObservationsOut,
    path="/graph/observations",
    title="Add Observations",
)
async def add_observations(ctx: CallContext, args: AddObservationsIn) -> AddObservationsOut:
    """Add new observations to existing entities in the knowledge graph.

    Takes [{entityName, contents}]; texts the entity already holds are skipped. Returns
    [{entityName, addedObservations}]. The entity's embedding is recomputed."""
    return await service.add_observations(ctx, args)


@ops.operation(
    name="delete_entities",
    input=DeleteEntitiesIn,
    output=SuccessOut,
    path="/graph/entities/delete",
    destructive=True,
    idempotent=True,
    title="Delete Entities",
)
async def delete_entities(ctx: CallContext, args: DeleteEntitiesIn) -> SuccessOut:
    """Delete multiple entities and their associated relations from the knowledge graph.

    Their observations, embeddings and access counters go in the same transaction."""
    return await service.delete_entities(ctx, args)


@ops.operation(
    name="delete_observations",
    input=DeleteObservationsIn,
    output=SuccessOut,
    path="/graph/observations/delete",
    destructive=True,
    idempotent=True,
    title="Delete Observations",
)
async def delete_observations(ctx: CallContext, args: DeleteObservationsIn) -> SuccessOut:
    """Delete specific observations from entities in the knowledge graph.

    Takes [{entityName, observations}] with the exact observation texts."""
    return await service.delete_observations(ctx, args)


@ops.operation(
    name="delete_relations",
    input=DeleteRelationsIn,
    output=SuccessOut,
    path="/graph/relations/delete",
    destructive=True,
    idempotent=True,
    title="Delete Relations",
)
async def delete_relations(ctx: CallContext, args: DeleteRelationsIn) -> SuccessOut:
    """Delete multiple relations from the knowledge graph (use end_relation to keep history)."""
    return await service.delete_relations(ctx, args)


@ops.operation(
    name="read_graph",
    input=ReadGraphIn,
    output=ReadGraphOut,
    path="/graph",
    method="GET",
    read_only=True,
    title="Read Graph",
)
async def read_graph(ctx: CallContext, args: ReadGraphIn) -> ReadGraphOut:
    """Read the knowledge graph one bounded page at a time, or as a summary.

    mode=page (default): entities in creation order with their outgoing relations, at most `limit`
    entities and about `token_budget` tokens; continue with offset=next_offset. mode=summary: counts
    by type and the most important entities. Never returns the whole graph at once."""
    return await service.read_graph(ctx, args)


@ops.operation(
    name="search_nodes",
    input=SearchNodesIn,
    output=SearchNodesOut,
    path="/graph/nodes/search",
    method="GET",
    read_only=True,
    title="Search Nodes",
)
async def search_nodes(ctx: CallContext, args: SearchNodesIn) -> SearchNodesOut:
    """Search for nodes in the knowledge graph based on a query.

    Case-insensitive substring match on entity names, types and observations; returns matching
    entities (paginated) and the relations touching them. For meaning-based search use search_semantic."""
    found = await service.search_nodes(ctx, args)
    return measured(SearchNodesOut(**dict(found)), "tokens")


@ops.operation(
    name="open_nodes", input=OpenNodesIn, output=GraphOut, path="/graph/nodes/open", read_only=True, title="Open Nodes"
)
async def open_nodes(ctx: CallContext, args: OpenNodesIn) -> GraphOut:
    """Open specific nodes in the knowledge graph by their names.

    Returns the entities and the relations touching them; unknown names are listed in `not_found`.
    Opening a recent search result counts as implicit relevance feedback."""
    return await service.open_nodes(ctx, args)


@ops.operation(
    name="search_semantic",
    input=SearchSemanticIn,
    output=SearchSemanticOut,
    path="/graph/search/semantic",
    read_only=True,
    title="Semantic Search",
)
async def search_semantic(ctx: CallContext, args: SearchSemanticIn) -> SearchSemanticOut:
    """Search entities by meaning: vector + full-text candidates re-ranked by the limbic score.

    Every result carries the score it was ranked by; with explain: true also its score components
    (cosine_sim, text_score, importance, temporal, cooc_boost, limbic_score) and baseline rank.
    Entities that do not answer the query (no query word, cosine below the floor) and archived ones
    are left out. Each call is logged as a search event (A/B treatment limbic or baseline); a write
    key's call, not through a readonly endpoint, also updates access and co-occurrence counters."""
    return await service_search.search_semantic(ctx, args)


@ops.operation(
    name="supersede_observation",
    errors=(NotFound,),
    input=SupersedeObservationIn,
    output=SupersedeObservationOut,
    path="/graph/observations/supersede",
    title="Supersede Observation",
)
async def supersede_observation(ctx: CallContext, args: SupersedeObservationIn) -> SupersedeObservationOut:
    """Replace an observation (by id or exact text) with a new one; the old one stays in the history."""
    return await service.supersede_observation(ctx, args)


@ops.operation(
    name="end_relation",
    errors=(NotFound,),
    input=RelationRefIn,
    output=EndRelationOut,
    path="/graph/relations/end",
    idempotent=True,
    title="End Relation",
)
async def end_relation(ctx: CallContext, args: RelationRefIn) -> EndRelationOut:
    """Mark a relation {from, to, relationType} as ended; it leaves the graph but stays in the history."""
    return await service.end_relation(ctx, args)


@ops.operation(
    name="set_entity_status",
    errors=(NotFound,),
    input=SetEntityStatusIn,
    output=SetEntityStatusOut,
    path="/graph/entities/status",
    idempotent=True,
    title="Set Entity Status",
)
async def set_entity_status(ctx: CallContext, args: SetEntityStatusIn) -> SetEntityStatusOut:
    """Set an entity's lifecycle status (for example active or archived; the seed's activo / archivado are accepted)."""
    return await service.set_entity_status(ctx, args)


@ops.operation(
    name="get_entity_history",
    errors=(NotFound,),
    input=EntityHistoryIn,
    output=EntityHistoryOut,
    path="/graph/entities/history",
    method="GET",
    read_only=True,
    title="Entity History",
)
async def get_entity_history(ctx: CallContext, args: EntityHistoryIn) -> EntityHistoryOut:
    """An entity's full history: observations including superseded ones, relations including ended
    ones, and its latest reflections."""
    return await service.get_entity_history(ctx, args)


@ops.operation(
    name="add_reflection",
    errors=(NotFound,),
    input=AddReflectionIn,
    output=AddReflectionOut,
    path="/graph/reflections",
    title="Add Reflection",
)
async def add_reflection(ctx: CallContext, args: AddReflectionIn) -> AddReflectionOut:
    """Record a narrative reflection about an entity, a session or the whole graph."""
    return await service_reflections.add_reflection(ctx, args)


@ops.operation(
    name="search_reflections",
    input=SearchReflectionsIn,
    output=SearchReflectionsOut,
    path="/graph/reflections/search",
    read_only=True,
    title="Search Reflections",
)
async def search_reflections(ctx: CallContext, args: SearchReflectionsIn) -> SearchReflectionsOut:
    """Search reflections by meaning and words (vector + full-text)."""
    return await service_reflections.search_reflections(ctx, args)


@ops.operation(
    name="find_duplicate_observations",
    errors=(NotFound,),
    input=FindDuplicatesIn,
    output=FindDuplicatesOut,
    path="/graph/observations/duplicates",
    idempotent=True,
    long_running=True,
    title="Find Duplicate Observations",
)
async def find_duplicate_observations(ctx: CallContext, args: FindDuplicatesIn) -> FindDuplicatesOut:
    """Find near-duplicate observations of the same entity by embedding similarity and set their
    similarity flag (consolidate merges flagged ones)."""
    return await service_maintenance.find_duplicate_observations(ctx, args)


@ops.operation(
    name="consolidate",
    input=ConsolidateIn,
    output=ConsolidateOut,
    path="/graph/consolidate",
    destructive=True,
    long_running=True,
    title="Consolidate",
)
async def consolidate(ctx: CallContext, args: ConsolidateIn) -> ConsolidateOut:
    """Merge flagged duplicate observations and decay stale access counts. dry_run (default true)
    only reports what would change."""
    return await service_maintenance.consolidate(ctx, args)


@ops.operation(
    name="search_quality_report",
    input=QualityReportIn,
    output=QualityReportOut,
    path="/graph/search/quality",
    method="GET",
    read_only=True,
    title="Search Quality Report",
    toolsets=("admin",),
)
async def search_quality_report(ctx: CallContext, args: QualityReportIn) -> QualityReportOut:
    """NDCG@k and MRR per A/B treatment, from implicit feedback (a result opened again soon after the
    search counts as relevant)."""
    return await service_stats.search_quality_report(ctx, args)


@ops.operation(
    name="graph_stats",
    input=ProjectIn,
    output=GraphStatsOut,
    path="/graph/stats",
    method="GET",
    read_only=True,
    title="Graph Stats",
)
async def graph_stats(ctx: CallContext, args: ProjectIn) -> GraphStatsOut:
    """Counts of entities, observations, relations, reflections, searches and embeddings."""
    return await service_stats.graph_stats(ctx, args)


# The graph's operations: those above, then the reference toolset's.
ops.include(operations_reference.ops)
