"""app/datasets/engine/ipc.py: replies are taken whole from what was read, however it arrives."""

from __future__ import annotations

import socket
import struct
from multiprocessing.connection import Connection

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
