"""DuckDB work in worker processes the server can kill.

DuckDB checks an interrupt only between vectors, so a scalar function busy on one huge value
(`levenshtein` over two 130,000-character strings: ~27 s) outruns the statement watchdog
(`sandbox.run_with_timeout`). So the server runs every DuckDB call in a worker process:

- **Processes.** A `WorkerPool` keeps `size` long-lived workers, one per engine slot
  (`CAIRN_DATASETS_MAX_CONCURRENCY`), and `SPARE` more, so a started worker is there for the next
  call while a replacement starts. Each is `python -I -c BOOT` in a session of its own. It imports
  the engine modules but not the feature's package, which builds the web layer. Each worker keeps its
  own pool of locked databases (`sandbox.POOL`, with the same leases, resets and lockdown).
- **Memory.** DuckDB's `memory_limit` counts only DuckDB's buffers. So each worker also has a cap on
  its resident memory (`CAIRN_DATASETS_WORKER_MEMORY_MB`). The server checks it every
  `MEMORY_CHECK_S` while the worker serves a call, and a worker past it is killed (5002).
  `RLIMIT_DATA` (twice the cap) stops a sudden huge allocation in between (5002 as well). A worker
  whose memory stays above half its cap after a call is replaced, so an idle worker never holds much.
- **IPC.** A socket pair per worker carries pickles (`multiprocessing.connection`). A request holds a
  reference to a module-level engine function (not its code) and that function's arguments: the
  `EngineConfig`, sources and paths. The reply holds the function's value or its `CairnError` (class,
  message, suggestions, details, query context). A query's full result never travels: the worker writes it to the
  result store as Parquet and answers with its metadata and first rows, cut to a reply's bounds.
  A caller of `run_staged` may get an early reply (`sandbox.answer_early`: a result whose rows are all
  in the answer, sent before its file is written); the final reply follows, and until it comes the
  worker and the slot stay taken. After replying, the worker checks the databases its call used for
  leftovers (`sandbox.ConnectionPool.settle`) before it reads the next request.
- **Conversations.** A call made on the event loop to a worker that has greeted is conducted there
  (`_converse_here`): the request is written, and the replies are read whenever the channel is
  readable, with the memory and priority checks in between, so the call costs no thread hop either
  way. What blocks (starting a replacement, reaping a dead worker) runs in a thread. A call made from a
  thread (`run_sync`), or one that finds its worker not started or gone, is conducted in a thread
  (`_converse`), one per slot at most.
- **Time.** The worker's watchdog interrupts the statement when the call's time limit is reached (5003,
  and the worker is kept). If no answer has come `GRACE_S` later, the server kills the worker
  (SIGKILL), answers 5003 and starts a replacement.
- **Warm start.** A new worker (a replacement) opens the locked databases of the latest calls'
  lockdowns (up to `RECENT_LOCKDOWNS`) before it greets, and a call takes a worker that has greeted
  before one still starting: a replacement costs the next caller nothing (opening a database takes
  about 25 ms).
- **Death.** A worker that dies during a call (killed, crashed) gives its caller 5030, to retry. Its
  scratch files are removed (`<work>/tmp/w<pid>`, `<results>/*.<pid>.tmp`) and a fresh worker takes
  its place. A result file appears only when a complete file is renamed into place, so nothing
  half-written is left. A worker that runs out of memory answers 5002 and is replaced as well.
- **Priority.** A call still running after `demote_after` seconds (`CAIRN_DATASETS_LONG_CALL_MS`) has
  every thread of its worker lowered by `demote_nice` (`CAIRN_DATASETS_LONG_CALL_NICE`, Linux): on a busy
  host the short calls of other callers get the CPU first, and on an idle one nothing changes (a
  niceness only matters when threads compete). While the server answers other calls too, its threads
  are also kept off one core, as the embedding queue's batches are (`app.core.embeddings.cpus`,
  `CAIRN_DATASETS_LONG_CALL_CONFINE`): other callers keep a core however much lowered work runs, and a
  long query alone on the host keeps every core (checked every `MEMORY_CHECK_S`). When the call ends
  the worker's threads go back to their priority and CPUs; where the server may not
  raise a priority again (no `CAP_SYS_NICE`, as in a container), the worker is replaced by a fresh one
  instead. Where it may (`may_raise`), three things more:
  - a lowered worker also runs under SCHED_IDLE (`set_idle`): a thread of another call that wakes up
    takes its CPU at once, instead of waiting for the end of its time slice;
  - a caller whose call ran long less than `LOWERED_FOR_S` ago has its next calls start lowered
    (`_fit_priority`): a key that keeps sending long calls no longer gets their first `demote_after`
    seconds at full priority;
  - the replacement of a worker killed during a call starts lowered, since its start-up (about 0.25 s of
    CPU) is the cost of the call that outran its limits; it is put back when another caller's call takes it.
- **Orphans.** A worker holds the read end of a pipe, and only the server holds its write end. When the
  server exits, however it exits, the pipe closes and a thread of the worker ends the worker at once.
- **Fairness.** `FairSlots`: a call takes one of the `size` slots, and one caller (API key) holds at
  most `per_key` of them (`CAIRN_DATASETS_MAX_CONCURRENCY_PER_KEY`, default half, rounded up). While
  it waits for a slot a call holds no thread. Waiting calls are served in arrival order among the
  callers under their cap. A caller with `QUEUE_PER_SLOT * per_key` calls already waiting gets 4290.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import math
import os
import pickle
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import app
from app.core.embeddings import cpus
from app.core.embeddings.load import LOAD
from app.core.errors import CairnError, EngineError, MemoryLimit, RateLimited, Timeout, Unavailable

if TYPE_CHECKING:
    from app.datasets.engine import EngineConfig
    from app.datasets.sandbox import Lockdown

log = logging.getLogger("cairn.datasets.worker")

# How long after the call's time limit a worker that has not answered is killed: the statement's own
# interrupt usually lands well within it, and then the worker (and its databases) are kept.
GRACE_S = 0.5
# How long a new worker may take to start (import DuckDB and the engine).
BOOT_TIMEOUT_S = 60.0
# Calls one caller may have waiting for a slot, per slot it may hold.
QUEUE_PER_SLOT = 4
MB = 1024 * 1024
# How often the server looks at the memory of a worker serving a call.
MEMORY_CHECK_S = 0.05
# The most `wait_async` reads from a worker's channel at once.
READ_CHUNK = 1 << 20
# Lockdowns (projects' databases) a new worker opens before it takes calls.
RECENT_LOCKDOWNS = 4
# Workers beyond the slots: a started one is there for the next call while a replacement starts (about
# 0.2 s), e.g. after a call that outran its time limit was killed.
SPARE = 1
# How long a caller whose call ran past `demote_after` has its next calls start at the lowered priority.
LOWERED_FOR_S = 10.0
CAP_SYS_NICE = 23  # its bit in /proc/<pid>/status's CapEff
_PAGE = os.sysconf("SC_PAGE_SIZE")
# Memory a worker needs beyond DuckDB's own limit: Python, the engine modules, rows being converted.
WORKER_HEADROOM = 1024 * MB
_HOME = str(Path(app.__file__).resolve().parent.parent)

# The worker's first code. It caps its own memory before importing anything. It leaves
# `app/datasets/__init__.py` out: that module builds the feature (operations, routes, FastAPI) and
# costs a worker 1.4 s and 130 MB at start for nothing.
BOOT = """
import os, resource, sys, types
fd, alive, memory, home = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
nice, idle = int(sys.argv[5]), sys.argv[6] == "1"
if nice > os.getpriority(os.PRIO_PROCESS, 0):  # set before any thread starts: they all inherit it
    os.setpriority(os.PRIO_PROCESS, 0, nice)
