"""app/core/stdio.py: while the parts are built, file descriptor 1 points at stderr (nothing printed
then can corrupt the protocol stream), and it points back at the protocol when start-up fails: the
build raising, or toolsets the catalog does not know (refused before anything runs)."""

from __future__ import annotations

import asyncio
import os

import pytest
from mcp_types import jsonrpc_message_adapter
from pydantic import ValidationError

from app.core.assembly import Assembly
from app.core.config import Settings
from app.core.errors import NotFound
from app.core.stdio import error_reply, serve_stdio
from app.main import assemble
from tests.support.databases import migrated_url
from tests.support.server import PgCluster


def same_file(a: int, b: int) -> bool:
    first, second = os.fstat(a), os.fstat(b)
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


@pytest.fixture
def stdout_identity() -> tuple[int, int]:
    found = os.fstat(1)
    assert not same_file(1, 2)  # pytest captures each on its own file
    return found.st_dev, found.st_ino


def restored(identity: tuple[int, int]) -> bool:
    found = os.fstat(1)
    return (found.st_dev, found.st_ino) == identity


def test_a_failing_build_is_raised_with_stdout_restored(stdout_identity: tuple[int, int]) -> None:
    seen: list[bool] = []

    def build() -> Assembly:
        seen.append(same_file(1, 2))
        raise RuntimeError("no database")

    with pytest.raises(RuntimeError, match="no database"):
        serve_stdio(build)
    assert seen == [True] and restored(stdout_identity)


def test_unknown_toolsets_are_refused_before_anything_runs(pg: PgCluster, stdout_identity: tuple[int, int]) -> None:
    asm = assemble(Settings(database_url=migrated_url(pg, ["memory"]), features=["memory"]), local=True)
    seen: list[bool] = []
    before = asm.mcp.fixed

    def build() -> Assembly:
        seen.append(same_file(1, 2))
        return asm

    try:
        with pytest.raises(NotFound, match="Unknown toolset 'nonsense'"):
            serve_stdio(build, "nonsense")
        assert seen == [True] and restored(stdout_identity)
        assert asm.mcp.fixed is before  # the refused selection was never fixed for serving
        assert asm.boot.open_mode  # a local session needs no key
    finally:
        asyncio.run(asm.state.db.dispose())


@pytest.mark.parametrize(
    "line, code",
    [("nope", -32700), ('{"jsonrpc": "2.0", "id": 1', -32700), ("\ufffd", -32700), ("{}", -32600), ("null", -32600),
     ('[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600), ("\n", None), ("  ", None)],
)  # fmt: skip
def test_a_line_that_is_no_message_gets_its_json_rpc_error(line: str, code: int | None) -> None:
    with pytest.raises(ValidationError) as caught:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    reply = error_reply(caught.value)
    if code is None:
        assert reply is None  # a blank line asks for nothing
    else:
        assert reply is not None and reply.id is None and reply.error.code == code and reply.error.message
