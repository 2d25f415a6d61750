"""Input and output models of the datasets tools (seed 002's schemas plus what a remote server needs)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from app.core.cuts import Cut, CutField
from app.core.schemas import PROJECT_NAME, StrictModel

DATASET_NAME = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
ProjectField = Field(
    default=None,
    pattern=PROJECT_NAME,
    description="Project whose datasets, results and folder the call uses (default: the key's project or 'default')",
)
MaxTokens = Field(
    default=None,
    ge=50,
    le=20_000,
    description="Token budget of this response (default: the server's CAIRN_DATASETS_MAX_TOKENS)",
)


# ------------------------------------------------------------------------------------------------ profile


class ProfileIn(StrictModel):
    """Arguments of profile_dataset."""

    file_path: str = Field(
        min_length=1,
        max_length=1000,
        description="Dataset file, glob or registered dataset name, inside the data roots",
    )
    sample_size: int = Field(
        default=1000,
        ge=100,
        le=10_000,
        description="Number of rows to sample for type inference: rows spread over the file whose values "
        "give sample_values and the checks of text columns (numbers, booleans or dates stored as text, "
        "mixed numbers and text, padding) behind the recommendations",
    )
    compute_stats: bool = Field(default=True, description="Compute detailed statistics")
    max_categories: int = Field(
        default=50,
        ge=1,
        le=500,
        description="Maximum unique categories to report for categorical columns: the most frequent, with "
        "counts (a summary shows at most 3); a column stays a category whatever this is",
    )
    columns: list[str] | None = Field(
        default=None,
        max_length=500,
        description="Only these columns in the reply (null = all); a profile cut to its budget names the "
        "columns it left out, to ask for here",
    )
    detail: Literal["summary", "full"] = Field(
        default="summary",
        description="summary: schema.columns as compact CSV lines, header first (ranges, top 3 categories, "
        "2 short sample values); full: an object per column with its DuckDB type, quartiles and top values",
    )
    max_tokens: int | None = MaxTokens
    project: str | None = ProjectField


def _nothing(value: Any) -> bool:
    """A profile field left out of the reply: no statistics, or no columns omitted."""
    return value is None or (isinstance(value, int) and value == 0)


SemanticType = Literal["int64", "float64", "string", "bool", "datetime", "category", "struct", "list", "json"]


class FieldProfile(BaseModel):
    """One inner field of a struct or list column (detail 'full')."""

    path: str = Field(description="The field's path: 'customer.address.city', 'items[].qty', 'tags[]'")
    type: SemanticType
    null_pct: float
    unique_count: int
    duckdb_type: str
    stats: dict[str, Any] | None = Field(default=None, exclude_if=_nothing)


class ColumnProfile(BaseModel):
    """One column of a profile (detail 'full')."""

    name: str
    type: SemanticType
    null_pct: float
    unique_count: int = Field(description="Distinct values: exact for a category, else approximate (HyperLogLog)")
    sample_values: list[Any]
    duckdb_type: str
    stats: dict[str, Any] | None = Field(
        default=None,
        exclude_if=_nothing,
        description="min/max/mean/std/quartiles, or a category's top_values ([value, count], most frequent "
        "first) with other_values and other_rows (the distinct values and rows not listed)",
    )
    date_formats: dict[str, float] | None = Field(
        default=None,
        exclude_if=_nothing,
        description="A text column mostly of dates: each strptime format its sampled values are written in, "
        "with the share of them it reads (0..1), most first",
    )
    fields: list[FieldProfile] | None = Field(
        default=None,
        exclude_if=_nothing,
        description="A struct or list column: its inner fields, each by its path ('customer.id', "
        "'items[].sku', 'tags[]'), profiled over every row (list items counted one by one)",
    )
    fields_omitted: int = Field(
        default=0,
        exclude_if=_nothing,
        description="Inner fields past the first 24 not described (query them by path with execute_query)",
    )


class ProfileSchema(BaseModel):
    """Columns of a profile: objects (detail 'full') or CSV lines (detail 'summary')."""

    columns: list[ColumnProfile] | list[str] = Field(
        description="detail 'full': one object per column; 'summary': CSV lines, the header "
        "'name,type,null_pct,unique_count,sample_values,stats' first, then one per column: sample values "
        "joined by ' | ' (only where stats is empty), stats a range 'min..max' or a category's top values "
        "'value count; …' with '(+N more: M rows)' for the rest"
    )
    columns_omitted: int = Field(default=0, exclude_if=_nothing, description="Columns left out to fit the budget")


class ProfileStatistics(BaseModel):
    """Dataset-level statistics."""

    row_count: int
    column_count: int
    memory_estimate: str
    file_size: str
    quality_score: float = Field(description="0..1: mean column completeness, lowered by constant columns")


class ProfileOut(BaseModel):
    """Result of profile_dataset."""

    schema_: ProfileSchema = Field(alias="schema")
    statistics: ProfileStatistics
    recommendations: list[str]
    context_tokens_used: int
    file_path: str
    format: str
    files: int
    cache_hit: bool
    truncated: bool = Field(description="True when details were dropped to fit the token budget")
    cut: Cut | None = CutField

    model_config = {"populate_by_name": True}


# ------------------------------------------------------------------------------------------------ query


class QueryIn(StrictModel):
    """Arguments of execute_query."""

    engine: Literal["polars", "duckdb", "pandas", "auto"] = Field(default="auto", description="Execution engine")
    query_type: Literal["sql", "polars_expr", "python"] = Field(
        default="sql",
        description="Type of query expression (without one: polars_expr for engine polars, python for pandas)",
    )
    query: str = Field(min_length=1, max_length=100_000, description="Query string or expression")
    files: list[str] = Field(
        default_factory=list,
        max_length=50,
        description=(
            "Input files, globs, registered dataset names or query_ids; each becomes a view named after the "
            "dataset name / file stem / query_id (a single input is also the view `data`)"
        ),
    )
    return_limit: int = Field(default=100, ge=1, le=1000, description="Maximum rows to return")
    return_format: Literal["json", "csv", "summary", "chart"] = Field(default="json")
    generate_chart: bool = Field(default=False, description="Add a chart of the whole result (visualization)")
    chart_type: Literal["bar", "line", "scatter", "histogram", "heatmap"] | None = Field(
        default=None, description="Chart type (default bar)"
    )
    chart_format: Literal["png", "vega-lite", "both"] = Field(
        default="png",
        description="PNG (sent as image content), the Vega-Lite spec it is drawn from (inline, fitted to "
        "max_tokens), or both",
    )
    cache_key: str | None = Field(default=None, max_length=200, description="Label for the cached result")
    max_tokens: int | None = MaxTokens
    timeout_ms: int | None = Field(
        default=None, ge=100, le=600_000, description="Lower the server's query time limit for this call"
    )
    project: str | None = ProjectField

    @model_validator(mode="before")
    @classmethod
    def _query_type_of_engine(cls, data: Any) -> Any:
        """Without a query_type (or with null), the one the engine runs: sql for auto/duckdb."""
        if not isinstance(data, dict) or data.get("query_type") is not None:
            return data
        kind = {"polars": "polars_expr", "pandas": "python"}.get(str(data.get("engine")), "sql")
        return {**data, "query_type": kind}


class QuerySummary(BaseModel):
    """Execution facts."""

    rows_processed: int = Field(description="Rows in the full result")
    execution_time_ms: int
    cache_hit: bool
    engine_used: str
    engine_reason: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="With engine 'auto': the engine it chose and the seed's rule that chose it",
    )


def _unset(value: Any) -> bool:
    return value is None


class Visualization(BaseModel):
    """A chart of the result: a Vega-Lite spec and/or the PNG drawn from it. Fields without a value are
    left out of the reply (each costs tokens)."""

    type: str
    data_url: str | None = Field(default=None, exclude_if=_unset)
    base64_image: str | None = Field(default=None, exclude_if=_unset, description="The PNG (MCP: image content)")
    mime_type: str | None = Field(default=None, exclude_if=_unset)
    bytes: int | None = Field(default=None, exclude_if=_unset, description="Size of the PNG")
    vega_lite: dict[str, Any] | None = Field(
        default=None, exclude_if=_unset, description="The Vega-Lite v5 spec the PNG is drawn from, data inline"
    )
    points: int | None = Field(
        default=None, exclude_if=_unset, description="Data points drawn: bars, line values, points, bins or cells"
    )
    source_rows: int | None = Field(
        default=None, exclude_if=_unset, description="Stored rows the chart was computed from (all of them)"
    )
    notes: list[str] | None = Field(
        default=None,
        exclude_if=_unset,
        description="What was done to the data: sampled, binned, bucketed, cut, nulls left out",
    )


class QueryOut(BaseModel):
    """Result of execute_query."""

    result_type: Literal["tabular", "aggregation", "chart", "error"]
    data: list[Any]
    summary: QuerySummary
    columns: list[str]
    column_types: list[str]
    visualization: Visualization | None = None

    mcp_image_fields: ClassVar[tuple[str, ...]] = ("visualization.base64_image",)
    context_tokens_used: int
    query_id: str = Field(
        description="Handle of the full result kept server-side (get_result, export_result, "
        "or a table name in later queries)"
    )
    rows_total: int
    rows_returned: int
    truncated: bool
    degradation: Literal["none", "fewer_rows", "rows_and_summary", "summary_only", "minimal"]
    rest_summary: dict[str, Any] | None = Field(default=None, description="Per-column summary of rows not returned")
    next_offset: int | None = None
    views: list[str] = Field(default_factory=list, description="Table names available to the query")
    cut: Cut | None = CutField
    partial: bool = Field(
        default=False,
        exclude_if=lambda v: not v,
        description="True when the query ran out of time and the result holds only the rows it produced before",
    )
    partial_reason: str | None = Field(
        default=None, exclude_if=lambda v: v is None, description="Why the result is partial, and how to get the rest"
    )


class ResultPageIn(StrictModel):
    """Arguments of get_result."""

    query_id: str = Field(pattern=r"^q_[0-9a-f]{16}$")
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1000)
    max_tokens: int | None = MaxTokens
    project: str | None = ProjectField


class ResultPageOut(BaseModel):
    """A page of a stored result."""

    query_id: str
    columns: list[str]
    rows: list[dict[str, Any]]
    offset: int
    rows_total: int
    rows_stored: int
    next_offset: int | None
    truncated: bool
    context_tokens_used: int
    cut: Cut | None = CutField


# ------------------------------------------------------------------------------------------------ sample


class SampleIn(StrictModel):
    """Arguments of stream_sample."""

    file_path: str = Field(min_length=1, max_length=1000)
    strategy: Literal["head", "random", "stratified", "systematic"] = "random"
    sample_size: int = Field(default=20, ge=1, le=100)
    columns: list[str] | None = Field(default=None, max_length=200, description="Columns to include (null = all)")
    stratify_column: str | None = Field(default=None, max_length=200)
    seed: int = Field(default=42, ge=0, le=2**31 - 1, description="Seed of random/stratified/systematic sampling")
    offset: int = Field(
        default=0,
        ge=0,
        le=99,
        description="Skip this many rows of the sample (the same sample for the same arguments and seed): "
        "the rest of a sample cut to its budget",
    )
    max_tokens: int | None = MaxTokens
    project: str | None = ProjectField


class SamplingInfo(BaseModel):
    """How the sample was drawn."""

    strategy: str
    rows_sampled: int
    total_rows: int | None = Field(description="Rows in the dataset (null for head, which reads no further)")
    columns_included: list[str]
    seed: int
    details: dict[str, Any] = Field(default_factory=dict)


class SampleOut(BaseModel):
    """Result of stream_sample."""

    sample: list[dict[str, Any]]
    sampling_info: SamplingInfo
    context_tokens_used: int
    truncated: bool
    cut: Cut | None = CutField


# ------------------------------------------------------------------------------------------------ export


class ExportIn(StrictModel):
    """Arguments of export_result."""

    query_id: str = Field(pattern=r"^q_[0-9a-f]{16}$")
    format: Literal["csv", "parquet", "json", "xlsx"] = "parquet"
    destination: str = Field(
        min_length=1,
        max_length=1000,
        description="Output directory inside the project's folder (relative to it, created if missing; not uploads/)",
    )
    filename: str | None = Field(
        default=None,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$",
        description="File name with the format's extension (.csv, .csv.gz, .parquet, .json/.jsonl, .xlsx, ...); "
        "with partition_by, a directory name",
    )
    partition_by: str | None = Field(default=None, max_length=200)
    compression: Literal["none", "gzip", "snappy", "zstd"] = Field(
        default="snappy",
        description="snappy (Parquet's; plain for csv/json), or the filename's .gz / .zst when omitted",
    )
    overwrite: bool = Field(default=False, description="Replace an existing regular file of the same format")
    list_files: bool = Field(
        default=False,
        description="List every file written, with its size (at most 100), in place of the pattern of a "
        "partitioned export",
    )
    project: str | None = ProjectField

    @model_validator(mode="before")
    @classmethod
    def _compression_of_name(cls, data: Any) -> Any:
        """Without a compression (or with null), a filename ending in .gz or .zst names it."""
        if not isinstance(data, dict) or data.get("compression") is not None:
            return data
        name = str(data.get("filename") or "").lower()
        named = "gzip" if name.endswith(".gz") else "zstd" if name.endswith(".zst") else None
        return {**data, "compression": named} if named else {k: v for k, v in data.items() if k != "compression"}


class ExportedFile(BaseModel):
    """One written file."""

    path: str = Field(description="Relative to the project's folder")
    size_bytes: int


class ExportOut(BaseModel):
    """Result of export_result: compact (about 50 tokens) however many files were written."""

    exported: bool
    output_path: str = Field(
        description="The file (a partitioned export: the folder) written, relative to the project's folder "
        "(usable as file_path or in files)"
    )
    row_count: int
    file_size: str = Field(description="Total size of the files written")
    files_created: list[str] = Field(
        description="The file written, relative to the project's folder; for a partitioned export only with "
        "list_files (files_pattern matches them all)"
    )
    files_total: int
    files_pattern: str | None = Field(
        default=None,
        exclude_if=_nothing,
        description="A partitioned export: the glob, relative to the project's folder, matching every file "
        "written (usable as file_path or in files)",
    )
    files: list[ExportedFile] | None = Field(
        default=None, exclude_if=_nothing, description="With list_files: each file written and its size"
    )
    cut: Cut | None = CutField


# ------------------------------------------------------------------------------------------------ cache


class InvalidateIn(StrictModel):
    """Arguments of cache_invalidate."""

    pattern: str | None = Field(
        default=None, max_length=200, description="Key, label (cache_key) or query_id pattern (* and ? wildcards)"
    )
    file_path: str | None = Field(default=None, max_length=1000, description="Drop every entry that read this file")
    project: str | None = ProjectField


class InvalidateOut(BaseModel):
    """Result of cache_invalidate."""

    invalidated_count: int
    keys_removed: list[str] = Field(
        description="The dropped entries (at most 50): 'q_… <cache_key or query text>' or 'profile <file_path>'"
    )
    cut: Cut | None = CutField


# ------------------------------------------------------------------------------------------------ registry


class DatasetOut(BaseModel):
    """A registered dataset."""

    name: str
    path: str
    format: str
    size_bytes: int
    description: str
    source: str
    created_at: datetime


class FileOut(BaseModel):
    """A data file inside a root."""

    path: str
    format: str
    size_bytes: int


class ListDatasetsIn(StrictModel):
    """Arguments of list_datasets."""

    limit: int = Field(default=50, ge=1, le=200)
    offset: int = Field(default=0, ge=0)
    include_files: bool = Field(default=True, description="Also list unregistered data files in the roots")
    files_under: str | None = Field(
        default=None,
        max_length=1000,
        description="Only the files under this folder, relative to a root (e.g. an export's 'exports/by_region')",
    )
    project: str | None = ProjectField


class ListDatasetsOut(BaseModel):
    """Registered datasets and data files."""

    datasets: list[DatasetOut]
    total: int
    next_offset: int | None
    project: str = Field(description="The project whose datasets are listed")
    roots: list[str] = Field(description="Readable folders: the project's own folder first, then the shared roots")
    files: list[FileOut]
    files_truncated: bool
    cut: Cut | None = CutField


class RegisterIn(StrictModel):
    """Arguments of register_dataset."""

    name: str = Field(pattern=DATASET_NAME, description="Name usable as file_path and as a SQL view name")
    path: str = Field(min_length=1, max_length=1000, description="File or glob inside a data root")
    description: str = Field(default="", max_length=2000)
    replace: bool = Field(default=False, description="Point an existing name at the new path")
    project: str | None = ProjectField


class RegisterOut(BaseModel):
    """Result of register_dataset and of the upload route."""

    dataset: DatasetOut
    created: bool


class UploadIn(StrictModel):
    """Arguments of upload_dataset, checked before the route reads the body (the query string of
    POST /api/v1/datasets/upload). The form fields come with the body: see `UploadForm`."""

    project: str | None = ProjectField


class UploadForm(StrictModel):
    """The form fields of an upload besides its file, checked once the body is read."""

    name: str = Field(pattern=DATASET_NAME, description="Dataset name (also a SQL view name)")
    description: str = Field(default="", max_length=4096)
    replace: bool = Field(default=False, description="Overwrite an existing dataset of this name")


class UploadOut(RegisterOut):
    """Result of the upload route: the registered dataset and the bytes received."""

    bytes: int
