"""The per-call floor of the datasets tools: `execute_query` on a tiny file against a trivial call.

Starts `cairn serve` (one worker, embedded PostgreSQL, see `bench_mcp.Server`) with a data root holding
a 1,000-row CSV and the cache's TTL at 0 (`CAIRN_DATASETS_CACHE_TTL_SECONDS=0`: every lookup misses,
so each call runs its query and stores its result), then over one real MCP client session (`/mcp/all`)
times N sequential calls each of ``list_projects``, ``execute_query`` (``SELECT count(*) AS n FROM
data`` over the CSV: a 1-row answer), ``stream_sample`` (10 head rows) and ``profile_dataset``
(without statistics). Reported per tool: the median client round trip and the server process's CPU
per call (`Server.cpu_seconds`), and each tool's ratios to list_projects.

``--compare DIR`` measures another checkout of Cairn (e.g. the code before a change) in the same run,
alternating the two servers for ``--rounds`` rounds; medians over the rounds are reported::

    python scripts/bench_datasets_floor.py [--calls 200] [--rounds 3] [--compare DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_mcp import SETTLE_SECONDS, Server, session  # noqa: E402

CALLS = 200
ROWS = 1000
QUERY = {"query_type": "sql", "query": "SELECT count(*) AS n FROM data", "files": ["floor.csv"]}
ARGS: dict[str, dict[str, Any]] = {
    "list_projects": {},
    "execute_query": QUERY,
    "stream_sample": {"file_path": "floor.csv", "strategy": "head", "sample_size": 10},
    "profile_dataset": {"file_path": "floor.csv", "compute_stats": False},
}
TOOLS = tuple(ARGS)


def write_csv(root: Path, rows: int = ROWS) -> Path:
    """`floor.csv` with `rows` rows of four mixed columns in `root`."""
    rng = random.Random(1)
    path = root / "floor.csv"
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "category", "amount", "note"])
        for i in range(rows):
            out.writerow([i, "abc"[i % 3], round(rng.uniform(0, 100), 2), "" if i % 4 else "promo"])
    return path


@contextlib.contextmanager
def servers(roots: dict[str, Path]) -> Iterator[dict[str, tuple[Server, Path]]]:
    """One embedded PostgreSQL, and per label a database and a server of checkout `roots[label]` (not
    started) with its own data root holding the CSV."""
    from app.core.pgembedded import start_embedded

    base = Path(tempfile.mkdtemp(prefix="cairn-bench-floor-"))
    pg = start_embedded(base / "pg")
    made: dict[str, tuple[Server, Path]] = {}
    try:
        for label, checkout in roots.items():
            pg.ensure_database(f"bench_{label}")
            data = base / f"data-{label}"
            data.mkdir()
            write_csv(data)
            env = {
                "CAIRN_DATABASE_URL": pg.url(f"bench_{label}"),
                "CAIRN_DATA_ROOTS": str(data),
                "CAIRN_DATASETS_CACHE_TTL_SECONDS": "0",
            }
            made[label] = (Server(checkout, 1, env), data)
        yield made
    finally:
        for srv, _ in made.values():
            with contextlib.suppress(Exception):
                srv.stop()
        with contextlib.suppress(Exception):
            pg.stop()
        shutil.rmtree(base, ignore_errors=True)


async def _timed(url: str, calls: int, cpu: Any) -> dict[str, dict[str, float]]:
    """Warm up, then `calls` sequential calls of each tool on one MCP session."""
    out: dict[str, dict[str, float]] = {}
    async with session(url) as client:
        for tool in TOOLS:
            for _ in range(10):
                res = await client.call_tool(tool, ARGS[tool])
                if res.is_error:
                    raise RuntimeError(f"{tool} failed: {res.content[0].text[:300]}")  # type: ignore[union-attr]
        for tool in TOOLS:
            latencies: list[float] = []
            errors = 0
            cpu0 = cpu()
            for _ in range(calls):
                started = time.perf_counter()
                res = await client.call_tool(tool, ARGS[tool])
                latencies.append(time.perf_counter() - started)
                errors += bool(res.is_error)
            cpu1 = cpu()
            out[tool] = {
                "p50_ms": statistics.median(latencies) * 1000,
                "cpu_ms": (cpu1 - cpu0) * 1000 / calls if cpu0 is not None and cpu1 is not None else float("nan"),
                "errors": errors,
            }
    return out


def measure(srv: Server, calls: int) -> dict[str, dict[str, float]]:
    """Start `srv`, time both tools, stop it."""
    srv.start()
    try:
        time.sleep(SETTLE_SECONDS)
        return asyncio.run(_timed(srv.url, calls, srv.cpu_seconds))
    finally:
        srv.stop()


def run_all(roots: dict[str, Path], calls: int, rounds: int) -> dict[str, list[dict[str, dict[str, float]]]]:
    """`rounds` rounds over the checkouts, alternating their order; every round's figures per label."""
    results: dict[str, list[dict[str, dict[str, float]]]] = {label: [] for label in roots}
    labels = list(roots)
    for number in range(rounds):
        for label in labels if number % 2 == 0 else labels[::-1]:
            print(f"round {number + 1}/{rounds}: {label}", file=sys.stderr, flush=True)
            # A new server per round (the same data root: the CSV stays, results and cache are per server).
            with servers({label: roots[label]}) as made:
                srv, _ = made[label]
                results[label].append(measure(srv, calls))
    return results


