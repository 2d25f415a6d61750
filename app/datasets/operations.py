"""The datasets tools: profile, query, sample, page, export, cache, registry (seed 002). `ops` is the
whole family's OperationSet: the operations declared here plus those of `operations_downloads`, added
explicitly at the end."""

from __future__ import annotations

from app.core.context import CallContext
from app.core.errors import CacheError, EngineError, MemoryLimit, NotFound, QueryError, SchemaError
from app.core.registry import ErrorClass, OperationSet
from app.datasets import (
    operations_cache,
    operations_downloads,
    service,
    service_profile,
    service_query,
    service_results,
)
from app.datasets.schemas import (
    ExportIn,
    ExportOut,
    InvalidateIn,
    InvalidateOut,
    ListDatasetsIn,
    ListDatasetsOut,
    ProfileIn,
    ProfileOut,
    QueryIn,
    QueryOut,
    RegisterIn,
    RegisterOut,
    ResultPageIn,
    ResultPageOut,
    SampleIn,
    SampleOut,
    UploadIn,
    UploadOut,
)
from app.datasets.service_common import storage_errors

ops = OperationSet(
    "datasets",
    "Local data files (CSV, Parquet, JSON) through DuckDB: profile, query, sample, export and chart, "
    "each answer within a token budget.",
)
ops.toolset("datasets", "Datasets: profile, query (SQL), sample, export and chart files under a token budget.")

# What the query engine's failures become (`engine.errors`): a missing file, a wrong column, a query it
# refuses, a crash, a memory limit. Every operation that reads a file through the engine can answer them.
ENGINE_ERRORS: tuple[ErrorClass, ...] = (NotFound, SchemaError, QueryError, EngineError, MemoryLimit)


@ops.operation(
    name="profile_dataset",
    errors=ENGINE_ERRORS,
    title="Profile Dataset",
    input=ProfileIn,
    output=ProfileOut,
    path="/datasets/profile",
    read_only=True,
    long_running=True,
)
async def profile_dataset(ctx: CallContext, args: ProfileIn) -> ProfileOut:
    """Profile a CSV/Parquet/JSON dataset without loading it into context: per-column type, null %,
    distinct count, sample values and (compute_stats) ranges or top categories with counts, plus row
    count, file size, memory estimate, a 0..1 quality score and recommendations (including numbers,
    booleans or dates stored as text, numbers mixed with text and padded values, found in a sample of
    `sample_size` rows spread over the file). By default `schema.columns` is compact CSV lines, header
    first; `detail: "full"` gives an object per column with DuckDB type, quartiles and up to
    `max_categories` top values. DuckDB streams the file. `file_path` is a path or glob inside the data
    roots, or a registered dataset name. The answer fits `max_tokens` (details dropped first,
    `truncated` set); cached by file fingerprint."""
    await ctx.progress(0, 1, "profiling")
    with storage_errors():
        out = await service_profile.profile_dataset(ctx, args)
    await ctx.progress(1, 1, "done")
    return out


@ops.operation(
    name="execute_query",
    errors=(*ENGINE_ERRORS, CacheError),
    primary_only=True,  # stores its result's metadata as it reads (get_result reads it back)
    title="Query Dataset",
    input=QueryIn,
    output=QueryOut,
    path="/datasets/query",
    read_only=True,
    long_running=True,
    plain=True,  # its few statements (the cache epoch, the result's row) are text, run on the driver
)
async def execute_query(ctx: CallContext, args: QueryIn) -> QueryOut:
    """Run a read-only analytical query over dataset files and return a bounded answer.

    query_type 'sql' (the default) runs on DuckDB (read_csv_auto / read_parquet / read_json_auto, globs, joins,
    window functions); each entry of `files` becomes a view (dataset name, file stem or query_id; a
    single input is also `data`). Only one SELECT / WITH / DESCRIBE / SUMMARIZE / EXPLAIN statement is
    accepted; files outside the data roots, COPY, ATTACH, INSTALL/LOAD, SET and read_text are refused.
    A query out of time answers the rows it produced (`partial`, `partial_reason`), else 5003.
    query_type 'polars_expr' is a restricted expression language compiled to SQL (a registered dataset
    by name: pl.scan_csv('orders')); 'python' is off unless the operator enables it. engine 'auto'
    (the default) chooses by the seed's rules (python code / ML imports → pandas, several files or
    SQL → DuckDB, a polars chain → polars) and says why in `summary.engine_reason`.
    The full result is kept server-side under `query_id` (page it with get_result, export it with
    export_result, or use the query_id as a table name later). The response fits `max_tokens`:
    fewer rows, then rows plus a summary of the rest, then a summary alone (`truncated`,
    `degradation`, `rows_total`, `context_tokens_used`). Identical queries on unchanged files are
    answered from the cache (`summary.cache_hit`); an error points at its place in `query_context`.

    generate_chart (with the rows) or return_format 'chart' (without) adds a chart of the whole
    result (chart_type bar/line/scatter/histogram/heatmap): one Vega-Lite spec computed in DuckDB over
    every row (binned, bucketed or sampled; a null is a gap in a line), returned inline
    (chart_format 'vega-lite', fitted to max_tokens with fewer points) and/or drawn as a PNG from that
    spec ('png', 'both'); `visualization.notes` says what was done to the data."""
    await ctx.progress(0, 1, "running query")
    with storage_errors():
        out = await service_query.execute_query(ctx, args)
    await ctx.progress(1, 1, "done")
    return out


