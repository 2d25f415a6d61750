"""Input and output models of the core operations and resources."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


def _bad_text(value: Any, path: str) -> str | None:
    """The path of the first string holding a NUL or an unpaired surrogate (PostgreSQL stores neither)."""
    if isinstance(value, str):
        if "\x00" in value:
            return path
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _bad_text(key, path) or _bad_text(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = _bad_text(item, f"{path}[{i}]")
            if found:
                return found
    return None


class StrictModel(BaseModel):
    """Base of every input model: unknown fields are refused, strings are trimmed, and text that no
    database can store (NUL characters, unpaired surrogates) is refused with the field named."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        where = _bad_text(data, "")
        if where is not None:
            raise ValueError(f"'{where or 'input'}' contains a NUL character or invalid Unicode")
        return data


class Empty(StrictModel):
    """No arguments."""


PROJECT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"


class ProjectOut(BaseModel):
    """A project."""

    id: str
    name: str
    description: str
    created_at: datetime


class CreateProjectIn(StrictModel):
    """Arguments of create_project."""

    name: str = Field(pattern=PROJECT_NAME, description="Project name: letters, digits, '_', '-', '.'")
    description: str = Field(default="", max_length=2000)


class CreateProjectOut(BaseModel):
    """Result of create_project."""

    project: ProjectOut
    created: bool = Field(description="False when a project with this name already existed")


class ListProjectsIn(StrictModel):
    """Arguments of list_projects."""

    limit: int = Field(default=50, ge=1, le=200)
    offset: int = Field(default=0, ge=0, le=1_000_000)


class ListProjectsOut(BaseModel):
    """A page of projects."""

    projects: list[ProjectOut]
    total: int
    next_offset: int | None = None


class EmbedIn(StrictModel):
    """Arguments of embed."""

    text: str = Field(min_length=1, max_length=20_000)


class EmbedOut(BaseModel):
    """A compact summary of one embedding (never the full vector)."""

    model: str
    provider: str
    dimension: int
    norm: float
    head: list[float] = Field(description="First 8 components, rounded")
    tokens: int = Field(description="Tokens counted by the embedding tokenizer (before truncation)")
    truncated: bool


class EmbeddingPending(BaseModel):
    """`embedding` of a write whose vectors wait while the embedding provider fails (or refused some of
    this call's texts): the error, since when, and how many texts wait."""

    status: Literal["pending"] = "pending"
    provider_error: str = Field(description="The provider's last error (this call's own, when it has one)")
    failing_since: datetime | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="When the provider began failing, as this server saw it (absent: it answers other texts)",
    )
    waiting: int = Field(description="Texts waiting for a vector of the active model, this call's included")
    failed: int = Field(description="Of those, how many failed at their last try (retried with a growing delay)")


EmbeddingState = Literal["done", "pending"] | EmbeddingPending
EMBEDDING_STATE_DESCRIPTION = (
    "done: this call's vectors are stored; pending: queued, made shortly (text search finds the rows meanwhile); "
    "while the embedding provider fails, an object {status: pending, provider_error, failing_since, waiting, failed}"
)


def wait_for_embedding_field() -> Any:
    """The per-call `wait_for_embedding` option of every write that makes vectors."""
    return Field(
        default=None,
        description="Wait (bounded) until this call's vectors are stored before answering "
        "(default: the server's CAIRN_EMBEDDING_WRITE_MODE)",
    )


class QueueInfo(BaseModel):
    """The embedding queue of the active model."""

    depth: int = Field(description="Rows waiting for a vector")
    oldest_seconds: float | None = Field(default=None, description="Age of the oldest waiting row")
    retrying: int = Field(default=0, description="Waiting rows whose last try failed")


class WaitForEmbeddingsIn(StrictModel):
    """Arguments of wait_for_embeddings."""

    timeout_seconds: float = Field(default=60.0, gt=0, le=3600, description="Longest wait")


class WaitForEmbeddingsOut(BaseModel):
    """The queue when the wait ended."""

    model: str
    drained: bool = Field(description="True when no row waits for a vector of the active model")
    depth: int
    waited_ms: float


class EmbeddingInfo(BaseModel):
    """Embedding configuration."""

    provider: str
    model: str
    dimension: int
    loaded: bool


class DatabaseInfo(BaseModel):
    """Database reachability."""

    reachable: bool
    embedded: bool
    migrations_at_head: bool | None = None


class HealthOut(BaseModel):
    """The mcp://health resource."""

    status: str
    version: str
    embedding: EmbeddingInfo
    embedding_queue: QueueInfo | None = None
    database: DatabaseInfo
    features: list[str]


class SettingsOut(BaseModel):
    """The mcp://settings resource: enabled features, the embedding model, and one section per
    setting group an enabled feature publishes (e.g. `search` defaults)."""

    model_config = ConfigDict(extra="allow")

    features: list[str]
    embedding: EmbeddingInfo


class ToolsetInfo(BaseModel):
    """One toolset: where to connect and what it lists."""

    name: str
    endpoint: str
    description: str
    tools: list[str]
    default: bool = Field(description="Listed by plain /mcp when neither the URL nor the key chooses")


class ToolsetsOut(BaseModel):
    """The mcp://toolsets resource."""

    toolsets: list[ToolsetInfo]
    hint: str


class AuditLogIn(StrictModel):
    """Arguments of audit_log."""

    key_id: str | None = Field(default=None, max_length=64)
    operation: str | None = Field(default=None, max_length=64)
    project: str | None = Field(default=None, max_length=128)
    since: datetime | None = None
    before_id: int | None = Field(default=None, ge=1, le=2**63 - 1, description="Page backwards from this entry id")
    limit: int = Field(default=50, ge=1, le=200)


class AuditEntryOut(BaseModel):
    """One audit entry."""

    id: int
    at: datetime
    key_id: str | None
    key_name: str | None
    operation: str
    transport: str
    project: str | None
    outcome: str
    error_code: int | None
    counts: dict[str, int | bool]
    request_id: str | None


class AuditLogOut(BaseModel):
    """A page of the audit log, newest first."""

    entries: list[AuditEntryOut]
    next_before_id: int | None = None


class KeyOut(BaseModel):
    """An API key as listed: never the key itself, only its id and display prefix."""

    id: str
    name: str
    prefix: str
    scopes: list[str]
    project: str | None
    toolsets: list[str] | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class ListKeysIn(StrictModel):
    """Arguments of list_keys."""

    include_revoked: bool = Field(default=False, description="Also list revoked keys")


class ListKeysOut(BaseModel):
    """Stored keys, newest first (static keys from CAIRN_API_KEYS are not listed)."""

    keys: list[KeyOut]


class CreateKeyIn(StrictModel):
    """Arguments of create_key."""

    name: str = Field(default="", max_length=128, description="A label shown in listings")
    scopes: list[Literal["read", "write", "admin"]] = Field(min_length=1, max_length=3)
    project: str | None = Field(
        default=None, pattern=PROJECT_NAME, description="Bind the key to this project (a bound caller's own)"
    )
    toolsets: list[str] | None = Field(
        default=None, max_length=20, description="What plain /mcp lists for the key (default: the server's)"
    )


class CreateKeyOut(BaseModel):
    """The new key: `token` is shown this once and never stored."""

    key: KeyOut
    token: str


class RevokeKeyIn(StrictModel):
    """Arguments of revoke_key."""

    key_id: str = Field(min_length=1, max_length=64, description="The key's id or display prefix")


class RevokeKeyOut(BaseModel):
    """How many keys were revoked (0 or 1)."""

    revoked: int
