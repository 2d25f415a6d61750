"""Use cases of the reference-compatible tools and the lifecycle tools (never commits)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.core.budget import tokens_of
from app.core.context import CallContext
from app.core.embeddings.calls import enqueue
from app.core.errors import Conflict, NotFound, invalid_field
from app.graph.config import GraphSettings
from app.graph.repository import ENTITY_TARGET, EntityRow, GraphRepository
from app.graph.repository_search import SearchRepository
from app.graph.schemas import (
    AddedObservations,
    AddObservationsIn,
    AddObservationsOut,
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
    EntityInfo,
    EntityOut,
    GraphOut,
    GraphSummary,
    ImportantEntity,
    ObservationOut,
    OpenNodesIn,
    ReadGraphIn,
    ReadGraphOut,
    ReflectionOut,
    RelationDetail,
    RelationOut,
    RelationRefIn,
    SearchNodesIn,
    SetEntityStatusIn,
    SetEntityStatusOut,
    SuccessOut,
    SupersedeObservationIn,
    SupersedeObservationOut,
    TypeCount,
)
from app.graph.service_common import not_found, project_id, reembed, require

RELATIONS_PER_ENTITY = 50
RELATIONS_CAP = 500


def _rel(row: Any) -> RelationOut:
    return RelationOut(from_entity=row["fname"], to_entity=row["tname"], relationType=row["relation_type"])


def _rel_detail(row: Any) -> RelationDetail:
    return RelationDetail(
        from_entity=row["fname"],
        to_entity=row["tname"],
        relationType=row["relation_type"],
        context=row["context"],
        active=bool(row["active"]),
        ended_at=row["ended_at"],
        created_at=row["created_at"],
    )


def obs_out(row: Any) -> ObservationOut:
    """API shape of an observation row."""
    m = row
    return ObservationOut(
        id=m["id"],
        content=m["content"],
        kind=m["kind"],
        supersedes=m["supersedes"],
        superseded_at=m["superseded_at"],
        similarity_flag=m["similarity_flag"],
        duplicate_of=m["duplicate_of"],
        created_at=m["created_at"],
    )


def _unique(items: list[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in items if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


# ---- the nine reference tools -------------------------------------------------------------------


async def create_entities(ctx: CallContext, args: CreateEntitiesIn) -> CreateEntitiesOut:
    """Create new entities with their observations; existing names are skipped and listed."""
    pid = await project_id(ctx, args.project, create=True)
    assert pid is not None
    repo = GraphRepository(ctx.session)
    first: dict[str, Any] = {}
    for e in args.entities:
        first.setdefault(e.name, e)
    created = await repo.insert_entities(
        pid,
        [(e.name, e.entityType, e.status) for e in first.values()],
        [_unique(e.observations) for e in first.values()],
    )
    by_name = {r.name: r for r in created}
    await enqueue(ctx, ENTITY_TARGET, [r.id for r in created])
    out = [
        EntityOut(name=n, entityType=e.entityType, observations=_unique(e.observations))
        for n, e in first.items()
        if n in by_name
    ]
    skipped = [e.name for e in args.entities if e.name not in by_name or first[e.name] is not e]
    return CreateEntitiesOut(entities=out, skipped=skipped)


async def create_relations(ctx: CallContext, args: CreateRelationsIn) -> CreateRelationsOut:
    """Create relations between existing entities; existing relations are skipped and listed."""
    pid = await project_id(ctx, args.project, create=True)
    assert pid is not None
    repo = GraphRepository(ctx.session)
    rows: dict[tuple[str, str, str], Any] = {}
    for r in args.relations:
        rows.setdefault((r.from_entity, r.to_entity, r.relationType), r)
    found, inserted = await repo.insert_relations_by_name(pid, [(*k, v.context) for k, v in rows.items()])
    for name in _unique([n for r in args.relations for n in (r.from_entity, r.to_entity)]):
        if name not in found:
            raise not_found(name)  # the executor rolls back what the statement inserted
    created = set(inserted)
    made: list[RelationOut] = []
    skipped: list[RelationOut] = []
    for key, r in rows.items():
        out = RelationOut(from_entity=r.from_entity, to_entity=r.to_entity, relationType=r.relationType)
        (made if key in created else skipped).append(out)
    return CreateRelationsOut(relations=made, skipped=skipped)


async def add_observations(ctx: CallContext, args: AddObservationsIn) -> AddObservationsOut:
    """Add observations to existing entities (texts already present are skipped) and re-embed them."""
    pid = await project_id(ctx, args.project, create=True)
    assert pid is not None
    repo = GraphRepository(ctx.session)
    names = _unique([o.entityName for o in args.observations])
    ents = require(await repo.get_entities(pid, names, lock=True), names)
    added: dict[tuple[int, str], bool] = {}
    for kind in _unique([o.kind for o in args.observations]):
        pairs = _unique_pairs(
            [(ents[o.entityName].id, c) for o in args.observations if o.kind == kind for c in o.contents]
        )
        for _, eid, content in await repo.insert_observations(pairs, kind):
            added[(eid, content)] = True
    results = []
    for o in args.observations:
        eid = ents[o.entityName].id
        mine = []
        for c in o.contents:
            if added.pop((eid, c), False):
                mine.append(c)
        results.append(AddedObservations(entityName=o.entityName, addedObservations=mine))
    touched = sorted({ents[r.entityName].id for r in results if r.addedObservations})
    await reembed(ctx, repo, touched)
    return AddObservationsOut(results=results)


def _unique_pairs(pairs: list[tuple[int, str]]) -> list[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    out = []
    for p in pairs:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


async def delete_entities(ctx: CallContext, args: DeleteEntitiesIn) -> SuccessOut:
    """Delete entities with their observations, relations, embeddings and counters."""
    pid = await project_id(ctx, args.project, create=False)
    names = _unique(args.entityNames)
    deleted = await GraphRepository(ctx.session).delete_entities(pid, names) if pid else []
    missing = [n for n in names if n not in set(deleted)]
    message = (
        "Entities deleted successfully"
        if not missing
        else f"Deleted {len(deleted)} of {len(names)} entities. Not found: {', '.join(missing[:50])}"
    )
    return SuccessOut(success=True, message=message)


async def delete_observations(ctx: CallContext, args: DeleteObservationsIn) -> SuccessOut:
    """Delete observations by text and re-embed the entities that changed."""
    pid = await project_id(ctx, args.project, create=False)
    repo = GraphRepository(ctx.session)
    names = _unique([d.entityName for d in args.deletions])
    ents = {r.name: r for r in await repo.get_entities(pid, names, lock=True)} if pid else {}
    count, requested, missing, touched = 0, 0, [], set()
    for d in args.deletions:
        requested += len(d.observations)
        ent = ents.get(d.entityName)
        if ent is None:
            missing.append(d.entityName)
            continue
        n = await repo.delete_observations(ent.id, d.observations)
        if n:
            touched.add(ent.id)
        count += n
    await reembed(ctx, repo, sorted(touched))
    if count == requested:
        message = "Observations deleted successfully"
    else:
        message = f"Deleted {count} of {requested} observations." + (
            f" Entities not found: {', '.join(_unique(missing)[:50])}" if missing else ""
        )
    return SuccessOut(success=True, message=message)


async def delete_relations(ctx: CallContext, args: DeleteRelationsIn) -> SuccessOut:
    """Delete relations (hard delete; end_relation keeps history instead)."""
    pid = await project_id(ctx, args.project, create=False)
    repo = GraphRepository(ctx.session)
    names = _unique([n for r in args.relations for n in (r.from_entity, r.to_entity)])
    ents = {r.name: r for r in await repo.get_entities(pid, names)} if pid else {}
    keys = [
        (ents[r.from_entity].id, ents[r.to_entity].id, r.relationType)
        for r in args.relations
        if r.from_entity in ents and r.to_entity in ents
    ]
    count = await repo.delete_relations(list(dict.fromkeys(keys)))
    message = (
        "Relations deleted successfully"
        if count == len(args.relations)
        else f"Deleted {count} of {len(args.relations)} relations. The rest matched nothing."
    )
    return SuccessOut(success=True, message=message)


async def _fill(repo: GraphRepository, rows: list[EntityRow], max_obs: int) -> tuple[list[EntityOut], bool]:
    obs = await repo.current_observations([r.id for r in rows], max_obs)
    out, cut = [], False
    for r in rows:
        texts, n = obs[r.id]
        cut = cut or n > len(texts)
        out.append(EntityOut(name=r.name, entityType=r.entity_type, observations=texts))
    return out, cut


async def read_graph(ctx: CallContext, args: ReadGraphIn) -> ReadGraphOut:
    """One token-bounded page of entities with their outgoing relations, or a summary."""
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return ReadGraphOut(
            total_entities=0,
            total_relations=0,
            summary=GraphSummary(entity_count=0, observation_count=0, relation_count=0, by_type=[], top_entities=[])
            if args.mode == "summary"
            else None,
        )
    repo = GraphRepository(ctx.session)
    if args.mode == "summary":
        s = await repo.summary(pid)
        summary = GraphSummary(
            entity_count=s["entities"],
            observation_count=s["observations"],
            relation_count=s["relations"],
            by_type=[TypeCount(entityType=t, count=c) for t, c in s["by_type"]],
            top_entities=[
                ImportantEntity(name=n, entityType=t, access_count=a, observations=o) for n, t, a, o in s["top"]
            ],
        )
        return ReadGraphOut(
            total_entities=s["entities"],
            total_relations=s["relations"],
            summary=summary,
            tokens=tokens_of(summary.model_dump()),
        )
    rows, total = await repo.page(pid, args.offset, args.limit, args.entity_type)
    entities, cut = await _fill(repo, rows, args.max_observations)
    rels = await repo.relations_touching(
        [r.id for r in rows],
        only_from=True,
        per_from=RELATIONS_PER_ENTITY,
        limit=(RELATIONS_PER_ENTITY + 1) * max(len(rows), 1),
    )
    by_from: dict[str, list[RelationOut]] = {}
    for row in rels:
        by_from.setdefault(row["fname"], []).append(_rel(row))
    page_e: list[EntityOut] = []
    page_r: list[RelationOut] = []
    used = 0
    for ent in entities:
        mine = by_from.get(ent.name, [])
        if len(mine) > RELATIONS_PER_ENTITY:
            mine, cut = mine[:RELATIONS_PER_ENTITY], True
        cost = tokens_of(ent.model_dump()) + sum(tokens_of(r.model_dump(by_alias=True)) for r in mine)
        if used + cost > args.token_budget:
            if page_e:
                break
            ent, mine, cost, cut = _shrink(ent, mine, args.token_budget)
        page_e.append(ent)
        page_r.extend(mine)
        used += cost
    nxt = args.offset + len(page_e)
    total_rel = await repo.count_relations(pid, args.entity_type)
    return ReadGraphOut(
        entities=page_e,
        relations=page_r,
        total_entities=total,
        total_relations=total_rel,
        next_offset=nxt if nxt < total else None,
        truncated=cut,
        tokens=used,
    )


def _shrink(ent: EntityOut, rels: list[RelationOut], budget: int) -> tuple[EntityOut, list[RelationOut], int, bool]:
    """Cut one oversized entity's observations and relations down to the budget."""
    kept = EntityOut(name=ent.name, entityType=ent.entityType, observations=[])
    used = tokens_of(kept.model_dump())
    for o in ent.observations:
        t = tokens_of(o) + 1
        if used + t > budget:
            break
        kept.observations.append(o)
        used += t
    out_r = []
    for r in rels:
        t = tokens_of(r.model_dump(by_alias=True))
        if used + t > budget:
            break
        out_r.append(r)
        used += t
    return kept, out_r, used, True


