"""One rendering rule for every value an answer shows (its table is in docs/datasets.md), on the Python
side: `jsonable` renders what reaches Python from DuckDB (values Python cannot take whole are
rendered to text in SQL first, see `rendering`); `cell_text` makes a rendered value one CSV or
spreadsheet cell; `extreme` renders a summary's min or max. Also DuckDB's numeric type names."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
import uuid
from typing import Any

# What `jsonable` keeps of a value: the characters of a text, the items of a list or struct, the bytes
# of a blob.
CELL_CHARS = 300
LIST_ITEMS = 50
BLOB_BYTES = 96


# The largest integer a JSON reader (a float64) holds exactly: past it, integers travel as text.
SAFE_INTEGER = 2**53 - 1
_FRACTION_ZEROS = re.compile(r"(\.\d*?[1-9])0+(?=\D|$)")
_WIDE = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_UP)
DECIMAL_TYPE = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def jsonable(value: Any, cut: bool = True) -> Any:
    """A DuckDB value as JSON by the rendering rule: integers and decimals as numbers when a float64
    holds them exactly (else their exact digits as a string), NaN and infinities as "NaN", "Infinity"
    and "-Infinity", dates and times in ISO 8601 (UTC for TIMESTAMPTZ), UUIDs as text, blobs as
    "base64:…", lists as arrays, structs and maps as objects. `cut` bounds it to what an answer shows
    (CELL_CHARS characters of a text, BLOB_BYTES bytes of a blob, LIST_ITEMS items, a double's
    `shortest` form); an export keeps it whole."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -SAFE_INTEGER <= value <= SAFE_INTEGER else str(value)
    if isinstance(value, str):
        return value[:CELL_CHARS] + "…" if cut and len(value) > CELL_CHARS else value
    if isinstance(value, float):
        if math.isfinite(value):
            return shortest(value) if cut else value
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return _iso(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        more = cut and len(raw) > BLOB_BYTES
        return "base64:" + base64.b64encode(raw[:BLOB_BYTES] if more else raw).decode() + ("…" if more else "")
    if isinstance(value, dict):
        items = list(value.items())
        return {_key(k): jsonable(v, cut) for k, v in (items[:LIST_ITEMS] if cut else items)}
    if isinstance(value, list | tuple):
        return [jsonable(v, cut) for v in (value[:LIST_ITEMS] if cut else value)]
    text = str(value)
    return text[:CELL_CHARS] if cut else text


# The significant digits a double holds reliably (DBL_DIG): any decimal of at most 15 digits reads back
# from its double as itself, so only the float noise of arithmetic lies past them.
FLOAT_DIGITS = 15


def shortest(value: float) -> float:
    """A finite double as answers show it: rounded to FLOAT_DIGITS significant digits (and written in
    its shortest form), so that a sum's float noise goes (32763.999999999993 -> 32764.0, 0.1 + 0.2 ->
    0.3) while every value written with 15 digits or fewer is shown as written."""
    return float(f"{value:.{FLOAT_DIGITS}g}")


def _decimal(value: decimal.Decimal) -> Any:
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or not value.is_finite():
        return str(value)
    if exponent >= 0:  # DECIMAL(p, 0), e.g. a stored HUGEINT
        return jsonable(int(value))
    f = float(value)
    # The test of `json_export_columns` in SQL: the float64 rounded to the value's scale gives it back.
    back = _WIDE.quantize(decimal.Decimal(f), decimal.Decimal((0, (1,), exponent)))
    return f if back == value else str(value)


def _iso(value: dt.datetime | dt.date | dt.time) -> str:
    """ISO 8601 as `_shown` renders it in SQL (UTC for an aware timestamp, no trailing zeros in a
    fraction): for a date or time that reached Python without being rendered there."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return _FRACTION_ZEROS.sub(r"\1", value.isoformat())


def _key(key: Any) -> str:
    shown = jsonable(key)
    return shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)


def cell_text(value: Any) -> str:
    """A rendered value (what `jsonable` gives) as the text of one CSV or spreadsheet cell: '' for
    NULL, compact JSON for booleans, numbers, lists and objects."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def rows_as_dicts(columns: list[str], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows as JSON-safe dicts."""
    return [{c: jsonable(v) for c, v in zip(columns, row, strict=False)} for row in rows]


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB'."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def extreme(text: str | None, ctype: str) -> Any:
    """A min or max of `summary_query` as answers render the value: exact for numbers (an integer or
    decimal by the rendering rule), else the text, cut to 40 characters."""
    if text is not None and is_numeric(ctype):
        try:
            exact = float(text) if ctype.upper() in ("FLOAT", "DOUBLE", "REAL") else decimal.Decimal(text)
            return jsonable(exact)
        except (ValueError, decimal.InvalidOperation):
            pass
    return _short(text)


def _short(value: Any) -> Any:
    v = jsonable(value)
    return v[:40] + "…" if isinstance(v, str) and len(v) > 40 else v


def rounded(value: Any) -> Any:
    """A statistic as a reply shows it: six significant digits; None when it is not a finite number."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return float(f"{f:.6g}")


INTEGER_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
)
NUMERIC_TYPES = (*INTEGER_TYPES, "FLOAT", "DOUBLE", "REAL")


def is_numeric(ctype: str) -> bool:
    """True for DuckDB's integer, floating-point and DECIMAL types."""
    return ctype.upper() in NUMERIC_TYPES or DECIMAL_TYPE.fullmatch(ctype.upper()) is not None
