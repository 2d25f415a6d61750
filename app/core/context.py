"""What a handler receives: the transaction, the caller, the shared services, progress reporting."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel
from pydantic_settings import BaseSettings
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.db import release_reads
from app.core.embeddings.provider import set_embedding_caller
from app.core.errors import Forbidden, invalid_field
from app.core.schemas import PROJECT_NAME

if TYPE_CHECKING:
    from app.core.config import Settings
    from app.core.db import Database
    from app.core.embeddings.provider import EmbeddingProvider
    from app.core.embeddings.queue import EmbeddingQueue
    from app.core.ratelimit import RateLimiter, Slots
    from app.core.registry import Registry
    from app.core.replicas import Replicas

log = logging.getLogger("cairn.call")
S = TypeVar("S", bound=BaseSettings)
T = TypeVar("T")

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]
# A step that records durably, on a session of its own, what a call did outside the database
RollbackStep = Callable[[AsyncSession], Awaitable[None]]
# A step after a call's commit: given the reply, returns the reply to send (see `CallContext.after_commit`)
CommitHook = Callable[[Any], Awaitable[Any]]
# The write part of a read-only operation: given a primary session and the reply, returns the reply to send
PrimaryStep = Callable[[AsyncSession, Any], Awaitable[Any]]
# Set by the MCP adapter around a call made through a read-only endpoint (`/mcp/graph,readonly`).
read_only_endpoint: ContextVar[bool] = ContextVar("cairn_read_only_endpoint", default=False)

_SCOPE_RANK = {"read": 0, "write": 1, "admin": 2}
_PROJECT_NAME = re.compile(PROJECT_NAME)


@dataclass(frozen=True)
class Principal:
    """The caller: an API key (or the anonymous loopback user in open mode)."""

    key_id: str | None
    name: str
    scopes: frozenset[str]
    project: str | None = None
    # The toolsets plain /mcp lists for this key (None: the server's default)
    toolsets: tuple[str, ...] | None = None

    def has_scope(self, scope: str) -> bool:
        """`admin` implies `write`, which implies `read`."""
        need = _SCOPE_RANK[scope]
        return any(_SCOPE_RANK.get(s, -1) >= need for s in self.scopes)


OPEN_PRINCIPAL = Principal(key_id=None, name="open-mode", scopes=frozenset({"admin"}))


class ToolsetSummary(Protocol):
    """What a call reads of the MCP toolsets (`app.core.toolsets.Catalog`): each one's description."""

    def summary(self) -> list[dict[str, Any]]:
        """Each toolset with its description, tools and endpoint."""
        ...


@dataclass
class AppState:
    """Process-wide services shared by every call."""

    settings: Settings
    db: Database
    embedder: EmbeddingProvider
    registry: Registry
    features: list[str] = field(default_factory=list)
    feature_settings: dict[type[BaseSettings], BaseSettings] = field(default_factory=dict)
    public_settings: dict[str, Any] = field(default_factory=dict)
    limiter: RateLimiter | None = None
    jobs: Slots | None = None
    # Open `GET /mcp` streams per key (None: the HTTP app counts them in its own memory)
    streams: Slots | None = None
    catalog: ToolsetSummary | None = None
    queue: EmbeddingQueue | None = None
    # The read replicas of this process (None: every call runs on the primary)
    replicas: Replicas | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def feature_settings_of(store: dict[type[BaseSettings], BaseSettings], cls: type[S]) -> S:
    """The settings object of class `cls` in `store` (read from the environment and kept there on
    first use when the feature's descriptor did not provide it)."""
    found = store.get(cls)
    if found is None:
        found = store[cls] = cls()
    assert isinstance(found, cls)
    return found


async def _no_progress(done: float, total: float | None, message: str | None) -> None:
    return None