async def _graph(repo: GraphRepository, rows: list[EntityRow], max_obs: int, budget: int | None) -> GraphOut:
    entities, cut = await _fill(repo, rows, max_obs)
    rels = await repo.relations_touching([r.id for r in rows], limit=RELATIONS_CAP + 1)
    if len(rels) > RELATIONS_CAP:
        rels, cut = rels[:RELATIONS_CAP], True
    out_e: list[EntityOut] = []
    used = 0
    for ent in entities:
        cost = tokens_of(ent.model_dump())
        if budget is not None and used + cost > budget and out_e:
            cut = True
            break
        out_e.append(ent)
        used += cost
    names = {e.name for e in out_e}
    out_r = []
    for row in rels:
        if row["fname"] not in names and row["tname"] not in names:
            continue
        r = _rel(row)
        cost = tokens_of(r.model_dump(by_alias=True))
        if budget is not None and used + cost > budget:
            cut = True
            break
        out_r.append(r)
        used += cost
    return GraphOut(entities=out_e, relations=out_r, truncated=cut)


async def search_nodes(ctx: CallContext, args: SearchNodesIn) -> GraphOut:
    """Entities whose name, type or observations contain the query, with the relations touching them."""
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return GraphOut(entities=[], relations=[])
    repo = GraphRepository(ctx.session)
    rows, total = await repo.substring_search(pid, args.query, args.offset, args.limit)
    out = await _graph(repo, rows, args.max_observations, args.token_budget)
    nxt = args.offset + len(out.entities)
    out.total, out.next_offset = total, (nxt if nxt < total else None)
    return out