def markdown(results: dict[str, list[dict[str, dict[str, float]]]], calls: int, roots: dict[str, Path]) -> str:
    """Medians over the rounds, per checkout and tool; ratios to list_projects are medians of each
    round's ratio."""
    rounds = len(next(iter(results.values())))
    lines = [
        "## Datasets per-call floor",
        "",
        f"{calls} sequential MCP calls per tool and round on one session (`/mcp/all`, one worker, embedded "
        f"PostgreSQL) over a {ROWS}-row CSV, cache TTL 0 so every call runs its query: `execute_query` "
        "(`SELECT count(*) AS n FROM data`, the result stored), `stream_sample` (10 head rows), "
        "`profile_dataset` (no statistics), against `list_projects`. Medians over "
        f"{rounds} round(s); server CPU from the serve process.",
        "",
        "| server | tool | p50 ms | server CPU ms/call | p50 / list_projects | CPU / list_projects | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, rows in results.items():
        for tool in TOOLS:
            p50 = statistics.median(r[tool]["p50_ms"] for r in rows)
            cpu = statistics.median(r[tool]["cpu_ms"] for r in rows)
            errors = sum(int(r[tool]["errors"]) for r in rows)
            ratios = ["", ""]
            if tool != "list_projects":
                for i, key in enumerate(("p50_ms", "cpu_ms")):
                    ratios[i] = f"{statistics.median(r[tool][key] / r['list_projects'][key] for r in rows):.1f}x"
            lines.append(f"| {label} | {tool} | {p50:.1f} | {cpu:.2f} | {ratios[0]} | {ratios[1]} | {errors} |")
    lines += ["", "Every round (tool: p50 ms / server CPU ms per call):", ""]
    for label, rows in results.items():
        for number, r in enumerate(rows, 1):
            cells = [f"{tool} {r[tool]['p50_ms']:.1f}/{r[tool]['cpu_ms']:.1f}" for tool in TOOLS]
            lines.append(f"- {label} ({roots[label]}), round {number}: " + ", ".join(cells))
    return "\n".join(lines) + "\n"


def run(quick: bool = False) -> str:
    """This checkout only (`make bench`): the markdown section."""
    calls = 30 if quick else CALLS
    roots = {"this checkout": ROOT}
    return markdown(run_all(roots, calls, 1 if quick else 3), calls, roots)


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="Time execute_query on a tiny CSV against list_projects.")
    parser.add_argument("--calls", type=int, default=CALLS, help="sequential calls per tool and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (a new server each)")
    parser.add_argument("--compare", type=Path, help="another Cairn checkout, measured as `before`")
    args = parser.parse_args()
    roots = {"before": args.compare.resolve(), "after": ROOT} if args.compare else {"this checkout": ROOT}
    print(markdown(run_all(roots, args.calls, args.rounds), args.calls, roots))


if __name__ == "__main__":
    main()
