"""A DuckDB worker process's own side (`serve`): it answers the server's requests, each a module-level
engine function and its arguments, until the server closes the channel, and ends at once when the
server is gone however it exited (`_exit_with_server`). The server's side is `pool` and `process`."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from app.core.errors import CairnError, EngineError, MemoryLimit
from app.datasets.engine.databases import POOL, use_scratch, warm
from app.datasets.engine.ipc import EARLY_ALLOWED, Reply, set_early_sender
from app.datasets.engine.watchdog import CALL_DEADLINE


def serve(fd: int, alive: int) -> None:
    """A worker's loop (in the worker process): answer requests until the server closes the channel."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_server, args=(alive,), name="cairn-server-watch", daemon=True).start()
    use_scratch(f"w{os.getpid()}")
    POOL.defer_checks = True
    conn = Connection(fd)

    def send_early(value: Any) -> None:
        conn.send_bytes(pickle.dumps(Reply("early", value, False, POOL.opened), protocol=pickle.HIGHEST_PROTOCOL))

    set_early_sender(send_early)
    with contextlib.suppress(OSError, EOFError):
        _, configs = conn.recv()
        for cfg in configs:
            _answer((warm, cfg, (), {}, cfg.timeout_s))  # a failure here shows in the call that follows
        conn.send(("ready", os.getpid(), POOL.opened))
        while True:
            data = conn.recv_bytes()  # EOFError (ends the loop) when the server closed the channel
            try:
                message = pickle.loads(data)
            except Exception as exc:  # a request this process cannot read (an engine module failed to import)
                reply = _failure(EngineError(f"The DuckDB worker could not read the request: {exc}"[:400]))
            else:
                reply = _answer(message)
            try:
                payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # a value or an exception that does not pickle
                failed = EngineError(f"The DuckDB worker could not send its answer: {exc}"[:400])
                payload = pickle.dumps(_failure(failed, recycle=reply.recycle))
            conn.send_bytes(payload)
            if reply.recycle:
                return
            POOL.settle()  # after the answer: the next call finds the databases checked


def _exit_with_server(alive: int) -> None:
    """Block on the server's pipe; it only closes (EOF) when the server is gone."""
    with contextlib.suppress(OSError):
        while os.read(alive, 1):
            pass
    os._exit(0)


def _answer(message: tuple[Any, ...]) -> Reply:
    fn, cfg, args, kwargs, seconds, *rest = message
    token = CALL_DEADLINE.set(time.monotonic() + seconds)
    may = EARLY_ALLOWED.set(bool(rest and rest[0]))
    try:
        return Reply("ok", fn(cfg, *args, **kwargs), False, POOL.opened)
    except CairnError as exc:
        return _failure(exc, recycle=isinstance(exc, MemoryLimit))
    except MemoryError:
        return _failure(MemoryLimit("The query ran out of memory in its DuckDB worker"), recycle=True)
    except Exception as exc:
        return Reply("crash", exc, True, POOL.opened)
    finally:
        EARLY_ALLOWED.reset(may)
        CALL_DEADLINE.reset(token)


def _failure(exc: CairnError, recycle: bool = False) -> Reply:
    state = (type(exc), exc.message, exc.suggestions, exc.details, exc.headers, exc.query_context)
    return Reply("error", state, recycle, POOL.opened)
