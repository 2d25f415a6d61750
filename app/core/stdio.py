"""MCP over stdin/stdout (`cairn stdio`): one session per process, for a desktop client that starts
Cairn itself."""

from __future__ import annotations

import os
from collections.abc import Callable

import anyio

from app.core.assembly import Assembly, running
from app.core.errors import CairnError
from app.core.toolsets import Selection, parse


def serve_stdio(build: Callable[[], Assembly], toolsets: str | None = None) -> int:
    """Serve MCP over stdin/stdout for a desktop client that starts Cairn itself (one session per
    process): the same registry, executor and toolsets as `/mcp`, on the parts `build` assembles for a
    local session (no key is needed: the client runs as the user who owns the data).

    Until the protocol starts, file descriptor 1 points at stderr, so nothing the start-up prints (or
    the PostgreSQL it starts, which inherits it) can corrupt the protocol stream."""
    protocol = os.dup(1)
    os.dup2(2, 1)

    def restore_stdout() -> None:
        os.dup2(protocol, 1)
        os.close(protocol)

    try:
        asm = build()
    except BaseException:
        restore_stdout()
        raise
    selection = parse(toolsets) if toolsets else Selection()
    try:
        asm.catalog.check(selection, stdio=True)
    except CairnError as err:
        if asm.boot.pg is not None:
            asm.boot.pg.stop()
        restore_stdout()
        raise err from None
    asm.mcp.fixed = selection

    async def main() -> None:
        async with running(asm, transport="stdio", toolsets=selection.path):
            restore_stdout()  # the SDK claims fd 1 for the protocol and diverts prints to stderr
            await asm.mcp.run_stdio_async()

    anyio.run(main)
    return 0
