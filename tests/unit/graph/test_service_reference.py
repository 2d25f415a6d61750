"""app/graph/service_reference.py with a real call context (each test's key bound to its own project):
the reference tools map onto the graph services and back, a read_graph larger than the reply limit ends
at a page boundary and says where to continue, an empty search query reads the graph, and deletions
keep the graph service's sentences."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.errors import NotFound
from app.graph import service_reference as ref
from app.graph.config import GraphSettings
from app.graph.schemas_reference import (
    RefAddObservationsIn,
    RefCreateEntitiesIn,
    RefCreateRelationsIn,
    RefDeleteEntitiesIn,
    RefDeleteObservationsIn,
    RefDeleteRelationsIn,
    RefOpenNodesIn,
    RefReadGraphIn,
    RefSearchNodesIn,
)
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

LIMIT = GraphSettings(reference_reply_tokens=1000)


def test_the_cut_notice_names_the_offset_to_continue_from() -> None:
    notice = ref._cut_notice(40, 100, 1000, "entities up to")
    assert notice.startswith("TRUNCATED: this reply holds entities up to 40 of 100")
    assert "about 1000 tokens" in notice and '{"offset": 40}' in notice


db = database_fixture(["graph"])


def call(db: Database, project: str, settings: GraphSettings = LIMIT) -> AbstractAsyncContextManager[CallContext]:
    principal = Principal(key_id="k", name="bound", scopes=frozenset({"write"}), project=project)
    # Nothing answers: vectors stay queued
    return service_call(db, principal, embedder=unreachable_embedder(), feature_settings={GraphSettings: settings})


def _entities(*names: str, obs: list[str] | None = None) -> RefCreateEntitiesIn:
    return RefCreateEntitiesIn.model_validate(
        {"entities": [{"name": n, "entityType": "thing", "observations": obs or [f"{n} is here"]} for n in names]}
    )


def _relations(*triples: tuple[str, str, str]) -> list[dict[str, str]]:
    return [{"from": a, "to": b, "relationType": r} for a, b, r in triples]


async def test_the_reference_tools_write_through_the_graph_services(db: Database) -> None:
    async with call(db, "ref-write") as ctx:
        made = await ref.create_entities(ctx, _entities("A", "B"))
        assert [e.name for e in made.entities] == ["A", "B"] and made.entities[0].observations == ["A is here"]
        assert (await ref.create_entities(ctx, _entities("A", "C"))).entities[0].name == "C"  # A existed
        rels = RefCreateRelationsIn.model_validate({"relations": _relations(("A", "B", "knows"), ("B", "C", "sees"))})
        assert [r.relationType for r in (await ref.create_relations(ctx, rels)).relations] == ["knows", "sees"]
        assert (await ref.create_relations(ctx, rels)).relations == []  # only new ones are listed
        added = await ref.add_observations(
            ctx,
            RefAddObservationsIn.model_validate(
                {"observations": [{"entityName": "A", "contents": ["new", "A is here"]}]}
            ),
        )
        assert added.results[0].addedObservations == ["new"]
        with pytest.raises(NotFound, match="Entity with name Z not found"):
            await ref.add_observations(
                ctx, RefAddObservationsIn.model_validate({"observations": [{"entityName": "Z", "contents": ["x"]}]})
            )
        gone = await ref.delete_observations(
            ctx, RefDeleteObservationsIn.model_validate({"deletions": [{"entityName": "A", "observations": ["new"]}]})
        )
        assert gone.success and gone.message == "Observations deleted successfully"
        cut = await ref.delete_relations(
            ctx, RefDeleteRelationsIn.model_validate({"relations": _relations(("A", "B", "knows"))})
        )
        assert cut.message == "Relations deleted successfully"
        dropped = await ref.delete_entities(ctx, RefDeleteEntitiesIn(entityNames=["C", "Q"]))
        assert dropped.message == "Deleted 1 of 2 entities. Not found: Q"
        whole = await ref.read_graph(ctx, RefReadGraphIn())
        assert [e.name for e in whole.entities] == ["A", "B"] and whole.relations == [] and whole.notice is None
        assert whole.entities[0].observations == ["A is here"]


async def test_a_graph_over_the_reply_limit_is_cut_at_a_page_and_says_where_to_go_on(db: Database) -> None:
    names = [f"Stone {i:03d}" for i in range(60)]
    text = ["a standing stone of the circle, grey and weathered by centuries of wind and rain"]
    async with call(db, "ref-big") as ctx:
        await ref.create_entities(ctx, _entities(*names, obs=text))
    async with call(db, "ref-big") as ctx:
        first = await ref.read_graph(ctx, RefReadGraphIn())
        shown = len(first.entities)
        assert 0 < shown < 60 and [e.name for e in first.entities] == names[:shown]
        assert first.notice is not None and f"up to {shown} of 60" in first.notice
        rest = await ref.read_graph(ctx, RefReadGraphIn(offset=shown))
        assert rest.entities[0].name == names[shown]
        everything = []
        offset = 0
        while offset < 60:
            page = await ref.read_graph(ctx, RefReadGraphIn(offset=offset))
            everything += [e.name for e in page.entities]
            offset += len(page.entities)
            assert page.entities
        assert everything == names and page.notice is None  # the last part says nothing more
        matches = await ref.search_nodes(ctx, RefSearchNodesIn(query="stone"))
        n = len(matches.entities)
        assert 0 < n < 60 and matches.notice is not None and f"matches up to {n} of 60" in matches.notice
        wide = GraphSettings(reference_reply_tokens=200_000)
    async with call(db, "ref-big", wide) as ctx:
        whole = await ref.read_graph(ctx, RefReadGraphIn())
        assert [e.name for e in whole.entities] == names and whole.notice is None


async def test_search_and_open_nodes_answer_in_the_reference_shape(db: Database) -> None:
    async with call(db, "ref-find") as ctx:
        await ref.create_entities(ctx, _entities("Oak", "Elm", "Rose"))
        await ref.create_relations(
            ctx, RefCreateRelationsIn.model_validate({"relations": _relations(("Oak", "Elm", "shades"))})
        )
        found = await ref.search_nodes(ctx, RefSearchNodesIn(query="oak"))
        assert [e.name for e in found.entities] == ["Oak"] and found.notice is None
        assert [(r.from_entity, r.to_entity) for r in found.relations] == [("Oak", "Elm")]
        every = await ref.search_nodes(ctx, RefSearchNodesIn(query="   "))
        assert [e.name for e in every.entities] == ["Oak", "Elm", "Rose"]  # an empty query reads the graph
        opened = await ref.open_nodes(ctx, RefOpenNodesIn(names=["Rose", "Nobody"]))
        assert [e.name for e in opened.entities] == ["Rose"] and opened.relations == [] and opened.notice is None
