"""One error hierarchy for both transports.

Every failure a caller can see is a `CairnError`. REST answers with its HTTP status and the JSON
body `{"error": {"code", "category", "message", "suggestions"}}` (plus `details` and, for an error
about a query, `query_context` when set); MCP answers with an `isError` tool result whose text is the
same body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    """The error object inside every error response."""

    code: int = Field(description="Stable numeric code, e.g. 4001 invalid input")
    category: str = Field(description="Human-readable category of the code")
    message: str
    suggestions: list[str] = Field(default_factory=list)
    details: dict[str, Any] | None = None
    query_context: str | None = Field(
        default=None, description="Where in the caller's query the error is (query operations only)"
    )


class ErrorBody(BaseModel):
    """The body of every error response."""

    error: ErrorDetail


class CairnError(Exception):
    """Base of every error the server reports to a caller."""

    code: ClassVar[int] = 5000
    category: ClassVar[str] = "Internal Error"
    status: ClassVar[int] = 500
    default_suggestions: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        message: str,
        *,
        suggestions: list[str] | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        query_context: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.suggestions = list(suggestions) if suggestions is not None else list(self.default_suggestions)
        self.details = details
        self.headers = headers or {}
        self.query_context = query_context

    def body(self) -> dict[str, Any]:
        """The JSON body shared by REST and MCP."""
        detail: dict[str, Any] = {
            "code": self.code,
            "category": self.category,
            "message": self.message,
            "suggestions": self.suggestions,
        }
        if self.details:
            detail["details"] = self.details
        if self.query_context is not None:
            detail["query_context"] = self.query_context
        return {"error": detail}


class InvalidInput(CairnError):
    """Malformed arguments: a field breaks its rule, or an unknown field was sent."""

    code, category, status = 4001, "Invalid Input", 400


class NotFound(CairnError):
    """The named thing (project, memory, entity, dataset, file…) does not exist."""

    code, category, status = 4002, "Not Found", 404


class SchemaError(CairnError):
    """The data does not have the shape the request assumes (e.g. an unknown column)."""

    code, category, status = 4003, "Schema Error", 400


class QueryError(CairnError):
    """A query could not be parsed or planned."""

    code, category, status = 4004, "Query Error", 400


class Unauthenticated(CairnError):
    """No valid bearer key was presented."""

    code, category, status = 4010, "Unauthenticated", 401


class Forbidden(CairnError):
    """The key is valid but lacks the scope or project for this call."""

    code, category, status = 4030, "Forbidden", 403


class Conflict(CairnError):
    """The request conflicts with existing state."""

    code, category, status = 4090, "Conflict", 409


class TooLarge(CairnError):
    """The request body or upload exceeds a configured limit."""

    code, category, status = 4130, "Too Large", 413


class RateLimited(CairnError):
    """Too many requests for this key."""

    code, category, status = 4290, "Rate Limited", 429


class EngineError(CairnError):
    """An execution engine (database, DuckDB, ONNX) failed."""

    code, category, status = 5001, "Engine Error", 500


class MemoryLimit(CairnError):
    """The work would exceed a memory limit."""

    code, category, status = 5002, "Memory Error", 507


class Timeout(CairnError):
    """The work exceeded its time limit."""

    code, category, status = 5003, "Timeout", 504


class CacheError(CairnError):
    """A cache operation failed."""

    code, category, status = 5004, "Cache Error", 500


class UpstreamError(CairnError):
    """An upstream service answered with an error or not at all."""

    code, category, status = 5020, "Upstream Error", 502


class Unavailable(CairnError):
    """A dependency (database, embedder) is unreachable right now."""

    code, category, status = 5030, "Unavailable", 503
    default_suggestions = ("Retry shortly; check /readyz",)


class InternalError(CairnError):
    """An unexpected failure; details are in the server log under the request id."""

    code, category, status = 5000, "Internal Error", 500


def invalid_field(
    field: str, message: str, *, rule: str = "invalid", suggestions: list[str] | None = None
) -> InvalidInput:
    """The InvalidInput for one bad argument, in the one detail shape every 4001 uses:
    `details.errors = [{"field", "rule", "message"}]` (`field` is a dotted path, e.g. `filters.year`)."""
    return InvalidInput(
        message,
        suggestions=suggestions,
        details={"errors": [{"field": field, "rule": rule, "message": message}]},
    )


def validation_error(errors: Sequence[Any]) -> InvalidInput:
    """Turn pydantic validation errors into one InvalidInput naming each field and its rule."""
    problems = []
    for err in errors[:20]:
        # Arguments are validated as one model, so every part of `loc` is a field name or an index
        # (a field may well be called `query` or `path`).
        loc = ".".join(str(p) for p in err.get("loc", ()))
        kind = err.get("type", "invalid")
        msg = err.get("msg", "invalid value")
        if kind == "extra_forbidden":
            msg = "unknown field (not accepted by this operation)"
        problems.append({"field": loc or "(root)", "rule": kind, "message": msg})
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return InvalidInput(
        f"Invalid arguments: {summary}",
        suggestions=["Check the operation's input schema (tools/list or /openapi.json)"],
        details={"errors": problems},
    )
