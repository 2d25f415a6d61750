"""SQL of the graph: entities, observations, relations, embeddings and listings."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from app.core.embeddings.vectors import EmbeddedRows
from app.core.repository import Repository

ADVISORY_CLASS = 0x6772  # "gr": the advisory-lock class of graph entity names
ENTITY_TARGET = "graph_entity"  # the embedding queue's name for entity vectors
REFLECTION_TARGET = "graph_reflection"


def like_pattern(query: str) -> str:
    """A LIKE pattern matching `query` as a literal substring."""
    escaped = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


@dataclass
class EntityRow:
    """The fields of an entity row that the services use."""

    id: int
    name: str
    entity_type: str
    status: str


class GraphRepository(Repository):
    """Entities, observations, relations and their embeddings within one project."""

    # ---- entities ---------------------------------------------------------------------------

    async def insert_entities(
        self, project_id: uuid.UUID, rows: list[tuple[str, str, str]], observations: Sequence[Sequence[str]]
    ) -> list[EntityRow]:
        """Insert (name, type, status) rows in the given order, each with its observations (distinct
        texts, in order); existing names are left alone, observations included. One statement.

        A new entity is written once, its searchable observation text included (`obs_text`, what
        `refresh_text` would make of those observations), instead of inserted and then updated.

        Concurrent inserts of overlapping names first take per-name advisory locks in one global
        order, so they queue instead of deadlocking, and ids still follow the caller's order."""
        if not rows:
            return []
        result = await self.rows(
            # `locks` is aggregated in full before `ins` yields its first row, so every lock is held
            # before anything is inserted; data-modifying CTEs run once, to completion.
            """WITH locks AS MATERIALIZED (
                   SELECT count(pg_advisory_xact_lock(:cls, k)) AS held FROM (
                       SELECT DISTINCT hashtext(CAST(:pid_text AS text) || '/' || n) AS k
                       FROM unnest(CAST(:names AS text[])) AS u(n) ORDER BY k) s),
               ins AS (
                   INSERT INTO graph_entities (project_id, name, entity_type, status, obs_text)
                   SELECT :pid, n, t, s, o FROM locks, unnest(CAST(:names AS text[]), CAST(:types AS text[]),
                                                              CAST(:statuses AS text[]), CAST(:obs AS text[]))
                                                       WITH ORDINALITY AS u(n, t, s, o, i)
                   WHERE locks.held >= 0
                   ORDER BY i
                   ON CONFLICT (project_id, name) DO NOTHING
                   RETURNING id, name, entity_type, status),
               added AS (
                   INSERT INTO graph_observations (entity_id, content, kind)
                   SELECT ins.id, x.c, 'generic'
                   FROM unnest(CAST(:obs_names AS text[]), CAST(:obs_texts AS text[])) WITH ORDINALITY AS x(n, c, i)
                   JOIN ins ON ins.name = x.n
                   ORDER BY x.i
                   ON CONFLICT (entity_id, md5(content)) WHERE superseded_at IS NULL DO NOTHING)
               SELECT id, name, entity_type, status FROM ins""",
            {
                "cls": ADVISORY_CLASS,
                "pid": project_id,
                "pid_text": str(project_id),
                "names": [r[0] for r in rows],
                "types": [r[1] for r in rows],
                "statuses": [r[2] for r in rows],
                "obs": [self.obs_text(o) for o in observations],
                "obs_names": [r[0] for r, obs in zip(rows, observations, strict=True) for _ in obs],
                "obs_texts": [o for obs in observations for o in obs],
            },
        )
        by_name = {r["name"]: EntityRow(**r) for r in result}
        return [by_name[r[0]] for r in rows if r[0] in by_name]

    async def get_entities(self, project_id: uuid.UUID, names: Sequence[str], *, lock: bool = False) -> list[EntityRow]:
        """Entities by name (locked in id order when `lock`, so concurrent writers queue up)."""
        if not names:
            return []
        sql = (
            "SELECT id, name, entity_type, status FROM graph_entities "
            "WHERE project_id = :pid AND name = ANY(CAST(:names AS text[])) ORDER BY id"
        )
        if lock:
            sql += " FOR UPDATE"
        return [EntityRow(**r) for r in await self.rows(sql, {"pid": project_id, "names": list(set(names))})]

    async def lock_ids(self, ids: Sequence[int]) -> None:
        """Lock entity rows in id order."""
        if ids:
            await self.rows(
                "SELECT id FROM graph_entities WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id FOR UPDATE",
                {"ids": sorted(set(ids))},
            )

    async def delete_entities(self, project_id: uuid.UUID, names: Sequence[str]) -> list[str]:
        """Delete entities; observations, relations, embeddings and counters go with them (cascade)."""
        rows = await self.rows(
            "DELETE FROM graph_entities WHERE project_id = :pid AND name = ANY(CAST(:names AS text[])) RETURNING name",
            {"pid": project_id, "names": list(names)},
        )
        return [r["name"] for r in rows]

    async def set_status(self, entity_id: int, status: str) -> None:
        """Change an entity's status."""
        await self.session.execute(
            text("UPDATE graph_entities SET status = :s, updated_at = now() WHERE id = :id"),
            {"s": status, "id": entity_id},
        )

    async def entity_info(self, entity_id: int) -> Any:
        """name, entity_type, status, created_at, updated_at of one entity."""
        rows = await self.rows(
            "SELECT name, entity_type, status, created_at, updated_at FROM graph_entities WHERE id = :id",
            {"id": entity_id},
        )
        return rows[0]

    # ---- observations -----------------------------------------------------------------------

    async def insert_observations(
        self, pairs: Sequence[tuple[int, str]], kind: str, supersedes: int | None = None
    ) -> list[tuple[int, int, str]]:
        """Add current observations (entity id, text); a text the entity already holds is skipped.
        Returns (id, entity id, content) of the rows added."""
        if not pairs:
            return []
        rows = await self.rows(
            """INSERT INTO graph_observations (entity_id, content, kind, supersedes)
               SELECT e, c, :kind, :sup FROM unnest(CAST(:e AS bigint[]), CAST(:c AS text[]))
                                             WITH ORDINALITY AS u(e, c, i)
               ORDER BY i
               ON CONFLICT (entity_id, md5(content)) WHERE superseded_at IS NULL DO NOTHING
               RETURNING id, entity_id, content""",
            {"e": [p[0] for p in pairs], "c": [p[1] for p in pairs], "kind": kind, "sup": supersedes},
        )
        return [(int(r["id"]), int(r["entity_id"]), str(r["content"])) for r in rows]

    async def delete_observations(self, entity_id: int, contents: Sequence[str]) -> int:
        """Delete the entity's observations with these texts; returns how many rows went."""
        rows = await self.rows(
            "DELETE FROM graph_observations WHERE entity_id = :eid AND "
            "content = ANY(CAST(:c AS text[])) AND superseded_at IS NULL RETURNING id",
            {"eid": entity_id, "c": list(contents)},
        )
        return len(rows)

    async def observation(self, entity_id: int, *, obs_id: int | None, content: str | None) -> Any:
        """One current observation by id or exact text (None when absent)."""
        if obs_id is not None:
            rows = await self.rows(
                "SELECT * FROM graph_observations WHERE entity_id = :eid AND id = :id", {"eid": entity_id, "id": obs_id}
            )
        else:
            rows = await self.rows(
                "SELECT * FROM graph_observations WHERE entity_id = :eid AND content = :c "
                "AND superseded_at IS NULL ORDER BY id LIMIT 1",
                {"eid": entity_id, "c": content},
            )
        return rows[0] if rows else None

    async def mark_superseded(self, obs_ids: Sequence[int]) -> None:
        """Mark observations as superseded now."""
        await self.session.execute(
            text(
                "UPDATE graph_observations SET superseded_at = now() "
                "WHERE id = ANY(CAST(:ids AS bigint[])) AND superseded_at IS NULL"
            ),
            {"ids": list(obs_ids)},
        )

    async def observation_rows(self, ids: Sequence[int]) -> list[Any]:
        """Full observation rows by id."""
        return await self.rows(
            "SELECT * FROM graph_observations WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id", {"ids": list(ids)}
        )

    async def history(self, entity_id: int, limit: int) -> list[Any]:
        """Observations of an entity, superseded ones included, oldest first."""
        return await self.rows(
            "SELECT * FROM graph_observations WHERE entity_id = :eid ORDER BY id LIMIT :n",
            {"eid": entity_id, "n": limit},
        )

    async def current_observations(
        self, entity_ids: Sequence[int], per_entity: int
    ) -> dict[int, tuple[list[str], int]]:
        """Up to `per_entity` current observation texts per entity (oldest first) and the full count."""
        out: dict[int, tuple[list[str], int]] = {int(i): ([], 0) for i in entity_ids}
        if not entity_ids:
            return out
        rows = await self.rows(
            """SELECT entity_id, content, n FROM (
                 SELECT entity_id, content, id, row_number() OVER w AS rn, count(*) OVER (PARTITION BY entity_id) AS n
                 FROM graph_observations WHERE entity_id = ANY(CAST(:ids AS bigint[])) AND superseded_at IS NULL
                 WINDOW w AS (PARTITION BY entity_id ORDER BY id)) s
               WHERE rn <= :k OR :k = 0 ORDER BY entity_id, id""",
            {"ids": list(entity_ids), "k": per_entity},
        )
        for r in rows:
            texts, _ = out[int(r["entity_id"])]
            if per_entity > 0:
                texts.append(r["content"])
            out[int(r["entity_id"])] = (texts, int(r["n"]))
        return out

    @staticmethod
    def obs_text(observations: Sequence[str]) -> str:
        """The searchable observation text of current observations in id order (as `refresh_text` makes it)."""
        return " | ".join(observations)

    async def refresh_text(self, entity_ids: Sequence[int]) -> list[tuple[int, str]]:
        """Rebuild the searchable observation text of entities; returns (id, embedding snapshot)."""
        if not entity_ids:
            return []
        rows = await self.rows(
            """UPDATE graph_entities g SET updated_at = now(), obs_text = COALESCE((
                   SELECT string_agg(o.content, ' | ' ORDER BY o.id) FROM graph_observations o
                   WHERE o.entity_id = g.id AND o.superseded_at IS NULL), '')
               WHERE g.id = ANY(CAST(:ids AS bigint[]))
               RETURNING g.id, g.name, g.entity_type, g.obs_text""",
            {"ids": sorted(set(entity_ids))},
        )
        return [(int(r["id"]), snapshot_text(r["name"], r["entity_type"], r["obs_text"])) for r in rows]

    # ---- relations --------------------------------------------------------------------------

    async def insert_relations_by_name(
        self, project_id: uuid.UUID, rows: list[tuple[str, str, str, str | None]]
    ) -> tuple[set[str], list[tuple[str, str, str]]]:
        """Insert relations given by entity names (from, to, type, context; distinct keys), one
        statement; ended ones are revived. Returns the names that exist in the project and the
        (from, to, type) that were new or revived. Pairs naming a missing entity are left out (the
        caller refuses the call, which rolls back the others)."""
        if not rows:
            return set(), []
        found = await self.rows(
            """WITH e AS (
                   SELECT id, name FROM graph_entities
                   WHERE project_id = :pid AND name = ANY(CAST(:names AS text[]))),
               ins AS (
                   INSERT INTO graph_relations (project_id, from_entity, to_entity, relation_type, context)
                   SELECT :pid, f.id, t.id, u.r, u.c
                   FROM unnest(CAST(:f AS text[]), CAST(:t AS text[]), CAST(:r AS text[]), CAST(:c AS text[]))
                        AS u(fn, tn, r, c)
                   JOIN e f ON f.name = u.fn JOIN e t ON t.name = u.tn
                   ORDER BY f.id, t.id, u.r
                   ON CONFLICT (from_entity, to_entity, relation_type) DO UPDATE
                       SET active = true, ended_at = NULL,
                           context = COALESCE(EXCLUDED.context, graph_relations.context)
                       WHERE graph_relations.active = false
                   RETURNING from_entity, to_entity, relation_type)
               SELECT e.name, NULL AS from_name, NULL AS to_name, NULL AS relation_type FROM e
               UNION ALL
               SELECT NULL, f.name, t.name, ins.relation_type
               FROM ins JOIN e f ON f.id = ins.from_entity JOIN e t ON t.id = ins.to_entity""",
            {
                "pid": project_id,
                "names": sorted({n for r in rows for n in r[:2]}),
                "f": [r[0] for r in rows],
                "t": [r[1] for r in rows],
                "r": [r[2] for r in rows],
                "c": [r[3] for r in rows],
            },
        )
        names = {str(r["name"]) for r in found if r["name"] is not None}
        made = [(str(r["from_name"]), str(r["to_name"]), str(r["relation_type"])) for r in found if r["name"] is None]
        return names, made

    async def delete_relations(self, rows: list[tuple[int, int, str]]) -> int:
        """Delete relations by (from, to, type); returns how many went."""
        if not rows:
            return 0
        result = await self.rows(
            """DELETE FROM graph_relations g USING unnest(CAST(:f AS bigint[]), CAST(:t AS bigint[]),
                                                          CAST(:r AS text[])) AS u(f, t, r)
               WHERE g.from_entity = u.f AND g.to_entity = u.t AND g.relation_type = u.r RETURNING g.id""",
            {"f": [r[0] for r in rows], "t": [r[1] for r in rows], "r": [r[2] for r in rows]},
        )
        return len(result)

    async def end_relation(self, from_id: int, to_id: int, rel_type: str) -> Any:
        """Mark a relation as ended (kept for history); None when it does not exist."""
        rows = await self.rows(
            """UPDATE graph_relations SET active = false, ended_at = COALESCE(ended_at, now())
               WHERE from_entity = :f AND to_entity = :t AND relation_type = :r
               RETURNING context, active, ended_at, created_at""",
            {"f": from_id, "t": to_id, "r": rel_type},
        )
        return rows[0] if rows else None

    async def relations_touching(
        self,
        entity_ids: Sequence[int],
        *,
        only_from: bool = False,
        include_ended: bool = False,
        limit: int = 1000,
        per_from: int | None = None,
    ) -> list[Any]:
        """Relations from (or to) the entities: rows of from, to, type, context, active, ended_at, created_at.
        `per_from` keeps at most that many (+1, to detect a cut) relations per source entity."""
        if not entity_ids:
            return []
        cond = "r.from_entity = ANY(:ids)" if only_from else "(r.from_entity = ANY(:ids) OR r.to_entity = ANY(:ids))"
        cond = cond.replace(":ids", "CAST(:ids AS bigint[])") + ("" if include_ended else " AND r.active")
        per = "" if per_from is None else "WHERE rn <= :per"
        return await self.rows(
            f"""SELECT fname, tname, relation_type, context, active, ended_at, created_at FROM (
                    SELECT f.name AS fname, t.name AS tname, r.relation_type, r.context, r.active, r.ended_at,
                           r.created_at, r.from_entity, r.id,
                           row_number() OVER (PARTITION BY r.from_entity ORDER BY r.id) AS rn
                    FROM graph_relations r JOIN graph_entities f ON f.id = r.from_entity
                    JOIN graph_entities t ON t.id = r.to_entity WHERE {cond}) s
                {per} ORDER BY from_entity, id LIMIT :n""",
            {"ids": list(entity_ids), "n": limit, "per": (per_from or 0) + 1},
        )

    # ---- listings ---------------------------------------------------------------------------

    async def page(
        self, project_id: uuid.UUID, offset: int, limit: int, entity_type: str | None
    ) -> tuple[list[EntityRow], int]:
        """Entities in creation order, with the total count."""
        cond = "project_id = :pid" + (" AND entity_type = :t" if entity_type else "")
        rows = await self.rows(
            f"SELECT id, name, entity_type, status FROM graph_entities WHERE {cond} ORDER BY id OFFSET :o LIMIT :n",
            {"pid": project_id, "t": entity_type, "o": offset, "n": limit},
        )
        total = await self.session.scalar(
            text(f"SELECT count(*) FROM graph_entities WHERE {cond}"), {"pid": project_id, "t": entity_type}
        )
        return [EntityRow(**r) for r in rows], int(total or 0)

    async def substring_search(
        self, project_id: uuid.UUID, query: str, offset: int, limit: int
    ) -> tuple[list[EntityRow], int]:
        """Entities whose name, type or current observations contain `query` (case-insensitive)."""
        pattern = like_pattern(query)
        rows = await self.rows(
            """SELECT id, name, entity_type, status, count(*) OVER () AS total FROM graph_entities
               WHERE project_id = :pid AND search_text LIKE :p ORDER BY id OFFSET :o LIMIT :n""",
            {"pid": project_id, "p": pattern, "o": offset, "n": limit},
        )
        if rows:
            total = int(rows[0]["total"])
        else:
            total = int(
                await self.session.scalar(
                    text("SELECT count(*) FROM graph_entities WHERE project_id = :pid AND search_text LIKE :p"),
                    {"pid": project_id, "p": pattern},
                )
                or 0
            )
        return [
            EntityRow(id=r["id"], name=r["name"], entity_type=r["entity_type"], status=r["status"]) for r in rows
        ], total

    async def count_relations(self, project_id: uuid.UUID, entity_type: str | None = None) -> int:
        """Active relations of the project (from entities of `entity_type` when given)."""
        if entity_type:
            return int(
                await self.session.scalar(
                    text(
                        "SELECT count(*) FROM graph_relations r JOIN graph_entities f ON f.id = r.from_entity "
                        "WHERE r.project_id = :pid AND r.active AND f.entity_type = :t"
                    ),
                    {"pid": project_id, "t": entity_type},
                )
                or 0
            )
        return int(
            await self.session.scalar(
                text("SELECT count(*) FROM graph_relations WHERE project_id = :pid AND active"), {"pid": project_id}
            )
            or 0
        )

    async def summary(self, project_id: uuid.UUID, top: int = 10) -> dict[str, Any]:
        """Counts by type, status, and the most accessed/largest entities."""
        by_type = await self.rows(
            "SELECT entity_type AS value, count(*) AS n FROM graph_entities WHERE project_id = :pid "
            "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20",
            {"pid": project_id},
        )
        by_status = await self.rows(
            "SELECT status AS value, count(*) AS n FROM graph_entities WHERE project_id = :pid "
            "GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20",
            {"pid": project_id},
        )
        tops = await self.rows(
            """SELECT g.name, g.entity_type, COALESCE(a.access_count, 0) AS ac,
                      (SELECT count(*) FROM graph_observations o WHERE o.entity_id = g.id
                       AND o.superseded_at IS NULL) AS oc
               FROM graph_entities g LEFT JOIN graph_entity_access a ON a.entity_id = g.id
               WHERE g.project_id = :pid ORDER BY ac DESC, oc DESC, g.id LIMIT :n""",
            {"pid": project_id, "n": top},
        )
        counts = (
            await self.rows(
                """SELECT (SELECT count(*) FROM graph_entities WHERE project_id = :pid) AS entities,
                      (SELECT count(*) FROM graph_observations o JOIN graph_entities g ON g.id = o.entity_id
                       WHERE g.project_id = :pid AND o.superseded_at IS NULL) AS observations,
                      (SELECT count(*) FROM graph_observations o JOIN graph_entities g ON g.id = o.entity_id
                       WHERE g.project_id = :pid AND o.superseded_at IS NOT NULL) AS superseded_observations,
                      (SELECT count(*) FROM graph_observations o JOIN graph_entities g ON g.id = o.entity_id
                       WHERE g.project_id = :pid AND o.similarity_flag = 1 AND o.superseded_at IS NULL)
                       AS flagged_observations,
                      (SELECT count(*) FROM graph_relations WHERE project_id = :pid AND active) AS relations,
                      (SELECT count(*) FROM graph_relations WHERE project_id = :pid AND NOT active) AS ended_relations,
                      (SELECT count(*) FROM graph_reflections WHERE project_id = :pid) AS reflections,
                      (SELECT count(*) FROM graph_search_events WHERE project_id = :pid) AS search_events,
                      (SELECT count(*) FROM graph_implicit_feedback f JOIN graph_search_events e
                       ON e.event_id = f.event_id WHERE e.project_id = :pid) AS feedback""",
                {"pid": project_id},
            )
        )[0]
        return {
            **{k: int(v) for k, v in counts.items()},
            "by_type": [(str(r["value"]), int(r["n"])) for r in by_type],
            "by_status": [(str(r["value"]), int(r["n"])) for r in by_status],
            "top": [(str(r["name"]), str(r["entity_type"]), int(r["ac"]), int(r["oc"])) for r in tops],
        }

    async def embedded_count(self, project_id: uuid.UUID, model: str) -> int:
        """Entities of the project with a vector for `model`."""
        return int(
            await self.session.scalar(
                text(
                    "SELECT count(*) FROM graph_embeddings e JOIN graph_entities g ON g.id = e.owner_id "
                    "WHERE g.project_id = :pid AND e.model = :m"
                ),
                {"pid": project_id, "m": model},
            )
            or 0
        )

    async def export_rows(self, project_id: uuid.UUID, after_id: int, limit: int) -> list[EntityRow]:
        """Entities after `after_id` in id order (for streaming exports)."""
        rows = await self.rows(
            "SELECT id, name, entity_type, status FROM graph_entities WHERE project_id = :pid "
            "AND id > :a ORDER BY id LIMIT :n",
            {"pid": project_id, "a": after_id, "n": limit},
        )
        return [EntityRow(**r) for r in rows]


def snapshot_text(name: str, entity_type: str, obs_text: str) -> str:
    """The text an entity's embedding is computed from: name, type and every current observation."""
    head = f"{name} ({entity_type})"
    return f"{head}: {obs_text}" if obs_text else head


ENTITY_VECTORS = EmbeddedRows(
    ENTITY_TARGET,
    "graph_entities",
    "graph_embeddings",
    columns=("name", "entity_type", "obs_text"),
    compose=snapshot_text,
)
