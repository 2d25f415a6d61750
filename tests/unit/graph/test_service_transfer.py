"""app/graph/service_transfer.py: the reference server's JSONL read line by line (bad lines counted,
one name's entries merged), imported into a project with a real call context (existing entities gain
the new observations, dangling relations skipped), and exported back."""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager

from app.core.context import CallContext, Principal
from app.core.db import Database
from app.graph.service_transfer import ImportReport, export_graph, import_graph, parse
from tests.support.calls import service_call, unreachable_embedder
from tests.support.databases import database_fixture

WRITER = Principal(key_id="k1", name="writer", scopes=frozenset({"write"}))


def _line(**item: object) -> str:
    return json.dumps(item)


def test_parse_counts_bad_lines_and_merges_one_names_entries() -> None:
    report = ImportReport()
    lines = [
        _line(type="entity", name="Ada", entityType="person", observations=["a", "b"]),
        "",  # blank lines are skipped silently
        "{not json",
        _line(type="entity", name="Ada", observations=["b", "c"]),
        _line(type="pet", name="Rex"),
        _line(type="relation", **{"from": "Ada", "to": "Engine", "relationType": "built"}),
        _line(type="entity", entityType="nameless"),
        "[1, 2]",
    ]
    entities, relations = parse(lines, report)
    assert [(e.name, e.observations) for e in entities] == [("Ada", ["a", "b", "c"])]
    assert [(r.from_entity, r.to_entity, r.relationType) for r in relations] == [("Ada", "Engine", "built")]
    assert report.invalid_lines == [3, 5, 7, 8]


def test_the_report_names_at_most_twenty_bad_lines() -> None:
    report = ImportReport(invalid_lines=list(range(1, 31)))
    summary = report.as_dict()
    assert summary["invalid_lines"] == list(range(1, 21)) and summary["invalid_count"] == 30


db = database_fixture(["graph"])


def call(db: Database) -> AbstractAsyncContextManager[CallContext]:
    # Vectors are queued, never made: not what is tested here
    return service_call(db, WRITER, embedder=unreachable_embedder())


async def test_an_import_merges_into_what_exists_and_skips_dangling_relations(db: Database) -> None:
    first = [
        _line(type="entity", name="Ada", entityType="person", observations=["wrote notes"]),
        _line(type="entity", name="Engine", entityType="machine", observations=[]),
    ]
    second = [
        _line(type="entity", name="Ada", entityType="person", observations=["wrote notes", "met Babbage"]),
        _line(type="entity", name="Babbage", entityType="person", observations=["designed it"]),
        _line(type="relation", **{"from": "Ada", "to": "Engine", "relationType": "programmed"}),
        _line(type="relation", **{"from": "Babbage", "to": "Engine", "relationType": "designed"}),
        _line(type="relation", **{"from": "Ada", "to": "Nobody", "relationType": "knew"}),
        "oops",
    ]
    seen: list[int] = []
    async with call(db) as ctx:
        one = await import_graph(ctx, first, "lab")
        two = await import_graph(ctx, second, "lab", progress=seen.append)
    assert (one.entities_created, one.observations_added) == (2, 1)
    assert (two.entities_created, two.entities_merged, two.observations_added) == (1, 1, 2)
    assert (two.relations_created, two.relations_existing, two.relations_dangling) == (2, 0, 1)
    assert two.invalid_lines == [6] and sum(seen) == 2 + 3  # two entities, then three relations
    async with call(db) as ctx:
        again = await import_graph(ctx, second[2:3], "lab")
        assert (again.relations_created, again.relations_existing) == (0, 1)
        lines = [json.loads(line) for line in await export_graph(ctx, "lab")]
        assert list(await export_graph(ctx, "no-such-project")) == []
    entities = {e["name"]: e["observations"] for e in lines if e["type"] == "entity"}
    assert entities == {"Ada": ["wrote notes", "met Babbage"], "Engine": [], "Babbage": ["designed it"]}
    kinds = [line["type"] for line in lines]
    assert kinds == sorted(kinds, key=lambda k: k != "entity")  # entities first, then relations
    relations = {(r["from"], r["relationType"], r["to"]) for r in lines if r["type"] == "relation"}
    assert relations == {("Ada", "programmed", "Engine"), ("Babbage", "designed", "Engine")}
