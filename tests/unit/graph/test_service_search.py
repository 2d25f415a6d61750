"""app/graph/service_search.py: its pure parts (treatment, what counts as an answer, components, the
notice), and a search with a real call context (the model unreachable: words alone) that leaves
archived entities and noise out and logs its event."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from sqlalchemy import text

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.graph import service, service_search
from app.graph.config import GraphSettings
from app.graph.schemas import CreateEntitiesIn, EntityIn, OpenNodesIn, ProjectIn, SearchSemanticIn, SearchSemanticOut
from app.graph.scoring import Candidate
from app.graph.service_common import BASELINE, LIMBIC
from app.graph.service_search import search_semantic
from app.graph.service_stats import graph_stats
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
S = GraphSettings(semantic_floor=0.3)
SETTINGS = GraphSettings()


def _found(inputs: int) -> service_search._Candidates:
    return service_search._Candidates("hybrid", [{}] * inputs, [], set())


def test_a_requested_treatment_is_kept_and_auto_follows_the_ratio() -> None:
    assert service_search._treatment("limbic", 0.0) == LIMBIC
    assert service_search._treatment("baseline", 1.0) == BASELINE
    assert service_search._treatment("auto", 1.0) == LIMBIC and service_search._treatment("auto", 0.0) == BASELINE


def test_an_answer_needs_a_query_word_or_a_close_enough_vector() -> None:
    floor = SETTINGS.semantic_floor
    assert service_search._an_answer(0.0, 0.1, True, SETTINGS)
    assert service_search._an_answer(floor, 0.0, True, SETTINGS)
    assert not service_search._an_answer(floor - 0.01, 0.0, True, SETTINGS)
    assert not service_search._an_answer(1.0, 0.0, False, SETTINGS)  # no query vector: the cosine is no signal


def test_components_are_rounded_for_the_reply_and_the_log() -> None:
    c = Candidate(1, "n", "t", "active", 0.12345678, 0.5, 3, 1.0, relevance=0.3333333333, limbic_score=0.7777777777)
    comp = service_search._components(c)
    assert comp["cosine_sim"] == 0.123457 and comp["relevance"] == 0.333333 and comp["limbic_score"] == 0.777778
    assert set(comp) == {
        "limbic_score",
        "relevance",
        "cosine_sim",
        "text_score",
        "importance",
        "temporal",
        "cooc_boost",
    }


def test_the_notice_says_why_nothing_or_text_alone_was_used() -> None:
    assert "unavailable" in (service_search._notice(None, [], _found(0), SETTINGS) or "")
    assert service_search._notice([0.1], [], _found(0), SETTINGS) is None  # nothing to rank at all
    assert "close enough" in (service_search._notice([0.1], [], _found(2), SETTINGS) or "")


db = database_fixture(["graph"])


def call(db: Database) -> AbstractAsyncContextManager[CallContext]:
    # Nothing answers: the search runs on words alone
    return service_call(db, WRITER, embedder=unreachable_embedder(), feature_settings={GraphSettings: S})


async def searched(ctx: CallContext, args: SearchSemanticIn) -> SearchSemanticOut:
    """`search_semantic` with its write part (the search event), which the executor runs after it."""
    out = await search_semantic(ctx, args)
    for step in ctx.primary_steps:
        out = await step(ctx.session, out)
    ctx.primary_steps.clear()
    return out


async def test_a_search_on_words_leaves_out_noise_and_archived_entities(db: Database) -> None:
    entities = [
        EntityIn(name="River Thames", entityType="place", observations=["a river through London"]),
        EntityIn(name="River Styx", entityType="myth", observations=["a river of the underworld"], status="archivado"),
        EntityIn(name="Mount Fuji", entityType="place", observations=["a volcano"]),
    ]
    async with call(db) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project="geo", entities=entities))
    async with call(db) as ctx:
        out = await searched(ctx, SearchSemanticIn(project="geo", query="river", treatment="baseline"))
        assert out.engine == "text" and out.treatment == "baseline" and out.event_id > 0
        assert [h.name for h in out.results] == ["River Thames"]  # the archived one and the volcano left out
        hit = out.results[0]
        assert hit.rank == hit.baseline_rank == 1 and hit.cosine_sim == 0.0 and hit.text_score > 0
        assert hit.observations == ["a river through London"]
        every = await searched(
            ctx, SearchSemanticIn(project="geo", query="river", treatment="limbic", include_archived=True)
        )
        assert {h.name for h in every.results} == {"River Thames", "River Styx"} and every.treatment == "limbic"
        assert (await searched(ctx, SearchSemanticIn(project="geo", query="glacier"))).results == []
        nowhere = await searched(ctx, SearchSemanticIn(project="atlantis", query="river"))
        assert nowhere.results == [] and nowhere.event_id == 0 and nowhere.engine == "none"
    async with call(db) as ctx:
        assert (await graph_stats(ctx, ProjectIn(project="geo"))).search_events == 3  # atlantis logs nothing


async def test_opening_a_result_credits_the_search_in_the_write_part_of_the_call(db: Database) -> None:
    lake = EntityIn(name="Lake Como", entityType="place", observations=["a lake in Italy"])
    async with call(db) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project="lakes", entities=[lake]))
    async with call(db) as ctx:
        event = (await searched(ctx, SearchSemanticIn(project="lakes", query="lake"))).event_id
    credited = text("SELECT count(*) FROM graph_implicit_feedback WHERE event_id = :e")
    async with call(db) as ctx:
        opened = await service.open_nodes(ctx, OpenNodesIn(project="lakes", names=["Lake Como"]))
        # the read itself writes nothing (a replica may serve it); its write part runs on the primary
        assert await ctx.session.scalar(credited, {"e": event}) == 0
        assert len(ctx.primary_steps) == 1
        assert await ctx.primary_steps[0](ctx.session, opened) is opened
        assert await ctx.session.scalar(credited, {"e": event}) == 1
