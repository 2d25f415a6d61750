"""profile_dataset and stream_sample: a dataset file read where it lies (a DuckDB worker streams it),
answered within the token budget; profiles are cached by file fingerprint."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from app.core import budget
from app.core.context import CallContext
from app.core.cuts import Cut
from app.core.errors import SchemaError, invalid_field
from app.datasets import cuts, engine
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

# The largest max_tokens a call may pass (ProfileIn, SampleIn): a next call never asks for more.
MAX_TOKENS = 20_000


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
    limit = budget_of(cfg, args.max_tokens)
    if args.max_tokens is None and args.detail == "summary":  # the seed's budget of a profile
        limit = min(cfg.datasets_profile_max_tokens, limit)
    return await asyncio.to_thread(fit_profile, raw, args, src, cache_hit, limit)


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


def selected(raw: dict[str, Any], names: list[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The columns of a full profile `raw` that `names` asks for (all without names) and the
    recommendations about them or about the whole file; 4003 naming a column the file lacks."""
    columns: list[dict[str, Any]] = [dict(c) for c in raw["schema"]["columns"]]
    recommendations: list[str] = list(raw["recommendations"])
    if names is None:
        return columns, recommendations
    have = {c["name"] for c in columns}
    unknown = [n for n in names if n not in have]
    if unknown:
        raise SchemaError(
            f"No column {cuts.named(unknown, 3)} in this dataset",
            suggestions=[f"Columns: {cuts.named([c['name'] for c in columns], 20)}"],
        )
    wanted = set(names)
    about = [r for r in recommendations if not r.startswith("'") or r.split("'", 2)[1] in wanted]
    return [c for c in columns if c["name"] in wanted], about


def fit_profile(raw: dict[str, Any], args: ProfileIn, src: engine.Source, cache_hit: bool, limit: int) -> ProfileOut:
    """The reply of a full profile `raw` in `args.detail`, within `limit` tokens. Ladder: recommendations
    from the last; then whole columns from the last, unless lighter columns show more of them (summary:
    the statistics and sample values of the last columns, as few as fit, go; a bare line keeps name,
    type, null % and distinct count; full: every column's top values are cut to 5, then its statistics
    go, then all but one sample value). A cut
    reply names what it left out in `cut`, with the call that gets it (the budget the whole profile
    takes). Recommendations go first: each names its column, the columns they are about stay, and the
    next call brings them back. A budget too small for even the statistics is refused (4001) with the
    least that fits."""
    full = args.detail == "full"
    columns, recommendations = selected(raw, args.columns)
    names = [c["name"] for c in columns]
    reason = cuts.budget_reason(limit, args.max_tokens)
    need = [0]  # tokens of the whole profile, once counted

    def build(cols: list[dict[str, Any]], stripped: str, k: int, r: int) -> dict[str, Any]:
        schema: dict[str, Any] = {"columns": cols[:k], "columns_omitted": len(cols) - k}
        if not full:
            lines = [line for c in cols[:k] for line in profiling.summary_lines(c)]
            schema["columns"] = [profiling.summary_header(), *lines] if lines else []
        cut = None
        if stripped or k < len(cols) or r < len(recommendations):
            parts = [stripped if k else "", f"columns {cuts.named(names[k:])}" if k < len(cols) else ""]
            parts.append(f"{len(recommendations) - r} recommendations" if r < len(recommendations) else "")
            # The whole profile, or, past the largest budget, the columns left out (then the rest of them).
            whole = {"max_tokens": need[0]} if need[0] <= MAX_TOKENS else {"columns": (names[k:] or names)[:50]}
            cut = cuts.cut(reason, parts, "profile_dataset", **whole)
        out = ProfileOut(
            schema=ProfileSchema.model_validate(schema),
            statistics=ProfileStatistics.model_validate(raw["statistics"]),
            recommendations=recommendations[:r],
            context_tokens_used=0,
            file_path=src.pattern,
            format=raw["format"],
            files=raw["files"],
            cache_hit=cache_hit,
            truncated=cut is not None,
            cut=cut,
        )
        return budget.finalize(out.model_dump(mode="json", by_alias=True))

    def fits(payload: dict[str, Any]) -> bool:
        return int(payload["context_tokens_used"]) <= limit

    n, recs = len(columns), len(recommendations)
    payload = build(columns, "", n, recs)
    need[0] = payload["context_tokens_used"]
    if fits(payload):
        return ProfileOut.model_validate(payload)
    r = budget.largest_fitting(recs, lambda m: fits(build(columns, "", n, m)))
    light, stripped = columns, ""
    k = budget.largest_fitting(n, lambda m: fits(build(columns, "", m, r)))
    if k < n:
        # Lighter columns, when they show more of them than whole ones do (the cut's words cost too).
        lighter, text = _lighter(columns, full, lambda cols, text: fits(build(cols, text, n, 0)))
        more = budget.largest_fitting(n, lambda m: fits(build(lighter, text, m, r)))
        if more > k:
            light, stripped, k = lighter, text, more
    payload = build(light, stripped, k, r)
    if not fits(payload):
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


