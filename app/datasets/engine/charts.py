"""Charts of a stored query result: one Vega-Lite v5 spec per chart, rendered to PNG by vl-convert
from that same spec.

**Where the work runs.** The chart's data is computed by DuckDB over the whole stored result (never
only its first rows) in a DuckDB worker process (`chart_data`, through `pool.offload`), and the PNG
is rendered there too (`render_png`): the event loop never waits on either, and both run under the
call's time limit (a worker that outruns it is killed, 5003) and the worker's memory cap.

**Column roles** (`roles`):

- bar: x = the first column, y = the first numeric column after it (the first column when it is the
  only numeric one); one bar per row, in the result's order; rows with a null y are left out.
- line: x = the first column, series = up to `MAX_SERIES` numeric columns after it. Past the point
  cap, a numeric or temporal x is bucketed by value (equal-width buckets), any other x by row order,
  and each bucket shows the mean of each series. A null value is a gap in its line (so is a bucket
  with no value); rows with a null x are left out.
- scatter: the first two numeric columns; rows with a null in either are left out; past the point cap,
  a seeded sample (the rows with the smallest `hash(row, SEED)`, a bounded top-N).
- histogram: the first numeric column, in nice equal-width bins computed over every stored row; nulls
  are counted, not binned.
- heatmap: the first two non-numeric columns as x and y, the first numeric column as the value (the
  mean per cell); past the cap, the most frequent x and y values.

**Bounds.** At most `CAPS[kind]` points (bars, line values, points, bins or cells), labels cut to
`LABEL_CHARS` characters, a canvas of `WIDTH` x `HEIGHT` pixels (the spec is fitted into it) at a
scale of at most 1, a PNG of at most `max_bytes` (smaller scales are tried, `SCALES`). An inline spec
is also fitted to the reply's token budget: DuckDB is asked again for fewer points (`make_chart`), and
the spec says what was done in `notes`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import math
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from app.core.errors import EngineError, InvalidInput, NotFound
from app.datasets.engine.databases import EngineConfig, run_locked
from app.datasets.engine.pool import offload
from app.datasets.engine.sandbox import ident, inside
from app.datasets.engine.sandbox import sql_string as lit
from app.datasets.engine.values import INTEGER_TYPES, is_numeric

if TYPE_CHECKING:
    from app.datasets.schemas import Visualization

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"
KINDS = ("bar", "line", "scatter", "histogram", "heatmap")
# The most points a chart holds: bars, line values (buckets x series), points, bins, cells.
CAPS = {"bar": 50, "line": 1000, "scatter": 1000, "histogram": 20, "heatmap": 1200}
MAX_SERIES = 5
HEATMAP_X, HEATMAP_Y = 40, 30
LABEL_CHARS = 40
SEED = 42
# The canvas a PNG is fitted into (axes, labels and legend included), and the scales tried for
# `max_bytes`: a PNG is never larger than WIDTH x HEIGHT pixels.
WIDTH, HEIGHT = 640, 400
SCALES = (1.0, 0.75, 0.5)
RENDER_CONFIG: dict[str, Any] = {
    "background": "white",
    "axis": {"labelLimit": 120, "labelOverlap": True},
    "point": {"filled": True, "size": 14, "opacity": 0.6},
}
# Rounds of asking DuckDB for fewer points before an inline spec is left out.
FIT_ROUNDS = 6


@dataclass(frozen=True)
class Roles:
    """The columns a chart draws: `x` (its DuckDB type `x_type`), the value columns `values` (bar: y;
    line: the series; scatter: y; heatmap: the value) and the heatmap's y category `y`."""

    kind: str
    x: str
    x_type: str
    values: tuple[str, ...] = ()
    y: str = ""


@dataclass
class Chart:
    """A chart's spec (data inline), how many points it holds, the stored rows it was computed from and
    what was done to the data (`notes`)."""

    spec: dict[str, Any] | None
    points: int
    rows: int
    notes: list[str] = field(default_factory=list)


def is_temporal(ctype: str) -> bool:
    """True for DATE and the TIMESTAMP types (not TIME)."""
    upper = ctype.upper()
    return upper == "DATE" or upper.startswith("TIMESTAMP")


