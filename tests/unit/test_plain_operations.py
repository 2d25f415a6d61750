"""Operations declared `plain` (`Operation.plain`) run their whole transaction on the driver: through
the executor, with every feature, each runs its statements on `DriverSession` and none through
SQLAlchemy, commits what it wrote with its audit row (a read, such as `execute_query` recording its
result, without one), and a failing call writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from app.core.config import Settings
from app.core.context import AppState, Principal
from app.core.db import Database
from app.core.embeddings.local import LocalOnnxEmbedder
from app.core.embeddings.queue import EmbeddingQueue
from app.core.errors import NotFound
from app.core.executor import run_operation
from app.core.feature import build_registry, build_settings
from app.core.operations import ops as core_ops
from app.core.toolsets import Catalog
from app.features import FEATURES
from tests.support.databases import database_fixture
from tests.support.statements import statement_paths

WRITER = Principal(key_id="w", name="writer", scopes=frozenset({"admin"}))
ENTITIES = [{"name": f"P{i}", "entityType": "person", "observations": [f"fact {i}"]} for i in range(3)]
RELATIONS = [{"from": "P0", "to": "P1", "relationType": "knows"}]
# Arguments of each plain operation, in the order they run (relations need the entities): a newly
# declared plain operation fails the first assertion until it is listed here.
CALLS: dict[str, dict[str, Any]] = {
    "create_entities": {"entities": ENTITIES, "project": "plain-a"},
    "create_relations": {"relations": RELATIONS, "project": "plain-a"},
    "reference_create_entities": {"entities": ENTITIES, "project": "plain-b"},
    "reference_create_relations": {"relations": RELATIONS, "project": "plain-b"},
}
# Plain operations that read (no audit row), each with a statement it must run on the driver.
READS: dict[str, tuple[dict[str, Any], str]] = {
    "execute_query": ({"query": "SELECT 42 AS n", "files": [], "project": "plain-a"}, "INSERT INTO dataset_queries"),
}

db = database_fixture([f.name for f in FEATURES])


@pytest.fixture(scope="module")
def state(db: Database) -> AppState:
    registry = build_registry(core_ops, FEATURES)
    made = AppState(
        Settings(), db, LocalOnnxEmbedder(), registry, features=[f.name for f in FEATURES],
        feature_settings=build_settings(FEATURES),
    )  # fmt: skip
    made.queue = EmbeddingQueue(db, made.embedder, [t for f in FEATURES for t in f.embedding_targets], made.settings)
    made.catalog = Catalog(registry, [])
    made.extras["migrations_at_head"] = True
    return made


async def test_plain_operations_run_every_statement_on_the_driver(
    state: AppState, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = {op.name: op for op in state.registry.operations if op.plain}
    assert sorted(plain) == sorted([*CALLS, *READS])
    with statement_paths(state.db, monkeypatch) as paths:
        for name, args in CALLS.items():
            paths.clear()
            out = await run_operation(state, plain[name], args, WRITER, transport="test", request_id=name)
            assert isinstance(out, plain[name].output_model)
            assert paths.through_sqlalchemy == [], (name, paths.through_sqlalchemy)
            assert any("INSERT INTO audit_log" in s for s in paths.on_driver), (name, paths.on_driver)
        for name, (args, statement) in READS.items():
            paths.clear()
            out = await run_operation(state, plain[name], args, WRITER, transport="test", request_id=name)
            assert isinstance(out, plain[name].output_model)
            assert paths.through_sqlalchemy == [], (name, paths.through_sqlalchemy)
            assert any(statement in s for s in paths.on_driver), (name, paths.on_driver)
    assert await _count(state, "SELECT count(*) FROM graph_entities") == 6
    assert await _count(state, "SELECT count(*) FROM audit_log WHERE request_id = ANY(:r)", r=list(CALLS)) == 4
    relations = "SELECT count(*) FROM graph_relations"
    assert await _count(state, relations) == 2
    broken = {"relations": [*RELATIONS, {"from": "P2", "to": "Nobody", "relationType": "knows"}], "project": "plain-a"}
    with pytest.raises(NotFound):  # the first relation is skipped as existing; nothing else is written
        await run_operation(state, plain["create_relations"], broken, WRITER, transport="test", request_id="bad")
    broken["relations"] = [{"from": "P2", "to": "P0", "relationType": "knows"}, broken["relations"][1]]
    with pytest.raises(NotFound):
        await run_operation(state, plain["create_relations"], broken, WRITER, transport="test", request_id="bad")
    assert await _count(state, relations) == 2


async def _count(state: AppState, sql: str, **params: Any) -> int:
    async with state.db.transaction() as session:
        return int((await session.execute(text(sql), params)).scalar_one())
