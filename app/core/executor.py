"""The one path every call takes, whichever transport it came from.

count the call in (`app.core.embeddings.load.LOAD`) -> (a long-running call: start claiming its job
slot, `app.core.job_slot`) -> validate arguments -> check scope -> open a transaction -> run the handler
(beside the claim) -> commit (or roll back, then run the rollback steps) -> run the after-commit hooks
-> count and log. Failures come out as `CairnError`s with the shared error body.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from app.core.context import AppState, CallContext, Principal, ProgressFn, _no_progress
from app.core.db import is_conflict, is_connection_error, outage, sqlstate
from app.core.embeddings.load import LOAD
from app.core.embeddings.provider import EmbeddingUnavailable
from app.core.errors import (
    CairnError,
    Conflict,
    Forbidden,
    InternalError,
    InvalidInput,
    MemoryLimit,
    RateLimited,
    Timeout,
    Unavailable,
    validation_error,
)
from app.core.job_slot import JobSlot
from app.core.logs import request_id_var
from app.core.metrics import CALLS, ERRORS, LATENCY
from app.core.models import AuditEntry
from app.core.registry import Operation, ResourceDef
from app.core.replicas import Replica
from app.core.repository import AuditRepository

log = logging.getLogger("cairn.call")
R = TypeVar("R", bound=BaseModel)


def validate_args(model: type[BaseModel], raw: Any) -> BaseModel:
    """Parse raw arguments with the operation's input model (unknown fields are refused)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidInput("Arguments must be a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None
    except (TypeError, ValueError) as exc:  # a constraint applied to a value of the wrong kind (e.g. None)
        raise InvalidInput(
            f"Invalid arguments: {str(exc)[:300]}",
            suggestions=["Check the operation's input schema (tools/list or /openapi.json)"],
        ) from None


def _from_sqlstate(exc: DBAPIError) -> CairnError | None:
    """Database errors a caller can act on, by SQLSTATE class; others stay internal errors."""
    state = sqlstate(exc)
    if state == "57014":
        return Timeout("The statement exceeded its time limit and was cancelled; no change was made")
    if state.startswith("22"):
        return InvalidInput(
            "A value is outside what the database accepts (too large, malformed or out of range); no change was made"
        )
    if state.startswith("23"):
        return Conflict(
            "The change conflicts with existing data (a concurrent or duplicate write); no change was made",
            suggestions=["Retry the call"],
        )
    if state.startswith("53"):
        return MemoryLimit("The database ran out of resources for this request; no change was made")
    return None


def translate(exc: BaseException, name: str) -> CairnError:
    """Map any exception to the error a caller sees; unexpected ones are logged, not exposed."""
    if isinstance(exc, CairnError):
        return exc
    if isinstance(exc, ValidationError):
        return validation_error(exc.errors(include_url=False))
    if isinstance(exc, EmbeddingUnavailable):
        log.warning("embedding provider unavailable during %s: %s", name, exc)
        return Unavailable(f"The embedding provider is unavailable: {str(exc)[:200]}; no change was made")
    unavailable = outage(exc)
    if unavailable is not None:
        log.warning("database unavailable during %s: %s", name, type(exc).__name__)
        return unavailable
    if isinstance(exc, DBAPIError):
        mapped = _from_sqlstate(exc)
        if mapped is not None:
            return mapped
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return Timeout("The operation exceeded its time limit")
    log.exception("unexpected error in %s", name)
    rid = request_id_var.get()
    return InternalError(
        f"Unexpected server error (request id {rid}); nothing was changed", details={"request_id": rid}
    )


def check_scope(op: Operation, principal: Principal) -> None:
    """Refuse (4030) a caller whose key lacks the operation's scope. The executor checks it on every
    call; a feature route that must read a large body first may call it before reading."""
    if not principal.has_scope(op.scope):
        raise Forbidden(
            f"Operation '{op.name}' needs the '{op.scope}' scope",
            suggestions=[f"Use a key created with --scopes {op.scope}"],
        )


