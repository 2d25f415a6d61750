"""The reference-compatible toolset: the reference memory server's nine tools on Cairn's graph.

Each use case translates the reference's arguments into the graph family's own and its results back
into the reference's shapes. Replies that list entities are bounded by
`CAIRN_GRAPH_REFERENCE_REPLY_TOKENS`: below it a reply is the whole answer, above it the reply is cut
and says so in plain words, with the `offset` to continue from.
"""

from __future__ import annotations

from app.core.context import CallContext
from app.graph import service
from app.graph.config import GraphSettings
from app.graph.schemas import (
    AddObservationsIn,
    CreateEntitiesIn,
    CreateRelationsIn,
    DeleteEntitiesIn,
    DeleteObservationsIn,
    DeleteRelationsIn,
    EntityIn,
    EntityOut,
    ObservationAddIn,
    ObservationDeletionIn,
    OpenNodesIn,
    ReadGraphIn,
    RelationIn,
    RelationOut,
    SearchNodesIn,
)
from app.graph.schemas_reference import (
    RefAddObservationsIn,
    RefCreateEntitiesIn,
    RefCreateRelationsIn,
    RefDeletedOut,
    RefDeleteEntitiesIn,
    RefDeleteObservationsIn,
    RefDeleteRelationsIn,
    RefEntitiesOut,
    RefGraphOut,
    RefObservationsOut,
    RefOpenNodesIn,
    RefReadGraphIn,
    RefRelation,
    RefRelationsOut,
    RefSearchNodesIn,
)

PAGE_TOKENS = 20_000  # the graph family's largest page
PAGE_ENTITIES = 200
MIN_PAGE_TOKENS = 200
MAX_OBSERVATIONS = 200


def _relations(items: list[RefRelation]) -> list[RelationIn]:
    return [
        RelationIn.model_validate({"from": r.from_entity, "to": r.to_entity, "relationType": r.relationType})
        for r in items
    ]


async def create_entities(ctx: CallContext, args: RefCreateEntitiesIn) -> RefEntitiesOut:
    """Create the entities whose names are new; the reply lists only those."""
    entities = [EntityIn(name=e.name, entityType=e.entityType, observations=e.observations) for e in args.entities]
    out = await service.create_entities(ctx, CreateEntitiesIn(entities=entities))
    return RefEntitiesOut(entities=out.entities)


async def create_relations(ctx: CallContext, args: RefCreateRelationsIn) -> RefRelationsOut:
    """Create the relations that are new; the reply lists only those."""
    out = await service.create_relations(ctx, CreateRelationsIn(relations=_relations(args.relations)))
    return RefRelationsOut(relations=out.relations)


async def add_observations(ctx: CallContext, args: RefAddObservationsIn) -> RefObservationsOut:
    """Add observations to existing entities."""
    items = [ObservationAddIn(entityName=o.entityName, contents=o.contents) for o in args.observations]
    out = await service.add_observations(ctx, AddObservationsIn(observations=items))
    return RefObservationsOut(results=out.results)


async def delete_entities(ctx: CallContext, args: RefDeleteEntitiesIn) -> RefDeletedOut:
    """Delete entities and their relations."""
    out = await service.delete_entities(ctx, DeleteEntitiesIn(entityNames=args.entityNames))
    return RefDeletedOut(success=out.success, message=out.message)


async def delete_observations(ctx: CallContext, args: RefDeleteObservationsIn) -> RefDeletedOut:
    """Delete observations by their exact text."""
    items = [ObservationDeletionIn(entityName=d.entityName, observations=d.observations) for d in args.deletions]
    out = await service.delete_observations(ctx, DeleteObservationsIn(deletions=items))
    return RefDeletedOut(success=out.success, message=out.message)


async def delete_relations(ctx: CallContext, args: RefDeleteRelationsIn) -> RefDeletedOut:
    """Delete relations."""
    out = await service.delete_relations(ctx, DeleteRelationsIn(relations=_relations(args.relations)))
    return RefDeletedOut(success=out.success, message=out.message)


def _cut_notice(shown_to: int, total: int, budget: int, what: str) -> str:
    return (
        f"TRUNCATED: this reply holds {what} {shown_to} of {total} (the reply limit is about {budget} tokens). "
        f'Call again with {{"offset": {shown_to}}} for the next part, or use search_nodes / open_nodes for '
        "specific entities."
    )


async def read_graph(ctx: CallContext, args: RefReadGraphIn) -> RefGraphOut:
    """The whole graph when it fits the reply limit; otherwise the first part and a notice."""
    budget = ctx.feature_settings(GraphSettings).reference_reply_tokens
    entities: list[EntityOut] = []
    relations: list[RelationOut] = []
    offset, used, cut, total = args.offset, 0, False, 0
    while True:
        page = await service.read_graph(
            ctx,
            ReadGraphIn(
                offset=offset,
                limit=PAGE_ENTITIES,
                token_budget=max(MIN_PAGE_TOKENS, min(PAGE_TOKENS, budget - used)),
                max_observations=MAX_OBSERVATIONS,
            ),
        )
        total = page.total_entities
        if entities and used + page.tokens > budget:
            break  # this page does not fit: the reply ends before it
        entities += page.entities
        relations += page.relations
        used += page.tokens
        cut = cut or page.truncated
        if page.next_offset is None or not page.entities:
            offset = total
            break
        offset = page.next_offset
        if budget - used < MIN_PAGE_TOKENS:
            break
    notices = []
    if offset < total:
        notices.append(_cut_notice(offset, total, budget, "entities up to"))
    if cut:
        notices.append("Some entities were shortened (observations or relations cut): open_nodes shows one whole.")
    return RefGraphOut(entities=entities, relations=relations, notice=" ".join(notices) or None)


async def search_nodes(ctx: CallContext, args: RefSearchNodesIn) -> RefGraphOut:
    """Entities matching the query (an empty query matches every entity), bounded like read_graph."""
    if not args.query.strip():
        return await read_graph(ctx, RefReadGraphIn(offset=args.offset))
    budget = ctx.feature_settings(GraphSettings).reference_reply_tokens
    out = await service.search_nodes(
        ctx,
        SearchNodesIn(
            query=args.query,
            offset=args.offset,
            limit=100,
            token_budget=min(PAGE_TOKENS, budget),
            max_observations=MAX_OBSERVATIONS,
        ),
    )
    notice = None
    if out.next_offset is not None:
        notice = _cut_notice(out.next_offset, out.total, budget, "matches up to")
    elif out.truncated:
        notice = "Some relations or observations were cut: open_nodes shows one entity whole."
    return RefGraphOut(entities=out.entities, relations=out.relations, notice=notice)


async def open_nodes(ctx: CallContext, args: RefOpenNodesIn) -> RefGraphOut:
    """The named entities and the relations touching them; unknown names are left out."""
    out = await service.open_nodes(ctx, OpenNodesIn(names=args.names, max_observations=500))
    notice = "Some relations were cut: open fewer nodes at a time to see them all." if out.truncated else None
    return RefGraphOut(entities=out.entities, relations=out.relations, notice=notice)
