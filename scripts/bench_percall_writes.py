"""Graph writes against the reference memory server, measured as a user measures them (issue 42).

10,000 entities (2 observations each) in `create_entities` calls of 25, then 9,999 relations in
`create_relations` calls of 25, by one sequential client: the MCP SDK's ``Client`` in its own process
(`percall_client.py`). Cairn: ``cairn serve`` with default settings except
``CAIRN_RATE_LIMIT_PER_SECOND=0`` (default `async` write mode: the queue embeds in the background), over
streamable HTTP on ``/mcp/graph``, one connection; a fresh server and database per round. Reference:
``@modelcontextprotocol/server-memory`` (pinned, node) over stdio with its JSONL file, driven by the same
client code. Ratio = reference time / Cairn time, per round; the two sides alternate within a run. ::

    python scripts/bench_percall_writes.py [--quick] [--entities N] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from bench_toolsets import REFERENCE, REFERENCE_VERSION, _reference_script  # noqa: E402
from percall import KEY, alternate, cairn, lexical_caught_up, median, run_client  # noqa: E402

ROUNDS = 2


def reference(n: int) -> dict[str, float]:
    """The workload on the reference server (a fresh JSONL file)."""
    tmp = Path(tempfile.mkdtemp(prefix="cairn-bench-percall-ref-"))
    try:
        script = _reference_script()
        env = {"PATH": os.environ.get("PATH", ""), "MEMORY_FILE_PATH": str(tmp / "memory.jsonl")}
        node = shutil.which("node") or "node"
        return run_client("writes", {"stdio": [node, str(script)], "env": env, "entities": n})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def on_cairn(n: int) -> dict[str, float]:
    """The workload on a fresh Cairn server."""
    with cairn() as srv:
        figures = run_client("writes", {"url": f"{srv.url}/mcp/graph", "key": KEY, "entities": n})
        return {**figures, "lexical_s": lexical_caught_up(srv)}


def measure(n: int, rounds: int) -> list[dict[str, Any]]:
    """`rounds` rounds, alternating which side goes first."""
    rows = alternate(
        "percall_writes",
        rounds,
        ("reference", "cairn"),
        lambda side: reference(n) if side == "reference" else on_cairn(n),
    )
    for row in rows:
        row["ratio"] = row["reference"]["writes_s"] / row["cairn"]["writes_s"]
    return rows


def markdown(rows: list[dict[str, Any]], n: int, quick: bool) -> str:
    """The rounds as a markdown section."""
    lines = [
        "## Graph writes vs the reference server (issue 42's method)",
        "",
        f"{n:,} entities (2 observations each) then {n - 1:,} relations, calls of 25, one sequential client: "
        "the MCP SDK's `Client` in its own process. Cairn: `cairn serve`, default settings except "
        "`CAIRN_RATE_LIMIT_PER_SECOND=0`, streamable HTTP on `/mcp/graph`, one connection, a fresh server "
        f"per round. Reference: `{REFERENCE}@{REFERENCE_VERSION}` over stdio with its JSONL file, the same "
        "client code. Ratio = reference time / Cairn time; the sides alternate within the run. Cairn's "
        "time stops at its last reply, as the reference's; what it still does in the background is shown "
        "apart: the time after the last reply until the lexical mover had copied every entity into the "
        "side table of their lexical index (graph_0006; search scores the entities not yet copied exactly "
        'meanwhile). The embedding queue\'s drain is in "Graph writes side by side with the reference server".',
        "",
        "| round | load (1/5/15) | reference (s) | Cairn entities (s) | Cairn relations (s) | Cairn (s) | ratio "
        "| lexical index caught up after (s) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for number, r in enumerate(rows, 1):
        c = r["cairn"]
        lines.append(
            f"| {number} | {r['load']} | {r['reference']['writes_s']:.2f} | {c['entities_s']:.2f} "
            f"| {c['relations_s']:.2f} | {c['writes_s']:.2f} | **{r['ratio']:.2f}x** | {c['lexical_s']:.2f} |"
        )
    lines += ["", f"Median ratio: **{median([r['ratio'] for r in rows]):.2f}x** (aim: at least 3x)."]
    if quick:
        lines += ["", "_Quick run: small sizes._"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, entities: int | None = None, rounds: int = ROUNDS) -> str:
    """Run the benchmark and return its markdown section."""
    n = entities or (1000 if quick else 10_000)
    return markdown(measure(n, rounds), n, quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--entities", type=int)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    ns = parser.parse_args()
    print(run(ns.quick, ns.entities, ns.rounds))