async def run_operation(
    app: AppState,
    op: Operation,
    raw_args: Any,
    principal: Principal,
    *,
    transport: str,
    request_id: str,
    progress: ProgressFn = _no_progress,
) -> BaseModel:
    """Run one operation call end to end inside one transaction, then its after-commit hooks."""
    token = request_id_var.set(request_id)
    started = time.perf_counter()
    outcome = "ok"
    audited = app.settings.audit_enabled and (op.scope != "read" or op.destructive)
    args: BaseModel | None = None
    key = principal.key_id or "open-mode"
    slot: JobSlot | None = None
    LOAD.call_started()
    try:
        if app.limiter is not None:
            await app.limiter.admit(key)
        if op.long_running and app.jobs is not None:
            # Claimed while the call's first steps run (`app.core.job_slot`).
            slot = JobSlot.start(app.jobs, key, op.name)
        args = validate_args(op.input_model, raw_args)
        check_scope(op, principal)
        call = _Call(app, op, args, principal, transport, request_id, progress, audited, slot)
        return await call.run()
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            outcome = "cancelled"
            raise
        err = translate(exc, op.name)
        outcome = "error"
        ERRORS.labels(str(err.code), transport).inc()
        log.info(
            "call failed",
            extra={"operation": op.name, "transport": transport, "code": err.code, "key_id": principal.key_id},
        )
        # A refusal (a job slot refused once the arguments were read) writes no audit row: a client
        # over its limits must not be able to write rows at will.
        if audited and args is not None and not isinstance(err, (Unavailable, RateLimited)):
            await _audit_failure(app, audit_entry(op, transport, principal, args, None, err))
        raise err from None
    finally:
        LOAD.call_finished()
        elapsed = time.perf_counter() - started
        CALLS.labels(op.name, transport, outcome).inc()
        LATENCY.labels(op.name, transport).observe(elapsed)
        log.info(
            "call",
            extra={
                "operation": op.name,
                "transport": transport,
                "outcome": outcome,
                "ms": round(elapsed * 1000, 2),
                "key_id": principal.key_id,
            },
        )
        request_id_var.reset(token)
        if slot is not None:  # last: a cancelled call may be cancelled again here
            await slot.end()


@dataclass
class _Call:
    """One validated call of an operation: its transaction (each attempt with a fresh `CallContext`),
    the rollback steps of attempts that did not commit, and the hooks after the commit."""

    app: AppState
    op: Operation
    args: BaseModel
    principal: Principal
    transport: str
    request_id: str
    progress: ProgressFn
    audited: bool
    slot: JobSlot | None = None  # a long-running call's job slot, claimed beside the handler
    attempts: list[CallContext] = field(default_factory=list)
    # The read replica the current attempt runs on (None: the primary)
    replica: Replica | None = None

    async def attempt(self, session: AsyncSession) -> tuple[CallContext, BaseModel]:
        """One run of the handler in the transaction of `session`, with the audit row of a success."""
        # An earlier run's transaction rolled back before this one: its rollback steps first.
        await run_rollback_steps(self.app, self.attempts)
        ctx = CallContext(
            session=session,
            principal=self.principal,
            app=self.app,
            request_id=self.request_id,
            transport=self.transport,
            progress_fn=self.progress,
            args=self.args,
        )
        self.attempts.append(ctx)
        op = self.op
        if self.slot is None:
            result = await op.handler(ctx, self.args)
        else:
            result = await self.slot.run(lambda: op.handler(ctx, self.args))
        if not isinstance(result, op.output_model):
            result = op.output_model.model_validate(result)
        if self.replica is None:
            result = await self.write_part(ctx, session, result)
        return ctx, result

    async def write_part(self, ctx: CallContext, session: AsyncSession, result: BaseModel) -> BaseModel:
        """On a primary session: the call's `write_after_read` steps, then the audit row of a success."""
        for step in ctx.primary_steps:
            result = await step(session, result)
        if self.audited:
            entry = audit_entry(self.op, self.transport, self.principal, self.args, result, None)
            await AuditRepository(session).add(entry)
        return result

    async def run(self) -> BaseModel:
        """The call's transaction, then its after-commit hooks; the reply."""
        # A pooled connection found dead (PostgreSQL restarted) before the commit: once more on a fresh
        # one, unless the call reaches outside the database or has reported progress (Database.run).
        retry = not self.op.open_world and not self.op.long_running
        replicas = self.app.replicas
        # Only a call that can run again goes to a replica: one the replica fails then runs on the primary.
        routed = replicas is not None and self.op.read_only and not self.op.primary_only and retry
        replica = replicas.choose(self.key) if replicas is not None and routed else None
        try:
            try:
                if replica is not None:
                    ctx, result = await self.on_replica(replica)
                else:
                    one = self.op.one_statement and not self.audited
                    plain = self.op.plain
                    ctx, result = await self.app.db.run(self.attempt, retry=retry, one_statement=one, plain=plain)
            except BaseException:  # rolled back (failed or cancelled): record what the handler did outside
                await run_rollback_steps(self.app, self.attempts)
                raise
            return await run_commit_hooks(ctx, result)
        finally:
            # After the hooks too (they may wait for the call's embeddings): the key's next reads then
            # go to the primary until a replica has caught up past this moment. What a read's write part
            # records (search events, access counts) is left out: the key's next search would otherwise
            # never be served by a replica.
            if replicas is not None and not routed:
                replicas.note_write(self.key)

    async def on_replica(self, replica: Replica) -> tuple[CallContext, BaseModel]:
        """The read on `replica`, then its write part on the primary. A replica that cannot serve it
        (unreachable, cancelled by a recovery conflict, or refusing a write: SQLSTATE 25006, an operation
        that writes without saying so) is set aside and the call runs on the primary instead."""
        self.replica = replica
        try:
            ctx, result = await replica.db.run(self.attempt, one_statement=self.op.one_statement)
        except Exception as exc:
            wrote = isinstance(exc, DBAPIError) and sqlstate(exc) == "25006"
            if not (wrote or is_connection_error(exc) or is_conflict(exc)):
                raise
            if wrote:
                log.warning("operation %s wrote on a read replica: declare it primary_only", self.op.name)
            if self.app.replicas is not None:
                self.app.replicas.fell_back(replica, exc, unreachable=is_connection_error(exc))
            self.replica = None
            await run_rollback_steps(self.app, self.attempts)
            return await self.app.db.run(self.attempt)
        self.replica = None
        if not ctx.primary_steps and not self.audited:
            return ctx, result

        async def write(session: AsyncSession) -> BaseModel:
            return await self.write_part(ctx, session, result)

        return ctx, await self.app.db.run(write)

    @property
    def key(self) -> str:
        """Whose reads and writes these are, for read-your-writes (`app.core.replicas`)."""
        return self.principal.key_id or "open-mode"


