"""Settings: every knob of the server, read from `CAIRN_*` environment variables (or a `.env` file)."""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import platformdirs
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _split_list(value: object) -> object:
    """Accept comma-separated strings for list settings (env vars are flat)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Effective configuration. See docs/configuration.md for the meaning of each field."""

    model_config = SettingsConfigDict(env_prefix="CAIRN_", env_file=".env", extra="ignore")

    # Network
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = None
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_body_bytes: int = 4 * 1024 * 1024
    # An idle client connection is closed after this; longer than the idle timeouts of clients and
    # proxies (httpx 5 s, nginx and load balancers 60 s), so the client side always closes first and
    # never sends a request on a connection the server is closing at that moment
    http_keep_alive_seconds: int = Field(default=75, ge=1, le=3600)
    # Server processes of `cairn serve` on this host (uvicorn workers sharing one embedded PostgreSQL)
    workers: int = Field(default=1, ge=1, le=64)

    # Storage
    database_url: str | None = None
    data_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("cairn")))
    db_pool_size: int = 10
    db_max_overflow: int = 10
    db_pool_timeout: float = 10.0
    # Pooled connections older than this are replaced at checkout (there is no pre-ping); -1 = never
    db_pool_recycle_seconds: int = Field(default=1800, ge=-1)
    db_statement_timeout_ms: int = 30_000
    # A pooler in transaction mode (PgBouncer) between the server and PostgreSQL: no prepared statement
    # outlives its transaction and statement_timeout is set per transaction (docs/configuration.md)
    database_pooler: Literal["none", "transaction"] = "none"
    # Where migrations and backups connect, bypassing the pooler; unset = database_url
    database_direct_url: str | None = None
    migrate_on_start: bool = True
    # Streaming replicas (URLs like database_url) that serve read-only operations; docs/architecture.md
    database_replica_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # A replica not known to have replayed the primary's WAL of this many seconds ago serves no read
    database_replica_max_lag_seconds: float = Field(default=2.0, gt=0, le=3600)
    # How often each process probes the replicas' replay position
    database_replica_probe_seconds: float = Field(default=0.5, gt=0, le=60)

    # Features: names of the enabled families, or "all" (the entry checks the names)
    features: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["all"])

    # Auth
    api_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    key_cache_seconds: float = 5.0
    # How often the stored keys' last-use times are written (in one statement, off the call path)
    key_usage_flush_seconds: float = Field(default=30.0, gt=0, le=3600)

    # Limits
    rate_limit_per_second: float = 50.0
    rate_limit_burst: int = 200
    audit_enabled: bool = True
    max_long_jobs_per_key: int = 2
    # Failed authentications (unknown or revoked key) per client address per minute; 0 = no limit
    auth_failure_limit: int = Field(default=20, ge=0)
    # Open `GET /mcp` event streams per key at once; 0 = no limit
    max_sse_streams_per_key: int = Field(default=4, ge=0)

    # Embeddings
    embedding_provider: Literal["local", "openai", "ollama"] = "local"
    embedding_model: str | None = None
    embedding_dimension: int | None = None
    embedding_base_url: str | None = None
    embedding_api_key: str | None = None
    embedding_model_path: str | None = None
    embedding_tokenizer_path: str | None = None
    embedding_workers: int = 1
    embedding_max_batch: int = 32
    embedding_max_wait_ms: float = 5.0
    embedding_max_length: int = 256
    embedding_timeout: float = 30.0
    # How much lower the scheduling priority of the queue's background batches is (Linux, 0-19).
    embedding_background_nice: int = Field(default=10, ge=0, le=19)
    # The embedding queue: writes commit their text and a queue row; workers in the server make the vectors.
    # `sync` makes every write wait (bounded by embedding_wait_seconds) for its own vectors.
    embedding_write_mode: Literal["async", "sync"] = "async"
    embedding_wait_seconds: float = Field(default=10.0, gt=0, le=600)
    embedding_queue_workers: int = Field(default=2, ge=0, le=16)
    embedding_queue_batch: int = Field(default=64, ge=1, le=1024)
    embedding_queue_lease_seconds: float = Field(default=60.0, gt=0)
    embedding_queue_poll_seconds: float = Field(default=1.0, gt=0)
    embedding_queue_retry_max_seconds: float = Field(default=30.0, gt=0)
    # While this process answers calls, its workers hold back for at most this long (counted from the
    # oldest due row's enqueue time): a burst of writes is not slowed by the model sharing its cores.
    embedding_queue_defer_seconds: float = Field(default=10.0, ge=0, le=3600)
    # Rows a key may have waiting in the queue: its further writes that queue vectors answer 4290
    # until the workers bring it under; 0 = no cap
    embedding_max_pending_per_key: int = Field(default=100_000, ge=0)

    # MCP
    # `auto`: one JSON body unless the request may stream progress (then SSE); true: always JSON; false: always SSE
    mcp_json_response: Literal["auto"] | bool = "auto"
    # What plain /mcp lists when neither the URL nor the key chooses (toolset names, `all`, `readonly`);
    # empty: the toolsets the features mark as default
    mcp_toolsets: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Advertise output schemas on every tool (compatibility toolsets always do)
    mcp_output_schemas: bool = False

    # Logging
    log_level: str = "INFO"
    # auto: readable text lines on a terminal, JSON lines otherwise (files, containers, collectors)
    log_format: Literal["auto", "json", "text"] = "auto"

    @field_validator(
        "allowed_hosts",
        "allowed_origins",
        "features",
        "api_keys",
        "mcp_toolsets",
        "database_replica_urls",
        mode="before",
    )
    @classmethod
    def _lists(cls, value: object) -> object:
        return _split_list(value)

    def is_loopback(self) -> bool:
        """True when the server binds only to a loopback address."""
        if self.host in ("localhost",):
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def direct_url(self, url: str) -> str:
        """Where session-bound work (migrations, backup, restore) connects: `database_direct_url` when
        a database URL is configured, else `url` (the configured or embedded database)."""
        return self.database_direct_url if self.database_url and self.database_direct_url else url

    def resource_url(self) -> str:
        """The public URL of the MCP endpoint (RFC 9728 resource identifier)."""
        base = self.public_url or f"http://{self.host}:{self.port}"
        return base.rstrip("/") + "/mcp"

    def effective_allowed_hosts(self) -> list[str]:
        """Host headers accepted by the MCP endpoint (DNS-rebinding protection)."""
        hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost"]
        if not self.is_loopback() and self.host not in ("0.0.0.0", "::"):
            hosts += [self.host, f"{self.host}:*"]
        return hosts + self.allowed_hosts

    def effective_allowed_origins(self) -> list[str]:
        """Origin headers accepted by the MCP endpoint (DNS-rebinding protection)."""
        origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
        return origins + self.allowed_origins


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