if idle:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
if memory > 0:
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
sys.path.insert(0, home)
package = types.ModuleType("app.datasets")
package.__path__ = [os.path.join(home, "app", "datasets")]
sys.modules["app.datasets"] = package
from app.datasets.worker import serve
serve(fd, alive)
"""


def memory_bytes(setting_mb: int, duckdb_limit: str) -> int:
    """A worker's memory cap: `setting_mb` MB, or by default DuckDB's `memory_limit` plus
    `WORKER_HEADROOM` (4 GB when the limit is not a plain size such as '2GB' or '512 MiB')."""
    if setting_mb > 0:
        return setting_mb * MB
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(I?B)?\s*", duckdb_limit.upper())
    if m is None:
        return 4096 * MB
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * scale) + WORKER_HEADROOM


# ---------------------------------------------------------------------------------------------- fairness


class _Waiter:
    __slots__ = ("granted", "key", "wake")

    def __init__(self, key: str, wake: Callable[[], None]) -> None:
        self.key = key
        self.wake = wake
        self.granted = False


class FairSlots:
    """`size` slots shared between callers. A caller holds at most `per_key` at once. A freed slot goes
    to the first waiting call whose caller is under its cap. A caller with `waiting_per_key` calls
    waiting gets RateLimited. Usable from the event loop (`acquire`) and from threads
    (`acquire_sync`)."""

    def __init__(self, size: int, per_key: int, waiting_per_key: int) -> None:
        self.size = size
        self.per_key = max(1, min(per_key, size))
        self.waiting_per_key = waiting_per_key
        self._lock = threading.Lock()
        self._free = size
        self._held: dict[str, int] = {}
        self._waiting: dict[str, int] = {}
        self._queue: deque[_Waiter] = deque()

    def held(self, key: str) -> int:
        """Slots `key` holds now."""
        with self._lock:
            return self._held.get(key, 0)

    def waiting(self) -> int:
        """Calls waiting for a slot."""
        with self._lock:
            return len(self._queue)

    def _take(self, key: str) -> None:
        self._free -= 1
        self._held[key] = self._held.get(key, 0) + 1

    def _admit(self, key: str, wake: Callable[[], None]) -> _Waiter | None:
        """Take a slot now (None), or queue a waiter. A waiter still queued is one whose caller is at
        its cap or one that found no free slot, so a call under its cap that finds a slot free jumps
        no queue."""
        with self._lock:
            if self._free > 0 and self._held.get(key, 0) < self.per_key:
                self._take(key)
                return None
            if self._waiting.get(key, 0) >= self.waiting_per_key:
                raise RateLimited(
                    f"This API key already has {self._held.get(key, 0)} DuckDB queries running and "
                    f"{self._waiting[key]} waiting",
                    suggestions=["Wait for a running query to finish, then retry"],
                    details={"retry_after": 1},
                    headers={"Retry-After": "1"},
                )
            waiter = _Waiter(key, wake)
            self._queue.append(waiter)
            self._waiting[key] = self._waiting.get(key, 0) + 1
            return waiter

    def _grant(self) -> list[Callable[[], None]]:
        """Give free slots to waiters (under the lock); their wake-up calls, to make outside it."""
        woken: list[Callable[[], None]] = []
        for waiter in list(self._queue):
            if self._free <= 0:
                break
            if self._held.get(waiter.key, 0) < self.per_key:
                self._queue.remove(waiter)
                self._unwait(waiter.key)
                self._take(waiter.key)
                waiter.granted = True
                woken.append(waiter.wake)
        return woken

    def _unwait(self, key: str) -> None:
        left = self._waiting[key] - 1
        if left:
            self._waiting[key] = left
        else:
            del self._waiting[key]

    def _withdraw(self, waiter: _Waiter) -> bool:
        """Take a waiter out of the queue; False when it was given a slot meanwhile."""
        with self._lock:
            if waiter.granted:
                return False
            self._queue.remove(waiter)
            self._unwait(waiter.key)
            return True

    def release(self, key: str) -> None:
        """Give back a slot of `key`."""
        with self._lock:
            left = self._held[key] - 1
            if left:
                self._held[key] = left
            else:
                del self._held[key]
            self._free += 1
            woken = self._grant()
        for wake in woken:
            wake()

    async def acquire(self, key: str) -> None:
        """Wait (without a thread) for a slot of `key`."""
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: the call went with it
                loop.call_soon_threadsafe(_resolve, granted)

        waiter = self._admit(key, wake)
        if waiter is None:
            return
        try:
            await granted
        except BaseException:
            if not self._withdraw(waiter):
                self.release(key)
            raise

    def acquire_sync(self, key: str) -> None:
        """Wait (blocking this thread) for a slot of `key`."""
        event = threading.Event()
        if self._admit(key, event.set) is not None:
            event.wait()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# ---------------------------------------------------------------------------------------------- server side


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
    `sandbox.answer_early`: its final reply follows).
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


class OverMemory(Exception):
    """The worker's resident memory passed its cap during a call."""


