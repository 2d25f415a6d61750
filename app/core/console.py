"""Terminal output of the `cairn` commands: progress on stderr, results on stdout.

Progress bars are tqdm's, drawn only when stderr is a terminal; a finished bar always leaves one
summary line, so logs of non-interactive runs still say how much was done.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm import tqdm


class Progress:
    """A progress bar for `total` items; `advance(n)` records finished ones."""

    def __init__(self, total: int, label: str) -> None:
        self.label = label
        self.done = 0
        self.total = max(total, 0)
        self._bar = tqdm(total=self.total, desc=label, file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)

    def advance(self, n: int = 1) -> None:
        """Record `n` more finished items."""
        self.done += n
        self._bar.update(n)

    def close(self) -> None:
        """Remove the bar and print the one-line summary."""
        self._bar.close()
        info(f"{self.label}: {self.done}/{self.total} done")


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
