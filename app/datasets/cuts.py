"""The one rule of a cut reply: a reply cut to fit its budget says what it left out (rows, columns by
name, groups, files), why (the budget it kept) and how to get it (the call that does), in its `cut`
field (`schemas.Cut`); its other fields describe what it shows. These helpers word the parts alike in
every datasets tool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.datasets.schemas import Cut, NextCall

# Names listed in a `left_out` text before the rest are only counted (each name costs tokens).
NAMES_LISTED = 8


def budget_reason(limit: int, requested: int | None) -> str:
    """Why a reply was cut: the token budget it kept, the caller's or the server's default."""
    return f"max_tokens {limit}" if requested else f"max_tokens {limit} (default)"


def named(names: Sequence[Any], listed: int = NAMES_LISTED) -> str:
    """`names` joined by commas, the first `listed` of them, then how many more: 'a, b, c (+4 more)'."""
    shown = ", ".join(str(n) for n in names[:listed])
    more = len(names) - listed
    return f"{shown} (+{more} more)" if more > 0 else shown


def rows_text(first: int, end: int, total: int | None, what: str = "rows") -> str:
    """The rows left out: 1-based rows `first`..`end` of `total` (`end` None-free; `total` may be unknown)."""
    of = f" of {total}" if total is not None else ""
    span = f"row {first}" if first == end else f"{what} {first}-{end}"
    return f"{span}{of}"


def cut(reason: str, left_out: Sequence[str], tool: str | None = None, **args: Any) -> Cut:
    """A `Cut` whose `left_out` joins the non-empty parts with '; ', and whose next call is `tool` with
    `args` changed (none without a tool)."""
    text = "; ".join(part for part in left_out if part)
    return Cut(reason=reason, left_out=text, next_call=NextCall(tool=tool, args=args) if tool else None)
