"""app/graph/service.py with a real call context (the model unreachable: vectors stay queued): creations
skip names and relations that exist, observations are added once and re-embedded, deletions say what
they missed, pages follow the token budget, open_nodes reports unknown names, and the lifecycle tools
keep history (superseded observations, ended relations) with their errors."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest
from sqlalchemy import text

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.errors import Conflict, InvalidInput, NotFound
from app.graph import service
from app.graph.config import GraphSettings
from app.graph.schemas import (
    AddObservationsIn,
    CreateEntitiesIn,
    CreateRelationsIn,
    DeleteEntitiesIn,
    DeleteObservationsIn,
    DeleteRelationsIn,
    EntityHistoryIn,
    EntityIn,
    EntityOut,
    ObservationAddIn,
    ObservationDeletionIn,
    OpenNodesIn,
    ReadGraphIn,
    RelationIn,
    RelationOut,
    RelationRefIn,
    SearchNodesIn,
    SetEntityStatusIn,
    SupersedeObservationIn,
)
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

ADA_TEXT = text(
    "SELECT g.obs_text FROM graph_entities g JOIN projects p ON p.id = g.project_id "
    "WHERE p.name = 'obs' AND g.name = 'Ada'"
)
WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))


def _rel(a: str, b: str, kind: str, context: str | None = None) -> RelationIn:
    return RelationIn.model_validate({"from": a, "to": b, "relationType": kind, "context": context})


def _ref(a: str, b: str, kind: str, project: str) -> RelationRefIn:
    return RelationRefIn.model_validate({"from": a, "to": b, "relationType": kind, "project": project})


def test_unique_keeps_the_first_of_each_in_order() -> None:
    assert service._unique(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]
    assert service._unique_pairs([(1, "x"), (2, "x"), (1, "x")]) == [(1, "x"), (2, "x")]


def test_shrink_cuts_one_entity_down_to_the_budget() -> None:
    ent = EntityOut(name="Big", entityType="thing", observations=[f"observation number {i} " * 10 for i in range(50)])
    rels = [RelationOut(from_entity="Big", to_entity=f"T{i}", relationType="links") for i in range(50)]
    kept, out_r, used, cut = service._shrink(ent, rels, 300)
    assert out_r == []  # the observations came first and took the budget
    assert cut and used <= 300 and 0 < len(kept.observations) < 50
    assert kept.observations == ent.observations[: len(kept.observations)]
    few = EntityOut(name="Few", entityType="thing", observations=["x"])
    kept_few, some, used_few, _ = service._shrink(few, rels, 300)
    assert kept_few.observations == ["x"] and 0 < len(some) < 50 and some == rels[: len(some)] and used_few <= 300
    empty, none, _, _ = service._shrink(ent, rels, 1)
    assert empty.observations == [] and none == [] and empty.name == "Big"


db = database_fixture(["graph"])


def call(db: Database) -> AbstractAsyncContextManager[CallContext]:
    # Nothing answers: vectors are queued, never made
    return service_call(db, WRITER, embedder=unreachable_embedder(), feature_settings={GraphSettings: GraphSettings()})


async def _seed(db: Database, project: str) -> None:
    async with call(db) as ctx:
        await service.create_entities(
            ctx,
            CreateEntitiesIn(
                project=project,
                entities=[
                    EntityIn(name="Ada", entityType="person", observations=["wrote notes", "wrote notes", "math"]),
                    EntityIn(name="Engine", entityType="machine", observations=["gears"]),
                    EntityIn(name="Babbage", entityType="person", observations=[]),
                ],
            ),
        )
        await service.create_relations(
            ctx,
            CreateRelationsIn(
                project=project,
                relations=[_rel("Ada", "Engine", "programmed", "notes G"), _rel("Babbage", "Engine", "designed")],
            ),
        )


async def test_creations_skip_what_exists_and_queue_new_entities(db: Database) -> None:
    await _seed(db, "create")
    async with call(db) as ctx:
        again = await service.create_entities(
            ctx,
            CreateEntitiesIn(
                project="create",
                entities=[EntityIn(name="Ada"), EntityIn(name="Lovelace"), EntityIn(name="Lovelace", entityType="x")],
            ),
        )
        assert [e.name for e in again.entities] == ["Lovelace"] and again.entities[0].entityType == "Generic"
        assert again.skipped == ["Ada", "Lovelace"]  # an existing name, then the second of a repeated one
        queued = await ctx.session.scalar(text("SELECT count(*) FROM embedding_queue WHERE target = 'graph_entity'"))
        assert queued is not None and queued >= 4
        rels = await service.create_relations(
            ctx,
            CreateRelationsIn(
                project="create",
                relations=[
                    _rel("Ada", "Engine", "programmed"),
                    _rel("Ada", "Babbage", "knew"),
                    _rel("Ada", "Babbage", "knew"),
                ],
            ),
        )
        assert [(r.from_entity, r.to_entity) for r in rels.relations] == [("Ada", "Babbage")]
        assert [r.relationType for r in rels.skipped] == ["programmed"]
        with pytest.raises(NotFound, match="Entity with name Nobody not found"):
            await service.create_relations(
                ctx, CreateRelationsIn(project="create", relations=[_rel("Ada", "Nobody", "x")])
            )


async def test_observations_are_added_once_and_deleted_by_text(db: Database) -> None:
    await _seed(db, "obs")
    async with call(db) as ctx:
        out = await service.add_observations(
            ctx,
            AddObservationsIn(
                project="obs",
                observations=[
                    ObservationAddIn(entityName="Ada", contents=["math", "poetry", "poetry"]),
                    ObservationAddIn(entityName="Engine", contents=["steam"], kind="milestone"),
                ],
            ),
        )
        assert [(r.entityName, r.addedObservations) for r in out.results] == [
            ("Ada", ["poetry"]),
            ("Engine", ["steam"]),
        ]
        obs_text = await ctx.session.scalar(ADA_TEXT)
        assert obs_text == "wrote notes | math | poetry"  # the searchable text was rebuilt
        kind = await ctx.session.scalar(text("SELECT kind FROM graph_observations WHERE content = 'steam'"))
        assert kind == "milestone"
        with pytest.raises(NotFound, match="Ghost"):
            await service.add_observations(
                ctx,
                AddObservationsIn(project="obs", observations=[ObservationAddIn(entityName="Ghost", contents=["x"])]),
            )
        done = await service.delete_observations(
            ctx,
            DeleteObservationsIn(
                project="obs", deletions=[ObservationDeletionIn(entityName="Ada", observations=["math"])]
            ),
        )
        assert done.message == "Observations deleted successfully"
        partial = await service.delete_observations(
            ctx,
            DeleteObservationsIn(
                project="obs",
                deletions=[
                    ObservationDeletionIn(entityName="Ada", observations=["poetry", "never said"]),
                    ObservationDeletionIn(entityName="Ghost", observations=["x"]),
                ],
            ),
        )
        assert partial.message == "Deleted 1 of 3 observations. Entities not found: Ghost"
        assert await ctx.session.scalar(ADA_TEXT) == "wrote notes"


async def test_deletions_of_entities_and_relations_say_what_matched(db: Database) -> None:
    await _seed(db, "del")
    async with call(db) as ctx:
        rel = await service.delete_relations(
            ctx,
            DeleteRelationsIn(project="del", relations=[_rel("Ada", "Engine", "programmed"), _rel("Ada", "X", "y")]),
        )
        assert rel.message == "Deleted 1 of 2 relations. The rest matched nothing."
        ok = await service.delete_relations(
            ctx, DeleteRelationsIn(project="del", relations=[_rel("Babbage", "Engine", "designed")])
        )
        assert ok.message == "Relations deleted successfully"
        gone = await service.delete_entities(ctx, DeleteEntitiesIn(project="del", entityNames=["Ada", "Ghost", "Ada"]))
        assert gone.success and gone.message == "Deleted 1 of 2 entities. Not found: Ghost"
        nowhere = await service.delete_entities(ctx, DeleteEntitiesIn(project="void", entityNames=["Ada"]))
        assert nowhere.message == "Deleted 0 of 1 entities. Not found: Ada"
        left = await service.open_nodes(ctx, OpenNodesIn(project="del", names=["Ada", "Engine"]))
        assert [e.name for e in left.entities] == ["Engine"] and left.not_found == ["Ada"]


async def test_read_graph_pages_by_limit_and_budget_and_summarises(db: Database) -> None:
    await _seed(db, "read")
    async with call(db) as ctx:
        first = await service.read_graph(ctx, ReadGraphIn(project="read", limit=2))
        assert [e.name for e in first.entities] == ["Ada", "Engine"] and first.next_offset == 2
        assert first.entities[0].observations == ["wrote notes", "math"]  # repeated texts stored once
        assert [(r.from_entity, r.relationType) for r in first.relations] == [("Ada", "programmed")]
        assert first.total_entities == 3 and first.total_relations == 2 and first.tokens > 0
        rest = await service.read_graph(ctx, ReadGraphIn(project="read", offset=2))
        assert [e.name for e in rest.entities] == ["Babbage"] and rest.next_offset is None
        people = await service.read_graph(ctx, ReadGraphIn(project="read", entity_type="person", max_observations=1))
        assert [e.name for e in people.entities] == ["Ada", "Babbage"] and people.truncated
        assert people.entities[0].observations == ["wrote notes"] and people.total_relations == 2
        summary = await service.read_graph(ctx, ReadGraphIn(project="read", mode="summary"))
        assert summary.summary is not None and summary.entities == []
        assert (summary.summary.entity_count, summary.summary.observation_count, summary.summary.relation_count) == (
            3,
            3,
            2,
        )
        assert [(t.entityType, t.count) for t in summary.summary.by_type] == [("person", 2), ("machine", 1)]
        missing = await service.read_graph(ctx, ReadGraphIn(project="nothing-here", mode="summary"))
        assert missing.total_entities == 0 and missing.summary is not None and missing.summary.entity_count == 0


async def test_a_page_that_overflows_the_budget_holds_one_shrunk_entity(db: Database) -> None:
    big = [f"a long observation of the stone circle, line {i}, " * 8 for i in range(40)]
    async with call(db) as ctx:
        await service.create_entities(
            ctx,
            CreateEntitiesIn(
                project="budget", entities=[EntityIn(name="Stones", observations=big), EntityIn(name="Small")]
            ),
        )
    async with call(db) as ctx:
        page = await service.read_graph(ctx, ReadGraphIn(project="budget", token_budget=200, max_observations=200))
        assert page.entities[0].name == "Stones" and page.truncated  # shrunk rather than left out
        assert 0 < len(page.entities[0].observations) < 40 and page.tokens <= 200


async def test_search_nodes_matches_substrings_and_open_nodes_reports_unknown_names(db: Database) -> None:
    await _seed(db, "find")
    async with call(db) as ctx:
        hits = await service.search_nodes(ctx, SearchNodesIn(project="find", query="GEAR"))
        assert [e.name for e in hits.entities] == ["Engine"] and hits.total == 1 and hits.next_offset is None
        assert {(r.from_entity, r.to_entity) for r in hits.relations} == {("Ada", "Engine"), ("Babbage", "Engine")}
        paged = await service.search_nodes(ctx, SearchNodesIn(project="find", query="person", limit=1))
        assert [e.name for e in paged.entities] == ["Ada"] and paged.total == 2 and paged.next_offset == 1
        literal = await service.search_nodes(ctx, SearchNodesIn(project="find", query="%"))
        assert literal.entities == [] and literal.total == 0  # a wildcard is matched literally
        assert (await service.search_nodes(ctx, SearchNodesIn(project="none", query="a"))).entities == []
        opened = await service.open_nodes(ctx, OpenNodesIn(project="find", names=["Engine", "Ghost", "Ada"]))
        assert [e.name for e in opened.entities] == ["Engine", "Ada"] and opened.not_found == ["Ghost"]
        assert opened.total == 2 and len(opened.relations) == 2
        elsewhere = await service.open_nodes(ctx, OpenNodesIn(project="none", names=["Ada"]))
        assert elsewhere.entities == [] and elsewhere.not_found == ["Ada"]


async def test_supersede_keeps_the_old_observation_as_history(db: Database) -> None:
    await _seed(db, "sup")
    async with call(db) as ctx:
        out = await service.supersede_observation(
            ctx, SupersedeObservationIn(project="sup", entity_name="Ada", old_content="math", new_content="mathematics")
        )
        assert out.superseded.content == "math" and out.superseded.superseded_at is not None
        assert out.current.content == "mathematics" and out.current.supersedes == out.superseded.id
        assert out.current.kind == "generic" and out.current.superseded_at is None
        with pytest.raises(InvalidInput, match="exactly one"):
            await service.supersede_observation(
                ctx, SupersedeObservationIn(project="sup", entity_name="Ada", new_content="x")
            )
        with pytest.raises(Conflict, match="already superseded"):
            await service.supersede_observation(
                ctx,
                SupersedeObservationIn(
                    project="sup", entity_name="Ada", observation_id=out.superseded.id, new_content="maths"
                ),
            )
        with pytest.raises(NotFound, match="Observation not found on entity Ada"):
            await service.supersede_observation(
                ctx, SupersedeObservationIn(project="sup", entity_name="Ada", old_content="never", new_content="y")
            )
        with pytest.raises(Conflict, match="already holds"):
            await service.supersede_observation(
                ctx,
                SupersedeObservationIn(
                    project="sup", entity_name="Ada", old_content="mathematics", new_content="wrote notes"
                ),
            )
        with pytest.raises(NotFound, match="Entity with name Ghost"):
            await service.supersede_observation(
                ctx, SupersedeObservationIn(project="sup", entity_name="Ghost", old_content="a", new_content="b")
            )


async def test_ended_relations_status_and_history(db: Database) -> None:
    await _seed(db, "life")
    async with call(db) as ctx:
        ended = await service.end_relation(ctx, _ref("Ada", "Engine", "programmed", "life"))
        assert not ended.relation.active and ended.relation.ended_at is not None and ended.relation.context == "notes G"
        with pytest.raises(NotFound, match="not found"):
            await service.end_relation(ctx, _ref("Ada", "Babbage", "married", "life"))
        with pytest.raises(NotFound, match="Entity with name Ghost"):
            await service.end_relation(ctx, _ref("Ada", "Ghost", "x", "life"))
        status = await service.set_entity_status(
            ctx, SetEntityStatusIn(project="life", entity_name="Ada", status="archivado")
        )
        assert (status.name, status.status, status.previous_status) == ("Ada", "archived", "active")
        page = await service.read_graph(ctx, ReadGraphIn(project="life"))
        assert page.total_relations == 1  # the ended relation no longer counts
        history = await service.get_entity_history(ctx, EntityHistoryIn(project="life", entity_name="Ada", limit=1))
        # its implicit feedback is the call's write part (the executor runs it on the primary), not the read's
        assert len(ctx.primary_steps) == 1
        assert history.entity.status == "archived" and history.entity.entityType == "person"
        assert [o.content for o in history.observations] == [
            "wrote notes"
        ] and history.truncated  # two observations, one shown
        assert [(r.relationType, r.active) for r in history.relations] == [("programmed", False)]
        with pytest.raises(NotFound):
            await service.get_entity_history(ctx, EntityHistoryIn(project="nowhere", entity_name="Ada"))
