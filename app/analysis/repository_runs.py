"""The SQL of act runs (`analysis_act_runs`, analysis_0003_act_runs): one row per live analysis_act."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import RowMapping

from app.core.repository import Repository

LIVE = "project_id = :pid AND expires_at > now()"
COLUMNS = (
    'id, analysis_id, model, action, "where", attributes, state, key_id, key_name, transport, total, succeeded, '
    "failed, unknown, not_attempted, already_done, deadline_reached, cardinality(failed_ids) AS failed_ids_total, "
    "cardinality(unknown_ids) AS unknown_ids_total, errors, started_at, finished_at"
)


@dataclass
class RunRecord:
    """What one live act did and how it went, as stored."""

    analysis_id: str
    model: str
    action: str
    where: dict[str, Any] | None
    attributes: dict[str, Any] | None
    state: str  # finished, or interrupted (the call did not complete: cancelled or failed)
    key_id: str | None
    key_name: str
    transport: str
    started_at: datetime
    counts: dict[str, int] = field(default_factory=dict)  # total, succeeded, failed, unknown, not_attempted...
    deadline_reached: bool = False
    failed_ids: list[str] = field(default_factory=list)
    unknown_ids: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)  # the first failures with status and message


class ActRunRepository(Repository):
    """Act runs of a project's sessions."""

    async def insert(self, pid: uuid.UUID, run: RunRecord, retention_seconds: float) -> int:
        """Store a run; returns its id."""
        c = run.counts
        found = await self.scalar(
            'INSERT INTO analysis_act_runs (project_id, analysis_id, model, action, "where", attributes, state, '
            "key_id, key_name, transport, total, succeeded, failed, unknown, not_attempted, already_done, "
            "deadline_reached, failed_ids, unknown_ids, errors, started_at, expires_at) VALUES (:pid, :aid, "
            ":model, :action, CAST(:where AS jsonb), CAST(:attributes AS jsonb), :state, :key_id, :key_name, "
            ":transport, :total, :succeeded, :failed, :unknown, :not_attempted, :already_done, :deadline, "
            "CAST(:failed_ids AS text[]), CAST(:unknown_ids AS text[]), CAST(:errors AS jsonb), :started, "
            "now() + CAST(:ttl AS text)::interval) RETURNING id",
            {
                "pid": pid,
                "aid": run.analysis_id,
                "model": run.model,
                "action": run.action,
                "where": None if run.where is None else json.dumps(run.where, default=str),
                "attributes": None if run.attributes is None else json.dumps(run.attributes, default=str),
                "state": run.state,
                "key_id": run.key_id,
                "key_name": run.key_name,
                "transport": run.transport,
                **{k: int(c.get(k, 0)) for k in ("total", "succeeded", "failed", "unknown", "not_attempted")},
                "already_done": int(c.get("already_done", 0)),
                "deadline": run.deadline_reached,
                "failed_ids": run.failed_ids,
                "unknown_ids": run.unknown_ids,
                "errors": json.dumps(run.errors, default=str),
                "started": run.started_at,
                "ttl": f"{retention_seconds} seconds",
            },
        )
        return int(found)

    async def runs(self, pid: uuid.UUID, aid: str, limit: int, offset: int) -> tuple[list[RowMapping], int]:
        """A page of the session's live runs, newest first, and how many it holds."""
        params = {"pid": pid, "aid": aid, "lim": limit, "off": offset}
        rows = await self.rows(
            f"SELECT {COLUMNS} FROM analysis_act_runs WHERE {LIVE} AND analysis_id = :aid "
            "ORDER BY id DESC LIMIT :lim OFFSET :off",
            params,
        )
        total = await self.scalar(
            f"SELECT count(*) FROM analysis_act_runs WHERE {LIVE} AND analysis_id = :aid", {"pid": pid, "aid": aid}
        )
        return rows, int(total or 0)

    async def run(self, pid: uuid.UUID, aid: str, run_id: int) -> RowMapping | None:
        """One live run of the session."""
        return await self.row(
            f"SELECT {COLUMNS} FROM analysis_act_runs WHERE {LIVE} AND analysis_id = :aid AND id = :id",
            {"pid": pid, "aid": aid, "id": run_id},
        )

    async def run_ids(
        self, pid: uuid.UUID, aid: str, run_id: int, which: str, limit: int, offset: int
    ) -> list[str] | None:
        """A slice of one run's failed (`which` = 'failed') or unknown ids; None when the run is not there."""
        column = "failed_ids" if which == "failed" else "unknown_ids"
        rows = await self.rows(
            f"SELECT {column}[CAST(:lo AS int) + 1 : CAST(:hi AS int)] AS ids FROM analysis_act_runs "
            f"WHERE {LIVE} AND analysis_id = :aid AND id = :id",
            {"pid": pid, "aid": aid, "id": run_id, "lo": offset, "hi": offset + limit},
        )
        return None if not rows else list(rows[0]["ids"] or [])
