"""The reply of execute_query: a stored result's rows, a summary of the rest or of the whole, and an
optional chart, fitted to the call's token budget."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from app.core import budget
from app.core.cuts import Cut
from app.datasets import cuts, engine
from app.datasets.config import DatasetSettings
from app.datasets.schemas import QueryIn, QueryOut, QuerySummary, Visualization
from app.datasets.service_common import budget_of
from app.datasets.service_results import written

# An answer of at most this many rows is first counted on the event loop (see `_fit`).
FEW_ROWS = 20

# Tokens an inline chart spec leaves below its share, for what the reply's last fields (degradation,
# truncated, next_offset) may add once its rows are fitted.
CHART_MARGIN = 8


@dataclasses.dataclass(frozen=True)
class Stored:
    """A stored result as execute_query answers with it: its metadata (`meta`: query_id, result_path,
    columns, types, rows_stored, rows_total, elapsed_ms), whether it came from the cache, the engine
    that made it, the query's text as `normalize_sql` gives it (it tells an aggregation from a table)
    and the view names the query could use."""

    meta: dict[str, Any]
    cache_hit: bool
    engine_used: str
    normalized: str
    views: list[str]

    @property
    def path(self) -> Path:
        """The result's Parquet file."""
        return Path(self.meta["result_path"])


def rows_shown(args: QueryIn) -> int:
    """How many leading rows of the result the answer may show."""
    return 0 if args.return_format in ("summary", "chart") else args.return_limit


def result_type(normalized: str, fmt: str) -> Literal["tabular", "aggregation", "chart"]:
    """The kind of result a query (its text as `normalize_sql` gives it) returns."""
    if fmt == "chart":
        return "chart"
    norm = normalized.lower()
    if "group by" in norm or re.search(r"\b(count|sum|avg|min|max|median|stddev|quantile\w*)\s*\(", norm):
        return "aggregation"
    return "tabular"


