"""Import and export of the reference memory server's JSONL format.

One JSON object per line: `{"type": "entity", "name", "entityType", "observations"}` or
`{"type": "relation", "from", "to", "relationType"}`. Export writes entities first, then relations.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.core.context import CallContext
from app.graph import service
from app.graph.repository import GraphRepository
from app.graph.schemas import (
    AddObservationsIn,
    CreateEntitiesIn,
    CreateRelationsIn,
    EntityIn,
    ObservationAddIn,
    RelationIn,
)
from app.graph.service_common import project_id

BATCH = 200


@dataclass
class ImportReport:
    """What an import did."""

    entities_created: int = 0
    entities_merged: int = 0
    observations_added: int = 0
    relations_created: int = 0
    relations_existing: int = 0
    relations_dangling: int = 0
    invalid_lines: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (at most 20 invalid line numbers)."""
        return {**self.__dict__, "invalid_lines": self.invalid_lines[:20], "invalid_count": len(self.invalid_lines)}


def parse(lines: Iterable[str], report: ImportReport) -> tuple[list[EntityIn], list[RelationIn]]:
    """Entities and relations of a JSONL stream; malformed lines are recorded and skipped."""
    entities: dict[str, EntityIn] = {}
    relations: list[RelationIn] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            kind = item.pop("type", None)
            if kind == "entity":
                ent = EntityIn.model_validate(item)
                if ent.name in entities:  # the same name twice: merge the observations
                    prev = entities[ent.name]
                    prev.observations.extend(o for o in ent.observations if o not in prev.observations)
                else:
                    entities[ent.name] = ent
            elif kind == "relation":
                relations.append(RelationIn.model_validate(item))
            else:
                report.invalid_lines.append(no)
        except (ValueError, ValidationError, AttributeError, TypeError):
            report.invalid_lines.append(no)
    return list(entities.values()), relations


async def import_graph(
    ctx: CallContext, lines: Iterable[str], project: str | None, progress: Callable[[int], None] | None = None
) -> ImportReport:
    """Load a JSONL memory file into a project in the caller's transaction (all or nothing).
    Existing entities get the file's new observations; relations to unknown entities are skipped."""
    report = ImportReport()
    entities, relations = parse(lines, report)
    for i in range(0, len(entities), BATCH):
        chunk = entities[i : i + BATCH]
        out = await service.create_entities(ctx, CreateEntitiesIn(project=project, entities=chunk))
        report.entities_created += len(out.entities)
        merge = [e for e in chunk if e.name in set(out.skipped) and e.observations]
        if merge:
            added = await service.add_observations(
                ctx,
                AddObservationsIn(
                    project=project,
                    observations=[ObservationAddIn(entityName=e.name, contents=e.observations) for e in merge],
                ),
            )
            report.entities_merged += len(merge)
            report.observations_added += sum(len(r.addedObservations) for r in added.results)
        report.observations_added += sum(len(e.observations) for e in out.entities)
        if progress:
            progress(len(chunk))
    pid = await project_id(ctx, project, create=True)
    assert pid is not None
    repo = GraphRepository(ctx.session)
    for i in range(0, len(relations), BATCH * 5):
        rchunk = relations[i : i + BATCH * 5]
        names = list({n for r in rchunk for n in (r.from_entity, r.to_entity)})
        known = {r.name for r in await repo.get_entities(pid, names)}
        valid = [r for r in rchunk if r.from_entity in known and r.to_entity in known]
        report.relations_dangling += len(rchunk) - len(valid)
        if valid:
            out_r = await service.create_relations(ctx, CreateRelationsIn(project=project, relations=valid))
            report.relations_created += len(out_r.relations)
            report.relations_existing += len(out_r.skipped)
        if progress:
            progress(len(rchunk))
    return report


async def export_graph(ctx: CallContext, project: str | None) -> Iterator[str]:
    """The project's graph as JSONL lines (entities with current observations, then active relations)."""
    pid = await project_id(ctx, project, create=False)
    if pid is None:
        return iter(())
    repo = GraphRepository(ctx.session)
    entity_lines: list[str] = []
    relation_lines: list[str] = []
    after = 0
    while True:
        rows = await repo.export_rows(pid, after, 500)
        if not rows:
            break
        after = rows[-1].id
        obs = await repo.current_observations([r.id for r in rows], 1_000_000)
        for r in rows:
            entity_lines.append(
                json.dumps(
                    {"type": "entity", "name": r.name, "entityType": r.entity_type, "observations": obs[r.id][0]},
                    ensure_ascii=False,
                )
            )
        for rel in await repo.relations_touching([r.id for r in rows], only_from=True, limit=10_000_000):
            relation_lines.append(
                json.dumps(
                    {
                        "type": "relation",
                        "from": rel["fname"],
                        "to": rel["tname"],
                        "relationType": rel["relation_type"],
                    },
                    ensure_ascii=False,
                )
            )
    return iter(entity_lines + relation_lines)
