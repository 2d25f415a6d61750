"""MCP over stdin/stdout (`cairn stdio`): one session per process, for a desktop client that starts
Cairn itself.

A line that is not a JSON-RPC message gets the JSON-RPC error reply (id null) and a warning in the
log: -32700 when it is not JSON (invalid or truncated JSON, bytes that are not UTF-8), -32600 when it
is JSON but no message (`{}`, `null`, a batch, which MCP does not use). The SDK's stdio transport hands
such lines to the session as exceptions, which it drops without a word (`Answering`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from app.core.assembly import Assembly, running
from app.core.errors import CairnError
from app.core.toolsets import Selection, parse

log = logging.getLogger("cairn.stdio")


def error_reply(exc: Exception) -> JSONRPCError | None:
    """The JSON-RPC error answering a line the SDK could not read as a message (`exc`, its error);
    None for a blank line, which is no message and asks for nothing."""
    found = exc.errors() if isinstance(exc, ValidationError) else []
    if any(e.get("type") == "json_invalid" and str(e.get("input", "x")).strip() == "" for e in found):
        return None
    if not found or any(e.get("type") == "json_invalid" for e in found):
        code, message = PARSE_ERROR, "Parse error: the line is not valid JSON (one UTF-8 JSON-RPC message per line)"
    else:
        code, message = INVALID_REQUEST, "Invalid Request: the line is not one JSON-RPC 2.0 request or notification"
    return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))


class Answering:
    """The SDK's stdio read stream, with each line that is not a message answered with its JSON-RPC
    error and logged instead of passed on (see the module docstring). The rest, the sender's context
    (`last_context`) included, is the wrapped stream's."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self.inner = inner
        self.write_stream = write_stream

    async def receive(self) -> Any:
        """The next message; lines that are none are answered on the way."""
        while True:
            item = await self.inner.receive()
            if not isinstance(item, Exception):
                return item
            reply = error_reply(item)
            if reply is None:
                continue
            log.warning("stdio: answered a line that is not a JSON-RPC message: %s", reply.error.message)
            await self.write_stream.send(SessionMessage(reply))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __aiter__(self) -> Answering:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Close the wrapped stream."""
        await self.inner.aclose()

    async def __aenter__(self) -> Answering:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


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
            async with stdio_server() as (read_stream, write_stream):
                await asm.mcp.serve(Answering(read_stream, write_stream), write_stream)

    anyio.run(main)
    return 0
