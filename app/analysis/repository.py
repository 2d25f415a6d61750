"""Every SQL statement of the analysis feature.

Caller text reaches SQL only as bound parameters; the one exception is a field name, which is
interpolated as a JSON key literal (`data->>'name'`) after `validation.field_name` has checked it
against `^[a-zA-Z_][a-zA-Z0-9_]*$`.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.analysis.validation import FIELD, Where
from app.core.embeddings.knn import KnnQuery, nearest_rows
from app.core.embeddings.lexical import LexicalIndex, LexicalQuery, lexical_query
from app.core.embeddings.vectors import EmbeddedRows
from app.core.repository import ProjectRepository, Repository


def _key(field: str) -> str:
    if not FIELD.fullmatch(field):  # defence in depth: the service validated it already
        raise ValueError("unsafe field name")
    return field


def text_expr(field: str) -> str:
    """The field as text."""
    return f"(data->>'{_key(field)}')"


def num_expr(field: str) -> str:
    """The field as numeric, NULL when it is not a number (or a numeric string)."""
    f = _key(field)
    return (
        f"(CASE WHEN jsonb_typeof(data->'{f}') = 'number' OR (data->>'{f}') ~ '^-?[0-9]+(\\.[0-9]+)?$' "
        f"THEN (data->>'{f}')::numeric END)"
    )


def ts_expr(field: str) -> str:
    """The field as timestamptz, NULL when it does not look like an ISO date."""
    f = _key(field)
    return f"(CASE WHEN (data->>'{f}') ~ '^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}' THEN (data->>'{f}')::timestamptz END)"


def where_sql(w: Where, params: dict[str, Any], prefix: str = "w") -> str:
    """SQL conditions for a validated `where` (values bound into `params`)."""
    parts: list[str] = []
    if w.exact:
        params[f"{prefix}_exact"] = json.dumps(w.exact)
        parts.append(f"data @> CAST(:{prefix}_exact AS jsonb)")
    for i, cond in enumerate(w.ranges):
        expr = num_expr(cond.field) if cond.kind == "numeric" else ts_expr(cond.field)
        params[f"{prefix}_{i}"] = cond.value
        parts.append(f"{expr} {cond.op} :{prefix}_{i}")
    return " AND ".join(parts) if parts else "TRUE"


def _no_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    return value


def _json(data: Any) -> str:
    """JSON text for a JSONB column (PostgreSQL refuses the NUL character, so it is dropped)."""
    text = json.dumps(data, default=str)
    return json.dumps(_no_nul(data), default=str) if "\\u0000" in text else text


FINDING_TARGET = "analysis_finding"  # the embedding queue's name for finding (and page summary) vectors
FINDING_VECTORS = EmbeddedRows(
    FINDING_TARGET,
    "analysis_findings",
    "analysis_finding_embeddings",
    text="finding",
    live="t.expires_at IS NULL OR t.expires_at > now()",
)
# Findings ranked by words: BM25 over `cairn_text` (analysis_0002_lexical).
FINDING_LEXICAL = LexicalIndex("analysis_findings", config="cairn_text")
SCOPE = "project_id = :pid AND analysis_id = :aid AND model = :model AND expires_at > now()"

UPSERT_CHUNK = 2000  # rows per statement: bounds the JSON text of a large nested batch
# One statement per page: the page's documents travel as one JSON array (one json.dumps, one jsonb
# parse) zipped with their ids; rows without an id (NULL) never meet the partial unique index.
_UPSERT = text(
    "INSERT INTO analysis_records (project_id, analysis_id, model, record_id, page, data, expires_at) "
    "SELECT CAST(:pid AS uuid), CAST(:aid AS text), CAST(:model AS text), r.rid, CAST(:page AS integer), r.d, "
    "now() + CAST(:ttl AS text)::interval "
    "FROM ROWS FROM (unnest(CAST(:rids AS text[])), jsonb_array_elements(CAST(:docs AS jsonb))) AS r(rid, d) "
    "ON CONFLICT (project_id, analysis_id, model, record_id) WHERE record_id IS NOT NULL "
    "DO UPDATE SET data = EXCLUDED.data, page = EXCLUDED.page, ingested_at = now(), expires_at = EXCLUDED.expires_at"
)


class AnalysisRepository(Repository):
    """Records, findings and ingest state of analysis sessions."""

    # -- projects ---------------------------------------------------------------------------
    async def ensure_project(self, name: str) -> uuid.UUID:
        """The project's id, created if missing."""
        return await ProjectRepository(self.session).ensure_id(name)

    async def project_id(self, name: str) -> uuid.UUID | None:
        """The project's id, if it exists."""
        project = await ProjectRepository(self.session).get(name)
        return project.id if project else None

    # -- lifecycle --------------------------------------------------------------------------
    async def evict_expired(self, batch: int = 5000) -> dict[str, int]:
        """Delete expired records, ephemeral findings, ingest states and act runs (bounded per call)."""
        counts = {}
        for table, cond in (
            ("analysis_records", "expires_at <= now()"),
            ("analysis_findings", "expires_at IS NOT NULL AND expires_at <= now()"),
            ("analysis_ingest_state", "expires_at <= now()"),
            ("analysis_act_runs", "expires_at <= now()"),
        ):
            key = "ctid"
            result = await self.session.execute(
                text(f"DELETE FROM {table} WHERE {key} IN (SELECT {key} FROM {table} WHERE {cond} LIMIT :n)"),
                {"n": batch},
            )
            counts[table] = int(result.rowcount or 0)  # type: ignore[attr-defined]
        return counts

    # -- records ----------------------------------------------------------------------------
    async def upsert_records(
        self,
        pid: uuid.UUID,
        aid: str,
        model: str,
        page: int | None,
        rows: list[tuple[str | None, dict[str, Any]]],
        retention_seconds: float,
    ) -> int:
        """Insert rows; a row whose (model, record_id) exists in the session replaces it.

        Rows with an id go first (a duplicate id once, at its first position, with its last copy),
        then rows without one, in their order: that is the ingest order queries read."""
        keyed: dict[str, dict[str, Any]] = {}
        unkeyed: list[dict[str, Any]] = []
        for rid, data in rows:
            if rid is None:
                unkeyed.append(data)
            else:
                keyed[rid] = data  # the last copy of a duplicate id wins
        rids: list[str | None] = [*keyed, *([None] * len(unkeyed))]
        docs = [*keyed.values(), *unkeyed]
        params = {"pid": pid, "aid": aid, "model": model, "page": page, "ttl": f"{retention_seconds} seconds"}
        for i in range(0, len(docs), UPSERT_CHUNK):
            await self.session.execute(
                _UPSERT, {**params, "rids": rids[i : i + UPSERT_CHUNK], "docs": _json(docs[i : i + UPSERT_CHUNK])}
            )
        return len(docs)

    async def last_page(self, pid: uuid.UUID, aid: str, model: str) -> int:
        """The highest page (or batch) number stored for a model in the session (0 when none)."""
        found = await self.scalar(
            f"SELECT max(page) FROM analysis_records WHERE {SCOPE}", {"pid": pid, "aid": aid, "model": model}
        )
        return int(found or 0)

    async def field_checks(
        self, pid: uuid.UUID, aid: str, model: str, checks: list[tuple[str, str]]
    ) -> list[tuple[bool, bool]]:
        """For each (field, kind): whether any record of the model has the field, and whether any has a
        value of that kind ('numeric' or 'date' as a range compares them, a JSON type, or 'any').
        Each answer is an EXISTS that stops at the first such record."""
        params: dict[str, Any] = {"pid": pid, "aid": aid, "model": model}
        columns: list[str] = []
        for i, (field, kind) in enumerate(checks):
            f = _key(field)
            if kind == "numeric":
                cond = f"{num_expr(f)} IS NOT NULL"
            elif kind == "date":
                cond = f"{ts_expr(f)} IS NOT NULL"
            elif kind == "any":
                cond = ""  # having the field is all that is asked: the presence column answers it
            else:
                params[f"k{i}"] = kind
                cond = f"jsonb_typeof(data->'{f}') = :k{i}"
            columns.append(
                f"EXISTS (SELECT 1 FROM analysis_records WHERE {SCOPE} AND (data->'{f}') IS NOT NULL) AS p{i}"
            )
            if cond:
                columns.append(f"EXISTS (SELECT 1 FROM analysis_records WHERE {SCOPE} AND {cond}) AS c{i}")
        if not columns:
            return []
        row = (await self.rows("SELECT " + ", ".join(columns), params))[0]
        return [(bool(row[f"p{i}"]), bool(row[f"c{i}" if f"c{i}" in row else f"p{i}"])) for i in range(len(checks))]

    async def count_records(self, pid: uuid.UUID, aid: str, model: str, w: Where | None = None) -> int:
        """Live records of a model in the session (optionally matching `w`)."""
        params: dict[str, Any] = {"pid": pid, "aid": aid, "model": model}
        cond = where_sql(w, params) if w else "TRUE"
        return int(await self.scalar(f"SELECT count(*) FROM analysis_records WHERE {SCOPE} AND {cond}", params))

    async def session_models(self, pid: uuid.UUID, aid: str) -> list[tuple[str, int]]:
        """Models held by the session with their live record counts."""
        rows = await self.rows(
            "SELECT model, count(*) AS n FROM analysis_records WHERE project_id = :pid "
            "AND analysis_id = :aid AND expires_at > now() GROUP BY model ORDER BY min(id)",
            {"pid": pid, "aid": aid},
        )
        return [(r["model"], int(r["n"])) for r in rows]

    async def observed_fields(self, pid: uuid.UUID, aid: str, model: str, sample: int) -> list[tuple[str, str, int]]:
        """(field, JSON type, rows having it) over the first `sample` records."""
        rows = await self.rows(
            f"SELECT e.key, jsonb_typeof(e.value) AS kind, count(*) AS n FROM (SELECT data FROM analysis_records "
            f"WHERE {SCOPE} "
            "ORDER BY id LIMIT :n) s, jsonb_each(s.data) e GROUP BY 1, 2 ORDER BY 1, 3 DESC",
            {"pid": pid, "aid": aid, "model": model, "n": sample},
        )
        return [(r["key"], r["kind"], int(r["n"])) for r in rows]

    async def top_values(
        self, pid: uuid.UUID, aid: str, model: str, field: str, n: int, sample: int
    ) -> tuple[int, list[str]]:
        """Distinct count and the `n` most common values of a field (over the first `sample` records)."""
        params = {"pid": pid, "aid": aid, "model": model, "n": n, "sample": sample}
        expr = text_expr(field)
        rows = await self.rows(
            f"SELECT v, count(*) OVER () AS distinct_n FROM (SELECT {expr} AS v, count(*) AS c FROM "
            f"(SELECT data FROM analysis_records WHERE {SCOPE} ORDER BY id LIMIT :sample) s "
            f"WHERE {expr} IS NOT NULL GROUP BY 1) g ORDER BY c DESC, v LIMIT :n",
            params,
        )
        return (int(rows[0]["distinct_n"]) if rows else 0), [r["v"] for r in rows]

    async def value_range(
        self, pid: uuid.UUID, aid: str, model: str, field: str, kind: str, sample: int
    ) -> tuple[Any, Any] | None:
        """(min, max) of a field read as 'numeric' or 'date' (timestamptz) over the first `sample`
        records; None when no record has such a value."""
        expr = num_expr(field) if kind == "numeric" else ts_expr(field)
        sql = (
            f"SELECT min(v) AS lo, max(v) AS hi FROM (SELECT {expr} AS v FROM analysis_records WHERE {SCOPE} "
            "ORDER BY id LIMIT :n) s"
        )
        params = {"pid": pid, "aid": aid, "model": model, "n": sample}
        try:
            # A text that starts like a date but is none (2025-02-31) fails the cast: the savepoint keeps
            # the call's transaction usable, and the field is then no date field.
            async with self.session.begin_nested():
                rows = await self.rows(sql, params)
        except DBAPIError:
            return None
        return None if not rows or rows[0]["lo"] is None else (rows[0]["lo"], rows[0]["hi"])

    async def case_variants(
        self, pid: uuid.UUID, aid: str, model: str, field: str, value: str, limit: int = 3
    ) -> list[tuple[str, int]]:
        """The stored spellings of `value` in another case (value, records), most common first."""
        rows = await self.rows(
            f"SELECT {text_expr(field)} AS v, count(*) AS n FROM analysis_records WHERE {SCOPE} "
            f"AND jsonb_typeof(data->'{_key(field)}') = 'string' AND lower({text_expr(field)}) = lower(:v) "
            f"AND {text_expr(field)} <> :v GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT :lim",
            {"pid": pid, "aid": aid, "model": model, "v": value, "lim": limit},
        )
        return [(r["v"], int(r["n"])) for r in rows]

    async def aggregate(
        self, pid: uuid.UUID, aid: str, model: str, field: str, w: Where, limit: int, offset: int = 0
    ) -> tuple[int, int, list[tuple[Any, int]]]:
        """(matching total, distinct values, [(value, count)] by count desc from `offset` on)."""
        params: dict[str, Any] = {"pid": pid, "aid": aid, "model": model, "lim": limit, "off": offset}
        cond = where_sql(w, params)
        rows = await self.rows(
            f"SELECT v, c, total, groups FROM (SELECT data->'{_key(field)}' AS v, count(*) AS c, "
            f"sum(count(*)) OVER () AS total, count(*) OVER () AS groups FROM analysis_records "
            f"WHERE {SCOPE} AND {cond} GROUP BY 1) g ORDER BY c DESC, v::text LIMIT :lim OFFSET :off",
            params,
        )
        if not rows and offset:  # past the last group: the totals still tell where it is
            counted = await self.rows(
                f"SELECT count(*) AS total, count(DISTINCT data->'{_key(field)}') + "
                f"(count(*) > count(data->'{_key(field)}'))::int AS groups FROM analysis_records "
                f"WHERE {SCOPE} AND {cond}",
                params,
            )
            return int(counted[0]["total"]), int(counted[0]["groups"]), []
        if not rows:
            return 0, 0, []
        return int(rows[0]["total"]), int(rows[0]["groups"]), [(r["v"], int(r["c"])) for r in rows]

    async def filter(
        self, pid: uuid.UUID, aid: str, model: str, w: Where, limit: int, offset: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """(matching total, rows in ingest order)."""
        params: dict[str, Any] = {"pid": pid, "aid": aid, "model": model, "lim": limit, "off": offset}
        cond = where_sql(w, params)
        # The page walks the session index in id order and stops early; the count scans separately
        # without carrying the documents along.
        rows = await self.rows(
            f"SELECT data FROM analysis_records WHERE {SCOPE} AND {cond} ORDER BY id LIMIT :lim OFFSET :off", params
        )
        total = await self.scalar(f"SELECT count(*) FROM analysis_records WHERE {SCOPE} AND {cond}", params)
        return int(total), [r["data"] for r in rows]

    async def sample(
        self,
        pid: uuid.UUID,
        aid: str,
        model: str,
        w: Where,
        size: int,
        stratify_by: str | None,
        proximity: dict[str, Any] | None,
    ) -> tuple[int, int, list[dict[str, Any]]]:
        """(candidates, strata, rows): ROW_NUMBER() per stratum with a budget of CEIL(size / strata)."""
        params: dict[str, Any] = {"pid": pid, "aid": aid, "model": model, "size": size}
        conds = [where_sql(w, params)]
        keys: list[str] = []
        if stratify_by:
            keys.append(f"coalesce({text_expr(stratify_by)}, '\u2205')")
        if proximity:
            ts = ts_expr(proximity["field"])
            params.update(origin=proximity["origin"], win=proximity["window"])
            conds.append(
                f"{ts} BETWEEN CAST(:origin AS timestamptz) - CAST(CAST(:win AS text) AS interval) "
                "AND CAST(:origin AS timestamptz) + CAST(CAST(:win AS text) AS interval)"
            )
            if proximity.get("bucket"):
                params["bucket"] = proximity["bucket"]
                keys.append(
                    f"date_bin(CAST(CAST(:bucket AS text) AS interval), {ts}, CAST(:origin AS timestamptz))::text"
                )
        key = " || '|' || ".join(keys) if keys else "''"
        rows = await self.rows(
            f"WITH filtered AS MATERIALIZED (SELECT id, {key} AS stratum FROM analysis_records "
            f"WHERE {SCOPE} AND {' AND '.join(conds)}), "
            "counts AS (SELECT count(*) AS n, count(DISTINCT stratum) AS strata FROM filtered), "
            "ranked AS (SELECT id, ROW_NUMBER() OVER (PARTITION BY stratum ORDER BY random()) AS rn FROM filtered), "
            "picked AS (SELECT r.id, r.rn FROM ranked r CROSS JOIN counts c "
            "WHERE r.rn <= CEIL(CAST(:size AS numeric) / GREATEST(c.strata, 1)) ORDER BY r.rn, random() LIMIT :size) "
            "SELECT a.data, c.n, c.strata FROM picked p JOIN analysis_records a ON a.id = p.id CROSS JOIN counts c "
            "ORDER BY p.rn",
            params,
        )
        if not rows:
            return 0, 0, []
        return int(rows[0]["n"]), int(rows[0]["strata"]), [r["data"] for r in rows]

    async def matched_ids(self, pid: uuid.UUID, aid: str, model: str, w: Where) -> list[tuple[str, dict[str, Any]]]:
        """(record_id, data) of every matching record that has an id, in ingest order."""
        params: dict[str, Any] = {"pid": pid, "aid": aid, "model": model}
        cond = where_sql(w, params)
        rows = await self.rows(
            f"SELECT record_id, data FROM analysis_records WHERE {SCOPE} AND {cond} "
            "AND record_id IS NOT NULL ORDER BY id",
            params,
        )
        return [(r["record_id"], r["data"]) for r in rows]

    async def dry_run(self, pid: uuid.UUID, aid: str, model: str, w: Where) -> dict[str, Any]:
        """Scope of an act: count, first ids, first rows with their ingest time, ingest time range."""
        params: dict[str, Any] = {"pid": pid, "aid": aid, "model": model}
        cond = where_sql(w, params)
        stats = (
            await self.rows(
                f"SELECT count(*) AS n, min(ingested_at) AS earliest, max(ingested_at) AS latest FROM analysis_records "
                f"WHERE {SCOPE} AND {cond} AND record_id IS NOT NULL",
                params,
            )
        )[0]
        first = await self.rows(
            f"SELECT record_id, data, ingested_at FROM analysis_records WHERE {SCOPE} "
            f"AND {cond} AND record_id IS NOT NULL ORDER BY id LIMIT 10",
            params,
        )
        return {
            "count": int(stats["n"]),
            "earliest": stats["earliest"],
            "latest": stats["latest"],
            "first": [(r["record_id"], r["data"], r["ingested_at"]) for r in first],
        }

    async def apply_update(
        self, pid: uuid.UUID, aid: str, model: str, record_ids: list[str], attributes: dict[str, Any]
    ) -> None:
        """Merge `attributes` into the snapshot of records the upstream accepted."""
        await self.session.execute(
            text(
                "UPDATE analysis_records SET data = data || CAST(:attrs AS jsonb) WHERE project_id = :pid "
                "AND analysis_id = :aid AND model = :model AND record_id = ANY(CAST(:ids AS text[]))"
            ),
            {"pid": pid, "aid": aid, "model": model, "ids": record_ids, "attrs": json.dumps(attributes)},
        )

    async def delete_records(self, pid: uuid.UUID, aid: str, model: str, record_ids: list[str]) -> None:
        """Drop records deleted upstream from the snapshot."""
        await self.session.execute(
            text(
                "DELETE FROM analysis_records WHERE project_id = :pid AND analysis_id = :aid AND model = :model "
                "AND record_id = ANY(CAST(:ids AS text[]))"
            ),
            {"pid": pid, "aid": aid, "model": model, "ids": record_ids},
        )

    async def parents_after(
        self, pid: uuid.UUID, aid: str, model: str, after: int, limit: int
    ) -> tuple[list[tuple[int, str]], int]:
        """The next `limit` parent records (row id, record id) after row `after`, and how many follow."""
        params = {"pid": pid, "aid": aid, "model": model, "after": after, "lim": limit}
        rows = await self.rows(
            f"SELECT id, record_id, count(*) OVER () AS remaining FROM analysis_records WHERE {SCOPE} "
            "AND record_id IS NOT NULL AND id > :after ORDER BY id LIMIT :lim",
            params,
        )
        remaining = int(rows[0]["remaining"]) if rows else 0
        return [(int(r["id"]), r["record_id"]) for r in rows], remaining

    # -- ingest state -----------------------------------------------------------------------
    async def get_state(self, pid: uuid.UUID, aid: str, key: str) -> dict[str, Any] | None:
        """The saved position of an ingest."""
        rows = await self.rows(
            "SELECT next_token, pages_done, complete, total_available FROM analysis_ingest_state "
            "WHERE project_id = :pid AND analysis_id = :aid AND state_key = :key AND expires_at > now()",
            {"pid": pid, "aid": aid, "key": key},
        )
        if not rows:
            return None
        r = rows[0]
        return {
            "next_token": r["next_token"],
            "pages_done": int(r["pages_done"]),
            "complete": bool(r["complete"]),
            "total_available": r["total_available"],
        }

    async def save_state(
        self,
        pid: uuid.UUID,
        aid: str,
        key: str,
        model: str,
        params: dict[str, Any],
        next_token: Any,
        pages_done: int,
        complete: bool,
        total: int | None,
        retention_seconds: float,
    ) -> None:
        """Record where an ingest stopped."""
        await self.session.execute(
            text(
                "INSERT INTO analysis_ingest_state (project_id, analysis_id, state_key, model, params, next_token, "
                "pages_done, complete, total_available, updated_at, expires_at) VALUES (:pid, :aid, :key, :model, "
                "CAST(:params AS jsonb), CAST(:token AS jsonb), :pages, :complete, :total, now(), "
                "now() + CAST(:ttl AS text)::interval) ON CONFLICT (project_id, analysis_id, state_key) DO UPDATE SET "
                "next_token = EXCLUDED.next_token, pages_done = EXCLUDED.pages_done, complete = EXCLUDED.complete, "
                "total_available = EXCLUDED.total_available, updated_at = now(), expires_at = EXCLUDED.expires_at"
            ),
            {
                "pid": pid,
                "aid": aid,
                "key": key,
                "model": model,
                "params": json.dumps(params),
                "token": json.dumps(next_token),
                "pages": pages_done,
                "complete": complete,
                "total": total,
                "ttl": f"{retention_seconds} seconds",
            },
        )

    # -- findings ---------------------------------------------------------------------------
    async def insert_findings(
        self,
        pid: uuid.UUID,
        aid: str,
        items: list[dict[str, Any]],
        persistent: bool,
        ttl_seconds: float,
    ) -> tuple[list[int], datetime | None]:
        """Store findings (their vectors are queued by the service); returns ids and the expiry (None
        when persistent)."""
        rows = await self.rows(
            "INSERT INTO analysis_findings (project_id, analysis_id, category, finding, metadata, source_model, "
            "persistent, expires_at) SELECT CAST(:pid AS uuid), CAST(:aid AS text), f.c, f.t, f.m::jsonb, "
            "NULLIF(f.s, ''), CAST(:persistent AS boolean), CASE WHEN CAST(:persistent AS boolean) THEN NULL "
            "ELSE now() + CAST(:ttl AS text)::interval END "
            "FROM unnest(CAST(:cats AS text[]), CAST(:texts AS text[]), CAST(:metas AS text[]), "
            "CAST(:sources AS text[])) WITH ORDINALITY AS f(c, t, m, s, o) ORDER BY f.o RETURNING id, expires_at",
            {
                "pid": pid,
                "aid": aid,
                "persistent": persistent,
                "ttl": f"{ttl_seconds} seconds",
                "cats": [i["category"] for i in items],
                "texts": [_no_nul(i["finding"]) for i in items],
                "metas": [_json(i.get("metadata") or {}) for i in items],
                "sources": [i.get("source_model") or "" for i in items],
            },
        )
        ids = [int(r["id"]) for r in rows]
        ids.sort()  # identity values follow insertion order
        return ids, (rows[0]["expires_at"] if rows else None)

    async def lexical_query(self, query: str) -> LexicalQuery:
        """The query's lexemes under `cairn_text` with their idf over every finding
        (`app.core.embeddings.lexical`); words found in no finding lower every coverage."""
        return await lexical_query(self, FINDING_LEXICAL, query)

    async def text_hits(
        self,
        pid: uuid.UUID,
        aid: str,
        terms: LexicalQuery,
        model: str,
        top_k: int,
        category: str | None,
        only_pending: bool,
    ) -> list[tuple[int, str, str, dict[str, Any], float]]:
        """The `top_k` live findings of the session sharing a lexeme with `terms`, by BM25 score, best
        first (id, category, finding, metadata, score); with `only_pending`, only those that have no
        vector of `model` yet. Scored exactly: the session's findings holding a query lexeme are found
        through the GIN index on `tsv` (analysis_0002_lexical)."""
        if not terms.terms:
            return []
        cat = "AND f.category = :cat" if category else ""
        pending = (
            "AND NOT EXISTS (SELECT 1 FROM analysis_finding_embeddings e WHERE e.owner_id = f.id AND e.model = :model)"
            if only_pending
            else ""
        )
        rows = await self.rows(
            f"SELECT f.id, f.category, f.finding, f.metadata, {FINDING_LEXICAL.score_sql('f')} AS score "
            "FROM analysis_findings f WHERE f.project_id = :pid AND f.analysis_id = :aid "
            f"AND (f.expires_at IS NULL OR f.expires_at > now()) {cat} {pending} "
            "AND f.tsv @@ CAST(:any AS tsquery) ORDER BY score DESC, f.id LIMIT :k",
            {
                "lq": terms.vector,
                "any": terms.rare(cap=math.inf),  # every lexeme of the query found in the table
                "model": model,
                "pid": pid,
                "aid": aid,
                "cat": category,
                "k": top_k,
            },
        )
        return [(int(r["id"]), r["category"], r["finding"], r["metadata"], float(r["score"])) for r in rows]

    async def delete_page_summaries(self, pid: uuid.UUID, aid: str, model: str, pages: list[int]) -> None:
        """Drop earlier summaries of pages that are being re-ingested."""
        await self.session.execute(
            text(
                "DELETE FROM analysis_findings WHERE project_id = :pid AND analysis_id = :aid "
                "AND category = 'page_summary' AND source_model = :model "
                "AND (metadata->>'page') = ANY(CAST(:pages AS text[]))"
            ),
            {"pid": pid, "aid": aid, "model": model, "pages": [str(p) for p in pages]},
        )

    async def semantic(
        self, pid: uuid.UUID, aid: str, vector: list[float], model: str, top_k: int, category: str | None
    ) -> list[tuple[int, str, str, dict[str, Any], float]]:
        """The `top_k` live findings of the session nearest to `vector` (`app.core.embeddings.knn`): id, category,
        finding, metadata and cosine similarity, best first."""
        live = "f.project_id = :pid AND f.analysis_id = :aid AND (f.expires_at IS NULL OR f.expires_at > now())"
        query = KnnQuery(
            FINDING_VECTORS,
            model,
            vector,
            top_k,
            alias="f",
            where=live + (" AND f.category = :cat" if category else ""),
            params={"pid": pid, "aid": aid, "cat": category} if category else {"pid": pid, "aid": aid},
            columns=("f.category", "f.finding", "f.metadata"),
        )
        rows = await nearest_rows(self, query)
        return [(int(r["owner"]), r["category"], r["finding"], r["metadata"], float(r["cosine"])) for r in rows]

    async def count_findings(self, pid: uuid.UUID, aid: str) -> int:
        """Live findings of the session."""
        return int(
            await self.scalar(
                "SELECT count(*) FROM analysis_findings WHERE project_id = :pid AND analysis_id = :aid "
                "AND (expires_at IS NULL OR expires_at > now())",
                {"pid": pid, "aid": aid},
            )
        )

    # -- teardown ---------------------------------------------------------------------------
    async def clear(self, pid: uuid.UUID, aid: str) -> tuple[int, int]:
        """Delete the session's records, findings (with vectors) and ingest state."""
        params = {"pid": pid, "aid": aid}
        rec = await self.session.execute(
            text("DELETE FROM analysis_records WHERE project_id = :pid AND analysis_id = :aid"), params
        )
        fnd = await self.session.execute(
            text("DELETE FROM analysis_findings WHERE project_id = :pid AND analysis_id = :aid"), params
        )
        await self.session.execute(
            text("DELETE FROM analysis_ingest_state WHERE project_id = :pid AND analysis_id = :aid"), params
        )
        return int(rec.rowcount or 0), int(fnd.rowcount or 0)  # type: ignore[attr-defined]
