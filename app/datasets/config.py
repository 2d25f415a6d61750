"""Settings of the datasets feature, read from `CAIRN_*` environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class DatasetSettings(BaseSettings):
    """Knobs of the analytics tools. `data_roots` empty means `<CAIRN_DATA_DIR>/datasets`."""

    model_config = SettingsConfigDict(env_prefix="CAIRN_", env_file=".env", extra="ignore")

    # Where datasets may be read from and exported to (comma-separated list of directories).
    data_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # Where query results and the disk cache live (default `<CAIRN_DATA_DIR>/datasets-work`).
    datasets_work_dir: Path | None = None
    # Each project's private folder (uploads, exports) lives under this directory, outside the shared
    # data roots (default `<CAIRN_DATA_DIR>/datasets-projects`).
    datasets_projects_dir: Path | None = None
    # A store shared by every host of a fleet for the datasets files (uploads, stored results, exports,
    # cache entries): `s3://bucket/prefix` on any S3-compatible store, reached with the standard
    # AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION variables. Unset: the
    # local folders above (see app/datasets/storage.py).
    object_store_url: str | None = None
    # The host's local copies of objects read from that store (default `<CAIRN_DATA_DIR>/datasets-objects`),
    # least recently used first out past the cap.
    datasets_object_cache_dir: Path | None = None
    datasets_object_cache_max_bytes: int = Field(default=4 * 1024 * 1024 * 1024, ge=0)

    # DuckDB resource limits.
    datasets_memory_limit: str = "2GB"
    datasets_threads: int = 2
    datasets_query_timeout_ms: int = 30_000
    # DuckDB calls running at once in this process (each may use memory_limit); others wait their turn.
    datasets_max_concurrency: int = 2
    # Most columns a CSV file may have (counted on its first line); a wider one is refused with 4003.
    datasets_max_columns: int = Field(default=10_000, ge=1)

    # Token budget of one response (counted with the all-MiniLM-L6-v2 WordPiece tokenizer).
    datasets_max_tokens: int = 2000
    datasets_max_tokens_cap: int = 20_000
    # Default budget of a profile (seed 002: about 200-400 tokens); never above datasets_max_tokens.
    datasets_profile_max_tokens: int = Field(default=400, ge=50)

    # Results kept server-side under a query_id.
    datasets_result_max_rows: int = 1_000_000
    datasets_result_ttl_seconds: int = 24 * 3600

    # Cache of query results and profiles.
    datasets_cache_ttl_seconds: int = 3600
    datasets_cache_max_bytes: int = 1024 * 1024 * 1024
    datasets_cache_memory_entries: int = 256

    # Upload route.
    datasets_upload_max_bytes: int = 1024 * 1024 * 1024

    # The python/pandas engine runs arbitrary code: off unless an operator turns it on.
    datasets_python_enabled: bool = False
    datasets_python_cpu_seconds: int = 30
    datasets_python_memory_mb: int = 1024

    # Charts.
    datasets_chart_max_bytes: int = 48_000

    # DuckDB worker processes (one per engine slot, see app/datasets/engine/pool.py): the resident-memory cap
    # of each (MB; 0 = the DuckDB memory limit + 1024) and the slots one API key may hold at once (0 =
    # half of them, rounded up).
    datasets_worker_memory_mb: int = 0
    datasets_max_concurrency_per_key: int = 0
    # Extra slots (and workers) for callers holding none while the others are taken, so that a short call
    # never waits for other callers' long ones (at most as many as CAIRN_DATASETS_MAX_CONCURRENCY).
    datasets_burst_slots: int = Field(default=2, ge=0)
    # A DuckDB call still running after this many milliseconds runs at a niceness this much lower
    # (Linux, 0-19; 0 = never), so that other callers' short calls get the CPU first on a busy host.
    datasets_long_call_ms: int = Field(default=100, ge=0)
    datasets_long_call_nice: int = Field(default=19, ge=0, le=19)
    # ... and kept off one core while other calls are being answered (app.core.embeddings.cpus).
    datasets_long_call_confine: bool = True

    @field_validator("object_store_url", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, str) and (not value.startswith("s3://") or not value[5:].split("/", 1)[0]):
            raise ValueError("CAIRN_OBJECT_STORE_URL must look like s3://bucket/prefix")
        return value

    @field_validator("data_roots", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            sep = "," if "," in value else ":"
            return [part.strip() for part in value.split(sep) if part.strip()]
        return value


@lru_cache(maxsize=1)
def get_dataset_settings() -> DatasetSettings:
    """The process-wide dataset settings, read once, for the DuckDB engine's modules (the worker pool's
    shape), which have no call context; the services read `ctx.feature_settings(DatasetSettings)`."""
    return DatasetSettings()


def data_roots(data_dir: Path, cfg: DatasetSettings) -> list[Path]:
    """The effective data roots (created if missing), resolved to real absolute paths."""
    roots = cfg.data_roots or [data_dir / "datasets"]
    out: list[Path] = []
    for root in roots:
        path = Path(root).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        real = path.resolve()
        if real not in out:
            out.append(real)
    return out


def projects_dir(data_dir: Path, cfg: DatasetSettings) -> Path:
    """The directory holding one private folder per project (created if missing), resolved."""
    path = (cfg.datasets_projects_dir or data_dir / "datasets-projects").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def work_dir(data_dir: Path, cfg: DatasetSettings) -> Path:
    """The directory holding stored results and the disk cache (created if missing), resolved."""
    path = (cfg.datasets_work_dir or data_dir / "datasets-work").expanduser()
    (path / "results").mkdir(parents=True, exist_ok=True)
    (path / "cache").mkdir(parents=True, exist_ok=True)
    (path / "tmp").mkdir(parents=True, exist_ok=True)
    return path.resolve()


def object_cache_dir(data_dir: Path, cfg: DatasetSettings) -> Path:
    """The directory of the local copies of the object store's files (created if missing), resolved."""
    path = (cfg.datasets_object_cache_dir or data_dir / "datasets-objects").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()