async def open_nodes(ctx: CallContext, args: OpenNodesIn) -> GraphOut:
    """The named entities with the relations touching them; counts as a re-access for search feedback."""
    pid = await project_id(ctx, args.project, create=False)
    names = _unique(args.names)
    if pid is None:
        return GraphOut(entities=[], relations=[], not_found=names)
    repo = GraphRepository(ctx.session)
    found = {r.name: r for r in await repo.get_entities(pid, names)}
    rows = [found[n] for n in names if n in found]
    out = await _graph(repo, rows, args.max_observations, None)
    out.total = len(rows)
    out.not_found = [n for n in names if n not in found]
    credit_feedback(ctx, pid, [r.id for r in rows], args.session_id)
    return out


def credit_feedback(ctx: CallContext, pid: uuid.UUID, ids: list[int], session_id: str | None) -> None:
    """Count opening `ids` as implicit feedback on the searches that returned them: the write part of
    the read, on the primary, where those search events were written (`CallContext.write_after_read`)."""
    window = ctx.feature_settings(GraphSettings).feedback_window_seconds

    async def feedback(session: AsyncSession, reply: Any) -> Any:
        await SearchRepository(session).record_feedback(pid, ids, window, session_id)
        return reply

    ctx.write_after_read(feedback)


# ---- lifecycle tools ---------------------------------------------------------------------------


