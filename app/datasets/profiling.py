"""Profiling and sampling: one streaming pass for statistics, bounded extra passes for categories."""

from __future__ import annotations

import math
from typing import Any

import duckdb

from app.datasets.engine import (
    INTEGER_TYPES,
    EngineConfig,
    Source,
    _round,
    capped_columns,
    capped_exprs,
    cell_text,
    extreme,
    human_bytes,
    is_numeric,
    jsonable,
    rows_as_dicts,
    run_locked,
    summary_query,
)
from app.datasets.sandbox import ident

SAMPLE_VALUES = 3
VALUE_CHARS = 60


def semantic_type(duck_type: str, distinct: int | None, rows: int, max_categories: int) -> str:
    """The seed's type vocabulary from a DuckDB type."""
    t = duck_type.upper()
    if t.endswith("]"):  # a list or array of dates or numbers is none of them
        return "string"
    if t in ("BOOLEAN", "BOOL"):
        return "bool"
    if t.startswith(("DATE", "TIMESTAMP", "TIME")):
        return "datetime"
    if t in INTEGER_TYPES:
        return "int64"
    if is_numeric(t):
        return "float64"
    if t == "VARCHAR" and distinct is not None and 0 < distinct <= max_categories and rows >= 2 * distinct:
        return "category"
    return "string"


def _width(sem: str, avg_len: float) -> float:
    return {"int64": 8, "float64": 8, "bool": 1, "datetime": 8, "category": 4}.get(sem, avg_len + 16)


def profile(
    cfg: EngineConfig, src: Source, *, sample_size: int, compute_stats: bool, max_categories: int
) -> dict[str, Any]:
    """Schema, statistics, quality score and recommendations of one source, streaming."""
    file_bytes = sum(p.stat().st_size for p in src.files)

    def work(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
        view = ident(src.name)
        described = con.execute(f"DESCRIBE {view}").fetchall()
        names = [r[0] for r in described]
        types = {r[0]: str(r[1]) for r in described}
        stats: dict[str, dict[str, Any]] = {}
        if compute_stats:
            for r in con.execute(summary_query(con, f"SELECT * FROM {view}", described)).fetchall():
                stats[r[0]] = {
                    "min": r[2],
                    "max": r[3],
                    "approx_unique": r[4],
                    "avg": r[5],
                    "std": r[6],
                    "q25": r[7],
                    "q50": r[8],
                    "q75": r[9],
                    "count": r[10],
                    "null_pct": r[11],
                }
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
        # Rendered in SQL as answers show them (see engine.capped_query).
        head = con.execute(f"SELECT {capped_columns(con, view, names)} FROM {view} LIMIT {int(sample_size)}")
        head_rows = head.fetchall()
        cats: dict[str, list[list[Any]]] = {}
        if compute_stats:
            wanted = [
                n
                for n in names
                if types[n] == "VARCHAR" and 0 < int(stats.get(n, {}).get("approx_unique") or 0) <= max_categories
            ]
            if wanted:
                parts = [f"histogram({ident(n)})" for n in wanted]
                hist = con.execute(f"SELECT {', '.join(parts)} FROM {view}").fetchone() or ()
                for n, h in zip(wanted, hist, strict=False):
                    pairs = sorted((h or {}).items(), key=lambda kv: (-kv[1], str(kv[0])))
                    cats[n] = [[_clip(k), int(v)] for k, v in pairs[:max_categories]]
        return {"names": names, "types": types, "stats": stats, "rows": row_count, "head": head_rows, "cats": cats}

    raw = run_locked(cfg, [src], work, sample_size=sample_size)
    return _assemble(raw, src, file_bytes, compute_stats, max_categories)


def _clip(value: Any) -> Any:
    v = jsonable(value)
    return v[:VALUE_CHARS] + "…" if isinstance(v, str) and len(v) > VALUE_CHARS else v


def _assemble(
    raw: dict[str, Any], src: Source, file_bytes: int, compute_stats: bool, max_categories: int
) -> dict[str, Any]:
    names, types, stats, rows = raw["names"], raw["types"], raw["stats"], raw["rows"]
    columns: list[dict[str, Any]] = []
    recommendations: list[str] = []
    completeness: list[float] = []
    row_width = 0.0
    for i, name in enumerate(names):
        st = stats.get(name, {})
        null_pct = float(st.get("null_pct") or 0.0)
        distinct = int(st.get("approx_unique") or 0)
        distinct = min(distinct, rows) if rows else distinct
        sem = semantic_type(types[name], distinct, rows, max_categories)
        values: list[Any] = []
        lens: list[int] = []
        for row in raw["head"]:
            v = row[i]
            if v is None:
                continue
            lens.append(len(str(v)))
            cv = _clip(v)
            if cv not in values and len(values) < SAMPLE_VALUES:
                values.append(cv)
        avg_len = sum(lens) / len(lens) if lens else 8.0
        row_width += _width(sem, avg_len)
        col: dict[str, Any] = {
            "name": name,
            "type": sem,
            "null_pct": round(null_pct, 2),
            "unique_count": distinct,
            "sample_values": values,
            "duckdb_type": types[name],
        }
        if compute_stats:
            detail: dict[str, Any] = {}
            if sem in ("int64", "float64"):
                detail = {"min": extreme(st.get("min"), types[name]), "max": extreme(st.get("max"), types[name])}
                for key in ("avg", "std", "q25", "q50", "q75"):
                    detail["mean" if key == "avg" else key] = _round(st.get(key))
            elif sem == "datetime":
                detail = {"min": jsonable(st.get("min")), "max": jsonable(st.get("max"))}
            if name in raw["cats"]:
                detail["top_values"] = raw["cats"][name]
            if detail:
                col["stats"] = detail
        columns.append(col)
        completeness.append(1.0 - null_pct / 100.0)
        if null_pct >= 30:
            recommendations.append(f"Column '{name}' is {null_pct:.0f}% empty: filter or impute before aggregating")
        if rows > 1 and distinct <= 1 and null_pct < 100:
            recommendations.append(f"Column '{name}' holds a single value: it can be dropped")
        if sem == "string" and rows and distinct >= 0.95 * rows and i == 0:
            recommendations.append(f"Column '{name}' looks like an identifier (nearly unique)")
        if sem == "string" and values and all(_looks_like_date(v) for v in values):
            recommendations.append(f"Column '{name}' looks like dates stored as text: cast it with strptime")
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


def _looks_like_date(value: Any) -> bool:
    s = str(value)
    return len(s) >= 8 and s[:4].isdigit() and s[4:5] in ("-", "/") and s[5:7].isdigit()


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
            # file only to keep `size` of them made sampling 1.5-2x slower.
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
    # One row per group first (every group represented), then the rest proportionally.
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
    for g, _ in chosen:
        for item in (picked.get(g) or [])[: alloc[g]]:
            rows_out.append({c: jsonable(item.get(c)) for c in cols})
    return {
        "rows": rows_out,
        "total": total,
        "columns": cols,
        "info": {
            "groups_total": groups_total if groups_total <= 10000 else None,
            "groups_represented": len(chosen),
            "allocation": {"null" if labels[g] is None else cell_text(labels[g]): alloc[g] for g, _ in chosen[:50]},
        },
    }
