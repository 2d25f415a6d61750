"""app/datasets/engine/ipc.py: replies are taken whole from what was read, however it arrives, and give back
their value or error; an early answer goes out only where its caller takes one."""

from __future__ import annotations

import socket
import struct
from multiprocessing.connection import Connection
from typing import Any

import pytest

from app.core.errors import QueryError
from app.datasets.engine import ipc


def test_replies_are_taken_whole_in_order_however_they_arrive() -> None:
    ours, theirs = socket.socketpair()
    sender = Connection(theirs.detach())
    sender.send_bytes(b"first")
    sender.send_bytes(b"x" * 70_000)
    sender.close()
    raw = b""
    while chunk := ours.recv(1 << 16):
        raw += chunk
    ours.close()
    box, got = bytearray(), []
    for byte in raw:  # one byte at a time: every frame is seen in part first
        box.append(byte)
        if (frame := ipc.take_frame(box)) is not None:
            got.append(frame)
    assert got == [b"first", b"x" * 70_000] and not box
    # A message past 2 GiB is framed with -1 and an 8-byte length.
    long = bytearray(struct.pack("!i", -1) + struct.pack("!Q", 3) + b"abcrest")
    assert ipc.take_frame(long) == b"abc" and long == b"rest"


def test_a_reply_gives_back_its_value_or_raises_its_error() -> None:
    assert ipc.Reply("ok", {"rows": 3}, False, 1).unwrap() == {"rows": 3}
    state = (QueryError, "bad", ["fix it"], {"at": 1}, {"X-A": "b"}, ">>>x<<<")
    with pytest.raises(QueryError) as raised:
        ipc.Reply("error", state, False, 1).unwrap()
    err = raised.value
    assert (err.message, err.suggestions, err.details, err.headers, err.query_context) == (
        "bad",
        ["fix it"],
        {"at": 1},
        {"X-A": "b"},
        ">>>x<<<",
    )
    with pytest.raises(ZeroDivisionError):
        ipc.Reply("crash", ZeroDivisionError("a bug"), True, 1).unwrap()


def test_an_early_answer_is_sent_only_where_the_caller_takes_one(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []
    assert not ipc.answer_early("x")  # in the server's own process: no sender
    monkeypatch.setattr(ipc, "_early_sender", sent.append)
    assert not ipc.answer_early("x")  # a caller of `run`, not `run_staged`
    token = ipc.EARLY_ALLOWED.set(True)
    try:
        assert ipc.answer_early("y")
    finally:
        ipc.EARLY_ALLOWED.reset(token)
    assert sent == ["y"]