async def _entity(
    ctx: CallContext, project: str | None, name: str, *, lock: bool = False, create: bool = False
) -> tuple[uuid.UUID, GraphRepository, EntityRow]:
    pid = await project_id(ctx, project, create=create)
    if pid is None:
        raise not_found(name)
    repo = GraphRepository(ctx.session)
    rows = await repo.get_entities(pid, [name], lock=lock)
    if not rows:
        raise not_found(name)
    return pid, repo, rows[0]


async def supersede_observation(ctx: CallContext, args: SupersedeObservationIn) -> SupersedeObservationOut:
    """Replace a current observation with a new one, keeping the old one as history."""
    if (args.observation_id is None) == (args.old_content is None):
        raise invalid_field("observation_id", "Give exactly one of observation_id or old_content", rule="one_of")
    _, repo, ent = await _entity(ctx, args.project, args.entity_name, lock=True, create=True)
    old = await repo.observation(ent.id, obs_id=args.observation_id, content=args.old_content)
    if old is None:
        raise NotFound(
            f"Observation not found on entity {ent.name}", suggestions=["List observation ids with get_entity_history"]
        )
    if old["superseded_at"] is not None:
        raise Conflict(f"Observation {old['id']} was already superseded")
    await repo.mark_superseded([old["id"]])
    added = await repo.insert_observations([(ent.id, args.new_content)], args.kind or old["kind"], supersedes=old["id"])
    if not added:
        raise Conflict(
            f"Entity {ent.name} already holds an observation with this text",
            suggestions=["Delete the old observation instead"],
        )
    await reembed(ctx, repo, [ent.id])
    rows = await repo.observation_rows([old["id"], added[0][0]])
    return SupersedeObservationOut(entity_name=ent.name, superseded=obs_out(rows[0]), current=obs_out(rows[1]))


