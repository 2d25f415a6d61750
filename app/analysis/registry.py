"""The upstream registry: which REST APIs exist and how each model is listed, paged and written.

The registry is a YAML file named by `CAIRN_ANALYSIS_UPSTREAMS` (see docs/analysis.md for the
format). It is read at each use, parsed again only when its content changes, and validated
strictly: a typo in the file is reported with its location instead of being ignored.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.analysis.config import get_analysis_settings
from app.core.errors import InvalidInput, NotFound, SchemaError

IDENT = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PaginationCfg(_Strict):
    """How a list endpoint pages.

    - `page`: `page_param` / `per_page_param`; the total item count at `total_path` (optional).
    - `offset`: `offset_param` / `per_page_param` (the limit); total at `total_path` (optional).
    - `cursor`: `cursor_param`; the next cursor (or a next URL) at `next_path` in the body.
    - `link`: follows the `Link: <...>; rel="next"` response header.
    - `none`: one request returns everything.
    """

    style: Literal["page", "offset", "cursor", "link", "none"] = "page"
    page_param: str = "page"
    per_page_param: str = "per_page"
    offset_param: str = "offset"
    cursor_param: str = "cursor"
    start_page: int = 1
    total_path: str | None = "total"
    next_path: str | None = None
    max_per_page: int = Field(default=100, ge=1, le=1000)


class AttributeCfg(_Strict):
    """One attribute of a model, for `describe`."""

    type: Literal["string", "integer", "number", "boolean", "date", "datetime", "array", "object"] = "string"
    description: str = ""
    enum: list[Any] | None = None


class ActionCfg(_Strict):
    """How one record is updated or deleted (`{id}` in the path is the record id)."""

    method: Literal["PATCH", "PUT", "POST", "DELETE"]
    path: str
    body_key: str | None = None

    @field_validator("path")
    @classmethod
    def _has_id(cls, value: str) -> str:
        if "{id}" not in value:
            raise ValueError("an action path must contain {id}")
        return value


class ChildCfg(_Strict):
    """A nested resource listed per parent record (`{parent_id}` in the path)."""

    path: str
    model: str | None = None
    id_field: str = "id"
    items_path: str | None = "data"
    parent_key: str | None = None
    pagination: PaginationCfg = Field(default_factory=PaginationCfg)
    attributes: dict[str, AttributeCfg] = Field(default_factory=dict)
    max_pages_per_parent: int = Field(default=10, ge=1, le=50)

    @field_validator("path")
    @classmethod
    def _has_parent(cls, value: str) -> str:
        if "{parent_id}" not in value:
            raise ValueError("a child path must contain {parent_id}")
        return value


class ModelCfg(_Strict):
    """One model (collection) of an upstream."""

    list_path: str
    description: str = ""
    id_field: str = "id"
    items_path: str | None = "data"
    flatten: bool = True
    pagination: PaginationCfg = Field(default_factory=PaginationCfg)
    filters: dict[str, str] = Field(default_factory=dict)
    attributes: dict[str, AttributeCfg] = Field(default_factory=dict)
    writable: bool = False
    writable_attributes: list[str] | None = None
    update: ActionCfg | None = None
    delete: ActionCfg | None = None
    children: dict[str, ChildCfg] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _writable_needs_actions(self) -> ModelCfg:
        if self.writable and self.update is None and self.delete is None:
            raise ValueError("a writable model needs an update or a delete action")
        return self


class AuthCfg(_Strict):
    """A credential the server sends upstream: a static value or one read from its environment."""

    header: str = "Authorization"
    scheme: str | None = "Bearer"
    value: str | None = None
    value_env: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AuthCfg:
        if (self.value is None) == (self.value_env is None):
            raise ValueError("auth needs exactly one of value or value_env")
        return self

    def header_value(self) -> str:
        """The header value; a missing environment variable is a configuration error."""
        secret = self.value
        if self.value_env is not None:
            secret = os.environ.get(self.value_env)
            if not secret:
                raise SchemaError(f"Upstream credential variable {self.value_env} is not set on the server")
        assert secret is not None
        return f"{self.scheme} {secret}" if self.scheme else secret


class UpstreamCfg(_Strict):
    """One upstream REST API."""

    base_url: str
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    max_retries: int = Field(default=3, ge=0, le=10)
    backoff_seconds: float = Field(default=0.25, ge=0, le=30)
    max_retry_after_seconds: float = Field(default=30.0, ge=0, le=600)
    headers: dict[str, str] = Field(default_factory=dict)
    auth: AuthCfg | None = None
    impersonation_header: str | None = None
    models: dict[str, ModelCfg]

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL")
        return value.rstrip("/")


class RegistryCfg(_Strict):
    """The whole registry file."""

    upstreams: dict[str, UpstreamCfg]

    @model_validator(mode="after")
    def _unique_models(self) -> RegistryCfg:
        seen: dict[str, str] = {}
        for up_name, up in self.upstreams.items():
            for name, model in up.models.items():
                names = [name, *[c.model or c_name for c_name, c in model.children.items()]]
                for n in names:
                    if not IDENT.fullmatch(n):
                        raise ValueError(f"model name {n!r} must match {IDENT.pattern}")
                if name in seen:
                    raise ValueError(f"model {name!r} is declared by both {seen[name]!r} and {up_name!r}")
                seen[name] = up_name
        return self


class ResolvedModel(BaseModel):
    """A model with its upstream."""

    name: str
    upstream_name: str
    upstream: UpstreamCfg
    cfg: ModelCfg


class Registry:
    """The parsed registry with lookups by model name."""

    def __init__(self, cfg: RegistryCfg, source: str) -> None:
        self.cfg = cfg
        self.source = source
        self.models: dict[str, ResolvedModel] = {}
        for up_name, up in cfg.upstreams.items():
            for name, model in up.models.items():
                self.models[name] = ResolvedModel(name=name, upstream_name=up_name, upstream=up, cfg=model)

    def model(self, name: str) -> ResolvedModel:
        """The model called `name`, or a 4002 naming the configured ones."""
        found = self.models.get(name)
        if found is None:
            known = ", ".join(sorted(self.models)) or "(none)"
            raise NotFound(
                f"Unknown model '{name}': not in the upstream registry", suggestions=[f"Configured models: {known}"]
            )
        return found

    def child_model_name(self, parent: str, child: str) -> str | None:
        """The stored model name of a parent's child resource (None if not declared)."""
        pm = self.models.get(parent)
        if pm is None or child not in pm.cfg.children:
            return None
        return pm.cfg.children[child].model or child

    def attributes_of(self, model: str) -> dict[str, AttributeCfg]:
        """Declared attributes of a top-level or child model (empty when unknown)."""
        if model in self.models:
            return self.models[model].cfg.attributes
        for pm in self.models.values():
            for c_name, child in pm.cfg.children.items():
                if (child.model or c_name) == model:
                    return child.attributes
        return {}


