"""profile_dataset and stream_sample: a dataset file read where it lies (a DuckDB worker streams it),
answered within the token budget; profiles are cached by file fingerprint."""

from __future__ import annotations

import asyncio
from typing import Any

from app.core import budget
from app.core.context import CallContext
from app.core.errors import invalid_field
from app.datasets import engine
from app.datasets.config import DatasetSettings
from app.datasets.engine import profiling
from app.datasets.engine.cache import fingerprint, make_key
from app.datasets.schemas import (
    ProfileIn,
    ProfileOut,
    ProfileSchema,
    ProfileStatistics,
    SampleIn,
    SampleOut,
    SamplingInfo,
)
from app.datasets.service_common import (
    budget_of,
    cache_epoch,
    cache_of,
    engine_config,
    name_caller,
    portable_fingerprints,
    resolve_source,
    space_of,
)


async def profile_dataset(ctx: CallContext, args: ProfileIn) -> ProfileOut:
    """Profile one dataset (cached by file fingerprint and options). The cached profile is the full
    one: `detail` only shapes the reply, so it is not part of the key and either detail of one profile
    is answered from the same entry."""
    cfg = ctx.feature_settings(DatasetSettings)
    space = await space_of(ctx, args.project)
    name_caller(ctx)
    src = await resolve_source(ctx, space, args.file_path)
    cache = cache_of(ctx, space)
    epoch = await cache_epoch(ctx, space)
    fps = portable_fingerprints(space, await asyncio.to_thread(fingerprint, src.files))
    key = make_key(
        "profile",
        project=space.project,
        pattern=space.store.portable(src.pattern),
        files=fps,
        sample=args.sample_size,
        stats=args.compute_stats,
        cats=args.max_categories,
        shape=profiling.SHAPE,
    )
    hit = await asyncio.to_thread(cache.get, key, epoch)
    if hit is not None:
        raw, cache_hit = hit["payload"], True
    else:
        raw = await engine.offload(
            profiling.profile,
            engine_config(cfg, space),
            src,
            sample_size=args.sample_size,
            compute_stats=args.compute_stats,
            max_categories=args.max_categories,
        )
        cache_hit = False
        entry = {
            "payload": raw,
            "files": fps,
            "label": f"profile:{space.store.portable(src.pattern)}",
            "text": args.file_path,
            "project": space.project,
        }
        await asyncio.to_thread(cache.put, key, entry, epoch)
    return await asyncio.to_thread(fit_profile, raw, args, src, cache_hit, budget_of(cfg, args.max_tokens))


def _shrink(columns: list[dict[str, Any]], step: str) -> None:
    """One step of the profile's ladder on every column: `top5` cuts top-value lists to five (the rest
    counted in other_values / other_rows), `nostats` drops the statistics, `novalues` keeps one sample
    value."""
    for c in columns:
        if step == "top5" and c.get("stats") and "top_values" in c["stats"]:
            st = c["stats"]
            kept, cut = st["top_values"][:5], st["top_values"][5:]
            c["stats"] = {
                **st,
                "top_values": kept,
                "other_values": int(st.get("other_values") or 0) + len(cut),
                "other_rows": int(st.get("other_rows") or 0) + sum(n for _, n in cut),
            }
        elif step == "nostats":
            c["stats"] = None
            c.pop("fields", None)
        elif step == "novalues":
            c["sample_values"] = c["sample_values"][:1]


def fit_profile(raw: dict[str, Any], args: ProfileIn, src: engine.Source, cache_hit: bool, limit: int) -> ProfileOut:
    """The reply of a full profile `raw` in `args.detail`, within `limit` tokens. Ladder: top-value
    lists cut to 5 (full), then column statistics dropped, then sample values cut to one, then whole
    columns (`columns_omitted`), then recommendations; each step sets `truncated`. A budget too small
    for even the statistics is refused (4001) with the least that fits."""
    full = args.detail == "full"
    columns: list[dict[str, Any]] = [dict(c) for c in raw["schema"]["columns"]]
    recommendations: list[str] = list(raw["recommendations"])

    def build(cols: list[dict[str, Any]], omitted: int, truncated: bool, recs: list[str]) -> dict[str, Any]:
        schema: dict[str, Any] = {"columns": cols, "columns_omitted": omitted}
        if not full:
            lines = [line for c in cols for line in profiling.summary_lines(c)]
            schema["columns"] = [profiling.summary_header(), *lines] if lines else []
        out = ProfileOut(
            schema=ProfileSchema.model_validate(schema),
            statistics=ProfileStatistics.model_validate(raw["statistics"]),
            recommendations=recs,
            context_tokens_used=0,
            file_path=src.pattern,
            format=raw["format"],
            files=raw["files"],
            cache_hit=cache_hit,
            truncated=truncated,
        )
        return budget.finalize(out.model_dump(mode="json", by_alias=True))

    payload = build(columns, 0, False, recommendations)
    if payload["context_tokens_used"] <= limit:
        return ProfileOut.model_validate(payload)
    for step in ("top5", "nostats", "novalues") if full else ("nostats", "novalues"):
        _shrink(columns, step)
        payload = build(columns, 0, True, recommendations)
        if payload["context_tokens_used"] <= limit:
            return ProfileOut.model_validate(payload)
    k = budget.largest_fitting(
        len(columns),
        lambda m: build(columns[:m], len(columns) - m, True, recommendations)["context_tokens_used"] <= limit,
    )
    if k == 0:
        r = budget.largest_fitting(
            len(recommendations),
            lambda m: build([], len(columns), True, recommendations[:m])["context_tokens_used"] <= limit,
        )
        recommendations = recommendations[:r]
    payload = build(columns[:k], len(columns) - k, True, recommendations)
    if payload["context_tokens_used"] > limit:
        # Not even the statistics and the file fit: refused rather than answered over the budget (the
        # profile is cached, so asking again with a larger max_tokens costs no second pass).
        least = payload["context_tokens_used"]
        raise invalid_field(
            "max_tokens",
            f"max_tokens {limit} is below the smallest profile of this dataset ({least} tokens)",
            rule="too_small",
            suggestions=[f"Pass max_tokens of at least {least}"],
        )
    return ProfileOut.model_validate(payload)


async def stream_sample(ctx: CallContext, args: SampleIn) -> SampleOut:
    """Representative rows of one dataset."""
    if args.strategy == "stratified" and not args.stratify_column:
        raise invalid_field(
            "stratify_column", "stratify_column is required for the stratified strategy", rule="required"
        )
    cfg = ctx.feature_settings(DatasetSettings)
    space = await space_of(ctx, args.project)
    name_caller(ctx)
    src = await resolve_source(ctx, space, args.file_path)
    res = await engine.offload(
        profiling.sample,
        engine_config(cfg, space),
        src,
        strategy=args.strategy,
        size=args.sample_size,
        columns=args.columns,
        stratify_column=args.stratify_column,
        seed=args.seed,
    )
    limit = budget_of(cfg, args.max_tokens)
    rows = res["rows"]

    def build(k: int) -> dict[str, Any]:
        info = SamplingInfo(
            strategy=args.strategy,
            rows_sampled=k,
            total_rows=res["total"],
            columns_included=res["columns"],
            seed=args.seed,
            details=res["info"],
        )
        out = SampleOut(sample=rows[:k], sampling_info=info, context_tokens_used=0, truncated=k < len(rows))
        return budget.finalize(out.model_dump(mode="json"))

    k = await asyncio.to_thread(budget.largest_fitting, len(rows), lambda m: build(m)["context_tokens_used"] <= limit)
    return SampleOut.model_validate(build(k))