async def end_relation(ctx: CallContext, args: RelationRefIn) -> EndRelationOut:
    """Mark a relation as ended; it stays in the history."""
    pid = await project_id(ctx, args.project, create=False)
    repo = GraphRepository(ctx.session)
    names = _unique([args.from_entity, args.to_entity])
    ents = require(await repo.get_entities(pid, names), names) if pid else require([], names)
    row = await repo.end_relation(ents[args.from_entity].id, ents[args.to_entity].id, args.relationType)
    if row is None:
        raise NotFound(f"Relation {args.from_entity} -[{args.relationType}]-> {args.to_entity} not found")
    return EndRelationOut(
        relation=RelationDetail(
            from_entity=args.from_entity,
            to_entity=args.to_entity,
            relationType=args.relationType,
            context=row["context"],
            active=bool(row["active"]),
            ended_at=row["ended_at"],
            created_at=row["created_at"],
        )
    )


async def set_entity_status(ctx: CallContext, args: SetEntityStatusIn) -> SetEntityStatusOut:
    """Change an entity's lifecycle status (e.g. active, archived)."""
    _, repo, ent = await _entity(ctx, args.project, args.entity_name, lock=True)
    await repo.set_status(ent.id, args.status)
    return SetEntityStatusOut(name=ent.name, status=args.status, previous_status=ent.status)


async def get_entity_history(ctx: CallContext, args: EntityHistoryIn) -> EntityHistoryOut:
    """Every observation (superseded ones too), every relation (ended ones too) and reflections."""
    pid, repo, ent = await _entity(ctx, args.project, args.entity_name)
    info = await repo.entity_info(ent.id)
    obs = await repo.history(ent.id, args.limit + 1)
    rels = await repo.relations_touching([ent.id], include_ended=True, limit=args.limit + 1)
    srepo = SearchRepository(ctx.session)
    refl = await srepo.reflections_for(pid, ent.id, 20)
    credit_feedback(ctx, pid, [ent.id], args.session_id)
    return EntityHistoryOut(
        entity=EntityInfo(
            name=info["name"],
            entityType=info["entity_type"],
            status=info["status"],
            created_at=info["created_at"],
            updated_at=info["updated_at"],
        ),
        observations=[obs_out(r) for r in obs[: args.limit]],
        relations=[_rel_detail(r) for r in rels[: args.limit]],
        reflections=[reflection_out(r) for r in refl],
        truncated=len(obs) > args.limit or len(rels) > args.limit,
    )


def reflection_out(r: Any) -> ReflectionOut:
    """API shape of a reflection row (id, type, target id, target name, author, content, mood, created)."""
    return ReflectionOut(
        id=r["id"],
        target_type=r["target_type"],
        target_id=r["target_id"],
        target_name=r["target_name"],
        author=r["author"],
        content=r["content"],
        mood=r["mood"],
        created_at=r["created_at"],
    )
