"""Every SQL statement of the memory store."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import text

from app.core.embeddings.knn import KnnQuery, model_literal, nearest, prepare_scan, query_params, similarity_sql
from app.core.embeddings.lexical import LexicalIndex, LexicalQuery, lexical_query, ranked
from app.core.embeddings.vectors import EmbeddedRows
from app.core.repository import Repository
from app.memory.conversation import Turn
from app.memory.models import MemoryCollection

MEMORY_TARGET = "memory"  # the embedding queue's name for memory (chunk, thought, summary) vectors
MEMORY_VECTORS = EmbeddedRows(
    MEMORY_TARGET, "memories", "memory_embeddings", text="content", key_type="uuid", owner="memory_id"
)
MEMORY_LEXICAL = LexicalIndex("memories")  # tsv (english) and lexical (bm25_document), memory_0003

Facet = Literal["type", "memory_type", "topics", "people"]


def _elements(key: str) -> str:
    return (
        f"SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(m.metadata->'{key}') = 'array' "
        f"THEN m.metadata->'{key}' ELSE '[]'::jsonb END)"
    )


_FACETS: dict[str, str] = {
    "type": "SELECT m.metadata->>'type'",
    "memory_type": "SELECT m.memory_type",
    "topics": _elements("topics"),
    "people": _elements("people"),
}


@dataclass
class Scope:
    """Filters of a search or listing; every one of them becomes SQL."""

    project_id: uuid.UUID | None = None
    collection_id: uuid.UUID | None = None
    memory_type: str | None = None
    tags: list[str] | None = None
    start: datetime | None = None
    end: datetime | None = None
    include_archived: bool = False
    exclude_id: uuid.UUID | None = None
    thought_type: str | None = None
    topic: str | None = None
    topic_nocase: str | None = None
    person: str | None = None
    days: int | None = None
    kinds: list[str] | None = None
    ids: list[uuid.UUID] | None = None
    source_prefix: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def where(self, alias: str = "m") -> tuple[str, dict[str, Any]]:
        """The WHERE clause (without the keyword) and its parameters."""
        a = alias
        conds: list[str] = ["TRUE"]
        p: dict[str, Any] = {}
        if self.project_id is not None:
            conds.append(f"{a}.project_id = :f_project")
            p["f_project"] = self.project_id
        if self.collection_id is not None:
            conds.append(f"{a}.collection_id = :f_collection")
            p["f_collection"] = self.collection_id
        if self.memory_type is not None:
            conds.append(f"{a}.memory_type = :f_type")
            p["f_type"] = self.memory_type
        if self.tags:
            conds.append(f"{a}.tags && CAST(:f_tags AS text[])")
            p["f_tags"] = list(self.tags)
        if self.start is not None:
            conds.append(f"{a}.created_at >= :f_start")
            p["f_start"] = self.start
        if self.end is not None:
            conds.append(f"{a}.created_at <= :f_end")
            p["f_end"] = self.end
        if not self.include_archived:
            conds.append(f"NOT {a}.archived")
        if self.exclude_id is not None:
            conds.append(f"{a}.id <> :f_exclude")
            p["f_exclude"] = self.exclude_id
        if self.thought_type is not None:
            conds.append(f"{a}.metadata @> jsonb_build_object('type', CAST(:f_ttype AS text))")
            p["f_ttype"] = self.thought_type
        if self.topic is not None:
            conds.append(f"{a}.metadata @> jsonb_build_object('topics', jsonb_build_array(CAST(:f_topic AS text)))")
            p["f_topic"] = self.topic
        if self.topic_nocase is not None:
            conds.append(
                f"EXISTS (SELECT 1 FROM jsonb_array_elements_text(CASE WHEN jsonb_typeof({a}.metadata -> 'topics')"
                f" = 'array' THEN {a}.metadata -> 'topics' END) AS t(v)"
                " WHERE lower(t.v) = lower(CAST(:f_topic_nc AS text)))"
            )
            p["f_topic_nc"] = self.topic_nocase
        if self.person is not None:
            conds.append(f"{a}.metadata @> jsonb_build_object('people', jsonb_build_array(CAST(:f_person AS text)))")
            p["f_person"] = self.person
        if self.days is not None:
            conds.append(f"{a}.created_at >= now() - make_interval(days => :f_days)")
            p["f_days"] = self.days
        if self.kinds:
            conds.append(f"{a}.kind = ANY(CAST(:f_kinds AS text[]))")
            p["f_kinds"] = list(self.kinds)
        if self.ids is not None:
            conds.append(f"{a}.id = ANY(CAST(:f_ids AS uuid[]))")
            p["f_ids"] = list(self.ids)
        if self.source_prefix is not None:
            conds.append(f"starts_with({a}.source_uri, :f_source)")
            p["f_source"] = self.source_prefix
        return " AND ".join(conds), p


MEMORY_COLUMNS = """m.id, m.content, m.kind, m.memory_type, m.tags, m.metadata, m.source_uri, m.document_id,
    m.chunk_index, m.archived, m.created_at, m.updated_at, m.project_id, p.name AS project,
    c.name AS collection"""

MEMORY_FROM = "memories m JOIN projects p ON p.id = m.project_id JOIN memory_collections c ON c.id = m.collection_id"


class MemoryRepository(Repository):
    """Collections, memories, embeddings and counters."""

    # Collections -------------------------------------------------------------------------------

    async def get_collection(self, name: str) -> MemoryCollection | None:
        """The collection called `name`."""
        from sqlalchemy import select

        return await self.session.scalar(select(MemoryCollection).where(MemoryCollection.name == name))

    async def ensure_collection(self, name: str, model: str, size: int) -> tuple[MemoryCollection, bool]:
        """The collection called `name`, created with `size` when missing; returns (row, created)."""
        row = await self.get_collection(name)
        if row is not None:
            return row, False
        created = await self.dicts(
            "INSERT INTO memory_collections (id, name, model, vector_size) VALUES (:id, :name, :model, :size) "
            "ON CONFLICT (name) DO NOTHING RETURNING id",
            {"id": uuid.uuid4(), "name": name, "model": model, "size": size},
        )
        row = await self.get_collection(name)
        assert row is not None
        return row, bool(created)

    async def resize_collection(self, collection_id: uuid.UUID, model: str, size: int) -> None:
        """Change a collection's vector size (and the model it is meant for)."""
        await self.session.execute(
            text(
                "UPDATE memory_collections SET vector_size = :size, model = :model, updated_at = now() WHERE id = :id"
            ),
            {"size": size, "model": model, "id": collection_id},
        )

    async def clear_collection(self, collection_id: uuid.UUID) -> None:
        """Delete every memory of a collection (vectors go with them)."""
        await self.session.execute(text("DELETE FROM memories WHERE collection_id = :c"), {"c": collection_id})

    async def sources_of(self, collection_id: uuid.UUID) -> dict[uuid.UUID, str | None]:
        """`source_uri` of every memory of a collection, by memory id."""
        rows = await self.session.execute(
            text("SELECT id, source_uri FROM memories WHERE collection_id = :c"), {"c": collection_id}
        )
        return {r.id: r.source_uri for r in rows}

    async def delete_collection(self, collection_id: uuid.UUID) -> None:
        """Delete a collection; its memories, vectors and summaries go with it (cascade)."""
        await self.session.execute(text("DELETE FROM memory_collections WHERE id = :id"), {"id": collection_id})

    async def collection_names(self, project_id: uuid.UUID | None = None) -> list[str]:
        """Every collection name, sorted; with `project_id`, those holding memories of that project."""
        if project_id is None:
            return [r["name"] for r in await self.dicts("SELECT name FROM memory_collections ORDER BY name")]
        rows = await self.dicts(
            "SELECT c.name FROM memory_collections c WHERE EXISTS (SELECT 1 FROM memories m "
            "WHERE m.project_id = :p AND m.collection_id = c.id) ORDER BY c.name",
            {"p": project_id},
        )
        return [r["name"] for r in rows]

    # Writing memories --------------------------------------------------------------------------

    async def lock_scope(self, project_id: uuid.UUID, collection_id: uuid.UUID) -> None:
        """Serialise pushes into one project and collection until the transaction ends (dedupe stays exact)."""
        await self.session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 7311))"),
            {"k": f"memory:{project_id}:{collection_id}"},
        )

    async def existing_hashes(self, project_id: uuid.UUID, collection_id: uuid.UUID, hashes: Iterable[str]) -> set[str]:
        """Which of `hashes` some memory of the project and collection already has."""
        rows = await self.dicts(
            "SELECT DISTINCT content_hash FROM memories WHERE project_id = :p AND collection_id = :c "
            "AND content_hash = ANY(CAST(:h AS text[]))",
            {"p": project_id, "c": collection_id, "h": list(set(hashes))},
        )
        return {r["content_hash"] for r in rows}

    async def last_chunks(self, document_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
        """The highest chunk index of each of `document_ids` (documents with no chunk are absent)."""
        if not document_ids:
            return {}
        rows = await self.dicts(
            "SELECT document_id, max(chunk_index) AS last FROM memories WHERE document_id = ANY(:ids) "
            "AND kind = 'chunk' GROUP BY document_id",
            {"ids": list(document_ids)},
        )
        return {r["document_id"]: int(r["last"]) for r in rows if r["last"] is not None}

    async def chunks_of_source(
        self, project_id: uuid.UUID, collection_id: uuid.UUID, source_uri: str
    ) -> list[dict[str, Any]]:
        """The chunks previously pushed from `source_uri`, by chunk index."""
        return await self.dicts(
            "SELECT id, chunk_index, content_hash, document_id FROM memories WHERE project_id = :p "
            "AND collection_id = :c AND source_uri = :s AND kind = 'chunk' ORDER BY chunk_index, created_at",
            {"p": project_id, "c": collection_id, "s": source_uri},
        )

    async def insert_memories(self, rows: list[dict[str, Any]]) -> None:
        """Insert memories (dicts with every column the statement names)."""
        if not rows:
            return
        await self.session.execute(
            text(
                "INSERT INTO memories (id, project_id, collection_id, kind, memory_type, content, content_hash, tags, "
                "metadata, source_uri, document_id, chunk_index, summary_key) VALUES (:id, :project_id, "
                ":collection_id, :kind, :memory_type, :content, :content_hash, CAST(:tags AS text[]), "
                "CAST(:metadata AS jsonb), :source_uri, :document_id, :chunk_index, :summary_key)"
            ),
            rows,
        )

    async def replace_chunk(
        self,
        memory_id: uuid.UUID,
        content: str,
        content_hash: str,
        memory_type: str,
        tags: list[str],
        document_id: uuid.UUID,
    ) -> None:
        """Give an existing chunk new text (its old vectors are dropped: they described the old text)."""
        await self.session.execute(
            text(
                "UPDATE memories SET content = :content, content_hash = :h, memory_type = :t, "
                "tags = CAST(:tags AS text[]), document_id = :d, archived = false, updated_at = now() WHERE id = :id"
            ),
            {"content": content, "h": content_hash, "t": memory_type, "tags": tags, "d": document_id, "id": memory_id},
        )
        await self.session.execute(text("DELETE FROM memory_embeddings WHERE memory_id = :id"), {"id": memory_id})

    async def retag_chunks(
        self, ids: list[uuid.UUID], memory_type: str, tags: list[str], document_id: uuid.UUID
    ) -> None:
        """Unchanged chunks of a re-pushed source take the new type, tags and document id."""
        if ids:
            await self.session.execute(
                text(
                    "UPDATE memories SET memory_type = :t, tags = CAST(:tags AS text[]), document_id = :d "
                    "WHERE id = ANY(CAST(:ids AS uuid[]))"
                ),
                {"t": memory_type, "tags": tags, "d": document_id, "ids": ids},
            )

    async def delete_memories(self, ids: list[uuid.UUID]) -> int:
        """Delete memories (their vectors go with them)."""
        if not ids:
            return 0
        result = await self.session.execute(
            text("DELETE FROM memories WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    async def upsert_summary(self, row: dict[str, Any]) -> uuid.UUID:
        """Insert a summary memory, or update the one with the same summary key; returns its id."""
        result = await self.dicts(
            "INSERT INTO memories (id, project_id, collection_id, kind, memory_type, content, content_hash, tags, "
            "metadata, summary_key) VALUES (:id, :project_id, :collection_id, 'summary', 'semantic', :content, "
            ":content_hash, CAST(:tags AS text[]), CAST(:metadata AS jsonb), :summary_key) "
            "ON CONFLICT (project_id, collection_id, summary_key) WHERE summary_key IS NOT NULL DO UPDATE SET "
            "content = EXCLUDED.content, content_hash = EXCLUDED.content_hash, tags = EXCLUDED.tags, "
            "metadata = EXCLUDED.metadata, archived = false, updated_at = now() RETURNING id",
            row,
        )
        return uuid.UUID(str(result[0]["id"]))

    async def bump_ingest(self, project_id: uuid.UUID, documents: int, chunks: int, chunk_size: int) -> None:
        """Add to the ingestion counters of one project."""
        await self.session.execute(
            text(
                "INSERT INTO memory_project_ingest_stats (project_id, documents_indexed, chunks_indexed, "
                "last_chunk_size) VALUES (:p, :d, :c, :s) ON CONFLICT (project_id) DO UPDATE SET "
                "documents_indexed = memory_project_ingest_stats.documents_indexed + EXCLUDED.documents_indexed, "
                "chunks_indexed = memory_project_ingest_stats.chunks_indexed + EXCLUDED.chunks_indexed, "
                "last_chunk_size = EXCLUDED.last_chunk_size, updated_at = now()"
            ),
            {"p": project_id, "d": documents, "c": chunks, "s": chunk_size},
        )

    async def ingest_stats(self, project_id: uuid.UUID | None = None) -> dict[str, Any]:
        """The ingestion counters of one project, or of every project (plus the server-wide counters
        kept before they were per project) when `project_id` is None; zeros before the first push."""
        if project_id is not None:
            rows = await self.dicts(
                "SELECT documents_indexed, chunks_indexed, last_chunk_size FROM memory_project_ingest_stats "
                "WHERE project_id = :p",
                {"p": project_id},
            )
        else:
            rows = await self.dicts(
                "WITH s AS (SELECT documents_indexed, chunks_indexed, last_chunk_size, updated_at "
                "FROM memory_project_ingest_stats UNION ALL SELECT documents_indexed, chunks_indexed, "
                "last_chunk_size, updated_at FROM memory_ingest_stats WHERE id = 1) "
                "SELECT sum(documents_indexed) AS documents_indexed, sum(chunks_indexed) AS chunks_indexed, "
                "(SELECT last_chunk_size FROM s ORDER BY updated_at DESC LIMIT 1) AS last_chunk_size FROM s "
                "HAVING count(*) > 0"
            )
        return rows[0] if rows else {"documents_indexed": 0, "chunks_indexed": 0, "last_chunk_size": None}

    # Reading memories --------------------------------------------------------------------------

    async def fetch(self, ids: Sequence[uuid.UUID], model: str) -> dict[uuid.UUID, dict[str, Any]]:
        """Memories by id, with project and collection names and whether `model` has a vector of them."""
        if not ids:
            return {}
        rows = await self.dicts(
            f"SELECT {MEMORY_COLUMNS}, EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.memory_id = m.id "
            f"AND e.model = :model) AS has_embedding FROM {MEMORY_FROM} WHERE m.id = ANY(CAST(:ids AS uuid[]))",
            {"ids": list(ids), "model": model},
        )
        return {r["id"]: r for r in rows}

    async def list_memories(
        self, scope: Scope, model: str, limit: int, offset: int = 0, oldest_first: bool = False
    ) -> list[dict[str, Any]]:
        """Memories in scope, newest first (or oldest first); one push's chunks, which share a time, in
        document order (reversed when newest first), so a window of them is contiguous."""
        where, params = scope.where()
        order = "ASC" if oldest_first else "DESC"
        return await self.dicts(
            f"SELECT {MEMORY_COLUMNS}, EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.memory_id = m.id "
            f"AND e.model = :model) AS has_embedding FROM {MEMORY_FROM} WHERE {where} "
            f"ORDER BY m.created_at {order}, m.chunk_index {order} NULLS LAST, m.id LIMIT :limit OFFSET :offset",
            {**params, "model": model, "limit": limit, "offset": offset},
        )

    async def count(self, scope: Scope) -> int:
        """Number of memories in scope."""
        where, params = scope.where()
        rows = await self.dicts(f"SELECT count(*) AS n FROM memories m WHERE {where}", params)
        return int(rows[0]["n"])

    async def update_memory(self, memory_id: uuid.UUID, values: dict[str, Any]) -> None:
        """Set columns of one memory (content, content_hash, metadata, project_id, archived)."""
        sets = []
        params: dict[str, Any] = {"id": memory_id}
        for column, value in values.items():
            cast = "CAST(:metadata AS jsonb)" if column == "metadata" else f":{column}"
            sets.append(f"{column} = {cast}")
            params[column] = value
        await self.session.execute(
            text(f"UPDATE memories SET {', '.join(sets)}, updated_at = now() WHERE id = :id"), params
        )

    async def drop_vectors(self, memory_id: uuid.UUID) -> None:
        """Forget every vector of a memory whose text changed."""
        await self.session.execute(text("DELETE FROM memory_embeddings WHERE memory_id = :id"), {"id": memory_id})

    async def vector_of(self, memory_id: uuid.UUID, model: str) -> list[float] | None:
        """The stored vector of one memory under `model`."""
        rows = await self.dicts(
            "SELECT embedding::text AS v FROM memory_embeddings WHERE memory_id = :id AND model = :model",
            {"id": memory_id, "model": model},
        )
        if not rows:
            return None
        return [float(x) for x in rows[0]["v"].strip("[]").split(",")]

    async def project_names(self, only: str | None = None) -> list[str]:
        """Distinct project names that hold memories."""
        sql = "SELECT DISTINCT p.name FROM projects p WHERE EXISTS (SELECT 1 FROM memories m WHERE m.project_id = p.id)"
        params: dict[str, Any] = {}
        if only is not None:
            sql += " AND p.name = :only"
            params["only"] = only
        return [r["name"] for r in await self.dicts(sql + " ORDER BY p.name LIMIT 1000", params)]

    async def project_tags(self, project_id: uuid.UUID, cap: int = 1000) -> list[str]:
        """Distinct tags used in one project."""
        rows = await self.dicts(
            "SELECT DISTINCT t FROM memories m, unnest(m.tags) AS t WHERE m.project_id = :p ORDER BY t LIMIT :cap",
            {"p": project_id, "cap": cap},
        )
        return [r["t"] for r in rows]

    async def facet_counts(self, scope: Scope, limit: int = 20) -> tuple[int, int, dict[str, list[tuple[str, int]]]]:
        """In one read of the table: how many memories are in `scope` (archived ones included or not,
        as the scope says), how many are not archived, and per facet (a thought's `type`, the memory
        type, each element of the `topics` / `people` metadata lists) the most frequent values among
        those not archived, with their counts. Only memories with metadata are kept for the metadata
        facets, so the kept rows stay small whatever the table holds."""
        where, params = scope.where()
        metadata_facets = [
            f"(SELECT '{facet}' AS facet, v, count(*) AS n FROM s m, LATERAL ({expression}) AS x(v) "
            "WHERE NOT m.archived AND m.metadata IS NOT NULL AND v IS NOT NULL "
            "GROUP BY v ORDER BY n DESC, v LIMIT :lim)"
            for facet, expression in _FACETS.items()
            if facet != "memory_type"
        ]
        rows = await self.dicts(
            "WITH s AS MATERIALIZED (SELECT m.archived, m.memory_type, "
            "CASE WHEN m.metadata <> '{}'::jsonb THEN m.metadata END AS metadata "
            f"FROM memories m WHERE {where}), "
            "t AS (SELECT memory_type, count(*) AS total, count(*) FILTER (WHERE NOT archived) AS active "
            "FROM s GROUP BY memory_type) "
            "SELECT 'total' AS facet, NULL AS v, coalesce(sum(total), 0) AS n FROM t "
            "UNION ALL SELECT 'active', NULL, coalesce(sum(active), 0) FROM t "
            "UNION ALL (SELECT 'memory_type', memory_type, active FROM t WHERE active > 0 AND memory_type IS NOT NULL "
            "ORDER BY active DESC, memory_type LIMIT :lim) UNION ALL " + " UNION ALL ".join(metadata_facets),
            {**params, "lim": limit},
        )
        totals = {r["facet"]: int(r["n"]) for r in rows if r["v"] is None}
        facets: dict[str, list[tuple[str, int]]] = {facet: [] for facet in _FACETS}
        for r in rows:
            if r["v"] is not None:
                facets[r["facet"]].append((str(r["v"]), int(r["n"])))
        return totals["total"], totals["active"], facets

    # Search ------------------------------------------------------------------------------------

    async def has_vectors(self, scope: Scope, model: str) -> bool:
        """Whether any memory in scope has a vector of `model`."""
        where, params = scope.where()
        rows = await self.dicts(
            f"SELECT EXISTS (SELECT 1 FROM memory_embeddings e JOIN memories m ON m.id = e.memory_id "
            f"WHERE e.model = {model_literal(model)} AND {where}) AS ok",
            params,
        )
        return bool(rows[0]["ok"])

    async def semantic(
        self, scope: Scope, model: str, vector: Sequence[float], k: int, ef_search: int, exact: bool = False
    ) -> list[tuple[uuid.UUID, float]]:
        """The `k` memories in scope nearest to `vector` (cosine), filters applied inside the scan.

        `app.core.embeddings.knn`: the model's partial HNSW index with iterative scans (`ef_search` is the
        setting), so that filtered searches still return `k` rows; `exact` forces a sequential scan.
        """
        where, params = scope.where()
        query = KnnQuery(MEMORY_VECTORS, model, vector, k, alias="m", where=where, params=params)
        return await nearest(self, query, ef_search=ef_search, exact=exact)

    async def lexical(self, scope: Scope, query: str, terms: LexicalQuery, k: int) -> list[tuple[uuid.UUID, float]]:
        """The `k` memories in scope matching a query in web-search syntax (quotes, `-word`, `or`) under
        the `english` configuration, ranked by their BM25 score for `terms`, best first."""
        where, params = scope.where()
        score = MEMORY_LEXICAL.score_sql("m") if terms.terms else "0::float8"
        rows = await self.dicts(
            f"SELECT m.id, {score} AS score FROM memories m, websearch_to_tsquery('english', :tsq) AS q "
            f"WHERE m.tsv @@ q AND {where} ORDER BY score DESC, m.created_at DESC LIMIT :k",
            {**params, "tsq": query, "k": k, **({"lq": terms.vector} if terms.terms else {})},
        )
        return [(r["id"], float(r["score"])) for r in rows]

    async def lexical_query(self, query: str) -> LexicalQuery:
        """The query's stems found in memories, with their idf (`app.core.embeddings.lexical`)."""
        return await lexical_query(self, MEMORY_LEXICAL, query)

    async def bm25(self, scope: Scope, query: LexicalQuery, k: int, ef_search: int) -> list[tuple[uuid.UUID, float]]:
        """The `k` memories in scope with the best BM25 score for `query`, best first; memories sharing
        no lexeme with the query are left out. One scan of the inner-product HNSW index of
        `memories.lexical` (iterative, so that filters keep `k` rows), plus the memories holding a rare
        query lexeme through the GIN index (`LexicalIndex.top_sql`)."""
        if not query.terms:
            return []
        where, params = scope.where()
        rare = query.rare()
        await prepare_scan(self, k, setting=ef_search)
        rows = await self.dicts(
            MEMORY_LEXICAL.top_sql("m", where, rare is not None),
            {**params, "lq": query.vector, "k": k, **({"rare": rare} if rare else {})},
        )
        return ranked(rows)[:k]

    async def signals(
        self, ids: Sequence[uuid.UUID], query: LexicalQuery | None, model: str, vector: Sequence[float] | None
    ) -> dict[uuid.UUID, tuple[float | None, float]]:
        """Per memory of `ids`: its cosine to `vector` under `model` (None without a stored vector or a
        query vector) and its BM25 score for `query` (0 without one); the signals a candidate found by
        one ranking lacks."""
        if not ids:
            return {}
        dim = len(vector) if vector is not None else 0
        cosine = f"{similarity_sql(dim)}" if vector is not None else "NULL::float8"
        join = (
            f"LEFT JOIN memory_embeddings e ON e.memory_id = m.id AND e.model = {model_literal(model)} "
            f"AND e.dim = {dim} "
            if vector is not None
            else ""
        )
        score = MEMORY_LEXICAL.score_sql("m") if query is not None and query.terms else "0::float8"
        rows = await self.dicts(
            f"SELECT m.id, {cosine} AS cosine, {score} AS score FROM memories m {join}WHERE m.id = ANY(:ids)",
            {
                "ids": list(ids),
                **(query_params(vector) if vector is not None else {}),
                **({"lq": query.vector} if query is not None and query.terms else {}),
            },
        )
        return {r["id"]: (None if r["cosine"] is None else float(r["cosine"]), float(r["score"] or 0.0)) for r in rows}

    async def turns(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Turn]:
        """Per memory of `ids`: its `speaker` metadata (None without one) and its time, what the
        conversation cues of a search look at (`app.memory.conversation`)."""
        if not ids:
            return {}
        rows = await self.dicts(
            "SELECT id, metadata->>'speaker' AS speaker, created_at FROM memories WHERE id = ANY(:ids)",
            {"ids": list(ids)},
        )
        return {r["id"]: Turn(r["speaker"], r["created_at"]) for r in rows}

    # Backfill ----------------------------------------------------------------------------------

    async def missing_embeddings(
        self,
        model: str,
        project_id: uuid.UUID | None,
        include_archived: bool,
        older_than_days: int,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[dict[str, Any]]:
        """Memories without a vector of `model`, oldest first (keyset paging with `after`)."""
        conds = ["e.memory_id IS NULL"]
        params: dict[str, Any] = {"model": model, "limit": limit}
        if project_id is not None:
            conds.append("m.project_id = :p")
            params["p"] = project_id
        if not include_archived:
            conds.append("NOT m.archived")
        if older_than_days > 0:
            conds.append("m.created_at <= now() - make_interval(days => :days)")
            params["days"] = older_than_days
        if after is not None:
            conds.append("(m.created_at, m.id) > (:after_t, :after_id)")
            params["after_t"], params["after_id"] = after
        return await self.dicts(
            "SELECT m.id, m.content, m.created_at FROM memories m LEFT JOIN memory_embeddings e "
            "ON e.memory_id = m.id AND e.model = :model WHERE "
            + " AND ".join(conds)
            + " ORDER BY m.created_at, m.id LIMIT :limit",
            params,
        )

    async def count_missing(self, model: str, project_id: uuid.UUID | None, include_archived: bool = False) -> int:
        """Number of memories without a vector of `model`."""
        conds = ["NOT EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.memory_id = m.id AND e.model = :model)"]
        params: dict[str, Any] = {"model": model}
        if project_id is not None:
            conds.append("m.project_id = :p")
            params["p"] = project_id
        if not include_archived:
            conds.append("NOT m.archived")
        rows = await self.dicts("SELECT count(*) AS n FROM memories m WHERE " + " AND ".join(conds), params)
        return int(rows[0]["n"])