@ops.operation(
    name="get_result",
    example={"query_id": "q_0123456789abcdef", "offset": 100},
    title="Get Stored Result",
    input=ResultPageIn,
    output=ResultPageOut,
    path="/datasets/results/{query_id}",
    method="GET",
    read_only=True,
)
async def get_result(ctx: CallContext, args: ResultPageIn) -> ResultPageOut:
    """Page through a stored query result by query_id (offset/limit, bounded by max_tokens) without
    re-running the query."""
    with storage_errors():
        return await service_results.get_result(ctx, args)


@ops.operation(
    name="stream_sample",
    errors=ENGINE_ERRORS,
    title="Sample Dataset",
    input=SampleIn,
    output=SampleOut,
    path="/datasets/sample",
    read_only=True,
)
async def stream_sample(ctx: CallContext, args: SampleIn) -> SampleOut:
    """Draw representative rows from a dataset: head, random (seeded, reproducible), stratified (every
    group of stratify_column represented) or systematic (every k-th row); `columns` projects. Streams
    the file; bounded by sample_size and max_tokens."""
    with storage_errors():
        return await service_profile.stream_sample(ctx, args)


@ops.operation(
    name="export_result",
    errors=(NotFound, EngineError),
    example={"query_id": "q_0123456789abcdef", "format": "csv", "destination": "exports"},
    title="Export Result",
    input=ExportIn,
    output=ExportOut,
    path="/datasets/export",
    destructive=True,
    idempotent=False,
)
async def export_result(ctx: CallContext, args: ExportIn) -> ExportOut:
    """Write a stored query result (query_id) as parquet, csv, json or xlsx into a folder of the
    project's own folder (`destination`, e.g. 'exports'; never a shared data root or uploads/),
    optionally partitioned by a column and compressed; returns the files created and their sizes.
    filename must carry the format's extension (.csv, .csv.gz with gzip, .parquet, .json/.jsonl,
    .xlsx). An existing file is replaced only with overwrite=true, and only when it is a regular file;
    a folder or a symbolic link is never replaced, followed or deleted."""
    with storage_errors():
        return await service_results.export_result(ctx, args)


@ops.operation(
    name="cache_invalidate",
    errors=(NotFound,),
    title="Invalidate Cache",
    input=InvalidateIn,
    output=InvalidateOut,
    path="/datasets/cache/invalidate",
    destructive=True,
    idempotent=True,
)
async def cache_invalidate(ctx: CallContext, args: InvalidateIn) -> InvalidateOut:
    """Drop cached query results and profiles by key, label or query_id pattern (wildcards) or by input
    file; lists what it dropped."""
    with storage_errors():
        return await service_results.cache_invalidate(ctx, args)


@ops.operation(
    name="list_datasets",
    title="List Datasets",
    input=ListDatasetsIn,
    output=ListDatasetsOut,
    path="/datasets",
    method="GET",
    read_only=True,
)
async def list_datasets(ctx: CallContext, args: ListDatasetsIn) -> ListDatasetsOut:
    """List registered datasets (paginated) and the data files found in the data roots (capped)."""
    with storage_errors():
        return await service.list_datasets(ctx, args)


@ops.operation(
    name="register_dataset",
    errors=(NotFound,),
    title="Register Dataset",
    input=RegisterIn,
    output=RegisterOut,
    path="/datasets/register",
    idempotent=True,
)
async def register_dataset(ctx: CallContext, args: RegisterIn) -> RegisterOut:
    """Give a file or glob inside the data roots a name, usable as file_path and as a view in SQL.
    (Remote clients upload files with the REST route POST /api/v1/datasets/upload.)"""
    with storage_errors():
        return await service.register_dataset(ctx, args)


@ops.operation(
    name="upload_dataset",
    title="Upload Dataset",
    input=UploadIn,
    output=UploadOut,
    path="/datasets/upload",
    mcp=False,
    rest=False,
)
async def upload_dataset(ctx: CallContext, args: UploadIn) -> UploadOut:
    """Upload a dataset file: the multipart body of POST /api/v1/datasets/upload is streamed into the
    project's `uploads/` folder under a size limit, moved to `uploads/<name><ext>` and registered under
    `name`. The route calls this operation through the executor before it reads the body (rate limit,
    validation, scope, project, transaction, audit, metrics); never an MCP tool."""
    with storage_errors():
        return await service.upload_dataset(ctx, args)


ops.include(operations_cache.ops, operations_downloads.ops)