class _Worker:
    """One worker process and the server's end of its channel. `memory`: its cap of resident memory,
    watched by the server during calls; the process also gets twice that as `RLIMIT_DATA`, which counts
    address space (allocators reserve about twice what they touch) and stops a sudden huge allocation
    before the server's next look."""

    def __init__(
        self,
        memory: int,
        warm: list[EngineConfig] | None = None,
        demote: tuple[float, int, bool] = (0.0, 0, False),
        lowered: bool = False,
        idle: bool = False,
    ) -> None:
        self.memory = memory
        # `idle`: a lowered worker also runs under SCHED_IDLE (see `set_idle`); only where it can be undone.
        self.idle = idle and sys.platform.startswith("linux")
        self.demote_after, self.demote_nice, self.confine = demote
        self.confined = False
        # The worker's own niceness: the starting thread's, which it inherits (the server's).
        self.base_nice = os.getpriority(os.PRIO_PROCESS, 0) if sys.platform.startswith("linux") else 0
        # `lowered`: the process starts at the lowered priority (its start-up is background work too).
        self.demoted = lowered and self.demote_nice > 0 and sys.platform.startswith("linux")
        self.long_call = False  # the current (or last) call ran past `demote_after`
        self._since = 0.0
        ours, theirs = socket.socketpair()
        alive_r, alive_w = os.pipe()
        data = 2 * memory if memory > 0 else 0
        start = [str(self.lowered_nice()), str(int(self.idle))] if self.demoted else [str(self.base_nice), "0"]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-c", BOOT, str(theirs.fileno()), str(alive_r), str(data), _HOME, *start],
                pass_fds=(theirs.fileno(), alive_r),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C goes to the server, which stops its workers
            )
        except BaseException:
            ours.close()
            os.close(alive_w)
            raise
        finally:
            theirs.close()
            os.close(alive_r)
        self.conn = Connection(ours.detach())
        # The same channel for `wait_async`, which reads it without blocking (MSG_DONTWAIT, so the
        # blocking reads of the other paths are unchanged); `_inbox` holds a reply read in part.
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(self.conn.fileno()))
        self._inbox = bytearray()
        self.pid = self.proc.pid
        with contextlib.suppress(OSError):  # a worker that died at once is found out by its first call
            self.conn.send(("warm", warm or []))
        self._alive: int | None = alive_w
        self.ready = False
        self.opened = 0
        self.works: set[Path] = set()

    def alive(self) -> bool:
        """True while the process runs: not yet reaped, and not a zombie (a killed process with many
        threads is one for a while before `waitpid` reports it)."""
        if self.proc.poll() is not None:
            return False
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                state = stat.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state not in (b"Z", b"X")

    def rss(self) -> int:
        """The process's resident memory in bytes (0 once it is gone)."""
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as statm:
                return int(statm.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            return 0

    def started(self) -> bool:
        """True once the worker has greeted (without waiting for it)."""
        if not self.ready:
            with contextlib.suppress(EOFError, OSError):
                if self.conn.poll(0):
                    self._greeted(self.conn.recv())
        return self.ready

    def wait_ready(self, timeout: float) -> None:
        """Wait for the worker's greeting (it has started); WorkerGone when it died or took too long."""
        if self.ready:
            return
        try:
            if not self.conn.poll(timeout):
                raise WorkerGone(sent=False)
            self._greeted(self.conn.recv())
        except (EOFError, OSError):
            raise WorkerGone(sent=False) from None

    def _greeted(self, greeting: tuple[str, int, int]) -> None:
        _, _, self.opened = greeting  # the databases it opened for its warm start
        self.ready = True

    def call(self, message: Any, timeout: float) -> Reply | None:
        """Send `message` and wait `timeout` seconds for the reply (None when none came). OverMemory
        when the process's resident memory passes its cap meanwhile."""
        self.send(message)
        return self.wait(self._since + timeout)

    def send(self, message: Any) -> None:
        """Send a request (WorkerGone, not sent, when the process is gone)."""
        try:
            self.conn.send(message)
        except (BrokenPipeError, ConnectionError):
            raise WorkerGone(sent=False) from None
        self._since = time.monotonic()
        self.long_call = False

    def wait(self, deadline: float) -> Reply | None:
        """Wait until `deadline` (time.monotonic) for the worker's next reply (None when none came);
        OverMemory as in `call`. A call running past `demote_after` seconds lowers the worker's priority."""
        try:
            while not self.conn.poll(max(0.0, min(MEMORY_CHECK_S, deadline - time.monotonic()))):
                now = time.monotonic()
                if now >= deadline:
                    return None
                self._check(now)
            reply: Reply = self.conn.recv()
        except (EOFError, OSError):
            raise WorkerGone(sent=True) from None
        self.opened = reply.opened
        return reply

    async def wait_async(self, deadline: float) -> Reply | None:
        """`wait` on the event loop, with no thread: the channel is read whenever it is readable, and
        the memory and priority checks run between reads."""
        loop = asyncio.get_running_loop()
        fd = self._sock.fileno()
        while (frame := take_frame(self._inbox)) is None:
            readable = loop.create_future()
            loop.add_reader(fd, _resolve, readable)
            try:
                await asyncio.wait([readable], timeout=max(0.0, min(MEMORY_CHECK_S, deadline - time.monotonic())))
            finally:
                loop.remove_reader(fd)
            if readable.done():
                self._pull()
                continue
            now = time.monotonic()
            if now >= deadline:
                return None
            self._check(now)
        reply: Reply = pickle.loads(frame)
        self.opened = reply.opened
        return reply

    def _pull(self) -> None:
        """Move what the channel holds into `_inbox` without blocking; WorkerGone at its end."""
        while True:
            try:
                data = self._sock.recv(READ_CHUNK, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                raise WorkerGone(sent=True) from None
            if not data:
                raise WorkerGone(sent=True)
            self._inbox += data
            if len(data) < READ_CHUNK:
                return

    def _check(self, now: float) -> None:
        """Between two looks at the channel during a call: OverMemory past the memory cap; a call
        running past `demote_after` lowers the worker's priority, and a lowered one has its CPUs fitted."""
        if self.memory > 0 and self.rss() > self.memory:
            raise OverMemory()
        if self.demote_nice and now - self._since >= self.demote_after:
            self.long_call = True
            if not self.demoted:
                self.lower()
        if self.demoted and self.confine:
            self._fit_cpus()

    def lowered_nice(self) -> int:
        """The niceness of a lowered worker: `demote_nice` above the one it started with."""
        return min(19, self.base_nice + self.demote_nice)

    def lower(self) -> None:
        """Lower every thread's priority by `demote_nice`, and put it under SCHED_IDLE where the pool
        asked for it (its CPUs are fitted during calls)."""
        self.demoted = True
        set_nice(self.pid, self.lowered_nice())
        if self.idle:
            set_idle(self.pid, True)

    def promote(self) -> bool:
        """Put a demoted worker's threads back to the priority it started with: False when this process
        may not."""
        if not self.demoted:
            return True
        if self.confine:  # every thread, even where confining some of them failed
            cpus.set_cpus(self.pid, cpus.all_cpus())
            self.confined = False
        policy_back = set_idle(self.pid, False) if self.idle else True
        self.demoted = not (policy_back and set_nice(self.pid, self.base_nice))
        return not self.demoted

    def _fit_cpus(self) -> None:
        """A demoted worker's CPUs: all but one while this process answers other calls too, every one
        while its call is the only one (so that a long query alone on the host keeps every core)."""
        crowded = LOAD.in_flight > 1
        if crowded and not self.confined:
            self.confined = cpus.set_cpus(self.pid, cpus.background_cpus())
        elif not crowded and self.confined:
            self.confined = not cpus.set_cpus(self.pid, cpus.all_cpus())

    def end(self, kill: bool = False, wait: float = 2.0) -> None:
        """Stop the process (`kill`: at once, with SIGKILL; else by closing its channel and pipe, which it
        answers by exiting), reap it and remove its scratch files."""
        if kill:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        self.conn.close()
        self._sock.close()
        if self._alive is not None:
            os.close(self._alive)
            self._alive = None
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        scrub(self.pid, self.works)

    def how_it_ended(self) -> str:
        """The end of a dead worker in words ('killed by SIGKILL', 'exit status 1')."""
        try:
            code = self.proc.wait(0.5)  # its channel closed first: the process may still be on its way out
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"


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


def set_nice(pid: int, nice: int) -> bool:
    """Set the niceness of every thread of process `pid` (Linux keeps one per thread, and DuckDB's
    threads were started before any change). False when not allowed (raising a priority needs
    `CAP_SYS_NICE`) or not possible here; a thread that ended meanwhile is skipped."""
    return sys.platform.startswith("linux") and cpus.each_thread(
        pid, lambda tid: os.setpriority(os.PRIO_PROCESS, tid, nice)
    )


def set_idle(pid: int, idle: bool) -> bool:
    """Put every thread of process `pid` under SCHED_IDLE, or back under SCHED_OTHER. Lowering a
    niceness alone leaves a wait: a call's thread that wakes up may wait for a lowered thread's time
    slice to end (a few milliseconds, every time it wakes up); a running SCHED_IDLE thread gives way at
    once. False when not allowed (leaving SCHED_IDLE needs what raising a niceness needs) or not possible
    here."""
    policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
    return sys.platform.startswith("linux") and cpus.each_thread(
        pid, lambda tid: os.sched_setscheduler(tid, policy, os.sched_param(0))
    )


def may_raise(nice: int) -> bool:
    """True when this process may put a thread's niceness back to `nice` once lowered: with
    `CAP_SYS_NICE`, or within `RLIMIT_NICE` (which allows down to 20 minus its soft limit)."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:") and int(line.split()[1], 16) >> CAP_SYS_NICE & 1:
                return True
    limit = resource.getrlimit(resource.RLIMIT_NICE)[0]
    return limit == resource.RLIM_INFINITY or 20 - limit <= nice


def scrub(pid: int, works: set[Path]) -> None:
    """Remove what worker `pid` may have left in the work directories `works`: its spill folder and its
    unfinished result files."""
    for work in works:
        shutil.rmtree(work / "tmp" / f"w{pid}", ignore_errors=True)
        results = work / "results"
        with contextlib.suppress(OSError):
            for leftover in results.glob(f"*.{pid}.tmp"):
                leftover.unlink(missing_ok=True)


class WorkerPool:
    """`size` fair slots served by `size + SPARE` worker processes (see the module's docstring)."""

    def __init__(self, size: int, per_key: int, memory: int, demote: tuple[float, int, bool] = (0.0, 0, False)) -> None:
        self.spec = (size, per_key, memory, demote)
        self.size = size
        self.memory = memory
        self.demote = demote
        self.slots = FairSlots(size, per_key, QUEUE_PER_SLOT * max(1, per_key))
        self._lock = threading.Lock()
        self._closed = False
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._gone_opened = 0
        self.replaced = 0
        # Lowering a priority ahead of time is only done where it can be undone.
        self.may_raise = demote[1] > 0 and may_raise(os.getpriority(os.PRIO_PROCESS, 0))
        # Callers whose latest long call (past `demote_after`) ended at this `time.monotonic()`.
        self._long: dict[str, float] = {}
        # The conversations with busy workers: at most one per slot, so a call never waits for a thread.
        self._threads = ThreadPoolExecutor(size, thread_name_prefix="cairn-duckdb")
        for _ in range(size + SPARE):
            self._idle.append(self._spawn([]))
        # The configurations of the latest calls (one per lockdown): a new worker opens their databases
        # before it greets, so its first call costs no more than the next (about 25 ms each otherwise).
        self._recent: dict[Lockdown, EngineConfig] = {}

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def pids(self) -> list[int]:
        """The worker processes' ids (idle and busy)."""
        with self._lock:
            return [w.pid for w in [*self._idle, *self._busy]]

    def busy_pids(self) -> list[int]:
        """The ids of the workers serving a call now."""
        with self._lock:
            return [w.pid for w in self._busy]

    def databases_opened(self) -> int:
        """Locked databases the workers have opened (those gone included)."""
        with self._lock:
            return self._gone_opened + sum(w.opened for w in [*self._idle, *self._busy])

    async def run(self, caller: str, fn: Callable[..., Any], cfg: EngineConfig, args: Any, kwargs: Any) -> Any:
        """`fn(cfg, *args, **kwargs)` in a worker, once `caller` has a slot."""
        return await asyncio.shield(await self._start(caller, fn, cfg, args, kwargs, None))

    async def run_staged(
        self, caller: str, fn: Callable[..., Any], cfg: EngineConfig, args: Any, kwargs: Any
    ) -> tuple[Any, asyncio.Future[Any] | None]:
        """`run` for a function that may answer before it finishes (`sandbox.answer_early`): its early
        value and the future of its final one, or its value and None when it answered only at the end.
        The worker and the slot stay taken until the final answer."""
        loop = asyncio.get_running_loop()
        first: asyncio.Future[Any] = loop.create_future()

        def take(value: Any) -> None:
            if not first.done():
                first.set_result(value)

        def early(value: Any) -> None:  # in the conversation's thread
            loop.call_soon_threadsafe(take, value)

        done = await self._start(caller, fn, cfg, args, kwargs, early)
        await asyncio.wait([first, asyncio.shield(done)], return_when=asyncio.FIRST_COMPLETED)
        if first.done():
            return first.result(), done
        first.cancel()
        return await asyncio.shield(done), None

    async def _start(
        self,
        caller: str,
        fn: Callable[..., Any],
        cfg: EngineConfig,
        args: Any,
        kwargs: Any,
        early: Callable[[Any], None] | None,
    ) -> asyncio.Future[Any]:
        """Take a slot for `caller` and a worker, and start the conversation in a thread: its future."""
        await self.slots.acquire(caller)
        try:
            worker = self._checkout()
        except BaseException:
            self.slots.release(caller)
            raise
        done: asyncio.Future[Any]
        try:
            # The usual case (see `_converse_here`). `alive`, not `proc.poll`: a killed worker is a zombie
            # with its channel still open until its last thread has ended, and would take the request.
            if worker.ready and worker.alive():
                done = asyncio.ensure_future(self._converse_here(caller, worker, (fn, cfg, args, kwargs), early))
            else:
                done = asyncio.get_running_loop().run_in_executor(
                    self._threads, self._converse, caller, worker, (fn, cfg, args, kwargs), early
                )
        except BaseException as exc:
            self._checkin(worker)
            self.slots.release(caller)
            if isinstance(exc, RuntimeError):  # the pool was closed meanwhile: the server is stopping
                raise EngineError("The DuckDB workers are stopping", suggestions=["Retry"]) from None
            raise
        done.add_done_callback(_consume)
        # A caller that goes away (cancelled) leaves the conversation to end by itself (callers await it
        # shielded): it returns the worker and the slot.
        return done

    def run_sync(self, caller: str, fn: Callable[..., Any], cfg: EngineConfig, args: Any, kwargs: Any) -> Any:
        """`run` for a thread."""
        self.slots.acquire_sync(caller)
        try:
            worker = self._checkout()
        except BaseException:
            self.slots.release(caller)
            raise
        return self._converse(caller, worker, (fn, cfg, args, kwargs), None)

    def _checkout(self) -> _Worker:
        with self._lock:
            # One worker per slot and a spare, and a slot is held: one is idle. A replacement may still be
            # starting, or one may have died while idle: a started, unreaped one is taken first. (This
            # runs on the event loop: `alive` reads /proc, so only the worker taken is looked at so.)
            if not self._idle:
                worker = self._spawn(list(self._recent.values()))
            else:
                ready = [i for i, w in enumerate(self._idle) if w.proc.poll() is None and w.started()]
                worker = self._idle.pop(ready[-1] if ready else -1)
            self._busy.add(worker)
            return worker

    def _spawn(self, warm: list[EngineConfig], lowered: bool = False) -> _Worker:
        """Start a worker of this pool (`warm`: the configurations whose databases it opens first;
        `lowered`: it starts at the lowered priority, where that can be undone)."""
        return _Worker(self.memory, warm, self.demote, lowered=lowered and self.may_raise, idle=self.may_raise)

    def _checkin(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            closed = self._closed
            if not closed:
                self._idle.append(worker)
        if closed:
            worker.end()

    def _replace(self, worker: _Worker, kill: bool, lowered: bool = False) -> _Worker:
        """End `worker` and start another in its place (not yet started when the pool is closed);
        `lowered`: the call it served outran its limits, and the replacement, whose start-up is that call's cost,
        starts at the lowered priority."""
        worker.end(kill=kill)
        with self._lock:
            warm = list(self._recent.values())
        replacement = self._spawn(warm, lowered)
        with self._lock:
            self._busy.discard(worker)
            self._busy.add(replacement)
            self._gone_opened += worker.opened
            self.replaced += 1
        return replacement

    def _renew_dead(self) -> None:
        """Replace the idle workers that died (killed while idle), so that the spare is a living one."""
        with self._lock:
            dead = [w for w in self._idle if not w.alive()]
            for worker in dead:
                self._idle.remove(worker)
            warm = list(self._recent.values())
        for worker in dead:
            log.warning("DuckDB worker %s ended while idle (%s)", worker.pid, worker.how_it_ended())
            worker.end(kill=True)
            try:
                fresh = self._spawn(warm)
            except OSError as exc:  # e.g. no process left: a call that finds no idle worker starts one
                log.error("could not start a DuckDB worker: %s", exc)
                continue
            with self._lock:
                self._gone_opened += worker.opened
                self.replaced += 1
                closed = self._closed
                if not closed:
                    self._idle.append(fresh)
            if closed:
                fresh.end()

    def _ready(self, worker: _Worker) -> _Worker:
        """A started worker: `worker`, or a replacement when it died while idle or failed to start
        (WorkerGone when two replacements in a row fail to start)."""
        for _ in range(2):
            if worker.alive():
                try:
                    worker.wait_ready(BOOT_TIMEOUT_S)
                    return worker
                except WorkerGone:
                    pass
            log.warning("DuckDB worker %s ended before a call (%s)", worker.pid, worker.how_it_ended())
            worker = self._replace(worker, kill=True)
        worker.wait_ready(BOOT_TIMEOUT_S)
        return worker

    def _converse(
        self, caller: str, worker: _Worker, request: tuple[Any, ...], early: Callable[[Any], None] | None
    ) -> Any:
        """Run one request on `worker`, in a thread; give back the worker (or its replacement) and the
        slot however it ends. An early answer goes to `early` (a caller of `run` gets none: its
        function was not told it may answer early) and the conversation waits for the final one."""
        fn, cfg, args, kwargs = request
        served: _Worker | None = None
        try:
            self._renew_dead()
            self._note(cfg)
            try:
                worker = self._ready(worker)
            except WorkerGone:
                raise Unavailable(
                    "The DuckDB worker process could not start",
                    suggestions=["Retry shortly; if it persists, the server's log says why"],
                    headers={"Retry-After": "1"},
                ) from None
            worker.works.add(cfg.work)
            message = (fn, cfg, args, kwargs, cfg.timeout_s, early is not None)
            served = worker
            try:
                deadline = time.monotonic() + cfg.timeout_s + GRACE_S
                try:
                    self._fit_priority(caller, worker)
                    reply = worker.call(message, cfg.timeout_s + GRACE_S)
                except WorkerGone as gone:
                    if gone.sent:
                        raise
                    worker = served = self._ready(self._replace(worker, kill=True))  # never saw it: once more
                    worker.works.add(cfg.work)
                    deadline = time.monotonic() + cfg.timeout_s + GRACE_S
                    self._fit_priority(caller, worker)
                    reply = worker.call(message, cfg.timeout_s + GRACE_S)
                if reply is not None and reply.status == "early":
                    if early is not None:
                        early(reply.value)
                    reply = worker.wait(deadline)
            except OverMemory:
                log.warning("DuckDB worker %s passed its memory cap: killed", worker.pid)
                worker = self._replace(worker, kill=True, lowered=True)
                raise self._over_memory() from None
            except WorkerGone:
                how, worker = self._bury(worker)
                raise _died(how) from None
            if reply is None:
                log.warning("DuckDB worker %s outran its time limit: killed", worker.pid)
                worker = self._replace(worker, kill=True, lowered=True)
                raise _outran()
            if self._spent(worker, reply):
                worker = self._replace(worker, kill=False)
            return reply.unwrap()
        finally:
            if served is not None:
                self._ended(caller, served)
            self._checkin(worker)
            self.slots.release(caller)

    async def _converse_here(
        self, caller: str, worker: _Worker, request: tuple[Any, ...], early: Callable[[Any], None] | None
    ) -> Any:
        """`_converse` on the event loop, for a worker that has greeted: the request is sent and the
        replies read as the channel becomes readable, so the call costs no thread hop either way. What
        blocks (a replacement: starting a process, reaping one) runs in a thread; a request
        the worker never got (it died while idle) goes to `_converse`, which replaces it."""
        fn, cfg, args, kwargs = request
        loop = asyncio.get_running_loop()
        handed = False
        answered = False
        served: _Worker | None = None
        try:
            if any(w.proc.poll() is not None for w in self._idle_now()):  # off the loop: it starts processes
                loop.run_in_executor(None, self._renew_dead).add_done_callback(_consume)
            self._note(cfg)
            worker.works.add(cfg.work)
            deadline = time.monotonic() + cfg.timeout_s + GRACE_S
            self._fit_priority(caller, worker)
            try:
                worker.send((fn, cfg, args, kwargs, cfg.timeout_s, early is not None))
                served = worker
            except WorkerGone:
                try:
                    rest = loop.run_in_executor(self._threads, self._converse, caller, worker, request, early)
                except RuntimeError:  # the pool was closed meanwhile: the server is stopping
                    raise EngineError("The DuckDB workers are stopping", suggestions=["Retry"]) from None
                handed = True  # `_converse` gives the worker and the slot back
                return await rest
            try:
                reply = await worker.wait_async(deadline)
                if reply is not None and reply.status == "early":
                    if early is not None:
                        early(reply.value)
                    reply = await worker.wait_async(deadline)
                answered = True
            except OverMemory:
                answered = True
                log.warning("DuckDB worker %s passed its memory cap: killed", worker.pid)
                worker = await loop.run_in_executor(None, self._replace, worker, True, True)
                raise self._over_memory() from None
            except WorkerGone:
                answered = True
                how, worker = await loop.run_in_executor(None, self._bury, worker)
                raise _died(how) from None
            if reply is None:
                log.warning("DuckDB worker %s outran its time limit: killed", worker.pid)
                worker = await loop.run_in_executor(None, self._replace, worker, True, True)
                raise _outran()
            if self._spent(worker, reply):
                worker = await loop.run_in_executor(None, self._replace, worker, False)
            return reply.unwrap()
        finally:
            if served is not None:
                self._ended(caller, served)
            if not answered and not handed:
                # Cancelled while the worker had the request (only when the loop is torn down): it may
                # still answer, so it must not take the next call; found dead, it is replaced.
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
            if not handed:
                self._checkin(worker)
                self.slots.release(caller)

    def _bury(self, worker: _Worker) -> tuple[str, _Worker]:
        """How `worker` died during a call (it may take a moment to tell), and its replacement."""
        how = worker.how_it_ended()
        log.warning("DuckDB worker %s died during a call (%s)", worker.pid, how)
        return how, self._replace(worker, kill=True, lowered=True)

    def _fit_priority(self, caller: str, worker: _Worker) -> None:
        """Before a call: a caller whose latest long call ended less than `LOWERED_FOR_S` ago starts at the
        lowered priority (its calls are long ones: the first `demote_after` seconds of each would otherwise
        compete with everyone's short calls); anyone else's call runs at the worker's own priority."""
        if not self.may_raise:
            return
        since = self._long.get(caller)
        if since is not None and time.monotonic() - since < LOWERED_FOR_S:
            if not worker.demoted:
                worker.lower()
        elif worker.demoted:
            worker.promote()

    def _ended(self, caller: str, worker: _Worker) -> None:
        """After a call on `worker`: remember a caller whose call ran long (see `_fit_priority`)."""
        if not worker.long_call:
            return
        now = time.monotonic()
        with self._lock:
            self._long[caller] = now
            for key in [k for k, t in self._long.items() if now - t >= LOWERED_FOR_S]:
                del self._long[key]

    def _idle_now(self) -> list[_Worker]:
        with self._lock:
            return list(self._idle)

    def _note(self, cfg: EngineConfig) -> None:
        """Remember `cfg` among the latest calls' configurations (see `_recent`)."""
        with self._lock:
            lock = cfg.lockdown()
            self._recent.pop(lock, None)
            self._recent[lock] = cfg
            while len(self._recent) > RECENT_LOCKDOWNS:
                del self._recent[next(iter(self._recent))]

    def _spent(self, worker: _Worker, reply: Reply) -> bool:
        """True when `worker` should be replaced after its call: it asked to be, or it grew (allocators
        keep what they took), or its priority could not be raised again (it would serve the next call
        slowly)."""
        return reply.recycle or worker.rss() > self.memory // 2 or not worker.promote()

    def _over_memory(self) -> MemoryLimit:
        return MemoryLimit(
            f"The query used more than {self.memory // MB} MB in its DuckDB worker and was stopped",
            suggestions=[
                "Aggregate or filter before selecting long values or many columns",
                "Raise CAIRN_DATASETS_WORKER_MEMORY_MB if this is expected",
            ],
        )

    def close(self) -> None:
        """Stop the idle workers now and the busy ones when their call ends."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.end()
        self._threads.shutdown(wait=False)


def _died(how: str) -> Unavailable:
    return Unavailable(
        f"The query's DuckDB worker process stopped during the call ({how}); nothing was kept",
        suggestions=["Run the query again", "If it fails again, filter or aggregate more"],
        headers={"Retry-After": "1"},
    )


def _outran() -> Timeout:
    return Timeout(
        "The query exceeded its time limit and was stopped",
        suggestions=[
            "Filter or aggregate more, or query a Parquet copy of the data",
            "Functions over very long values (e.g. levenshtein on long texts) cannot be interrupted",
        ],
    )


def _consume(done: asyncio.Future[Any]) -> None:
    """Retrieve the outcome of a conversation whose caller went away, so it is not reported as lost."""
    if not done.cancelled():
        done.exception()


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def pool_for(cfg: EngineConfig) -> WorkerPool:
    """The process's worker pool for `cfg` (see `pool_of`)."""
    return pool_of(cfg.concurrency, cfg.memory_limit)


def pool_of(concurrency: int, memory_limit: str) -> WorkerPool:
    """The process's worker pool of `concurrency` slots for DuckDB's `memory_limit`, shaped by the
    current settings (a new pool when they changed)."""
    from app.datasets.config import get_dataset_settings

    settings = get_dataset_settings()
    size = max(1, concurrency)
    per_key = settings.datasets_max_concurrency_per_key or math.ceil(size / 2)
    demote = (
        settings.datasets_long_call_ms / 1000.0,
        settings.datasets_long_call_nice,
        settings.datasets_long_call_confine,
    )
    return current_pool(size, per_key, memory_bytes(settings.datasets_worker_memory_mb, memory_limit), demote)


def current_pool(size: int, per_key: int, memory: int, demote: tuple[float, int, bool] = (0.0, 0, False)) -> WorkerPool:
    """The process's worker pool of this shape; the one of another shape, if any, is closed."""
    global _pool
    spec = (size, max(1, min(per_key, size)), memory, demote)
    with _pool_lock:
        pool = _pool
        if pool is not None and pool.spec == spec and not pool.closed:
            return pool
        _pool = WorkerPool(*spec)
        fresh = _pool
    if pool is not None:
        pool.close()
    return fresh


def existing_pool() -> WorkerPool | None:
    """The process's worker pool, if one was started and is open."""
    pool = _pool
    return pool if pool is not None and not pool.closed else None


def shutdown() -> None:
    """Stop the process's workers (idle ones now, busy ones when their call ends)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


atexit.register(shutdown)


# ---------------------------------------------------------------------------------------------- worker side


def serve(fd: int, alive: int) -> None:
    """A worker's loop (in the worker process): answer requests until the server closes the channel."""
    from app.datasets import engine, sandbox

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_server, args=(alive,), name="cairn-server-watch", daemon=True).start()
    engine.use_scratch(f"w{os.getpid()}")
    sandbox.POOL.defer_checks = True
    conn = Connection(fd)

    def send_early(value: Any) -> None:
        conn.send_bytes(
            pickle.dumps(Reply("early", value, False, sandbox.POOL.opened), protocol=pickle.HIGHEST_PROTOCOL)
        )

    sandbox.set_early_sender(send_early)
    with contextlib.suppress(OSError, EOFError):
        _, warm = conn.recv()
        for cfg in warm:
            _answer((engine.warm, cfg, (), {}, cfg.timeout_s))  # a failure here shows in the call that follows
        conn.send(("ready", os.getpid(), sandbox.POOL.opened))
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
            sandbox.POOL.settle()  # after the answer: the next call finds the databases checked


def _exit_with_server(alive: int) -> None:
    """Block on the server's pipe; it only closes (EOF) when the server is gone."""
    with contextlib.suppress(OSError):
        while os.read(alive, 1):
            pass
    os._exit(0)


def _answer(message: tuple[Any, ...]) -> Reply:
    from app.datasets import sandbox

    fn, cfg, args, kwargs, seconds, *rest = message
    token = sandbox.CALL_DEADLINE.set(time.monotonic() + seconds)
    may = sandbox.EARLY_ALLOWED.set(bool(rest and rest[0]))
    try:
        return Reply("ok", fn(cfg, *args, **kwargs), False, sandbox.POOL.opened)
    except CairnError as exc:
        return _failure(exc, recycle=isinstance(exc, MemoryLimit))
    except MemoryError:
        return _failure(MemoryLimit("The query ran out of memory in its DuckDB worker"), recycle=True)
    except Exception as exc:
        return Reply("crash", exc, True, sandbox.POOL.opened)
    finally:
        sandbox.EARLY_ALLOWED.reset(may)
        sandbox.CALL_DEADLINE.reset(token)


def _failure(exc: CairnError, recycle: bool = False) -> Reply:
    from app.datasets import sandbox

    state = (type(exc), exc.message, exc.suggestions, exc.details, exc.headers, exc.query_context)
    return Reply("error", state, recycle, sandbox.POOL.opened)
