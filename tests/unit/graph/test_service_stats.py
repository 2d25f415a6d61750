"""app/graph/service_stats.py with a real call context on a database of its own: the graph's counts by
type and status, an unknown project counted as empty, and a quality report with nothing to judge."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.graph import service
from app.graph.config import GraphSettings
from app.graph.schemas import (
    AddReflectionIn,
    CreateEntitiesIn,
    CreateRelationsIn,
    EntityIn,
    ProjectIn,
    QualityReportIn,
    RelationIn,
)
from app.graph.service_reflections import add_reflection
from app.graph.service_stats import graph_stats, search_quality_report
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))


db = database_fixture(["graph"])


def call(db: Database) -> AbstractAsyncContextManager[CallContext]:
    # Vectors stay queued: none is counted as made
    return service_call(db, WRITER, embedder=unreachable_embedder(), feature_settings={GraphSettings: GraphSettings()})


async def test_the_counts_of_a_project(db: Database) -> None:
    people = [EntityIn(name=n, entityType="person", observations=["o1", "o2"]) for n in ("Ada", "Charles")]
    machine = EntityIn(name="Engine", entityType="machine", status="archivado")
    async with call(db) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project="lab", entities=[*people, machine]))
        link = RelationIn.model_validate({"from": "Ada", "to": "Engine", "relationType": "programmed"})
        await service.create_relations(ctx, CreateRelationsIn(project="lab", relations=[link]))
        await add_reflection(ctx, AddReflectionIn(project="lab", content="a small graph"))
        await service.create_entities(ctx, CreateEntitiesIn(project="other", entities=[EntityIn(name="Zed")]))
    async with call(db) as ctx:
        stats = await graph_stats(ctx, ProjectIn(project="lab"))
    assert (stats.entities, stats.observations, stats.relations, stats.reflections) == (3, 4, 1, 1)
    assert (stats.ended_relations, stats.superseded_observations, stats.entities_with_embedding) == (0, 0, 0)
    assert {(t.entityType, t.count) for t in stats.by_type} == {("person", 2), ("machine", 1)}
    assert {(t.status, t.count) for t in stats.by_status} == {("active", 2), ("archived", 1)}
    assert stats.embedding_model == "text-embedding-3-small" and stats.search_events == 0


async def test_an_unknown_project_is_empty_and_has_nothing_to_judge(db: Database) -> None:
    async with call(db) as ctx:
        empty = await graph_stats(ctx, ProjectIn(project="nowhere"))
        report = await search_quality_report(ctx, QualityReportIn(project="nowhere", k=5))
    assert empty.entities == empty.relations == empty.reflections == 0 and empty.top_entities == []
    assert report.k == 5 and report.feedback_window_seconds == GraphSettings().feedback_window_seconds
    assert [(t.treatment, t.events, t.ndcg_at_k, t.mrr) for t in report.treatments] == [
        ("limbic", 0, None, None),
        ("baseline", 0, None, None),
    ]
