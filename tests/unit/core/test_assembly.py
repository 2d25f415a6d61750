"""app/core/assembly.py: the parts `app.main.assemble` builds for a migrated database of their own, run
for a block by `running`: the embedder started and its model recorded, migrations checked, the features
started in order and the queue's workers running, a banner naming where the server listens; after the
block (also when a feature's start fails) the queue, the features, the embedder and the database stop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from app.core.assembly import Assembly, running
from app.core.config import Settings
from app.core.feature import Feature
from app.core.repository import EmbeddingModelRepository
from app.main import assemble
from tests.support.databases import migrated_url
from tests.support.server import PgCluster


def parts(pg: PgCluster, **settings: object) -> tuple[Assembly, list[str]]:
    """The parts of a server with the memory feature, its hooks recording their calls."""
    asm = assemble(Settings(database_url=migrated_url(pg, ["memory"]), features=["memory"], **settings))  # type: ignore[arg-type]
    calls: list[str] = []
    (memory,) = asm.features
    assert memory.startup is not None and memory.shutdown is not None
    start, stop = memory.startup, memory.shutdown

    async def up(state: object) -> None:
        calls.append("up")
        await start(asm.state)

    async def down(state: object) -> None:
        calls.append("down")
        await stop(asm.state)

    asm.features = [dataclasses.replace(memory, startup=up, shutdown=down)]
    return asm, calls


def queue_tasks() -> list[str]:
    return sorted(t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("cairn-embedding-queue"))


def test_the_parts_name_their_features(pg: PgCluster) -> None:
    asm, _ = parts(pg)
    try:
        assert asm.names == ["memory"] and asm.boot.pg is None and asm.boot.open_mode
        assert asm.state.queue is asm.queue and asm.state.catalog is asm.catalog
    finally:
        asyncio.run(asm.state.db.dispose())


async def test_the_parts_run_for_the_block_and_stop_after_it(pg: PgCluster, caplog: pytest.LogCaptureFixture) -> None:
    asm, calls = parts(pg, embedding_queue_workers=2, public_url="https://cairn.example")
    cairn_log = logging.getLogger("cairn")  # configured by the assembly: it does not propagate to the root
    cairn_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="cairn")
    try:
        await run_the_block(asm, calls)
    finally:
        cairn_log.removeHandler(caplog.handler)
    assert calls == ["up", "down"] and queue_tasks() == []
    ready = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cairn ready")]
    assert ready == [
        "cairn ready at https://cairn.example: MCP https://cairn.example/mcp, REST https://cairn.example/api/v1, "
        "docs https://cairn.example/docs"
    ]
    assert any(r.getMessage() == "cairn stopped" for r in caplog.records)


async def run_the_block(asm: Assembly, calls: list[str]) -> None:
    state = asm.state
    async with running(asm, host="127.0.0.1", port=8123):
        assert calls == ["up"] and state.extras["migrations_at_head"] is True
        assert queue_tasks() == ["cairn-embedding-queue-0", "cairn-embedding-queue-1"]
        async with state.db.transaction() as session:
            models = await EmbeddingModelRepository(session).list()
        assert [(m.name, m.dimension) for m in models] == [(state.embedder.model, state.embedder.dimension)]


async def test_a_failed_start_still_stops_every_part(pg: PgCluster) -> None:
    asm, calls = parts(pg)
    (memory,) = asm.features

    async def refuse(state: object) -> None:
        calls.append("refused")
        raise RuntimeError("cannot start")

    asm.features = [dataclasses.replace(memory, startup=refuse), *asm.features[1:]]
    with pytest.raises(RuntimeError, match="cannot start"):
        async with running(asm):
            pytest.fail("the block must not run")
    assert calls == ["refused", "down"] and queue_tasks() == []


def test_a_feature_without_hooks_is_skipped(pg: PgCluster) -> None:
    asm, calls = parts(pg)
    asm.features = [dataclasses.replace(asm.features[0], startup=None, shutdown=None)]
    assert isinstance(asm.features[0], Feature)

    async def scenario() -> None:
        async with running(asm):
            assert asm.state.extras["migrations_at_head"] is True

    asyncio.run(scenario())
    assert calls == []
