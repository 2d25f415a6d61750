"""Page summaries: a one-line digest of a page of records (distributions, numeric stats, dates)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
MAX_KEYS = 30
MAX_CHARS = 900
# The types JSON decodes to: a field whose values are all of these is classified from its set of
# value types in one pass; any other type (a subclass) goes through the per-value tests.
_JSON_TYPES = frozenset({str, int, float, bool, list, dict})
_NUMBERS = frozenset({int, float})
_COUNTED = frozenset({str, bool, int})


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _fmt(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def _kind(present: list[Any], types: set[type]) -> str | None:
    """How a field's non-null values are summarised: 'number', 'date', 'counted' or None (not at all)."""
    if types <= _JSON_TYPES:
        if types <= _NUMBERS:
            return "number"
        if types == {str}:
            return "date" if all(map(_DATE.match, present)) else "counted"
        return "counted" if types <= _COUNTED else None
    if all(_num(v) for v in present):
        return "number"
    if all(isinstance(v, str) and _DATE.match(v) for v in present):
        return "date"
    if all(isinstance(v, str | bool | int) for v in present):
        return "counted"
    return None


def summarize(model: str, label: str, rows: list[dict[str, Any]], id_field: str = "id") -> str:
    """`<model> <label> (<n> records): status completed 58, reading 27; rating 1-5 avg 3.9 median 4; ...`"""
    first_seen: dict[str, Any] = {}
    for row in rows:
        first_seen.update(row)  # only the keys matter: a dict keeps them in first-seen order
        if len(first_seen) >= MAX_KEYS:
            break
    parts: list[str] = []
    n = len(rows)
    for key in list(first_seen)[:MAX_KEYS]:
        if key == id_field:
            continue
        present = [v for r in rows if (v := r.get(key)) is not None]
        missing = n - len(present)
        if not present:
            parts.append(f"{key} all empty")
            continue
        note = f" ({missing} empty)" if missing else ""
        types = set(map(type, present))
        kind = _kind(present, types)
        if kind == "number":
            if key.endswith("_id"):
                continue
            nums = [float(v) for v in present]
            parts.append(
                f"{key} {_fmt(min(nums))}-{_fmt(max(nums))} avg {_fmt(statistics.fmean(nums))} "
                f"median {_fmt(statistics.median(nums))}{note}"
            )
        elif kind == "date":
            days = [v[:10] for v in present]
            parts.append(f"{key} {min(days)}..{max(days)}{note}")
        elif kind == "counted":
            counted = present if bool not in types else [str(v).lower() if type(v) is bool else v for v in present]
            counts = Counter(counted)
            if len(counts) <= 8 and (len(counts) < len(present) or n <= 3):
                dist = ", ".join(f"{v} {c}" for v, c in counts.most_common())
                parts.append(f"{key} {dist}{note}")
    text = f"{model} {label} ({n} records): " + "; ".join(parts)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"