def csv_lines(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The header and `rows` as CSV lines, each value rendered as the answer shows it."""
    lines = []
    for values in [columns] + [[r.get(c) for c in columns] for r in rows]:
        buf = io.StringIO()
        # A "\r\n" terminator, cut off after, makes the writer quote a value holding a line break.
        csv.writer(buf, lineterminator="\r\n").writerow([engine.cell_text(v) for v in values])
        lines.append(buf.getvalue().removesuffix("\r\n"))
    return lines


@dataclasses.dataclass
class Reply:
    """Builds the reply around the rows kept, the summary of the rest and the degradation level (a
    `budget.Envelope`); `visualization` is added once the chart is made."""

    args: QueryIn
    stored: Stored
    limit: int = 0
    visualization: Visualization | None = None
    kind: Literal["tabular", "aggregation", "chart"] = dataclasses.field(init=False)
    summary: QuerySummary = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        meta = self.stored.meta
        self.kind = result_type(self.stored.normalized, self.args.return_format)
        self.summary = QuerySummary(
            rows_processed=meta["rows_total"],
            execution_time_ms=meta["elapsed_ms"],
            cache_hit=self.stored.cache_hit,
            engine_used=self.stored.engine_used,
            engine_reason=meta.get("engine_reason"),
        )

    def __call__(self, kept: list[Any], rest: dict[str, Any] | None, level: Any) -> dict[str, Any]:
        meta, args = self.stored.meta, self.args
        columns: list[str] = meta["columns"]
        shown = len(kept)
        truncated = level != "none" or shown < meta["rows_total"]
        out = QueryOut(
            result_type=self.kind,
            data=csv_lines(columns, kept) if args.return_format == "csv" else kept,
            summary=self.summary,
            columns=columns,
            column_types=meta["types"],
            visualization=self.visualization,
            context_tokens_used=0,
            query_id=meta["query_id"],
            rows_total=meta["rows_total"],
            rows_returned=shown,
            truncated=truncated,
            degradation=level,
            rest_summary=rest,
            next_offset=shown if shown < meta["rows_stored"] else None,
            views=self.stored.views,
            cut=self.cut(shown, rest, level) if truncated else None,
            partial=bool(meta.get("partial")),
            partial_reason=meta.get("partial"),
        )
        return out.model_dump(mode="json", by_alias=True)

    def cut(self, shown: int, rest: dict[str, Any] | None, level: str) -> Cut:
        """What a reply showing `shown` rows and the summary `rest` left out, why, and the call that
        pages on (get_result from the first row not shown)."""
        meta, args = self.stored.meta, self.args
        total, stored = meta["rows_total"], meta["rows_stored"]
        parts = [cuts.rows_text(shown + 1, total, total) if shown < total else ""]
        if stored < total:
            parts.append(f"rows past {stored} (not stored)")
        if rest is not None and rest.get("columns_omitted"):
            summed = rest.get("columns", {})
            left = [c for c in meta["columns"] if c not in summed]
            parts.append(f"summary of columns {cuts.named(left)}" if summed else "summary of every column")
        if level != "none":
            reason = cuts.budget_reason(self.limit, args.max_tokens)
        elif args.return_format in ("summary", "chart"):
            reason = f"return_format {args.return_format}"
        else:
            reason = f"return_limit {args.return_limit}"
        narrower = "a narrower query (fewer columns, an aggregate or a filter)"
        if shown >= stored:
            return cuts.cut(reason, parts, how=f"execute_query with {narrower}")
        how = f"rows past {stored}: execute_query with {narrower}" if stored < total else None
        return cuts.cut(reason, parts, "get_result", how, query_id=meta["query_id"], offset=shown)


async def answer(
    cfg: DatasetSettings,
    args: QueryIn,
    stored: Stored,
    ecfg: engine.EngineConfig,
    head: list[dict[str, Any]] | None = None,
    writing: asyncio.Future[Any] | None = None,
) -> QueryOut:
    """The reply within the budget. `head`: the first rows of the result when the query has just
    stored them (else they are read from the stored file); `writing`: the stored file's write, when it
    is still under way (a summary of rows left out of the reply waits for it)."""
    meta = stored.meta
    # The stored file's types, when they are the result's: HUGEINT and INTERVAL values are stored as
    # another type (engine._storable), and the summary then reads the file's own.
    stored_as_is = not any("HUGEINT" in t or "INTERVAL" in t for t in meta["types"])
    described = list(zip(meta["columns"], meta["types"], strict=True)) if stored_as_is else None
    want = min(rows_shown(args), meta["rows_stored"])
    if head is not None:
        rows = head[:want]
    else:
        rows = await engine.offload(engine.read_rows, ecfg, stored.path, 0, want) if want else []
    limit = budget_of(cfg, args.max_tokens)
    reply = Reply(args, stored, limit)
    whole = None
    if args.return_format == "summary" or (args.return_format == "chart" and not rows):
        whole = await engine.offload(engine.summarize_stored, ecfg, stored.path, 0, described=described)
    if args.generate_chart or args.return_format == "chart":
        reply.visualization = await _chart(cfg, args, stored, ecfg, rows, whole, reply, limit)
    if whole is not None:
        return _summary_only(reply, whole, limit)

    def rest_summary(offset: int) -> dict[str, Any]:
        return engine.offload_sync(engine.summarize_stored, ecfg, stored.path, offset, described=described)

    return await _fit(reply, rows, limit, rest_summary, writing)


def _summary_only(reply: Reply, whole: dict[str, Any], limit: int) -> QueryOut:
    """The reply without rows: the summary of the whole result, shrunk to the budget."""
    images = budget.image_fields(QueryOut)  # a chart travels as MCP image content, not text

    def built(summary: dict[str, Any] | None) -> dict[str, Any]:
        # Measured as sent: a summary left whole is no cut (the rows are left out by the format asked).
        level = "none" if summary is not None and "columns_omitted" not in summary else "summary_only"
        payload = reply([], summary, level)
        payload["truncated"] = level != "none"
        if level == "none":
            payload.pop("cut", None)
        return budget.finalize(payload, image_fields=images)

    trimmed = budget.shrink_summary(whole, lambda s: budget.tokens_of(built(s), images) <= limit)
    return QueryOut.model_validate(built(trimmed))


async def _fit(
    reply: Reply,
    rows: list[dict[str, Any]],
    limit: int,
    summarize: Callable[[int], dict[str, Any]],
    writing: asyncio.Future[Any] | None,
) -> QueryOut:
    """The reply with as many of `rows` as fit and a summary of the rest (`budget.fit_rows`'s ladder);
    `summarize(offset)` is DuckDB's summary of the rows from `offset` on, asked from fit's thread."""
    loop = asyncio.get_running_loop()
    meta, args = reply.stored.meta, reply.args
    images = budget.image_fields(QueryOut)
    summaries: dict[int, dict[str, Any]] = {}

    def rest_summary(offset: int) -> dict[str, Any]:
        if writing is not None:  # in fit's thread
            asyncio.run_coroutine_threadsafe(written(writing), loop).result()
        if offset not in summaries:  # the ladder may ask twice for one offset: each is a worker call
            summaries[offset] = summarize(offset)
        return summaries[offset]

    # Every row in hand: the ladder's first guess at a summary's size is made from them, not a worker call.
    complete = len(rows) == meta["rows_stored"]

    def estimate(offset: int) -> dict[str, Any]:
        return rest_estimate(rows, offset, meta["columns"], meta["types"])

    def fit() -> dict[str, Any]:
        sent = csv_lines(meta["columns"], rows)[1:] if args.return_format == "csv" else None
        return budget.fit_rows(reply, rows, limit, rest_summary, images, sent, estimate if complete else None)[0]

    if len(rows) <= FEW_ROWS:  # counted here: a thread hop costs more than counting a few rows
        full = budget.finalize(reply(rows, None, "none"), image_fields=images)
        if full["context_tokens_used"] <= limit:  # what fit_rows answers first when it can
            return QueryOut.model_validate(full)
    return QueryOut.model_validate(await asyncio.to_thread(fit))


async def _chart(
    cfg: DatasetSettings,
    args: QueryIn,
    stored: Stored,
    ecfg: engine.EngineConfig,
    rows: list[dict[str, Any]],
    whole: dict[str, Any] | None,
    reply: Reply,
    limit: int,
) -> Visualization:
    """The chart of a stored result (see `charts.make_chart`): an inline Vega-Lite spec shares the budget
    with the rows shown (which may take at most half of what the reply's fixed part leaves) or, in a
    reply without rows, with the summary `whole` (at most a quarter); `reply` builds the reply it is
    counted in."""
    from app.datasets.engine import charts

    images = budget.image_fields(QueryOut)

    def cost(viz: Visualization) -> int:
        payload = reply([], None, "rows_and_summary")
        payload["visualization"] = viz.model_dump(mode="json", by_alias=True)
        return budget.tokens_of(budget.finalize(payload, image_fields=images), images)

    def wanted() -> int:  # the tokens the rows or the summary would take
        if rows:
            return sum(budget.item_tokens(rows)) + len(rows)
        return budget.tokens_of(whole) if whole is not None else 0

    others = await asyncio.to_thread(wanted)
    meta = stored.meta
    return await charts.make_chart(
        ecfg,
        stored.path,
        args.chart_type or "bar",
        meta["columns"],
        meta["types"],
        args.chart_format,
        max_bytes=cfg.datasets_chart_max_bytes,
        rows_total=meta["rows_total"],
        cost=cost,
        limit=limit - CHART_MARGIN,
        others=others,
        others_share=0.5 if rows else 0.25,
    )


def rest_estimate(
    rows: list[dict[str, Any]], offset: int, columns: list[str], types: list[str], max_columns: int = 40
) -> dict[str, Any]:
    """About what `engine.summarize_stored` answers for rows `offset` on, made from the rows themselves
    (rendered values): the same keys with values of about the same length. It only sizes a first try
    (`budget.fit_rows`' `estimate_rest`); a summary sent is always DuckDB's."""
    rest = rows[offset:]
    out: dict[str, Any] = {}
    for name, ctype in list(zip(columns, types, strict=False))[:max_columns]:
        values = [r.get(name) for r in rest if r.get(name) is not None]
        texts = sorted(v if isinstance(v, str) else json.dumps(v, default=str) for v in values)
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        entry: dict[str, Any] = {
            "type": ctype,
            "min": (min(numbers) if numbers else texts[0][:40]) if values else None,
            "max": (max(numbers) if numbers else texts[-1][:40]) if values else None,
            "distinct": len(set(texts)),
            "null_pct": round(100.0 * (len(rest) - len(values)) / len(rest), 2) if rest else 0.0,
        }
        if numbers and engine.is_numeric(ctype):
            entry["mean"] = float(f"{statistics.fmean(numbers):.6g}")
            entry["std"] = float(f"{statistics.stdev(numbers):.6g}") if len(numbers) > 1 else None
        out[name] = entry
    omitted = {"columns_omitted": len(columns) - max_columns} if len(columns) > max_columns else {}
    return {"rows": len(rest), "from_row": offset, "columns": out, **omitted}
