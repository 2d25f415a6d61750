"""app/core/executor.py: the hooks after a call's commit; a long-running call refused its job slot."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from app.core.context import CallContext
from app.core.executor import run_commit_hooks
from tests.support.waiting import UntilCancelled


class Ctx:
    """The part of a `CallContext` the hooks need."""

    def __init__(self) -> None:
        self.commit_hooks: list[Any] = []

    def after_commit(self, hook: Any) -> None:
        self.commit_hooks.append(hook)


async def test_hooks_run_in_order_each_given_the_reply_of_the_last(caplog: pytest.LogCaptureFixture) -> None:
    ctx = Ctx()
    ctx.after_commit(lambda_async(lambda out: [*out, "first"]))

    async def broken(out: Any) -> Any:
        raise RuntimeError("a step that failed")

    ctx.after_commit(broken)
    ctx.after_commit(lambda_async(lambda out: [*out, "third"]))
    with caplog.at_level(logging.WARNING, logger="cairn.call"):
        reply = await run_commit_hooks(cast(CallContext, ctx), cast(Any, ["reply"]))
    # The failing step is skipped and logged: the call committed, its reply goes out.
    assert reply == ["reply", "first", "third"]
    assert "an after-commit step failed" in caplog.text


def lambda_async(fn: Any) -> Any:
    async def hook(out: Any) -> Any:
        return fn(out)

    return hook


class FakeDb:
    """`Database.run` without a database: the work gets no session."""

    async def run(self, work: Any, **_: Any) -> Any:
        return await work(None)


async def test_a_refused_job_slot_cancels_the_handler_and_writes_no_audit_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pydantic import BaseModel

    from app.core import executor
    from app.core.config import Settings
    from app.core.context import AppState, Principal
    from app.core.errors import RateLimited
    from app.core.registry import OperationSet

    class In(BaseModel):
        n: int = 1

    work = UntilCancelled()
    ops = OperationSet("jobs", "A long write.")

    @ops.operation(name="long_write", title="Long Write", input=In, output=In, path="/long-write", long_running=True)
    async def long_write(ctx: CallContext, args: In) -> In:
        """Runs until cancelled."""
        await work.run()
        return args

    class RefusingSlots:
        limit = 1

        async def claim(self, key: str, operation: str = "") -> None:
            await work.running.wait()  # refused once the handler has started
            raise RateLimited(f"'{operation}' must wait")

        async def give_back(self, key: str) -> None:
            raise AssertionError("nothing was taken")

        async def close(self) -> None:
            """Nothing held."""

    audited: list[Any] = []

    async def record(app: Any, entry: Any) -> None:
        audited.append(entry)

    monkeypatch.setattr(executor, "_audit_failure", record)
    app = AppState(Settings(), cast(Any, FakeDb()), cast(Any, None), cast(Any, None), jobs=RefusingSlots())
    writer = Principal(key_id="w", name="writer", scopes=frozenset({"write"}))
    (op,) = ops.operations
    with pytest.raises(RateLimited):
        await asyncio.wait_for(executor.run_operation(app, op, {}, writer, transport="test", request_id="r"), 30)
    assert work.cancelled.is_set() and audited == []