@dataclass
class CallContext:
    """Everything one operation call may use. Handlers never commit: the transport owns the
    transaction and commits only when the handler returns normally."""

    session: AsyncSession
    principal: Principal
    app: AppState
    request_id: str
    transport: str
    progress_fn: ProgressFn = _no_progress
    # The call's validated arguments (None for a resource read or work outside an operation)
    args: BaseModel | None = None
    # Run by the executor after the commit, in order (see `after_commit`)
    commit_hooks: list[CommitHook] = field(default_factory=list)
    # Run by the executor, each in a fresh short transaction, when this call's transaction does not
    # commit (see `on_rollback`)
    rollback_steps: list[RollbackStep] = field(default_factory=list)
    # The write part of a read-only call, run on the primary (see `write_after_read`)
    primary_steps: list[PrimaryStep] = field(default_factory=list)
    # The project the call acts on, once known: a bound key's, or the one `project` resolved
    acting_project: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        # The embedder shares the model between callers in turn (app.core.embeddings.local): this call's
        # texts, and those of the embedding waits it runs after the commit, are its key's.
        self._name_caller(self.principal.project)

    def _name_caller(self, project: str | None) -> None:
        self.acting_project = project
        set_embedding_caller(f"{self.principal.key_id or self.principal.name}/{project or ''}")

    @property
    def settings(self) -> Settings:
        """The effective settings."""
        return self.app.settings

    @property
    def caller_key(self) -> str:
        """Who the per-key limits count this call against: its key, or the open server's one caller."""
        return self.principal.key_id or "open-mode"

    @property
    def embedder(self) -> EmbeddingProvider:
        """The active embedding provider."""
        return self.app.embedder

    @property
    def records_use(self) -> bool:
        """Whether this call may record that it used data in ways that change what every caller sees
        (a graph entity's access count and co-occurrences, which rank later searches): only for a key
        with the write scope, through an endpoint that is not read-only. A read key, or a read-only
        endpoint, must not change the ranking everyone sees."""
        return self.principal.has_scope("write") and not read_only_endpoint.get()

    def feature_settings(self, cls: type[S]) -> S:
        """The settings of a feature, read once when the server (or CLI command) started."""
        return feature_settings_of(self.app.feature_settings, cls)

    async def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress of long work (MCP progress notifications; ignored over REST)."""
        try:
            await self.progress_fn(done, total, message)
        except Exception:  # a client that went away must not fail the work
            log.debug("progress notification failed", exc_info=True)

    async def without_transaction(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run slow work that needs no database (a model) with no transaction open.

        What the call has read so far is released first, and its connection goes back to the pool;
        the call must not have written yet (that raises). Statements after
        it run in a fresh transaction, which the executor commits as usual. Rows read before may have
        changed meanwhile: write with conditions that hold either way."""
        await release_reads(self.session)
        return await work()

    def after_commit(self, hook: CommitHook) -> None:
        """Register `hook(reply)` to run once this call's transaction has committed, before the reply goes
        out; it returns the reply to send (the same one, or a copy with more filled in, such as what the
        embedding queue made meanwhile: `app.core.embeddings.calls`).

        Hooks run in the order they were registered, with no transaction open, and never when the call
        does not commit. A hook that fails is logged and skipped: the call has committed, its reply still
        goes out."""
        self.commit_hooks.append(hook)

    def write_after_read(self, step: PrimaryStep) -> None:
        """Register `step(session, reply)`, the write part of a read-only operation (a search that
        records what it returned): it runs once the handler has returned, on a session of the primary,
        and returns the reply to send (the same one, or a copy with what it wrote filled in).

        When the call runs on the primary, the step runs in the call's own transaction, after the
        handler. When it was served by a read replica (`app.core.replicas`), which refuses every
        write, the executor runs the steps after the read, in one short primary transaction together
        with the call's audit row; if that transaction fails, the call fails. Steps run in order, must
        not read what the handler read through `session` expecting the same snapshot, and never run
        when the handler raised."""
        self.primary_steps.append(step)

    def on_rollback(self, step: RollbackStep) -> None:
        """Register `step(session)` for the case where this call's transaction does not commit.

        A handler whose work has effects outside the database (an upstream that accepted a change)
        writes their record in the call's transaction as usual; when that transaction is rolled back
        instead (the handler raised, the commit failed, or the call was cancelled: the client went
        away or cancelled it), the executor runs each registered step, in order, in a fresh short
        transaction of its own, shielded from the cancellation and bounded in time, so what happened
        outside is still recorded. Steps read their state when they run (register one early and let
        it read a list the work fills), must hold either way (idempotent writes) and never run after a
        commit; a failing step is logged and the others still run."""
        self.rollback_steps.append(step)

    def project(self, requested: str | None, default: str = "default") -> str:
        """The project this call may act on: the requested one, checked against a bound key."""
        bound = self.principal.project
        if requested is None or requested == "":
            self.acting_project = bound or default
            return self.acting_project
        if not _PROJECT_NAME.fullmatch(requested):
            # Every family resolves projects here, so one check covers the names of all of them.
            raise invalid_field(
                "project",
                f"Invalid project name {requested[:80]!r}: letters, digits, '_', '-', '.' "
                "(at most 128, starting with a letter or digit)",
                rule="string_pattern_mismatch",
            )
        if bound is not None and requested != bound:
            raise Forbidden(
                f"This API key is bound to project '{bound}' and cannot use project '{requested}'",
                suggestions=[f"Use project '{bound}' or a key that is not bound to a project"],
            )
        if bound is None:
            self._name_caller(requested)  # an unbound key's calls share the model per project
        return requested

    @property
    def bound_project(self) -> str | None:
        """The project a bound key is limited to, or None for an unbound key."""
        return self.principal.project
