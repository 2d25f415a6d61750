"""Profiling and sampling: one streaming pass for statistics, bounded extra passes for categories and
for a sample of rows."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import re
from typing import Any

import duckdb

from app.datasets.engine.databases import EngineConfig, run_locked
from app.datasets.engine.dates import advice as date_advice
from app.datasets.engine.dates import mask_sql, shares
from app.datasets.engine.nested import flat_queries, is_nested, json_kinds, leaves, parsed
from app.datasets.engine.query import summary_query
from app.datasets.engine.rendering import capped_columns, capped_exprs
from app.datasets.engine.sandbox import ident
from app.datasets.engine.sources import Source
from app.datasets.engine.values import (
    INTEGER_TYPES,
    cell_text,
    extreme,
    human_bytes,
    is_numeric,
    jsonable,
    rounded,
    rows_as_dicts,
)

# What a profile holds, as part of its cache key: a profile cached by an older server, without what
# was added since (inner fields, date formats), is not answered again.
SHAPE = 2
SAMPLE_VALUES = 3
VALUE_CHARS = 60
# A text column is a category when it holds at most this many distinct values, each seen at least
# twice on average (non-null values >= 2 x distinct), whatever max_categories is: that argument only
# bounds how many of its values a reply lists.
CATEGORY_MAX_DISTINCT = 1000
SAMPLE_MODULUS = 1_000_003
_SAMPLE_TABLE = "__cairn_profile_sample"
_BOOLEAN_WORDS = ("y", "n", "yes", "no", "true", "false", "t", "f", "1", "0")
# Checks on the sampled text (RE2 patterns): a number, a leading currency sign, thousands commas.
_NUMBER = r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?"
_CURRENCY = r"^([-+]?)[$€£¥]\s*"
_THOUSANDS = r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?"
# What a `detail: "summary"` reply keeps of a column (see `summary_line`).
SUMMARY_FIELDS = ("name", "type", "null_pct", "unique_count", "sample_values", "stats")
SUMMARY_VALUES = 2
SUMMARY_TOP = 3
SUMMARY_CHARS = 20


def semantic_type(duck_type: str, distinct: int | None, filled: int) -> str:
    """The seed's type vocabulary from a DuckDB type; a text column with few distinct values (see
    CATEGORY_MAX_DISTINCT) among its `filled` (non-null) values is a category."""
    t = duck_type.upper()
    if t.endswith("]"):  # a list or array of dates or numbers is none of them
        return "list"
    if t.startswith(("STRUCT", "MAP")):
        return "struct"
    if t == "JSON":
        return "json"
    if t in ("BOOLEAN", "BOOL"):
        return "bool"
    if t.startswith(("DATE", "TIMESTAMP", "TIME")):
        return "datetime"
    if t in INTEGER_TYPES:
        return "int64"
    if is_numeric(t):
        return "float64"
    if t == "VARCHAR" and distinct is not None and 0 < distinct <= CATEGORY_MAX_DISTINCT and filled >= 2 * distinct:
        return "category"
    return "string"


def _width(sem: str, avg_len: float) -> float:
    return {"int64": 8, "float64": 8, "bool": 1, "datetime": 8, "category": 4}.get(sem, avg_len + 16)


def profile(
    cfg: EngineConfig, src: Source, *, sample_size: int, compute_stats: bool, max_categories: int
) -> dict[str, Any]:
    """Schema, statistics, quality score and recommendations of one source, in full detail.

    Counts, nulls, distinct values and statistics come from one streaming pass over every row; the top
    values of categories from one more pass (`_top_values`); sample values and the checks of text
    columns behind the recommendations from `sample_size` rows spread over the file (`_inspect`)."""
    file_bytes = sum(p.stat().st_size for p in src.files)

    def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
        view = ident(src.name)
        described = con.execute(f"DESCRIBE {view}").fetchall()
        names = [r[0] for r in described]
        types = {r[0]: str(r[1]) for r in described}
        stats: dict[str, dict[str, Any]] = {}
        if compute_stats:
            stats = _summarized(con, f"SELECT * FROM {view}", described)
            row_count = int(next(iter(stats.values()))["count"]) if stats else 0
        else:
            parts = (
                ["count(*)"]
                + [f"count({ident(n)})" for n in names]
                + [f"approx_count_distinct({ident(n)})" for n in names]
            )
            one = con.execute(f"SELECT {', '.join(parts)} FROM {view}").fetchone() or ()
            row_count = int(one[0]) if one else 0
            for i, n in enumerate(names):
                nonnull, distinct = int(one[1 + i]), int(one[1 + len(names) + i])
                null_pct = 0.0 if row_count == 0 else 100.0 * (row_count - nonnull) / row_count
                stats[n] = {"approx_unique": distinct, "null_pct": null_pct, "count": row_count}
        cats = _top_values(con, view, names, types, stats, max_categories) if compute_stats and row_count else {}
        head_rows, checks = _inspect(con, view, names, types, row_count, sample_size)
        inner = _inner_fields(con, view, max_categories) if compute_stats and row_count else {}
        return {
            "names": names,
            "types": types,
            "stats": stats,
            "rows": row_count,
            "head": head_rows,
            "cats": cats,
            "checks": checks,
            "fields": inner,
        }

    # The view reads the file as execute_query does (DuckDB's own type detection): sniffing fewer rows
    # than DuckDB's default only risks a type that a later row fails to convert to.
    raw = run_locked(cfg, [src], work)
    return _assemble(raw, src, file_bytes, compute_stats)


_SUMMARY_KEYS = ("min", "max", "approx_unique", "avg", "std", "q25", "q50", "q75", "count", "null_pct")


def _summarized(con: duckdb.DuckDBPyConnection, query: str, described: list[Any]) -> dict[str, dict[str, Any]]:
    """Each column of `query` (whose DESCRIBE rows are `described`): its `summary_query` statistics by
    _SUMMARY_KEYS."""
    rows = con.execute(summary_query(con, query, described)).fetchall()
    return {r[0]: dict(zip(_SUMMARY_KEYS, r[2:], strict=True)) for r in rows}


def _inner_fields(con: duckdb.DuckDBPyConnection, view: str, max_categories: int) -> dict[str, dict[str, Any]]:
    """For each struct or list column of `view`, its first `nested.MAX_FIELDS` inner fields described as
    columns are (path, semantic type, nulls, distinct values, DuckDB type and statistics; list items
    counted one by one), and how many more it has. One pass per column read in place and one per list
    unnested, plus one for top values."""
    rel = con.sql(f"SELECT * FROM {view}")
    if rel is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for name, dtype in zip(rel.columns, rel.types, strict=True):
        if not is_nested(dtype):
            continue
        fields: list[dict[str, Any]] = []
        for flat in flat_queries(view, name, dtype):
            described = con.execute(f"DESCRIBE {flat}").fetchall()
            paths = [str(r[0]) for r in described]
            ptypes = {str(r[0]): str(r[1]) for r in described}
            pstats = _summarized(con, flat, described)
            count = int(next(iter(pstats.values()))["count"]) if pstats else 0
            cats = _top_values(con, f"({flat})", paths, ptypes, pstats, max_categories) if count else {}
            part = {"stats": pstats, "rows": count, "cats": cats}
            for path in paths:
                null_pct, distinct, filled = _counts(part, path)
                sem = semantic_type(ptypes[path], distinct, filled)
                entry: dict[str, Any] = {
                    "path": path,
                    "type": sem,
                    "null_pct": round(null_pct, 2),
                    "unique_count": distinct,
                    "duckdb_type": ptypes[path],
                }
                detail = _stats(pstats.get(path, {}), sem, ptypes[path], cats.get(path), distinct)
                if detail:
                    entry["stats"] = detail
                fields.append(entry)
        out[name] = {"fields": fields, "omitted": max(0, len(leaves(name, dtype)) - len(fields))}
    return out


def _top_values(
    con: duckdb.DuckDBPyConnection,
    view: str,
    names: list[str],
    types: dict[str, str],
    stats: dict[str, dict[str, Any]],
    max_categories: int,
) -> dict[str, dict[str, Any]]:
    """The `max_categories` most frequent values (with counts, most frequent first), the exact distinct
    count and the non-null rows of every text column that may be a category by its approximate
    distinct count (see `semantic_type`), in one pass whose state is bounded by CATEGORY_MAX_DISTINCT."""

    def may_be_category(n: str) -> bool:
        st = stats.get(n, {})
        approx = int(st.get("approx_unique") or 0)
        filled = int(st.get("count") or 0) * (1.0 - float(st.get("null_pct") or 0.0) / 100.0)
        # HyperLogLog may be a few percent off either way: the exact counts decide.
        return 0 < approx <= 1.1 * CATEGORY_MAX_DISTINCT and 2 * approx <= 1.1 * filled

    wanted = [n for n in names if types[n] == "VARCHAR" and may_be_category(n)]
    if not wanted:
        return {}
    inner = ", ".join(f"histogram({ident(n)}) AS h{i}, count({ident(n)}) AS c{i}" for i, n in enumerate(wanted))
    # Sorted by (-count, value): most frequent first, ties in value order; values cut as answers show them.
    pairs = f"{{'n': -CAST(e.value AS BIGINT), 'v': left(e.key, {VALUE_CHARS + 1})}}"
    outer = ", ".join(
        f"list_slice(list_sort([{pairs} FOR e IN map_entries(h{i})]), 1, {int(max_categories)}),"
        f" cardinality(h{i}), c{i}"
        for i in range(len(wanted))
    )
    row = con.execute(f"SELECT {outer} FROM (SELECT {inner} FROM {view})").fetchone() or ()
    out: dict[str, dict[str, Any]] = {}
    for i, n in enumerate(wanted):
        top, distinct, nonnull = row[3 * i], row[3 * i + 1], row[3 * i + 2]
        if top is None:
            continue
        found = [[_clip(p["v"]), -int(p["n"])] for p in top]
        out[n] = {"top": found, "distinct": int(distinct or 0), "rows": int(nonnull or 0)}
    return out


def _inspect(
    con: duckdb.DuckDBPyConnection, view: str, names: list[str], types: dict[str, str], rows: int, size: int
) -> tuple[list[tuple[Any, ...]], dict[str, dict[str, Any]]]:
    """The rows of the sample (rendered and cut as answers show values) and, for each text column, the
    counts behind the messy-column recommendations, all computed on the sample: every row when the file
    has at most `size`, else `size` rows picked over the whole file by the hash of their values (so a
    file gives the same sample again)."""
    if rows == 0 or not names:
        return [], {}
    texts = [n for n in names if types[n] == "VARCHAR"]

    def inspect(table: str) -> tuple[list[tuple[Any, ...]], dict[str, dict[str, Any]]]:
        head = con.execute(f"SELECT {capped_columns(con, table, names)} FROM {table}").fetchall()
        checks: dict[str, dict[str, Any]] = {}
        if texts:
            for found in con.execute(_text_checks(table, texts)).fetchall():
                checks[found[0]] = dict(zip(_CHECKS, found[1:], strict=True))
        return head, checks

    if rows <= size:  # the whole file: read twice rather than copied (a small file costs less so)
        return inspect(view)
    # Rows picked by the hash of their values: the same rows each time, like a seeded sample, but read
    # in parallel (DuckDB draws a seeded reservoir sample on one thread). About a quarter more than
    # `size` pass the filter; the lowest hashes stay.
    keep = max(1, math.ceil(SAMPLE_MODULUS * min(1.0, 1.25 * size / rows)))
    picked = (
        f"SELECT * EXCLUDE (__h) FROM (SELECT *, hash(__t) AS __h FROM {view} AS __t)"
        f" WHERE __h % {SAMPLE_MODULUS} < {keep} ORDER BY __h LIMIT {int(size)}"
    )
    table = ident(_SAMPLE_TABLE)
    con.execute(f"CREATE TEMP TABLE {table} AS {picked}")
    try:
        return inspect(table)
    finally:
        # The table is the call's connection's and goes with it; dropping it early frees its memory.
        with contextlib.suppress(duckdb.Error):
            con.execute(f"DROP TABLE IF EXISTS {table}")


_CHECKS = (
    "n",
    "padded",
    "numbers",
    "text_example",
    "money",
    "commas",
    "spaced",
    "percent",
    "zeros",
    "booleans",
    "spellings",
    "date_masks",
    "undated_example",
)


def _text_checks(table: str, texts: list[str]) -> str:
    """A query of one row per text column of `table` that has values: its name, then the counts named
    by _CHECKS over its non-null values: values; values with leading or trailing spaces; numbers once
    spaces, a currency sign, thousands commas and a percent sign are taken off, and of those the ones
    written with each and the ones with a leading zero; the most common value that is not a number;
    boolean words and their distinct spellings; the histogram of the date formats that read each value
    (`dates.mask_sql`) and the most common value that is neither a number nor a date."""
    # The columns are unpivoted into (col, v) so the expressions are planned once, not once per column.
    words = ", ".join(repr(w) for w in _BOOLEAN_WORDS)
    values = f"UNPIVOT (SELECT {', '.join(ident(n) for n in texts)} FROM {table}) ON COLUMNS(*) INTO NAME col VALUE v"
    bare = f"regexp_replace(regexp_replace(trim(v), '{_CURRENCY}', '\\1'), '\\s*%$', '')"
    cleaned = f"CASE WHEN regexp_full_match(b, '{_THOUSANDS}') THEN replace(b, ',', '') ELSE b END"
    return (
        "SELECT col, count(v), count_if(v <> t), count_if(num), "
        f"left(mode(v) FILTER (WHERE NOT num), {VALUE_CHARS + 1}), "
        "count_if(num AND regexp_matches(t, '[$€£¥]')), count_if(num AND contains(t, ',')), "
        "count_if(num AND v <> t), count_if(num AND ends_with(t, '%')), "
        "count_if(num AND regexp_matches(t, '^[-+]?0\\d')), "
        f"count_if(lower(t) IN ({words})), count(DISTINCT v) FILTER (WHERE lower(t) IN ({words})), "
        f"histogram(dmask), left(mode(v) FILTER (WHERE NOT num AND dmask = 0), {VALUE_CHARS + 1}) "
        f"FROM (SELECT *, CASE WHEN num THEN 0 ELSE {mask_sql('t')} END AS dmask "
        f"FROM (SELECT col, v, t, regexp_full_match({cleaned}, '{_NUMBER}') AS num "
        f"FROM (SELECT col, v, trim(v) AS t, {bare} AS b FROM ({values})))) GROUP BY col"
    )


def _clip(value: Any) -> Any:
    v = jsonable(value)
    return v[:VALUE_CHARS] + "…" if isinstance(v, str) and len(v) > VALUE_CHARS else v


def _assemble(raw: dict[str, Any], src: Source, file_bytes: int, compute_stats: bool) -> dict[str, Any]:
    """The full profile of `src` from what `profile` read: an entry per column (`_column`), the quality
    score (completeness, less for constant columns) and at most 8 recommendations."""
    rows = raw["rows"]
    columns: list[dict[str, Any]] = []
    recommendations: list[str] = []
    completeness: list[float] = []
    row_width = 0.0
    for i, name in enumerate(raw["names"]):
        col, width, null_pct = _column(raw, i, name, compute_stats)
        check = raw["checks"].get(name) or {}
        formats = shares(check.get("date_masks"), int(check.get("n") or 0))
        if formats:
            col["date_formats"] = formats
        columns.append(col)
        completeness.append(1.0 - null_pct / 100.0)
        row_width += width
        recommendations += _recommend(col, i, null_pct, rows, raw["checks"].get(name))
    constant = sum(1 for c in columns if c["unique_count"] <= 1 and rows > 1)
    quality = (sum(completeness) / len(completeness)) if completeness else 0.0
    if columns:
        quality *= 1.0 - 0.5 * constant / len(columns)
    if src.fmt == "csv" and file_bytes > 100 * 1024 * 1024:
        recommendations.append("Large CSV: export it to Parquet (execute_query + export_result) for faster queries")
    if rows > 1_000_000:
        recommendations.append("Aggregate with execute_query rather than sampling many rows")
    return {
        "schema": {"columns": columns},
        "statistics": {
            "row_count": rows,
            "column_count": len(columns),
            "memory_estimate": human_bytes(rows * row_width),
            "file_size": human_bytes(file_bytes),
            "quality_score": round(quality, 3),
        },
        "recommendations": recommendations[:8],
        "format": src.fmt,
        "files": len(src.files),
    }


def _column(raw: dict[str, Any], i: int, name: str, compute_stats: bool) -> tuple[dict[str, Any], float, float]:
    """The profile's entry of column `name` (the `i`th), the bytes a value of it takes about, and its
    percentage of nulls."""
    null_pct, distinct, filled = _counts(raw, name)
    ctype = raw["types"][name]
    sem = semantic_type(ctype, distinct, filled)
    values, avg_len = _samples(raw["head"], i)
    kinds: dict[str, int] = {}
    if sem == "json":  # JSON text: shown as the JSON it is, described by the kinds of its sampled values
        texts = [row[i] for row in raw["head"]]
        values = []
        for shown in (_clip(parsed(t)) for t in texts if t is not None):
            if shown not in values and len(values) < SAMPLE_VALUES:
                values.append(shown)
        kinds = json_kinds(texts)
    col: dict[str, Any] = {
        "name": name,
        "type": sem,
        "null_pct": round(null_pct, 2),
        "unique_count": distinct,
        "sample_values": values,
        "duckdb_type": ctype,
    }
    if compute_stats:
        detail = _stats(raw["stats"].get(name, {}), sem, ctype, raw["cats"].get(name), distinct)
        if detail:
            col["stats"] = detail
    if sem == "json" and kinds:
        col["stats"] = {"json_kinds": kinds}
    inner = raw.get("fields", {}).get(name)
    if inner:
        col["fields"] = inner["fields"]
        if inner["omitted"]:  # said rather than left out silently
            col["fields_omitted"] = inner["omitted"]
    return col, _width(sem, avg_len), null_pct


def _counts(raw: dict[str, Any], name: str) -> tuple[float, int, int]:
    """Column `name`'s percentage of nulls, distinct values and non-null values: approximate from the
    streaming pass, exact for a category from the pass that found its top values."""
    st = raw["stats"].get(name, {})
    rows = raw["rows"]
    null_pct = float(st.get("null_pct") or 0.0)
    distinct = int(st.get("approx_unique") or 0)
    distinct = min(distinct, rows) if rows else distinct
    filled = round(rows * (1.0 - null_pct / 100.0))
    cat = raw["cats"].get(name)
    if cat is not None:
        distinct, filled = cat["distinct"], cat["rows"]
    return null_pct, distinct, filled


def _samples(head: list[tuple[Any, ...]], i: int) -> tuple[list[Any], float]:
    """The first SAMPLE_VALUES distinct values of the `i`th column of the sampled rows (cut), and the
    average length of its values' text (8 when it has none)."""
    values: list[Any] = []
    lens: list[int] = []
    for row in head:
        v = row[i]
        if v is None:
            continue
        lens.append(len(str(v)))
        cv = _clip(v)
        if cv not in values and len(values) < SAMPLE_VALUES:
            values.append(cv)
    return values, sum(lens) / len(lens) if lens else 8.0


