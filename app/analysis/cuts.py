"""The cut rule of the analysis replies: a reply cut to its limits (the reply budget
`CAIRN_ANALYSIS_MAX_RESPONSE_TOKENS`, a `limit`, the length of one value) says what it left out, why,
and the call that gets it (`schemas.Cut`).

Rows are cut in order, so a stratified sample, whose rows come one per stratum first, keeps one row
of every stratum before a second of any. Long values are shortened to MAX_VALUE_CHARS characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.analysis.schemas import Cut
from app.core import budget

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


def names(fields: list[str], most: int = 10) -> str:
    """Field names for a message: the first `most`, then how many more."""
    shown = ", ".join(fields[:most])
    return shown + (f" and {len(fields) - most} more" if len(fields) > most else "")


def shortened_part(fields: list[str]) -> tuple[str, str, str]:
    """(what, why, how) of values shortened to MAX_VALUE_CHARS."""
    return (
        f"the values of {names(fields)} past {MAX_VALUE_CHARS} characters (marked …)",
        f"each value is shown up to {MAX_VALUE_CHARS} characters",
        f"a whole value: mode aggregate with group_by '{fields[0]}' and a where naming the record",
    )


def joined(parts: list[tuple[str, str, str]], next_offset: int | None = None) -> Cut | None:
    """One Cut from its parts (what, why, how); None when nothing was cut."""
    if not parts:
        return None
    return Cut(
        omitted="; ".join(p[0] for p in parts),
        why="; ".join(dict.fromkeys(p[1] for p in parts)),
        how="; ".join(p[2] for p in parts),
        next_offset=next_offset,
    )


def text_cut(text: str, most: int) -> tuple[str, bool]:
    """`text` shortened to `most` characters (marked …), and whether it was."""
    return (text, False) if len(text) <= most else (text[:most] + "…", True)
