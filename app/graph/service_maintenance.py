"""Graph maintenance: near-duplicate observations found and merged, stale access counts decayed."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from app.core.context import CallContext
from app.core.embeddings.provider import EmbeddingUnavailable
from app.core.errors import Unavailable
from app.graph.repository import GraphRepository
from app.graph.repository_search import SearchRepository
from app.graph.schemas import (
    ConsolidateIn,
    ConsolidateOut,
    DuplicatePair,
    FindDuplicatesIn,
    FindDuplicatesOut,
    MergedObservation,
    ObservationBrief,
)
from app.graph.service_common import not_found, project_id, reembed


async def _embed(ctx: CallContext, texts: list[str]) -> list[list[float]]:
    # Observations have no stored vectors; the scan compares fresh ones (a read-only admin scan).
    try:
        return await ctx.embedder.embed(texts)
    except EmbeddingUnavailable as exc:
        raise Unavailable(f"The embedding model is unavailable: {exc}") from exc


async def find_duplicate_observations(ctx: CallContext, args: FindDuplicatesIn) -> FindDuplicatesOut:
    """Near-duplicate current observations of the same entity by embedding; flags the later one."""
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return FindDuplicatesOut(pairs=[], flagged=0, scanned_observations=0, truncated=False)
    entity_id = None
    if args.entity_name:
        rows = await GraphRepository(ctx.session).get_entities(pid, [args.entity_name])
        if not rows:
            raise not_found(args.entity_name)
        entity_id = rows[0].id
    repo = SearchRepository(ctx.session)
    scan = await repo.current_observations_for_scan(pid, entity_id, args.max_observations + 1)
    truncated = len(scan) > args.max_observations
    scan = scan[: args.max_observations]
    groups: dict[int, list[Any]] = defaultdict(list)
    for r in scan:
        groups[int(r["entity_id"])].append(r)
    todo = [r for g in groups.values() if len(g) > 1 for r in g]
    vectors: dict[int, list[float]] = {}
    step = 256

    async def embed_all() -> None:
        for i in range(0, len(todo), step):
            chunk = todo[i : i + step]
            for r, v in zip(chunk, await _embed(ctx, [r["content"] for r in chunk]), strict=True):
                vectors[int(r["id"])] = v
            await ctx.progress(min(i + step, len(todo)), len(todo), "embedding observations")

    # The scan only read: the model runs with no transaction open; flagging writes in a fresh one
    # (an observation removed meanwhile is simply not flagged).
    await ctx.without_transaction(embed_all)
    pairs: list[DuplicatePair] = []
    flags: list[tuple[int, int]] = []
    for g in groups.values():
        if len(g) < 2:
            continue
        mat = np.array([vectors[int(r["id"])] for r in g], dtype=np.float32)
        sims = mat @ mat.T
        taken: set[int] = set()
        for j in range(1, len(g)):
            best = int(np.argmax(sims[j, :j]))
            if sims[j, best] >= args.threshold and best not in taken:
                taken.add(j)
                flags.append((int(g[j]["id"]), int(g[best]["id"])))
                kept = ObservationBrief(id=g[best]["id"], content=g[best]["content"])
                pairs.append(
                    DuplicatePair(
                        entity_name=g[j]["name"],
                        kept=kept,
                        duplicate=ObservationBrief(id=g[j]["id"], content=g[j]["content"]),
                        similarity=round(float(sims[j, best]), 6),
                    )
                )
    flagged = await repo.flag_duplicates(flags)
    return FindDuplicatesOut(
        pairs=pairs[: args.limit],
        flagged=flagged,
        scanned_observations=len(scan),
        truncated=truncated or len(pairs) > args.limit,
    )


async def consolidate(ctx: CallContext, args: ConsolidateIn) -> ConsolidateOut:
    """Merge flagged duplicates into the observation they repeat and decay stale access counts."""
    pid = await project_id(ctx, args.project, create=False)
    if pid is None:
        return ConsolidateOut(
            dry_run=args.dry_run, merged=[], merged_count=0, decayed_entities=0, reembedded_entities=0
        )
    repo = SearchRepository(ctx.session)
    merged: list[MergedObservation] = []
    removed: set[int] = set()
    flagged = await repo.flagged_duplicates(pid)
    for r in flagged:
        if r["duplicate_of"] in removed:
            continue
        removed.add(int(r["id"]))
        merged.append(
            MergedObservation(
                entity_name=r["name"], kept_id=r["duplicate_of"], removed_id=r["id"], content=r["content"]
            )
        )
    entities = sorted({int(r["entity_id"]) for r in flagged if int(r["id"]) in removed})
    await ctx.progress(1, 3, "duplicates planned")
    if not args.dry_run and removed:
        grepo = GraphRepository(ctx.session)
        await grepo.lock_ids(entities)
        await grepo.mark_superseded(sorted(removed))
        await reembed(ctx, grepo, entities)
    await ctx.progress(2, 3, "duplicates merged")
    decayed = await repo.stale_access(pid, args.decay_after_days, args.decay_factor, apply=not args.dry_run)
    await ctx.progress(3, 3, "access counts decayed")
    return ConsolidateOut(
        dry_run=args.dry_run,
        merged=merged[:200],
        merged_count=len(merged),
        decayed_entities=decayed,
        reembedded_entities=0 if args.dry_run else len(entities),
    )
