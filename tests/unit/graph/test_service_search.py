"""app/graph/service_search.py: its pure parts (treatment, components, the notice that says why nothing
passed and which results wait for their vector), and a search with a real call context (the model
unreachable: words alone) that leaves archived entities and noise out, labels its pending results and
logs its event; a model's calibration is measured before the search's transaction opens."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from sqlalchemy import text

from app.core.config import Settings
from app.core.context import CallContext, Principal
from app.core.db import Database
from app.core.embeddings.calibration import forget
from app.core.embeddings.local import LocalOnnxEmbedder
from app.graph import service, service_search
from app.graph.config import GraphSettings
from app.graph.schemas import (
    CreateEntitiesIn,
    EntityIn,
    OpenNodesIn,
    ProjectIn,
    SearchSemanticIn,
    SearchSemanticOut,
    SemanticHit,
)
from app.graph.scoring import Candidate, Floor
from app.graph.service_common import BASELINE, LIMBIC
from app.graph.service_search import search_semantic
from app.graph.service_stats import graph_stats
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))
S = GraphSettings(semantic_floor=0.3)
SETTINGS = GraphSettings()


def _found(below: list[Candidate], cosine: float | None = 0.592) -> service_search._Candidates:
    floor = Floor(cosine, None if cosine is None else 0.398, 0.2)
    return service_search._Candidates("hybrid", [{}] * len(below), [], set(), floor, below)


def _hit(name: str, pending: bool) -> SemanticHit:
    scores = dict.fromkeys(("limbic_score", "relevance", "cosine_sim", "text_score", "importance", "temporal"), 0.0)
    return SemanticHit(
        name=name,
        entityType="t",
        status="activo",
        observations=[],
        score=0.0,
        rank=1,
        baseline_rank=1,
        cooc_boost=0.0,
        access_count=0,
        embedding="pending" if pending else None,
        matched_by="text",
        **scores,
    )


def test_a_requested_treatment_is_kept_and_auto_follows_the_ratio() -> None:
    assert service_search._treatment("limbic", 0.0) == LIMBIC
    assert service_search._treatment("baseline", 1.0) == BASELINE
    assert service_search._treatment("auto", 1.0) == LIMBIC and service_search._treatment("auto", 0.0) == BASELINE


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


def test_the_notice_says_why_nothing_passed_with_the_figures_and_what_to_change() -> None:
    assert "unavailable" in (service_search._notice(None, [], _found([]), SETTINGS) or "")
    assert service_search._notice([0.1], [], _found([]), SETTINGS) is None  # nothing to rank at all
    below = [
        Candidate(1, "Pasarela de pagos", "Sistema", "activo", 0.563, 0.0, 0, 1.0),
        Candidate(2, "Price Rules", "Component", "activo", 0.116, 0.147, 0, 1.0),
    ]
    notice = service_search._notice([0.1], [], _found(below), SETTINGS) or ""
    assert "No entity passed the relevance floor: 2 candidate(s)" in notice
    assert "best relevance 0.563 (Pasarela de pagos)" in notice  # cosine + text_weight x coverage
    assert "best cosine similarity 0.563, best text coverage 0.147" in notice
    assert (
        "floor of cosine similarity 0.592 (semantic_floor; 0.398 with a query word in the text) or text coverage 0.2 "
        "(min_text_coverage)"
    ) in notice
    assert "pass a lower semantic_floor / min_text_coverage" in notice and "CAIRN_GRAPH_SEMANTIC_FLOOR" in notice
    blind = service_search._notice(None, [], _found(below, cosine=None), SETTINGS) or ""
    assert blind.startswith("The embedding model is unavailable") and "no cosine (the query has no vector)" in blind


def test_the_notice_labels_results_found_by_words_while_their_vectors_are_pending() -> None:
    hits = [_hit("a", pending=True), _hit("b", pending=False), _hit("c", pending=True)]
    notice = service_search._notice([0.1], hits, _found([]), SETTINGS) or ""
    assert notice.startswith("2 result(s) matched by text only while their vectors are pending")
    assert "passed no semantic floor" in notice
    assert service_search._notice([0.1], hits[1:2], _found([]), SETTINGS) is None


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
        out = await searched(ctx, SearchSemanticIn(project="geo", query="river", treatment="baseline", explain=True))
        assert out.engine == "text" and out.treatment == "baseline" and out.event_id > 0
        assert [h.name for h in out.results] == ["River Thames"]  # the archived one and the volcano left out
        hit = out.results[0]
        assert hit.rank == hit.baseline_rank == 1 and hit.cosine_sim == 0.0
        assert hit.text_score is not None and hit.text_score >= S.min_text_coverage
        assert hit.embedding == "pending" and hit.matched_by == "text"  # no vector yet: the words alone
        assert out.notice and "1 result(s) matched by text only while their vectors are pending" in out.notice
        assert hit.observations == ["a river through London"]
        every = await searched(
            ctx, SearchSemanticIn(project="geo", query="river", treatment="limbic", include_archived=True)
        )
        assert {h.name for h in every.results} == {"River Thames", "River Styx"} and every.treatment == "limbic"
        assert (await searched(ctx, SearchSemanticIn(project="geo", query="glacier"))).results == []
        # one shared word of a longer query is no answer, and the reply says why
        long = await searched(ctx, SearchSemanticIn(project="geo", query="the longest river of ice on the volcano"))
        assert long.results == [] and long.notice and "2 candidate(s)" in long.notice  # the archived one aside
        nowhere = await searched(ctx, SearchSemanticIn(project="atlantis", query="river"))
        assert nowhere.results == [] and nowhere.event_id == 0 and nowhere.engine == "none"
    async with call(db) as ctx:
        assert (await graph_stats(ctx, ProjectIn(project="geo"))).search_events == 4  # atlantis logs nothing


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


class _Unmeasured(LocalOnnxEmbedder):
    """The local model under another name and with no declared calibration, so that the first search
    measures it; each batch counts the test database's connections idle in a transaction meanwhile."""

    calibration = None

    def __init__(self, db: Database) -> None:
        super().__init__()
        self.model = "unmeasured-model"  # no vectors stored under this name: the search runs on words
        self.probe = Database(db.url, Settings())
        self.held: list[int] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if len(texts) > 1:  # the calibration's batch (a query is embedded alone)
            async with self.probe.transaction() as session:
                held = await session.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND state LIKE 'idle in transaction%'"
                    )
                )
            self.held.append(int(held or 0))
        return await super().embed(texts)


async def test_a_calibration_is_measured_before_the_search_opens_a_transaction(db: Database) -> None:
    lake = EntityIn(name="Lake Garda", entityType="place", observations=["the largest lake in Italy"])
    async with call(db) as ctx:
        await service.create_entities(ctx, CreateEntitiesIn(project="garda", entities=[lake]))
    model = _Unmeasured(db)
    try:
        async with service_call(db, WRITER, embedder=model) as ctx:
            out = await searched(ctx, SearchSemanticIn(project="garda", query="lake"))
        assert [h.name for h in out.results] == ["Lake Garda"] and out.results[0].matched_by == "text"
        assert model.held == [0]  # measured once, with no transaction of the search open
    finally:
        forget()
        await model.probe.dispose()
        await model.close()