def roles(kind: str, columns: list[str], types: list[str]) -> Roles:
    """The columns `kind` draws from a result of `columns` / `types`; InvalidInput when it has none
    suitable (nothing is read for that)."""
    typed = dict(zip(columns, types, strict=False))
    numeric = [c for c in columns if is_numeric(typed.get(c, ""))]
    other = [c for c in columns if c not in numeric]
    if not columns:
        raise InvalidInput("The result has no columns: nothing to chart")
    if kind in ("bar", "line"):
        if not numeric:
            raise InvalidInput(f"A {kind} chart needs a numeric column")
        x = columns[0]
        ys = [n for n in numeric if n != x] or numeric[:1]
        return Roles(kind, x, typed[x], tuple(ys[: 1 if kind == "bar" else MAX_SERIES]))
    if kind == "scatter":
        if len(numeric) < 2:
            raise InvalidInput("A scatter chart needs two numeric columns")
        return Roles(kind, numeric[0], typed[numeric[0]], (numeric[1],))
    if kind == "histogram":
        if not numeric:
            raise InvalidInput("A histogram needs a numeric column")
        return Roles(kind, numeric[0], typed[numeric[0]])
    if kind == "heatmap":
        if len(other) < 2 or not numeric:
            raise InvalidInput("A heatmap needs two category columns (x, y) and a numeric value column")
        return Roles(kind, other[0], typed[other[0]], (numeric[0],), other[1])
    raise InvalidInput(f"Unknown chart type {kind}", suggestions=[f"chart_type: one of {', '.join(KINDS)}"])


# ------------------------------------------------------------------------------------------ in a worker


def _number(col: str) -> str:
    """SQL: the column as a finite DOUBLE (NULL for null, NaN and infinities)."""
    v = f"CAST({ident(col)} AS DOUBLE)"
    return f"CASE WHEN isfinite({v}) THEN {v} END"


def _label(col: str) -> str:
    """SQL: the column as text cut to LABEL_CHARS."""
    return f"left(CAST({ident(col)} AS VARCHAR), {LABEL_CHARS})"


def _x_axis(col: str, ctype: str) -> tuple[str, str]:
    """SQL of the x value and its Vega-Lite type: numbers, epoch milliseconds (temporal) or labels."""
    if is_numeric(ctype):
        return _number(col), "quantitative"
    if is_temporal(ctype):
        return f"epoch_ms({ident(col)})", "temporal"
    return _label(col), "ordinal"


def _iso(ms: Any, ctype: str) -> str | None:
    """Epoch milliseconds as the ISO text Vega-Lite parses (UTC for a TIMESTAMP WITH TIME ZONE)."""
    if ms is None:
        return None
    try:
        moment = dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC)
    except (OverflowError, ValueError, OSError):
        return None
    upper = ctype.upper()
    if upper == "DATE":
        return moment.date().isoformat()
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if "TIME ZONE" in upper or upper == "TIMESTAMPTZ" else "")


def _tidy(rows: list[dict[str, Any]], keys: list[str]) -> None:
    """Round the float values of `keys` to about 1/1,000 of their range (under a pixel of the canvas;
    the spec costs fewer tokens), integral ones as ints."""
    for key in keys:
        nums = [v for r in rows if isinstance(v := r.get(key), float)]
        if not nums:
            continue
        span = (max(nums) - min(nums)) or abs(nums[0]) or 1.0
        digits = max(0, 3 - math.floor(math.log10(span)))
        for r in rows:
            v = r.get(key)
            if isinstance(v, float):
                r[key] = _clean(round(v, digits))


def _clean(v: float) -> float | int:
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def _nice(raw: float, integer: bool) -> float:
    """The smallest 'nice' step (1, 2, 2.5 or 5 times a power of ten; whole for integers) >= raw."""
    if integer:
        raw = max(raw, 1.0)
    exp = math.floor(math.log10(raw)) if raw > 0 else 0
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = m * 10.0**exp
        if step >= raw * (1 - 1e-9) and (not integer or step.is_integer()):
            return step
    return 10.0 ** (exp + 1)


