"""app/core/executor.py: the hooks after a call's commit."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from app.core.context import CallContext
from app.core.executor import run_commit_hooks


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
