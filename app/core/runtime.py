"""Running Cairn outside a request: the database (configured or embedded), the embedder, and a
call context for command-line work.

The server entry (`app/main.py`) and every `cairn` sub-command use these, so feature CLIs depend on
the core only. A `Runtime` is built once by the `cairn` entry from the settings and the enabled
features and handed to each command as `args.runtime`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic_settings import BaseSettings

from app.core import migrations, terminal
from app.core.config import Settings
from app.core.context import OPEN_PRINCIPAL, AppState, CallContext, feature_settings_of
from app.core.db import Database
from app.core.embeddings.calls import QueuedVectors
from app.core.embeddings.provider import EmbeddingProvider
from app.core.embeddings.providers import build_embedder
from app.core.embeddings.queue import EmbeddingQueue
from app.core.embeddings.targets import EmbeddingTarget
from app.core.pgembedded import start_embedded
from app.core.registry import Registry

T = TypeVar("T")
S = TypeVar("S", bound=BaseSettings)


def make_embedder(settings: Settings) -> EmbeddingProvider:
    """The configured embedding provider (the local model loads when started)."""
    return build_embedder(
        settings.embedding_provider,
        model=settings.embedding_model,
        dimension=settings.embedding_dimension,
        base_url=settings.embedding_base_url,
        api_key=settings.embedding_api_key,
        model_path=settings.embedding_model_path,
        tokenizer_path=settings.embedding_tokenizer_path,
        workers=settings.embedding_workers,
        max_batch=settings.embedding_max_batch,
        max_wait_ms=settings.embedding_max_wait_ms,
        max_length=settings.embedding_max_length,
        timeout=settings.embedding_timeout,
        background_nice=settings.embedding_background_nice,
    )


def run_blocking(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine function to completion on a private event loop in a worker thread (safe
    whether or not the caller already runs a loop)."""
    box: dict[str, Any] = {}

    async def main() -> T:
        return await fn()

    def target() -> None:
        try:
            box["value"] = asyncio.run(main())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="cairn-blocking")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


@dataclass
class Runtime:
    """Settings plus the names of the enabled features, for work outside the server."""

    settings: Settings
    features: list[str]
    feature_settings: dict[type[BaseSettings], BaseSettings] = field(default_factory=dict)
    embedding_targets: list[EmbeddingTarget] = field(default_factory=list)

    def settings_of(self, cls: type[S]) -> S:
        """A feature's settings (as the server would read them)."""
        return feature_settings_of(self.feature_settings, cls)

    @contextmanager
    def database_url(self, migrate: bool = True) -> Iterator[str]:
        """The database URL: the configured one, or the embedded cluster (stopped on exit); the
        enabled features' schema is upgraded first unless `migrate` is false."""
        pg = None
        url = self.settings.database_url
        if not url:
            pg = start_embedded(self.settings.data_dir)
            url = pg.url()
        try:
            if migrate:
                migrations.upgrade(self.settings.direct_url(url), self.features)
            yield url
        finally:
            if pg is not None:
                pg.stop()

    def run(self, fn: Callable[[Database], Awaitable[T]], *, migrate: bool = True) -> T:
        """Open the database (see `database_url`), run `fn(db)` on a fresh event loop, close it."""
        with self.database_url(migrate=migrate) as url:

            async def main() -> T:
                db = Database(url, self.settings)
                try:
                    return await fn(db)
                finally:
                    await db.dispose()

            return asyncio.run(main())

    @asynccontextmanager
    async def embedder(self) -> AsyncIterator[EmbeddingProvider]:
        """The configured embedder, started for the block and closed after."""
        embedder = make_embedder(self.settings)
        await embedder.start()
        try:
            yield embedder
        finally:
            await embedder.close()

    def queue(self, db: Database, embedder: EmbeddingProvider) -> EmbeddingQueue:
        """The embedding queue of the enabled features, for a command to drain (no background workers)."""
        return EmbeddingQueue(db, embedder, self.embedding_targets, self.settings)

    def app_state(self, db: Database, embedder: EmbeddingProvider) -> AppState:
        """Process state for command-line work (no registry, no limits)."""
        return AppState(
            settings=self.settings,
            db=db,
            embedder=embedder,
            registry=Registry(),
            features=self.features,
            feature_settings=self.feature_settings,
            queue=self.queue(db, embedder),
        )

    @asynccontextmanager
    async def call_context(self, db: Database, embedder: EmbeddingProvider) -> AsyncIterator[CallContext]:
        """An admin call context inside one transaction (committed when the block succeeds); the
        vectors it queued are made before the block returns, as a command's user expects."""
        state = self.app_state(db, embedder)
        async with db.transaction() as session:
            ctx = CallContext(session=session, principal=OPEN_PRINCIPAL, app=state, request_id="cli", transport="cli")
            yield ctx
        queued = QueuedVectors.find(ctx)
        if queued is not None and queued.ids and state.queue is not None:
            await drain_with_progress(state.queue, len(queued.ids), f"embed {embedder.model}")


async def drain_with_progress(queue: EmbeddingQueue, queued: int, label: str, timeout: float = 24 * 3600) -> None:
    """Make the queued vectors (the queue's whole depth) under a progress bar of `label`: a command's
    user would otherwise wait in silence while thousands of texts are embedded after its own bar."""
    deadline = time.monotonic() + timeout
    depth = (await queue.stats()).depth
    with terminal.progress(max(queued, depth), label) as bar:
        while depth and time.monotonic() < deadline:
            stats = await queue.drain(timeout=min(2.0, max(0.0, deadline - time.monotonic())))
            bar.advance(max(0, depth - stats.depth))
            depth = stats.depth
