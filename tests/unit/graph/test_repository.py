"""app/graph/repository.py on a database of its own: its statements and named rows. Entities inserted
in the caller's order with their observations (existing names left alone), observations added once per
current text, searchable text rebuilt, relations inserted by name and revived once ended, relations per
source entity cut, pages and substring matches with their totals, the summary's counts, exports."""

from __future__ import annotations

import uuid

from app.core.db import Database
from app.core.repository import ProjectRepository
from app.graph.repository import GraphRepository, like_pattern, snapshot_text
from tests.support.databases import database_fixture


def test_like_pattern_matches_a_literal_lower_cased_substring() -> None:
    assert like_pattern("Ab") == "%ab%"
    assert like_pattern("50%_a\\b") == "%50\\%\\_a\\\\b%"


def test_the_snapshot_text_is_name_type_and_observations() -> None:
    assert snapshot_text("Ada", "person", "math | notes") == "Ada (person): math | notes"
    assert snapshot_text("Ada", "person", "") == "Ada (person)"
    assert GraphRepository.obs_text(["a", "b"]) == "a | b" and GraphRepository.obs_text([]) == ""


db = database_fixture(["graph"])


async def _project(repo: GraphRepository, name: str) -> uuid.UUID:
    return await ProjectRepository(repo.session).ensure_id(name)


async def test_entities_are_inserted_in_order_and_existing_names_left_alone(db: Database) -> None:
    async with db.transaction() as session:
        repo = GraphRepository(session)
        pid = await _project(repo, "ents")
        made = await repo.insert_entities(pid, [("B", "t", "activo"), ("A", "t", "activo")], [["b1", "b2"], ["a1"]])
        assert [r.name for r in made] == ["B", "A"] and made[0].id < made[1].id
        again = await repo.insert_entities(pid, [("A", "other", "archivado"), ("C", "u", "activo")], [["new"], []])
        assert [(r.name, r.entity_type) for r in again] == [("C", "u")]
        a = (await repo.get_entities(pid, ["A", "A", "missing"], lock=True))[0]
        assert (a.entity_type, a.status) == ("t", "activo")  # untouched by the second insert
        obs = await repo.current_observations([made[0].id, a.id], 10)
        assert obs[made[0].id] == (["b1", "b2"], 2) and obs[a.id] == (["a1"], 1)
        assert await repo.insert_entities(pid, [], []) == []
        other = await _project(repo, "ents-elsewhere")
        assert await repo.get_entities(other, ["A"]) == []
        assert [r.name for r in await repo.get_entities(pid, ["C", "B", "A"])] == ["B", "A", "C"]  # id order


async def test_observations_added_once_superseded_and_counted(db: Database) -> None:
    async with db.transaction() as session:
        repo = GraphRepository(session)
        pid = await _project(repo, "obs")
        [e] = await repo.insert_entities(pid, [("E", "t", "activo")], [["one"]])
        added = await repo.insert_observations([(e.id, "two"), (e.id, "one"), (e.id, "three")], "risk")
        assert [c for _, _, c in added] == ["two", "three"] and all(eid == e.id for _, eid, _ in added)
        first = await repo.observation(e.id, obs_id=None, content="one")
        assert first is not None and first["kind"] == "generic"
        await repo.mark_superseded([first["id"]])
        assert await repo.observation(e.id, obs_id=None, content="one") is None
        assert (await repo.observation(e.id, obs_id=first["id"], content=None))["superseded_at"] is not None
        assert [
            c for _, _, c in await repo.insert_observations([(e.id, "one")], "generic", supersedes=first["id"])
        ] == ["one"]  # the text is current again, as a new row
        assert await repo.delete_observations(e.id, ["two", "absent"]) == 1
        texts, n = (await repo.current_observations([e.id], 1))[e.id]
        assert texts == ["three"] and n == 2
        assert (await repo.current_observations([e.id], 0))[e.id] == ([], 2)
        assert [r["content"] for r in await repo.history(e.id, 10)] == ["one", "three", "one"]
        assert [(i, s) for i, s in await repo.refresh_text([e.id, e.id])] == [(e.id, "E (t): three | one")]
        assert await repo.refresh_text([]) == [] and await repo.current_observations([], 3) == {}


