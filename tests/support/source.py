"""Reading app/'s source as syntax trees, for the tests that check the architecture on the source."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


def parse_text(source: str) -> ast.Module:
    """The syntax tree of `source`.

    CPython 3.11 keeps the AST converter's recursion depth per interpreter, not per thread
    (python/cpython#106905): a tree built while another thread builds one (the test server's threads)
    can fail with "AST constructor recursion depth mismatch". That failure says nothing about the
    source, so the parse is tried again."""
    for attempt in range(5):
        try:
            return ast.parse(source)
        except SystemError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


@cache
def parse(path: Path) -> ast.Module:
    """The syntax tree of the file at `path`, read once per run."""
    return parse_text(path.read_text(encoding="utf-8"))
