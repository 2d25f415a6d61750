"""The upstream catalog: the upstream registry file parsed, i.e. which REST APIs exist and how each
model is listed, paged and written.

The registry is a YAML file named by `CAIRN_ANALYSIS_UPSTREAMS` (see docs/analysis.md for the
format). It is read at each use, parsed again only when its content changes, and validated
strictly: a typo in the file is reported with its location instead of being ignored.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.core.errors import InvalidInput, NotFound, SchemaError

IDENT = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
log = logging.getLogger("cairn.analysis.catalog")
# A credential file larger than this is not a credential (auth.value_file).
MAX_CREDENTIAL_BYTES = 64 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PaginationCfg(_Strict):
    """How a list endpoint pages.

    - `page`: `page_param` / `per_page_param`; the total item count at `total_path` (optional).
    - `offset`: `offset_param` / `per_page_param` (the limit); total at `total_path` (optional).
    - `cursor`: `cursor_param`; the next cursor (or a next URL) at `next_path` in the body.
    - `link`: follows the `Link: <...>; rel="next"` response header.
    - `none`: one request returns everything.

    `has_more_path` names a boolean in the body that says whether another page follows (page, offset
    and cursor styles). Without it or a total, a page shorter than asked for does not end a page or
    offset listing (upstreams cap page sizes silently): only an empty page does.
    """

    style: Literal["page", "offset", "cursor", "link", "none"] = "page"
    page_param: str = "page"
    per_page_param: str = "per_page"
    offset_param: str = "offset"
    cursor_param: str = "cursor"
    start_page: int = 1
    total_path: str | None = "total"
    next_path: str | None = None
    has_more_path: str | None = None
    max_per_page: int = Field(default=100, ge=1, le=1000)


class AttributeCfg(_Strict):
    """One attribute of a model (its stored name): its type for `describe`, and for dates how the upstream
    writes them. `format: epoch_seconds` or `epoch_millis` values are stored as ISO 8601 UTC text, so that
    date filters, proximity and summaries compare like with like."""

    type: Literal["string", "integer", "number", "boolean", "date", "datetime", "array", "object"] = "string"
    description: str = ""
    enum: list[Any] | None = None
    format: Literal["iso", "epoch_seconds", "epoch_millis"] | None = None

    @model_validator(mode="after")
    def _dates_only(self) -> AttributeCfg:
        if self.format is not None and self.type not in ("date", "datetime"):
            raise ValueError("format applies to date and datetime attributes only")
        return self


class _Shaped(_Strict):
    """How upstream records become stored rows (see docs/analysis.md, "Field names").

    - `flatten_depth`: nested objects are flattened this many levels (`requester.org.tier` becomes
      `requester_org_tier` at depth 2); deeper objects are stored whole. 0 keeps records as they are.
    - `rename`: upstream key paths (dotted, as in the record: `custom_fields.sla-tier`) to stored names.
    - any other key becomes a queryable name: every run of characters other than letters, digits and
      `_` turns into one `_`, a name starting with a digit gets an `f_` prefix, and a name already taken
      gets `_2`, `_3`...
    """

    flatten_depth: int = Field(default=1, ge=0, le=8)
    rename: dict[str, str] = Field(default_factory=dict)
    attributes: dict[str, AttributeCfg] = Field(default_factory=dict)

    @field_validator("rename")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for source, name in value.items():
            if not IDENT.fullmatch(name) or len(name) > 64:
                raise ValueError(f"rename target {name!r} (of {source!r}) must match {IDENT.pattern}")
        return value


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


class ChildCfg(_Shaped):
    """A nested resource listed per parent record (`{parent_id}` in the path).

    Its write settings are those of a model; an action path may also name `{parent_id}`, filled from
    the stored record's parent key."""

    path: str
    model: str | None = None
    id_field: str = "id"
    items_path: str | None = "data"
    parent_key: str | None = None
    pagination: PaginationCfg = Field(default_factory=PaginationCfg)
    max_pages_per_parent: int = Field(default=10, ge=1, le=50)
    writable: bool = False
    writable_attributes: list[str] | None = None
    update: ActionCfg | None = None
    delete: ActionCfg | None = None

    @field_validator("path")
    @classmethod
    def _has_parent(cls, value: str) -> str:
        if "{parent_id}" not in value:
            raise ValueError("a child path must contain {parent_id}")
        return value

    @model_validator(mode="after")
    def _writable_needs_actions(self) -> ChildCfg:
        if self.writable and self.update is None and self.delete is None:
            raise ValueError("a writable model needs an update or a delete action")
        return self


class ModelCfg(_Shaped):
    """One model (collection) of an upstream. `flatten: false` is `flatten_depth: 0`."""

    list_path: str
    description: str = ""
    id_field: str = "id"
    items_path: str | None = "data"
    flatten: bool = True
    pagination: PaginationCfg = Field(default_factory=PaginationCfg)
    filters: dict[str, str] = Field(default_factory=dict)
    writable: bool = False
    writable_attributes: list[str] | None = None
    update: ActionCfg | None = None
    delete: ActionCfg | None = None
    children: dict[str, ChildCfg] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _writable_needs_actions(self) -> ModelCfg:
        if self.writable and self.update is None and self.delete is None:
            raise ValueError("a writable model needs an update or a delete action")
        if not self.flatten:
            self.flatten_depth = 0
        return self