_lock = threading.Lock()
_cache: dict[str, Registry] = {}


def parse_registry(text: str, source: str = "<string>") -> Registry:
    """Parse and validate registry YAML."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SchemaError(f"Upstream registry {source} is not valid YAML: {exc}") from None
    try:
        return Registry(RegistryCfg.model_validate(raw), source)
    except ValidationError as exc:
        problems = "; ".join(".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in exc.errors()[:5])
        raise SchemaError(f"Upstream registry {source} is invalid: {problems}") from None


def load_registry(path: Path | None = None) -> Registry:
    """The registry at `path` (default: `CAIRN_ANALYSIS_UPSTREAMS`); the file is small and read at each
    call, and parsed again only when its content changed."""
    path = path or get_analysis_settings().upstreams
    if path is None:
        raise InvalidInput(
            "No upstream registry is configured",
            suggestions=["Set CAIRN_ANALYSIS_UPSTREAMS to a registry YAML file (docs/analysis.md)"],
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise SchemaError(f"Upstream registry file {path} cannot be read") from None
    key = hashlib.sha256(f"{path}\0{text}".encode()).hexdigest()
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    registry = parse_registry(text, str(path))
    with _lock:
        if len(_cache) > 32:
            _cache.clear()
        _cache[key] = registry
    return registry