def _stats(st: dict[str, Any], sem: str, ctype: str, cat: dict[str, Any] | None, distinct: int) -> dict[str, Any]:
    """The statistics a column's entry shows for its semantic type `sem`: a number's range, mean,
    deviation and quartiles, a date's range, a category's top values and what else it holds."""
    detail: dict[str, Any] = {}
    if sem in ("int64", "float64"):
        detail = {"min": extreme(st.get("min"), ctype), "max": extreme(st.get("max"), ctype)}
        for key in ("avg", "std", "q25", "q50", "q75"):
            detail["mean" if key == "avg" else key] = rounded(st.get(key))
    elif sem == "datetime":
        detail = {"min": jsonable(st.get("min")), "max": jsonable(st.get("max"))}
    if sem == "category" and cat is not None:
        top = cat["top"]
        detail["top_values"] = top
        detail["other_values"] = max(0, distinct - len(top))
        detail["other_rows"] = max(0, cat["rows"] - sum(n for _, n in top))
    return detail


def _recommend(col: dict[str, Any], i: int, null_pct: float, rows: int, check: dict[str, Any] | None) -> list[str]:
    """The recommendations about one column (the `i`th): mostly empty, constant, an identifier, and the
    one its sampled values call for (`_advice`)."""
    name, distinct = col["name"], col["unique_count"]
    out: list[str] = []
    if null_pct >= 30:
        out.append(f"'{name}' is {null_pct:.0f}% empty: filter or impute it")
    if rows > 1 and distinct <= 1 and null_pct < 100:
        out.append(f"'{name}' holds one value: drop it")
    if col["type"] == "string" and rows and distinct >= 0.95 * rows and i == 0:
        out.append(f"'{name}' looks like an identifier (nearly unique)")
    advice = _advice(name, check)
    if advice:
        out.append(advice)
    return out


