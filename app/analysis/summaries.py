"""Page summaries: a one-line digest of a page of records (distributions, numeric stats, dates)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
MAX_KEYS = 30
MAX_CHARS = 900


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _fmt(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def summarize(model: str, label: str, rows: list[dict[str, Any]], id_field: str = "id") -> str:
    """`<model> <label> (<n> records): status completed 58, reading 27; rating 1-5 avg 3.9 median 4; ...`"""
    keys: list[str] = []
    for row in rows:
        for key in row:
            if key not in keys and len(keys) < MAX_KEYS:
                keys.append(key)
    parts: list[str] = []
    n = len(rows)
    for key in keys:
        if key == id_field:
            continue
        values = [r.get(key) for r in rows]
        present = [v for v in values if v is not None]
        missing = n - len(present)
        if not present:
            parts.append(f"{key} all empty")
            continue
        note = f" ({missing} empty)" if missing else ""
        if all(_num(v) for v in present):
            if key.endswith("_id"):
                continue
            nums = [float(v) for v in present]
            parts.append(
                f"{key} {_fmt(min(nums))}-{_fmt(max(nums))} avg {_fmt(statistics.fmean(nums))} "
                f"median {_fmt(statistics.median(nums))}{note}"
            )
        elif all(isinstance(v, str) and _DATE.match(v) for v in present):
            dates = sorted(v[:10] for v in present)
            parts.append(f"{key} {dates[0]}..{dates[-1]}{note}")
        elif all(isinstance(v, str | bool | int) for v in present):
            counts = Counter(str(v).lower() if isinstance(v, bool) else v for v in present)
            if len(counts) <= 8 and (len(counts) < len(present) or n <= 3):
                dist = ", ".join(f"{v} {c}" for v, c in counts.most_common())
                parts.append(f"{key} {dist}{note}")
    text = f"{model} {label} ({n} records): " + "; ".join(parts)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"
