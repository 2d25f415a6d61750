"""The process's parts, built once per server (HTTP) or stdio session by the entry (`app.main`), and
their lifespan: what starts before the first call and stops after the last."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from app.core import migrations
from app.core.config import Settings
from app.core.context import AppState
from app.core.db import connection_budget
from app.core.embeddings.lexical_mover import LexicalMover
from app.core.embeddings.queue import EmbeddingQueue
from app.core.feature import Feature
from app.core.http.callers import Callers
from app.core.http.mcp_adapter import CairnMCPServer
from app.core.pgembedded import EmbeddedPostgres
from app.core.repository import EmbeddingModelRepository
from app.core.toolsets import Catalog

log = logging.getLogger("cairn")


@dataclass
class Bootstrap:
    """What start-up prepared before the app is built."""

    url: str
    pg: EmbeddedPostgres | None
    open_mode: bool


@dataclass
class Assembly:
    """The process's parts, built once per server (HTTP) or stdio session: everything but a transport."""

    settings: Settings
    boot: Bootstrap
    features: list[Feature]
    state: AppState
    queue: EmbeddingQueue
    callers: Callers
    catalog: Catalog
    mcp: CairnMCPServer

    @property
    def names(self) -> list[str]:
        """The enabled features' names."""
        return [f.name for f in self.features]


@asynccontextmanager
async def running(asm: Assembly, **banner: Any) -> AsyncIterator[None]:
    """Start the embedder, the features, the queue workers and the lexical mover for the block; stop
    them, the database and the embedded PostgreSQL after it."""
    state, db = asm.state, asm.state.db
    mover = LexicalMover(db, [i for f in asm.features for i in f.lexical_indexes], asm.settings)
    try:
        await state.embedder.start()
        async with db.transaction() as session:
            await EmbeddingModelRepository(session).register(
                state.embedder.model, state.embedder.provider, state.embedder.dimension
            )
        state.extras["migrations_at_head"] = await migrations.at_head(asm.settings.direct_url(asm.boot.url), asm.names)
        for feature in asm.features:
            if feature.startup is not None:
                await feature.startup(state)
        asm.queue.start()
        mover.start()
        if state.replicas is not None:
            state.replicas.start()
        where = ""
        if "host" in banner and "port" in banner:
            base = asm.settings.public_url or f"http://{banner['host']}:{banner['port']}"
            where = f" at {base}: MCP {base}/mcp, REST {base}/api/v1, docs {base}/docs"
        extra = {**banner, "features": asm.names, "open_mode": asm.boot.open_mode}
        log.info(f"cairn ready{where}", extra={**extra, "db_connections_max": connection_budget(asm.settings)})
        usage = asm.callers.usage
        async with usage.running() if usage is not None else contextlib.nullcontext():
            yield
    finally:
        if state.replicas is not None:
            await state.replicas.stop()
        await asm.queue.stop()
        await mover.stop()
        for slots in (state.jobs, state.streams):
            if slots is not None:
                await slots.close()
        for feature in reversed(asm.features):
            if feature.shutdown is not None:
                await feature.shutdown(state)
        await state.embedder.close()
        await db.dispose()
        if asm.boot.pg is not None:
            asm.boot.pg.stop()
        log.info("cairn stopped")