def _advice(name: str, check: dict[str, Any] | None) -> str | None:
    """The one recommendation (or none) for a text column from the checks of its sampled values
    (`_text_checks`): boolean words spelt several ways, numbers stored as text, numbers mixed with text,
    dates stored as text in one format or several (`dates.advice`), padded values."""
    n = int((check or {}).get("n") or 0)
    if check is None or n == 0:
        return None
    spellings = int(check["spellings"] or 0)
    if check["booleans"] == n and spellings > 2:
        return f"'{name}' spells booleans {spellings} ways: map them to true/false"
    numbers = int(check["numbers"])
    if numbers == n:
        kinds = (("money", "currency signs"), ("commas", "commas"), ("percent", "% signs"), ("spaced", "spaces"))
        strip = [w for k, w in kinds if check[k]]
        if strip:
            return f"'{name}' holds numbers as text: strip {', '.join(strip)}, then CAST AS DOUBLE"
        # Digits with leading zeros (postal codes, account numbers) are codes, text on purpose.
        return None if check["zeros"] else f"'{name}' holds numbers as text: CAST it AS DOUBLE"
    if 2 * numbers > n:
        share = _pct(100.0 * (n - numbers) / n)
        example = _quoted(check["text_example"])
        return f"'{name}' is numbers with {share} text (e.g. {example}): TRY_CAST nulls those"
    dated = date_advice(name, check["date_masks"], n, check["undated_example"])
    if dated:
        return dated
    if check["padded"]:
        share = _pct(100.0 * int(check["padded"]) / n)
        return f"'{name}' is space-padded in {share} of values: trim() it"
    return None


