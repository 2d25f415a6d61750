"""Server CPU per trivial `tools/call` against the bare MCP SDK (issue 42's method).

`list_projects` on Cairn's ``/mcp/projects`` (``cairn serve``, default settings except
``CAIRN_RATE_LIMIT_PER_SECOND=0``) against the same tool of the bare SDK app (`bare_mcp_app.py`: an
``MCPServer`` with one trivial tool, stateless streamable HTTP, under uvicorn). The client, the MCP
SDK's ``Client`` over ``streamable_http_client`` in its own process, one connection, makes 50 warm-up
calls, then sequential calls for 10 s; CPU per call is the server process's utime + stime from
``/proc/<pid>/stat`` over those 10 s divided by the calls. The two servers alternate within a run.

``--compare DIR`` instead measures this checkout against another (e.g. the code before a change): both
servers up at once, one client alternating its calls between them, so a loaded machine weighs on both
alike (3 windows of 10 s per round). ::

    python scripts/bench_percall_trivial.py [--quick] [--rounds 2] [--seconds 10] [--compare DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from percall import KEY, alternate, bare_sdk, cairn, cairn_pids, load, median, run_client  # noqa: E402

ROUNDS = 2
WARMUP = 50
SECONDS = 10.0


def on_cairn(seconds: float, root: Path = ROOT) -> dict[str, Any]:
    """CPU per call of a fresh Cairn server of the checkout `root`."""
    with cairn(root=root) as srv:
        spec = {"url": f"{srv.url}/mcp/projects", "key": KEY, "pids": cairn_pids(srv)}
        return run_client("cpu", {**spec, "warmup": WARMUP, "seconds": seconds})


def on_bare(seconds: float) -> dict[str, Any]:
    """CPU per call of the bare SDK app."""
    with bare_sdk() as (url, pid):
        return run_client("cpu", {"url": url, "pids": [pid], "warmup": WARMUP, "seconds": seconds})


def measure(rounds: int, seconds: float) -> list[dict[str, Any]]:
    """`rounds` rounds, alternating which server goes first."""
    rows = alternate(
        "percall_trivial",
        rounds,
        ("bare", "cairn"),
        lambda side: on_bare(seconds) if side == "bare" else on_cairn(seconds),
    )
    for row in rows:
        row["ratio"] = row["cairn"]["cpu_ms_per_call"] / row["bare"]["cpu_ms_per_call"]
    return rows


def compare(before: Path, windows: int, seconds: float) -> str:
    """This checkout against `before` (another checkout of Cairn), both servers up at once and one
    client alternating its calls between them, so both see the same load: CPU per call of each, per
    window, and the median ratio."""
    with cairn(root=before) as old, cairn() as new:
        spec = {
            "urls": [f"{old.url}/mcp/projects", f"{new.url}/mcp/projects"],
            "pids": [cairn_pids(old), cairn_pids(new)],
            "key": KEY,
            "warmup": WARMUP,
            "windows": windows,
            "seconds": seconds,
            "load": load(),
        }
        found = run_client("cpu_ab", spec)["windows"]
    lines = [f"`{before}` (before) against `{ROOT}` (after), load at start {spec['load']}:", ""]
    for w in found:
        b, a = w["cpu_ms_per_call"]
        lines.append(f"- {w['calls']} calls each: before {b:.3f}, after {a:.3f} ms CPU/call, after/before {a / b:.3f}")
    ratios = [w["cpu_ms_per_call"][1] / w["cpu_ms_per_call"][0] for w in found]
    return "\n".join([*lines, "", f"Median after/before: **{median(ratios):.3f}**"]) + "\n"


def markdown(rows: list[dict[str, Any]], seconds: float, quick: bool) -> str:
    """The rounds as a markdown section."""
    lines = [
        "## Server CPU per trivial call vs the bare MCP SDK (issue 42's method)",
        "",
        "`tools/call list_projects`: Cairn on `/mcp/projects` (`cairn serve`, default settings except "
        "`CAIRN_RATE_LIMIT_PER_SECOND=0`) and the bare SDK (`scripts/bare_mcp_app.py`, an `MCPServer` with "
        "one trivial tool, stateless streamable HTTP, under uvicorn). The MCP SDK's `Client` over "
        f"`streamable_http_client` in its own process, one connection, {WARMUP} warm-up calls, then "
        f"sequential calls for {seconds:g} s; CPU = utime + stime of the server process from "
        "`/proc/<pid>/stat` over that window, per call. The servers alternate within the run.",
        "",
        "| round | load (1/5/15) | bare ms CPU/call | bare calls | bare p50 ms | Cairn ms CPU/call | Cairn calls "
        "| Cairn p50 ms | Cairn / bare |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for number, r in enumerate(rows, 1):
        b, c = r["bare"], r["cairn"]
        lines.append(
            f"| {number} | {r['load']} | {b['cpu_ms_per_call']:.2f} | {b['calls']} | {b['p50_ms']:.2f} "
            f"| {c['cpu_ms_per_call']:.2f} | {c['calls']} | {c['p50_ms']:.2f} | **{r['ratio']:.2f}x** |"
        )
    lines += ["", f"Median ratio: **{median([r['ratio'] for r in rows]):.2f}x** (aim: at most 1.5x)."]
    if quick:
        lines += ["", "_Quick run: a short window._"]
    return "\n".join(lines) + "\n"


def run(quick: bool = False, rounds: int = ROUNDS, seconds: float | None = None) -> str:
    """Run the benchmark and return its markdown section."""
    window = seconds or (2.0 if quick else SECONDS)
    return markdown(measure(rounds, window), window, quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--compare", type=Path, help="only compare with another Cairn checkout, side by side")
    ns = parser.parse_args()
    if ns.compare:
        print(compare(ns.compare.resolve(), 2 * ns.rounds if ns.quick else 3 * ns.rounds, ns.seconds or SECONDS))
    else:
        print(run(ns.quick, ns.rounds, ns.seconds))
