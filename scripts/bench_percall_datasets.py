"""The datasets floor: `execute_query` round trip against `list_projects` (issue 42's method).

``cairn serve`` with default settings except ``CAIRN_RATE_LIMIT_PER_SECOND=0``, a 1,000-row CSV in the
default data root (``<CAIRN_DATA_DIR>/datasets``). The client, the MCP SDK's ``Client`` over
``streamable_http_client`` in its own process, one HTTP connection, alternates sequential calls of
`execute_query` on ``/mcp/datasets`` (a 1-row aggregate, ``SELECT count(*) + i AS n FROM data``: the SQL
varies so the results cache misses) and `list_projects` on ``/mcp/projects``; after a warm-up, the ratio
of the two medians. A fresh server per round.

``--compare DIR`` instead measures this checkout against another (e.g. the code before a change): both
servers up at once, one client calling each in turn at every step, so both see the same load. ::

    python scripts/bench_percall_datasets.py [--quick] [--rounds 2] [--calls 200] [--compare DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from bench_datasets_floor import ROWS, write_csv  # noqa: E402
from percall import KEY, Server, cairn, load, median, run_client  # noqa: E402

ROUNDS = 2
CALLS = 200


def _with_csv(srv: Server) -> None:
    root = srv.data / "datasets"
    root.mkdir(parents=True, exist_ok=True)
    write_csv(root)


def measure(rounds: int, calls: int) -> list[dict[str, Any]]:
    """`rounds` rounds, a fresh server each."""
    out = []
    for number in range(rounds):
        print(f"percall_datasets: round {number + 1}/{rounds}", file=sys.stderr, flush=True)
        row: dict[str, Any] = {"load": load()}
        with cairn(before_start=_with_csv) as srv:
            row.update(run_client("datasets", {"url": srv.url, "key": KEY, "calls": calls}))
        out.append(row)
    return out


def compare(before: Path, rounds: int, calls: int) -> str:
    """This checkout against `before` (another checkout of Cairn), side by side, `rounds` rounds of
    `calls` steps (fresh servers each round): both medians and ratios per round."""
    lines = [f"`{before}` (before) against `{ROOT}` (after):", ""]
    ratios = []
    for number in range(rounds):
        print(f"percall_datasets compare: round {number + 1}/{rounds}", file=sys.stderr, flush=True)
        started = load()
        with cairn(root=before, before_start=_with_csv) as old, cairn(before_start=_with_csv) as new:
            found = run_client("datasets_ab", {"urls": [old.url, new.url], "key": KEY, "calls": calls})["servers"]
        b, a = found
        ratios.append(a["execute_query_p50_ms"] / b["execute_query_p50_ms"])
        lines.append(
            f"- round {number + 1} (load {started}): execute_query p50 before {b['execute_query_p50_ms']:.2f}, "
            f"after {a['execute_query_p50_ms']:.2f} ms; list_projects before {b['list_projects_p50_ms']:.2f}, "
            f"after {a['list_projects_p50_ms']:.2f} ms; ratio before {b['ratio']:.2f}x, after {a['ratio']:.2f}x"
        )
    return "\n".join([*lines, "", f"Median execute_query after/before: **{median(ratios):.3f}**"]) + "\n"


def markdown(rows: list[dict[str, Any]], calls: int, quick: bool) -> str:
    """The rounds as a markdown section."""
    lines = [
        "## Datasets floor: execute_query vs list_projects (issue 42's method)",
        "",
        f"`execute_query` (a 1-row aggregate over a {ROWS:,}-row CSV, the SQL varied so the cache misses) on "
        "`/mcp/datasets` and `list_projects` on `/mcp/projects`, alternating, sequential, "
        f"{calls} timed calls each after 20 warm-up pairs: the MCP SDK's `Client` in its own process, one "
        "HTTP connection; `cairn serve`, default settings except `CAIRN_RATE_LIMIT_PER_SECOND=0`, a fresh "
        "server per round. Median client round trips and their ratio. Then, on the same server, the same "
        "alternation with one query asked again and again (a results-cache hit after its first call; the "
        "hit is answered from its cache entry): the last three columns.",
        "",
        "| round | load (1/5/15) | execute_query p50 ms | list_projects p50 ms | ratio "
        "| repeated query p50 ms | list_projects p50 ms | ratio |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for number, r in enumerate(rows, 1):
        lines.append(
            f"| {number} | {r['load']} | {r['execute_query_p50_ms']:.2f} | {r['list_projects_p50_ms']:.2f} "
            f"| **{r['ratio']:.2f}x** | {r['repeated_p50_ms']:.2f} | {r['repeated_list_projects_p50_ms']:.2f} "
            f"| {r['repeated_ratio']:.2f}x |"
        )
    lines += [
        "",
        f"Median ratio: **{median([r['ratio'] for r in rows]):.2f}x** (aim: at most 2x); repeated query: "
        f"{median([r['repeated_ratio'] for r in rows]):.2f}x.",
    ]
    if quick:
        lines += ["", "_Quick run: few calls._"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, rounds: int = ROUNDS, calls: int | None = None) -> str:
    """Run the benchmark and return its markdown section."""
    n = calls or (30 if quick else CALLS)
    return markdown(measure(rounds, n), n, quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int)
    parser.add_argument("--compare", type=Path, help="only compare with another Cairn checkout, side by side")
    ns = parser.parse_args()
    if ns.compare:
        print(compare(ns.compare.resolve(), ns.rounds, ns.calls or (30 if ns.quick else CALLS)))
    else:
        print(run(ns.quick, ns.rounds, ns.calls))
