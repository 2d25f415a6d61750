"""The channel between the server and a DuckDB worker process: what a reply holds (`Reply`), how the
server takes whole messages out of what it read (`take_frame`), and how a call in a worker answers
before it ends (`answer_early`). Requests and replies are pickles over a socket pair
(`multiprocessing.connection`): a request holds a reference to a module-level engine function (not its
code) and its arguments, a reply the function's value or its `CairnError`."""

from __future__ import annotations

import struct
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


class WorkerGone(Exception):
    """The worker process ended (or could not start); `sent`: whether it may have seen the request."""

    def __init__(self, sent: bool) -> None:
        super().__init__("the DuckDB worker process is gone")
        self.sent = sent


@dataclass(frozen=True)
class Reply:
    """A worker's answer: `status` 'ok' (`value` is the function's value), 'error' (`value` is a
    CairnError's class, message, suggestions, details, headers, query_context), 'crash' (`value` is
    the exception) or 'early' (`value` is what the function answered before it finished, see
    `answer_early`: its final reply follows).
    `recycle`: the worker ends after this reply (out of memory, an unexpected error). `opened`: the
    databases the worker has opened so far."""

    status: str
    value: Any
    recycle: bool
    opened: int

    def unwrap(self) -> Any:
        """The value, or the error raised."""
        if self.status == "ok":
            return self.value
        if self.status == "error":
            cls, message, suggestions, details, headers, context = self.value
            raise cls(message, suggestions=suggestions, details=details, headers=headers, query_context=context)
        raise self.value


def take_frame(box: bytearray) -> bytes | None:
    """The first whole message in `box`, taken out of it, framed as `Connection.send_bytes` frames
    one (a signed 4-byte length, or -1 and an 8-byte length, then the bytes); None until it is whole."""
    if len(box) < 4:
        return None
    (size,) = struct.unpack("!i", box[:4])
    start = 4
    if size == -1:
        if len(box) < 12:
            return None
        (size,) = struct.unpack("!Q", box[4:12])
        start = 12
    if len(box) < start + size:
        return None
    frame = bytes(box[start : start + size])
    del box[: start + size]
    return frame


# A call whose caller takes an early answer (`pool.WorkerPool.run_staged`) may send one before it ends.
EARLY_ALLOWED: ContextVar[bool] = ContextVar("cairn_datasets_early", default=False)
_early_sender: Callable[[Any], None] | None = None


def set_early_sender(send: Callable[[Any], None]) -> None:
    """How this (worker) process sends an early answer to the server."""
    global _early_sender
    _early_sender = send


def answer_early(value: Any) -> bool:
    """Send `value` as the current call's answer now, while the call goes on (e.g. to store a result
    its caller does not wait for); False (nothing sent) unless the call runs in a worker process for a
    caller that takes early answers. The call's final value or error is sent when it ends."""
    if _early_sender is None or not EARLY_ALLOWED.get():
        return False
    _early_sender(value)
    return True