def _pct(p: float) -> str:
    """12.5 -> '12%', 4.0 -> '4%', 0.3 -> '0.3%', 0.02 -> '<0.1%'."""
    if 0 < p < 0.05:
        return "<0.1%"
    return (f"{p:.1f}".rstrip("0").rstrip(".") if p < 10 else f"{p:.0f}") + "%"


def _quoted(value: Any) -> str:
    text = str(value)
    return "'" + (text[:SUMMARY_CHARS] + "…" if len(text) > SUMMARY_CHARS else text) + "'"


def _short(value: Any) -> Any:
    return value[:SUMMARY_CHARS] + "…" if isinstance(value, str) and len(value) > SUMMARY_CHARS else value


def summary_header() -> str:
    """The first line of a `detail: "summary"` reply's columns: the names of the entries of each line."""
    return ",".join(SUMMARY_FIELDS)


def summary_line(column: dict[str, Any]) -> str:
    """A column of a full profile as a `detail: "summary"` CSV line, its entries in SUMMARY_FIELDS
    order: null % to one decimal; sample values (at most SUMMARY_VALUES, each cut to SUMMARY_CHARS
    characters, joined by ' | '), given only when there are no statistics to stand for them; and, when
    the profile has statistics, a short text of them: a number's or date's range `min..max`, or a
    category's top SUMMARY_TOP values with their counts and what else it holds, e.g. `north 48; east
    39 (+8 more: 313 rows)`. Timestamps leave out zero seconds, and a midnight its time."""

    def brief(value: Any) -> str:
        """The value as a summary shows it: its text (JSON for a list or struct), cut; a time whole."""
        if column["type"] == "datetime":
            return cell_text(_brief_time(value))
        return str(_short(cell_text(value)))

    stats = column.get("stats") or {}
    text = ""
    if "top_values" in stats:
        top = stats["top_values"]
        text = "; ".join(f"{cell_text(_short(v))} {n}" for v, n in top[:SUMMARY_TOP])
        more = int(stats.get("other_values") or 0) + len(top[SUMMARY_TOP:])
        rest = int(stats.get("other_rows") or 0) + sum(n for _, n in top[SUMMARY_TOP:])
        text += f" (+{more} more: {rest} rows)" if more else ""
    elif stats.get("min") is not None or stats.get("max") is not None:
        text = f"{brief(stats.get('min'))}..{brief(stats.get('max'))}"
    if "json_kinds" in stats:  # kinds of JSON in the sample, e.g. `object 40; string 12`
        text = "; ".join(f"{kind} {n}" for kind, n in stats["json_kinds"].items())
    if column["type"] in ("struct", "list", "json"):  # values are JSON: inner fields or kinds stand for them
        fields = column.get("fields") or []
        more = int(column.get("fields_omitted") or 0)
        text = f"{len(fields)} inner field{'' if len(fields) == 1 else 's'}" if fields else text
        text += f" (+{more} not described)" if fields and more else ""
    values = [] if text or column["type"] in ("struct", "list", "json") else column["sample_values"][:SUMMARY_VALUES]
    null = round(float(column["null_pct"]), 1)
    cells = [column["name"], column["type"], int(null) if null.is_integer() else null, column["unique_count"]]
    cells += [" | ".join(brief(v) for v in values), text]
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(cells)
    return out.getvalue()


