"""The one shape of a cut reply, for every family: a reply cut to fit a budget or a limit says what it
left out (rows, columns by name, groups, files), why (the limit it kept) and how to get it, in its
`cut` field: the call that does (`next_call`, the same or another tool with the arguments to change),
or, for a way that is no single call, a sentence (`how`). The reply's other fields describe what it
shows. The words common to every family are here; each family words its own parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

# Names listed in a `left_out` text before the rest are only counted (each name costs tokens).
NAMES_LISTED = 8


def _absent(value: Any) -> bool:
    return value is None


class NextCall(BaseModel):
    """The call that gets what a reply left out: `tool` with `args` changed in (or added to) the
    arguments of the call that was cut when it is the same tool, else the whole arguments of `tool`."""

    tool: str
    args: dict[str, Any]


class Cut(BaseModel):
    """What a reply cut to its limits left out, why, and how to get it. Present only when the reply was
    cut; the reply's other fields describe what it shows."""

    reason: str = Field(description="Why: the budget or limit that was kept, e.g. 'max_tokens 350'")
    left_out: str = Field(description="What: rows, columns by name, groups, files left out of this reply")
    next_call: NextCall | None = Field(
        default=None,
        exclude_if=_absent,
        description="How, as a call: the tool and the arguments to change (the same call's) or to give (another's)",
    )
    how: str | None = Field(
        default=None, exclude_if=_absent, description="How, when the way is not a single call (or a second way)"
    )


CutField = Field(
    default=None,
    exclude_if=_absent,
    description="Only when the reply was cut: what it left out, why, and the call (or the way) that gets it",
)


def budget_reason(limit: int, requested: int | None, argument: str = "max_tokens") -> str:
    """Why a reply was cut: the token budget it kept, the caller's (`argument`) or the server's default."""
    return f"{argument} {limit}" if requested else f"{argument} {limit} (default)"


def named(names: Sequence[Any], listed: int = NAMES_LISTED) -> str:
    """`names` joined by commas, the first `listed` of them, then how many more: 'a, b, c (+4 more)'."""
    shown = ", ".join(str(n) for n in names[:listed])
    more = len(names) - listed
    return f"{shown} (+{more} more)" if more > 0 else shown


def call_text(call: NextCall) -> str:
    """A next call in words, for a `how` that names a second way: 'get_result with offset 5, limit 10'."""
    args = ", ".join(f"{k} {v}" for k, v in call.args.items())
    return f"{call.tool} with {args}" if args else call.tool
