"""The optional background backfill runner (seed 004), started by `cairn serve` through the
feature's `startup` hook when CAIRN_BACKFILL_ENABLED: on start-up (CAIRN_BACKFILL_RUN_ON_STARTUP) and
every CAIRN_BACKFILL_INTERVAL, queue up to `max_per_run` memories missing a vector of the active
model for the embedding queue's workers. Failures are logged, never raised."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.core.context import AppState, feature_settings_of
from app.core.db import Database
from app.memory.config import MemorySettings
from app.memory.service_backfill import BackfillReport, backfill

log = logging.getLogger("cairn.memory.backfill")


class BackfillRunner:
    """Periodic best-effort backfill, configured by the CAIRN_BACKFILL_* settings."""

    def __init__(self, db: Database, model: str, settings: MemorySettings) -> None:
        self.db, self.model, self.settings = db, model, settings
        self._task: asyncio.Task[None] | None = None
        self.runs = 0

    async def run_once(self) -> BackfillReport | None:
        """One bounded pass in its own transaction; None when it failed (logged)."""
        s = self.settings
        try:
            async with self.db.transaction() as session:
                report = await backfill(
                    session,
                    self.model,
                    project_id=None,
                    limit=s.backfill_max_per_run,
                    batch_size=s.backfill_batch_size,
                    include_archived=s.backfill_include_archived,
                )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("background backfill pass failed", exc_info=True)
            return None
        finally:
            self.runs += 1
        log.info(
            "background backfill",
            extra={
                "model": report.model,
                "scanned": report.scanned,
                "queued": report.queued,
            },
        )
        return report

    async def run_forever(self) -> None:
        """Run on start-up when configured, then every interval (returns at once when neither applies)."""
        if not self.settings.backfill_enabled:
            log.info("background backfill disabled (CAIRN_BACKFILL_ENABLED=false)")
            return
        if self.settings.backfill_run_on_startup:
            await self.run_once()
        interval = self.settings.interval_seconds()
        while interval:
            await asyncio.sleep(interval)
            await self.run_once()

    def start(self) -> None:
        """Start the runner as a task of the running loop (never blocks start-up)."""
        if self._task is None and self.settings.backfill_enabled:
            self._task = asyncio.get_running_loop().create_task(self.run_forever(), name="cairn-memory-backfill")

    async def stop(self) -> None:
        """Cancel the runner and wait for it."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


async def startup(state: AppState) -> None:
    """Start the background backfill runner (CAIRN_BACKFILL_ENABLED)."""
    runner = BackfillRunner(state.db, state.embedder.model, feature_settings_of(state.feature_settings, MemorySettings))
    runner.start()
    state.extras["memory_backfill"] = runner


async def shutdown(state: AppState) -> None:
    """Stop the background backfill runner."""
    runner = state.extras.pop("memory_backfill", None)
    if isinstance(runner, BackfillRunner):
        await runner.stop()
