"""`cairn analysis ...`: run the demo upstream, sweep expired analysis data."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.analysis.config import DEMO_REGISTRY
from app.analysis.demo_upstream import serve
from app.analysis.lifecycle import sweep_expired
from app.core.runtime import Runtime

DEMO_BASE_URL = "base_url: http://127.0.0.1:8100/api"


def demo_registry(host: str, port: int, directory: Path) -> Path:
    """The upstream registry for a demo upstream on `host:port`: the shipped file for the default
    address, else a copy of it in `directory` whose `base_url` names this address."""
    reach = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host  # a wildcard bind is reached on loopback
    address = f"[{reach}]" if ":" in reach else reach
    base_url = f"base_url: http://{address}:{port}/api"
    if base_url == DEMO_BASE_URL:
        return DEMO_REGISTRY
    text = DEMO_REGISTRY.read_text(encoding="utf-8")
    if DEMO_BASE_URL not in text:
        raise RuntimeError(f"{DEMO_REGISTRY} has no '{DEMO_BASE_URL}' line to point at port {port}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"demo_upstreams_{port}.yaml"
    path.write_text(text.replace(DEMO_BASE_URL, base_url), encoding="utf-8")
    return path


def cmd_demo_upstream(args: argparse.Namespace) -> int:
    """Serve the bookshelf demo API in the foreground."""
    rt: Runtime = args.runtime
    registry = demo_registry(args.host, args.port, rt.settings.data_dir / "analysis")
    print(f"bookshelf demo upstream on http://{args.host}:{args.port}/api ({args.books} books)")
    print(f"registry for it: CAIRN_ANALYSIS_UPSTREAMS={registry}", flush=True)
    serve(args.host, args.port, args.books, args.token)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """Delete expired analysis records and findings now."""
    rt: Runtime = args.runtime
    counts = rt.run(sweep_expired)
    print(", ".join(f"{table}: {n} deleted" for table, n in counts.items()))
    return 0


def register(sub: Any) -> None:
    """Add the `analysis` sub-command group."""
    analysis = sub.add_parser("analysis", help="analysis sessions: demo upstream, expiry sweep")
    inner = analysis.add_subparsers(dest="analysis_cmd", required=True)
    demo = inner.add_parser("demo-upstream", help="serve the bookshelf demo REST API")
    demo.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    demo.add_argument("--port", type=int, default=8100, help="port (default 8100)")
    demo.add_argument("--books", type=int, default=5000, help="books the demo API serves (default 5000)")
    demo.add_argument("--token", help="require this bearer token")
    demo.set_defaults(fn=cmd_demo_upstream)
    inner.add_parser("sweep", help="delete expired analysis data").set_defaults(fn=cmd_sweep)
