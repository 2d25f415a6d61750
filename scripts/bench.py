"""`make bench`: run every `scripts/bench_*.py` module and write docs/benchmarks.md.

Each module has ``run(quick: bool = False) -> str`` returning a markdown section (a module whose ``run``
returns a dict instead is rendered through its ``markdown(dict)`` function, or as a plain table).
Sections come in a fixed order: embedding, mcp, then the feature benchmarks alphabetically. ::

    python scripts/bench.py                 # everything, full size
    python scripts/bench.py --quick         # small runs (smoke test)
    python scripts/bench.py --only mcp      # one section (repeatable); the other sections of an existing
                                            # docs/benchmarks.md are kept as they were
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import inspect
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks.md"
FIRST = ("embedding", "mcp")
TITLES = {"embedding": "Embedding throughput", "mcp": "MCP tools/call round trip"}
SECTION = re.compile(r"<!-- bench:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /bench:(?P=name) -->\n?", re.S)


def available() -> list[str]:
    """Benchmark names in report order (``scripts/bench_<name>.py``)."""
    names = sorted(p.stem.removeprefix("bench_") for p in SCRIPTS.glob("bench_*.py"))
    return [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]


def load(name: str) -> ModuleType:
    """Import ``scripts/bench_<name>.py`` by path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    path = SCRIPTS / f"bench_{name}.py"
    spec = importlib.util.spec_from_file_location(f"cairn_bench_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _table(data: dict[str, Any]) -> str:
    """A generic rendering of a figures dict: scalars as a list, lists of dicts as a table."""
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            cols = list(dict.fromkeys(k for row in value for k in row))
            lines += ["", "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
            lines += ["| " + " | ".join(str(row.get(c, "")) for c in cols) + " |" for row in value]
            lines.append("")
        else:
            lines.append(f"- {key}: {value}")
    return "\n".join(lines).strip() + "\n"


def run_one(name: str, quick: bool) -> str:
    """Run one benchmark module and return its markdown section (with a level-2 heading)."""
    module = load(name)
    params = inspect.signature(module.run).parameters
    if "quick" in params:
        result = module.run(quick=quick)
    elif "n" in params:  # e.g. bench_embedding.run(n) -> dict
        result = module.run(n=50 if quick else 300)
    else:
        result = module.run()
    if isinstance(result, dict):
        render = getattr(module, "markdown", None)
        result = render(result) if callable(render) else _table(result)
    text = str(result).strip() + "\n"
    if not text.lstrip().startswith("#"):
        text = f"## {TITLES.get(name, name.replace('_', ' ').capitalize())}\n\n{text}"
    return text


def _read(path: str, pattern: str) -> str | None:
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    found = re.search(pattern, text, re.M)
    return found.group(1).strip() if found else None


def machine(load: str = "") -> dict[str, str]:
    """Facts about the machine the figures come from (`load`: load average when the run started)."""
    cpu = _read("/proc/cpuinfo", r"^model name\s*:\s*(.+)$") or platform.processor() or platform.machine()
    mem_kb = _read("/proc/meminfo", r"^MemTotal:\s*(\d+) kB")
    ram = f"{int(mem_kb) / 1024 / 1024:.1f} GiB" if mem_kb else "unknown"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "CPU": cpu,
        "Cores": f"{os.cpu_count()} logical ({usable} usable by this process)",
        "RAM": ram,
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "Commit": commit or "unknown",
        **({"Load average at start (1/5/15 min)": load} if load else {}),
    }


def render(sections: dict[str, str], facts: dict[str, str], when: str, quick: bool) -> str:
    """The whole docs/benchmarks.md."""
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python3 dev.py bench`, i.e. `scripts/bench.py`); regenerate rather than "
        "edit. Each section is produced by `scripts/bench_<name>.py`; figures depend heavily on the machine.",
        "",
        f"Last run: {when}" + (" (quick mode: small samples)" if quick else ""),
        "",
        "| Machine | |",
        "| --- | --- |",
        *[f"| {k} | {v} |" for k, v in facts.items()],
        "",
    ]
    for name, body in sections.items():
        lines += [f"<!-- bench:{name} -->", body.rstrip("\n"), f"<!-- /bench:{name} -->", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    names = available()
    parser = argparse.ArgumentParser(description="Run the benchmarks and write docs/benchmarks.md.")
    parser.add_argument("--quick", action="store_true", help="small, fast runs")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        choices=names,
        help=f"run only this benchmark (repeatable): {', '.join(names)}",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file to write")
    args = parser.parse_args(argv)
    selected = [n for n in names if not args.only or n in args.only]

    # Sections not rerun now (other benchmarks with --only, or the load test's own section) are kept.
    old: dict[str, str] = {}
    if args.output.exists():
        old = {m["name"]: m["body"] for m in SECTION.finditer(args.output.read_text())}

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else ""
    fresh: dict[str, str] = {}
    failures = 0
    for name in selected:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            body = run_one(name, args.quick)
        except Exception as exc:
            failures += 1
            traceback.print_exc()
            body = f"## {TITLES.get(name, name)}\n\nThis benchmark failed: `{type(exc).__name__}: {exc}`\n"
        took = time.monotonic() - started
        fresh[name] = body.rstrip("\n") + f"\n\n_Measured {when}{' (quick)' if args.quick else ''}, {took:.0f} s._\n"
        print(fresh[name], flush=True)

    order = [n for n in names if n in fresh or n in old] + [n for n in old if n not in names]
    sections = {n: fresh.get(n) or old[n] for n in order}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(sections, machine(load), when, args.quick), encoding="utf-8")
    print(
        f"bench: wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}",
        file=sys.stderr,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