async def test_relations_by_name_revive_ended_ones_and_are_cut_per_source(db: Database) -> None:
    async with db.transaction() as session:
        repo = GraphRepository(session)
        pid = await _project(repo, "rels")
        rows = await repo.insert_entities(pid, [(n, "t", "activo") for n in "ABCD"], [[], [], [], []])
        ids = {r.name: r.id for r in rows}
        names, made = await repo.insert_relations_by_name(
            pid, [("A", "B", "x", "ctx"), ("A", "C", "x", None), ("A", "Z", "x", None), ("D", "A", "y", None)]
        )
        assert names == {"A", "B", "C", "D"} and sorted(made) == [("A", "B", "x"), ("A", "C", "x"), ("D", "A", "y")]
        assert (await repo.insert_relations_by_name(pid, [("A", "B", "x", None)]))[1] == []  # exists: not new
        ended = await repo.end_relation(ids["A"], ids["B"], "x")
        assert ended is not None and ended["active"] is False and ended["context"] == "ctx"
        assert await repo.end_relation(ids["B"], ids["A"], "x") is None
        assert await repo.count_relations(pid) == 2 and await repo.count_relations(pid, "t") == 2
        touching = await repo.relations_touching([ids["A"]])
        assert [(r["fname"], r["tname"]) for r in touching] == [("A", "C"), ("D", "A")]
        with_ended = await repo.relations_touching([ids["A"]], only_from=True, include_ended=True)
        assert [(r["tname"], r["active"]) for r in with_ended] == [("B", False), ("C", True)]
        assert len(await repo.relations_touching([ids["A"]], only_from=True, include_ended=True, per_from=0)) == 1
        _, revived = await repo.insert_relations_by_name(pid, [("A", "B", "x", None)])
        assert revived == [("A", "B", "x")] and await repo.count_relations(pid) == 3
        assert (await repo.relations_touching([ids["B"]]))[0]["context"] == "ctx"  # kept on revival
        assert await repo.delete_relations([(ids["A"], ids["B"], "x"), (ids["B"], ids["C"], "x")]) == 1
        assert await repo.delete_relations([]) == 0 and await repo.relations_touching([]) == []


async def test_pages_substring_matches_summary_and_exports(db: Database) -> None:
    async with db.transaction() as session:
        repo = GraphRepository(session)
        pid = await _project(repo, "list")
        rows = await repo.insert_entities(
            pid,
            [("Oak", "tree", "activo"), ("Elm", "tree", "archivado"), ("Rose", "flower", "activo")],
            [["tall 100%"], ["old"], ["red"]],
        )
        await repo.insert_relations_by_name(pid, [("Oak", "Elm", "near", None), ("Rose", "Oak", "under", None)])
        page, total = await repo.page(pid, 1, 1, None)
        assert [r.name for r in page] == ["Elm"] and total == 3
        trees, n = await repo.page(pid, 0, 10, "tree")
        assert [r.name for r in trees] == ["Oak", "Elm"] and n == 2
        found, n = await repo.substring_search(pid, "100%", 0, 10)
        assert [r.name for r in found] == ["Oak"] and n == 1
        beyond, n = await repo.substring_search(pid, "TREE", 5, 10)
        assert beyond == [] and n == 2  # the total still counted past the page
        summary = await repo.summary(pid, top=2)
        assert (summary["entities"], summary["observations"], summary["relations"]) == (3, 3, 2)
        assert summary["by_type"] == [("tree", 2), ("flower", 1)]
        assert summary["by_status"] == [("activo", 2), ("archivado", 1)]
        assert summary["top"] == [("Oak", "tree", 0, 1), ("Elm", "tree", 0, 1)]
        assert await repo.embedded_count(pid, "any-model") == 0
        assert [r.name for r in await repo.export_rows(pid, rows[0].id, 10)] == ["Elm", "Rose"]
        await repo.set_status(rows[0].id, "archivado")
        assert (await repo.entity_info(rows[0].id))["status"] == "archivado"
        assert await repo.delete_entities(pid, ["Oak", "Nope"]) == ["Oak"]
        assert await repo.count_relations(pid) == 0  # both relations touched Oak: gone with it