def bins(lo: float, hi: float, most: int, integer: bool) -> tuple[float, float, int]:
    """Nice equal-width bins covering lo..hi, at most `most` of them: (start, step, count). Bins are
    half-open [edge, next edge). For whole numbers (`integer`) the last bin is one more such bin, so each
    whole value falls in exactly one bin (1..20 in 20 bins of one value each, not 19 whose last holds
    two); otherwise the last edge is closed for hi alone."""
    if hi <= lo:
        return (lo, 1.0, 1) if integer else (lo - 0.5, 1.0, 1)
    step = _nice((hi - lo + (1 if integer else 0)) / max(1, most), integer)
    while True:
        start = math.floor(lo / step) * step
        if integer:
            count = math.floor((hi - start) / step + 1e-9) + 1
        else:
            count = max(1, math.ceil((hi - start) / step - 1e-9))
        if count <= most:
            return start, step, count
        step = _nice(step * 1.01, integer)


def _edge(v: float) -> float | int:
    return _clean(float(f"{v:.10g}"))


def chart_data(cfg: EngineConfig, path: Path, plan: Roles, points: int) -> Chart:
    """The chart of a stored result (a file of this server's result store) with at most `points`
    points, computed in DuckDB over all of its rows (runs in a DuckDB worker process)."""
    if not inside(path, [cfg.results, *cfg.stored]):
        raise NotFound("The stored result is gone (expired or evicted)", suggestions=["Run the query again"])
    build = {"bar": _bar, "line": _line, "scatter": _scatter, "histogram": _histogram, "heatmap": _heatmap}

    def work(con: duckdb.DuckDBPyConnection) -> Chart:
        try:
            src = _rows_of(con, path)
            total = int(con.execute(f"SELECT count(*) FROM {src}").fetchone()[0])  # type: ignore[index]
        except duckdb.IOException:
            raise NotFound(
                "The stored result is gone (expired or evicted)", suggestions=["Run the query again"]
            ) from None
        if total == 0:
            raise InvalidInput("The result is empty: nothing to chart")
        return build[plan.kind](con, src, plan, max(1, points), total)

    return run_locked(cfg, [], work)


def _rows_of(con: duckdb.DuckDBPyConnection, path: Path) -> str:
    """SQL of the stored result's rows with their position in the file as `__cairn_r` (DuckDB's
    `file_row_number`, unless the result has a column of that name: then the scan's order)."""
    plain = f"read_parquet({lit(str(path))})"
    names = {str(r[0]) for r in con.execute(f"DESCRIBE SELECT * FROM {plain}").fetchall()}
    if "file_row_number" in names:
        return f"(SELECT *, row_number() OVER () - 1 AS __cairn_r FROM {plain})"
    return f"(SELECT *, file_row_number AS __cairn_r FROM read_parquet({lit(str(path))}, file_row_number = true))"


