"""SQL of hybrid search, limbic counters, search logging, implicit feedback and reflections."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from app.core.embeddings.knn import KnnQuery, nearest, prepare_scan, query_params, similarity_sql
from app.core.embeddings.lexical import LexicalIndex, LexicalQuery, lexical_query, ranked
from app.core.embeddings.vectors import EmbeddedRows
from app.core.repository import Repository
from app.graph.repository import ENTITY_VECTORS, REFLECTION_TARGET

REFLECTION_VECTORS = EmbeddedRows(REFLECTION_TARGET, "graph_reflections", "graph_reflection_embeddings", text="content")
# tsv (cairn_text) and lexical (bm25_document) of graph_0003_lexical; the entities' HNSW index is on the
# side table of graph_0006_lexical_side, filled by the core's lexical mover.
ENTITY_LEXICAL = LexicalIndex(
    "graph_entities",
    config="cairn_text",
    side="graph_entity_lexical",
    pending="graph_entity_lexical_pending",
    copied=("project_id", "entity_type"),
)
REFLECTION_LEXICAL = LexicalIndex("graph_reflections", config="cairn_text")


class SearchRepository(Repository):
    """Candidates, score inputs, counters and logs of search_semantic; reflections."""

    async def vector_candidates(
        self, project_id: uuid.UUID, qvec: Sequence[float], model: str, n: int, entity_type: str | None
    ) -> list[tuple[int, float]]:
        """The `n` entities of the project nearest to `qvec` (`app.core.embeddings.knn`): (id, cosine similarity)."""
        where = "g.project_id = :pid" + (" AND g.entity_type = :t" if entity_type else "")
        params = {"pid": project_id, "t": entity_type} if entity_type else {"pid": project_id}
        query = KnnQuery(ENTITY_VECTORS, model, qvec, n, alias="g", where=where, params=params)
        return [(int(owner), cos) for owner, cos in await nearest(self, query)]

    async def lexical_query(self, query: str) -> LexicalQuery:
        """The query's lexemes under `cairn_text` found in entities, with their idf; the others in
        `missing`, where they lower every coverage (`app.core.embeddings.lexical`)."""
        return await lexical_query(self, ENTITY_LEXICAL, query)

    async def text_candidates(
        self, project_id: uuid.UUID, query: LexicalQuery, n: int, entity_type: str | None
    ) -> list[tuple[int, float]]:
        """The `n` entities of the project (and type) with the best BM25 score for `query`: (id, score),
        best first, those sharing no lexeme left out. One scan of the inner-product HNSW index plus the
        entities holding a rare query lexeme through the GIN index (`LexicalIndex.top_sql`)."""
        if not query.terms:
            return []
        where = "g.project_id = :pid" + (" AND g.entity_type = :t" if entity_type else "")
        rare = query.rare()
        await prepare_scan(self, n)
        rows = await self.rows(
            ENTITY_LEXICAL.top_sql("g", where, rare is not None),
            {"pid": project_id, "t": entity_type, "lq": query.vector, "k": n, **({"rare": rare} if rare else {})},
        )
        return [(int(i), score) for i, score in ranked(rows)[:n]]

    async def score_inputs(
        self, ids: Sequence[int], qvec: Sequence[float] | None, dim: int, model: str, query: LexicalQuery | None
    ) -> list[Any]:
        """Per candidate: id, name, type, status, cosine (0 without a query vector or an entity vector),
        whether the entity has a vector of `model`, BM25 score `bm25` (0 without a query lexeme found),
        access count, days since last access."""
        lq = query if query is not None and query.terms else None
        bm25 = ENTITY_LEXICAL.score_sql("g") if lq is not None else "0::float8"
        return await self.rows(
            f"""SELECT g.id, g.name, g.entity_type, g.status,
                       COALESCE({similarity_sql(dim)}, 0) AS cos, e.owner_id IS NOT NULL AS has_vector,
                       COALESCE({bm25}, 0) AS bm25,
                       COALESCE(a.access_count, 0) AS access_count,
                       EXTRACT(EPOCH FROM (now() - COALESCE(a.last_access, g.created_at))) / 86400.0 AS days_since
                FROM graph_entities g
                LEFT JOIN graph_embeddings e ON e.owner_id = g.id AND e.model = :model
                LEFT JOIN graph_entity_access a ON a.entity_id = g.id
                WHERE g.id = ANY(CAST(:ids AS bigint[]))""",
            {**query_params(qvec), "model": model, "ids": list(ids), **({"lq": lq.vector} if lq is not None else {})},
        )

    async def cooccurrences(self, ids: Sequence[int]) -> list[tuple[int, int, int]]:
        """Co-occurrence counts among the given entities."""
        rows = await self.rows(
            """SELECT entity_a_id, entity_b_id, co_count FROM graph_cooccurrences
               WHERE entity_a_id = ANY(CAST(:ids AS bigint[])) AND entity_b_id = ANY(CAST(:ids AS bigint[]))""",
            {"ids": list(ids)},
        )
        return [(int(r["entity_a_id"]), int(r["entity_b_id"]), int(r["co_count"])) for r in rows]

    async def record_access(self, ids: Sequence[int], pairs: Sequence[tuple[int, int]]) -> None:
        """Count one access for each entity and one co-occurrence per pair (ids in canonical order)."""
        if not ids:
            return
        ordered = sorted(set(ids))
        await self.session.execute(
            text(
                """INSERT INTO graph_entity_access (entity_id, access_count, last_access)
               SELECT i, 1, now() FROM unnest(CAST(:ids AS bigint[])) AS u(i) ORDER BY i
               ON CONFLICT (entity_id) DO UPDATE SET access_count = graph_entity_access.access_count + 1,
                                                    last_access = now()"""
            ),
            {"ids": ordered},
        )
        await self.session.execute(
            text(
                """INSERT INTO graph_access_log (entity_id, access_date, access_count)
               SELECT i, CURRENT_DATE, 1 FROM unnest(CAST(:ids AS bigint[])) AS u(i) ORDER BY i
               ON CONFLICT (entity_id, access_date) DO UPDATE SET access_count = graph_access_log.access_count + 1"""
            ),
            {"ids": ordered},
        )
        if pairs:
            canon = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})
            await self.session.execute(
                text(
                    """INSERT INTO graph_cooccurrences (entity_a_id, entity_b_id, co_count, last_co)
                   SELECT a, b, 1, now() FROM unnest(CAST(:a AS bigint[]), CAST(:b AS bigint[])) AS u(a, b)
                   ORDER BY a, b
                   ON CONFLICT (entity_a_id, entity_b_id) DO UPDATE
                       SET co_count = graph_cooccurrences.co_count + 1, last_co = now()"""
                ),
                {"a": [p[0] for p in canon], "b": [p[1] for p in canon]},
            )

    async def log_event(
        self,
        project_id: uuid.UUID,
        query: str,
        query_hash: str,
        treatment: int,
        k: int,
        num_results: int,
        duration_ms: float,
        engine: str,
    ) -> int:
        """Insert a search event; returns its id."""
        event_id = await self.session.scalar(
            text(
                """INSERT INTO graph_search_events (project_id, query_text, query_hash, treatment, k_limit, num_results,
                                                duration_ms, engine_used)
               VALUES (:pid, :q, :h, :t, :k, :n, :d, :e) RETURNING event_id"""
            ),
            {
                "pid": project_id,
                "q": query,
                "h": query_hash,
                "t": treatment,
                "k": k,
                "n": num_results,
                "d": duration_ms,
                "e": engine,
            },
        )
        return int(event_id or 0)

    async def log_results(self, event_id: int, rows: list[dict[str, Any]]) -> None:
        """Insert the ranked results of an event with every score component and the baseline rank."""
        if not rows:
            return
        cols = [
            "entity_id",
            "entity_name",
            "rank",
            "limbic_score",
            "cosine_sim",
            "text_score",
            "importance",
            "temporal",
            "cooc_boost",
            "baseline_rank",
        ]
        await self.session.execute(
            text(
                f"""INSERT INTO graph_search_results (event_id, {", ".join(cols)})
                VALUES (:event_id, {", ".join(":" + c for c in cols)})"""
            ),
            [{"event_id": event_id, **{c: r[c] for c in cols}} for r in rows],
        )

    async def record_feedback(
        self, project_id: uuid.UUID, ids: Sequence[int], window_seconds: int, session_id: str | None
    ) -> int:
        """Mark entities re-opened within the window after a search that returned them as relevant: each
        entity credits the most recent search event of the window that returned it, and only that one
        (crediting every earlier search too would count one open many times)."""
        if not ids:
            return 0
        rows = await self.rows(
            """INSERT INTO graph_implicit_feedback (event_id, entity_id, entity_name, re_accessed, access_delta,
                                                    session_id)
               SELECT event_id, entity_id, entity_name, 1, delta, :sid
               FROM (SELECT DISTINCT ON (r.entity_id) r.event_id, r.entity_id, r.entity_name,
                            GREATEST(0, EXTRACT(EPOCH FROM (clock_timestamp() - ev.timestamp)))::int AS delta
                     FROM graph_search_results r JOIN graph_search_events ev ON ev.event_id = r.event_id
                     WHERE ev.project_id = :pid AND r.entity_id = ANY(CAST(:ids AS bigint[]))
                       AND ev.timestamp >= clock_timestamp() - make_interval(secs => :w)
                     ORDER BY r.entity_id, r.event_id DESC) AS latest
               ORDER BY event_id, entity_name
               ON CONFLICT (event_id, entity_name) DO NOTHING RETURNING feedback_id""",
            {"pid": project_id, "ids": list(ids), "w": float(window_seconds), "sid": session_id},
        )
        return len(rows)

    async def quality_rows(self, project_id: uuid.UUID, days: int, max_events: int = 5000) -> list[Any]:
        """event_id, treatment, rank, baseline_rank, relevant for the results of recent events."""
        return await self.rows(
            """WITH ev AS (SELECT event_id, treatment FROM graph_search_events
                           WHERE project_id = :pid AND timestamp >= now() - make_interval(days => :d)
                           ORDER BY event_id DESC LIMIT :m)
               SELECT ev.event_id, ev.treatment, r.rank, r.baseline_rank,
                      (f.feedback_id IS NOT NULL) AS relevant
               FROM ev LEFT JOIN graph_search_results r ON r.event_id = ev.event_id
               LEFT JOIN graph_implicit_feedback f ON f.event_id = r.event_id AND f.entity_name = r.entity_name
                                                   AND f.re_accessed = 1
               ORDER BY ev.event_id, r.rank""",
            {"pid": project_id, "d": days, "m": max_events},
        )

    # ---- maintenance ------------------------------------------------------------------------

    async def current_observations_for_scan(
        self, project_id: uuid.UUID, entity_id: int | None, limit: int
    ) -> list[Any]:
        """(id, entity_id, entity name, content) of current observations, grouped by entity."""
        cond = " AND g.id = :eid" if entity_id is not None else ""
        return await self.rows(
            f"""SELECT o.id, o.entity_id, g.name, o.content FROM graph_observations o
                JOIN graph_entities g ON g.id = o.entity_id
                WHERE g.project_id = :pid AND o.superseded_at IS NULL{cond}
                ORDER BY o.entity_id, o.id LIMIT :n""",
            {"pid": project_id, "eid": entity_id, "n": limit},
        )

    async def flag_duplicates(self, pairs: Sequence[tuple[int, int]]) -> int:
        """Set the similarity flag on (duplicate id, kept id) pairs; returns newly flagged rows."""
        if not pairs:
            return 0
        rows = await self.rows(
            """UPDATE graph_observations o SET similarity_flag = 1, duplicate_of = u.k
               FROM unnest(CAST(:d AS bigint[]), CAST(:k AS bigint[])) AS u(d, k)
               WHERE o.id = u.d AND (o.similarity_flag = 0 OR o.duplicate_of IS DISTINCT FROM u.k)
               RETURNING o.id""",
            {"d": [p[0] for p in pairs], "k": [p[1] for p in pairs]},
        )
        return len(rows)

    async def flagged_duplicates(self, project_id: uuid.UUID) -> list[Any]:
        """Flagged current observations whose twin is still current: id, entity_id, name, kept id, content."""
        return await self.rows(
            """SELECT o.id, o.entity_id, g.name, o.duplicate_of, o.content FROM graph_observations o
               JOIN graph_entities g ON g.id = o.entity_id
               JOIN graph_observations k ON k.id = o.duplicate_of AND k.superseded_at IS NULL
               WHERE g.project_id = :pid AND o.similarity_flag = 1 AND o.superseded_at IS NULL
               ORDER BY o.entity_id, o.id""",
            {"pid": project_id},
        )

    async def stale_access(self, project_id: uuid.UUID, days: int, factor: float, apply: bool) -> int:
        """Entities whose last access is older than `days` and still counted (decayed when `apply`)."""
        where = """a.entity_id = g.id AND g.project_id = :pid AND a.access_count > 0
                   AND a.last_access < now() - make_interval(days => :d)"""
        if not apply:
            return int(
                await self.session.scalar(
                    text(f"SELECT count(*) FROM graph_entity_access a, graph_entities g WHERE {where}"),
                    {"pid": project_id, "d": days},
                )
                or 0
            )
        rows = await self.rows(
            f"""UPDATE graph_entity_access a
                SET access_count = floor(a.access_count * CAST(:f AS double precision))::int
                FROM graph_entities g WHERE {where} RETURNING a.entity_id""",
            {"pid": project_id, "d": days, "f": factor},
        )
        return len(rows)

    # ---- reflections ------------------------------------------------------------------------

    async def insert_reflection(
        self,
        project_id: uuid.UUID,
        target_type: str,
        target_id: int | None,
        author: str,
        content: str,
        mood: str | None,
    ) -> Any:
        """Insert a reflection; returns id and created_at."""
        rows = await self.rows(
            """INSERT INTO graph_reflections (project_id, target_type, target_id, author, content, mood)
               VALUES (:pid, :tt, :tid, :a, :c, :m) RETURNING id, created_at""",
            {"pid": project_id, "tt": target_type, "tid": target_id, "a": author, "c": content, "m": mood},
        )
        return rows[0]

    async def reflections_for(self, project_id: uuid.UUID, entity_id: int, limit: int) -> list[Any]:
        """Reflections about one entity, newest first."""
        return await self.rows(
            """SELECT r.id, r.target_type, r.target_id, g.name AS target_name, r.author, r.content, r.mood, r.created_at
               FROM graph_reflections r LEFT JOIN graph_entities g ON g.id = r.target_id
               WHERE r.project_id = :pid AND r.target_type = 'entity' AND r.target_id = :e
               ORDER BY r.id DESC LIMIT :n""",
            {"pid": project_id, "e": entity_id, "n": limit},
        )

    async def search_reflections(
        self,
        project_id: uuid.UUID,
        qvec: Sequence[float] | None,
        dim: int,
        model: str,
        query: LexicalQuery,
        n: int,
        target_type: str | None,
        author: str | None,
    ) -> list[Any]:
        """Hybrid candidates with their cosine (`cos`) and BM25 score (`bm25`): the `n` nearest by vector
        (`app.core.embeddings.knn`; none without a query vector) and the `n` best by BM25 over
        `cairn_text` (`LexicalIndex.top_sql`)."""
        filters = "".join([" AND r.target_type = :tt" if target_type else "", " AND r.author = :au" if author else ""])
        scope = {"pid": project_id, "tt": target_type, "au": author}
        ids: list[int] = []
        if qvec is not None:
            knn = KnnQuery(
                REFLECTION_VECTORS, model, qvec, n, alias="r", where=f"r.project_id = :pid{filters}", params=scope
            )
            ids += [int(owner) for owner, _ in await nearest(self, knn)]
        lexical = bool(query.terms)
        if lexical:
            rare = query.rare()
            await prepare_scan(self, n)
            rows = await self.rows(
                REFLECTION_LEXICAL.top_sql("r", f"r.project_id = :pid{filters}", rare is not None),
                {**scope, "lq": query.vector, "k": n, **({"rare": rare} if rare else {})},
            )
            ids += [int(i) for i, _ in ranked(rows)[:n]]
        if not ids:
            return []
        bm25 = REFLECTION_LEXICAL.score_sql("r") if lexical else "0::float8"
        return await self.rows(
            f"""SELECT r.id, r.target_type, r.target_id, g.name AS target_name, r.author, r.content, r.mood,
                       r.created_at, COALESCE({similarity_sql(dim)}, 0) AS cos, COALESCE({bm25}, 0) AS bm25
                FROM graph_reflections r
                LEFT JOIN graph_reflection_embeddings e ON e.owner_id = r.id AND e.model = :m
                LEFT JOIN graph_entities g ON g.id = r.target_id AND r.target_type = 'entity'
                WHERE r.id = ANY(CAST(:ids AS bigint[]))""",
            {"m": model, "ids": sorted(set(ids)), **query_params(qvec), **({"lq": query.vector} if lexical else {})},
        )

    async def reflection_query(self, query: str) -> LexicalQuery:
        """The query's lexemes under `cairn_text` found in reflections, with their idf."""
        return await lexical_query(self, REFLECTION_LEXICAL, query)
