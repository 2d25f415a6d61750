"""Dates written as text, in one format or several: which strptime formats a text column's sampled
values are written in, the share of each, and the SQL that parses them all (`formats_of`, `advice`).

Each value is tested in SQL against the formats of FAMILIES its start calls for (`mask_sql`: a bit per
format that reads it); the column's values are then counted per set of formats (a histogram of the masks). The formats
shown are picked from those counts greedily, each time the one that reads the most values not yet read,
so a value two formats read (03/04/2025 day- or month-first, "May 3, 2025" abbreviated or full) counts
once, for the format that reads more of the column."""

from __future__ import annotations

import functools
import re
from typing import Any

import duckdb

from app.datasets.engine.sandbox import ident
from app.datasets.engine.sandbox import sql_string as lit

# The formats tried (DuckDB's strptime, which must read the whole value), by how a value they read
# begins (an RE2 pattern): a value is tried against the formats of the one family its start matches,
# a few strptime calls rather than one per format.
FAMILIES = (
    (r"^\d{4}-", ("%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z")),
    (r"^\d{4}/", ("%Y/%m/%d",)),
    (r"^\d{1,2}/", ("%d/%m/%Y", "%m/%d/%Y", "%d/%m/%Y %H:%M")),
    (r"^\d{1,2}\.", ("%d.%m.%Y",)),
    (r"^\d{1,2}-", ("%d-%m-%Y", "%m-%d-%Y")),
    (r"^[A-Za-z]{3,9} \d", ("%b %d, %Y", "%B %d, %Y")),
    (r"^\d{1,2} [A-Za-z]", ("%d %b %Y", "%d %B %Y")),
)
FORMATS = tuple(fmt for _, formats in FAMILIES for fmt in formats)
# Formats that read the same digits with day and month swapped: a column read by one of them whose
# values all read by the other too cannot tell which it is.
_SWAPPED = {"%d/%m/%Y": "%m/%d/%Y", "%m/%d/%Y": "%d/%m/%Y", "%d-%m-%Y": "%m-%d-%Y", "%m-%d-%Y": "%d-%m-%Y"}
# The least share of a column's values that must read as dates for it to be called dates.
MOSTLY = 0.5


def mask_sql(text: str) -> str:
    """An SQL expression: the formats of FORMATS that read the text expression `text`, as a bit mask
    (bit i for FORMATS[i]; 0 when none does). Only the formats of the family its start matches are
    tried (DuckDB evaluates a CASE branch for the rows it selects only)."""
    branches: list[str] = []
    for pattern, formats in FAMILIES:
        bits = " + ".join(
            f"CASE WHEN try_strptime({text}, {lit(fmt)}) IS NULL THEN 0 ELSE {1 << FORMATS.index(fmt)} END"
            for fmt in formats
        )
        branches.append(f"WHEN regexp_matches({text}, {lit(pattern)}) THEN {bits}")
    return f"CASE {' '.join(branches)} ELSE 0 END"


def formats_of(masks: dict[Any, Any] | None) -> tuple[list[tuple[str, int]], int]:
    """From a histogram of masks (mask -> values; mask 0 or absent: values no format reads): the formats
    picked (see the module's docstring) with the values each reads first, most first, and the values
    read as dates in all."""
    left = {int(m): int(n) for m, n in (masks or {}).items() if m and int(m) > 0 and n}
    dated = sum(left.values())
    picked: list[tuple[str, int]] = []
    while left:
        reads = [(sum(n for m, n in left.items() if m >> i & 1), i) for i in range(len(FORMATS))]
        best, i = max(reads, key=lambda r: (r[0], -r[1]))
        if best == 0:
            break
        picked.append((FORMATS[i], best))
        left = {m: n for m, n in left.items() if not m >> i & 1}
    return picked, dated


def ambiguous(masks: dict[Any, Any] | None, fmt: str) -> bool:
    """True when every value `fmt` reads also reads with day and month swapped (no day past 12)."""
    other = _SWAPPED.get(fmt)
    if other is None:
        return False
    i, j = FORMATS.index(fmt), FORMATS.index(other)
    mine = [int(m) for m, n in (masks or {}).items() if m and int(m) >> i & 1 and n]
    return bool(mine) and all(m >> j & 1 for m in mine)


def shares(masks: dict[Any, Any] | None, values: int) -> dict[str, float]:
    """The share (0..1, three decimals) of `values` (the column's sampled non-null values) each picked
    format reads, most first; empty when most of them are not dates."""
    picked, dated = formats_of(masks)
    if not picked or values <= 0 or dated < MOSTLY * values:
        return {}
    return {fmt: round(n / values, 3) for fmt, n in picked}


def _pct(part: int, whole: int) -> str:
    p = 100.0 * part / whole
    return "<1%" if 0 < p < 1 else f"{p:.0f}%"


def advice(name: str, masks: dict[Any, Any] | None, values: int, example: Any) -> str | None:
    """The recommendation for a text column holding dates (None when most of its `values` are not
    dates): the format(s) with their shares and the SQL that parses them. `example`: its most common
    value that is no number (shown when some values are not dates)."""
    picked, dated = formats_of(masks)
    if not picked or values <= 0 or dated < MOSTLY * values:
        return None
    col = column_sql(name)
    listed = ", ".join(f"{fmt} {_pct(n, values)}" for fmt, n in picked)
    if len(picked) == 1:
        fmt = picked[0][0]
        text = f"'{name}' holds dates as text ({fmt}"
        text += ", day and month cannot be told apart: no day past 12)" if ambiguous(masks, fmt) else ")"
        if dated == values:
            return f"{text}: strptime({col}, {lit(fmt)})"
        other = _pct(values - dated, values)
        return f"{text} with {other} other text (e.g. '{example}'): try_strptime({col}, {lit(fmt)}) nulls those"
    text = f"'{name}' mixes {len(picked)} date formats ({listed}"
    text += f"; {_pct(values - dated, values)} not dates)" if dated < values else ")"
    # strptime tries a list of formats in turn, the first that reads a value wins.
    return f"{text}: try_strptime({col}, [{', '.join(lit(fmt) for fmt, _ in picked)}])"


_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")


@functools.cache
def _keywords() -> frozenset[str]:
    """DuckDB's keywords that cannot name a column unquoted."""
    with duckdb.connect() as con:
        rows = con.execute(
            "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category IN ('reserved', 'type_function')"
        ).fetchall()
    return frozenset(str(r[0]) for r in rows)


def column_sql(name: str) -> str:
    """Column `name` as a recommendation's SQL writes it: bare when it can be, else quoted."""
    return name if _PLAIN.fullmatch(name) and name not in _keywords() else ident(name)
