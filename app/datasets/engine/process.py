"""One DuckDB worker process and the server's end of its channel (`WorkerProcess`): started as
`python -I -c BOOT` in a session of its own, watched for memory during a call, lowered and raised
again (see `priority`), ended and its scratch files removed (`scrub`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import app
from app.core.embeddings import cpus
from app.core.embeddings.load import LOAD
from app.datasets.engine.databases import EngineConfig
from app.datasets.engine.ipc import Reply, WorkerGone, take_frame
from app.datasets.engine.priority import set_idle, set_nice

# How often the server looks at the memory of a worker serving a call.
MEMORY_CHECK_S = 0.05
# The most `wait_async` reads from a worker's channel at once.
READ_CHUNK = 1 << 20
_PAGE = os.sysconf("SC_PAGE_SIZE")
_HOME = str(Path(app.__file__).resolve().parent.parent)

# The worker's first code. It caps its own memory before importing anything. It leaves
# `app/datasets/__init__.py` out: that module builds the feature (operations, routes, FastAPI), which
# would add to every worker's start-up time and memory for nothing.
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
from app.datasets.engine.worker import serve
serve(fd, alive)
"""


class OverMemory(Exception):
    """The worker's resident memory passed its cap during a call."""


class WorkerProcess:
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


def scrub(pid: int, works: set[Path]) -> None:
    """Remove what worker `pid` may have left in the work directories `works`: its spill folder and its
    unfinished result files."""
    for work in works:
        shutil.rmtree(work / "tmp" / f"w{pid}", ignore_errors=True)
        results = work / "results"
        with contextlib.suppress(OSError):
            for leftover in results.glob(f"*.{pid}.tmp"):
                leftover.unlink(missing_ok=True)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