def _fetch(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[Any, ...]:
    row = con.execute(sql).fetchone()
    assert row is not None
    return tuple(row)


def _spec(mark: str, encoding: dict[str, Any], values: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A Vega-Lite spec; an axis title that only repeats its field's name is left out (tokens)."""
    for channel in encoding.values():
        if channel.get("title") == channel.get("field"):
            channel.pop("title", None)
    return {"$schema": SCHEMA, "mark": mark, **extra, "encoding": encoding, "data": {"values": values}}


def _bar(con: duckdb.DuckDBPyConnection, src: str, plan: Roles, points: int, total: int) -> Chart:
    xsql, _ = _x_axis(plan.x, plan.x_type)
    ycol = plan.values[0]
    base = f"(SELECT __cairn_r AS r, {xsql} AS x, {_number(ycol)} AS y FROM {src}) t"
    (valued,) = _one(con, f"SELECT count(y) FROM {base}")
    rows = _fetch(con, f"SELECT x, y FROM {base} WHERE y IS NOT NULL ORDER BY r LIMIT {int(points)}")
    if is_temporal(plan.x_type):
        for r in rows:
            r["x"] = _iso(r["x"], plan.x_type)
    _tidy(rows, ["x", "y"])
    notes = []
    if len(rows) < valued:
        notes.append(f"first {len(rows)} of {valued:,} rows")
    if valued < total:
        notes.append(f"{total - valued:,} rows with a null {ycol} left out")
    enc = {
        "x": {"field": "x", "type": "nominal", "sort": None, "title": plan.x},
        "y": {"field": "y", "type": "quantitative", "title": ycol},
    }
    return Chart(_spec("bar", enc, rows), len(rows), total, notes)


def _free(name: str, taken: list[str]) -> str:
    """`name`, or `name` with leading underscores, not in `taken`."""
    while name in taken:
        name = "_" + name
    return name


def _line(con: duckdb.DuckDBPyConnection, src: str, plan: Roles, points: int, total: int) -> Chart:
    xsql, xtype = _x_axis(plan.x, plan.x_type)
    series = list(plan.values)
    # The spec's field names: x and y, or x and the series' own names (a fold turns them into series /
    # value for the legend), none taken twice. SQL names them by position.
    keys = ["y"] if len(series) == 1 else series
    xkey = _free("x", keys)
    ys = [f"y{i}" for i in range(len(series))]
    ysql = ", ".join(f"{_number(s)} AS {y}" for s, y in zip(series, ys, strict=True))
    base = f"(SELECT __cairn_r AS r, {xsql} AS x, {ysql} FROM {src}) t"
    counts = _one(con, f"SELECT count(x), {', '.join(f'count({y})' for y in ys)} FROM {base} WHERE x IS NOT NULL")
    with_x, valued = int(counts[0]), [int(c) for c in counts[1:]]
    per = max(1, points // len(series))
    means = ", ".join(f"avg({y}) AS {y}" for y in ys)
    notes = []
    if with_x <= per:
        found = _fetch(con, f"SELECT x, {', '.join(ys)} FROM {base} WHERE x IS NOT NULL ORDER BY r")
        gaps = sum(with_x - v for v in valued)
        if gaps:
            notes.append(f"{gaps:,} null values drawn as gaps")
    else:
        if xtype == "ordinal":  # buckets of rows in the result's order, labelled by their first x
            bucketed = (
                f"SELECT arg_min(x, r) AS x, {means} FROM (SELECT *, (row_number() OVER (ORDER BY r) - 1) * {per} "
                f"// {with_x} AS b FROM {base} WHERE x IS NOT NULL) GROUP BY b ORDER BY b"
            )
        else:  # equal-width buckets of x, each at its smallest x
            bucketed = (
                f"SELECT min(x) AS x, {means} FROM (SELECT *, coalesce(least({per - 1}, floor((CAST(x AS DOUBLE) - lo) "
                f"/ nullif(hi - lo, 0) * {per})), 0) AS b FROM {base}, (SELECT CAST(min(x) AS DOUBLE) AS lo, "
                f"CAST(max(x) AS DOUBLE) AS hi FROM {base}) e WHERE x IS NOT NULL) GROUP BY b ORDER BY b"
            )
        found = _fetch(con, bucketed)
        notes.append(f"{with_x:,} rows averaged into {len(found)} buckets of {plan.x}")
        gaps = sum(1 for r in found for y in ys if r[y] is None)
        if gaps:
            notes.append(f"{gaps:,} buckets with only null values drawn as gaps")
        elif sum(valued) < with_x * len(series):
            notes.append("null values left out of the bucket means")
    if with_x < total:
        notes.append(f"{total - with_x:,} rows with a null {plan.x} left out")
    temporal = xtype == "temporal"
    rows = [
        {xkey: _iso(r["x"], plan.x_type) if temporal else r["x"], **{k: r[y] for k, y in zip(keys, ys, strict=True)}}
        for r in found
    ]
    _tidy(rows, [xkey, *keys])
    xenc: dict[str, Any] = {"field": xkey, "type": xtype, "title": plan.x}
    if xtype == "ordinal":
        xenc["sort"] = None
    if len(series) == 1:
        enc = {"x": xenc, "y": {"field": "y", "type": "quantitative", "title": series[0]}}
        return Chart(_spec("line", enc, rows), len(rows), total, notes)
    name, value = _free("series", [xkey, *keys]), _free("value", [xkey, *keys])
    enc = {
        "x": xenc,
        "y": {"field": value, "type": "quantitative"},
        "color": {"field": name, "type": "nominal"},
    }
    spec = _spec("line", enc, rows, transform=[{"fold": series, "as": [name, value]}])
    return Chart(spec, len(rows) * len(series), total, notes)


def _scatter(con: duckdb.DuckDBPyConnection, src: str, plan: Roles, points: int, total: int) -> Chart:
    ycol = plan.values[0]
    base = (
        f"(SELECT __cairn_r AS r, {_number(plan.x)} AS x, {_number(ycol)} AS y FROM {src}) t "
        "WHERE x IS NOT NULL AND y IS NOT NULL"
    )
    (complete,) = _one(con, f"SELECT count(*) FROM {base}")
    if complete == 0:
        raise InvalidInput("No numeric points to chart")
    notes = []
    if complete <= points:
        rows = _fetch(con, f"SELECT x, y FROM {base} ORDER BY r")
    else:  # the rows of smallest hash: a seeded sample, and one of k points is a prefix of one of more
        rows = _fetch(con, f"SELECT x, y FROM {base} ORDER BY hash(r, {SEED}), r LIMIT {int(points)}")
        notes.append(f"seeded sample of {len(rows)} of {complete:,} points")
    if complete < total:
        notes.append(f"{total - complete:,} rows with a null left out")
    _tidy(rows, ["x", "y"])
    enc = {
        "x": {"field": "x", "type": "quantitative", "title": plan.x},
        "y": {"field": "y", "type": "quantitative", "title": ycol},
    }
    return Chart(_spec("point", enc, rows), len(rows), total, notes)


def _histogram(con: duckdb.DuckDBPyConnection, src: str, plan: Roles, points: int, total: int) -> Chart:
    base = f"(SELECT {_number(plan.x)} AS v FROM {src}) t"
    lo, hi, valued, whole = _one(con, f"SELECT min(v), max(v), count(v), bool_and(v = floor(v)) FROM {base}")
    if not valued:
        raise InvalidInput("No numeric values to chart")
    # Whole numbers in a DOUBLE column bin as integers do: each value in one bin.
    start, step, count = bins(float(lo), float(hi), points, plan.x_type.upper() in INTEGER_TYPES or bool(whole))
    binned = _fetch(
        con,
        f"SELECT CAST(greatest(0, least({count - 1}, floor((v - {start!r}) / {step!r}))) AS BIGINT) AS b, "
        f"count(*) AS n FROM {base} WHERE v IS NOT NULL GROUP BY b",
    )
    found = {int(r["b"]): int(r["n"]) for r in binned}
    rows = [
        {"lo": _edge(start + i * step), "hi": _edge(start + (i + 1) * step), "n": found.get(i, 0)} for i in range(count)
    ]
    notes = [f"{count} bins over all {int(valued):,} values"]
    if valued < total:
        notes.append(f"{total - int(valued):,} nulls not binned")
    enc = {
        "x": {"field": "lo", "bin": {"binned": True}, "type": "quantitative", "title": plan.x},
        "x2": {"field": "hi"},
        "y": {"field": "n", "type": "quantitative", "title": "count"},
    }
    return Chart(_spec("bar", enc, rows), len(rows), total, notes)


def _heatmap(con: duckdb.DuckDBPyConnection, src: str, plan: Roles, points: int, total: int) -> Chart:
    vcol = plan.values[0]
    base = (
        f"(SELECT {_label(plan.x)} AS x, {_label(plan.y)} AS y, {_number(vcol)} AS v FROM {src}) t "
        "WHERE x IS NOT NULL AND y IS NOT NULL"
    )
    kept, dx, dy = _one(con, f"SELECT count(*), count(DISTINCT x), count(DISTINCT y) FROM {base}")
    if not kept:
        raise InvalidInput(f"No rows with both {plan.x} and {plan.y} to chart")
    nx, ny = min(int(dx), HEATMAP_X), min(int(dy), HEATMAP_Y)
    if nx * ny > points:
        shrink = math.sqrt(points / (nx * ny))
        nx, ny = max(1, int(nx * shrink)), max(1, int(ny * shrink))
    top = "SELECT {c} FROM {b} GROUP BY {c} ORDER BY count(*) DESC, {c} LIMIT {n}"
    rows = _fetch(
        con,
        f"WITH b AS (SELECT * FROM {base}), xs AS ({top.format(c='x', b='b', n=nx)}), "
        f"ys AS ({top.format(c='y', b='b', n=ny)}) "
        "SELECT x, y, avg(v) AS v, count(*) AS n FROM b WHERE x IN (SELECT x FROM xs) AND y IN (SELECT y FROM ys) "
        "GROUP BY x, y ORDER BY x, y",
    )
    notes = []
    if nx < dx:
        notes.append(f"top {nx} of {int(dx):,} {plan.x} values")
    if ny < dy:
        notes.append(f"top {ny} of {int(dy):,} {plan.y} values")
    if any(r["n"] > 1 for r in rows):
        notes.append(f"mean {vcol} per cell")
    empty = sum(1 for r in rows if r["v"] is None)
    if empty:
        notes.append(f"{empty} cells with only null {vcol} left out")
    if kept < total:
        notes.append(f"{total - int(kept):,} rows with a null {plan.x} or {plan.y} left out")
    cells = [{"x": r["x"], "y": r["y"], "v": r["v"]} for r in rows if r["v"] is not None]
    _tidy(cells, ["v"])
    enc = {
        "x": {"field": "x", "type": "nominal", "title": plan.x},
        "y": {"field": "y", "type": "nominal", "title": plan.y},
        "color": {"field": "v", "type": "quantitative", "title": vcol},
    }
    return Chart(_spec("rect", enc, cells), len(cells), total, notes)


def render_png(cfg: EngineConfig, spec: dict[str, Any], max_bytes: int) -> bytes:
    """The spec drawn by vl-convert into WIDTH x HEIGHT pixels (at a smaller scale when needed to stay
    within `max_bytes`; runs in a DuckDB worker process). No data is fetched: the spec's data is inline
    and no URL is allowed."""
    import vl_convert

    sized = {**spec, "width": WIDTH, "height": HEIGHT, "autosize": {"type": "fit", "contains": "padding"}}
    size = 0
    for scale in SCALES:
        try:
            raw = vl_convert.vegalite_to_png(sized, scale=scale, config=RENDER_CONFIG, allowed_base_urls=[])
        except Exception as exc:  # vl-convert reports every failure as a plain exception
            raise EngineError(f"The chart could not be drawn: {exc}"[:400]) from None
        png = _smaller(raw)
        width, height = struct.unpack(">II", png[16:24])
        if width > WIDTH or height > HEIGHT:
            raise EngineError(f"The chart came out {width}x{height} pixels, over {WIDTH}x{HEIGHT}")
        size = len(png)
        if size <= max_bytes:
            return png
    raise InvalidInput(
        f"The chart does not fit in {max_bytes} bytes (smallest: {size})",
        suggestions=["Aggregate the result first, or use chart_format 'vega-lite'"],
    )


def _smaller(png: bytes) -> bytes:
    """The same PNG with its image data deflated at zlib's best level: vl-convert compresses for speed,
    and its charts come out several times smaller this way (lossless)."""
    pos, idat = 8, []
    before: list[tuple[bytes, bytes]] = []
    after: list[tuple[bytes, bytes]] = []
    while pos + 8 <= len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        tag, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if tag == b"IDAT":
            idat.append(body)
        else:
            (after if idat else before).append((tag, body))
        pos += 12 + length
    data = zlib.compress(zlib.decompress(b"".join(idat)), 9)
    chunks = [*before, (b"IDAT", data), *after]
    return png[:8] + b"".join(
        struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body)) for tag, body in chunks
    )


# ------------------------------------------------------------------------------------------ in the server


async def make_chart(
    cfg: EngineConfig,
    path: Path,
    kind: str,
    columns: list[str],
    types: list[str],
    fmt: str,
    *,
    max_bytes: int,
    rows_total: int,
    cost: Callable[[Visualization], int],
    limit: int,
    others: int = 0,
    others_share: float = 0.5,
) -> Visualization:
    """The visualization of a stored result: its Vega-Lite spec (`fmt` 'vega-lite' or 'both') and/or
    the PNG drawn from that spec ('png' or 'both').

    An inline spec is fitted to the reply's budget `limit`, as `cost` counts the reply holding the
    visualization (and nothing else the reply may hold, which wants `others` tokens): when the whole
    does not fit, what is left past the reply's fixed part goes to the chart, less at most
    `others_share` of it for the others. DuckDB is then asked for fewer points (a smaller sample, fewer
    bins, buckets, bars or cells) until the spec fits, and the spec is left out (noted) when even one
    point does not. The PNG is drawn from the spec returned (from the full one when it was left out)."""
    plan = roles(kind, columns, types)
    full = await offload(chart_data, cfg, path, plan, CAPS[kind])
    shown = full
    if fmt in ("vega-lite", "both"):
        budget = (cost, limit, others, others_share)
        shown = await _fit(cfg, path, plan, full, fmt, max_bytes, rows_total, budget)
    else:
        _cut_note(full, rows_total)
    png = None
    if fmt in ("png", "both"):
        drawn = shown if shown.spec is not None else full
        assert drawn.spec is not None
        png = await offload(render_png, cfg, drawn.spec, max_bytes)
        shown = replace(shown, points=drawn.points)
    return _visualization(kind, shown, fmt, png)


def _cut_note(chart: Chart, rows_total: int) -> Chart:
    """Say so when the stored rows (the chart's source) are only the first of the result's."""
    if rows_total > chart.rows:
        chart.notes.append(f"chart of the first {chart.rows:,} stored rows of {rows_total:,}")
    return chart


def _visualization(kind: str, chart: Chart, fmt: str, png: bytes | None, placeholder: int = 0) -> Visualization:
    """The reply's object; `placeholder` (a byte count) stands for a PNG not drawn yet, so that its
    fields are counted as they will be sent."""
    from app.datasets.schemas import Visualization

    viz = Visualization(type=kind, points=chart.points, source_rows=chart.rows, notes=chart.notes or None)
    if fmt in ("vega-lite", "both"):
        viz.vega_lite = chart.spec
    if png is not None:
        viz.base64_image, viz.mime_type, viz.bytes = base64.b64encode(png).decode(), "image/png", len(png)
    elif placeholder and fmt == "both":
        viz.base64_image, viz.mime_type, viz.bytes = "-", "image/png", placeholder
    return viz


async def _fit(
    cfg: EngineConfig,
    path: Path,
    plan: Roles,
    chart: Chart,
    fmt: str,
    max_bytes: int,
    rows_total: int,
    budget: tuple[Callable[[Visualization], int], int, int, float],
) -> Chart:
    """`chart` with no more points than fit its share of the budget (see `make_chart`)."""
    cost, limit, others, others_share = budget

    def measure(c: Chart) -> int:
        return cost(_visualization(plan.kind, c, fmt, None, max_bytes))

    _cut_note(chart, rows_total)
    used = await asyncio.to_thread(measure, chart)
    if used + others <= limit:
        return chart
    assert chart.spec is not None
    base = await asyncio.to_thread(measure, replace(chart, spec={**chart.spec, "data": {"values": []}}, points=0))
    share = limit - min(others, int(max(0, limit - base) * others_share))
    least = len(plan.values) if plan.kind == "line" else 1
    notes = chart.notes
    for _ in range(FIT_ROUNDS):
        if used <= share:
            return chart
        if used <= base or base >= share:
            break
        target = min(chart.points - 1, int(chart.points * (share - base) / (used - base)))
        if target < least:
            break
        chart = _cut_note(await offload(chart_data, cfg, path, plan, target), rows_total)
        chart.notes.append("fewer points to fit max_tokens")
        used = await asyncio.to_thread(measure, chart)
    if used <= share:
        return chart
    return replace(chart, spec=None, points=0, notes=[*notes, "vega_lite left out: over max_tokens"])
