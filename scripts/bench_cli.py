"""How long the `cairn` command takes to answer `--help` and `--version`: wall time of the installed
console script (a new process each time, as a user runs it), median of 5 runs after one warm-up run.
Target: under 0.5 s each. A bare `python -c pass` is measured alongside: the interpreter's own start.

    python scripts/bench_cli.py      # prints the markdown section
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 5
TARGET_S = 0.5
CAIRN = Path(sys.executable).with_name("cairn")


def wall_times(command: list[str], runs: int = RUNS) -> list[float]:
    """Seconds each of `runs` runs of `command` took (after one unmeasured warm-up run)."""
    subprocess.run(command, capture_output=True, check=True)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return times


def run(quick: bool = False) -> str:
    """The markdown section."""
    cases = [
        ("`cairn --help`", [str(CAIRN), "--help"], True),
        ("`cairn --version`", [str(CAIRN), "--version"], True),
        ("`cairn version`", [str(CAIRN), "version"], True),
        ("`python -c pass` (interpreter start, for scale)", [sys.executable, "-c", "pass"], False),
    ]
    rows = [
        "| command | median | min | max | under 0.5 s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, command, judged in cases:
        times = wall_times(command, 3 if quick else RUNS)
        median = statistics.median(times)
        verdict = ("yes" if median < TARGET_S else "no") if judged else ""
        rows.append(f"| {label} | {median:.3f} s | {min(times):.3f} s | {max(times):.3f} s | {verdict} |")
    return "\n".join(
        [
            "## Command start",
            "",
            f"`scripts/bench_cli.py`: wall time of the installed `cairn` script, a new process per run, median "
            f"of {3 if quick else RUNS} runs after a warm-up run (machine load as in the table above). "
            "`--help` and `--version` import no feature and no server part (`app/cli.py`: `FEATURE_COMMANDS`).",
            "",
            *rows,
        ]
    )


if __name__ == "__main__":
    print(run())
