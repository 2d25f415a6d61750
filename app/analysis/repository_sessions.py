"""The SQL of analysis_sessions and analysis_session: what each session of a project holds (live rows
only: an expired record, finding or ingest state is no longer part of its session)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import RowMapping

from app.core.repository import Repository

LIVE_RECORDS = "project_id = :pid AND expires_at > now()"
LIVE_FINDINGS = "project_id = :pid AND (expires_at IS NULL OR expires_at > now())"
LIVE_STATES = "project_id = :pid AND expires_at > now()"

# One row per session found in any of the three tables, with its counts and last activity.
_SESSIONS = f"""
WITH r AS (
    SELECT analysis_id, count(*) AS records, count(DISTINCT (model, page)) FILTER (WHERE page IS NOT NULL) AS pages,
           max(ingested_at) AS at
    FROM analysis_records WHERE {LIVE_RECORDS} GROUP BY analysis_id
), f AS (
    SELECT analysis_id,
           count(*) FILTER (WHERE category <> 'page_summary') AS findings,
           count(*) FILTER (WHERE category = 'page_summary') AS page_summaries,
           max(created_at) AS at
    FROM analysis_findings WHERE {LIVE_FINDINGS} GROUP BY analysis_id
), s AS (
    SELECT analysis_id, max(updated_at) AS at
    FROM analysis_ingest_state WHERE {LIVE_STATES} GROUP BY analysis_id
), ids AS (
    SELECT analysis_id FROM r UNION SELECT analysis_id FROM f UNION SELECT analysis_id FROM s
)
SELECT ids.analysis_id,
       coalesce(r.records, 0) AS records,
       coalesce(f.findings, 0) AS findings,
       coalesce(f.page_summaries, 0) AS page_summaries,
       coalesce(r.pages, 0) AS pages_held,
       greatest(r.at, f.at, s.at) AS last_activity,
       count(*) OVER () AS total
FROM ids LEFT JOIN r USING (analysis_id) LEFT JOIN f USING (analysis_id) LEFT JOIN s USING (analysis_id)
ORDER BY last_activity DESC, ids.analysis_id
LIMIT :lim OFFSET :off
"""


class SessionRepository(Repository):
    """Read-only views over the analysis tables, per project."""

    async def sessions(self, pid: uuid.UUID, limit: int, offset: int) -> list[RowMapping]:
        """A page of the project's sessions, most recently active first (each row has the `total`)."""
        return await self.rows(_SESSIONS, {"pid": pid, "lim": limit, "off": offset})

    async def count_sessions(self, pid: uuid.UUID) -> int:
        """How many sessions the project holds."""
        found = await self.scalar(
            f"SELECT count(*) FROM (SELECT analysis_id FROM analysis_records WHERE {LIVE_RECORDS} "
            f"UNION SELECT analysis_id FROM analysis_findings WHERE {LIVE_FINDINGS} "
            f"UNION SELECT analysis_id FROM analysis_ingest_state WHERE {LIVE_STATES}) ids",
            {"pid": pid},
        )
        return int(found or 0)

    async def models(self, pid: uuid.UUID, aids: list[str]) -> list[RowMapping]:
        """Per session and model: live records and the pages (or nested batches) they came from."""
        if not aids:
            return []
        return await self.rows(
            "SELECT analysis_id, model, count(*) AS records, count(DISTINCT page) AS pages, "
            "min(page) AS first_page, max(page) AS last_page, max(ingested_at) AS last_at FROM analysis_records "
            f"WHERE {LIVE_RECORDS} AND analysis_id = ANY(CAST(:aids AS text[])) "
            "GROUP BY analysis_id, model ORDER BY analysis_id, min(id)",
            {"pid": pid, "aids": aids},
        )

    async def ingests(self, pid: uuid.UUID, aid: str) -> list[RowMapping]:
        """The session's ingest states, most recent first."""
        return await self.rows(
            "SELECT model, state_key, params, pages_done, complete, total_available, updated_at, expires_at "
            f"FROM analysis_ingest_state WHERE {LIVE_STATES} AND analysis_id = :aid "
            "ORDER BY updated_at DESC, state_key",
            {"pid": pid, "aid": aid},
        )

    async def findings(self, pid: uuid.UUID, aid: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        """The session's newest findings (page summaries apart) and how many it holds."""
        return await self._findings(pid, aid, "category <> 'page_summary'", "created_at DESC, id DESC", limit)

    async def page_summaries(self, pid: uuid.UUID, aid: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        """The session's page summaries by model and page, and how many it holds."""
        order = "source_model, CASE WHEN metadata->>'page' ~ '^[0-9]{1,9}$' THEN (metadata->>'page')::int END, id"
        return await self._findings(pid, aid, "category = 'page_summary'", order, limit)

    async def _findings(
        self, pid: uuid.UUID, aid: str, kind: str, order: str, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        params = {"pid": pid, "aid": aid, "lim": limit}
        where = f"{LIVE_FINDINGS} AND analysis_id = :aid AND {kind}"
        if limit == 0:
            return [], int(await self.scalar(f"SELECT count(*) FROM analysis_findings WHERE {where}", params) or 0)
        rows = await self.dicts(
            "SELECT id, category, finding, metadata, source_model, persistent, created_at, expires_at, "
            f"count(*) OVER () AS total FROM analysis_findings WHERE {where} ORDER BY {order} LIMIT :lim",
            params,
        )
        total = int(rows[0].pop("total")) if rows else 0
        for row in rows[1:]:
            row.pop("total")
        return rows, total
