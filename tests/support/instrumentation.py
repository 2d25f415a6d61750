"""Operations that exist only in the test server: they exercise error paths and progress."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from pydantic import BaseModel, Field

from app.core.context import CallContext
from app.core.registry import OperationSet
from app.core.repository import ProjectRepository
from app.core.schemas import StrictModel

ops = OperationSet("testing", "Operations the test suite adds to exercise failures and progress.")
ops.toolset("testing", "Test-only operations (instrumentation).")


class BoomIn(StrictModel):
    """Arguments of test_boom."""

    project: str | None = None


class Done(BaseModel):
    """A trivial result."""

    ok: bool = True


class ProgressIn(StrictModel):
    """Arguments of test_progress."""

    steps: int = Field(default=3, ge=1, le=20)
    delay_ms: int = Field(default=10, ge=0, le=5000, description="Sleep before each step")
    started: str | None = Field(default=None, description="A file the call creates once it runs (a test waits for it)")
    release: str | None = Field(
        default=None, description="A file the call waits for (at most 60 s) before its steps (a test creates it)"
    )


@ops.operation(name="test_boom", input=BoomIn, output=Done, path="/testing/boom", title="Boom")
async def boom(ctx: CallContext, args: BoomIn) -> Done:
    """Writes a project (when given) and then fails unexpectedly: nothing may stay written."""
    if args.project:
        await ProjectRepository(ctx.session).create(args.project)
        await ctx.session.flush()
    raise RuntimeError("secret internal detail /etc/passwd")


@ops.operation(
    name="test_progress",
    title="Progress",
    input=ProgressIn,
    output=Done,
    path="/testing/progress",
    read_only=True,
    long_running=True,
)
async def progress(ctx: CallContext, args: ProgressIn) -> Done:
    """Reports one progress notification per step. With `started`, it first creates that file; with
    `release`, it then waits until that file exists: a test holds the call in flight for as long as it
    needs, instead of guessing how long a sleep keeps it there."""
    if args.started:
        await asyncio.to_thread(Path(args.started).touch)
    if args.release:
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(Path(args.release).exists):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{args.release} was not created within 60 s")
            await asyncio.sleep(0.01)
    for i in range(args.steps):
        await asyncio.sleep(args.delay_ms / 1000)
        await ctx.progress(i + 1, args.steps, f"step {i + 1}")
    return Done()


def serve_with_instrumentation() -> None:
    """Run a real server process that also serves these test operations (used by shutdown tests, and by
    fleet hosts as `python -m tests.support.instrumentation serve --port N`)."""
    import os
    import sys

    import uvicorn

    from app.cli import serve_options
    from app.core.config import Settings
    from app.main import create_app

    argv = sys.argv[1:]
    settings = Settings()
    if "--port" in argv:
        settings = settings.model_copy(update={"port": int(argv[argv.index("--port") + 1])})
    uvicorn.run(create_app(settings, extra=[ops]), **serve_options(settings, os.environ))


if __name__ == "__main__":
    serve_with_instrumentation()
