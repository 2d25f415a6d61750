"""Terminal output of the `cairn` commands: progress on stderr, results on stdout.

Progress bars are Rich's (count, rate, elapsed time and ETA), drawn only when stderr is a terminal;
a finished bar always leaves one summary line (count, time, rate), so logs of non-interactive runs
still say how much was done. Nothing to do draws no bar.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text


class _Rate(ProgressColumn):
    """Items per second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f}/s" if speed else "-/s")


class Progress:
    """A progress bar for `total` items; `advance(n)` records finished ones. More items than the
    total (work that grew meanwhile) raise the total instead of overflowing the bar."""

    def __init__(self, total: int, label: str) -> None:
        self.label = label
        self.done = 0
        self.total = max(total, 0)
        self.started = time.monotonic()
        self._bar: RichProgress | None = None
        stderr = Console(stderr=True)
        if self.total and stderr.is_terminal:
            self._bar = RichProgress(
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                _Rate(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=stderr,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(label, total=self.total)

    def advance(self, n: int = 1) -> None:
        """Record `n` more finished items."""
        self.done += n
        self.total = max(self.total, self.done)
        if self._bar is not None:
            self._bar.update(self._task, advance=n, total=self.total)

    def close(self) -> None:
        """Remove the bar and print the one-line summary."""
        if self._bar is not None:
            self._bar.stop()
        info(summary(self.label, self.done, self.total, time.monotonic() - self.started))


def summary(label: str, done: int, total: int, seconds: float) -> str:
    """The line a finished bar leaves: `label: 3,000 done in 12.0 s, 250/s` (or `2,999 of 3,000 done`)."""
    if done == 0 and total == 0:
        return f"{label}: nothing to do"
    of = "" if done == total else f" of {total:,}"
    rate = f", {done / seconds:,.0f}/s" if seconds > 0 and done else ""
    return f"{label}: {done:,}{of} done in {seconds:.1f} s{rate}"


@contextmanager
def progress(total: int, label: str) -> Iterator[Progress]:
    """A `Progress` closed (with its summary line) when the block ends, even on error."""
    bar = Progress(total, label)
    try:
        yield bar
    finally:
        bar.close()


def emit(data: Any) -> None:
    """Print one result as a JSON line on stdout."""
    print(json.dumps(data, ensure_ascii=False, default=str), flush=True)


def info(message: str) -> None:
    """Print a message for the person at the terminal (stderr, so stdout stays machine-readable)."""
    print(message, file=sys.stderr, flush=True)


def readable_file(value: str) -> str:
    """argparse type: an existing readable file (or ``-`` for stdin), checked before any work starts."""
    if value == "-":
        return value
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {value}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {value}")
    return value


def existing_dir(value: str) -> str:
    """argparse type: an existing directory, checked before any work starts."""
    if not Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"no such directory: {value}")
    return value


def table(rows: list[dict[str, Any]], columns: list[str], *, as_json: bool | None = None) -> None:
    """Print `rows`: an aligned table on a terminal, JSON lines otherwise (or when `as_json`), so
    scripts can read what people read as a table."""
    if as_json if as_json is not None else not sys.stdout.isatty():
        for row in rows:
            emit(row)
        return
    sys.stdout.write(render_table(rows, columns))
    sys.stdout.flush()


def render_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """`rows` as an aligned text table of `columns` (lists joined with commas, None as '-')."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, list | tuple):
            return ",".join(str(v) for v in value) or "-"
        return str(value)

    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    if not rows:
        lines.append("(none)")
    return "\n".join(lines) + "\n"
