"""`cairn backfill` and `cairn eval beir DIR`."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from app.core import terminal
from app.core.db import Database
from app.core.embeddings.calls import pending_state
from app.core.repository import ProjectRepository
from app.core.runtime import Runtime
from app.memory import service_eval
from app.memory.config import MemorySettings
from app.memory.lifecycle import BackfillRunner
from app.memory.repository import MemoryRepository
from app.memory.service_backfill import backfill


def cmd_backfill(args: argparse.Namespace) -> int:
    """Queue memories missing a vector of the active model, then make the vectors (drain the queue)."""
    rt: Runtime = args.runtime
    cfg = rt.settings_of(MemorySettings)

    async def run(db: Database) -> int:
        async with rt.embedder() as embedder:
            queue = rt.queue(db, embedder)
            if args.watch:
                runner = BackfillRunner(db, embedder.model, cfg)
                queue.start()
                try:
                    await runner.run_forever()
                    await asyncio.Event().wait()  # the queue workers go on until interrupted
                finally:
                    await queue.stop()
                return 0
            project_id = None
            async with db.transaction() as session:
                if args.project:
                    project = await ProjectRepository(session).get(args.project)
                    if project is None:
                        terminal.info(f"no project named {args.project!r}")
                        return 2
                    project_id = project.id
                missing = await MemoryRepository(session).count_missing(
                    embedder.model, project_id, args.include_archived
                )
            total = min(missing, args.limit) if args.limit else missing
            totals = {"scanned": 0, "queued": 0, "skipped": 0}
            cursor = None
            with terminal.progress(total, f"queue {embedder.model}") as bar:
                while totals["scanned"] < total:
                    # Commit each page: an interrupt keeps what was queued.
                    async with db.transaction() as session:
                        report = await backfill(
                            session,
                            embedder.model,
                            project_id=project_id,
                            limit=min(args.batch_size, total - totals["scanned"]),
                            batch_size=args.batch_size,
                            include_archived=args.include_archived,
                            older_than_days=args.older_than_days,
                            dry_run=args.dry_run,
                            after=cursor,
                        )
                    if report.scanned == 0:
                        break
                    cursor = report.cursor
                    for key in totals:
                        totals[key] += getattr(report, key)
                    bar.advance(report.scanned)
            left, failing = 0, None
            if not args.dry_run:
                depth = (await queue.stats()).depth
                with terminal.progress(depth, f"embed {embedder.model}") as bar:
                    while True:
                        before = depth
                        stats = await queue.drain(timeout=5.0)
                        depth = stats.depth
                        bar.advance(max(0, before - depth))
                        if depth == 0 or (stats.retrying and stats.retrying >= depth):
                            break
                left = depth
                failing = pending_state(await queue.pending_report([])) if left else None
            terminal.emit(
                {
                    "model": embedder.model,
                    **totals,
                    "embedded": totals["queued"] - left if not args.dry_run else 0,
                    "waiting": left,
                    "failed": failing.failed if failing else 0,
                    "dry_run": args.dry_run,
                    # while the provider fails: its error, since when, how many texts wait
                    **({"embedding": failing.model_dump(mode="json")} if failing else {}),
                }
            )
            return 0 if left == 0 else 1

    return rt.run(run)


def cmd_eval_beir(args: argparse.Namespace) -> int:
    """Index a BEIR dataset into a scratch collection and report retrieval quality per search mode."""
    rt: Runtime = args.runtime
    data = service_eval.load(Path(args.dir), args.split)
    modes = tuple(m for m in service_eval.MODES if m in {x.strip() for x in args.modes.split(",")})
    unknown = {x.strip() for x in args.modes.split(",") if x.strip()} - set(service_eval.MODES)
    if unknown or not modes:
        terminal.info(f"--modes takes {', '.join(service_eval.MODES)}; got {args.modes!r}")
        return 2
    model = ""

    async def run(db: Database) -> dict[str, Any]:
        nonlocal model
        async with rt.embedder() as embedder:
            model = embedder.model
            with terminal.progress(len(data.corpus), f"indexing {data.name}") as bar:
                project_id, coll_id, seconds = await service_eval.index(
                    db, embedder, data, fresh=args.fresh, progress=bar.advance
                )
            report = await service_eval.evaluate(
                db, embedder, rt.settings_of(MemorySettings), data, project_id, coll_id, modes, args.max_queries
            )
            if args.drop:
                await service_eval.drop(db, coll_id)
            return {"report": report, "index_seconds": round(seconds, 1)}

    out = rt.run(run)
    if args.json:
        terminal.emit({"dataset": data.name, "split": args.split, "model": model, "documents": len(data.corpus), **out})
    else:
        print(service_eval.markdown(data.name, args.split, out["report"], model, len(data.corpus)))
        if out["index_seconds"]:
            print(f"\nindexed in {out['index_seconds']} s")
    return 0


def register(sub: Any) -> None:
    """Add the memory sub-commands to `cairn`."""
    bf = sub.add_parser("backfill", help="embed memories that lack a vector of the active model")
    bf.add_argument("--project", help="only this project (name)")
    bf.add_argument("--limit", type=int, default=0, help="most memories to process (default: all)")
    bf.add_argument("--batch-size", type=int, default=32, help="rows queued per transaction (default 32)")
    bf.add_argument("--include-archived", action="store_true", help="also archived memories")
    bf.add_argument("--older-than-days", type=int, default=0, help="only memories older than N days (default 0: all)")
    bf.add_argument("--dry-run", action="store_true", help="count what would be queued, queue nothing")
    bf.add_argument(
        "--watch",
        action="store_true",
        help="run the periodic backfill runner (CAIRN_BACKFILL_* settings) until interrupted",
    )
    bf.set_defaults(fn=cmd_backfill)
    ev = sub.add_parser("eval", help="evaluate retrieval quality")
    ev_sub = ev.add_subparsers(dest="eval_cmd", required=True)
    b = ev_sub.add_parser(
        "beir",
        help="index a BEIR dataset (corpus.jsonl[.gz], queries.jsonl, qrels/*.tsv) and "
        "report nDCG@10 and R@100 per search mode",
    )
    b.add_argument("dir", type=terminal.existing_dir, help="a BEIR dataset: corpus.jsonl, queries.jsonl, qrels/")
    b.add_argument("--split", default="test", help="qrels split to score (default test; tune on train)")
    b.add_argument("--modes", default="hybrid,semantic,lexical", help="search modes to compare, comma-separated")
    b.add_argument("--max-queries", type=int, default=None, help="score only the first N judged queries")
    b.add_argument("--fresh", action="store_true", help="re-index even when the scratch collection is complete")
    b.add_argument("--drop", action="store_true", help="delete the scratch collection afterwards")
    b.add_argument("--json", action="store_true", help="print the report as JSON instead of a markdown table")
    b.set_defaults(fn=cmd_eval_beir)