def summary_lines(column: dict[str, Any]) -> list[str]:
    """A column of a full profile as `detail: "summary"` CSV lines: its own (`summary_line`), then one
    per inner field of a struct or list column, named by its path (e.g. `customer.id`)."""
    inner = [
        {
            "name": f["path"],
            "type": f["type"],
            "null_pct": f["null_pct"],
            "unique_count": f["unique_count"],
            "sample_values": [],
            "stats": f.get("stats"),
        }
        for f in column.get("fields") or []
    ]
    return [summary_line(column), *(summary_line(f) for f in inner)]


_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(:\d\d(?:\.\d+)?)?(.*)")


def _brief_time(value: Any) -> Any:
    """'2024-01-01T06:39:00' -> '2024-01-01T06:39', '2024-01-01T00:00:00' -> '2024-01-01' (an offset
    keeps the time)."""
    m = _TIMESTAMP.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        return value
    day, clock, seconds, zone = m.groups()
    seconds = "" if seconds in (None, ":00") else seconds
    return day if clock == "00:00" and not seconds and not zone else f"{day}T{clock}{seconds}{zone}"


# ---------------------------------------------------------------------------------------------- sampling


def sample(
    cfg: EngineConfig,
    src: Source,
    *,
    strategy: str,
    size: int,
    columns: list[str] | None,
    stratify_column: str | None,
    seed: int,
) -> dict[str, Any]:
    """Representative rows by strategy; every strategy streams the file once or twice."""

    def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
        view = ident(src.name)
        all_cols = [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()]
        cols = columns or all_cols
        missing = [c for c in cols if c not in all_cols]
        if missing or (stratify_column and stratify_column not in all_cols):
            bad = missing[0] if missing else stratify_column
            con.execute(f"SELECT {ident(str(bad))} FROM {view} LIMIT 0")  # raises a binder error with context
        proj = capped_columns(con, view, cols)  # long values are cut before they reach Python
        info: dict[str, Any] = {}
        if strategy == "head":
            total = None
            sql = f"SELECT {proj} FROM {view} LIMIT {size}"
        else:
            total = int(con.execute(f"SELECT count(*) FROM {view}").fetchone()[0])  # type: ignore[index]
            numbered = f"(SELECT *, row_number() OVER () AS __rn FROM {view})"
            # Rows are picked first and rendered after (see capped_columns): rendering every row of the
            # file only to keep `size` of them would render it all for nothing.
            if strategy == "random":
                order = f"hash(__rn, {seed})"
                picked = f"SELECT * FROM {numbered} ORDER BY {order} LIMIT {size}"
            elif strategy == "systematic":
                step = max(1, total // size) if total else 1
                start = seed % step
                info["step"] = step
                order = "__rn"
                picked = f"SELECT * FROM {numbered} WHERE (__rn - 1) % {step} = {start} ORDER BY __rn LIMIT {size}"
            else:
                return _stratified(con, view, cols, str(stratify_column), size, seed, total)
            sql = f"SELECT {proj} FROM ({picked}) ORDER BY {order}"
        rel = con.execute(sql)
        rows = rows_as_dicts(cols, rel.fetchall())
        return {"rows": rows, "total": total, "columns": cols, "info": info}

    return run_locked(cfg, [src], work)


def _stratified(
    con: duckdb.DuckDBPyConnection, view: str, cols: list[str], strat: str, size: int, seed: int, total: int
) -> dict[str, Any]:
    """A stratified sample: rows of each of the most frequent values of `strat`, as many as `_allocate`
    gives it, picked by a seeded hash."""
    # Values are rendered after grouping and picking (see capped_exprs), for the groups and rows kept only.
    label = capped_exprs(con, view, [strat])[0]
    found = con.execute(
        f"SELECT {ident(strat)}, __n, {label} FROM (SELECT {ident(strat)}, count(*) AS __n FROM {view} GROUP BY 1"
        f" ORDER BY __n DESC, {ident(strat)} NULLS LAST LIMIT 10001) ORDER BY __n DESC, {ident(strat)} NULLS LAST"
    ).fetchall()
    groups_total = len(found)
    # Groups are matched by the repr of their value: a list, struct or map value cannot be a dict key.
    chosen = [(repr(g), n) for g, n, _ in found[:size]]
    labels = {repr(g): jsonable(shown) for g, _, shown in found[:size]}
    alloc = _allocate(chosen, size, total)
    top = max(alloc.values()) if alloc else 1
    raw = ", ".join(f"{ident(c)} := {ident(c)}" for c in cols)
    shown = capped_exprs(con, view, cols, prefix="__p.")
    packed = ", ".join(f"{ident(c)} := {e}" for c, e in zip(cols, shown, strict=True))
    rows_out: list[dict[str, Any]] = []
    per_group = con.execute(
        f"SELECT g, [struct_pack({packed}) FOR __p IN picks] FROM (SELECT {ident(strat)} AS g, "
        f"min_by(struct_pack({raw}), hash(__rn, {seed}), {top}) AS picks "
        f"FROM (SELECT *, row_number() OVER () AS __rn FROM {view}) GROUP BY 1)"
    ).fetchall()
    picked = {repr(g): p for g, p in per_group}
    row_groups: list[str] = []
    # Round by round (every group's first row, then every group's second...): a reply cut to its
    # budget keeps a prefix, so one row of each group comes before a second row of any.
    for turn in range(top):
        for g, _ in chosen:
            items = (picked.get(g) or [])[: alloc[g]]
            if turn < len(items):
                rows_out.append({c: jsonable(items[turn].get(c)) for c in cols})
                row_groups.append("null" if labels[g] is None else cell_text(labels[g]))
    return {
        "rows": rows_out,
        "total": total,
        "columns": cols,
        "row_groups": row_groups,
        "info": {
            "groups_total": groups_total if groups_total <= 10000 else None,
            "groups_represented": len(chosen),
            "allocation": {"null" if labels[g] is None else cell_text(labels[g]): alloc[g] for g, _ in chosen[:50]},
        },
    }


def _allocate(chosen: list[tuple[str, Any]], size: int, total: int) -> dict[str, int]:
    """How many of `size` rows each group (key, rows) of `chosen` gets: one each first (every group
    represented), then the rest in proportion to the groups' rows (largest remainders first), never
    more than a group holds."""
    alloc = {g: 1 for g, _ in chosen}
    left = size - len(chosen)
    if left > 0 and total:
        weights = sorted(chosen, key=lambda gn: -gn[1])
        shares = {g: n * left / total for g, n in weights}
        for g, _ in weights:
            alloc[g] += math.floor(shares[g])
        rest = size - sum(alloc.values())
        for g, _ in sorted(weights, key=lambda gn: -(shares[gn[0]] - math.floor(shares[gn[0]]))):
            if rest <= 0:
                break
            alloc[g] += 1
            rest -= 1
    for g, n in chosen:
        alloc[g] = min(alloc[g], int(n))
    return alloc