async def run_commit_hooks(ctx: CallContext, result: R) -> R:
    """Run the hooks registered with `ctx.after_commit`, in order, each given the reply and returning the
    one to send. A hook that fails is logged and skipped: the call has committed, its reply goes out."""
    for hook in ctx.commit_hooks:
        try:
            result = await hook(result)
        except Exception:
            log.warning("an after-commit step failed", exc_info=True)
    return result


# Bound on the rollback steps of one call in all (they run even while the call is being cancelled).
ROLLBACK_STEPS_SECONDS = 30.0


async def run_rollback_steps(app: AppState, contexts: list[CallContext]) -> None:
    """Run the rollback steps registered on `contexts` (`CallContext.on_rollback`), whose transactions
    did not commit, each in a fresh short transaction, and forget them.

    They run to their end even while the call is being cancelled: in a task of their own, awaited
    under a shielded anyio scope (the MCP SDK cancels by scope) and through `asyncio.shield` (a plain
    task cancellation), at most `ROLLBACK_STEPS_SECONDS` in all. A cancellation that arrived meanwhile
    is raised once they are done. A failing step is logged; the next still runs."""
    steps = [step for ctx in contexts for step in ctx.rollback_steps]
    for ctx in contexts:
        ctx.rollback_steps.clear()
    if not steps:
        return

    async def run_all() -> None:
        try:
            async with asyncio.timeout(ROLLBACK_STEPS_SECONDS):
                for step in steps:
                    try:
                        async with app.db.transaction() as session:
                            await step(session)
                    except Exception:
                        log.warning(
                            "a rollback step failed: an outside effect of the call is unrecorded", exc_info=True
                        )
        except TimeoutError:
            log.warning("the rollback steps of a call ran out of time (%gs)", ROLLBACK_STEPS_SECONDS)

    task = asyncio.ensure_future(run_all())
    interrupted = False
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                interrupted = True
    if interrupted:
        raise asyncio.CancelledError


_COUNT_FIELDS = 12


def audit_entry(
    op: Operation,
    transport: str,
    principal: Principal,
    args: BaseModel,
    result: BaseModel | None,
    err: CairnError | None,
) -> AuditEntry:
    """The audit row for one call: integer/boolean fields of the result become its counts."""
    project = getattr(args, "project_id", None) or getattr(args, "project", None) or principal.project
    counts: dict[str, Any] = {}
    if result is not None:
        for name, value in result:
            if isinstance(value, bool | int) and len(counts) < _COUNT_FIELDS:
                counts[name] = value
    return AuditEntry(
        key_id=principal.key_id,
        key_name=principal.name,
        operation=op.name,
        transport=transport,
        project=str(project)[:128] if isinstance(project, str) else None,
        outcome="ok" if err is None else "error",
        error_code=err.code if err else None,
        counts=counts,
        request_id=request_id_var.get(),
    )


async def _audit_failure(app: AppState, entry: AuditEntry) -> None:
    """Failed calls roll back, so their audit row goes in its own small transaction."""
    try:
        async with app.db.transaction() as session:
            await AuditRepository(session).add(entry)
    except Exception:
        log.warning("could not write the audit entry of a failed call", exc_info=True)


async def read_resource(
    app: AppState,
    res: ResourceDef,
    params: dict[str, str],
    principal: Principal,
    *,
    transport: str,
    request_id: str,
) -> BaseModel:
    """Read one resource inside a read transaction."""
    token = request_id_var.set(request_id)
    started = time.perf_counter()
    outcome = "ok"
    name = f"resource:{res.uri}"
    try:
        if not principal.has_scope(res.scope):
            raise Forbidden(f"Resource '{res.uri}' needs the '{res.scope}' scope")

        async def attempt(session: AsyncSession) -> BaseModel:
            ctx = CallContext(session=session, principal=principal, app=app, request_id=request_id, transport=transport)
            return await res.handler(ctx, **params)

        return await app.db.run(attempt)
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            raise
        err = translate(exc, name)
        outcome = "error"
        ERRORS.labels(str(err.code), transport).inc()
        raise err from None
    finally:
        CALLS.labels(name, transport, outcome).inc()
        LATENCY.labels(name, transport).observe(time.perf_counter() - started)
        request_id_var.reset(token)
