"""The datasets words of a cut (the shape, `app.core.cuts.Cut`, is every family's): a reply cut to fit
its budget says what it left out (rows, columns by name, groups, files), why (the budget it kept) and how
to get it (the call that does, or a sentence when no single call does). These helpers word the parts
alike in every datasets tool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.core.cuts import Cut, NextCall, budget_reason, named

__all__ = ["budget_reason", "cut", "named", "rows_text"]


def rows_text(first: int, end: int, total: int | None, what: str = "rows") -> str:
    """The rows left out: 1-based rows `first`..`end` of `total` (`end` None-free; `total` may be unknown)."""
    of = f" of {total}" if total is not None else ""
    span = f"row {first}" if first == end else f"{what} {first}-{end}"
    return f"{span}{of}"


def cut(reason: str, left_out: Sequence[str], tool: str | None = None, how: str | None = None, **args: Any) -> Cut:
    """A `Cut` whose `left_out` joins the non-empty parts with '; ', whose next call is `tool` with `args`
    changed (none without a tool), and whose `how` is the way that is no single call."""
    text = "; ".join(part for part in left_out if part)
    call = NextCall(tool=tool, args=args) if tool else None
    return Cut(reason=reason, left_out=text, next_call=call, how=how)