class AuthCfg(_Strict):
    """A credential the server sends upstream: a static value, one read from the server's environment
    (`value_env`, fixed when the server started) or one read from a file at each call (`value_file`,
    e.g. a mounted secret that is rotated while the server runs)."""

    header: str = "Authorization"
    scheme: str | None = "Bearer"
    value: str | None = None
    value_env: str | None = None
    value_file: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AuthCfg:
        if sum(source is not None for source in (self.value, self.value_env, self.value_file)) != 1:
            raise ValueError("auth needs exactly one of value, value_env or value_file")
        return self

    def header_value(self) -> str:
        """The header value, resolved now (the upstream client is built once per call, so a
        `value_file` is read at each call); a missing or unreadable source is a configuration error
        whose message names neither the file's path nor its content (the path is logged)."""
        secret = self.value
        if self.value_env is not None:
            secret = os.environ.get(self.value_env)
            if not secret:
                raise SchemaError(f"Upstream credential variable {self.value_env} is not set on the server")
        if self.value_file is not None:
            secret = self._read_file(self.value_file)
        assert secret is not None
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in secret):
            raise SchemaError("The upstream credential contains characters an HTTP header cannot carry")
        return f"{self.scheme} {secret}" if self.scheme else secret

    @staticmethod
    def _read_file(path: str) -> str:
        """The credential in the file at `path`, without surrounding whitespace."""
        problem = "cannot be read"
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_CREDENTIAL_BYTES + 1)
            if len(raw) > MAX_CREDENTIAL_BYTES:
                problem = f"is larger than {MAX_CREDENTIAL_BYTES} bytes"
            else:
                secret = raw.decode("utf-8").strip()
                if secret:
                    return secret
                problem = "is empty"
        except (OSError, UnicodeDecodeError) as exc:
            problem = f"cannot be read ({type(exc).__name__})"
        log.warning("upstream credential file %s %s", path, problem)
        raise SchemaError(
            f"The upstream credential file (auth.value_file) {problem} on the server",
            suggestions=["The server log names the file; check that it exists and is readable by the server"],
        )


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


class UpstreamsCfg(_Strict):
    """The whole registry file."""

    upstreams: dict[str, UpstreamCfg]

    @model_validator(mode="after")
    def _unique_models(self) -> UpstreamsCfg:
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


class WritableModel(BaseModel):
    """A top-level or child model with its upstream and write settings (`UpstreamCatalog.writable_model`).
    For a child, `parent_key` is the stored field holding its parent's id (`{parent_id}` in a path)."""

    name: str
    upstream_name: str
    upstream: UpstreamCfg
    cfg: ModelCfg | ChildCfg
    parent_model: str | None = None
    parent_key: str | None = None


class UpstreamCatalog:
    """The parsed upstream registry, with lookups by model name."""

    def __init__(self, cfg: UpstreamsCfg, source: str) -> None:
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

    def writable_model(self, name: str) -> WritableModel:
        """The model called `name` that `analysis_act` may write: a top-level model, else a child
        model (its `model` name, or its resource name when it has none). A 4002 names the configured
        models when there is none; whether it is writable is the caller's check."""
        found = self.models.get(name)
        if found is not None:
            return WritableModel(name=name, upstream_name=found.upstream_name, upstream=found.upstream, cfg=found.cfg)
        for pm in self.models.values():
            for c_name, child in pm.cfg.children.items():
                if (child.model or c_name) == name:
                    return WritableModel(
                        name=name,
                        upstream_name=pm.upstream_name,
                        upstream=pm.upstream,
                        cfg=child,
                        parent_model=pm.name,
                        parent_key=child.parent_key or f"{pm.name}_id",
                    )
        children = [c.model or c_name for pm in self.models.values() for c_name, c in pm.cfg.children.items()]
        known = ", ".join(sorted(self.models)) or "(none)"
        suggestions = [f"Configured models: {known}"]
        if children:
            suggestions.append(f"Child models: {', '.join(sorted(children))}")
        raise NotFound(f"Unknown model '{name}': not in the upstream registry", suggestions=suggestions)

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
_cache: dict[str, UpstreamCatalog] = {}


def parse_catalog(text: str, source: str = "<string>") -> UpstreamCatalog:
    """Parse and validate registry YAML. Errors say what is wrong and where in the document, never
    `source` (a path on the server): that goes to the server log."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "unreadable"
        log.warning("upstream registry %s is not valid YAML: %s", source, exc)
        raise SchemaError(f"The upstream registry is not valid YAML{where}: {problem}") from None
    try:
        return UpstreamCatalog(UpstreamsCfg.model_validate(raw), source)
    except ValidationError as exc:
        problems = "; ".join(".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in exc.errors()[:5])
        log.warning("upstream registry %s is invalid: %s", source, problems)
        raise SchemaError(f"The upstream registry is invalid: {problems}") from None


def load_catalog(path: Path | None) -> UpstreamCatalog:
    """The catalog of the registry file at `path` (`CAIRN_ANALYSIS_UPSTREAMS`; None: not configured);
    the file is small and read at each call, and parsed again only when its content changed."""
    if path is None:
        raise InvalidInput(
            "No upstream registry is configured",
            suggestions=["Set CAIRN_ANALYSIS_UPSTREAMS to a registry YAML file (docs/analysis.md)"],
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("upstream registry file %s cannot be read: %s", path, type(exc).__name__)
        raise SchemaError(
            f"The upstream registry file (CAIRN_ANALYSIS_UPSTREAMS) cannot be read ({type(exc).__name__})",
            suggestions=["The server log names the file; check that it exists and is readable by the server"],
        ) from None
    key = hashlib.sha256(f"{path}\0{text}".encode()).hexdigest()
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    catalog = parse_catalog(text, str(path))
    with _lock:
        if len(_cache) > 32:
            _cache.clear()
        _cache[key] = catalog
    return catalog
