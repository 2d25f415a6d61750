"""The analysis words of a cut (the shape, `app.core.cuts.Cut`, is every family's): a reply cut to its
limits (the reply budget `CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS`, a `limit`, the length of one value) says
what it left out, why, and how to get it: the call that does (the same tool with the next offset, or
another), or a sentence when no single call does (a whole shortened value, a random sample's rest).

Rows are cut in order, so a stratified sample, whose rows come one per stratum first, keeps one row
of every stratum before a second of any. Long values are shortened to MAX_VALUE_CHARS characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core import budget
from app.core.cuts import Cut, NextCall, call_text, named

MAX_VALUE_CHARS = 300
BUDGET_SETTING = "CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS"


def trim_row(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A row with long strings (and long JSON values) cut to MAX_VALUE_CHARS, and the fields cut."""
    cut: list[str] = []
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            out[key] = value[:MAX_VALUE_CHARS] + "…"
            cut.append(key)
        elif isinstance(value, list | dict) and len(budget.dumps(value)) > MAX_VALUE_CHARS:
            out[key] = budget.dumps(value)[:MAX_VALUE_CHARS] + "…"
            cut.append(key)
        else:
            out[key] = value
    return out, cut


@dataclass
class Bounded:
    """Rows fitted to a reply budget: those kept, how many were left out, the fields whose values were
    shortened."""

    rows: list[dict[str, Any]]
    dropped: int = 0
    shortened: list[str] = field(default_factory=list)

    @property
    def cut(self) -> bool:
        """Anything was left out or shortened."""
        return bool(self.dropped or self.shortened)


def bounded_rows(rows: list[dict[str, Any]], max_tokens: int) -> Bounded:
    """Rows with long values trimmed, cut off once they would pass `max_tokens` tokens of the reply
    (app.core.budget: each row's compact JSON plus the comma between rows); at least one row is kept."""
    trimmed = [trim_row(row) for row in rows]
    sizes = budget.item_tokens([t for t, _ in trimmed])
    kept: list[dict[str, Any]] = []
    shortened: dict[str, None] = {}
    used = 0
    for (row, cut), size in zip(trimmed, sizes, strict=True):
        if kept and used + size + 1 > max_tokens:
            return Bounded(kept, len(rows) - len(kept), list(shortened))
        kept.append(row)
        used += size + 1
        shortened.update(dict.fromkeys(cut))
    return Bounded(kept, 0, list(shortened))


def fitting(items: list[Any], max_tokens: int) -> int:
    """How many of `items`, in order, fit in `max_tokens` tokens as compact JSON (at least one)."""
    used = 0
    for n, size in enumerate(budget.item_tokens(items)):
        if n and used + size + 1 > max_tokens:
            return n
        used += size + 1
    return len(items)


def budget_why(max_tokens: int) -> str:
    """The reply budget, as a cut's `why`."""
    return f"the reply budget of {max_tokens} tokens ({BUDGET_SETTING})"


@dataclass(frozen=True)
class Part:
    """One thing a reply left out: what, why, and the call (`call`, a tool and its arguments) or the way
    in words (`how`) that gets it."""

    left_out: str
    reason: str
    call: NextCall | None = None
    how: str | None = None


def call(tool: str, **args: Any) -> NextCall:
    """The next call: `tool` with `args` (changed in the cut call's when it is the same tool)."""
    return NextCall(tool=tool, args=args)


def shortened_part(fields: list[str]) -> Part:
    """The part of values shortened to MAX_VALUE_CHARS (a whole value is no single call's)."""
    return Part(
        f"the values of {named(fields)} past {MAX_VALUE_CHARS} characters (marked …)",
        f"each value is shown up to {MAX_VALUE_CHARS} characters",
        how=f"a whole value: mode aggregate with group_by '{fields[0]}' and a where naming the record",
    )


def joined(parts: list[Part]) -> Cut | None:
    """One Cut from its parts; None when nothing was cut. The first part's call is the cut's next call; a
    later part's call of the same tool adds its arguments to it, of another tool is named in `how`."""
    if not parts:
        return None
    first = next((p.call for p in parts if p.call), None)
    args = dict(first.args) if first else {}
    ways: list[str] = []
    for p in parts:
        if p.call and p.call is not first:
            if first is not None and p.call.tool == first.tool and not set(p.call.args) & set(args):
                args.update(p.call.args)
            else:
                ways.append(call_text(p.call))
        if p.how:
            ways.append(p.how)
    return Cut(
        reason="; ".join(dict.fromkeys(p.reason for p in parts)),
        left_out="; ".join(p.left_out for p in parts),
        next_call=NextCall(tool=first.tool, args=args) if first else None,
        how="; ".join(ways) or None,
    )


def text_cut(text: str, most: int) -> tuple[str, bool]:
    """`text` shortened to `most` characters (marked …), and whether it was."""
    return (text, False) if len(text) <= most else (text[:most] + "…", True)
