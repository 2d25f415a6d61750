"""`cairn graph import FILE` and `cairn graph export` (the reference memory server's JSONL format)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from app.core import terminal
from app.core.db import Database
from app.core.runtime import Runtime
from app.graph.service_transfer import export_graph, import_graph


def register(sub: Any) -> None:
    """Add the `graph` sub-commands to the `cairn` command."""
    graph = sub.add_parser("graph", help="knowledge graph: import/export JSONL memory files")
    gsub = graph.add_subparsers(dest="graph_cmd", required=True)
    imp = gsub.add_parser("import", help="import a JSONL memory file (entities, relations)")
    imp.add_argument("file", type=terminal.readable_file, help="path of the JSONL file ('-' for stdin)")
    imp.add_argument("--project", default=None, help="target project (default: 'default')")
    imp.set_defaults(fn=cmd_import)
    exp = gsub.add_parser("export", help="export a project's graph as JSONL")
    exp.add_argument("--project", default=None, help="project to export (default: 'default')")
    exp.add_argument("-o", "--output", default="-", help="output file ('-' for stdout)")
    exp.set_defaults(fn=cmd_export)


def run_import(rt: Runtime, url: str, path: str, project: str | None) -> dict[str, Any]:
    """Import a JSONL file (or stdin for '-') into the database at `url`; returns the report."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()

    async def work() -> dict[str, Any]:
        db = Database(url, rt.settings)
        try:
            async with rt.embedder() as embedder, rt.call_context(db, embedder) as ctx:
                with terminal.progress(len(lines), "importing") as bar:
                    report = await import_graph(ctx, lines, project, progress=bar.advance)
            return report.as_dict()
        finally:
            await db.dispose()

    return asyncio.run(work())


def run_export(rt: Runtime, url: str, project: str | None) -> list[str]:
    """The project's graph as JSONL lines."""

    async def work() -> list[str]:
        db = Database(url, rt.settings)
        try:
            async with rt.embedder() as embedder, rt.call_context(db, embedder) as ctx:
                return list(await export_graph(ctx, project))
        finally:
            await db.dispose()

    return asyncio.run(work())


def cmd_import(args: argparse.Namespace) -> int:
    """`cairn graph import FILE`."""
    rt: Runtime = args.runtime
    with rt.database_url() as url:
        report = run_import(rt, url, args.file, args.project)
    terminal.emit(report)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """`cairn graph export`."""
    rt: Runtime = args.runtime
    with rt.database_url() as url:
        lines = run_export(rt, url, args.project)
    text = "".join(line + "\n" for line in lines)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        terminal.info(f"exported {len(lines)} lines to {args.output}")
    return 0