def _lighter(
    columns: list[dict[str, Any]], full: bool, fits: Callable[[list[dict[str, Any]], str], bool]
) -> tuple[list[dict[str, Any]], str]:
    """The columns lightened until `fits(columns, what was stripped)` (or as light as they go), and the
    text naming what was stripped. Summary: the last columns lose their statistics and sample values,
    as few as fit; full: every column loses its top values past 5, then its statistics, then all but one
    sample value."""
    n = len(columns)
    if not full:
        bare = [{**c, "stats": None, "sample_values": []} for c in columns]

        def text(m: int) -> str:
            if m >= n:
                return ""
            if m == 0:
                return "stats/samples of every column"
            last = columns[n - 1]["name"]
            which = f"column {m + 1} ({last})" if m == n - 1 else f"columns {m + 1}-{n} ({columns[m]['name']}..{last})"
            return f"stats/samples of {which}"

        m = budget.largest_fitting(n, lambda m: fits(columns[:m] + bare[m:], text(m)))
        return columns[:m] + bare[m:], text(m)
    done = {"top5": "top values past 5", "nostats": "stats", "novalues": "sample values past the first"}
    cols = [dict(c) for c in columns]
    stripped: list[str] = []
    for step in ("top5", "nostats", "novalues"):
        _shrink(cols, step)
        stripped.append(done[step])
        if fits(cols, f"{', '.join(stripped)} of every column"):
            break
    return cols, f"{', '.join(stripped)} of every column"


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
    rows = res["rows"][args.offset :]
    groups: list[str] | None = res.get("row_groups")
    groups = groups[args.offset :] if groups is not None else None

    def build(k: int, need: int | None = None) -> dict[str, Any]:
        info = SamplingInfo(
            strategy=args.strategy,
            rows_sampled=k,
            total_rows=res["total"],
            columns_included=res["columns"],
            seed=args.seed,
            details=res["info"] if groups is None else shown_groups(res["info"], groups[:k]),
        )
        out = SampleOut(
            sample=rows[:k],
            sampling_info=info,
            context_tokens_used=0,
            truncated=k < len(rows),
            cut=sample_cut(args, limit, k, len(res["rows"]), groups, need) if k < len(rows) else None,
        )
        return budget.finalize(out.model_dump(mode="json"))

    def fitted() -> dict[str, Any]:
        k = budget.largest_fitting(len(rows), lambda m: build(m)["context_tokens_used"] <= limit)
        if k or not rows:
            return build(k)
        # Not one row fits: the next call is this one with the budget the first row needs.
        return build(0, build(1)["context_tokens_used"])

    return SampleOut.model_validate(await asyncio.to_thread(fitted))


def shown_groups(info: dict[str, Any], shown: list[str]) -> dict[str, Any]:
    """A stratified sample's details for the rows shown (`shown`: the group of each): the groups they
    represent and how many rows of each, never what was drawn but not shown."""
    allocation: dict[str, int] = {}
    for g in shown:
        allocation[g] = allocation.get(g, 0) + 1
    return {**info, "groups_represented": len(allocation), "allocation": dict(list(allocation.items())[:50])}


def sample_cut(args: SampleIn, limit: int, k: int, drawn: int, groups: list[str] | None, need: int | None) -> Cut:
    """What a sample cut to its budget left out (rows after the `k` shown of the `drawn`, and with a
    stratified sample the groups none of the shown rows is of) and the call that gets them: the same
    sample from the next offset, or, when not even one row fits, with the budget (`need`) one row takes."""
    first = args.offset + k + 1
    parts = [cuts.rows_text(first, drawn, drawn, "sampled rows")]
    if groups is not None:
        missing = [g for g in dict.fromkeys(groups) if g not in set(groups[:k])]
        if missing:
            parts.append(f"{len(missing)} groups: {cuts.named(missing)}")
    reason = cuts.budget_reason(limit, args.max_tokens)
    if k == 0 and need is not None:
        return cuts.cut(reason, parts, "stream_sample", max_tokens=need, offset=args.offset)
    return cuts.cut(reason, parts, "stream_sample", offset=args.offset + k)
