"""`cairn graph import FILE` and `cairn graph export` (the reference memory server's JSONL format)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from app.core.config import Settings, get_settings


def register(sub: Any) -> None:
    """Add the `graph` sub-commands to the `cairn` command."""
    graph = sub.add_parser("graph", help="knowledge graph: import/export JSONL memory files")
    gsub = graph.add_subparsers(dest="graph_cmd", required=True)
    imp = gsub.add_parser("import", help="import a JSONL memory file (entities, relations)")
    imp.add_argument("file", help="path of the JSONL file ('-' for stdin)")
    imp.add_argument("--project", default=None, help="target project (default: 'default')")
    imp.set_defaults(fn=cmd_import)
    exp = gsub.add_parser("export", help="export a project's graph as JSONL")
    exp.add_argument("--project", default=None)
    exp.add_argument("-o", "--output", default="-", help="output file ('-' for stdout)")
    exp.set_defaults(fn=cmd_export)


async def _in_context(settings: Settings, url: str, work: Any) -> Any:
    """Run `work(ctx)` in one transaction with an admin context and a started embedder."""
    from app.core.context import OPEN_PRINCIPAL, AppState, CallContext
    from app.core.db import Database
    from app.core.registry import Registry
    from app.main import make_embedder

    db = Database(url, settings)
    embedder = make_embedder(settings)
    await embedder.start()
    try:
        async with db.transaction() as session:
            state = AppState(settings=settings, db=db, embedder=embedder, registry=Registry())
            ctx = CallContext(session=session, principal=OPEN_PRINCIPAL, app=state, request_id="cli", transport="cli")
            return await work(ctx)
    finally:
        await embedder.close()
        await db.dispose()


def run_import(settings: Settings, url: str, path: str, project: str | None) -> dict[str, Any]:
    """Import a file into the database at `url`; returns the report."""
    from app.cli import ProgressBar
    from app.graph.transfer import import_graph

    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    bar = ProgressBar(len(lines), "importing")

    async def work(ctx: Any) -> dict[str, Any]:
        report = await import_graph(ctx, lines, project, progress=bar.advance)
        return report.as_dict()

    try:
        return asyncio.run(_in_context(settings, url, work))  # type: ignore[no-any-return]
    finally:
        bar.close()


def run_export(settings: Settings, url: str, project: str | None) -> list[str]:
    """The project's graph as JSONL lines."""
    from app.graph.transfer import export_graph

    async def work(ctx: Any) -> list[str]:
        return list(await export_graph(ctx, project))

    return asyncio.run(_in_context(settings, url, work))  # type: ignore[no-any-return]


def cmd_import(args: argparse.Namespace) -> int:
    """`cairn graph import FILE`."""
    from app.cli import database

    settings = get_settings()
    with database(settings) as url:
        report = run_import(settings, url, args.file, args.project)
    print(json.dumps(report))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """`cairn graph export`."""
    from app.cli import database

    settings = get_settings()
    with database(settings) as url:
        lines = run_export(settings, url, args.project)
    text = "".join(line + "\n" for line in lines)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"exported {len(lines)} lines to {args.output}", file=sys.stderr)
    return 0
